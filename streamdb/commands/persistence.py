"""Persistence commands: DUMP RESTORE MIGRATE BGREWRITEAOF, and the AOF's INFO and DEBUG hooks.

The AOF object (persistence/aof/) is attached by __main__ as ``core.aof``;
without it (``appendonly no``) these commands report that persistence is off.
"""

from __future__ import annotations

import socket

from ..persistence import codec, rdb
from ..persistence.child import NotStarted
from . import backup
from ..protocol.reply import OK, CommandError, Status
from ..protocol.request import encode_request
from .args import parse_int
from ..dispatch.context import Ctx, syntax_error
from ..dispatch.registry import command

CHECKSUM_ERROR = "ERR DUMP payload version or checksum are wrong"


def load_payload(raw: bytes, check_nodes: bool = False):
    """The value of a RESTORE payload: StreamDB's own (it starts with the codec's magic)
    or one Redis's DUMP made (persistence/rdb.py), with Redis's errors for either."""
    if not raw.startswith(codec.PAYLOAD_MAGICS):
        try:
            return rdb.load_dump_payload(raw)
        except rdb.UnsupportedType as e:
            raise CommandError(f"ERR Bad data format: {e}") from None
        except rdb.RdbError as e:
            if "checksum" in str(e):
                raise CommandError(CHECKSUM_ERROR) from None
            raise CommandError("ERR Bad data format") from None
    try:
        return codec.load_payload(raw, check_nodes)
    except codec.CodecError as e:
        if "checksum" in str(e):
            raise CommandError(CHECKSUM_ERROR) from None
        raise CommandError("ERR Bad data format") from None


@command("dump", 2, "readonly", keys=(1, 1, 1), since="2.6.0")
def dump(ctx: Ctx, argv):
    """DUMP key

    The payload is StreamDB's own form, or Redis's (type 19, RDB version 10, which
    Redis 7.0 and later RESTORE) with ``dump-payload-format redis``."""
    value = ctx.lookup(argv[1], read=True)
    return None if value is None else _payload(ctx, value)


def _payload(ctx: Ctx, value) -> bytes:
    """DUMP's payload of a value (and MIGRATE's) in the form ``dump-payload-format`` sets."""
    if ctx.config["dump-payload-format"] == "redis":
        try:
            return rdb.dump_payload(value)
        except rdb.RdbError as e:
            raise CommandError(f"ERR cannot DUMP in Redis's form: {e}") from None
    return codec.dump_payload(value)


@command("restore", -4, "write denyoom", keys=(1, 1, 1), since="2.6.0")
def restore(ctx: Ctx, argv):
    """RESTORE key ttl serialized-value [REPLACE] [ABSTTL] [IDLETIME seconds] [FREQ frequency]

    Payloads are StreamDB's own (the snapshot codec with a version and a
    checksum) or Redis's (a string or a stream as Redis 5-8's DUMP writes it:
    persistence/rdb.py).  The AOF rewrite and a replica's full
    sync use this command.  They write a big stream in pieces
    (``codec.dump_pieces``): the first piece creates the key, each further
    "stream-nodes" piece appends its nodes to the stream the key holds (the
    REPLACE/BUSYKEY and TTL rules do not apply to those).
    """
    key = argv[1]
    replace = absttl = False
    i = 4
    while i < len(argv):
        lo = argv[i].lower()
        if lo == b"replace":
            replace = True
        elif lo == b"absttl":
            absttl = True
        elif lo in (b"idletime", b"freq") and i + 1 < len(argv):
            v = parse_int(argv[i + 1])
            if v < 0:
                raise CommandError("ERR Invalid IDLETIME value, must be >= 0" if lo == b"idletime"
                                   else "ERR Invalid FREQ value, must be >= 0 and <= 255")
            i += 1
        else:
            raise syntax_error()
        i += 1
    ttl = parse_int(argv[2])
    if ttl < 0:
        raise CommandError("ERR Invalid TTL value, must be >= 0")
    # A client's payload may be crafted (its checksum proves nothing): every
    # node is checked now.  Replayed RESTOREs come from our own AOF rewrite or
    # primary, and checking them would slow every restart from a base segment.
    value = load_payload(argv[3], check_nodes=not ctx.replaying)
    if type(value) is codec.NodeRun:
        return _restore_more_nodes(ctx, key, value, argv)
    if not replace and ctx.lookup(key) is not None:
        raise CommandError("BUSYKEY Target key name already exists.")
    when = None
    if ttl:
        when = ttl if absttl else ctx.now_ms + ttl
    if when is not None and when <= ctx.now_ms and not ctx.replaying:
        if ctx.db.delete(key):
            ctx.propagate([b"DEL", key])
            ctx.notify(b"del", key)
        return OK
    ctx.db.delete(key)
    ctx.add_key(key, value)
    if when is not None:
        ctx.db.expires[key] = when
    out = [b"RESTORE", key, b"%d" % (when or 0), argv[3], b"REPLACE"]
    if when is not None:
        out.append(b"ABSTTL")
    ctx.propagate(out)
    ctx.notify(b"restore", key)
    return OK


