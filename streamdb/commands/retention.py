"""Stream retention: STREAMDB.RETENTION and the background trimming the server's tick runs.

A stream's retention policy (engine/retention.py) is part of its state: it is
set by ``STREAMDB.RETENTION SET`` (propagated as written), kept in snapshots,
DUMP payloads and AOF rewrites by the codec, and dropped with the stream.  The
server's defaults (``stream-retention-*``) apply to every stream without a
setting of its own.

``Retention.cron`` runs on the primary from the server's periodic tick, with
bounded work per tick: it visits a bounded number of keys round-robin and drops
a bounded number of nodes, so that a backlog of any size never stalls the loop.
Each trim is one exact ``XTRIM key MINID = <first remaining id>`` through the
core's effect path, the form every approximate trim takes: the AOF, replicas,
WATCH and blocked readers see it as they see an XTRIM.  A replica never runs
retention of its own: it applies its primary's trims.
"""

from __future__ import annotations

from collections import deque

from .. import log
from ..config import ConfigError, parse_memory
from ..engine.ids import PAST_MAX_ID, format_id
from ..engine.policies import KEEPREF, acked_bound, exact_trim
from ..engine.retention import RetentionPolicy, node_byte_counts
from ..engine.stream import Stream
from ..protocol.reply import OK, CommandError, Map, Status
from .args import parse_int
from ..dispatch.context import Ctx, syntax_error
from .docs import DOCS, _doc
from ..dispatch.registry import command, subcommand
from .streams import trim_effect

__all__ = ["Retention", "install"]

# Work per tick (hz times a second): keys looked at, nodes removed, nodes added to
# byte tallies.  At the default hz 10 that is up to 640 nodes (64k entries of
# 100-entry nodes) removed a second; measured on a 1M-node stream (source, not
# compiled), a tick took 0.3 ms (median), 13 ms at most.
KEYS_PER_TICK = 200
NODES_PER_TICK = 64
TALLY_NODES_PER_TICK = 16384

# COMMAND DOCS "since" is a Redis version: the one this server reports (redis-version-compat's
# default), so that clients gating on it see the command.
_SINCE = "8.10.0"


def _settings(cfg) -> tuple[int, int, bool]:
    """The server's defaults: (max age ms, max bytes, acked)."""
    return (cfg["stream-retention-max-age"], cfg["stream-retention-max-bytes"],
            cfg["stream-retention-acked"])


def effective_policy(cfg, s: Stream) -> tuple[int, int, bool]:
    """The retention in force for ``s``: its own settings over the server's defaults."""
    defaults = _settings(cfg)
    return s.retention.effective(*defaults) if s.retention is not None else defaults


# ---------------------------------------------------------------------------
# The background trimming
# ---------------------------------------------------------------------------


