"""Replication, primary side: replication id and offset, the backlog, replica links, WAIT.

The replication stream is the effect stream: ``Replication.sink`` is an effect
sink (Core.add_effect_sink) that writes each batch's RESP, with a ``SELECT``
whenever the database changes, exactly as the AOF writer does (the same bytes:
dispatch/effects.py encodes a batch once for both).  Offsets count
bytes of that stream, as Redis's do:

* ``offset`` (INFO master_repl_offset) is the number of bytes in the stream so far;
* the backlog keeps the last ``repl-backlog-size`` bytes, from stream position
  ``backlog_start`` (INFO repl_backlog_first_byte_offset is ``backlog_start + 1``);
* a replica that has processed N bytes asks ``PSYNC <replid> N+1``.

A replica link is a normal client connection that sent PSYNC: from then on its
``client.kind`` is ``"replica"`` (no READONLY/MISCONF rules, not a normal
client), the stream is written to it with ``client.outbox.deliver(Raw(bytes))`` at the
end of each loop turn (``flush``, a ``before_reply_hook``), and the REPLCONF
ACKs it sends are ordinary commands on the same connection.

The same object serves a replica: there the backlog is fed with the exact
bytes received from its primary (``feed_proxied``), not with re-encoded effects,
so a chained replica sees the primary's offsets and ids (Redis's psync2), and
after ``REPLICAOF NO ONE`` the old id stays valid as ``replid2`` up to
``second_offset``.
"""

from __future__ import annotations

import os
import time
from collections import deque

from .. import log
from ..dispatch.context import BlockRequest
from ..dispatch.effects import EffectBatch
from ..protocol import encode_command
from ..protocol.reply import OK, CommandError, Raw
from . import state
from .fullsync import CHECKSUM_CAPA, PayloadTransfer
from .state import NO_ID, SavedState

__all__ = ["Replication", "ReplicaLink", "new_replid", "local_fsynced", "WAIT_KEY"]

# The pseudo key WAIT and WAITAOF block on: an ACK (or the local AOF becoming
# durable further) signals it, so the core's blocked-client machinery (FIFO,
# unblock on disconnect) serves them too.
WAIT_KEY = b"\x00streamdb:wait"
# Redis's reply to a write on a primary with too few good replicas (min-replicas-*).
NOREPLICAS = "NOREPLICAS Not enough good replicas to write."
PING_CMD = encode_command([b"PING"])
GETACK_CMD = encode_command([b"REPLCONF", b"GETACK", b"*"])


def local_fsynced(core, client) -> int:
    """1 when this server's AOF has fsynced ``client``'s writes (its ``aof_woff``), else 0
    (always 0 without an AOF)."""
    aof = core.aof
    return int(aof is not None and aof.fsynced(client.aof_woff))


def new_replid() -> str:
    return os.urandom(20).hex()


class ReplicaLink:
    """One connected replica, as the primary sees it."""

    __slots__ = ("client", "ip", "port", "ack_offset", "aof_offset", "ack_time", "since",
                 "transfer", "held")

    def __init__(self, client, ip: str, port: int) -> None:
        self.client = client
        self.ip = ip
        self.port = port
        self.ack_offset = 0
        # Up to where the replica's AOF is fsynced (REPLCONF ACK .. FACK <offset>);
        # a replica without an AOF never sends it.
        self.aof_offset = 0
        now = time.monotonic()
        self.ack_time = now
        self.since = now
        self.transfer: PayloadTransfer | None = None   # the full-sync payload on its way
        self.held: list[bytes] | None = None    # live stream kept until the payload is acked

    def touch(self) -> None:
        self.ack_time = time.monotonic()

    def go_online(self) -> None:
        """The replica acked the loaded payload: send the stream held meanwhile."""
        held, self.held, self.transfer = self.held, None, None
        if held:
            self.client.outbox.deliver(Raw(b"".join(held)))

    def stop_transfer(self, why: str) -> None:
        if self.transfer is not None:
            self.transfer.abort(why)
            self.transfer = None
        self.held = None

    @property
    def name(self) -> str:
        return f"{self.ip}:{self.port}"


