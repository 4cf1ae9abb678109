"""XINFO STREAM / GROUPS / CONSUMERS / HELP.

Replies follow the *current* Redis field sets and order (Redis 7.0 reports a
subset; tests/server/test_xinfo.py documents every difference against a real
7.0 server).  Everything is a ``Map``: a flat array under RESP2, a map under
RESP3, as Redis replies.

STREAM      length, radix-tree-keys, radix-tree-nodes, last-generated-id,
            max-deleted-entry-id, entries-added, recorded-first-entry-id,
            idmp-duration, idmp-maxsize, pids-tracked, iids-tracked,
            iids-added, iids-duplicates, then groups, first-entry, last-entry
            (FULL: entries and groups in their place; 7.0 has no idmp-*).
GROUPS      name, consumers, pending, last-delivered-id, entries-read, lag
CONSUMERS   name, pending, idle, inactive (7.0 has no inactive)
FULL group  name, last-delivered-id, entries-read, lag, pel-count, pending, consumers
FULL cons.  name, seen-time, active-time, pel-count, pending (7.0: no active-time)

``radix-tree-keys`` is our node count; ``radix-tree-nodes`` is what Redis's
rax reports for that many keys of consecutive small ids (1 for none, 2 for
one, 2k+2 for k >= 2).  It is an estimate: we have no radix tree.
"""

from __future__ import annotations

from ..engine import MAX_ID, MIN_ID, Stream, format_id
from ..engine.groups import ENTRIES_READ_INVALID
from ..engine.lag import group_lag
from ..protocol.reply import CommandError, Map, Status
from .args import parse_int
from ..dispatch.context import Ctx
from ..dispatch.registry import command, subcommand

FULL_DEFAULT_COUNT = 10


def _no_such_key() -> CommandError:
    return CommandError("ERR no such key")


def _stream(ctx: Ctx, key: bytes) -> Stream:
    s = ctx.lookup_stream(key, read=True)
    if s is None:
        raise _no_such_key()
    return s


def _group(s: Stream, key: bytes, name: bytes):
    g = (s.groups or {}).get(name)
    if g is None:
        raise CommandError(f"NOGROUP No such consumer group '{name.decode('utf-8', 'replace')}' "
                           f"for key name '{key.decode('utf-8', 'replace')}'")
    return g


def _entries_read(g):
    return None if g.entries_read == ENTRIES_READ_INVALID else g.entries_read


def radix_tree_nodes(keys: int) -> int:
    if keys <= 1:
        return keys + 1
    return 2 * keys + 2


def _head_fields(ctx: Ctx, s: Stream) -> list:
    """The fields STREAM and STREAM FULL share, in Redis's order."""
    keys = s.node_count()
    cfg = ctx.config
    if s.idmp is not None:
        duration, maxsize = s.idmp.effective(cfg["stream-idmp-duration"], cfg["stream-idmp-maxsize"])
        pids, iids, added, dups = (s.idmp.pids_tracked(), s.idmp.iids_tracked(),
                                   s.idmp.added, s.idmp.duplicates)
    else:
        duration, maxsize = cfg["stream-idmp-duration"], cfg["stream-idmp-maxsize"]
        pids = iids = added = dups = 0
    return [
        (b"length", s.length),
        (b"radix-tree-keys", keys),
        (b"radix-tree-nodes", radix_tree_nodes(keys)),
        (b"last-generated-id", format_id(s.last_id)),
        (b"max-deleted-entry-id", format_id(s.max_deleted_id)),
        (b"entries-added", s.entries_added),
        (b"recorded-first-entry-id", format_id(s.first_id())),
        (b"idmp-duration", duration),
        (b"idmp-maxsize", maxsize),
        (b"pids-tracked", pids),
        (b"iids-tracked", iids),
        (b"iids-added", added),
        (b"iids-duplicates", dups),
    ]


def _entry(e):
    return None if e is None else [format_id(e[0]), e[1]]


