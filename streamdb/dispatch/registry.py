"""The command table: one source of truth for dispatch, arity and flags.

Each command module declares its commands with ``@command(...)``.  The table
drives arity errors, the read-only check on replicas, MULTI queueing rules,
key extraction (WATCH invalidation and blocked clients are fed from the keys of
propagated effects) and the COMMAND replies redis-cli and redis-py ask for.

Arity follows Redis: positive = exact argc, negative = at least -arity.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Callable

import cython

from .categories import category_override, extra_categories

__all__ = ["CommandSpec", "CommandTable", "TABLE", "COMMANDS", "command", "subcommand", "lookup",
           "resolve"]


# Compiled, a cclass whose attributes are the C fields declared in registry.pxd
# (the dispatch reads several per request); interpreted, a plain class.
@cython.cclass
class CommandSpec:
    def __init__(self, name: str, arity: int, flags: frozenset, first_key: int = 0,
                 last_key: int = 0, key_step: int = 0, handler: Callable | None = None,
                 group: str = "generic", grammar: str = "", since: str = "1.0.0",
                 acl_categories: tuple = (), subcommands: dict | None = None,
                 key_finder: Callable | None = None) -> None:
        self.name = name               # lower case; "xgroup|create" for subcommands
        self.arity = arity
        self.flags = flags
        self.first_key = first_key
        self.last_key = last_key
        self.key_step = key_step
        self.handler = handler
        self.group = group
        self.grammar = grammar         # the docstring's first line: "XLEN key"
        self.since = since
        self.acl_categories = acl_categories
        self.subcommands = {} if subcommands is None else subcommands
        # For commands whose keys cannot be described by first/last/step.
        self.key_finder = key_finder
        # Asked per request (replica read-only, MISCONF); flags never change.
        self.is_write = "write" in flags

    def __repr__(self) -> str:
        return f"CommandSpec({self.name!r}, arity={self.arity})"

    def key_positions(self, argv: list[bytes]) -> list[int]:
        if self.key_finder is not None:
            return self.key_finder(argv)
        if not self.first_key:
            return []
        last = self.last_key if self.last_key >= 0 else len(argv) + self.last_key
        return list(range(self.first_key, min(last, len(argv) - 1) + 1, self.key_step or 1))

    def keys(self, argv: list[bytes]) -> list[bytes]:
        return [argv[i] for i in self.key_positions(argv)]


@cython.final
@cython.cclass
class CommandTable:
    """The commands by name, and the memos ``lookup`` keeps of them.

    The memos are derived from the table, so they live on it and every change goes
    through its methods, which forget them: COMMANDS, what everyone else reads, is a
    read-only view of it, so neither a registration nor a test that installs another
    table can leave a memo answering with a spec the table no longer holds."""

    def __init__(self) -> None:
        self._commands = {}                         # name -> CommandSpec
        self.view = MappingProxyType(self._commands)
        self._forget()

    def _forget(self) -> None:
        # argv[0] exactly as clients send it ("XADD", "xadd") -> spec: saves a decode
        # and a lower() per request.  Bounded (odd casings are not kept past the bound).
        self._by_raw = {}
        # The last name found and its spec, in front of _by_raw: a client's pipeline is
        # mostly runs of one command, and comparing the parser's fresh bytes with the
        # last name (a length test and a memcmp) costs less than hashing them for the
        # dict (siphash, the probe, the compare): ~350 instructions of an XADD request
        # (callgrind, XADD -P16).
        self._last_raw = b""
        self._last_spec = None

    def add(self, spec: CommandSpec) -> None:
        self._commands[spec.name] = spec
        self._forget()

    def replace(self, specs: dict) -> None:
        """Make ``specs`` (name -> spec) the whole table (tests install another one)."""
        self._commands.clear()
        self._commands.update(specs)
        self._forget()

    @cython.cfunc
    def find(self, argv) -> CommandSpec:
        """``lookup`` (a C call when compiled)."""
        try:
            raw = argv[0]
            exact: cython.bint = type(raw) is bytes
            if exact and self._last_spec is not None and raw == self._last_raw:
                return self._last_spec
            spec = self._by_raw.get(raw)
            if spec is not None:
                if exact:
                    self._last_raw, self._last_spec = raw, spec
                return spec
            spec = self._commands.get(raw.decode("latin-1").lower())
        except (AttributeError, IndexError, TypeError):
            return None
        if spec is not None and len(self._by_raw) < _BY_RAW_MAX and type(raw) is bytes:
            self._by_raw[raw] = spec
        return spec


_BY_RAW_MAX = 2048
TABLE = CommandTable()
COMMANDS = TABLE.view       # name -> CommandSpec, read-only (TABLE.add, TABLE.replace)


def _categories(flags: frozenset[str], group: str, name: str) -> tuple[str, ...]:
    """ACL categories: what the flags imply plus dispatch/categories.py's per-command list."""
    override = category_override(name)
    if override is not None:
        return override
    cats = []
    if "write" in flags:
        cats.append("@write")
    if "readonly" in flags:
        cats.append("@read")
    if group == "stream":
        cats.append("@stream")
    if "admin" in flags:
        cats += ["@admin", "@dangerous"]
    if "fast" in flags:
        cats.append("@fast")
    else:
        cats.append("@slow")
    if "blocking" in flags:
        cats.append("@blocking")
    cats += [c for c in extra_categories(name) if c not in cats]
    return tuple(cats)


