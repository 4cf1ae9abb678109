"""ACL: SETUSER GETUSER DELUSER LIST USERS WHOAMI CAT LOG GENPASS DRYRUN LOAD SAVE HELP.

The user model is security/acl.py; binding users to clients and the checks are
security/enforce.py.  Replies and error texts are Redis's (7.2 forms for
DRYRUN and the ACL LOG's entry-id/timestamp fields, as the current docs have them).
"""

from __future__ import annotations

from .. import log
from ..protocol.reply import OK, CommandError, Double, Map
from ..security.acl import AclError, generate_password
from ..dispatch.categories import ALL_CATEGORIES
from ..security.enforce import dryrun_denial, refresh_clients
from .args import parse_int
from ..dispatch.context import Ctx
from ..dispatch.registry import COMMANDS, command, resolve, subcommand

_NO_ACLFILE = ("ERR This Redis instance is not configured to use an ACL file. You may want to "
               "specify users via the ACL SETUSER command and then issue a CONFIG REWRITE "
               "(assuming you have a Redis configuration file set) in order to store users in "
               "the Redis configuration.")

_ADMIN = "admin noscript loading stale"
_PLAIN = "noscript loading stale"


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


@command("acl", -2, "", since="6.0.0")
def acl(ctx: Ctx, argv):
    """ACL <subcommand>"""


@subcommand("acl", "setuser", -3, _ADMIN, since="6.0.0")
def acl_setuser(ctx: Ctx, argv):
    """ACL SETUSER username [rule [rule ...]]"""
    try:
        ctx.core.acl.set_user(_text(argv[2]), [_text(a) for a in argv[3:]])
    except AclError as e:
        raise CommandError(f"ERR {e}") from None
    refresh_clients(ctx.core)
    return OK


@subcommand("acl", "getuser", 3, _ADMIN, since="6.0.0")
def acl_getuser(ctx: Ctx, argv):
    """ACL GETUSER username"""
    user = ctx.core.acl.users.get(_text(argv[2]))
    if user is None:
        return None
    return Map([
        (b"flags", [f.encode() for f in user.flags()]),
        (b"passwords", [h.encode() for h in user.passwords]),
        (b"commands", user.commands_text().encode()),
        (b"keys", user.keys_text().encode("utf-8", "surrogateescape")),
        (b"channels", user.channels_text().encode("utf-8", "surrogateescape")),
        (b"selectors", []),
    ])


@subcommand("acl", "deluser", -3, _ADMIN, since="6.0.0")
def acl_deluser(ctx: Ctx, argv):
    """ACL DELUSER username [username ...]"""
    names = [_text(a) for a in argv[2:]]
    if "default" in names:
        raise CommandError("ERR The 'default' user cannot be removed")
    users = ctx.core.acl.users
    deleted = 0
    for name in names:
        if users.pop(name, None) is not None:
            deleted += 1
    if deleted:
        refresh_clients(ctx.core)
    return deleted


@subcommand("acl", "list", 2, _ADMIN, since="6.0.0")
def acl_list(ctx: Ctx, argv):
    """ACL LIST"""
    return [line.encode("utf-8", "surrogateescape") for line in ctx.core.acl.listing()]


@subcommand("acl", "users", 2, _ADMIN, since="6.0.0")
def acl_users(ctx: Ctx, argv):
    """ACL USERS"""
    return [n.encode("utf-8", "surrogateescape") for n in sorted(ctx.core.acl.users)]


@subcommand("acl", "whoami", 2, _PLAIN, since="6.0.0")
def acl_whoami(ctx: Ctx, argv):
    """ACL WHOAMI"""
    return ctx.client.user


@subcommand("acl", "cat", -2, _PLAIN, since="6.0.0")
def acl_cat(ctx: Ctx, argv):
    """ACL CAT [category]"""
    if len(argv) > 3:
        raise CommandError(f"ERR unknown subcommand or wrong number of arguments for "
                           f"'{_text(argv[1])}'. Try ACL HELP.")
    if len(argv) == 2:
        return [c.encode() for c in ALL_CATEGORIES]
    cat = _text(argv[2]).lower()
    if cat not in ALL_CATEGORIES:
        raise CommandError(f"ERR Unknown category '{_text(argv[2])}'")
    tag = "@" + cat
    out = []
    for name, spec in COMMANDS.items():
        for s in (spec, *spec.subcommands.values()):
            if tag in s.acl_categories:
                out.append(s.name.encode())
    return out