def _stream_full(ctx: Ctx, s: Stream, count: int) -> Map:
    entries = [[format_id(sid), fv] for sid, fv in s.range(MIN_ID, MAX_ID, count)]
    groups = []
    for name in sorted(s.groups or {}):
        g = s.groups[name]
        pel = []
        for sid, pe in g.pel.items():
            if count and len(pel) >= count:
                break
            pel.append([format_id(sid), pe.owner_name, pe.delivery_time, pe.delivery_count])
        consumers = []
        for c in g.sorted_consumers():
            cpel = []
            for sid in c.pending:
                if count and len(cpel) >= count:
                    break
                pe = g.pel[sid]
                cpel.append([format_id(sid), pe.delivery_time, pe.delivery_count])
            consumers.append(Map([
                (b"name", c.name),
                (b"seen-time", c.seen_time),
                (b"active-time", c.active_time),
                (b"pel-count", len(c.pending)),
                (b"pending", cpel),
            ]))
        groups.append(Map([
            (b"name", g.name),
            (b"last-delivered-id", format_id(g.last_id)),
            (b"entries-read", _entries_read(g)),
            (b"lag", group_lag(s, g)),
            (b"pel-count", len(g.pel)),
            (b"nacked-count", g.nacked_count()),
            (b"pending", pel),
            (b"consumers", consumers),
        ]))
    return Map(_head_fields(ctx, s) + [(b"entries", entries), (b"groups", groups)])


@command("xinfo", -2, "readonly", group="stream", since="5.0.0")
def xinfo(ctx: Ctx, argv: list[bytes]):
    """XINFO STREAM | GROUPS | CONSUMERS | HELP"""
    raise CommandError(f"ERR unknown subcommand '{argv[1].decode('utf-8', 'replace')}'. "
                       "Try XINFO HELP.")


@subcommand("xinfo", "stream", -3, "readonly", keys=(2, 2, 1), since="5.0.0")
def xinfo_stream(ctx: Ctx, argv: list[bytes]):
    """XINFO STREAM key [FULL [COUNT count]]"""
    s = _stream(ctx, argv[2])
    if len(argv) == 3:
        return Map(_head_fields(ctx, s) + [
            (b"groups", len(s.groups) if s.groups else 0),
            (b"first-entry", _entry(s.first_entry())),
            (b"last-entry", _entry(s.last_entry())),
        ])
    n = len(argv)
    if argv[3].lower() != b"full" or not (n == 4 or (n == 6 and argv[4].lower() == b"count")):
        raise CommandError("ERR unknown subcommand or wrong number of arguments for "
                           f"'{argv[1].decode('utf-8', 'replace')}'. Try XINFO HELP.")
    count = FULL_DEFAULT_COUNT
    if n == 6:
        count = parse_int(argv[5])
        if count < 0:
            count = FULL_DEFAULT_COUNT            # as Redis: negative = the default; 0 = all
    return _stream_full(ctx, s, count)


@subcommand("xinfo", "groups", 3, "readonly", keys=(2, 2, 1), since="5.0.0")
def xinfo_groups(ctx: Ctx, argv: list[bytes]):
    """XINFO GROUPS key"""
    s = _stream(ctx, argv[2])
    out = []
    for name in sorted(s.groups or {}):
        g = s.groups[name]
        out.append(Map([
            (b"name", g.name),
            (b"consumers", len(g.consumers)),
            (b"pending", len(g.pel)),
            (b"last-delivered-id", format_id(g.last_id)),
            (b"entries-read", _entries_read(g)),
            (b"lag", group_lag(s, g)),
        ]))
    return out


@subcommand("xinfo", "consumers", 4, "readonly", keys=(2, 2, 1), since="5.0.0")
def xinfo_consumers(ctx: Ctx, argv: list[bytes]):
    """XINFO CONSUMERS key group"""
    s = _stream(ctx, argv[2])
    g = _group(s, argv[2], argv[3])
    now = ctx.now_ms
    out = []
    for c in g.sorted_consumers():
        out.append(Map([
            (b"name", c.name),
            (b"pending", len(c.pending)),
            (b"idle", max(now - c.seen_time, 0)),
            (b"inactive", max(now - c.active_time, 0) if c.active_time != -1 else -1),
        ]))
    return out


XINFO_HELP = [
    b"XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"CONSUMERS <key> <groupname>",
    b"    Show consumers of <groupname>.",
    b"GROUPS <key>",
    b"    Show the stream consumer groups.",
    b"STREAM <key> [FULL [COUNT <count>]",
    b"    Show information about the stream.",
    b"HELP",
    b"    Prints this help.",
]


@subcommand("xinfo", "help", 2, "readonly", since="5.0.0")
def xinfo_help(ctx: Ctx, argv: list[bytes]):
    """XINFO HELP"""
    return [Status(line.decode()) for line in XINFO_HELP]
