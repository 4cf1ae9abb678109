"""Users, ACL rules, permission checks, the ACL file and the ACL LOG.

The model is Redis 7's (one root selector per user, no extra selectors):

* a user is ``on``/``off``, has SHA-256 password hashes or ``nopass``,
  key patterns with read/write permissions (``~p``, ``%R~p``, ``%W~p``),
  channel patterns (``&p``, ``allchannels``; a new user starts with
  ``acl-pubsub-default``, Redis 7's ``resetchannels`` unless configured) checked
  on the channels Pub/Sub commands name, and command rules;
* command rules are kept as Redis keeps them, an ordered list such as
  ``+@read -xrange +xgroup|create`` after a base of ``+@all`` or ``-@all``: a
  rule replaces an earlier rule for the same command or category and is only
  kept when it changes what the user may run, so ACL LIST shows what Redis
  would.  The set of allowed commands is always the replay of that list.

The default user's password is ``requirepass`` (``set_default_password``).
No I/O here except the ACL file (load, and save by write + fsync + rename).
"""

from __future__ import annotations

import copy
import os
from collections import deque

from ..dispatch import registry
from ..dispatch.categories import ALL_CATEGORIES, CHANNEL_ARGS, KEY_ACCESS
from ..glob import glob_match, glob_matcher
from ..files import fsync_dir, replace_file

__all__ = ["Acl", "AclError", "User", "AclLog", "hash_password"]

# Commands every user may run (Redis's no-auth flag): how a client logs in or leaves.
_ALWAYS_ALLOWED = frozenset(("auth", "hello", "quit", "reset"))
_HEX = frozenset("0123456789abcdef")
# Entries of the ACL LOG that are the same event within this many ms are one entry.
_LOG_GROUPING_MS = 60_000


class AclError(Exception):
    """A rule that cannot be applied; the text is Redis's reason."""


def hash_password(password: bytes) -> str:
    import hashlib       # here, not at start-up (hashlib, hmac, secrets: ~3 ms of import)
    return hashlib.sha256(password).hexdigest()


def _all_specs() -> dict:
    """Every command and subcommand by full name ("xgroup|create")."""
    out = {}
    for name, spec in registry.COMMANDS.items():
        out[name] = spec
        for sub in spec.subcommands.values():
            out[sub.name] = sub
    return out


def _rule_targets(target: str, specs: dict) -> set[str] | None:
    """The command names a rule target ("@stream", "xgroup", "xgroup|create") covers."""
    if target.startswith("@"):
        cat = target[1:]
        if cat == "all":
            return set(specs)
        if cat not in ALL_CATEGORIES:
            return None
        return {n for n, s in specs.items() if target in s.acl_categories}
    if target not in specs:
        return None
    spec = specs[target]
    return {target, *(s.name for s in spec.subcommands.values())}


