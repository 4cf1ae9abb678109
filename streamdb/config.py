"""Configuration: streamdb.conf (redis.conf syntax), command-line overrides, CONFIG GET/SET.

Every directive is declared once in ``DIRECTIVES`` with its type, default and a
one-line description; ``streamdb.conf`` documents the same list and a test keeps
the two in step.  Values are stored parsed (ints, bools, strings) and rendered
back as Redis does for CONFIG GET.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, Callable

from .glob import glob_matcher

__all__ = ["ALIASES", "Config", "ConfigError", "DIRECTIVES", "Directive", "directive", "parse_memory"]


class ConfigError(ValueError):
    pass


_UNITS = {"k": 1000, "kb": 1024, "m": 1000**2, "mb": 1024**2, "g": 1000**3, "gb": 1024**3}


def parse_memory(text: str) -> int:
    t = text.strip().lower()
    for unit in ("kb", "mb", "gb", "k", "m", "g"):
        if t.endswith(unit):
            num = t[: -len(unit)]
            if not num.lstrip("-").isdigit():
                raise ConfigError(f"argument must be a memory value")
            return int(num) * _UNITS[unit]
    if not t.lstrip("-").isdigit():
        raise ConfigError("argument must be a memory value")
    return int(t)


def _parse_bool(text: str) -> bool:
    t = text.lower()
    if t == "yes":
        return True
    if t == "no":
        return False
    raise ConfigError("argument must be 'yes' or 'no'")


def _parse_int(lo: int, hi: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise ConfigError("argument couldn't be parsed into an integer") from None
        if not lo <= v <= hi:
            raise ConfigError(f"argument must be between {lo} and {hi} inclusive")
        return v
    return parse


def _parse_dirname(name: str) -> Callable[[str], str]:
    """A directory name under ``dir``, as Redis takes appenddirname and backupdirname."""
    def parse(text: str) -> str:
        if not text or "/" in text or text in (".", ".."):
            raise ConfigError(f"{name} can't be a path, just a dirname")
        return text
    return parse


def _parse_clamped(lo: int, hi: int) -> Callable[[str], int]:
    """An integer Redis takes whatever its size and brings within [lo, hi] (hz)."""
    parse_any = _parse_int(-2**63, 2**63 - 1)

    def parse(text: str) -> int:
        return min(max(parse_any(text), lo), hi)
    return parse


def _parse_percentiles(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(p) for p in text.split())
    except ValueError:
        raise ConfigError("latency-tracking-info-percentiles must be a list of numbers") from None
    if any(not 0.0 <= p <= 100.0 for p in values):
        raise ConfigError("latency-tracking-info-percentiles parameters should sit between [0.0,100.0]")
    return values


# notify-keyspace-events: each class letter's bit, Redis's values (server.h NOTIFY_*).
# K and E say where an event is published (__keyspace@<db>__:<key>, __keyevent@<db>__:
# <event>); the others which events are.
KEYSPACE_EVENT_BITS = {"K": 1 << 0, "E": 1 << 1, "g": 1 << 2, "$": 1 << 3, "l": 1 << 4,
                       "s": 1 << 5, "h": 1 << 6, "z": 1 << 7, "x": 1 << 8, "e": 1 << 9,
                       "t": 1 << 10, "m": 1 << 11, "d": 1 << 12, "n": 1 << 13}
_EVENT_CLASSES = "g$lshzxetd"     # what "A" stands for, in Redis's order
_ALL_EVENT_CLASSES = sum(KEYSPACE_EVENT_BITS[ch] for ch in _EVENT_CLASSES)


def _parse_keyspace_events(text: str) -> int:
    """notify-keyspace-events as Redis's flag bits (KEYSPACE_EVENT_BITS)."""
    if any(ch not in "Ag$lshzxeKEtmdn" for ch in text):
        raise ConfigError("Invalid event class character. Use 'Ag$lshzxeKEtmdn'.")
    return sum(bit for ch, bit in KEYSPACE_EVENT_BITS.items()
               if ch in text or (ch in _EVENT_CLASSES and "A" in text))


