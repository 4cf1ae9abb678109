"""Observability commands: SLOWLOG, LATENCY, MONITOR, MEMORY, OBJECT, CONFIG REWRITE,
INFO latencystats.

What they read is recorded by the core's ``Observer`` (server/observer.py, reached
as ``core.observe``), fed once per executed command; other subsystems report their
own latency events to it (the AOF's "aof-write" and "aof-fsync-always").  None of
these handlers is on a hot path, so this module runs as plain Python.

Replies, help texts and errors follow Redis 7.0.
"""

from __future__ import annotations

import os
import sys

from ..config import DIRECTIVES
from ..dispatch.context import Ctx, syntax_error
from ..dispatch.registry import command, subcommand
from ..engine import Stream
from ..files import fsync_dir, replace_file
from ..memory import aof_buffer, replicas_output, rss_memory, used_memory
from ..protocol.reply import OK, CommandError, Map, Verbatim
from .args import parse_int

__all__ = ["latencystats_fields", "memory_numbers", "rewrite_config_file"]


def latencystats_fields(core) -> list[tuple[str, str]]:
    """INFO latencystats: latency_percentiles_usec_<cmd>:p50=..,p99=..,p99.9=.."""
    obs = core.observe
    out = []
    for name in sorted(obs.histograms):
        pct = obs.percentiles_usec(name, core.config["latency-tracking-info-percentiles"])
        if pct:
            out.append((f"latency_percentiles_usec_{name}",
                        ",".join(f"p{_fmt_pct(p)}={v:.3f}" for p, v in pct)))
    return out


def _fmt_pct(p: float) -> str:
    return f"{p:g}"


# ---------------------------------------------------------------------------
# SLOWLOG
# ---------------------------------------------------------------------------


@command("slowlog", -2, "", since="2.2.12")
def slowlog(ctx, argv):
    """SLOWLOG <subcommand>"""


@subcommand("slowlog", "get", -2, "admin loading stale", since="2.2.12")
def slowlog_get(ctx: Ctx, argv):
    """SLOWLOG GET [count]"""
    count = 10
    if len(argv) > 3:
        raise syntax_error()
    if len(argv) == 3:
        try:
            count = parse_int(argv[2])
        except CommandError:
            count = -2
        if count < -1:
            raise CommandError("ERR count should be greater than or equal to -1")
    entries = list(ctx.core.observe.slowlog)
    if count != -1:
        entries = entries[:count]
    return [list(e) for e in entries]


@subcommand("slowlog", "len", 2, "admin loading stale", since="2.2.12")
def slowlog_len(ctx: Ctx, argv):
    """SLOWLOG LEN"""
    return len(ctx.core.observe.slowlog)


@subcommand("slowlog", "reset", 2, "admin loading stale", since="2.2.12")
def slowlog_reset(ctx: Ctx, argv):
    """SLOWLOG RESET"""
    ctx.core.observe.slowlog.clear()
    return OK


@subcommand("slowlog", "help", 2, "loading stale", since="6.2.0")
def slowlog_help(ctx: Ctx, argv):
    """SLOWLOG HELP"""
    return [b"SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            b"GET [<count>]",
            b"    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
            b"    Entries are made of:",
            b"    id, timestamp, time in microseconds, arguments array, client IP and port,",
            b"    client name",
            b"LEN", b"    Return the length of the slowlog.",
            b"RESET", b"    Reset the slowlog.",
            b"HELP", b"    Prints this help."]


# ---------------------------------------------------------------------------
# LATENCY
# ---------------------------------------------------------------------------


@command("latency", -2, "", since="2.8.13")
def latency(ctx, argv):
    """LATENCY <subcommand>"""


@subcommand("latency", "latest", 2, "admin noscript loading stale", since="2.8.13")
def latency_latest(ctx: Ctx, argv):
    """LATENCY LATEST"""
    return [[name.encode(), ev.samples[-1][0], ev.samples[-1][1], ev.max]
            for name, ev in ctx.core.observe.latency.items() if ev.samples]