@command("restore-asking", -4, "write denyoom asking", keys=(1, 1, 1), group="server",
         since="3.0.0", categories=("@keyspace", "@write", "@slow", "@dangerous"))
def restore_asking(ctx: Ctx, argv):
    """RESTORE-ASKING key ttl serialized-value [REPLACE] [ABSTTL] [IDLETIME seconds] [FREQ frequency]

    What a Redis Cluster node's MIGRATE sends instead of RESTORE: without a cluster,
    the same as RESTORE (StreamDB has no slots to ask about)."""
    return restore(ctx, argv)


def _restore_more_nodes(ctx: Ctx, key: bytes, run, argv):
    """RESTORE of a "stream-nodes" piece: append to the stream at ``key``."""
    stream = ctx.lookup(key)
    if stream is None or type(stream) is bytes:
        raise CommandError("ERR Bad data format")
    try:
        codec.append_node_run(stream, run, check=not ctx.replaying)
    except codec.CodecError:
        raise CommandError("ERR Bad data format") from None
    ctx.propagate([b"RESTORE", key, b"0", argv[3]])
    return OK


# -- MIGRATE ------------------------------------------------------------------------------

# The longest reply line MIGRATE reads from its target (RESTORE answers +OK or one error).
_MIGRATE_MAX_LINE = 64 * 1024


def _migrate_keys(argv: list) -> list[int]:
    """MIGRATE's key positions: the key argument, or what follows KEYS when it is ""."""
    if len(argv) > 3 and argv[3]:
        return [3]
    for i in range(6, len(argv)):
        if argv[i].lower() == b"keys":
            return list(range(i + 1, len(argv)))
    return []


class _TargetLink:
    """A blocking connection to MIGRATE's target; each step waits at most ``timeout_s``
    (Redis's MIGRATE blocks its event loop so too)."""

    def __init__(self, host: str, port: int, timeout_s: float) -> None:
        self.sock = None
        self.buffer = b""
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout_s)
        except ConnectionError:
            # Refused: Redis's non-blocking connect "succeeds", its first write fails.
            pass
        except (OSError, ValueError, OverflowError, UnicodeError):
            raise CommandError("IOERR error or timeout connecting to the client") from None

    def send(self, data: bytes) -> None:
        try:
            if self.sock is None:
                raise ConnectionRefusedError
            self.sock.sendall(data)
        except OSError:
            raise CommandError("IOERR error or timeout writing to target instance") from None

    def reply_line(self) -> bytes:
        """The next reply (a status or an error line) without its CRLF."""
        while b"\r\n" not in self.buffer:
            try:
                chunk = self.sock.recv(4096)
            except OSError:
                chunk = b""
            if not chunk or len(self.buffer) > _MIGRATE_MAX_LINE:
                raise CommandError("IOERR error or timeout reading to target instance")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\r\n")
        return line

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()


def _target_error(line: bytes) -> CommandError:
    return CommandError("ERR Target instance replied with error: " +
                        line[1:].decode("utf-8", "replace"))


@command("migrate", -6, "write movablekeys", since="2.6.0", key_finder=_migrate_keys,
         categories=("@keyspace", "@write", "@slow", "@dangerous"))
