"""Replication, replica side: follow a primary through the same apply path as AOF replay.

``ReplicaSide`` runs one asyncio task per followed primary:

    connect -> PING -> [AUTH] -> REPLCONF listening-port / capa -> PSYNC <replid> <offset+1>
      +FULLRESYNC <replid> <offset>  then ``$<len>\\r\\n<payload>``: the payload is RESP
                                     commands (SELECT + RESTORE ... REPLACE, the AOF
                                     rewrite's form) applied after a FLUSHALL
      +CONTINUE [<replid>]           the missed bytes follow from the backlog
    -> the live stream, applied command by command through a client of kind
       "master" (``core.execute``: effects reach this server's own AOF, snapshots,
       WATCHers and blocked XREAD readers exactly as for any write)

Offsets count stream bytes exactly as the primary does.  The offset only moves at
command boundaries outside MULTI/EXEC (a dropped link in the middle of a
transaction discards the queued part and re-requests it), and the bytes up to that
point are passed on unchanged to this server's own backlog for chained replicas.

The replica acks its offset every second (REPLCONF ACK) and at once on REPLCONF
GETACK, drops a link silent for ``repl-timeout`` seconds, and reconnects with
back-off.  With ``appendonly yes`` it saves the primary's id and the applied
offset (state.py) after each loop turn whose effects reached its AOF, so a
restarted replica can resynchronise partially.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections import deque

from .. import log
from ..protocol import ProtocolError, RequestParser, encode_command
from ..protocol.reply import CommandError
from .. import tls
from .fullsync import CHECKSUM_CAPA, PayloadAside, PayloadError

__all__ = ["ReplicaSide", "ReplError"]


class ReplError(Exception):
    pass


class _StateWriter:
    """Scheduled like a connection (server.schedule_flush): ``flush`` runs at the end
    of the loop turn, after the AOF hook wrote the turn's effects, and is held (and
    retried) with the replies when that write failed."""

    __slots__ = ("side",)

    def __init__(self, side: "ReplicaSide") -> None:
        self.side = side

    def flush(self) -> None:
        self.side.save_state()


def _errors_in(reply) -> list:
    if isinstance(reply, CommandError):
        return [reply]
    if isinstance(reply, list):
        return [r for r in reply if isinstance(r, CommandError)]
    return []


class ReplicaSide:
    def __init__(self, repl, host: str, port: int, has_cache: bool = False) -> None:
        self.repl = repl
        self.core = repl.core
        self.server = repl.server
        self.host = host
        self.port = port
        self.state = "connect"
        self.client = self.core.replay_client("master")
        self.has_cache = has_cache       # repl.replid/offset describe our data: try PSYNC
        self.cached_aof_pos: tuple[str, int] | None = None   # from the state file
        self.read_offset = repl.offset
        self.last_io = time.monotonic()
        # When the link to the primary was lost; None until one was up (INFO then says
        # -1, as Redis: Sentinel skips a replica whose link has been down too long).
        self.down_since: float | None = None
        self.sync_total = 0
        self.sync_read = 0
        self.task: asyncio.Task | None = None
        self.writer = None
        self.raw = bytearray()
        self.parser: RequestParser | None = None
        self.stopped = False
        self.errors_to_master = 0
        self.writer_obj = _StateWriter(self)
        # FACK: (AOF mark of the applying client's last write, the primary's offset
        # once it was applied), oldest first, for the writes not yet fsynced here;
        # ``fsynced_offset``: the offset up to which everything applied is.
        self.unsynced_marks: deque[tuple[int, int]] = deque()
        self.fsynced_offset = 0
        self.acked_fsynced = 0

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        self.stopped = True
        if self.task is not None:
            self.task.cancel()
            self.task = None
        self._close()
        self._rollback()
        self.state = "connect"

    def _close(self) -> None:
        if self.writer is not None:
            try:
                self.writer.close()
            except Exception:  # noqa: BLE001 - already gone
                pass
            self.writer = None

    def _rollback(self) -> None:
        """Forget a transaction whose EXEC did not arrive: the offset is before its MULTI."""
        c = self.client
        if c.in_multi:
            c.in_multi = False
            c.multi_queue = []
            c.multi_error = False
        self.raw = bytearray()
        self.parser = None
        self.read_offset = self.repl.offset

    async def _run(self) -> None:
        delay = 0.1
        while not self.stopped:
            try:
                await self._session()
            except asyncio.CancelledError:
                raise
            except (OSError, EOFError, asyncio.TimeoutError, asyncio.IncompleteReadError,
                    ReplError, PayloadError, ProtocolError) as e:
                what = "timeout" if isinstance(e, asyncio.TimeoutError) else (str(e) or type(e).__name__)
                if self.state == "connected":
                    log.log(log.WARNING, f"Connection with master lost ({what}).")
                    delay = 0.1
                else:
                    log.log(log.WARNING, f"Error condition on socket for SYNC with "
                                         f"{self.host}:{self.port}: {what}")
            finally:
                self._close()
                self._rollback()
                if self.state == "connected":
                    self.down_since = time.monotonic()
                self.state = "connect"
            if self.stopped:
                break
            log.log(log.VERBOSE, f"Reconnecting to MASTER {self.host}:{self.port} in {delay:.1f}s")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    # -- one connection ---------------------------------------------------------------

    async def _within(self, awaitable, timeout: float):
        """``await awaitable``, bounded by ``timeout`` seconds, in a side not stopped meanwhile.

        A stopped side (REPLICAOF elsewhere or NO ONE) must not take one more step: its
        replacement owns the data and the replication state.  Python 3.11's
        ``asyncio.wait_for`` can swallow the task's cancellation when what it waits for
        completes in the same loop turn (CPython gh-86296): a stopped side then applied
        the next chunk of its old primary's stream, or went on to load a full-sync
        payload over its successor's data.  ``asyncio.timeout`` cancels the task itself,
        and the check of ``stopped`` holds whatever the loop did."""
        async with asyncio.timeout(timeout):
            result = await awaitable
        if self.stopped:
            raise asyncio.CancelledError
        return result

    async def _readline(self, reader, timeout: float) -> bytes:
        while True:
            line = await self._within(reader.readline(), timeout)
            if not line:
                raise EOFError("connection closed by the master")
            self.last_io = time.monotonic()
            line = line.rstrip(b"\r\n")
            if line:                     # a bare newline is a keepalive
                return line

    def _tls_context(self):
        """The SSLContext of the link under tls-replication yes, else None (plain TCP)."""
        if not self.core.config["tls-replication"]:
            return None
        try:
            return tls.replica_context(self.core.config)
        except tls.TlsConfigError as e:
            raise ReplError(str(e)) from None

    async def _session(self) -> None:
        cfg = self.core.config
        timeout = cfg["repl-timeout"]
        self.state = "connecting"
        log.log(log.NOTICE, f"Connecting to MASTER {self.host}:{self.port}")
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(self.host, self.port,
                                                           ssl=self._tls_context())
        self.writer = writer             # (closed by _run's cleanup, stopped or not)
        if self.stopped:
            raise asyncio.CancelledError
        log.log(log.NOTICE, "MASTER <-> REPLICA sync started")
        self.state = "handshake"

        async def call(*args) -> bytes:
            writer.write(encode_command([a if isinstance(a, bytes) else str(a).encode() for a in args]))
            return await self._readline(reader, timeout)

        r = await call("PING")
        if r.startswith(b"-") and not r.startswith((b"-NOAUTH", b"-NOPERM", b"-ERR operation not permitted")):
            raise ReplError(f"Error reply to PING from master: '{r.decode('latin-1')}'")
        log.log(log.NOTICE, "Master replied to PING, replication can continue...")
        if cfg["masterauth"]:
            args = ["AUTH"] + ([cfg["masteruser"]] if cfg["masteruser"] else []) + [cfg["masterauth"]]
            r = await call(*args)
            if not r.startswith(b"+"):
                raise ReplError(f"Unable to AUTH to MASTER: {r.decode('latin-1')}")
        r = await call("REPLCONF", "listening-port", cfg["replica-announce-port"] or
                       (cfg["tls-port"] if cfg["tls-replication"] else cfg["port"]))
        if r.startswith((b"-NOAUTH", b"-NOPERM")):
            # Without this the handshake would go on to a baffling PSYNC failure.
            raise ReplError(f"MASTER refused the replication handshake: {r.decode('latin-1')} "
                            f"(check masteruser/masterauth)")
        if cfg["replica-announce-ip"]:
            r = await call("REPLCONF", "ip-address", cfg["replica-announce-ip"])
            if r.startswith(b"-"):       # an older primary: it lists our source address
                log.log(log.WARNING, "(Non critical) Master does not understand REPLCONF "
                                     f"ip-address: {r.decode('latin-1').strip()}")
        await call("REPLCONF", "capa", "eof", "capa", "psync2", "capa", CHECKSUM_CAPA)
        repl = self.repl
        if self.has_cache:
            rid, off = repl.replid, repl.offset + 1
            log.log(log.NOTICE, f"Trying a partial resynchronization (request {rid}:{off}).")
        else:
            rid, off = "?", -1
            log.log(log.NOTICE, "Partial resynchronization not possible (no cached master)")
        r = await call("PSYNC", rid, off)
        if r.startswith(b"+FULLRESYNC"):
            parts = r.split()
            if len(parts) != 3:
                raise ReplError(f"Bad FULLRESYNC reply: {r!r}")
            new_id, new_off = parts[1].decode("ascii"), int(parts[2])
            log.log(log.NOTICE, f"Full resync from master: {new_id}:{new_off}")
            await self._full_sync(reader, timeout, new_id, new_off)
        elif r.startswith(b"+CONTINUE"):
            parts = r.split()
            new_id = parts[1].decode("ascii") if len(parts) > 1 else repl.replid
            if new_id != repl.replid:
                # The primary's id changed (it was promoted): ours becomes the secondary one.
                repl.replid2 = repl.replid
                repl.second_offset = repl.offset + 1
                repl.replid = new_id
                repl.drop_links("the replication id of my master changed")
                log.log(log.NOTICE, f"Master replication ID changed to {new_id}")
            if not repl.backlog_active:
                repl.create_backlog()
            log.log(log.NOTICE, "Successful partial resynchronization with master.")
            log.log(log.NOTICE, "MASTER <-> REPLICA sync: Master accepted a Partial Resynchronization.")
        else:
            raise ReplError(f"Unexpected reply to PSYNC from master: {r.decode('latin-1')}")
        self.state = "connected"
        repl.followed = True
        self.read_offset = repl.offset
        self.parser = RequestParser(max_bulk_len=1 << 62)
        self.raw = bytearray()
        self.save_state()
        self.send_ack()
        ack_task = asyncio.get_running_loop().create_task(self._ack_loop())
        stats = self.repl.core.stats
        try:
            while True:
                data = await self._within(reader.read(1 << 16), timeout)
                if not data:
                    raise EOFError("connection closed by the master")
                stats.reads_processed += 1      # (Redis counts its master's link too)
                self.apply(data)
        finally:
            ack_task.cancel()

    async def _full_sync(self, reader, timeout: float, new_id: str, new_off: int) -> None:
        """Receive the payload aside, then switch to it in one loop turn.

        Until the payload is complete and checked (``PayloadAside``) nothing of ours
        changes: clients read the old data, our AOF, snapshot and replication state
        keep describing it, and our id/offset stay the old ones (a cut transfer, or
        REPLICAOF NO ONE meanwhile, leaves exactly the old data set, and a later PSYNC
        asks for the old position).  The file is removed whatever happens.
        """
        self.state = "sync"
        hdr = await self._readline(reader, timeout)
        payload = PayloadAside(self.core.config["dir"], hdr)
        switching = False
        try:
            self.sync_total, self.sync_read = payload.total, 0    # -1 when streamed, as Redis shows it
            log.log(log.NOTICE, f"MASTER <-> REPLICA sync: receiving "
                                f"{'streamed' if payload.mark else payload.total} bytes from "
                                f"master to disk ({payload.path})")
            t0 = time.monotonic()
            while not payload.complete:
                data = await self._within(reader.read(payload.want()), timeout)
                if not data:
                    raise EOFError(f"connection lost during the full sync transfer "
                                   f"({self.sync_read} bytes received)")
                self.sync_read += len(data)
                self.last_io = time.monotonic()
                payload.feed(data)
            received = time.monotonic()
            switching = True
            self._switch_to(payload, new_id, new_off)
        finally:
            payload.remove()
            if not switching:
                log.log(log.NOTICE, f"MASTER <-> REPLICA sync: discarding the {self.sync_read} "
                                    f"bytes received; serving the old data set meanwhile")
        log.log(log.NOTICE, f"MASTER <-> REPLICA sync: Finished with success ({self.sync_read} "
                            f"bytes received in {received - t0:.3f}s, {payload.commands} commands "
                            f"loaded in {time.monotonic() - received:.3f}s)")

    def _switch_to(self, payload: PayloadAside, new_id: str, new_off: int) -> None:
        """Replace our data with the complete payload, all within this loop turn.

        One turn, so no client sees a partial data set (they wait for the turn), and
        the FLUSHALL and every command of the payload reach our AOF as one checksummed
        frame: a kill -9 while it is written leaves a torn tail the next start cuts,
        i.e. the old data, never part of the new.  The effects go the way of any write
        (AOF, the snapshotter's changed keys, WATCHers, blocked readers), so our files
        describe the new data set once the turn's frame is written.

        The commands were parsed as they arrived and the file is open before anything
        changes; a command failing here (a primary whose payload this version cannot
        apply) leaves what was loaded up to it, matching no id (no cached master, the
        state file gone): the next full sync replaces it.
        """
        core, c, repl = self.core, self.client, self.repl
        batches = payload.batches()
        self.has_cache = False           # from the FLUSHALL on, our data matches no id
        repl.forget_state()
        repl.drop_links("my master sent a full resynchronization")
        c.in_multi = False
        c.multi_queue = []
        c.db = 0
        log.log(log.NOTICE, f"MASTER <-> REPLICA sync: Flushing old data and loading the "
                            f"{payload.size} bytes received")
        # As while recovering: no cyclic GC passes over the objects being loaded.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        # A data set loaded whole publishes no keyspace event, as Redis's RDB load.
        core.notify_flags = 0
        try:
            core.execute(c, [b"FLUSHALL"])
            for batch in batches:
                failed = core.replay(c, batch)
                if failed is not None:
                    i, err = failed
                    raise ReplError(f"full-sync payload command {batch[i][0]!r} failed: "
                                    f"{err.message}")
        finally:
            core.refresh_notify_flags()
            if gc_was_enabled:
                gc.enable()
        repl.reset_stream(new_id, new_off)
        self.has_cache = True
        self.read_offset = new_off
        # The loaded data counts as fsynced (FACK) once our AOF has it on disk.
        self.unsynced_marks.clear()
        self.fsynced_offset = self.acked_fsynced = 0
        self.unsynced_marks.append((c.aof_woff, new_off))
        self.server.schedule_flush(self.writer_obj)

    # -- the live stream --------------------------------------------------------------

    def apply(self, data: bytes) -> None:
        self.last_io = time.monotonic()
        self.read_offset += len(data)
        raw = self.raw
        raw += data
        p = self.parser
        p.feed(data)
        core, c = self.core, self.client
        safe = 0
        ack = False
        while True:
            argv = p.next_command()
            if argv is None:
                break
            name = argv[0].lower()
            if name == b"replconf":
                if len(argv) > 1 and argv[1].lower() == b"getack":
                    ack = True
            elif name != b"ping":
                errors = _errors_in(core.execute(c, argv))
                if errors:
                    self.errors_to_master += 1
                    log.log(log.WARNING, f"== CRITICAL == This replica is sending an error to its "
                                         f"master: '{errors[0].message}' after processing the "
                                         f"command '{argv[0].decode('latin-1')}'")
            if not c.in_multi:
                safe = len(raw) - p.buffered()      # where this command ends
        if safe:
            chunk = bytes(raw[:safe])
            del raw[:safe]
            mark = c.aof_woff
            self.repl.feed_proxied(chunk)        # offset, own backlog, chained replicas
            self.server.schedule_flush(self.writer_obj)
            marks = self.unsynced_marks
            if marks and marks[-1][0] == mark:   # one turn's writes share a mark
                marks[-1] = (mark, self.repl.offset)
            elif mark > self.fsynced_mark:
                marks.append((mark, self.repl.offset))
        if ack:
            self.send_ack()

    @property
    def fsynced_mark(self) -> int:
        aof = self.core.aof
        return aof.durable_pos if aof is not None else 0

    def fack_offset(self) -> int | None:
        """The primary's offset up to which our AOF has fsynced what we applied
        (Redis's fsynced_reploff), or None without an AOF (no FACK is sent)."""
        aof = self.core.aof
        if aof is None:
            return None
        marks = self.unsynced_marks
        while marks and aof.fsynced(marks[0][0]):
            self.fsynced_offset = marks.popleft()[1]
        if not marks:
            self.fsynced_offset = self.repl.offset     # (what came since wrote nothing)
        return self.fsynced_offset

    def send_ack(self) -> None:
        if self.writer is not None and self.state == "connected":
            ack = [b"REPLCONF", b"ACK", b"%d" % self.repl.offset]
            fack = self.fack_offset()
            if fack is not None:
                ack += [b"FACK", b"%d" % fack]
                self.acked_fsynced = fack
            self.writer.write(encode_command(ack))

    def fsync_advanced(self) -> None:
        """Our AOF is durable further: ack at once when that moves the FACK offset,
        so that the primary's WAITAOF need not wait for the next periodic ACK."""
        fack = self.fack_offset()
        if fack is not None and fack > self.acked_fsynced:
            self.send_ack()

    async def _ack_loop(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            self.send_ack()

    def save_state(self, final: bool = False) -> None:
        """The applied primary id/offset and our db, once our data matches them
        (``final``: as the primary's)."""
        if self.has_cache:
            self.repl.save_state(self.client.db, final)

    def cron(self) -> None:
        # The AOF may have moved without a stream turn (a snapshot rotated it).
        if self.repl.saved is not None and self.state == "connected":
            self.save_state()

    # -- INFO / ROLE ------------------------------------------------------------------

    def info_fields(self) -> list[tuple[str, object]]:
        now = time.monotonic()
        up = self.state == "connected"
        fields: list[tuple[str, object]] = [
            ("master_host", self.host), ("master_port", self.port),
            ("master_link_status", "up" if up else "down"),
            ("master_last_io_seconds_ago", int(now - self.last_io) if self.writer is not None else -1),
            ("master_sync_in_progress", int(self.state == "sync")),
            ("slave_read_repl_offset", self.read_offset),
            ("slave_repl_offset", self.repl.offset),
        ]
        if self.state == "sync":
            fields += [("master_sync_total_bytes", self.sync_total),
                       ("master_sync_read_bytes", self.sync_read),
                       ("master_sync_left_bytes", self.sync_total - self.sync_read)]
        if not up:
            fields.append(("master_link_down_since_seconds",
                           -1 if self.down_since is None else int(now - self.down_since)))
        fields += [("slave_priority", self.core.config["replica-priority"]),
                   ("slave_read_only", int(self.core.config["replica-read-only"])),
                   ("replica_announced", int(self.core.config["replica-announced"]))]
        return fields

    def role(self) -> list:
        state = {"connect": b"connect", "connecting": b"connecting", "handshake": b"handshake",
                 "sync": b"sync", "connected": b"connected"}[self.state]
        return [b"slave", self.host.encode(), self.port, state, self.repl.offset]
