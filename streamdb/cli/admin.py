"""streamdb-admin: operate streams and consumer groups from the command line.

Subcommands:
  status        one-screen summary: role, version, memory, clients, persistence,
                replicas, top streams by length and by consumer-group lag
  groups        the groups and consumers of one stream: lag, pending, idle times
  group         one group: its lag in entries and in time (info), or move it to a
                time, to the start or to the end (reset; StreamDB only)
  dead-letter   move entries delivered more than N times to a dead-letter stream
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
entry's delivery count grows only when a processor actually reads it, and
dead-letter --max-deliveries N moves only entries that processors were given
more than N times.  Running both tools together is safe.

The stream subcommands use only standard Redis commands, so they work against
redis-server as well as StreamDB; backup and verify-backup are StreamDB's own.
"""

from __future__ import annotations

import argparse
import datetime
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

__all__ = ["main"]

# Fields added to a dead-lettered entry next to its own fields.
DLQ_FIELDS = ("dlq-stream", "dlq-original-id", "dlq-group", "dlq-consumer", "dlq-deliveries")


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


def over_delivered(r: redis.Redis, key, group, max_deliveries: int, batch: int):
    """Yield XPENDING extended rows whose delivery count exceeds ``max_deliveries``."""
    start = "-"
    while True:
        rows = r.xpending_range(key, group, start, "+", batch)
        for row in rows:
            if row["times_delivered"] > max_deliveries:
                yield row
        if len(rows) < batch:
            return
        start = _next_id(rows[-1]["message_id"])


def dead_letter_one(r: redis.Redis, args, row) -> str:
    """Move one pending entry; returns what happened: moved, deleted, or acked-meanwhile."""
    entry_id = row["message_id"]
    found = r.xrange(args.key, entry_id, entry_id)
    if not found:
        # Deleted from the stream but still pending: nothing to keep, just ack.
        r.xack(args.key, args.group, entry_id)
        return "deleted"
    fields = dict(found[0][1])
    fields.update({
        "dlq-stream": args.key, "dlq-original-id": entry_id, "dlq-group": args.group,
        "dlq-consumer": row["consumer"], "dlq-deliveries": row["times_delivered"]})
    with r.pipeline(transaction=True) as tx:     # MULTI: both or neither
        tx.xadd(args.to, fields)
        tx.xack(args.key, args.group, entry_id)
        _, acked = tx.execute()
    # A consumer may have acked it between XPENDING and EXEC; it is then in the
    # dead-letter stream too, which the report says.
    return "moved" if acked else "acked-meanwhile"


def cmd_dead_letter(r: redis.Redis, args, console: Console) -> int:
    total = r.xpending(args.key, args.group)["pending"]
    rows = []
    counts = {"moved": 0, "deleted": 0, "acked-meanwhile": 0, "would move": 0}
    with Progress(console=console, transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task("scanning pending entries", total=total)
        for row in over_delivered(r, args.key, args.group, args.max_deliveries, args.batch):
            outcome = "would move" if args.dry_run else dead_letter_one(r, args, row)
            counts[outcome] += 1
            rows.append((row, outcome))
            bar.advance(task)
    table = Table(title=f"{'Would dead-letter' if args.dry_run else 'Dead-lettered'} "
                        f"{args.key} / {args.group} -> {args.to}")
    for name in ("id", "consumer", "deliveries", "outcome"):
        table.add_column(name)
    for row, outcome in rows[:args.show]:
        table.add_row(_text(row["message_id"]), _text(row["consumer"]), str(row["times_delivered"]), outcome)
    if rows:
        console.print(table)
    if len(rows) > args.show:
        console.print(f"... and {len(rows) - args.show} more")
    done = ", ".join(f"{n} {what}" for what, n in counts.items() if n)
    console.print(f"{len(rows)} of {total} pending entries delivered more than {args.max_deliveries} times"
                  + (f": {done}" if done else ""))
    return 0


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
    towards dead-letter's --max-deliveries.  The processor's own read of its
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
                        help="move over-delivered pending entries to a dead-letter stream",
                        description="Move pending entries delivered more than --max-deliveries times "
                                    "to a dead-letter stream (XADD + XACK in one MULTI).  The delivery "
                                    "count counts reads by consumers (XREADGROUP), not claim-idle's "
                                    "claims, which use JUSTID: both tools can run together.")
    dl.add_argument("key")
    dl.add_argument("group")
    dl.add_argument("--max-deliveries", type=int, required=True,
                    help="entries delivered more than this many times are moved")
    dl.add_argument("--to", required=True, help="the dead-letter stream")
    dl.add_argument("--dry-run", action="store_true", help="only list what would be moved")
    dl.add_argument("--batch", type=int, default=100, help="XPENDING page size (default 100)")
    dl.add_argument("--show", type=int, default=50, help="rows listed at most (default 50)")
    dl.set_defaults(run=cmd_dead_letter)

    ci = sub.add_parser("claim-idle", add_help=False, parents=[common],
                        help="hand idle entries to a live processor (XAUTOCLAIM JUSTID), in a loop",
                        description="Claim pending entries idle for --min-idle ms or more FOR the "
                                    "consumer --consumer: a live worker of the group that reads its "
                                    "own pending entries (XREADGROUP GROUP g <consumer> STREAMS key 0), "
                                    "processes and XACKs them.  This tool only moves ownership; it "
                                    "claims with JUSTID, which does not count as a delivery, so passes "
                                    "over entries not yet processed do not raise their delivery count "
                                    "and dead-letter --max-deliveries stays a count of real deliveries.  "
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