def _render_keyspace_events(flags: int) -> str:
    """The flags in Redis's canonical spelling (keyspaceEventsFlagsToString: what CONFIG
    GET shows).  As there, "A" stands for every class it covers and hides "n"."""
    if flags & _ALL_EVENT_CLASSES == _ALL_EVENT_CLASSES:
        classes = "A"
    else:
        classes = "".join(ch for ch in _EVENT_CLASSES + "n" if flags & KEYSPACE_EVENT_BITS[ch])
    return classes + "".join(ch for ch in "KEm" if flags & KEYSPACE_EVENT_BITS[ch])


def _render_percentiles(values: tuple[float, ...]) -> str:
    return " ".join(f"{p:g}" for p in values)


class _parse_mem:
    """A memory size directive's parser (``512mb``); CONFIG REWRITE writes such a value
    back with a unit (``format_memory``), as Redis does."""

    def __init__(self, lo: int = 0, hi: int = 2**63 - 1) -> None:
        self.lo, self.hi = lo, hi

    def __call__(self, text: str) -> int:
        v = parse_memory(text)
        if not self.lo <= v <= self.hi:
            raise ConfigError(f"argument must be between {self.lo} and {self.hi} inclusive")
        return v


def format_memory(n: int) -> str:
    """Redis's rewriteConfigFormatMemory: the largest of gb, mb, kb that divides ``n``."""
    for unit, size in (("gb", 1024 ** 3), ("mb", 1024 ** 2), ("kb", 1024)):
        if n and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def _parse_enum(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        t = text.lower()
        if t not in choices:
            raise ConfigError("argument(s) must be one of the following: " + ", ".join(choices))
        return t
    return parse


def _parse_save(text: str) -> str:
    parts = text.split()
    if len(parts) % 2:
        raise ConfigError("Invalid save parameters")
    for p in parts:
        if not p.isdigit():
            raise ConfigError("Invalid save parameters")
    return " ".join(parts)


def _parse_version(text: str) -> str:
    parts = text.split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ConfigError("argument must be a version: <major>.<minor>.<patch>")
    return text


def _render_bool(v: bool) -> str:
    return "yes" if v else "no"


# client-output-buffer-limit: "<class> <hard> <soft> <soft seconds>" groups, as in
# Redis; the parsed value maps each class given to (hard, soft, seconds) and CONFIG
# SET merges it into the current one (classes not named keep their limits).
_OBUF_CLASSES = {"normal": "normal", "replica": "replica", "slave": "replica", "pubsub": "pubsub"}


def _parse_obuf_limits(text: str) -> dict[str, tuple[int, int, int]]:
    parts = text.split()
    if not parts or len(parts) % 4:
        raise ConfigError("Wrong number of arguments in buffer limit configuration.")
    limits = {}
    for i in range(0, len(parts), 4):
        cls = _OBUF_CLASSES.get(parts[i].lower())
        if cls is None:
            raise ConfigError("Invalid client class specified in buffer limit configuration.")
        try:
            hard, soft = parse_memory(parts[i + 1]), parse_memory(parts[i + 2])
            seconds = int(parts[i + 3])
        except (ConfigError, ValueError):
            hard = soft = seconds = -1
        if min(hard, soft, seconds) < 0:
            raise ConfigError("Error in hard, soft or soft_seconds setting in buffer limit configuration.")
        limits[cls] = (hard, soft, seconds)
    return limits


def _render_obuf_limits(limits: dict[str, tuple[int, int, int]]) -> str:
    return " ".join(f"{'slave' if cls == 'replica' else cls} {h} {s} {sec}"
                    for cls, (h, s, sec) in limits.items())


def _parse_tls_protocols(text: str) -> str:
    names = {"tlsv1": "TLSv1", "tlsv1.1": "TLSv1.1", "tlsv1.2": "TLSv1.2", "tlsv1.3": "TLSv1.3"}
    try:
        return " ".join(names[p.lower()] for p in text.split())
    except KeyError as e:
        raise ConfigError(f"Invalid tls-protocols specified: {e.args[0]}") from None


@dataclass
class Directive:
    name: str
    default: str
    parse: Callable[[str], Any]
    doc: str
    mutable: bool = True
    render: Callable[[Any], str] = str
    # merge(current, parsed) -> value, for directives a CONFIG SET only amends.
    merge: Callable[[Any, Any], Any] | None = None


def _d(name, default, parse, doc, mutable=True, render=str, merge=None) -> Directive:
    return Directive(name, default, parse, doc, mutable, render, merge)


_S = str
DIRECTIVES: dict[str, Directive] = {d.name: d for d in [
    # -- network
    _d("port", "6379", _parse_int(0, 65535), "TCP port to listen on (0 = no TCP listener).", False),
    _d("bind", "127.0.0.1", _S, "Space-separated addresses to listen on.", False),
    _d("protected-mode", "yes", _parse_bool, "Refuse non-loopback clients when no password is set.", True, _render_bool),
    _d("tcp-backlog", "511", _parse_int(0, 65535), "listen() backlog.", False),
    _d("timeout", "0", _parse_int(0, 2**31 - 1), "Close a client idle this many seconds (0 = never)."),
    _d("tcp-keepalive", "300", _parse_int(0, 2**31 - 1), "TCP keepalive interval in seconds."),
    _d("maxclients", "10000", _parse_int(1, 2**31 - 1), "Maximum number of connected clients."),
    # -- tls (tls.py)
    _d("tls-port", "0", _parse_int(0, 65535), "TLS port to listen on (0 = no TLS listener).", False),
    _d("tls-cert-file", "", _S, "Server certificate (PEM); also the client certificate of a TLS replica link.", False),
    _d("tls-key-file", "", _S, "Private key of tls-cert-file (PEM).", False),
    _d("tls-ca-cert-file", "", _S, "CA certificates (PEM) that client certificates and a TLS primary are checked against.", False),
    _d("tls-ca-cert-dir", "", _S, "Directory of CA certificates (c_rehash layout), as tls-ca-cert-file.", False),
    _d("tls-auth-clients", "yes", _parse_enum("yes", "no", "optional"), "Client certificates: yes = required, optional = checked when sent, no = not asked for.", False),
    _d("tls-protocols", "", _parse_tls_protocols, "TLS versions allowed, e.g. \"TLSv1.2 TLSv1.3\" (empty = TLSv1.2 and TLSv1.3).", False),
    _d("tls-replication", "no", _parse_bool, "A replica connects to its primary over TLS (replicaof names the primary's tls-port).", True, _render_bool),
    # -- general
    _d("daemonize", "no", _parse_bool, "Not supported: run under a supervisor instead.", False, _render_bool),
    _d("pidfile", "", _S, "Write the process id to this file when set (removed at shutdown).", False),
    _d("loglevel", "notice", _parse_enum("debug", "verbose", "notice", "warning"), "Log verbosity."),
    _d("logfile", "", _S, "Log file; empty logs to standard output. SIGHUP reopens it (logrotate).", False),
    _d("syslog-enabled", "no", _parse_bool, "Also send log lines to syslog.", False, _render_bool),
    _d("syslog-ident", "streamdb", _S, "Syslog identity.", False),
    _d("syslog-facility", "local0", _parse_enum("user", *(f"local{i}" for i in range(8))),
       "Syslog facility: user or local0-local7.", False),
    _d("databases", "16", _parse_int(1, 2**31 - 1), "Number of databases (SELECT 0..n-1).", False),
    _d("dir", "./data", _S, "Working directory for the AOF and snapshots."),
    _d("requirepass", "", _S, "Password of the default user (empty = no password)."),
    _d("aclfile", "", _S, "ACL file of users (Redis's format: user <name> <rules>...), loaded at start-up and by ACL LOAD, written by ACL SAVE.", False),
    _d("acl-pubsub-default", "resetchannels", _parse_enum("allchannels", "resetchannels"),
       "The channel permissions a new ACL user starts with: resetchannels (none, Redis 7's default) or allchannels."),
    _d("acllog-max-len", "128", _parse_int(0, 2**63 - 1), "Most entries the ACL LOG keeps."),
    _d("hz", "10", _parse_clamped(1, 500), "Frequency of background tasks (active expiry, timeouts); brought within 1-500 as Redis does."),
    _d("redis-version-compat", "8.10.0", _parse_version,
       "Redis version INFO (redis_version) and HELLO (version) report: the newest Redis whose stream commands StreamDB implements in full. Set another for tools that expect it; streamdb_version always tells StreamDB's own."),
    # -- limits
    _d("proto-max-bulk-len", "536870912", _parse_mem(1024 * 1024), "Largest bulk string a client may send.", True),
    _d("client-query-buffer-limit", "1073741824", _parse_mem(1024 * 1024), "Largest query buffer of one client."),
    _d("maxmemory", "0", _parse_mem(), "Memory limit in bytes (0 = none); writes fail with OOM past it."),
    _d("maxmemory-policy", "noeviction", _parse_enum(
        "volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl", "allkeys-lru",
        "allkeys-lfu", "allkeys-random", "noeviction"),
       "Every policy behaves as noeviction (with a warning): a log never drops data silently."),
    _d("client-output-buffer-limit", "normal 0 0 0 replica 256mb 64mb 60 pubsub 32mb 8mb 60",
       _parse_obuf_limits, "Per class: <class> <hard> <soft> <soft seconds>; 0 = no limit.",
       True, _render_obuf_limits, lambda current, new: {**current, **new}),
    _d("stream-group-max-pel", "0", _parse_int(0, 2**63 - 1), "Most pending entries per consumer group (0 = unlimited)."),
    _d("stream-group-max-consumers", "0", _parse_int(0, 2**63 - 1), "Most consumers per consumer group (0 = unlimited)."),
    # -- streams
    _d("stream-node-max-entries", "100", _parse_int(0, 2**63 - 1), "Entries per stream node before it is sealed."),
    _d("stream-node-max-bytes", "4096", _parse_mem(0), "Approximate bytes per stream node before it is sealed."),
    _d("stream-cache-size", "0", _parse_mem(),
       "Bytes of sealed stream nodes kept in memory once they are in the snapshot (0 = all): "
       "the rest stay on disk and are read back when needed. With a size set, the server "
       "writes a snapshot by itself once a quarter of it is sealed but not yet on disk, "
       "even with save \"\"."),
    _d("stream-idmp-duration", "100", _parse_int(1, 86400), "Seconds an IDMP idempotent id is remembered (XCFGSET overrides per stream)."),
    _d("stream-idmp-maxsize", "100", _parse_int(1, 10000), "Idempotent ids remembered per producer (XCFGSET overrides per stream)."),
    _d("stream-retention-max-age", "0", _parse_int(0, 2**63 - 1), "Retention: milliseconds a stream node is kept after its last entry's id time (0 = no age limit). STREAMDB.RETENTION SET overrides per stream."),
    _d("stream-retention-max-bytes", "0", _parse_mem(), "Retention: node bytes a stream keeps; leading nodes go while it holds more (0 = no size limit). STREAMDB.RETENTION SET overrides per stream."),
    _d("stream-retention-acked", "no", _parse_bool, "Retention: yes = never remove an entry a consumer group of the stream has not both read and acknowledged. STREAMDB.RETENTION SET overrides per stream.", True, _render_bool),
    # -- persistence
    _d("appendonly", "yes", _parse_bool, "Log every write to the append-only file.", True, _render_bool),
    _d("appendfsync", "everysec", _parse_enum("always", "everysec", "no"), "When the AOF is fsynced."),
    _d("appenddirname", "appendonlydir", _S, "Directory (under dir) of AOF segments and manifest.", False),
    _d("appendfilename", "appendonly.aof", _S, "Base name of AOF segment files.", False),
    _d("aof-load-truncated", "yes", _parse_bool, "Start after cutting a torn last command off the AOF.", True, _render_bool),
    _d("auto-aof-rewrite-percentage", "100", _parse_int(0, 2**31 - 1), "Rewrite the AOF when it grew by this percentage."),
    _d("auto-aof-rewrite-min-size", "67108864", _parse_mem(), "Minimum AOF size before an automatic rewrite."),
    _d("aof-use-rdb-preamble", "yes", _parse_bool, "What an AOF rewrite writes as the base segment: yes = each key as a RESTORE of its snapshot (binary) payload, exact and compact; no = the plain commands that rebuild it (XADD with ids, XSETID, XGROUP CREATE, XCLAIM for the PEL, SET), readable, but without PEL entries of deleted entries and IDMP counters, as Redis's command form. Both load whatever the setting.", True, _render_bool),
    _d("aof-preallocate", "16mb", _parse_mem(0, 1 << 40), "appendfsync always: at most this many bytes of zeros are kept written and fsynced ahead of the AOF's end, so that each fsync writes the frames only, not a new file size too (0 = append). The current segment takes up to this much more disk than its logical size.", True),
    _d("dump-payload-format", "streamdb", _parse_enum("streamdb", "redis"), "What DUMP produces (and so MIGRATE sends): streamdb = StreamDB's own payload, exact (retention settings, IDMP state, NACKed entries included); redis = Redis's (a string, or a stream as RDB type 19, version 10), which redis-server 7.0 and later RESTORE. RESTORE accepts both whatever the setting."),
    _d("aof-record-fsync", "no", _parse_bool, "Crash testing: log each fsync boundary to <appenddirname>/fsync.log.", False, _render_bool),
    _d("save", "3600 1 300 100 60 10000", _parse_save, "Snapshot after <seconds> <changes> pairs."),
    _d("dbfilename", "snapshot.lmdb", _S, "Snapshot directory name (an LMDB environment) under dir.", False),
    _d("stop-writes-on-bgsave-error", "yes", _parse_bool, "While background saves fail (a failed fork, a child that failed to write) and save rules are set, write commands get MISCONF until a save succeeds.", True, _render_bool),
    _d("backupdirname", "backupdir", _parse_dirname("backupdirname"), "Directory (under dir) BACKUP START writes into (a name, not a path).", True),
    _d("backup-sealed-ttl", "0", _parse_int(0, 2**31 - 1), "Seconds a sealed BACKUP is kept before it is cleaned up by itself (0 = until BACKUP CLEANUP)."),
    # -- observability
    _d("slowlog-log-slower-than", "10000", _parse_int(-1, 2**63 - 1), "Log commands slower than this many microseconds."),
    _d("slowlog-max-len", "128", _parse_int(0, 2**31 - 1), "Slow log length."),
    _d("latency-tracking", "yes", _parse_bool, "Track per-command latency.", True, _render_bool),
    _d("latency-tracking-info-percentiles", "50 99 99.9", _parse_percentiles,
       "Percentiles INFO latencystats reports per command.", True, _render_percentiles),
    _d("latency-monitor-threshold", "0", _parse_int(0, 2**63 - 1), "LATENCY monitor: record events lasting at least this many milliseconds (0 = off)."),
    _d("metrics-port", "0", _parse_int(0, 65535), "Port of the Prometheus HTTP endpoint GET /metrics (0 = off). Start-up only: CONFIG SET refuses it; restart to change it.", False),
    _d("metrics-bind", "127.0.0.1", _S, "Space-separated addresses the metrics endpoint listens on. Start-up only, as metrics-port.", False),
    _d("metrics-max-series", "10000", _parse_int(1, 2**31 - 1), "Most stream/group/consumer series one scrape exports (the rest are counted as truncated)."),
    # -- web console (streamdb/server/console/, docs/CONSOLE.md)
    _d("console-port", "0", _parse_int(0, 65535), "Port of the web console (0 = off). Start-up only: CONFIG SET refuses it; restart to change it.", False),
    _d("console-bind", "127.0.0.1", _S, "Space-separated addresses the web console listens on. Start-up only, as console-port.", False),
    # -- keyspace notifications (Pub/Sub)
    _d("notify-keyspace-events", "", _parse_keyspace_events, "Keyspace notifications published through Pub/Sub, Redis's classes: K (keyspace channel) and/or E (keyevent channel), with g (generic: del, expire, rename_from, ...), $ (strings), t (streams), x (expired), n (new keys), m (key misses), A (g$lshzxetd); empty = none.", True, _render_keyspace_events),
    # -- replication
    _d("replicaof", "", _S, "<host> <port> of the primary to follow (empty = primary).", False),
    _d("masterauth", "", _S, "Password for the primary."),
    _d("masteruser", "", _S, "User for the primary."),
    _d("replica-read-only", "yes", _parse_bool, "Replicas reject writes.", True, _render_bool),
    _d("repl-backlog-size", "1048576", _parse_mem(16384), "Replication backlog size in bytes."),
    _d("repl-timeout", "60", _parse_int(1, 2**31 - 1), "Seconds before a silent replication link is dropped."),
    _d("repl-ping-replica-period", "10", _parse_int(1, 2**31 - 1), "Seconds between the primary's PINGs to its replicas."),
    _d("replica-priority", "100", _parse_int(0, 2**31 - 1), "Reported as slave_priority: Redis Sentinel promotes the lowest first, never 0."),
    _d("replica-announce-ip", "", _S, "Address a replica tells its primary to list it under (INFO slaveN ip=, ROLE; what Sentinel connects to), for NAT or containers; empty = the connection's source address. Used from the next handshake."),
    _d("replica-announce-port", "0", _parse_int(0, 65535), "Port a replica tells its primary to list it under (0 = its own port). Used from the next handshake."),
    _d("replica-announced", "yes", _parse_bool, "INFO replica_announced: no asks Sentinel not to list this replica (it still follows and may be promoted).", True, _render_bool),
    _d("min-replicas-to-write", "0", _parse_int(0, 2**31 - 1), "A primary refuses writes (NOREPLICAS) while fewer replicas are good: online and acked within min-replicas-max-lag seconds (0 = off)."),
    _d("min-replicas-max-lag", "10", _parse_int(0, 2**31 - 1), "Seconds since its last REPLCONF ACK a good replica may be (0 = min-replicas-to-write off)."),
    # -- accepted for Redis tools and test harnesses (they CONFIG SET these); stored and
    #    returned by CONFIG GET, with no effect on StreamDB unless the doc says otherwise
    *(_d(name, default, parse, "No effect in StreamDB: " + why, mutable, render)
      for name, default, parse, why, mutable, render in [
        ("lazyfree-lazy-eviction", "no", _parse_bool, "nothing is evicted.", True, _render_bool),
        ("lazyfree-lazy-expire", "no", _parse_bool, "keys are freed on the loop.", True, _render_bool),
        ("lazyfree-lazy-server-del", "no", _parse_bool, "keys are freed on the loop.", True, _render_bool),
        ("lazyfree-lazy-user-del", "no", _parse_bool, "keys are freed on the loop.", True, _render_bool),
        ("lazyfree-lazy-user-flush", "no", _parse_bool, "keys are freed on the loop.", True, _render_bool),
        ("replica-lazy-flush", "no", _parse_bool, "keys are freed on the loop.", True, _render_bool),
        ("activedefrag", "no", _parse_bool, "Python's allocator does not defragment.", True, _render_bool),
        ("active-defrag-cycle-min", "1", _parse_int(1, 99), "no active defragmentation.", True, str),
        ("active-defrag-cycle-max", "25", _parse_int(1, 99), "no active defragmentation.", True, str),
        ("active-defrag-ignore-bytes", "104857600", _parse_mem(1), "no active defragmentation.", True, str),
        ("active-defrag-threshold-lower", "10", _parse_int(0, 1000), "no active defragmentation.", True, str),
        ("active-defrag-threshold-upper", "100", _parse_int(0, 1000), "no active defragmentation.", True, str),
        ("active-defrag-max-scan-fields", "1000", _parse_int(1, 2**63 - 1), "no active defragmentation.", True, str),
        ("activerehashing", "yes", _parse_bool, "no incremental rehashing.", True, _render_bool),
        ("active-expire-effort", "1", _parse_int(1, 10), "expiry runs at a fixed effort.", True, str),
        ("dynamic-hz", "yes", _parse_bool, "hz stays as set.", True, _render_bool),
        ("list-max-listpack-size", "-2", _parse_int(-2**31, 2**31 - 1), "there are no lists.", True, str),
        ("list-compress-depth", "0", _parse_int(0, 2**31 - 1), "there are no lists.", True, str),
        ("set-max-intset-entries", "512", _parse_int(0, 2**31 - 1), "there are no sets.", True, str),
        ("set-max-listpack-entries", "128", _parse_int(0, 2**63 - 1), "there are no sets.", True, str),
        ("set-max-listpack-value", "64", _parse_int(0, 2**63 - 1), "there are no sets.", True, str),
        ("hash-max-listpack-entries", "512", _parse_int(0, 2**63 - 1), "there are no hashes.", True, str),
        ("hash-max-listpack-value", "64", _parse_int(0, 2**63 - 1), "there are no hashes.", True, str),
        ("zset-max-listpack-entries", "128", _parse_int(0, 2**63 - 1), "there are no sorted sets.", True, str),
        ("zset-max-listpack-value", "64", _parse_int(0, 2**63 - 1), "there are no sorted sets.", True, str),
        ("hll-sparse-max-bytes", "3000", _parse_mem(0), "there are no HyperLogLogs.", True, str),
        ("busy-reply-threshold", "5000", _parse_int(0, 2**63 - 1), "there are no scripts.", True, str),
        ("key-load-delay", "0", _parse_int(-2**31, 2**31 - 1), "a test hook of Redis's RDB loader.", True, str),
        ("rdb-key-save-delay", "0", _parse_int(-2**31, 2**31 - 1), "a test hook of Redis's RDB saver.", True, str),
        ("loading-process-events-interval-bytes", "2097152", _parse_int(1024, 2**31 - 1), "recovery serves clients between AOF frames.", True, str),
        ("rdbcompression", "yes", _parse_bool, "snapshot nodes are msgpack, never LZF-compressed.", True, _render_bool),
        ("rdbchecksum", "yes", _parse_bool, "every snapshot record is always checksummed.", False, _render_bool),
        ("rdb-save-incremental-fsync", "yes", _parse_bool, "a snapshot is one LMDB transaction.", True, _render_bool),
        ("aof-rewrite-incremental-fsync", "yes", _parse_bool, "the rewrite child fsyncs its base once.", True, _render_bool),
        ("aof-timestamp-enabled", "no", _parse_bool, "AOF frames carry no timestamps.", True, _render_bool),
        ("repl-diskless-sync", "yes", _parse_bool, "full syncs are always diskless.", True, _render_bool),
        ("repl-diskless-sync-delay", "5", _parse_int(0, 2**31 - 1), "a full sync starts at once.", True, str),
        ("repl-diskless-sync-max-replicas", "0", _parse_int(0, 2**31 - 1), "a full sync starts at once.", True, str),
        ("repl-diskless-load", "disabled", _parse_enum("disabled", "on-empty-db", "swapdb"), "a replica receives a full sync into a file and loads it once complete (as disabled).", True, str),
        ("replica-serve-stale-data", "yes", _parse_bool, "a replica serves its data while its link is down or a full sync arrives (as yes).", True, _render_bool),
        ("replica-ignore-maxmemory", "yes", _parse_bool, "nothing is evicted.", True, _render_bool),
        ("maxmemory-samples", "5", _parse_int(1, 64), "nothing is evicted.", True, str),
        ("maxmemory-eviction-tenacity", "10", _parse_int(0, 100), "nothing is evicted.", True, str),
        ("lfu-log-factor", "10", _parse_int(0, 2**31 - 1), "nothing is evicted.", True, str),
        ("lfu-decay-time", "1", _parse_int(0, 2**31 - 1), "nothing is evicted.", True, str),
        ("tracking-table-max-keys", "1000000", _parse_int(0, 2**63 - 1), "there is no client-side caching.", True, str),
        ("set-proc-title", "yes", _parse_bool, "the process title is Python's.", False, _render_bool),
        ("crash-log-enabled", "yes", _parse_bool, "a crash leaves a Python traceback in the log.", True, _render_bool),
        ("crash-memcheck-enabled", "yes", _parse_bool, "no memory test after a crash.", True, _render_bool),
        ("shutdown-timeout", "10", _parse_int(0, 2**31 - 1), "shutdown waits for no replica.", True, str),
        ("shutdown-on-sigterm", "default", _S, "SIGTERM always shuts down cleanly.", True, str),
        ("shutdown-on-sigint", "default", _S, "SIGINT always shuts down cleanly.", True, str),
        ("oom-score-adj", "no", _parse_enum("no", "yes", "relative", "absolute"), "the OOM score is left alone.", True, str),
        ("oom-score-adj-values", "0 200 800", _S, "the OOM score is left alone.", True, str),
        ("propagation-error-behavior", "ignore", _parse_enum("ignore", "panic", "panic-on-replicas"), "effects replay through the same checks.", True, str),
        ("io-threads", "1", _parse_int(1, 128), "one event loop serves every client.", False, str),
        ("cluster-enabled", "no", _parse_bool, "StreamDB is a single node (INFO cluster_enabled:0).", False, _render_bool),
    ]),
]}

# Redis's older names of directives: CONFIG GET/SET and the config file take both,
# and a glob matching an old name lists it too, as redis-server does.
ALIASES = {
    "list-max-ziplist-size": "list-max-listpack-size",
    "hash-max-ziplist-entries": "hash-max-listpack-entries",
    "hash-max-ziplist-value": "hash-max-listpack-value",
    "zset-max-ziplist-entries": "zset-max-listpack-entries",
    "zset-max-ziplist-value": "zset-max-listpack-value",
    "lua-time-limit": "busy-reply-threshold",
    "slave-lazy-flush": "replica-lazy-flush",
    "slave-serve-stale-data": "replica-serve-stale-data",
    "slave-ignore-maxmemory": "replica-ignore-maxmemory",
    "slave-read-only": "replica-read-only",
    "slave-priority": "replica-priority",
    "min-slaves-to-write": "min-replicas-to-write",
    "min-slaves-max-lag": "min-replicas-max-lag",
    "repl-ping-slave-period": "repl-ping-replica-period",
}


def directive(name: str) -> Directive | None:
    """The directive ``name`` (lower case) names, by its own or an older name."""
    return DIRECTIVES.get(ALIASES.get(name, name))


class Config:
    """The live configuration.  ``cfg["port"]`` gives the parsed value."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.file: str | None = None
        for d in DIRECTIVES.values():
            self.values[d.name] = d.parse(d.default)

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def set(self, name: str, raw: str, startup: bool = False) -> None:
        d = directive(name.lower())
        if d is None:
            raise ConfigError(f"Bad directive or wrong number of arguments")
        name = d.name
        if not startup and not d.mutable:
            raise ConfigError("can't set immutable config")
        value = d.parse(raw)
        if d.merge is not None:
            value = d.merge(self.values[name], value)
        self.values[name] = value

    def render(self, name: str) -> str:
        return DIRECTIVES[name].render(self.values[name])

    def rewrite_form(self, name: str) -> str:
        """The value as CONFIG REWRITE writes it: as CONFIG GET renders it, except that
        memory sizes keep a unit (CONFIG GET gives bytes; the file says ``512mb``)."""
        if isinstance(DIRECTIVES[name].parse, _parse_mem):
            return format_memory(self.values[name])
        return self.render(name)

    def matching(self, pattern: str) -> list[tuple[str, str]]:
        matches = glob_matcher(pattern.lower().encode())     # names are ASCII, as Redis's
        return ([(n, self.render(n)) for n in DIRECTIVES if matches(n.encode())] +
                [(old, self.render(n)) for old, n in ALIASES.items() if matches(old.encode())])

    # -- loading ------------------------------------------------------------------

    def load_text(self, text: str, origin: str = "config") -> None:
        for lineno, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            try:
                parts = shlex.split(line)
            except ValueError as e:
                raise ConfigError(f"{origin}:{lineno}: {e}") from None
            name, args = parts[0].lower(), parts[1:]
            try:
                self.set(name, " ".join(args), startup=True)
            except ConfigError as e:
                raise ConfigError(f"{origin}:{lineno}: '{line}': {e}") from None

    def load_file(self, path: str) -> None:
        with open(path, encoding="utf-8") as f:
            self.load_text(f.read(), path)
        self.file = path

    def load_args(self, args: list[str]) -> None:
        """``--port 7000 --save "" --appendfsync always`` as redis-server takes them."""
        i = 0
        while i < len(args):
            a = args[i]
            if not a.startswith("--"):
                raise ConfigError(f"unexpected argument '{a}'")
            name = a[2:]
            vals = []
            i += 1
            while i < len(args) and not args[i].startswith("--"):
                vals.append(args[i])
                i += 1
            try:
                self.set(name, " ".join(vals), startup=True)
            except ConfigError as e:
                raise ConfigError(f"--{name}: {e}") from None