class User:
    def __init__(self, name: str) -> None:
        self.name = name
        self.enabled = False
        self.nopass = False
        self.sanitize = ""            # "", "sanitize-payload" or "skip-sanitize-payload"
        self.passwords: list[str] = []       # SHA-256 hex, in the order added
        self.all_commands = False     # base of the rules: +@all (True) or -@all
        self.command_rules: list[str] = []   # e.g. ["+@read", "-xrange"]
        self.allowed: frozenset[str] = frozenset()
        self.allkeys = False
        self.keys: list[tuple[bytes, str]] = []   # (pattern, "R" | "W" | "RW")
        self.allchannels = False
        self.channels: list[bytes] = []

    @property
    def unrestricted(self) -> bool:
        """May run every command on every key and channel: the dispatch skips the check."""
        return self.all_commands and not self.command_rules and self.allkeys and self.allchannels

    # -- applying rules ---------------------------------------------------------------

    def apply(self, rule: str) -> None:
        """One ACL SETUSER modifier (raises AclError with Redis's reason)."""
        low = rule.lower()
        if low == "on":
            self.enabled = True
        elif low == "off":
            self.enabled = False
        elif low == "nopass":
            self.nopass = True
            self.passwords = []
        elif low == "resetpass":
            self.nopass = False
            self.passwords = []
        elif low in ("sanitize-payload", "skip-sanitize-payload"):
            self.sanitize = low
        elif low in ("allkeys", "~*"):
            self.allkeys = True
            self.keys = [(b"*", "RW")]
        elif low == "resetkeys":
            self.allkeys = False
            self.keys = []
        elif low in ("allchannels", "&*"):
            self.allchannels = True
            self.channels = [b"*"]
        elif low == "resetchannels":
            self.allchannels = False
            self.channels = []
        elif low in ("allcommands", "+@all"):
            self._reset_commands(True)
        elif low in ("nocommands", "-@all"):
            self._reset_commands(False)
        elif low == "reset":
            for r in ("resetpass", "resetkeys", "resetchannels", "off", "-@all", "sanitize-payload"):
                self.apply(r)
        elif low == "clearselectors":
            pass                      # no selectors besides the root one
        elif rule[:1] == ">":
            h = hash_password(rule[1:].encode("utf-8", "surrogateescape"))
            self._add_password(h)
        elif rule[:1] == "#":
            self._add_password(_valid_hash(rule[1:]))
        elif rule[:1] == "<":
            self._remove_password(hash_password(rule[1:].encode("utf-8", "surrogateescape")))
        elif rule[:1] == "!":
            self._remove_password(_valid_hash(rule[1:]))
        elif rule[:1] == "~":
            self._add_key_pattern(rule[1:], "RW")
        elif rule[:1] == "%":
            perm, sep, pattern = rule[1:].partition("~")
            perm = perm.upper()
            if not sep or not perm or set(perm) - {"R", "W"} or len(set(perm)) != len(perm):
                raise AclError("Syntax error")
            self._add_key_pattern(pattern, "RW" if len(perm) == 2 else perm)
        elif rule[:1] == "&":
            if self.allchannels:
                raise AclError("Adding a pattern after the * pattern (or the 'allchannels' flag) "
                               "is not valid and does not have any effect. Try 'resetchannels' "
                               "to start with an empty list of channels")
            pattern = rule[1:].encode("utf-8", "surrogateescape")
            if pattern not in self.channels:
                self.channels.append(pattern)
        elif rule[:1] in ("+", "-"):
            self._command_rule(rule[0] == "+", low[1:])
        else:
            raise AclError("Syntax error")

    def _add_password(self, h: str) -> None:
        self.nopass = False
        if h not in self.passwords:
            self.passwords.append(h)

    def _remove_password(self, h: str) -> None:
        if h not in self.passwords:
            raise AclError("The password you are trying to remove from the user does not exist")
        self.passwords.remove(h)

    def _add_key_pattern(self, pattern: str, perm: str) -> None:
        if self.allkeys:
            raise AclError("Adding a pattern after the * pattern (or the 'allkeys' flag) is not "
                           "valid and does not have any effect. Try 'resetkeys' to start with an "
                           "empty list of patterns")
        raw = pattern.encode("utf-8", "surrogateescape")
        if raw == b"*" and perm == "RW":
            self.apply("allkeys")
            return
        for i, (p, old) in enumerate(self.keys):
            if p == raw:             # the same pattern again widens its permissions
                self.keys[i] = (p, "RW" if set(old + perm) == {"R", "W"} else old)
                return
        self.keys.append((raw, perm))

    def _reset_commands(self, allow_all: bool) -> None:
        self.all_commands = allow_all
        self.command_rules = []
        self.allowed = frozenset(_all_specs()) if allow_all else frozenset()

    def _command_rule(self, allow: bool, target: str) -> None:
        specs = _all_specs()
        covered = _rule_targets(target, specs)
        if covered is None:
            raise AclError("Unknown command or category name in ACL")
        # Drop earlier rules for the same category or command (and a command's
        # subcommands), then keep the new rule only if it changes anything.
        kept = [r for r in self.command_rules
                if r[1:] != target and not (not target.startswith("@")
                                            and r[1:].startswith(target + "|"))]
        before = _replay(self.all_commands, kept, specs)
        after = before | covered if allow else before - covered
        if after != before:
            kept.append(("+" if allow else "-") + target)
        self.command_rules = kept
        self.allowed = frozenset(_replay(self.all_commands, kept, specs))

    # -- describing -------------------------------------------------------------------

    def flags(self) -> list[str]:
        out = ["on" if self.enabled else "off"]
        if self.nopass:
            out.append("nopass")
        if self.sanitize:
            out.append(self.sanitize)
        return out

    def commands_text(self) -> str:
        return " ".join(["+@all" if self.all_commands else "-@all", *self.command_rules])

    def keys_text(self) -> str:
        return " ".join(("~" if perm == "RW" else f"%{perm}~") + p.decode("utf-8", "surrogateescape")
                        for p, perm in self.keys)

    def channels_text(self) -> str:
        return " ".join("&" + p.decode("utf-8", "surrogateescape") for p in self.channels)

    def describe(self) -> str:
        """The rules that recreate this user, as ACL LIST and the ACL file show them."""
        parts = [*self.flags(), *("#" + h for h in self.passwords)]
        if self.keys:
            parts.append(self.keys_text())
        if not self.allchannels:
            parts.append("resetchannels")
        if self.channels:
            parts.append(self.channels_text())
        parts.append(self.commands_text())
        return f"user {self.name} " + " ".join(parts)

    # -- checks -------------------------------------------------------------------------

    def check_password(self, password: bytes) -> bool:
        if not self.enabled:
            return False
        if self.nopass:
            return True
        import hmac
        given = hash_password(password)
        ok = False
        for h in self.passwords:      # every hash compared: no early exit to time
            ok |= hmac.compare_digest(h, given)
        return ok

    def may_run(self, spec) -> bool:
        return spec.name in self.allowed or spec.name.split("|", 1)[0] in _ALWAYS_ALLOWED

    def denied_key(self, spec, argv: list[bytes]) -> bytes | None:
        """The first key argument this user may not access, or None."""
        if self.allkeys:
            return None
        positions = spec.key_positions(argv)
        if not positions:
            return None
        access = KEY_ACCESS.get(spec.name)
        if access is None:
            access = ("W",) if spec.is_write else ("R",) if "readonly" in spec.flags else ("",)
        for n, pos in enumerate(positions):
            need = access[min(n, len(access) - 1)]
            key = argv[pos]
            if not any((not need or perm == "RW" or perm == need) and glob_matcher(pattern)(key)
                       for pattern, perm in self.keys):
                return key
        return None

    def denied_channel(self, spec, argv: list[bytes]) -> bytes | None:
        """The first channel (or pattern) argument this user may not use, or None.

        A channel is allowed when one of the user's patterns matches it; a pattern
        (PSUBSCRIBE's) only when the user has that very pattern, as in Redis."""
        if self.allchannels:
            return None
        where = CHANNEL_ARGS.get(spec.name)
        if where is None:
            return None
        first, last, is_pattern = where
        for name in argv[first:len(argv) if last < 0 else last + 1]:
            if not self.may_use_channel(name, is_pattern):
                return name
        return None

    def may_use_channel(self, name: bytes, is_pattern: bool) -> bool:
        """Whether this user may subscribe to (or publish to) channel ``name``, or
        subscribe to pattern ``name`` if ``is_pattern``."""
        return self.allchannels or any(name == allowed if is_pattern else glob_match(allowed, name)
                                       for allowed in self.channels)


