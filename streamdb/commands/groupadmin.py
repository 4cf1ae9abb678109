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

from ..dispatch.context import Ctx, syntax_error
from ..dispatch.registry import command, subcommand
from ..engine import format_id
from ..engine.groups import ENTRIES_READ_INVALID, ConsumerGroup
from ..engine.lag import (group_lag, oldest_pending_ms, position_at_time, position_earliest,
                          position_latest, time_lag_ms)
from ..engine.stream import Stream
from ..protocol.reply import OK, CommandError, Map, Status
from .args import eq, parse_int
from .docs import DOCS, _doc
from .groups import setid_effect

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


# ---------------------------------------------------------------------------
# INFO and SETID ... TIME: the group's lag in time, and moving it to a time
# ---------------------------------------------------------------------------


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _stream_and_group(ctx: Ctx, key: bytes, name: bytes, read: bool) -> tuple[Stream, ConsumerGroup]:
    """The stream at ``key`` and its group ``name``, or the error that says which is missing."""
    s = ctx.lookup_stream(key, read=read)
    if s is None:
        raise CommandError(f"ERR no such key '{_text(key)}'")
    g = (s.groups or {}).get(name)
    if g is None:
        raise CommandError(f"NOGROUP No such consumer group '{_text(name)}' "
                           f"for key name '{_text(key)}'")
    return s, g


@subcommand("streamdb.group", "info", 4, "readonly", keys=(2, 2, 1), since=_SINCE)
def group_info(ctx: Ctx, argv: list[bytes]):
    """STREAMDB.GROUP INFO key group

    The group's progress: XINFO GROUPS's counters (lag in entries, nil when Redis's
    rules cannot count it), NACKed entries, and its lag in time: ``lag-ms``, the age
    of the oldest entry it has not been given, and ``oldest-pending-ms``, the age of
    its oldest pending entry (0 when none; an entry's time is its id's).
    """
    s, g = _stream_and_group(ctx, argv[2], argv[3], read=True)
    now = ctx.now_ms
    fields = [
        (b"name", g.name),
        (b"consumers", len(g.consumers)),
        (b"pending", len(g.pel)),
        (b"nacked", g.nacked_count()),
        (b"last-delivered-id", format_id(g.last_id)),
        (b"entries-read", None if g.entries_read == ENTRIES_READ_INVALID else g.entries_read),
        (b"lag", group_lag(s, g)),
        (b"lag-ms", time_lag_ms(s, g, now)),
        (b"oldest-pending-ms", oldest_pending_ms(g, now)),
        # DEAD-LETTER FIELDS GO HERE, in this order: dead-lettered, max-deliveries,
        # dead-letter-key (added with the dead-letter policy, issue 30 item 1).
    ]
    return Map(fields)


def _parse_unix_ms(raw: bytes) -> int:
    """A TIME argument: milliseconds since the epoch, an integer >= 0."""
    error = f"ERR TIME must be a unix time in milliseconds (an integer >= 0), not '{_text(raw)}'"
    time_ms = parse_int(raw, error)
    if time_ms < 0:
        raise CommandError(error)
    return time_ms


@subcommand("streamdb.group", "setid", -5, "write", keys=(2, 2, 1), since=_SINCE)
def group_setid(ctx: Ctx, argv: list[bytes]):
    """STREAMDB.GROUP SETID key group TIME unix-ms | EARLIEST | LATEST

    Moves the group's last-delivered-id to the last entry before the time (a time after
    the stream's last id is LATEST; EARLIEST: before the first entry; LATEST: the
    stream's last id, as XGROUP SETID $) and sets
    its entries-read so that its lag is exactly the number of entries after that id.
    Pending entries stay, as with XGROUP SETID, which is what is propagated.
    """
    where = argv[4]
    if eq(where, b"time") and len(argv) == 6:
        time_ms = _parse_unix_ms(argv[5])
    elif len(argv) != 5 or not (eq(where, b"earliest") or eq(where, b"latest")):
        raise syntax_error()
    s, g = _stream_and_group(ctx, argv[2], argv[3], read=False)
    if eq(where, b"time"):
        g.last_id, g.entries_read = position_at_time(s, time_ms)
    elif eq(where, b"earliest"):
        g.last_id, g.entries_read = position_earliest(s)
    else:
        g.last_id, g.entries_read = position_latest(s)
    ctx.propagate(setid_effect(argv[2], g))
    return OK


# COMMAND DOCS: StreamDB's own texts (Redis has no such command), kept with the command.
DOCS.update({
    'streamdb.group': _doc("A container for StreamDB's consumer group commands", 'stream',
                           complexity='Depends on subcommand.'),
    'streamdb.group|help': _doc('Show helpful text about the different subcommands',
                                'stream', complexity='O(1)'),
    'streamdb.group|info': _doc("Shows a consumer group's lag in entries and in time, and its "
                                "pending and NACKed counts", 'stream',
                                complexity='O(1), reading at most the node that holds the '
                                           "group's next entry."),
    'streamdb.group|setid': _doc('Moves a consumer group to a time, with an exact entries-read',
                                 'stream',
                                 complexity='O(N) with N the number of nodes of the stream, '
                                            'reading at most the node that holds the time.'),
})