def _grammar(fn) -> str:
    return fn.__doc__.strip().splitlines()[0] if fn.__doc__ else ""


def command(name: str, arity: int, flags: str = "", keys: tuple[int, int, int] = (0, 0, 0),
            group: str = "generic", since: str = "1.0.0", key_finder=None,
            categories: tuple[str, ...] = ()):
    """Register a handler ``f(ctx, argv) -> reply`` (argv[0] is the command name)."""
    def register(fn):
        fl = frozenset(flags.split())
        spec = CommandSpec(name=name, arity=arity, flags=fl, first_key=keys[0],
                           last_key=keys[1], key_step=keys[2], handler=fn, group=group,
                           grammar=_grammar(fn), since=since, key_finder=key_finder,
                           acl_categories=categories or _categories(fl, group, name))
        TABLE.add(spec)
        return fn
    return register


def subcommand(parent: str, name: str, arity: int, flags: str = "",
               keys: tuple[int, int, int] = (0, 0, 0), since: str = "1.0.0"):
    """Register ``PARENT NAME`` (e.g. XGROUP CREATE).  The parent must exist."""
    def register(fn):
        parent_spec = COMMANDS[parent]
        fl = frozenset(flags.split())
        spec = CommandSpec(name=f"{parent}|{name}", arity=arity, flags=fl,
                           first_key=keys[0], last_key=keys[1], key_step=keys[2],
                           handler=fn, group=parent_spec.group, since=since, grammar=_grammar(fn),
                           acl_categories=_categories(fl, parent_spec.group, f"{parent}|{name}"))
        parent_spec.subcommands[name] = spec
        return fn
    return register


def lookup(argv) -> CommandSpec | None:
    """The spec of the command named by argv[0] (not resolving subcommands)."""
    table: CommandTable = TABLE
    return table.find(argv)


def resolve(argv) -> CommandSpec | None:
    """The spec that runs ``argv``: its subcommand's when argv[1] names one of the
    command's subcommands (XGROUP CREATE: "xgroup|create"), else the command's own
    (an unknown subcommand included: the caller decides whether that is an error);
    None when argv[0] names no command.  The one place a subcommand is resolved."""
    spec = lookup(argv)
    if spec is not None and spec.subcommands and len(argv) > 1:
        return spec.subcommands.get(argv[1].decode("latin-1").lower(), spec)
    return spec