class Retention:
    """The cron side of retention, and its INFO counters."""

    def __init__(self, core) -> None:
        self.core = core
        self.trimmed_entries = 0
        self.trimmed_nodes = 0
        self._queue: deque[tuple[int, bytes]] = deque()   # keys still to visit this round

    def info_stats(self) -> list[tuple[str, object]]:
        return [("stream_retention_trimmed_entries", self.trimmed_entries),
                ("stream_retention_trimmed_nodes", self.trimmed_nodes)]

    def cron(self) -> None:
        core = self.core
        # A replica applies its primary's trims; while loading or refusing writes
        # (MISCONF) nothing may change.
        if core.is_replica or core.loading or core.write_refusal or core.save_refusal:
            return
        now = core.now_ms()
        keys, nodes = KEYS_PER_TICK, NODES_PER_TICK
        refilled = False
        queue = self._queue
        while keys and nodes:
            if not queue:
                if refilled:
                    break       # every key visited this tick
                refilled = True
                for db in core.keyspace.dbs:
                    queue.extend((db.index, key) for key in db.data)
                if not queue:
                    break
            dbi, key = queue.popleft()
            keys -= 1
            db = core.keyspace.dbs[dbi]
            s = db.data.get(key)
            if type(s) is Stream and not db.is_expired(key, now):
                nodes -= self._trim(dbi, key, s, now, nodes)
        if core.ready_keys:
            core.serve_ready_keys()

    def _trim(self, dbi: int, key: bytes, s: Stream, now: int, most: int) -> int:
        """Apply ``s``'s retention, removing at most ``most`` nodes; returns how many went."""
        max_age, max_bytes, acked = effective_policy(self.core.config, s)
        if not (max_age or max_bytes) or len(s.nodes) < 2:
            return 0
        if s.retention is None:
            s.retention = RetentionPolicy()     # (no settings: keeps the tally and counters)
        policy: RetentionPolicy = s.retention
        stop = acked_bound(s) if acked else PAST_MAX_ID
        n = policy.nodes_to_drop(s, max_age, max_bytes, now, stop, most, TALLY_NODES_PER_TICK)
        if not n:
            return 0
        removed = s.trim(minid=s.firsts[n], approx=True, stop_id=stop)
        policy.trimmed_entries += removed
        policy.trimmed_nodes += n
        self.trimmed_entries += removed
        self.trimmed_nodes += n
        core = self.core
        core.dirty += removed
        core.current_client = None          # the server's own change, as an expiry's DEL
        # Its effect carries no reference policy: KEEPREF, as XTRIM's default.
        core._emit(dbi, [trim_effect(key, exact_trim(s, KEEPREF))])
        core.notify(dbi, b"xtrim", key)     # what the XTRIM it stands for would publish
        # One line per stream per tick, however many nodes went: a backlog worked off
        # over many ticks is a line a tick, not a line a node.
        rules = [f"max-age {max_age} ms"] * bool(max_age) + [f"max-bytes {max_bytes}"] * bool(max_bytes)
        log.log(log.VERBOSE, f"Retention removed {removed} entries ({n} nodes) of stream "
                             f"'{key.decode('utf-8', 'replace')}' in db {dbi} "
                             f"({', '.join(rules)}{', acked' if acked else ''}); it now starts at "
                             f"{format_id(s.firsts[0]).decode()}")
        return n


def install(core, server) -> Retention:
    """Attach retention to ``core`` (INFO) and its tick to ``server``'s cron."""
    core.retention = Retention(core)
    server.cron_hooks.append(core.retention.cron)
    return core.retention


# ---------------------------------------------------------------------------
# STREAMDB.RETENTION
# ---------------------------------------------------------------------------


@command("streamdb.retention", -2, "", group="stream", since=_SINCE)
def streamdb_retention(ctx: Ctx, argv: list[bytes]):
    """STREAMDB.RETENTION SET | GET | RESET | HELP"""
    raise CommandError(f"ERR unknown subcommand '{argv[1].decode('utf-8', 'replace')}'. "
                       "Try STREAMDB.RETENTION HELP.")


def _existing_stream(ctx: Ctx, key: bytes, read: bool = False) -> Stream:
    s = ctx.lookup_stream(key, read)
    if s is None:
        raise CommandError("ERR no such key")
    return s


def _non_negative(raw: bytes, name: str) -> int:
    v = parse_int(raw)
    if v < 0:
        raise CommandError(f"ERR {name} must be >= 0")
    return v


def _byte_size(raw: bytes) -> int:
    """MAXBYTES takes what the stream-retention-max-bytes directive takes: 5000, 5mb, 1gb."""
    try:
        v = parse_memory(raw.decode("ascii", "replace"))
    except ConfigError:
        raise CommandError("ERR MAXBYTES must be a byte count, optionally with a unit "
                           "(kb, mb, gb)") from None
    if v < 0:
        raise CommandError("ERR MAXBYTES must be >= 0")
    return v