def _replay(all_commands: bool, rules: list[str], specs: dict) -> set[str]:
    allowed = set(specs) if all_commands else set()
    for r in rules:
        covered = _rule_targets(r[1:], specs) or set()
        if r[0] == "+":
            allowed |= covered
        else:
            allowed -= covered
    return allowed


def _valid_hash(text: str) -> str:
    if len(text) != 64 or set(text) - _HEX:
        raise AclError("The password hash must be exactly 64 characters and contain only "
                       "lowercase hexadecimal characters")
    return text


def default_user() -> User:
    u = User("default")
    for r in ("on", "nopass", "~*", "&*", "+@all"):
        u.apply(r)
    return u


# ---------------------------------------------------------------------------------------
# The ACL LOG
# ---------------------------------------------------------------------------------------


class AclLogEntry:
    __slots__ = ("entry_id", "count", "reason", "context", "object", "username",
                 "created_ms", "updated_ms", "client_info")


class AclLog:
    """Denied commands, keys and logins, newest first, grouped as Redis groups them."""

    def __init__(self) -> None:
        self.entries: deque[AclLogEntry] = deque()
        self.next_id = 0

    def add(self, reason: str, context: str, obj: str, username: str, client_info: str,
            now_ms: int, max_len: int) -> None:
        for e in self.entries:
            if (e.reason, e.context, e.object, e.username) == (reason, context, obj, username) \
                    and now_ms - e.updated_ms < _LOG_GROUPING_MS:
                e.count += 1
                e.updated_ms = now_ms
                e.client_info = client_info
                self.entries.remove(e)
                self.entries.appendleft(e)
                return
        e = AclLogEntry()
        e.entry_id, e.count, e.reason, e.context, e.object = self.next_id, 1, reason, context, obj
        e.username, e.created_ms, e.updated_ms, e.client_info = username, now_ms, now_ms, client_info
        self.next_id += 1
        self.entries.appendleft(e)
        while len(self.entries) > max_len:
            self.entries.pop()

    def reset(self) -> None:
        self.entries.clear()