@subcommand("latency", "history", 3, "admin noscript loading stale", since="2.8.13")
def latency_history(ctx: Ctx, argv):
    """LATENCY HISTORY event"""
    ev = ctx.core.observe.latency.get(argv[2].decode("utf-8", "replace"))
    return [] if ev is None else [[t, ms] for t, ms in ev.samples]


@subcommand("latency", "reset", -2, "admin noscript loading stale", since="2.8.13")
def latency_reset(ctx: Ctx, argv):
    """LATENCY RESET [event ...]"""
    events = ctx.core.observe.latency
    if len(argv) == 2:
        n = len(events)
        events.clear()
        return n
    n = 0
    for raw in argv[2:]:
        if events.pop(raw.decode("utf-8", "replace"), None) is not None:
            n += 1
    return n


@subcommand("latency", "histogram", -2, "admin noscript loading stale", since="7.0.0")
def latency_histogram(ctx: Ctx, argv):
    """LATENCY HISTOGRAM [command ...]"""
    obs = ctx.core.observe
    names = [a.decode("utf-8", "replace").lower() for a in argv[2:]] or sorted(obs.histograms)
    out = []
    for name in dict.fromkeys(names):
        buckets = obs.buckets(name)
        if not buckets:
            continue
        # Cumulative counts at power-of-two microsecond bounds, as Redis replies them.
        cumulative: list[tuple[int, int]] = []
        seen = 0
        for lower, upper, n in buckets:
            seen += n
            bound = 1
            while bound * 1000 <= upper:
                bound *= 2
            if cumulative and cumulative[-1][0] == bound:
                cumulative[-1] = (bound, seen)
            else:
                cumulative.append((bound, seen))
        out.append((name.encode(), Map([(b"calls", seen),
                                        (b"histogram_usec", Map(cumulative))])))
    return Map(out)


_DOCTOR_QUIET = (b"Dave, no latency spike was observed during the lifetime of this Redis instance, "
                 b"not in the slightest bit. I honestly think you ought to sit down calmly, take a "
                 b"stress pill, and think things over.\n")

_DOCTOR_DISABLED = (
    b"I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Redis instance. "
    b"You may use \"CONFIG SET latency-monitor-threshold <milliseconds>.\" in order to enable "
    b"it. If we weren't in a deep space mission I'd suggest to take a look at "
    b"https://redis.io/topics/latency-monitor.\n")

_ADVICE = {
    "command": "Slow commands: check SLOWLOG GET; long XRANGE/XREAD COUNTs or big XTRIMs "
               "block the loop, page them with smaller COUNTs.",
    "fast-command": "Commands flagged fast were slow: the process may be swapping or starved "
                    "of CPU (check the host's load and memory).",
    "aof-fsync-always": "appendfsync always waits for the disk on every turn: use a faster "
                        "disk or appendfsync everysec if losing a second is acceptable.",
    "aof-write": "Writes to the AOF were slow: the disk is saturated (a snapshot or AOF "
                 "rewrite child may be competing for it).",
    "expire-cycle": "Active expiry took long: many keys expire at the same time; spread "
                    "their TTLs.",
}


@subcommand("latency", "doctor", 2, "admin noscript loading stale", since="2.8.13")
def latency_doctor(ctx: Ctx, argv):
    """LATENCY DOCTOR"""
    events = [(n, ev) for n, ev in ctx.core.observe.latency.items() if ev.samples]
    if not events and not ctx.config["latency-monitor-threshold"]:
        return Verbatim(_DOCTOR_DISABLED)
    if not events:
        return Verbatim(_DOCTOR_QUIET)
    lines = ["Dave, I have observed latency spikes in this Redis instance. "
             "You don't mind talking about it, do you Dave?", ""]
    for i, (name, ev) in enumerate(events, 1):
        values = [ms for _, ms in ev.samples]
        avg = sum(values) / len(values)
        mad = sum(abs(v - avg) for v in values) / len(values)
        times = [t for t, _ in ev.samples]
        period = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else 0
        lines.append(f"{i}. {name}: {len(values)} latency spikes (average {avg:.0f}ms, "
                     f"mean deviation {mad:.0f}ms, period {period:.2f} sec). "
                     f"Worst all time event {ev.max}ms.")
    lines += ["", "I have a few advices for you:", ""]
    for name, _ in events:
        lines.append("- " + _ADVICE.get(name, f"{name}: see LATENCY HISTORY {name}."))
    return Verbatim(("\n".join(lines) + "\n").encode())


