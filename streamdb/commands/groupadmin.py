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

from ..dispatch.context import WRONGTYPE, Ctx, syntax_error
from ..dispatch.registry import command, subcommand
from ..engine import format_id
from ..engine.groups import ENTRIES_READ_INVALID, ConsumerGroup, DeadLetterPolicy
from ..engine.lag import (group_lag, oldest_pending_ms, position_at_time, position_earliest,
                          position_latest, time_lag_ms)
from ..engine.stream import Stream
from ..protocol.reply import OK, CommandError, Map, Status
from .args import eq, parse_int
from .docs import DOCS, _doc
from .groups import no_such_group, setid_effect

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


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _stream_and_group(ctx: Ctx, key: bytes, name: bytes, read: bool) -> tuple[Stream, ConsumerGroup]:
    """The stream at ``key`` and its group ``name``, or the error that says which is missing."""
    s = ctx.lookup_stream(key, read=read)
    if s is None:
        raise CommandError(f"ERR no such key '{_text(key)}'")
    g = (s.groups or {}).get(name)
    if g is None:
        raise no_such_group(key, name)
    return s, g


# -- SET / GET / RESET: the dead-letter policy ------------------------------------
#
# The policy and the group's dead-lettered counter live on the group
# (ConsumerGroup.dead_letter, .dead_lettered): snapshots, DUMP payloads and full
# syncs carry them in the codec, an AOF rewrite as SET (+ RESET).  What the server
# does with the policy is in commands/groups.py (_dead_lettered).


# SET's dead-letter key is always argv[7] (the policy's two options come first, in
# their order): its key spec (2, 7, 5) names both keys for ACLs and COMMAND GETKEYS.
@subcommand("streamdb.group", "set", -6, "write fast", keys=(2, 7, 5), since=_SINCE)
def group_set(ctx: Ctx, argv: list[bytes]):
    """STREAMDB.GROUP SET key group [MAXDELIVERIES max-deliveries DEADLETTER dead-letter-key] [DEADLETTERED count]

    Sets the group's dead-letter policy: an entry pending in the group that was
    delivered max-deliveries times goes to the stream at dead-letter-key instead of
    being delivered again.  DEADLETTERED sets the group's counter of dead-lettered
    entries (for the AOF and replicas, as XGROUP's ENTRIESREAD).  A dead-letter key
    holding another type than a stream is refused (WRONGTYPE); it must not be the
    stream itself.
    """
    n = len(argv)
    policy = counter = None
    i = 4
    if n >= 8 and eq(argv[4], b"maxdeliveries") and eq(argv[6], b"deadletter"):
        most = parse_int(argv[5])
        if most < 1:
            raise CommandError("ERR MAXDELIVERIES must be a positive integer")
        policy = DeadLetterPolicy(most, argv[7])
        i = 8
    if i + 2 == n and eq(argv[i], b"deadlettered"):
        counter = parse_int(argv[i + 1])
        if counter < 0:
            raise CommandError("ERR DEADLETTERED must be >= 0")
        i += 2
    if i != n:
        raise syntax_error()
    _, g = _stream_and_group(ctx, argv[2], argv[3], read=False)
    if policy is not None:
        _check_dead_letter_key(ctx, argv[2], policy.key)
        g.dead_letter = policy
    g.dead_lettered = g.dead_lettered if counter is None else counter
    ctx.propagate_as_is()
    return OK


def _check_dead_letter_key(ctx: Ctx, key: bytes, target: bytes) -> None:
    """Refuse a dead-letter key that is the stream ``key`` itself or holds another type
    than a stream (Redis's WRONGTYPE, at SET rather than at each delivery)."""
    if target == key:
        raise CommandError("ERR the dead-letter key must be another key than the stream")
    # (Replayed, the key may have changed type since: the effect happened.)
    held = None if ctx.replaying else ctx.lookup(target)
    if held is not None and type(held) is not Stream:
        raise CommandError(WRONGTYPE)


@subcommand("streamdb.group", "get", 4, "readonly fast", keys=(2, 2, 1), since=_SINCE)
def group_get(ctx: Ctx, argv: list[bytes]):
    """STREAMDB.GROUP GET key group

    The group's dead-letter policy (nil fields without one) and how many entries
    it dead-lettered since it was created.
    """
    _, g = _stream_and_group(ctx, argv[2], argv[3], read=True)
    policy: DeadLetterPolicy | None = g.dead_letter
    return Map([
        (b"max-deliveries", policy.max_deliveries if policy is not None else None),
        (b"dead-letter-key", policy.key if policy is not None else None),
        (b"dead-lettered", g.dead_lettered),
    ])


@subcommand("streamdb.group", "reset", 4, "write fast", keys=(2, 2, 1), since=_SINCE)
def group_reset(ctx: Ctx, argv: list[bytes]):
    """STREAMDB.GROUP RESET key group

    Removes the group's dead-letter policy (its dead-lettered counter stays).
    """
    _, g = _stream_and_group(ctx, argv[2], argv[3], read=False)
    if g.dead_letter is not None:
        g.dead_letter = None
        ctx.propagate_as_is()
    return OK


# ---------------------------------------------------------------------------
# INFO and SETID ... TIME: the group's lag in time, and moving it to a time
# ---------------------------------------------------------------------------


@subcommand("streamdb.group", "info", 4, "readonly", keys=(2, 2, 1), since=_SINCE)
def group_info(ctx: Ctx, argv: list[bytes]):
    """STREAMDB.GROUP INFO key group

    The group's progress: XINFO GROUPS's counters (lag in entries, nil when Redis's
    rules cannot count it), NACKed entries, and its lag in time: ``lag-ms``, the age
    of the oldest entry it has not been given, and ``oldest-pending-ms``, the age of
    its oldest pending entry (0 when none; an entry's time is its id's); then the
    dead-letter policy's count and settings, as GET shows them.
    """
    s, g = _stream_and_group(ctx, argv[2], argv[3], read=True)
    policy: DeadLetterPolicy | None = g.dead_letter
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
        (b"dead-lettered", g.dead_lettered),
        (b"max-deliveries", policy.max_deliveries if policy is not None else None),
        (b"dead-letter-key", policy.key if policy is not None else None),
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
    ctx.notify(b"xgroup-setid", argv[2])     # what the XGROUP SETID it stands for publishes
    return OK


# COMMAND DOCS: StreamDB's own texts (Redis has no such command), kept with the command.
DOCS.update({
    'streamdb.group': _doc("A container for StreamDB's consumer group commands", 'stream',
                           complexity='Depends on subcommand.'),
    'streamdb.group|help': _doc('Show helpful text about the different subcommands',
                                'stream', complexity='O(1)'),
    'streamdb.group|set': _doc("Sets a consumer group's dead-letter policy", 'stream',
                               complexity='O(1)'),
    'streamdb.group|get': _doc("Shows a consumer group's dead-letter policy and count",
                               'stream', complexity='O(1)'),
    'streamdb.group|reset': _doc("Removes a consumer group's dead-letter policy", 'stream',
                                 complexity='O(1)'),
    'streamdb.group|info': _doc("Shows a consumer group's lag in entries and in time, and its "
                                "pending and NACKed counts", 'stream',
                                complexity='O(1), reading at most the node that holds the '
                                           "group's next entry."),
    'streamdb.group|setid': _doc('Moves a consumer group to a time, with an exact entries-read',
                                 'stream',
                                 complexity='O(N) with N the number of nodes of the stream, '
                                            'reading at most the node that holds the time.'),
})