class Replication:
    def __init__(self, core, server=None) -> None:
        self.core = core
        self.server = server
        self.replid = new_replid()
        self.replid2 = NO_ID
        self.second_offset = -1
        self.offset = 0
        self.backlog: deque[bytes] = deque()
        self.backlog_start = 0
        self.histlen = 0
        self.backlog_active = False
        self.cur_db = -1                 # the db the stream is in (-1: next batch SELECTs)
        self.pending: list[bytes] = []   # stream bytes not yet written to the links
        self.links: dict[int, ReplicaLink] = {}
        self.handshakes: dict[int, dict] = {}    # client id -> REPLCONF info before PSYNC
        self.waiters: dict[int, tuple] = {}      # client id -> (client, req, target, numreplicas)
        self.getack_wanted = False
        # What the last refresh_good_replicas counted: INFO min_slaves_good_slaves says
        # the number the NOREPLICAS check uses, as Redis's repl_good_slaves_count.
        self.good_replica_count = 0
        self.last_ping = time.monotonic()
        self.sync_full = 0
        self.sync_partial_ok = 0
        self.sync_partial_err = 0
        self.replica = None              # replica.ReplicaSide while following a primary
        self.saved: SavedState | None = None     # what replication.state holds (state.py)
        self.state_writer = state.StateWriter()
        # Another server shares this stream: a replica synced from us, or we from a
        # primary (state.py's ``followed``; restored with the state at start-up).
        self.followed = False
        self.cached_state: SavedState | None = None  # read at start-up, checked after loading

    # -- the stream ---------------------------------------------------------------

    def create_backlog(self) -> None:
        if self.backlog_active:
            return
        self.backlog_active = True
        self.backlog.clear()
        self.backlog_start = self.offset
        self.histlen = 0
        self.core.add_effect_sink(self.sink)
        log.log(log.NOTICE, f"Replication backlog created, my new replication IDs are "
                            f"'{self.replid}' and '{self.replid2}'")

    def sink(self, batch: EffectBatch) -> None:
        """Effect sink: one command's (or transaction's) effects into the stream,
        after a SELECT when the stream is in another database."""
        if self.core.is_replica:
            return      # a replica's stream is its primary's bytes (feed_proxied)
        data = batch.resp_from(self.cur_db)
        self.cur_db = batch.final_db()
        self._feed(data)
        writer = self.core.current_client
        if writer is not None:
            writer.woff = self.offset

    def feed_proxied(self, data: bytes) -> None:
        """A replica: bytes applied from its primary's stream, passed on unchanged."""
        if not self.backlog_active:
            self.create_backlog()
        self._feed(data)
        self.flush()

    def _feed(self, data: bytes) -> None:
        self.backlog.append(data)
        self.histlen += len(data)
        self.offset += len(data)
        size = self.core.config["repl-backlog-size"]
        if self.histlen > size:
            bl = self.backlog
            while self.histlen - len(bl[0]) >= size:
                old = bl.popleft()
                self.histlen -= len(old)
                self.backlog_start += len(old)
            if self.histlen > size:
                cut = self.histlen - size
                bl[0] = bl[0][cut:]
                self.histlen -= cut
                self.backlog_start += cut
        if self.links:
            self.pending.append(data)

    def backlog_from(self, pos: int) -> bytes:
        """The stream bytes from position ``pos`` to the end (pos within the backlog)."""
        skip = pos - self.backlog_start
        out = []
        for chunk in self.backlog:
            if skip >= len(chunk):
                skip -= len(chunk)
                continue
            out.append(chunk[skip:] if skip else chunk)
            skip = 0
        return b"".join(out)

    def reset_stream(self, replid: str, offset: int) -> None:
        """A replica after a full sync: the primary's id and offset, an empty backlog."""
        self.replid = replid
        self.replid2 = NO_ID
        self.second_offset = -1
        self.offset = offset
        self.backlog.clear()
        self.backlog_start = offset
        self.histlen = 0
        self.pending.clear()
        if not self.backlog_active:
            self.create_backlog()

    def shift_replid(self) -> None:
        """Promotion: a new id; the old one stays valid up to the current offset (psync2)."""
        self.flush()
        self.replid2 = self.replid
        self.second_offset = self.offset + 1
        self.replid = new_replid()
        self.cur_db = -1
        log.log(log.NOTICE, f"Setting secondary replication ID to {self.replid2}, valid up to "
                            f"offset: {self.second_offset}. New replication ID is {self.replid}")

    def flush(self) -> None:
        """End of turn (and cron): write the stream bytes of this turn to every link."""
        if self.getack_wanted and self.links and not self.core.is_replica:
            self.getack_wanted = False
            self._feed(GETACK_CMD)
        if not self.pending:
            return
        data = b"".join(self.pending) if len(self.pending) > 1 else self.pending[0]
        self.pending.clear()
        clients = self.core.clients
        for link in list(self.links.values()):
            if link.held is not None:
                link.held.append(data)
            elif link.client.id in clients:
                link.client.outbox.deliver(Raw(data))

    def stream_db(self) -> int:
        """The db a replica's applying client is in at the current offset."""
        if self.core.is_replica and self.replica is not None and self.replica.client is not None:
            return self.replica.client.db
        return max(self.cur_db, 0)

    # -- the saved state (state.py) -------------------------------------------------

    def save_state(self, db: int, final: bool = False) -> None:
        """Record that the AOF, as it ends now, holds the data at ``self.offset``
        (``final``: at shutdown, even while a failed write of it waits out its retry delay)."""
        pos = state.aof_position(self.core)
        if pos is None:
            return
        st = SavedState(self.replid, self.offset, db, pos[0], pos[1], self.replid2,
                        self.second_offset, self.followed)
        if st != self.saved and self.state_writer.save(self.core.config, st, now_or_never=final):
            self.saved = st

    def forget_state(self) -> None:
        state.remove(self.core.config)
        self.saved = None

    def restore(self, st: SavedState) -> None:
        """A primary restarted from an AOF that ends where ``st`` says.

        Its data is the stream at ``st.offset``, but a replica may have seen bytes
        past it that the restarted primary lost (written to the link, not yet saved
        in the state).  So the restored id becomes the secondary one, valid up to
        this offset only (psync2, as on promotion): a replica at or before it
        continues partially, one ahead of it gets a full resync, and new writes
        belong to a new id.  The backlog starts empty at the restored offset.
        """
        self.replid, self.offset = st.replid, st.offset
        self.followed = st.followed
        self.backlog_start = st.offset
        self.create_backlog()
        log.log(log.NOTICE, f"Replication ID and offset restored from the AOF: "
                            f"{self.replid}:{self.offset}")
        self.shift_replid()

    # -- the handshake --------------------------------------------------------------

    def replconf(self, client, argv: list[bytes]):
        if len(argv) % 2 == 0:
            raise CommandError("ERR syntax error")
        for i in range(1, len(argv), 2):
            opt, val = argv[i].lower(), argv[i + 1]
            if opt == b"listening-port":
                try:
                    port = int(val)
                except ValueError:
                    raise CommandError("ERR value is not an integer or out of range") from None
                self.handshakes.setdefault(client.id, {})["port"] = port
            elif opt == b"ip-address":
                self.handshakes.setdefault(client.id, {})["ip"] = val.decode("latin-1")
            elif opt == b"capa":
                self.handshakes.setdefault(client.id, {}).setdefault("capa", set()).add(val.lower())
            elif opt == b"ack":
                link = self.links.get(client.id)
                if link is not None:
                    try:
                        off = int(val)
                    except ValueError:
                        return Raw(b"")
                    link.ack_time = time.monotonic()
                    if link.held is not None and link.transfer is not None and link.transfer.done:
                        link.go_online()
                    if off > link.ack_offset:
                        link.ack_offset = off
                        self._signal_waiters()
                    if self.core.replicas_refusal is not None:     # a good replica more?
                        self.refresh_good_replicas()
                    # REPLCONF ACK <offset> FACK <aofoffset> (Redis >= 7.2 replicas)
                    if i + 3 < len(argv) and argv[i + 2].lower() == b"fack":
                        try:
                            fack = int(argv[i + 3])
                        except ValueError:
                            return Raw(b"")
                        if fack > link.aof_offset:
                            link.aof_offset = fack
                            self._signal_waiters()
                return Raw(b"")       # ACKs are never answered
            elif opt == b"getack":
                return Raw(b"")       # only a replica answers GETACK (on its own link)
            else:
                raise CommandError(f"ERR Unrecognized REPLCONF option: "
                                   f"{argv[i].decode('utf-8', 'replace')}")
        return OK

    def psync(self, client, replid: bytes, offset_raw: bytes):
        core = self.core
        if client.kind == "replica":
            raise CommandError("ERR Replica already connected")
        if core.is_replica and (self.replica is None or self.replica.state != "connected"):
            raise CommandError("NOMASTERLINK Can't SYNC while not connected with my master")
        try:
            psync_offset = int(offset_raw)
        except ValueError:
            psync_offset = -1
        info = self.handshakes.pop(client.id, {})
        ip = info.get("ip") or client.addr.rsplit(":", 1)[0]
        port = info.get("port", 0)
        name = f"{ip}:{port}"
        log.log(log.NOTICE, f"Replica {name} asks for synchronization")
        self.flush()                     # bytes before this point belong to the other links
        if not self.backlog_active:
            self.create_backlog()
        rid = replid.decode("latin-1", "replace")
        pos = psync_offset - 1
        reason = self._refuse_partial(rid, psync_offset)
        client.kind = "replica"
        link = ReplicaLink(client, ip, port)
        self.followed = True
        if reason is None:
            data = self.backlog_from(pos)
            link.ack_offset = pos
            self.links[client.id] = link
            self.refresh_good_replicas()      # online at once: it may allow writes again
            self.sync_partial_ok += 1
            log.log(log.NOTICE, f"Partial resynchronization request from {name} accepted. Sending "
                                f"{len(data)} bytes of backlog starting from offset {psync_offset}.")
            return Raw(b"+CONTINUE %s\r\n" % self.replid.encode() + data)
        if rid != "?":
            self.sync_partial_err += 1
            log.log(log.NOTICE, f"Partial resynchronization not accepted: {reason}")
        else:
            log.log(log.NOTICE, f"Full resync requested by replica {name}")
        self.sync_full += 1
        link.ack_offset = -1     # counts for WAIT once it acks, i.e. once the payload is loaded
        link.held = []
        link.transfer = PayloadTransfer(self, link, self.stream_db(),
                                        checksum=CHECKSUM_CAPA in info.get("capa", ()))
        self.links[client.id] = link
        log.log(log.NOTICE, f"Starting full sync with replica {name}: payload streamed from "
                            f"child {link.transfer.pid} at offset {self.offset}")
        return Raw(b"+FULLRESYNC %s %d\r\n" % (self.replid.encode(), self.offset)
                   + link.transfer.header)

    def _refuse_partial(self, rid: str, psync_offset: int) -> str | None:
        """None when ``PSYNC rid psync_offset`` can continue from the backlog, else why not."""
        if rid == "?":
            return "full resync requested"
        if rid != self.replid:
            if rid != self.replid2:
                return f"Replication ID mismatch (Replica asked for '{rid}', my replication IDs " \
                       f"are '{self.replid}' and '{self.replid2}')"
            if psync_offset > self.second_offset:
                return f"Requested offset for second ID was {psync_offset}, but I can reply up " \
                       f"to {self.second_offset}"
        pos = psync_offset - 1
        if not self.backlog_active or pos < self.backlog_start or pos > self.offset:
            return f"Unable to partial resync with replica for lack of backlog (Replica request " \
                   f"was: {psync_offset}), my backlog covers {self.backlog_start + 1}.." \
                   f"{self.offset}"
        return None

    def drop_links(self, why: str) -> None:
        for link in list(self.links.values()):
            log.log(log.NOTICE, f"Disconnecting replica {link.name}: {why}")
            link.stop_transfer(why)
            if link.client.close is not None:
                link.client.close()
        self.links.clear()
        self.pending.clear()

    # -- WAIT -------------------------------------------------------------------------

    def count_acks(self, target: int, fsynced: bool = False) -> int:
        """Connected replicas that acked ``target`` (``fsynced``: that fsynced it to their AOF)."""
        clients = self.core.clients
        if fsynced:
            return sum(1 for link in self.links.values()
                       if link.ack_offset >= 0 and link.aof_offset >= target
                       and link.client.id in clients)
        return sum(1 for link in self.links.values()
                   if link.ack_offset >= target and link.client.id in clients)

    def wait(self, ctx, numreplicas: int, timeout_ms: int):
        """WAIT: how many replicas have this client's writes, blocking until
        ``numreplicas`` do or the timeout."""
        # The offset after this client's own last write, as Redis's c->woff: a
        # client that wrote nothing is covered by every connected replica.
        target = ctx.client.woff
        return self._wait_for(ctx, lambda: self.count_acks(target),
                              lambda n: n >= numreplicas, timeout_ms, "wait")

    def waitaof(self, ctx, numlocal: int, numreplicas: int, timeout_ms: int):
        """WAITAOF: [whether the local AOF fsynced this client's writes, how many
        replicas did], blocking until ``numlocal`` and ``numreplicas`` are met or the timeout."""
        client = ctx.client
        target = client.woff
        return self._wait_for(
            ctx, lambda: [local_fsynced(self.core, client), self.count_acks(target, fsynced=True)],
            lambda got: got[0] >= numlocal and got[1] >= numreplicas, timeout_ms, "waitaof")

    def _wait_for(self, ctx, counts, enough, timeout_ms: int, command: str):
        """The reply ``counts()`` once ``enough`` of it (or at the timeout), blocking on
        WAIT_KEY meanwhile; never blocks where a command may not (MULTI, replay)."""
        got = counts()
        client = ctx.client
        if enough(got) or ctx.in_exec or ctx.replaying or client.outbox is None:
            return got

        def serve(_ctx):
            now = counts()
            if enough(now):
                self.waiters.pop(client.id, None)
                return now
            return None

        req = BlockRequest([WAIT_KEY], 0, serve, got, command)
        self.waiters[client.id] = (client, req)
        self.getack_wanted = True
        if timeout_ms > 0 and self.server is not None and self.server.loop is not None:
            self.server.loop.call_later(timeout_ms / 1000.0, self._wait_timeout, client, req,
                                        counts)
        return req

    def _wait_timeout(self, client, req, counts) -> None:
        self.waiters.pop(client.id, None)
        if client.blocked is req:
            self.core.unblock(client, counts())

    def aof_durable(self) -> None:
        """The local AOF is durable further (Aof.durable_listeners): WAITAOF's
        waiters may be done; a replica tells its primary (FACK)."""
        if self.replica is not None:
            self.replica.fsync_advanced()
        if self.waiters:
            self._signal_waiters()
            if self.core.ready_keys and self.server is not None and self.server.loop is not None:
                # (possibly in the middle of a command: serve on a turn of its own)
                self.server.loop.call_soon(self.core.serve_ready_keys)

    def _signal_waiters(self) -> None:
        for client, req in list(self.waiters.values()):
            if client.blocked is req:
                self.core.signal_key(client.db, WAIT_KEY)
            else:
                self.waiters.pop(client.id, None)

    # -- min-replicas-to-write ----------------------------------------------------------

    def good_replicas(self) -> int:
        """Replicas online whose last REPLCONF ACK is at most min-replicas-max-lag whole
        seconds old (Redis's repl_good_slaves_count)."""
        core = self.core
        now = time.monotonic()
        max_lag = core.config["min-replicas-max-lag"]
        return sum(1 for l in self.links.values() if l.ack_offset >= 0
                   and l.client.id in core.clients and int(now - l.ack_time) <= max_lag)

    def min_replicas_configured(self) -> bool:
        """Both min-replicas-* set (Redis then shows INFO min_slaves_good_slaves; only a
        primary refuses writes for them)."""
        cfg = self.core.config
        return bool(cfg["min-replicas-to-write"]) and bool(cfg["min-replicas-max-lag"])

    def refresh_good_replicas(self, changed: list[str] | None = None) -> None:
        """Set ``core.replicas_refusal`` (NOREPLICAS for writes) while fewer than
        min-replicas-to-write replicas are good.  Runs on every cron tick (lags grow),
        every ACK, a role change and CONFIG SET (a config listener: ``changed``)."""
        self.good_replica_count = self.good_replicas()
        short = not self.core.is_replica and self.min_replicas_configured() and \
            self.good_replica_count < self.core.config["min-replicas-to-write"]
        self.core.replicas_refusal = NOREPLICAS if short else None

    # -- periodic work ----------------------------------------------------------------

    def cron(self) -> None:
        core = self.core
        now = time.monotonic()
        timeout = core.config["repl-timeout"]
        for cid, link in list(self.links.items()):
            if cid not in core.clients:
                del self.links[cid]
                link.stop_transfer("the replica disconnected")
                log.log(log.NOTICE, f"Connection with replica {link.name} lost.")
            elif now - link.ack_time > timeout:
                del self.links[cid]
                link.stop_transfer("timeout")
                log.log(log.WARNING, f"Disconnecting timedout replica (streaming sync): {link.name}")
                if link.client.close is not None:
                    link.client.close()
        for cid in [c for c in self.handshakes if c not in core.clients]:
            del self.handshakes[cid]
        if self.links and not core.is_replica and \
                now - self.last_ping >= core.config["repl-ping-replica-period"]:
            self.last_ping = now
            self._feed(PING_CMD)
        self.flush()
        self.refresh_good_replicas()
        if self.replica is not None:
            self.replica.cron()
        elif not core.is_replica and self.core.config["appendonly"]:
            # Not per turn (a file rename per write turn costs the primary): a kill -9
            # right after a write finds the state behind the AOF, hence a full resync.
            self.save_state(self.cur_db)

    # -- INFO / ROLE --------------------------------------------------------------------

    def info_fields(self) -> list[tuple[str, object]]:
        core = self.core
        fields: list[tuple[str, object]] = []
        if core.is_replica and self.replica is not None:
            fields += [("role", "slave")] + self.replica.info_fields()
        else:
            fields.append(("role", "master"))
        now = time.monotonic()
        live = [l for l in self.links.values() if l.client.id in core.clients]
        fields.append(("connected_slaves", len(live)))
        if self.min_replicas_configured():
            fields.append(("min_slaves_good_slaves", self.good_replica_count))
        for i, link in enumerate(live):
            state = "online" if link.ack_offset >= 0 else "send_bulk"
            fields.append((f"slave{i}", f"ip={link.ip},port={link.port},state={state},"
                                        f"offset={max(link.ack_offset, 0)},"
                                        f"lag={int(now - link.ack_time)}"))
        fields += [
            ("master_failover_state", "no-failover"),
            ("master_replid", self.replid), ("master_replid2", self.replid2),
            ("master_repl_offset", self.offset), ("second_repl_offset", self.second_offset),
            ("repl_backlog_active", int(self.backlog_active)),
            ("repl_backlog_size", core.config["repl-backlog-size"]),
            ("repl_backlog_first_byte_offset", self.backlog_start + 1 if self.backlog_active else 0),
            ("repl_backlog_histlen", self.histlen),
        ]
        return fields

    def info_stats(self) -> list[tuple[str, object]]:
        return [("sync_full", self.sync_full), ("sync_partial_ok", self.sync_partial_ok),
                ("sync_partial_err", self.sync_partial_err)]

    def role(self) -> list:
        if self.core.is_replica and self.replica is not None:
            return self.replica.role()
        live = [l for l in self.links.values() if l.client.id in self.core.clients]
        return [b"master", self.offset,
                [[l.ip.encode(), b"%d" % l.port, b"%d" % max(l.ack_offset, 0)] for l in live]]