def migrate(ctx: Ctx, argv):
    """MIGRATE host port key destination-db timeout [COPY] [REPLACE] [AUTH password] [AUTH2 username password] [KEYS key [key ...]]

    As Redis does it: DUMP each key (in the form ``dump-payload-format`` sets: ``redis``
    for a Redis target), send AUTH, SELECT and a RESTORE per key to the target over a
    blocking connection (``timeout`` ms per step), and delete the keys the target
    took, unless COPY; the deletions are propagated as DEL.  Keys the target refused
    stay, and the reply is its first error."""
    copy = replace = False
    auth: list = []
    keys = [argv[3]]
    i = 6
    while i < len(argv):
        option = argv[i].lower()
        if option == b"copy":
            copy = True
        elif option == b"replace":
            replace = True
        elif option == b"auth" and i + 1 < len(argv):
            auth = [argv[i + 1]]
            i += 1
        elif option == b"auth2" and i + 2 < len(argv):
            auth = [argv[i + 1], argv[i + 2]]
            i += 2
        elif option == b"keys":
            if argv[3]:
                raise CommandError("ERR When using MIGRATE KEYS option, the key argument "
                                   "must be set to the empty string")
            keys = argv[i + 1:]
            break
        else:
            raise syntax_error()
        i += 1
    timeout_ms = parse_int(argv[5])
    dbid = parse_int(argv[4])
    if timeout_ms <= 0:
        timeout_ms = 1000
    present = [(key, value) for key in keys
               if (value := ctx.lookup(key, read=True)) is not None]
    if not present:
        return Status("NOKEY")
    request = []
    if auth:
        request.append(encode_request(b"AUTH", *auth))
    request.append(encode_request(b"SELECT", dbid))
    for key, value in present:
        when = ctx.db.expires.get(key)
        ttl = 0 if when is None else max(when - ctx.now_ms, 1)
        request.append(encode_request(b"RESTORE", key, ttl, _payload(ctx, value),
                                      *([b"REPLACE"] if replace else [])))
    try:
        port = parse_int(argv[2])
        link = _TargetLink(argv[1].decode("utf-8", "replace"), port, timeout_ms / 1000)
    except CommandError:
        raise CommandError("IOERR error or timeout connecting to the client") from None
    moved, first_error = [], None
    try:
        link.send(b"".join(request))
        for _ in range(len(request) - len(present)):        # AUTH and SELECT
            line = link.reply_line()
            if line[:1] == b"-":
                raise _target_error(line)
        for key, _ in present:
            line = link.reply_line()
            if line[:1] == b"-":
                first_error = first_error or _target_error(line)
            elif not copy:
                moved.append(key)
    finally:
        link.close()
        for key in moved:           # (also when a later reply never came: the target has them)
            ctx.db.delete(key)
            ctx.notify(b"del", key)
        if moved:
            ctx.propagate([b"DEL", *moved], dirty=len(moved))
    if first_error is not None:
        raise first_error
    return OK


# Redis's reply when BGREWRITEAOF cannot start its child (the log says why).
REWRITE_NOT_STARTED = ("ERR Can't execute an AOF background rewriting. "
                       "Please check the server logs for more information.")


def _aof(ctx: Ctx):
    return ctx.core.aof


@command("bgrewriteaof", 1, "admin noscript no-async-loading", since="1.0.0")
def bgrewriteaof(ctx: Ctx, argv):
    """BGREWRITEAOF"""
    aof = _aof(ctx)
    if aof is None:
        raise CommandError("ERR Background append only file rewriting is not possible: appendonly is no")
    snap = ctx.core.snapshotter
    if aof.rewrite_pid is not None:
        raise CommandError("ERR Background append only file rewriting already in progress")
    if snap is not None and snap.child_pid is not None:
        snap.wait()          # one child at a time, as in Redis; a snapshot finishes first
    try:
        aof.bgrewrite()
    except NotStarted:                  # (logged with the reason, as Redis does)
        raise CommandError(REWRITE_NOT_STARTED) from None
    except RuntimeError as e:           # (AofUnwritten: a failed write waits for the disk)
        raise CommandError(f"ERR {e}") from None
    return Status("Background append only file rewriting started")


def _snapshotter(ctx: Ctx):
    return ctx.core.snapshotter


@command("save", 1, "admin noscript no-async-loading no-multi", since="1.0.0")
def save(ctx: Ctx, argv):
    """SAVE"""
    snap = _snapshotter(ctx)
    if snap is None:
        raise CommandError("ERR persistence is not configured")
    if snap.child_pid is not None:
        raise CommandError("ERR Background save already in progress")
    try:
        snap.save()
    except Exception as e:  # noqa: BLE001
        raise CommandError(f"ERR {e}") from None
    return OK


@command("bgsave", -1, "admin noscript no-async-loading", since="1.0.0")
def bgsave(ctx: Ctx, argv):
    """BGSAVE [SCHEDULE]"""
    if len(argv) > 2 or (len(argv) == 2 and argv[1].lower() != b"schedule"):
        raise syntax_error()
    snap = _snapshotter(ctx)
    if snap is None:
        raise CommandError("ERR persistence is not configured")
    if snap.child_pid is not None:
        if len(argv) == 2:
            return Status("Background saving scheduled")
        raise CommandError("ERR Background save already in progress")
    try:
        snap.bgsave()
    except NotStarted:
        # Redis answers a failed fork with a bare -ERR (shared.err); the log says why.
        raise CommandError("ERR") from None
    except RuntimeError as e:
        raise CommandError(f"ERR {e}") from None
    return Status("Background saving started")


