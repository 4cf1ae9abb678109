"""STREAMDB.GROUP: what an operator of a log does with a consumer group beyond XGROUP.

Redis's XGROUP stays as Redis has it (a Redis command never gains an option Redis
does not have); StreamDB's own group commands live here:

- SET / GET / RESET: the group's dead-letter policy (MAXDELIVERIES n DEADLETTER key),
  applied by the server whenever a pending entry would be delivered again;
- INFO: the group's lag in entries and in time, pending, NACKed and dead-lettered
  counts and its policy;
- SETID ... TIME | EARLIEST | LATEST: move the group to a time with an exact
  entries-read.

Every change is propagated as plain deterministic effects, like any write.
"""

from __future__ import annotations

from ..dispatch.context import Ctx
from ..dispatch.registry import command, subcommand
from ..protocol.reply import CommandError, Status
from .docs import DOCS, _doc

__all__ = ["GROUP_HELP"]

_SINCE = "8.10.0"


@command("streamdb.group", -2, "", group="stream", since=_SINCE)
def streamdb_group(ctx: Ctx, argv: list[bytes]):
    """STREAMDB.GROUP SET | GET | RESET | INFO | SETID | HELP"""
    raise CommandError(f"ERR unknown subcommand '{argv[1].decode('utf-8', 'replace')}'. "
                       "Try STREAMDB.GROUP HELP.")


GROUP_HELP = [
    b"STREAMDB.GROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"SET <key> <group> MAXDELIVERIES <n> DEADLETTER <dead-letter-key>",
    b"    Dead-letter an entry instead of delivering it again once it was delivered n times.",
    b"GET <key> <group>",
    b"    Show the group's dead-letter policy.",
    b"RESET <key> <group>",
    b"    Remove the group's dead-letter policy.",
    b"INFO <key> <group>",
    b"    Show the group's lag in entries and in time, pending, NACKed and dead-lettered counts.",
    b"SETID <key> <group> TIME <unix-ms>|EARLIEST|LATEST",
    b"    Move the group to a time, with an exact entries-read.",
    b"HELP",
    b"    Prints this help.",
]


@subcommand("streamdb.group", "help", 2, "readonly", since=_SINCE)
def group_help(ctx: Ctx, argv: list[bytes]):
    """STREAMDB.GROUP HELP"""
    return [Status(line.decode()) for line in GROUP_HELP]


# COMMAND DOCS: StreamDB's own texts (Redis has no such command), kept with the command.
DOCS.update({
    'streamdb.group': _doc("A container for StreamDB's consumer group commands", 'stream',
                           complexity='Depends on subcommand.'),
    'streamdb.group|help': _doc('Show helpful text about the different subcommands',
                                'stream', complexity='O(1)'),
})