@subcommand("latency", "help", 2, "loading stale", since="2.8.13")
def latency_help(ctx: Ctx, argv):
    """LATENCY HELP"""
    return [b"LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            b"DOCTOR", b"    Return a human readable latency analysis report.",
            b"HISTORY <event>", b"    Return time-latency samples for the <event> class.",
            b"LATEST", b"    Return the latest latency samples for all events.",
            b"RESET [<event> ...]", b"    Reset latency data of one or more <event> classes.",
            b"    (default: reset all data for all event classes)",
            b"HISTOGRAM [COMMAND ...]",
            b"    Return a cumulative distribution of latencies in the format of a histogram "
            b"for the specified command names.",
            b"    If no commands are specified then all histograms are replied.",
            b"HELP", b"    Prints this help."]


# ---------------------------------------------------------------------------
# MONITOR
# ---------------------------------------------------------------------------


@command("monitor", 1, "admin noscript loading stale", since="1.0.0")
def monitor(ctx: Ctx, argv):
    """MONITOR"""
    client = ctx.client
    if client.kind == "normal":
        ctx.core.observe.monitors[client.id] = client
    return OK


# ---------------------------------------------------------------------------
# MEMORY
# ---------------------------------------------------------------------------

# Python object overheads (CPython 3, 64-bit) used by the estimates below.
_KEY_OVERHEAD = 72            # dict slot + hash + the bytes object's header
_NODE_OVERHEAD = 120          # Node object and its list slots
_OPEN_ENTRY_OVERHEAD = 16     # per entry of the open tail node (id int + list slot)
_DELETED_MARK = 40            # a tombstone in a node's deleted set
_STREAM_OVERHEAD = 200
_GROUP_OVERHEAD = 250         # ConsumerGroup + its SortedDict and dict
_CONSUMER_OVERHEAD = 200      # Consumer + its SortedSet
_PEL_ENTRY = 140              # PendingEntry + SortedDict slot + the consumer's SortedSet slot


def _node_bytes(node) -> int:
    """The bytes ``node`` holds in memory: a cold node (sealed, its blob on disk
    only) its header alone."""
    if node.blob is not None:
        size = len(node.blob) + _NODE_OVERHEAD
    elif node.ids is None:
        size = _NODE_OVERHEAD
    else:
        size = node.nbytes + _NODE_OVERHEAD + _OPEN_ENTRY_OVERHEAD * node.total
    return size + (_DELETED_MARK * len(node.deleted) if node.deleted else 0)


def stream_bytes(stream: Stream, samples: int) -> int:
    """Nodes (all, or ``samples`` of them spread evenly and extrapolated) + groups + PEL."""
    nodes = stream.nodes
    if samples == 0 or len(nodes) <= samples:
        node_total = sum(_node_bytes(n) for n in nodes)
    else:
        step = len(nodes) / samples
        picked = [nodes[int(i * step)] for i in range(samples)]
        node_total = sum(_node_bytes(n) for n in picked) * len(nodes) // samples
    total = _STREAM_OVERHEAD + node_total
    for group in (stream.groups or {}).values():
        total += _GROUP_OVERHEAD + len(group.name) + _PEL_ENTRY * len(group.pel)
        total += sum(_CONSUMER_OVERHEAD + len(c.name) for c in group.consumers.values())
    return total


def value_bytes(value, samples: int = 5) -> int:
    if type(value) is Stream:
        return stream_bytes(value, samples)
    return sys.getsizeof(value)


@command("memory", -2, "", since="4.0.0")
def memory(ctx, argv):
    """MEMORY <subcommand>"""