def info_persistence(core) -> list[tuple[str, object]]:
    aof = core.aof
    snap = core.snapshotter
    fields: list[tuple[str, object]] = [
        ("loading", int(core.loading)),
        ("async_loading", 0),
        ("current_cow_peak", 0), ("current_cow_size", 0), ("current_fork_perc", "0.00"),
        ("current_save_keys_processed", 0), ("current_save_keys_total", 0),
        ("rdb_changes_since_last_save", core.dirty),
        ("rdb_bgsave_in_progress", int(bool(snap and snap.in_progress))),
        ("rdb_last_save_time", int(core.last_save_time)),
        ("rdb_last_bgsave_status", "ok" if not snap or snap.last_ok else "err"),
        # StreamDB's own: what the last (incremental) snapshot wrote.
        ("rdb_last_save_bytes_written", (snap.last_stats or {}).get("bytes_written", 0) if snap else 0),
        ("aof_enabled", int(aof is not None)),
        ("aof_rewrite_in_progress", int(bool(aof and aof.rewrite_pid is not None))),
        ("aof_rewrite_scheduled", 0),
        ("aof_last_rewrite_time_sec", -1),
        ("aof_last_bgrewrite_status", "ok" if not aof or aof.last_rewrite_ok else "err"),
        ("aof_rewrites", aof.rewrites if aof else 0),
        ("aof_rewrites_consecutive_failures", aof.rewrite_failures if aof else 0),
        ("aof_last_write_status", "ok" if not aof or aof.last_write_ok else "err"),
        ("aof_last_cow_size", 0),
    ] + backup.info_fields(core)
    if aof is not None:
        fields += [
            ("aof_current_size", aof.total_size), ("aof_base_size", aof.base_size),
            ("aof_pending_rewrite", 0), ("aof_buffer_length", len(aof.pending)),
            ("aof_pending_bio_fsync", 0), ("aof_delayed_fsync", 0),
            ("aof_fsync_policy", aof.policy), ("aof_last_write_error", aof.last_error),
        ]
        if core.loading:
            import time as _time
            elapsed = max(_time.time() - aof.loading_start, 1e-9) if aof.loading_start else 0
            perc = aof.loaded_perc
            eta = int(elapsed * (100 - perc) / perc) if perc > 0 else 1
            fields += [("loading_start_time", int(aof.loading_start)),
                       ("loading_total_bytes", aof.loading_total_bytes),
                       ("loading_rdb_used_mem", 0),
                       ("loading_loaded_bytes", aof.loaded_bytes),
                       ("loading_loaded_perc", f"{perc:.2f}"),
                       ("loading_eta_seconds", eta)]
    return fields


def debug_loadaof(ctx: Ctx, argv):
    """DEBUG LOADAOF: flush the AOF, empty the dataset, load it back from disk."""
    aof = _aof(ctx)
    if aof is None:
        raise CommandError("ERR appendonly is no")
    aof.flush()
    for db in ctx.core.keyspace.dbs:
        db.clear()
    ctx.core.remove_effect_sink(aof.append_batch)
    try:
        aof.load()
    finally:
        ctx.core.add_effect_sink(aof.append_batch)
    return OK


def _injector(attr: str):
    def inject(ctx: Ctx, argv):
        aof = _aof(ctx)
        if aof is None or len(argv) != 3:
            raise syntax_error()
        setattr(aof, attr, parse_int(argv[2]))
        return OK
    return inject


# DEBUG AOF-INJECT-ERROR <n>: the next n AOF writes fail with ENOSPC (tests only).
debug_aof_inject_error = _injector("inject_failures")
# DEBUG AOF-INJECT-FSYNC-ERROR <n>: the next n AOF fdatasyncs (a turn's under 'always', the
# aof-fsync thread's under 'everysec') fail with EIO (tests only).
debug_aof_inject_fsync_error = _injector("inject_fsync_failures")


def debug_reload(ctx: Ctx, argv):
    """DEBUG RELOAD: snapshot, empty the dataset, load the snapshot back."""
    p = ctx.core.persistence
    if p is None:
        raise CommandError("ERR persistence is not configured")
    p.reload()
    return OK


def install(core) -> None:
    """Attach the INFO and DEBUG hooks to a core (called by __main__)."""
    core.info_persistence = lambda: info_persistence(core)
    core.debug_subcommands.update({
        "reload": debug_reload, "loadaof": debug_loadaof,
        "aof-inject-error": debug_aof_inject_error,
        "aof-inject-fsync-error": debug_aof_inject_fsync_error})