@subcommand("acl", "log", -2, _ADMIN, since="6.0.0")
def acl_log(ctx: Ctx, argv):
    """ACL LOG [count | RESET]"""
    if len(argv) > 3:
        raise CommandError(f"ERR unknown subcommand or wrong number of arguments for "
                           f"'{_text(argv[1])}'. Try ACL HELP.")
    entries = ctx.core.acl.log.entries
    count = len(entries)
    if len(argv) == 3:
        if argv[2].lower() == b"reset":
            ctx.core.acl.log.reset()
            return OK
        try:
            count = max(parse_int(argv[2]), 0)
        except CommandError:
            raise CommandError("ERR value is not an integer or out of range") from None
    now = ctx.now_ms
    out = []
    for e in list(entries)[:count]:
        out.append(Map([
            (b"count", e.count),
            (b"reason", e.reason.encode()),
            (b"context", e.context.encode()),
            (b"object", e.object.encode("utf-8", "surrogateescape")),
            (b"username", e.username.encode("utf-8", "surrogateescape")),
            (b"age-seconds", Double(max(now - e.created_ms, 0) / 1000)),
            (b"client-info", e.client_info.encode("utf-8", "surrogateescape")),
            (b"entry-id", e.entry_id),
            (b"timestamp-created", e.created_ms),
            (b"timestamp-last-updated", e.updated_ms),
        ]))
    return out


@subcommand("acl", "genpass", -2, _PLAIN, since="6.0.0")
def acl_genpass(ctx: Ctx, argv):
    """ACL GENPASS [bits]"""
    bits = 256
    if len(argv) > 2:
        try:
            bits = parse_int(argv[2])
        except CommandError:
            bits = 0
        if len(argv) > 3 or not 0 < bits <= 4096:
            raise CommandError("ERR ACL GENPASS argument must be the number of bits for the "
                               "output password, a positive number up to 4096")
    return generate_password(bits).encode()


@subcommand("acl", "dryrun", -4, _ADMIN, since="7.0.0")
def acl_dryrun(ctx: Ctx, argv):
    """ACL DRYRUN username command [arg [arg ...]]"""
    user = ctx.core.acl.users.get(_text(argv[2]))
    if user is None:
        raise CommandError(f"ERR User '{_text(argv[2])}' not found")
    cmd_argv = argv[3:]
    spec = resolve(cmd_argv)
    if spec is None:
        raise CommandError(f"ERR Command '{_text(cmd_argv[0])}' not found")
    if (spec.arity > 0 and len(cmd_argv) != spec.arity) or len(cmd_argv) < -spec.arity:
        raise CommandError(f"ERR wrong number of arguments for '{spec.name}' command")
    denial = dryrun_denial(user, spec, cmd_argv)
    return OK if denial is None else denial.encode("utf-8", "surrogateescape")


@subcommand("acl", "load", 2, _ADMIN, since="6.0.0")
def acl_load(ctx: Ctx, argv):
    """ACL LOAD"""
    path = ctx.config["aclfile"]
    if not path:
        raise CommandError(_NO_ACLFILE)
    try:
        ctx.core.acl.load_file(path)
    except (AclError, OSError) as e:
        text = str(e) if isinstance(e, AclError) else f"Error loading ACLs, opening file '{path}': {e.strerror}"
        raise CommandError(f"ERR {text}. WARNING: ACL errors detected, no change to the "
                           "previously active ACL rules was performed") from None
    refresh_clients(ctx.core)
    log.log(log.NOTICE, f"ACL users loaded from {path}")
    return OK


@subcommand("acl", "save", 2, _ADMIN, since="6.0.0")
def acl_save(ctx: Ctx, argv):
    """ACL SAVE"""
    path = ctx.config["aclfile"]
    if not path:
        raise CommandError(_NO_ACLFILE)
    try:
        ctx.core.acl.save_file(path)
    except OSError as e:
        log.log(log.WARNING, f"Saving the ACL file {path}: {e}")
        raise CommandError("ERR There was an error trying to save the ACLs. Please check the "
                           "server logs for more information") from None
    return OK


_HELP = [
    "ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CAT [<category>]",
    "    List all commands that belong to <category>, or all command categories",
    "    when no category is specified.",
    "DELUSER <username> [<username> ...]",
    "    Delete a list of users.",
    "DRYRUN <username> <command> [<arg> ...]",
    "    Returns whether the user can execute the given command without executing the command.",
    "GETUSER <username>",
    "    Get the user's details.",
    "GENPASS [<bits>]",
    "    Generate a secure 256-bit user password. The optional `bits` argument can",
    "    be used to specify a different size.",
    "LIST",
    "    Show users details in config file format.",
    "LOAD",
    "    Reload users from the ACL file.",
    "LOG [<count> | RESET]",
    "    Show the ACL log entries.",
    "SAVE",
    "    Save the current config to the ACL file.",
    "SETUSER <username> <attribute> [<attribute> ...]",
    "    Create or modify a user with the specified attributes.",
    "USERS",
    "    List all the registered usernames.",
    "WHOAMI",
    "    Return the current connection username.",
    "HELP",
    "    Prints this help.",
]


@subcommand("acl", "help", 2, "loading stale", since="6.0.0")
def acl_help(ctx: Ctx, argv):
    """ACL HELP"""
    from ..protocol.reply import Status
    return [Status(line) for line in _HELP]