@subcommand("streamdb.retention", "set", -4, "write fast", keys=(2, 2, 1), since=_SINCE)
def retention_set(ctx: Ctx, argv: list[bytes]):
    """STREAMDB.RETENTION SET key [MAXAGE milliseconds] [MAXBYTES bytes] [ACKED|NOACKED]

    MAXBYTES takes units as the directive does (5mb).

    Sets what is given; the rest keeps the stream's earlier setting or the
    server's default.  0 is "no limit" for this stream, whatever the default.
    """
    max_age = max_bytes = acked = None
    i, n = 3, len(argv)
    while i < n:
        lo = argv[i].lower()
        if lo == b"maxage" and i + 1 < n:
            max_age = _non_negative(argv[i + 1], "MAXAGE")
            i += 2
        elif lo == b"maxbytes" and i + 1 < n:
            max_bytes = _byte_size(argv[i + 1])
            i += 2
        elif lo in (b"acked", b"noacked") and acked is None:
            acked = lo == b"acked"
            i += 1
        else:
            raise syntax_error()
    s = _existing_stream(ctx, argv[2])
    if s.retention is None:
        s.retention = RetentionPolicy()
    p: RetentionPolicy = s.retention
    if max_age is not None:
        p.max_age_ms = max_age
    if max_bytes is not None:
        p.max_bytes = max_bytes
    if acked is not None:
        p.acked = acked
    ctx.propagate_as_is()
    return OK


@subcommand("streamdb.retention", "reset", 3, "write fast", keys=(2, 2, 1), since=_SINCE)
def retention_reset(ctx: Ctx, argv: list[bytes]):
    """STREAMDB.RETENTION RESET key

    Forgets the stream's own settings: the server's defaults apply again.
    """
    s = _existing_stream(ctx, argv[2])
    if s.retention is not None and s.retention.has_settings():
        s.retention.max_age_ms = s.retention.max_bytes = s.retention.acked = None
        ctx.propagate_as_is()
    return OK


@subcommand("streamdb.retention", "get", 3, "readonly", keys=(2, 2, 1), since=_SINCE)
def retention_get(ctx: Ctx, argv: list[bytes]):
    """STREAMDB.RETENTION GET key

    The policy in force (the stream's own settings over the server's defaults),
    the stream's own settings as SET options, what retention removed from it
    since the server started, and the stream's bytes as MAXBYTES counts them
    with the part of them resident in memory (the rest is cold, on disk only).
    Not fast: the bytes are summed over the stream's node headers.
    """
    s = _existing_stream(ctx, argv[2], read=True)
    max_age, max_bytes, acked = effective_policy(ctx.config, s)
    p: RetentionPolicy | None = s.retention
    total_bytes, resident_bytes = node_byte_counts(s)
    return Map([
        (b"max-age", max_age),
        (b"max-bytes", max_bytes),
        (b"acked", int(acked)),
        (b"own-settings", p.arguments() if p is not None else []),
        (b"trimmed-entries", p.trimmed_entries if p is not None else 0),
        (b"trimmed-nodes", p.trimmed_nodes if p is not None else 0),
        (b"bytes", total_bytes),
        (b"resident-bytes", resident_bytes),
    ])


# COMMAND DOCS: StreamDB's own texts (Redis has no such command), kept with the command.
DOCS.update({
    'streamdb.retention': _doc('A container for stream retention commands', 'stream',
                               complexity='Depends on subcommand.'),
    'streamdb.retention|get': _doc("Shows a stream's retention policy, what it removed and the "
                                   "stream's bytes in memory and on disk", 'stream',
                                   complexity='O(N) where N is the number of nodes of the stream'),
    'streamdb.retention|help': _doc('Show helpful text about the different subcommands',
                                    'stream', complexity='O(1)'),
    'streamdb.retention|reset': _doc("Forgets a stream's own retention settings", 'stream',
                                     complexity='O(1)'),
    'streamdb.retention|set': _doc("Sets a stream's own retention settings", 'stream',
                                   complexity='O(1)'),
})


RETENTION_HELP = [
    b"STREAMDB.RETENTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"GET <key>",
    b"    Show the retention in force for the stream, its own settings, what retention removed",
    b"    and the stream's bytes (resident in memory and in all).",
    b"RESET <key>",
    b"    Forget the stream's own settings: the server's stream-retention-* defaults apply.",
    b"SET <key> [MAXAGE <milliseconds>] [MAXBYTES <bytes>] [ACKED|NOACKED]",
    b"    Set the stream's own settings (0 = no limit for this stream).",
    b"HELP",
    b"    Prints this help.",
]


@subcommand("streamdb.retention", "help", 2, "readonly", since=_SINCE)
def retention_help(ctx: Ctx, argv: list[bytes]):
    """STREAMDB.RETENTION HELP"""
    return [Status(line.decode()) for line in RETENTION_HELP]
