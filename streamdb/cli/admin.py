"""streamdb-admin: operate streams and consumer groups from the command line.

Subcommands:
  status        one-screen summary: role, version, memory, clients, persistence,
                replicas, top streams by length and by consumer-group lag
  groups        the groups and consumers of one stream: lag, pending, idle times
  group         one group: its lag in entries and in time (info), or move it to a
                time, to the start or to the end (reset; StreamDB only)
  streams       every stream: length, groups, bytes, resident share, retention
  tail          follow a stream like tail -f, or consume it as a group's consumer
  dead-letter   list the entries a group's dead-letter policy moved to a dead-letter
                stream, or replay them into their source streams (StreamDB only)
  claim-idle    hand entries idle longer than a threshold to a live processor
                (XAUTOCLAIM ... JUSTID loop)
  backup        STREAMDB.BACKUP DIR, then wait for it to finish (StreamDB only)
  verify-backup check a backup directory and load it in-process (no server)
  restore       copy a backup into an empty data directory, optionally with the old
                server's later AOF segments (no server)
  import-rdb    send the strings and streams of a Redis dump.rdb to the server as
                RESTORE commands (Redis's payload form)

Who processes what: claim-idle only moves ownership.  It claims idle entries
FOR the consumer named by --consumer, a live worker of the group that reads its
own pending entries (XREADGROUP ... STREAMS key 0) and processes and XACKs
them.  It claims with JUSTID, which does not count as a delivery, so an
entry's delivery count grows only when a processor actually reads it.  A group's
dead-letter policy (STREAMDB.GROUP SET key group MAXDELIVERIES n DEADLETTER dlq)
is applied by the server: an entry already delivered n times that claim-idle
would claim goes to the dead-letter stream instead.

The stream subcommands use only standard Redis commands, so they work against
redis-server as well as StreamDB (streams reads STREAMDB.RETENTION GET where the
server has it); dead-letter reads the entries StreamDB's dead-letter policy writes;
backup and verify-backup are StreamDB's own.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import os
import signal
import sys
import threading
import time

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from ..engine.groups import DEAD_LETTER_FIELDS, NotADeadLetter, split_dead_letter

__all__ = ["main"]


def _text(value) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    return "-" if value is None else str(value)


def _seconds(ms) -> str:
    if ms is None:
        return "-"
    return f"{ms / 1000:.1f}s"


def _next_id(entry_id: bytes) -> str:
    """The smallest stream id after ``entry_id`` (XPENDING's exclusive start, spelled out)."""
    ms, seq = (int(part) for part in entry_id.split(b"-"))
    if seq == 2**64 - 1:
        return f"{ms + 1}-0"
    return f"{ms}-{seq + 1}"


def connect(args, db: int = 0) -> redis.Redis:
    # No client-side retries: redis-py's default waits out about 7 s of
    # back-off before a refused connection surfaces.  A one-shot subcommand
    # fails at once; claim-idle's loop retries on its own, visibly.
    return redis.Redis(host=args.host, port=args.port, password=args.password or None,
                       username=args.user or None, db=db, protocol=2, socket_timeout=10,
                       socket_connect_timeout=5, retry=Retry(NoBackoff(), 0))


# ---------------------------------------------------------------------------
# status
# ---------------------------------------------------------------------------


def scan_streams(r: redis.Redis, limit: int, console: Console) -> tuple[list[dict], bool]:
    """Length and per-group lag of up to ``limit`` streams; (rows, truncated)."""
    keys: list[bytes] = []
    truncated = False
    for key in r.scan_iter(_type="stream", count=1000):
        if len(keys) >= limit:
            truncated = True
            break
        keys.append(key)
    rows = []
    with Progress(console=console, transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task("reading streams", total=len(keys))
        for start in range(0, len(keys), 100):
            batch = keys[start:start + 100]
            pipe = r.pipeline(transaction=False)
            for key in batch:
                pipe.xlen(key)
                pipe.xinfo_groups(key)
            replies = pipe.execute(raise_on_error=False)
            for i, key in enumerate(batch):
                length, groups = replies[2 * i], replies[2 * i + 1]
                if isinstance(length, Exception) or isinstance(groups, Exception):
                    continue       # deleted or retyped since SCAN saw it
                rows.append({"key": key, "length": length, "groups": groups})
            bar.advance(task, len(batch))
    return rows, truncated


def cmd_status(r: redis.Redis, args, console: Console) -> int:
    info = r.info()
    version = info.get("streamdb_version")
    title = f"StreamDB {version}" if version else f"Redis {info.get('redis_version', '?')}"
    summary = Table.grid(padding=(0, 2))
    summary.add_column(style="bold")
    summary.add_column()
    summary.add_row("server", f"{title} at {args.host}:{args.port}, up {info.get('uptime_in_seconds', 0)}s")
    role = info.get("role", "?")
    if role == "slave":
        role += (f" of {info.get('master_host')}:{info.get('master_port')}, "
                 f"link {info.get('master_link_status')}")
    summary.add_row("role", role)
    summary.add_row("memory", str(info.get("used_memory_human", info.get("used_memory", "?"))))
    summary.add_row("clients", f"{info.get('connected_clients', 0)} connected, "
                               f"{info.get('blocked_clients', 0)} blocked")
    aof = "off"
    if info.get("aof_enabled"):
        aof = f"on, last write {info.get('aof_last_write_status', '?')}"
        if "aof_current_size" in info:
            aof += f", {info['aof_current_size']} bytes"
    summary.add_row("aof", aof)
    snapshot = (f"last save {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(info.get('rdb_last_save_time', 0)))}, "
                f"{info.get('rdb_changes_since_last_save', 0)} changes since, "
                f"last status {info.get('rdb_last_bgsave_status', '?')}")
    if info.get("rdb_bgsave_in_progress"):
        snapshot += ", saving now"
    summary.add_row("snapshot", snapshot)
    offset = info.get("master_repl_offset", 0)
    replicas = [info[k] for k in sorted(info) if k.startswith("slave") and k[5:].isdigit()]
    lines = [f"{rep.get('ip')}:{rep.get('port')} {rep.get('state', '')} "
             f"behind {max(offset - int(rep.get('offset', 0)), 0)} bytes, last ack {rep.get('lag', '?')}s ago"
             for rep in replicas]
    summary.add_row("replicas", "\n".join(lines) if lines else "none")
    console.print(summary)

    rows, truncated = scan_streams(r, args.max_streams, console)
    note = f" (first {args.max_streams} streams only)" if truncated else ""
    by_length = Table(title=f"Top streams by length{note}")
    by_length.add_column("stream")
    by_length.add_column("length", justify="right")
    by_length.add_column("groups", justify="right")
    for row in sorted(rows, key=lambda x: -x["length"])[:args.top]:
        by_length.add_row(_text(row["key"]), str(row["length"]), str(len(row["groups"])))
    console.print(by_length)

    by_lag = Table(title=f"Top consumer groups by lag{note}")
    for name in ("stream", "group", "lag", "pending"):
        by_lag.add_column(name, justify="left" if name in ("stream", "group") else "right")
    group_rows = [(row["key"], g) for row in rows for g in row["groups"]]
    # Unknown lag (nil, after deletions) sorts after every known one but is still shown.
    group_rows.sort(key=lambda kg: (kg[1].get("lag") is None, -(kg[1].get("lag") or 0)))
    for key, g in group_rows[:args.top]:
        by_lag.add_row(_text(key), _text(g["name"]), _text(g.get("lag")), str(g["pending"]))
    console.print(by_lag)
    console.print(f"{len(rows)} streams, {len(group_rows)} consumer groups")
    return 0


# ---------------------------------------------------------------------------
# groups
# ---------------------------------------------------------------------------


def oldest_pending_idle_ms(r: redis.Redis, key, group) -> int | None:
    first = r.xpending_range(key, group, "-", "+", 1)
    return first[0]["time_since_delivered"] if first else None


def cmd_groups(r: redis.Redis, args, console: Console) -> int:
    groups = r.xinfo_groups(args.key)
    table = Table(title=f"Consumer groups of {args.key}")
    for name in ("group / consumer", "lag", "pending", "oldest pending idle", "idle",
                 "last delivered", "entries read"):
        table.add_column(name, justify="left" if name == "group / consumer" else "right")
    for g in groups:
        table.add_row(_text(g["name"]), _text(g.get("lag")), str(g["pending"]),
                      _seconds(oldest_pending_idle_ms(r, args.key, g["name"])), "",
                      _text(g.get("last-delivered-id")), _text(g.get("entries-read")))
        for c in r.xinfo_consumers(args.key, g["name"]):
            table.add_row(f"  {_text(c['name'])}", "", str(c["pending"]), "", _seconds(c["idle"]), "", "")
    console.print(table)
    if not groups:
        console.print(f"{args.key} has no consumer groups")
    return 0


# ---------------------------------------------------------------------------
# group info, group reset (STREAMDB.GROUP INFO / SETID)
# ---------------------------------------------------------------------------


def unix_ms(text: str) -> int:
    """An ISO 8601 time with its zone (2026-11-27T09:00:00Z, ...+01:00) as unix ms.

    A time without a zone is refused: on a server in another zone it would name
    another instant, and a group moved to the wrong hour re-delivers or skips an hour."""
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not an ISO 8601 time: {text!r} (e.g. 2026-11-27T09:00:00Z)") from None
    if when.tzinfo is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} has no time zone: add Z (UTC) or an offset such as +01:00")
    return round(when.timestamp() * 1000)


def group_info(r: redis.Redis, key, group) -> dict[str, object]:
    """STREAMDB.GROUP INFO as a dict of text names (the reply is a flat list under RESP2)."""
    flat = r.execute_command("STREAMDB.GROUP", "INFO", key, group)
    return {_text(k): v for k, v in zip(flat[::2], flat[1::2])}


def _print_group(console: Console, key: str, info: dict[str, object]) -> None:
    table = Table(title=f"Consumer group {_text(info['name'])} of {key}", show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    for name, value in info.items():
        if name == "name":
            continue
        table.add_row(name, _seconds(value) if name.endswith("-ms") else _text(value))
    console.print(table)


def cmd_group_info(r: redis.Redis, args, console: Console) -> int:
    _print_group(console, args.key, group_info(r, args.key, args.group))
    return 0


def cmd_group_reset(r: redis.Redis, args, console: Console) -> int:
    if args.to_time is not None:
        where = ["TIME", str(args.to_time)]
    else:
        where = ["EARLIEST" if args.earliest else "LATEST"]
    r.execute_command("STREAMDB.GROUP", "SETID", args.key, args.group, *where)
    info = group_info(r, args.key, args.group)
    console.print(f"{args.group} of {args.key} now reads after "
                  f"{_text(info['last-delivered-id'])}: {_text(info['lag'])} entries to read, "
                  f"entries-read {_text(info['entries-read'])}", highlight=False)
    return 0


# ---------------------------------------------------------------------------
# dead-letter
# ---------------------------------------------------------------------------


def _raw_ranges(r: redis.Redis) -> None:
    """XRANGE and XREVRANGE replies as the server sends them: each entry's fields a flat
    list (redis-py's dict would merge a repeated field name).  Pipelines made from
    ``r`` afterwards inherit it."""
    for name in ("XRANGE", "XREVRANGE"):
        r.set_response_callback(name, lambda reply, **options: reply)


def _flat_range(r: redis.Redis, key, start, end, count: int) -> list[tuple[bytes, list[bytes]]]:
    """XRANGE of at most ``count`` entries, each (id, flat field list); after _raw_ranges."""
    reply = r.execute_command("XRANGE", key, start, end, "COUNT", count)
    return [(entry[0], list(entry[1])) for entry in reply]


def cmd_dead_letter_list(r: redis.Redis, args, console: Console) -> int:
    _raw_ranges(r)
    total = r.xlen(args.dlq)
    table = Table(title=f"Dead letters in {_text(args.dlq)} ({total})")
    for name in ("id", "source", "source id", "group", "consumer", "deliveries", "fields"):
        table.add_column(name)
    for entry_id, fields in _flat_range(r, args.dlq, "-", "+", args.count):
        try:
            where, original = split_dead_letter(fields)
        except NotADeadLetter as e:
            table.add_row(_text(entry_id), "-", "-", "-", "-", "-", f"({e})")
            continue
        shown = " ".join(f"{_text(f)}={_text(v)}" for f, v in zip(original[::2], original[1::2]))
        table.add_row(_text(entry_id), *(_text(where[f]) for f in DEAD_LETTER_FIELDS), shown)
    console.print(table)
    if total > args.count:
        console.print(f"... and {total - args.count} more (--count)")
    return 0


def replay_one(r: redis.Redis, dlq, entry_id) -> str:
    """Append dead letter ``entry_id``'s original fields to its source stream and
    remove it from ``dlq``, both or neither: MULTI under WATCH of both keys (a
    concurrent replay or delete of the same entry makes this one see it gone, and
    the source cannot turn into another type, whose XADD error would not stop the
    XDEL).  Returns the new id, or why nothing was done."""
    with r.pipeline(transaction=True) as tx:
        while True:
            try:
                tx.watch(dlq)
                found = tx.execute_command("XRANGE", dlq, entry_id, entry_id)
                if not found:
                    return "not found"
                try:
                    where, original = split_dead_letter(list(found[0][1]))
                except NotADeadLetter as e:
                    return str(e)
                source = where[DEAD_LETTER_FIELDS[0]]
                tx.watch(source)
                if tx.type(source) not in (b"stream", b"none"):
                    return f"not replayed: {_text(source)} is no longer a stream"
                tx.multi()
                tx.execute_command("XADD", source, "*", *original)
                tx.xdel(dlq, entry_id)
                new_id, _ = tx.execute()
                return f"-> {_text(source)} {_text(new_id)}"
            except redis.WatchError:
                continue           # a key changed meanwhile: look again


def _all_dead_letters(r: redis.Redis, dlq, batch: int = 100):
    """The ids in ``dlq`` up to its last entry now (entries dead-lettered again while
    the replay runs wait for the next one: a poison entry cannot keep it going)."""
    last = r.execute_command("XREVRANGE", dlq, "+", "-", "COUNT", 1)
    if not last:
        return
    end, start = last[0][0], "-"
    while True:
        entries = _flat_range(r, dlq, start, end, batch)
        for entry_id, _ in entries:
            yield entry_id
        if len(entries) < batch:
            return
        start = _next_id(entries[-1][0])


def cmd_dead_letter_replay(r: redis.Redis, args, console: Console) -> int:
    if bool(args.ids) == args.all:
        return _error("name the entries to replay, or --all")
    _raw_ranges(r)
    ids = _all_dead_letters(r, args.dlq) if args.all else args.ids
    replayed = failed = 0
    for entry_id in ids:
        outcome = replay_one(r, args.dlq, entry_id)
        if outcome.startswith("->"):
            replayed += 1
        else:
            failed += 1
        console.print(f"{_text(entry_id)} {outcome}", highlight=False)
    console.print(f"{replayed} replayed" + (f", {failed} not replayed" if failed else ""))
    return 1 if failed else 0


# ---------------------------------------------------------------------------
# claim-idle
# ---------------------------------------------------------------------------


class StopFlag:
    """Set by SIGINT/SIGTERM; sleeping on it wakes up at once."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda signum, frame: self.event.set())

    @property
    def stopped(self) -> bool:
        return self.event.is_set()

    def sleep(self, seconds: float) -> None:
        self.event.wait(seconds)


def claim_pass(r: redis.Redis, args, console: Console, stop: StopFlag) -> int:
    """One walk of the whole PEL with XAUTOCLAIM; returns the number of entries claimed.

    JUSTID: claiming is not a delivery (Redis leaves the delivery count alone),
    so passes over entries the processor has not read yet do not push them
    towards the group's dead-letter policy.  The processor's own read of its
    pending entries counts the delivery.
    """
    cursor, claimed = "0-0", 0
    while not stop.stopped:
        reply = r.execute_command("XAUTOCLAIM", args.key, args.group, args.consumer, args.min_idle,
                                  cursor, "COUNT", args.count, "JUSTID")
        cursor, ids = reply[0], reply[1]
        deleted = reply[2] if len(reply) > 2 else []
        if ids:
            claimed += len(ids)
            console.print(f"claimed {len(ids)}: " + " ".join(_text(i) for i in ids), highlight=False)
        if deleted:
            console.print(f"dropped {len(deleted)} deleted entries from the PEL: "
                          + " ".join(_text(d) for d in deleted), highlight=False)
        if cursor in (b"0-0", "0-0"):
            break
    return claimed


def cmd_claim_idle(r: redis.Redis, args, console: Console) -> int:
    stop = StopFlag()
    stop.install()
    # redis-py's xautoclaim(justid=True) keeps only the claimed ids of the
    # reply; claim_pass needs the cursor and the deleted ids too.
    r.set_response_callback("XAUTOCLAIM", lambda reply, **options: reply)
    backoff = 0.0
    passes = 0
    console.print(f"claiming entries of {args.key} / {args.group} idle for {args.min_idle} ms "
                  f"or more into consumer {args.consumer}", highlight=False)
    while not stop.stopped:
        try:
            claimed = claim_pass(r, args, console, stop)
            backoff = 0.0
            passes += 1
        except (redis.ConnectionError, redis.TimeoutError) as e:
            if args.once:
                raise       # one pass means one attempt: main reports it and exits 2
            backoff = min(max(backoff * 2, 0.5), args.max_backoff)
            console.print(f"connection lost ({e}); retrying in {backoff:.1f}s", highlight=False)
            r.connection_pool.disconnect()
            stop.sleep(backoff)
            continue
        except redis.ResponseError as e:
            # Before the first pass an error is a mistake in the arguments (main
            # reports it); later it is the server's state changing under us (a
            # restart without the group, a failover), which a worker outlives.
            if not passes:
                raise
            backoff = min(max(backoff * 2, 0.5), args.max_backoff)
            console.print(f"error: {e}; retrying in {backoff:.1f}s", highlight=False)
            stop.sleep(backoff)
            continue
        if args.once:
            console.print(f"done: {claimed} claimed")
            return 0
        console.print(f"pass done: {claimed} claimed; next in {args.interval}s", highlight=False)
        stop.sleep(args.interval)
    console.print("stopped by signal")
    return 0


# ---------------------------------------------------------------------------
# streams
# ---------------------------------------------------------------------------

STREAMS_BATCH = 200      # keys per SCAN page and per pipelined round trip
_SIZE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")
_DURATION_UNITS = ((86_400_000, "d"), (3_600_000, "h"), (60_000, "min"), (1000, "s"))


def _word(value) -> str:
    """``value`` as one whitespace-free word of an output line: as it is when it is
    plain printable text, else double-quoted with backslash escapes (as redis-cli
    quotes), so that a key or value with spaces or newlines never splits a line and
    a field name with "=" never blurs tail's field=value."""
    text = _text(value)
    if text and text.isprintable() and not any(c in text for c in ' "\\='):
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + "".join(c if c.isprintable() else repr(c)[1:-1] for c in escaped) + '"'


def _size(n: int) -> str:
    """Bytes in binary units: "812 B", "1.5 MiB"."""
    if n < 1024:
        return f"{n} B"
    value = n / 1024
    for unit in _SIZE_UNITS[1:-1]:
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} {_SIZE_UNITS[-1]}"


def _duration(ms: int) -> str:
    """Milliseconds in the largest whole unit: "7d", "90s", "1500ms"."""
    for unit_ms, name in _DURATION_UNITS:
        if ms % unit_ms == 0:
            return f"{ms // unit_ms}{name}"
    return f"{ms}ms"


def retention_text(policy: dict) -> str:
    """STREAMDB.RETENTION GET's policy in force, short: "age 1d, 1.0 GiB, acked",
    "(default)" when it is the server's, "none" without limits."""
    limits = []
    if policy[b"max-age"]:
        limits.append(f"age {_duration(policy[b'max-age'])}")
    if policy[b"max-bytes"]:
        limits.append(_size(policy[b"max-bytes"]))
    if not limits:
        return "none"
    if policy[b"acked"]:
        limits.append("acked")
    return ", ".join(limits) + ("" if policy[b"own-settings"] else " (default)")


def _flat_map(reply: list) -> dict:
    """A RESP2 map reply (a flat field, value array) as a dict."""
    return dict(zip(reply[0::2], reply[1::2]))


def stream_batches(r: redis.Redis, match: str | None, streamdb: bool):
    """Yield the streams of the connection's database a pipelined batch at a time (SCAN
    ... TYPE stream), each stream a dict: key, length, groups, bytes, resident (bytes,
    None when the server does not say) and retention (text).

    On StreamDB the bytes are the stream's node bytes and the resident part of them
    (STREAMDB.RETENTION GET); on Redis the bytes are MEMORY USAGE, all resident.
    XINFO STREAM is sent as two words so that redis-py hands back the flat reply: its
    own parsing of the first and last entries would cost more than the rest."""
    keys = r.scan_iter(match=match, count=STREAMS_BATCH, _type="stream")
    while True:
        batch = list(itertools.islice(keys, STREAMS_BATCH))
        if not batch:
            return
        pipe = r.pipeline(transaction=False)
        for key in batch:
            pipe.execute_command("XINFO", "STREAM", key)
            if streamdb:
                pipe.execute_command("STREAMDB.RETENTION", "GET", key)
            else:
                pipe.memory_usage(key)
        replies = pipe.execute(raise_on_error=False)
        rows = []
        for key, info, size in zip(batch, replies[0::2], replies[1::2]):
            if _gone_since_scan(info) or _gone_since_scan(size):
                continue
            info = _flat_map(info)
            row = {"key": key, "length": info[b"length"], "groups": info[b"groups"]}
            if streamdb:
                policy = _flat_map(size)
                row.update(bytes=policy[b"bytes"], resident=policy[b"resident-bytes"],
                           retention=retention_text(policy))
            else:
                row.update(bytes=size or 0, resident=None, retention="-")
            rows.append(row)
        yield rows


def _gone_since_scan(reply) -> bool:
    """True when ``reply`` says the key was deleted or retyped after SCAN saw it; any
    other error (NOPERM, a server that refuses) is raised, not taken for an absent key."""
    if not isinstance(reply, Exception):
        return False
    text = str(reply)
    if "no such key" in text.lower() or text.startswith("WRONGTYPE"):
        return True
    raise reply


def _resident_share(row: dict) -> str:
    if row["resident"] is None:
        return "-"
    if not row["bytes"]:
        return "100%"
    return f"{100 * row['resident'] / row['bytes']:.0f}%"


STREAM_COLUMNS = ("stream", "length", "groups", "bytes", "resident", "retention")


def cmd_streams(r: redis.Redis, args, console: Console) -> int:
    """A table on a terminal; otherwise plain lines (a header, then one line a stream,
    written as each batch arrives, bytes as numbers) that scripts can split."""
    streamdb = "streamdb_version" in r.info("server")
    batches = stream_batches(r, args.match, streamdb)
    if not console.is_terminal:
        print(" ".join(STREAM_COLUMNS))
        for rows in batches:
            sys.stdout.write("".join(
                " ".join([_word(row["key"]), str(row["length"]), str(row["groups"]), str(row["bytes"]),
                          _resident_share(row), _word(row["retention"])]) + "\n" for row in rows))
            sys.stdout.flush()
        return 0
    table = Table(title="Streams")
    for name in STREAM_COLUMNS:
        table.add_column(name, justify="left" if name in ("stream", "retention") else "right")
    count = entries = total = 0
    with console.status("reading streams"):
        collected = sorted((row for rows in batches for row in rows), key=lambda row: row["key"])
    for row in collected:
        table.add_row(_text(row["key"]), str(row["length"]), str(row["groups"]), _size(row["bytes"]),
                      _resident_share(row), row["retention"])
        count, entries, total = count + 1, entries + row["length"], total + row["bytes"]
    console.print(table)
    console.print(f"{count} streams, {entries} entries, {_size(total)}", highlight=False)
    return 0


# ---------------------------------------------------------------------------
# tail
# ---------------------------------------------------------------------------

TAIL_BLOCK_MS = 1000     # one blocking read; short, so that a lost server shows soon
TAIL_BATCH = 100         # entries per read at most
_MAX_SEQ = 2**64 - 1


def start_after_time(text: str) -> str:
    """The exclusive XREAD start id for entries at or after ISO 8601 time ``text``
    (UTC when it names no offset): the last id of the millisecond before it."""
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    ms = int(when.timestamp() * 1000)
    if ms <= 0:
        return "0-0"
    return f"{ms - 1}-{_MAX_SEQ}"


def entry_line(entry_id, fields) -> str:
    """One entry as one line: its id, then field=value words."""
    words = [_text(entry_id)]
    if fields is None:          # a pending entry deleted from the stream
        words.append("(deleted)")
    else:
        words += [f"{_word(f)}={_word(v)}" for f, v in fields.items()]
    return " ".join(words)


def _stream_end(r: redis.Redis, key: str) -> str:
    """The id a follower starts after: the stream's last id, so that what is added
    from now on is shown; 0-0 for a stream that does not exist yet."""
    try:
        return _text(r.xinfo_stream(key)["last-generated-id"])
    except redis.ResponseError as e:
        if "no such key" in str(e).lower():
            return "0-0"
        raise


def _read_batch(r: redis.Redis, args, after: str, want: int) -> list:
    """The next entries: XREADGROUP > (consuming) with --group, else XREAD after ``after``."""
    if args.group:
        reply = r.xreadgroup(args.group, args.consumer, {args.key: ">"}, count=want,
                             block=TAIL_BLOCK_MS, noack=False)
    else:
        reply = r.xread({args.key: after}, count=want, block=TAIL_BLOCK_MS)
    return reply[0][1] if reply else []


def cmd_tail(r: redis.Redis, args, console: Console) -> int:
    """Print entries as they arrive until --count entries were shown or a signal.

    With --group every batch is printed, flushed, and only then acknowledged (unless
    --no-ack): an entry acked has been written out."""
    if bool(args.group) != bool(args.consumer):
        return _error("--group and --consumer go together")
    if args.no_ack and not args.group:
        return _error("--no-ack is for --group")
    if args.group and (args.from_id or args.from_time):
        return _error("--from and --from-time follow the stream; with --group the group's "
                      "position decides")
    # Ctrl-C and SIGTERM end the follow cleanly, even when SIGINT was inherited ignored
    # (a backgrounded start).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    shown = 0
    try:
        after = args.from_time or args.from_id
        if after in (None, "$"):
            # XREAD's "$" again on every read would skip what arrives between two reads.
            after = _stream_end(r, args.key)
        while args.count is None or shown < args.count:
            want = TAIL_BATCH if args.count is None else min(TAIL_BATCH, args.count - shown)
            entries = _read_batch(r, args, after, want)
            if not entries:
                continue
            sys.stdout.write("".join(entry_line(eid, fields) + "\n" for eid, fields in entries))
            sys.stdout.flush()
            if args.group and not args.no_ack:
                r.xack(args.key, args.group, *(eid for eid, _ in entries))
            after = _text(entries[-1][0])
            shown += len(entries)
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:
        # The reader went away (| head): stop quietly, as tail does; stdout goes to
        # /dev/null so that the interpreter's last flush does not complain either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def add_stream_tool_parsers(sub, common) -> None:
    """The streams and tail subcommands."""
    ss = sub.add_parser("streams", add_help=False, parents=[common],
                        help="every stream: length, groups, bytes, resident share, retention",
                        description="List every stream of the database (SCAN ... TYPE stream, "
                                    "read in pipelined batches): its length, consumer groups, "
                                    "bytes (on StreamDB the node bytes retention's MAXBYTES "
                                    "counts; on Redis MEMORY USAGE), the share of them resident "
                                    "in memory (the rest is cold, on disk: stream-cache-size) and "
                                    "the retention in force.  On a terminal a table sorted by "
                                    "key; otherwise plain lines, a header first, one stream a line "
                                    "as read, bytes as numbers, keys with spaces quoted.")
    ss.add_argument("--match", default=None, help="only keys matching this glob pattern")
    ss.set_defaults(run=cmd_streams)

    tl = sub.add_parser("tail", add_help=False, parents=[common],
                        help="follow a stream like tail -f (with --group: consume and ack)",
                        description="Print entries of KEY as they are added, one line each: the "
                                    "id, then field=value (quoted when they hold spaces).  Starts "
                                    "after the stream's last entry, after --from ID, or at "
                                    "--from-time (ISO 8601, UTC without an offset).  With --group "
                                    "and --consumer reads as that consumer (XREADGROUP >) and "
                                    "acknowledges each batch once printed (--no-ack: leaves them "
                                    "pending).  Ends on Ctrl-C or after --count entries, exit 0.")
    tl.add_argument("key")
    start = tl.add_mutually_exclusive_group()
    start.add_argument("--from", dest="from_id", default=None, metavar="ID",
                       help="show the entries after this id (0: the whole stream)")
    start.add_argument("--from-time", type=start_after_time, default=None, metavar="ISO",
                       help="show the entries from this time on, e.g. 2026-11-27T09:00:00Z")
    tl.add_argument("--group", default=None, help="consume as a member of this consumer group")
    tl.add_argument("--consumer", default=None, help="the consumer's name (with --group)")
    tl.add_argument("--no-ack", action="store_true", help="with --group: do not XACK what is shown")
    tl.add_argument("--count", type=int, default=None, help="stop after this many entries")
    tl.set_defaults(run=cmd_tail)


# ---------------------------------------------------------------------------
# entry point
# ---------------------------------------------------------------------------


CONNECTION_DEFAULTS = {"host": "127.0.0.1", "port": 6379, "password": "", "user": ""}


# ---------------------------------------------------------------------------
# backup, verify-backup
# ---------------------------------------------------------------------------


def _error(message: str) -> int:
    """The one way a subcommand reports a failure: a line on stderr, exit status 1."""
    Console(stderr=True, soft_wrap=True).print(f"error: {message}", highlight=False)
    return 1


def _backup_status(r: redis.Redis) -> dict[str, str]:
    flat = r.execute_command("STREAMDB.BACKUP", "STATUS")
    return {_text(k): _text(v) for k, v in zip(flat[::2], flat[1::2])}


def cmd_backup(r: redis.Redis, args, console: Console) -> int:
    console.print(_text(r.execute_command("STREAMDB.BACKUP", args.dir)), highlight=False)
    phase = None
    while True:
        st = _backup_status(r)
        if st["in_progress"] == "0":
            break
        if st["phase"] != phase:
            phase = st["phase"]
            console.print(f"phase: {phase}", highlight=False)
        time.sleep(args.interval)
    if st["last_status"] != "ok":
        return _error(f"backup failed: {st['last_error']}")
    console.print(f"backup done: {st['last_dir']}, {st['last_bytes']} bytes, {st['last_seconds']} s, "
                  f"consistent at AOF {st['last_aof_segment'] or '-'} offset {st['last_aof_offset']}",
                  highlight=False)
    return 0


def backup_summary(core) -> dict[str, object]:
    """What verify-backup prints of a loaded backup: counts and the DEBUG DIGEST."""
    from ..commands.server import digest_keyspace
    streams = [v for db in core.keyspace.dbs for v in db.data.values() if not isinstance(v, bytes)]
    return {"keys": sum(len(db.data) for db in core.keyspace.dbs), "streams": len(streams),
            "entries": sum(s.length for s in streams),
            "groups": sum(len(s.groups or ()) for s in streams), "digest": digest_keyspace(core)}


def cmd_verify_backup(_r, args, console: Console) -> int:
    from .. import log
    from ..persistence.backup import BackupError, verify_backup
    from ..server.core import Core
    log.configure("warning")
    core = Core()
    try:
        doc = verify_backup(args.dir, core)
    except BackupError as e:
        return _error(f"{args.dir}: {e}")
    pos = doc["position"]
    console.print(f"backup of StreamDB {doc['server_version']}, {len(doc['files'])} files checked, "
                  f"consistent at AOF {pos.get('aof_segment') or '-'} offset {pos.get('aof_offset', '-')}",
                  highlight=False)
    for name, value in backup_summary(core).items():
        console.print(f"{name}: {value}", highlight=False)
    console.print("backup OK", highlight=False)
    return 0


def cmd_restore(_r, args, console: Console) -> int:
    from ..persistence.backup import BackupError, restore_backup
    try:
        done = restore_backup(args.backup, args.datadir, args.aof_from)
    except BackupError as e:
        return _error(f"{args.backup}: {e}")
    pos = done["position"]
    console.print(f"restored {args.backup} into {args.datadir}: the data at AOF "
                  f"{pos.get('aof_segment') or '-'} offset {pos.get('aof_offset', '-')}", highlight=False)
    if done["segments_added"]:
        console.print(f"plus {len(done['segments_added'])} segment(s) of {args.aof_from} from "
                      f"{done['segments_added'][0]} on ({done['bytes_added']} bytes): a server started "
                      f"on it replays them", highlight=False)
    return 0


# ---------------------------------------------------------------------------
# import-rdb
# ---------------------------------------------------------------------------

IMPORT_BATCH = 100      # RESTOREs per pipeline round trip


def _restore_batch(clients: dict, args, batch: list, console: Console, counts: dict) -> None:
    """Send a batch of (record, payload) as RESTOREs; count and report each outcome."""
    by_db: dict[int, list] = {}
    for record, payload in batch:
        by_db.setdefault(record.db if args.db is None else args.db, []).append((record, payload))
    for db, items in by_db.items():
        if db not in clients:
            clients[db] = connect(args, db)
        pipe = clients[db].pipeline(transaction=False)
        for record, payload in items:
            extra = (["ABSTTL"] if record.expire_ms is not None else []) + \
                (["REPLACE"] if args.replace else [])
            pipe.execute_command("RESTORE", record.key, record.expire_ms or 0, payload, *extra)
        for (record, _), reply in zip(items, pipe.execute(raise_on_error=False)):
            if isinstance(reply, redis.ConnectionError):
                raise reply
            if isinstance(reply, Exception):
                counts["failed"] += 1
                console.print(f"key {_text(record.key)} (db {db}): {reply}", highlight=False)
            else:
                counts["imported"] += 1


def cmd_import_rdb(_r, args, console: Console) -> int:
    """Read the whole file first (a damaged or cut one sends nothing), then send its
    strings and streams in pipelined batches of RESTOREs."""
    from ..persistence import rdb
    notes: list[str] = []
    try:
        with open(args.file, "rb") as f:
            data = f.read()
        version = rdb.rdb_file_version(data)
        with console.status(f"reading {args.file}"):
            records = list(rdb.rdb_file_records(data, notes))
    except OSError as e:
        _error(f"{args.file}: {e.strerror}")
        return 2
    except rdb.RdbError as e:
        _error(f"{args.file}: {e}; nothing was imported")
        return 2
    for note in dict.fromkeys(notes):
        console.print(note, highlight=False)
    counts = {"imported": 0, "failed": 0, "skipped": 0}
    clients: dict[int, redis.Redis] = {}
    batch: list = []
    try:
        with Progress(console=console, transient=True, disable=not console.is_terminal) as bar:
            task = bar.add_task(f"importing {args.file}", total=len(records))
            for n, record in enumerate(records, 1):
                if record.rdb_type not in rdb.SUPPORTED_TYPES:
                    counts["skipped"] += 1
                    console.print(f"skipped key {_text(record.key)}: "
                                  f"{rdb.UnsupportedType(record.rdb_type)}", highlight=False)
                else:
                    batch.append((record, rdb.payload_for(record.rdb_type, record.body, version)))
                if len(batch) >= IMPORT_BATCH or (n == len(records) and batch):
                    _restore_batch(clients, args, batch, console, counts)
                    batch = []
                bar.update(task, completed=n)
    finally:
        for client in clients.values():
            client.close()
    console.print(f"imported {counts['imported']} keys from {args.file} (RDB version {version}), "
                  f"{counts['failed']} failed, {counts['skipped']} skipped", highlight=False)
    return 1 if counts["failed"] or counts["skipped"] else 0


def build_parser() -> argparse.ArgumentParser:
    # The connection options are accepted before and after the subcommand.  Their
    # defaults are filled in after parsing (CONNECTION_DEFAULTS): a subparser's
    # default would otherwise overwrite a value given before the subcommand.
    common = argparse.ArgumentParser(add_help=False)
    # -h is the host, as in redis-cli; help is --help only.
    common.add_argument("-h", "--host", default=argparse.SUPPRESS, help="default 127.0.0.1")
    common.add_argument("-p", "--port", type=int, default=argparse.SUPPRESS, help="default 6379")
    common.add_argument("-a", "--password", default=argparse.SUPPRESS)
    common.add_argument("--user", default=argparse.SUPPRESS)
    common.add_argument("--help", action="help", help="show this help and exit")

    ap = argparse.ArgumentParser(prog="streamdb-admin", description=__doc__.split("\n")[0],
                                 add_help=False, parents=[common],
                                 epilog="-h is the host, as in redis-cli: help is --help (also after a "
                                        "subcommand).  Exit status: 0 done, 1 the server refused a "
                                        "command (e.g. NOGROUP), 2 the server cannot be reached.")
    sub = ap.add_subparsers(dest="command", required=True)

    st = sub.add_parser("status", add_help=False, parents=[common], help="one-screen summary")
    st.add_argument("--top", type=int, default=10, help="rows per top-N table (default 10)")
    st.add_argument("--max-streams", type=int, default=10000,
                    help="streams read at most (default 10000)")
    st.set_defaults(run=cmd_status)

    gr = sub.add_parser("groups", add_help=False, parents=[common], help="groups and consumers of a stream")
    gr.add_argument("key")
    gr.set_defaults(run=cmd_groups)

    grp = sub.add_parser("group", add_help=False, parents=[common],
                         help="one consumer group: info, or reset it to a time (StreamDB only)")
    grp_sub = grp.add_subparsers(dest="group_command", required=True)
    key_group = argparse.ArgumentParser(add_help=False)
    key_group.add_argument("key")
    key_group.add_argument("group")
    gi = grp_sub.add_parser("info", add_help=False, parents=[common, key_group],
                            help="lag in entries and in time, pending, NACKed (STREAMDB.GROUP INFO)")
    gi.set_defaults(run=cmd_group_info)
    gre = grp_sub.add_parser("reset", add_help=False, parents=[common, key_group],
                             help="move the group to a time, the start or the end",
                             description="Move the group so that it next reads the first entry at or "
                                         "after a time (--to-time), the stream's first entry (--earliest) "
                                         "or only entries added from now on (--latest), with an exact "
                                         "entries-read, so its lag stays exact (STREAMDB.GROUP SETID).  "
                                         "Pending entries stay pending.")
    to = gre.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-time", type=unix_ms, metavar="ISO_TIME",
                    help="e.g. 2026-11-27T09:00:00Z (a time zone is required)")
    to.add_argument("--earliest", action="store_true", help="before the stream's first entry")
    to.add_argument("--latest", action="store_true", help="after the stream's last entry")
    gre.set_defaults(run=cmd_group_reset)

    dl = sub.add_parser("dead-letter", add_help=False, parents=[common],
                        help="list or replay the entries of a dead-letter stream",
                        description="A group's dead-letter policy (STREAMDB.GROUP SET key group "
                                    "MAXDELIVERIES n DEADLETTER dlq) makes the server move an entry "
                                    "delivered n times to the stream dlq instead of delivering it "
                                    "again, with its source key, id, group, last consumer and "
                                    "delivery count before its own fields.  list shows them; replay "
                                    "appends each one's original fields to its source stream again "
                                    "(a new entry, delivered to the groups as new) and removes it from "
                                    "dlq, both or neither (MULTI).")
    dl_sub = dl.add_subparsers(dest="action", required=True)
    dll = dl_sub.add_parser("list", add_help=False, parents=[common], help="show dead letters")
    dll.add_argument("dlq", help="the dead-letter stream")
    dll.add_argument("--count", type=int, default=50, help="entries shown at most (default 50)")
    dll.set_defaults(run=cmd_dead_letter_list)
    dlr = dl_sub.add_parser("replay", add_help=False, parents=[common],
                            help="append dead letters to their source streams again")
    dlr.add_argument("dlq", help="the dead-letter stream")
    dlr.add_argument("ids", nargs="*", help="ids of entries of the dead-letter stream")
    dlr.add_argument("--all", action="store_true",
                     help="every entry the dead-letter stream holds when the replay starts")
    dlr.set_defaults(run=cmd_dead_letter_replay)

    ci = sub.add_parser("claim-idle", add_help=False, parents=[common],
                        help="hand idle entries to a live processor (XAUTOCLAIM JUSTID), in a loop",
                        description="Claim pending entries idle for --min-idle ms or more FOR the "
                                    "consumer --consumer: a live worker of the group that reads its "
                                    "own pending entries (XREADGROUP GROUP g <consumer> STREAMS key 0), "
                                    "processes and XACKs them.  This tool only moves ownership; it "
                                    "claims with JUSTID, which does not count as a delivery, so passes "
                                    "over entries not yet processed do not raise their delivery count, "
                                    "which the group's dead-letter policy (STREAMDB.GROUP SET) reads.  "
                                    "--once makes one pass and exits (2 if the server cannot be reached); "
                                    "the loop retries a lost connection with back-off, one line per retry.")
    ci.add_argument("key")
    ci.add_argument("group")
    ci.add_argument("--min-idle", type=int, required=True, help="milliseconds")
    ci.add_argument("--consumer", required=True, help="the live consumer that processes what is claimed")
    ci.add_argument("--interval", type=float, default=5.0, help="seconds between passes (default 5)")
    ci.add_argument("--once", action="store_true",
                    help="one pass over the PEL, then exit; no retry if the server cannot be reached")
    ci.add_argument("--count", type=int, default=100, help="XAUTOCLAIM COUNT (default 100)")
    ci.add_argument("--max-backoff", type=float, default=10.0,
                    help="longest wait between reconnection attempts (default 10 s)")
    ci.set_defaults(run=cmd_claim_idle)

    bk = sub.add_parser("backup", add_help=False, parents=[common],
                        help="online backup into DIR (STREAMDB.BACKUP), waiting until it is done",
                        description="Run STREAMDB.BACKUP DIR on the server, show its progress and wait "
                                    "for the end; exit 1 if the server refuses or the backup fails.  DIR "
                                    "is a path on the server's machine, absent or empty (a relative one is taken from "
                                    "the server's dir).")
    bk.add_argument("dir")
    bk.add_argument("--interval", type=float, default=0.2, help="seconds between status polls")
    bk.set_defaults(run=cmd_backup)

    vb = sub.add_parser("verify-backup", add_help=False, parents=[common],
                        help="check a backup directory and load it in-process (no server)",
                        description="Check the backup's manifest, the size and sha256 of every file, "
                                    "then load it through the server's recovery code into a fresh "
                                    "keyspace and print keys, streams, entries, groups and the DEBUG "
                                    "DIGEST a server started on it would give.  Exit 1 on any problem.")
    vb.add_argument("dir")
    vb.set_defaults(run=cmd_verify_backup)

    rs = sub.add_parser("restore", add_help=False, parents=[common],
                        help="copy a backup into an empty data directory (no server)",
                        description="Check the backup's files and copy them into DATADIR (absent or "
                                    "empty): a server started on it holds the data at the backup's "
                                    "position.  --aof-from OLD_AOF_DIR adds the segments the old server "
                                    "wrote after that position (they must continue the backup's own "
                                    "copy), so the server replays them too.  Exit 1 on any problem.")
    rs.add_argument("backup")
    rs.add_argument("datadir")
    rs.add_argument("--aof-from", default=None, metavar="OLD_AOF_DIR",
                    help="the old server's AOF directory (<dir>/appendonlydir)")
    rs.set_defaults(run=cmd_restore)

    ir = sub.add_parser("import-rdb", add_help=False, parents=[common],
                        help="send a Redis dump.rdb's strings and streams to the server",
                        description="Read a Redis RDB file (Redis 5 to 8.4; RDB versions up to 14) and send "
                                    "each string and stream key to the server as RESTORE with Redis's "
                                    "payload form, keeping expiry times (ABSTTL).  Keys of other types "
                                    "are skipped and named; functions and module data are skipped.  "
                                    "The whole file is read and checked first.  Exit 0 when every key "
                                    "was imported, 1 when some were skipped or refused (an existing key "
                                    "without --replace), 2 when FILE is missing, not an RDB file, or "
                                    "damaged (then nothing is sent).")
    ir.add_argument("file", metavar="FILE")
    ir.add_argument("--db", type=int, default=None,
                    help="put every key into this database (default: each into the one it was in)")
    ir.add_argument("--replace", action="store_true", help="replace keys that exist (RESTORE REPLACE)")
    ir.set_defaults(run=cmd_import_rdb)

    add_stream_tool_parsers(sub, common)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for name, default in CONNECTION_DEFAULTS.items():
        if not hasattr(args, name):
            setattr(args, name, default)
    # Piped output keeps whole table rows instead of wrapping them at 80 columns.
    console = Console(width=None if sys.stdout.isatty() else 160)
    r = connect(args)
    try:
        return args.run(r, args, console)
    except redis.ResponseError as e:
        return _error(str(e))
    except (redis.ConnectionError, redis.TimeoutError) as e:
        Console(stderr=True, soft_wrap=True).print(f"error: cannot talk to {args.host}:{args.port}: {e}", highlight=False)
        return 2
    finally:
        r.close()


if __name__ == "__main__":
    sys.exit(main())