@subcommand("memory", "usage", -3, "readonly", keys=(2, 2, 1), since="4.0.0")
def memory_usage(ctx: Ctx, argv):
    """MEMORY USAGE key [SAMPLES count]"""
    samples = 5
    i = 3
    while i < len(argv):
        if argv[i].lower() == b"samples" and i + 1 < len(argv):
            samples = parse_int(argv[i + 1])
            if samples < 0:
                raise syntax_error()
            i += 2
        else:
            raise syntax_error()
    value = ctx.lookup(argv[2])
    if value is None:
        return None
    return _KEY_OVERHEAD + len(argv[2]) + value_bytes(value, samples)


def memory_numbers(core) -> dict:
    """What INFO memory and MEMORY STATS/DOCTOR report, by Redis's definitions:
    the overhead is the memory at start-up plus the clients' buffers and the AOF's
    pending frame, the dataset what used memory holds beyond it."""
    used = used_memory(core)
    startup = core.observe.startup_memory or used
    clients_normal = sum(c.output_size + c.query_buffer for c in core.clients.values())
    clients_replicas = replicas_output(core)
    aof_pending = aof_buffer(core)
    overhead = startup + clients_normal + clients_replicas + aof_pending
    return {"used": used, "rss": rss_memory(), "peak": core.peak_memory, "startup": startup,
            "clients_normal": clients_normal, "clients_replicas": clients_replicas,
            "aof_buffer": aof_pending, "overhead": overhead, "dataset": max(used - overhead, 0)}