# ---------------------------------------------------------------------------------------
# The user table
# ---------------------------------------------------------------------------------------


class Acl:
    def __init__(self, requirepass: str = "", pubsub_default: str = "resetchannels") -> None:
        self.users: dict[str, User] = {"default": default_user()}
        self.log = AclLog()
        # acl-pubsub-default: the channel rule a new user (and "reset") starts from.
        self.pubsub_default = pubsub_default
        if requirepass:
            self.set_default_password(requirepass)

    @property
    def default(self) -> User:
        return self.users["default"]

    def set_default_password(self, password: str) -> None:
        """requirepass: the default user's only password (empty = nopass), as Redis does."""
        self.default.apply("resetpass")
        self.default.apply(">" + password if password else "nopass")

    def set_user(self, name: str, rules: list[str]) -> None:
        """ACL SETUSER: all rules apply or none (raises AclError naming the bad one)."""
        current = self.users.get(name)
        user = copy.deepcopy(current) if current is not None else User(name)
        if current is None:
            user.apply(self.pubsub_default)
        for rule in rules:
            try:
                user.apply(rule)
            except AclError as e:
                raise AclError(f"Error in ACL SETUSER modifier '{rule}': {e}") from None
            if rule.lower() == "reset":
                user.apply(self.pubsub_default)
        self.users[name] = user

    def authenticate(self, name: bytes, password: bytes) -> User | None:
        user = self.users.get(name.decode("utf-8", "surrogateescape"))
        if user is None:
            hash_password(password)          # the same work for an unknown user
            return None
        return user if user.check_password(password) else None

    def listing(self) -> list[str]:
        return [self.users[n].describe() for n in sorted(self.users)]

    # -- the ACL file ---------------------------------------------------------------------

    def parse_file(self, path: str) -> dict[str, User]:
        """The users of an ACL file; raises AclError listing every bad line (nothing applied)."""
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            text = f.read()
        users: dict[str, User] = {}
        errors = []
        for lineno, line in enumerate(text.splitlines(), 1):
            words = line.split()
            if not words:
                continue
            if words[0] != "user" or len(words) < 2:
                errors.append(f"{path}:{lineno}: should start with user keyword")
                continue
            name = words[1]
            if name in users:
                errors.append(f"{path}:{lineno}: Duplicate user '{name}' found")
                continue
            user = User(name)
            user.apply(self.pubsub_default)
            try:
                for rule in words[2:]:
                    user.apply(rule)
            except AclError as e:
                errors.append(f"{path}:{lineno}: {e}")
                continue
            users[name] = user
        if errors:
            raise AclError(" ".join(errors))
        users.setdefault("default", default_user())
        return users

    def load_file(self, path: str) -> None:
        self.users = self.parse_file(path)

    def save_file(self, path: str) -> None:
        """Write ACL LIST to ``path`` atomically: a temporary file, fsync, rename, fsync dir.
        The file holds password hashes: only its owner may read it (0600)."""
        data = "".join(line + "\n" for line in self.listing()).encode("utf-8", "surrogateescape")
        replace_file(path, data, mode=0o600)
        fsync_dir(os.path.dirname(os.path.abspath(path)))


def generate_password(bits: int = 256) -> str:
    """ACL GENPASS: ``bits`` random bits as hex, rounded up to whole hex digits."""
    import secrets
    return secrets.token_hex((bits + 7) // 8)[: (bits + 3) // 4]