@subcommand("memory", "stats", 2, "", since="4.0.0")
def memory_stats(ctx: Ctx, argv):
    """MEMORY STATS"""
    core = ctx.core
    m = memory_numbers(core)
    keys = sum(len(db.data) for db in core.keyspace.dbs)
    out = [
        (b"peak.allocated", m["peak"]), (b"total.allocated", m["used"]),
        (b"startup.allocated", m["startup"]), (b"replication.backlog", 0),
        (b"clients.slaves", m["clients_replicas"]), (b"clients.normal", m["clients_normal"]),
        (b"aof.buffer", m["aof_buffer"]), (b"overhead.total", m["overhead"]),
    ]
    for db in core.keyspace.dbs:
        if db.data:
            out.append((f"db.{db.index}".encode(), Map([
                (b"overhead.hashtable.main", sys.getsizeof(db.data)),
                (b"overhead.hashtable.expires", sys.getsizeof(db.expires))])))
    out += [
        (b"keys.count", keys),
        (b"keys.bytes-per-key", m["dataset"] // keys if keys else 0),
        (b"dataset.bytes", m["dataset"]),
        (b"dataset.percentage", _ratio(m["dataset"] * 100, m["used"])),
        (b"peak.percentage", _ratio(m["used"] * 100, m["peak"])),
        (b"fragmentation", _ratio(m["rss"], m["used"])),
        (b"fragmentation.bytes", m["rss"] - m["used"]),
    ]
    return Map(out)


def _ratio(a: int, b: int):
    from ..protocol.reply import Double
    return Double(a / b if b else 0.0)


@subcommand("memory", "doctor", 2, "", since="4.0.0")
def memory_doctor(ctx: Ctx, argv):
    """MEMORY DOCTOR"""
    core = ctx.core
    m = memory_numbers(core)
    if m["dataset"] < 5 * 1024 * 1024 and sum(len(db.data) for db in core.keyspace.dbs) < 1000:
        return Verbatim(
            b"Hi Sam, this instance is empty or is using very little memory, my issues detector "
            b"can't be used in these conditions. Please, leave for your mission on Earth and fill "
            b"it with some data. The new Sam and I will be back to our programming as soon as I "
            b"finished rebooting.\n")
    issues = []
    if m["peak"] > m["used"] * 3 // 2:
        issues.append(" * Peak memory: In the past this instance used more than 150% the memory "
                      "that is currently using. The allocators keep most of the freed pages for "
                      "the next data, so the RSS (and the fragmentation ratio) stays high; "
                      "it is harmless: that memory is used again as the data grows.")
    maxmemory = ctx.config["maxmemory"]
    if maxmemory and m["used"] > maxmemory * 9 // 10:
        issues.append(" * Near maxmemory: used memory is above 90% of maxmemory; writes get "
                      "-OOM past it (every policy is noeviction here).")
    if not issues:
        return Verbatim(b"Hi Sam, I can't find any memory issue in your instance. "
                        b"I can only account for what occurs on this base.\n")
    return Verbatim(("Sam, I detected a few issues in this instance memory implementation:\n\n"
                     + "\n\n".join(issues) + "\n\nI'm here to keep you safe, Sam. "
                     "I want to help you.\n").encode())


@subcommand("memory", "malloc-stats", 2, "", since="4.0.0")
def memory_malloc_stats(ctx: Ctx, argv):
    """MEMORY MALLOC-STATS"""
    # What Redis answers when built without jemalloc; pymalloc has no such report.
    return Verbatim(b"Stats not supported for the current allocator")


@subcommand("memory", "purge", 2, "", since="4.0.0")
def memory_purge(ctx: Ctx, argv):
    """MEMORY PURGE"""
    return OK


@subcommand("memory", "help", 2, "loading stale", since="4.0.0")
def memory_help(ctx: Ctx, argv):
    """MEMORY HELP"""
    return [b"MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            b"DOCTOR", b"    Return memory problems reports.",
            b"MALLOC-STATS", b"    Return internal statistics report from the memory allocator.",
            b"PURGE", b"    Attempt to purge dirty pages for reclamation by the allocator.",
            b"STATS", b"    Return information about the memory usage of the server.",
            b"USAGE <key> [SAMPLES <count>]",
            b"    Return memory in bytes used by <key> and its value. Nested values are",
            b"    sampled up to <count> times (default: 5, 0 means sample all).",
            b"HELP", b"    Prints this help."]


# ---------------------------------------------------------------------------
# OBJECT
# ---------------------------------------------------------------------------

_SHARED_INTEGERS = 10000          # Redis's OBJ_SHARED_INTEGERS
_SHARED_REFCOUNT = 2147483647     # OBJ_SHARED_REFCOUNT
_EMBSTR_MAX = 44                  # OBJ_ENCODING_EMBSTR_SIZE_LIMIT


def _as_redis_int(value: bytes) -> int | None:
    """The integer Redis would store a string as (string2l: canonical form only)."""
    if not value or len(value) > 20:
        return None
    try:
        n = int(value)
    except ValueError:
        return None
    if str(n).encode() != value or not -(1 << 63) <= n < (1 << 63):
        return None
    return n


def string_encoding(value: bytes) -> bytes:
    if _as_redis_int(value) is not None:
        return b"int"
    return b"embstr" if len(value) <= _EMBSTR_MAX else b"raw"


@command("object", -2, "", since="2.2.3")
def object_(ctx, argv):
    """OBJECT <subcommand>"""


@subcommand("object", "encoding", 3, "readonly", keys=(2, 2, 1), since="2.2.3")
def object_encoding(ctx: Ctx, argv):
    """OBJECT ENCODING key"""
    value = ctx.lookup(argv[2], read=True)
    if value is None:
        return None
    if type(value) is Stream:
        return b"stream"
    return string_encoding(value)


@subcommand("object", "refcount", 3, "readonly", keys=(2, 2, 1), since="2.2.3")
def object_refcount(ctx: Ctx, argv):
    """OBJECT REFCOUNT key"""
    value = ctx.lookup(argv[2], read=True)
    if value is None:
        return None
    if type(value) is bytes:
        n = _as_redis_int(value)
        if n is not None and 0 <= n < _SHARED_INTEGERS:
            return _SHARED_REFCOUNT
    return 1


_POLICY_SWITCH_NOTE = ("Please note that when switching between policies at runtime LRU and LFU "
                       "data will take some time to adjust.")


def _lfu_policy(ctx: Ctx) -> bool:
    return ctx.config["maxmemory-policy"].endswith("-lfu")


@subcommand("object", "idletime", 3, "readonly", keys=(2, 2, 1), since="2.2.3")
def object_idletime(ctx: Ctx, argv):
    """OBJECT IDLETIME key"""
    value = ctx.lookup(argv[2], read=True)
    if value is None:
        return None
    if _lfu_policy(ctx):
        raise CommandError("ERR An LFU maxmemory policy is selected, idle time not tracked. "
                           + _POLICY_SWITCH_NOTE)
    # No per-key access clock is kept (no policy evicts), so no idle time is known.
    return 0


@subcommand("object", "freq", 3, "readonly", keys=(2, 2, 1), since="4.0.0")
def object_freq(ctx: Ctx, argv):
    """OBJECT FREQ key"""
    value = ctx.lookup(argv[2], read=True)
    if value is None:
        return None
    if not _lfu_policy(ctx):
        raise CommandError("ERR An LFU maxmemory policy is not selected, access frequency not "
                           "tracked. " + _POLICY_SWITCH_NOTE)
    return 0   # no access counter is kept: every policy behaves as noeviction


@subcommand("object", "help", 2, "loading stale", since="6.2.0")
def object_help(ctx: Ctx, argv):
    """OBJECT HELP"""
    return [b"OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            b"ENCODING <key>",
            b"    Return the kind of internal representation used in order to store the value",
            b"    associated with a <key>.",
            b"FREQ <key>",
            b"    Return the access frequency index of the <key>. The returned integer is",
            b"    proportional to the logarithm of the recent access frequency of the key.",
            b"IDLETIME <key>",
            b"    Return the idle time of the <key>, that is the approximated number of",
            b"    seconds elapsed since the last access to the key.",
            b"REFCOUNT <key>",
            b"    Return the number of references of the value associated with the specified",
            b"    <key>.",
            b"HELP", b"    Prints this help."]


# ---------------------------------------------------------------------------
# CONFIG REWRITE (the command itself is registered in admin.py)
# ---------------------------------------------------------------------------

REWRITE_MARKER = "# Generated by CONFIG REWRITE"


def _directive_of(line: str) -> str | None:
    words = line.strip().split(None, 1)
    if not words or words[0].startswith("#"):
        return None
    name = words[0].lower()
    return {"slaveof": "replicaof"}.get(name, name)


def _config_line(config, name: str) -> str:
    value = config.rewrite_form(name)
    # Space-separated lists (save, bind, ...) stay bare: the loader joins the words.
    if value == "" or any(ch in value for ch in "\"'\\#"):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        return f'{name} "{escaped}"'
    return f"{name} {value}"


def rewrite_config_file(config) -> None:
    """Redis's CONFIG REWRITE: the file keeps its comments and order; directives in it
    are rewritten in place (duplicates dropped), directives that differ from their
    default and are not in it are appended under REWRITE_MARKER.  Atomic: temp file,
    fsync, rename, fsync of the directory."""
    path = config.file
    with open(path, encoding="utf-8") as f:
        old_lines = f.read().splitlines()
    out: list[str] = []
    written: set[str] = set()
    for line in old_lines:
        name = _directive_of(line)
        if name is None or name not in DIRECTIVES:
            out.append(line)
            continue
        if name in written:
            continue              # a later duplicate: the first one carries the value
        written.add(name)
        out.append(_config_line(config, name))
    added = [_config_line(config, name) for name, d in DIRECTIVES.items()
             if name not in written and config.values[name] != d.parse(d.default)]
    if added:
        # As Redis: the marker is written once; later rewrites append below it.
        if not any(line.strip() == REWRITE_MARKER for line in out):
            out.append(REWRITE_MARKER)
        out += added
    text = "\n".join(out) + "\n"
    # The rewritten file keeps the permissions the operator gave it.
    replace_file(path, text.encode("utf-8"), mode=os.stat(path).st_mode & 0o7777)
    fsync_dir(os.path.dirname(os.path.abspath(path)))
