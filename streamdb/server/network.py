"""The asyncio front end: sockets in, replies out, one event loop.

Each connection owns a RequestParser and a list of encoded replies.  Replies are
not written when produced: at the end of the loop turn ``Server._end_of_turn``
first lets the persistence hooks write (and, under ``appendfsync always``,
fsync) the effects of the whole turn, and only then writes every reply.  That
is group commit: one write and one fsync however many clients wrote.  When a hook
could not make the turn durable (the disk is full or failing), only the replies
of the clients whose own writes are not durable yet wait (with everything queued
behind them on their connection); every other connection's replies go out.

A client whose command blocked stops being read from until it is served; its
pipelined requests wait in its parser, as in Redis.
"""

from __future__ import annotations

import asyncio

from .. import log
from ..protocol import RequestParser
from ..security import protected
from .. import tls
from ..dispatch.client import client_info_line
from .core import Core
from .lifecycle import close_in_forked_children
from .limits import output_limit_reached
from .pipeline import (CLOSE_AFTER_FLUSH, DROP_NOW, QUERY_BUFFER_FULL, READ_ON, RequestLoop,
                       flush_connections)

__all__ = ["Server", "Connection"]

# The longest a blocked client's wake-up timer waits at once (an hour): a CLAIM
# read's min-idle-time may be any 63-bit number of ms, more than a timer takes.
_MAX_WAKE_DELAY_MS = 3_600_000


class Connection(asyncio.Protocol):
    """One client's connection: asyncio's protocol for its socket.  The per-read and
    per-flush work is its RequestLoop's (pipeline.py, compiled), which is also its
    ``data_received``; what is here runs per connection or on rare events."""

    __slots__ = ("server", "core", "transport", "parser", "client", "out", "requests",
                 "data_received")

    def __init__(self, server: "Server") -> None:
        self.server = server
        self.core = server.core
        self.transport = None
        self.parser = RequestParser(server.core.config["proto-max-bulk-len"])
        self.client = None
        self.out: list[bytes] = []
        self.requests = RequestLoop(server.core, None, self.parser, self.out, None, self,
                                    server._to_flush, server.end_turn_needed,
                                    self._resume_later)
        # asyncio's callback for a read, set before the transport exists (uvloop takes
        # it then): the compiled RequestLoop.data_received, one C call per read.
        self.data_received = self.requests.data_received

    # Kept on the RequestLoop (C fields its per-read and per-flush code tests):
    # whether the connection is closing (nothing more is read), and when its pending
    # output first went past the soft output-buffer limit (limits.py), or None.
    closing = property(lambda self: self.requests.closing,
                       lambda self, value: setattr(self.requests, "closing", value))
    soft_limit_since = property(lambda self: self.requests.soft_limit_since,
                                lambda self, value: setattr(self.requests, "soft_limit_since",
                                                            value))

    # -- asyncio callbacks --------------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername") or ("?", 0)
        sock = transport.get_extra_info("sockname") or ("?", 0)
        addr = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        laddr = f"{sock[0]}:{sock[1]}" if isinstance(sock, tuple) else str(sock)
        core = self.core
        if len(core.clients) >= core.config["maxclients"]:
            transport.write(b"-ERR max number of clients reached\r\n")
            core.stats.rejected_connections += 1
            transport.close()
            self.closing = True
            return
        if protected.refuses(core.config["protected-mode"], core.acl.default.nopass,
                             peer[0] if isinstance(peer, tuple) else None):
            transport.write(protected.DENIED)
            core.stats.rejected_connections += 1
            log.log(log.VERBOSE, f"Refused connection from {addr}: protected mode")
            transport.close()
            self.closing = True
            return
        self.client = core.new_client(addr=addr, laddr=laddr)
        self.client.close = self.close_after_flush
        self.parser.authenticated = self.client.authenticated
        self.requests.accept(self.client, transport)

    def connection_lost(self, exc) -> None:
        self.closing = True
        self.requests.conn = None       # (no cycle left: it delivers nothing more)
        if self.client is not None:
            self.core.remove_client(self.client)
            self.server.forget(self)

    def stop_reading(self, action: int) -> None:
        """What RequestLoop.serve said besides READ_ON (RequestLoop.data_received
        calls this): drop, close after the flush, or close for an over-long query
        buffer."""
        if action == QUERY_BUFFER_FULL:
            log.log(log.WARNING, f"Closing client that reached max query buffer length: id={self.client.id} addr={self.client.addr}")
            self.core.stats.query_buffer_limit_disconnections += 1
            self.transport.close()
            self.closing = True
            return
        if action == DROP_NOW:
            self.drop()
        elif action == CLOSE_AFTER_FLUSH:
            self.closing = True
        # Closing either way: the flush writes what is queued (nothing, once dropped)
        # and closes the transport.
        self.server.schedule_flush(self)

    def _resume_later(self) -> None:
        """Run, on a later turn, the requests a blocked client left in its parser."""
        asyncio.get_running_loop().call_soon(self.requests.data_received, None)

    def close_after_flush(self) -> None:
        self.closing = True
        # Also stops RequestLoop.serve when the client's own command closes it (CLIENT KILL
        # of itself): its reply goes out, nothing after it runs.
        self.client.close_after_reply = True
        self.server.schedule_flush(self)

    def flush(self) -> None:
        if self.transport.is_closing():
            # Gone (the peer hung up, or dropped) while its replies waited: a write to
            # the closed transport would raise and stop the flush of the others.
            self.out.clear()
            return
        if self.out:
            if not self.requests.write_out(self.transport):
                # The socket took it all (the usual case): nothing is pending, which
                # is all output_limit_reached would find and record.
                self.soft_limit_since = None
            elif self.output_left_over():
                return
        if self.closing:
            self.transport.close()

    def output_left_over(self) -> bool:
        """The socket did not take all that was written: the output-buffer limits
        (limits.py); whether they dropped the connection."""
        if output_limit_reached(self, self.core.config.values["client-output-buffer-limit"]):
            self.drop_for_output_limit()
            return True
        return False

    def drop_for_output_limit(self) -> None:
        """Redis's closeClientOnOutputBufferLimitReached: drop, without flushing."""
        info = client_info_line(self.core, self.client).decode("utf-8", "replace")
        log.log(log.WARNING, f"Client {info} scheduled to be closed ASAP for overcoming "
                             "of output buffer limits.")
        self.core.stats.output_buffer_limit_disconnections += 1
        self.drop()

    def drop(self) -> None:
        """Close at once: the replies not yet written are dropped, nothing more is read."""
        self.closing = True
        self.out.clear()
        self.transport.abort()


class Server:
    """Listens, runs the loop's periodic work, and ends each turn with the flush."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.connections: set[Connection] = set()
        self._to_flush: dict[Connection, None] = {}
        self._flush_scheduled = False
        # Connections whose replies wait for a failed write's retry (see _end_of_turn).
        self._held: dict[Connection, None] = {}
        self._retry_handle = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.servers: list = []
        # Called at the end of each turn, before replies go out (AOF write, and
        # under appendfsync always its fdatasync).
        self.before_reply_hooks: list = []
        # Asked, when a before-reply hook failed, per client with replies to send:
        # True while that client's own writes are not durable (its replies wait).
        self.reply_gates: list = []
        # Called from the periodic tick (snapshot child reaping, save rules, AOF retries).
        self.cron_hooks: list = []
        self.stopped: asyncio.Future | None = None
        core.on_client_blocked = self._on_blocked
        core.on_client_unblocked = self._on_unblocked
        core.on_client_wake_at = self._on_wake_at
        core.shutdown_requested = self.request_stop

    # -- turn structure -----------------------------------------------------------

    def turn_pending(self) -> bool:
        """Whether this turn's end (``_end_of_turn``) is scheduled."""
        return self._flush_scheduled

    def schedule_flush(self, conn: Connection) -> None:
        """Write ``conn`` at the end of this turn (its ``flush``, or its RequestLoop's
        write when it has one)."""
        self._to_flush[conn] = getattr(conn, "requests", None)
        if not self._flush_scheduled:
            self.end_turn_needed()

    def end_turn_needed(self) -> None:
        """Something joined ``_to_flush`` by itself (RequestLoop.deliver): the turn's
        end is scheduled, once."""
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._end_of_turn)

    def _end_of_turn(self) -> None:
        self._flush_scheduled = False
        durable = True
        for hook in self.before_reply_hooks:
            if hook() is False:
                durable = False
        # A copy, and the dict emptied in place: every RequestLoop holds it.
        conns = self._to_flush.copy()
        self._to_flush.clear()
        if self._held:
            conns = {**self._held, **conns}
            self._held = {}
        if durable:
            # (compiled: most connections are written there; pipeline.py)
            later, pending = flush_connections(conns)
            for conn in later:
                conn.flush()
            for conn in pending:
                conn.output_left_over()
            return
        # Some effects are not on disk.  A client whose own writes are among them is
        # not acknowledged: its connection's replies wait, in order, for a retry
        # (nothing is acknowledged that could still be lost).  Everyone else is
        # answered now: reads, PING, INFO, and the MISCONF of refused writes.
        for conn in conns:
            if self._must_wait(conn):
                self._held[conn] = conns[conn]
            else:
                conn.flush()
        if self._held and self._retry_handle is None:
            self._retry_handle = self.loop.call_later(0.1, self._retry_durability)

    def _must_wait(self, conn) -> bool:
        """Whether ``conn``'s replies wait for the failed write's retry (``reply_gates``).
        What is scheduled like a connection but serves no client (a replica's state
        writer, replication/replica.py) follows the turn's write: it waits."""
        client = getattr(conn, "client", None)
        return client is None or any(gate(client) for gate in self.reply_gates)

    def _retry_durability(self) -> None:
        self._retry_handle = None
        for conn in self._held:
            self._to_flush[conn] = getattr(conn, "requests", None)
        self._held = {}
        self._end_of_turn()

    def forget(self, conn: Connection) -> None:
        """A connection closed: nothing more is written to it."""
        self.connections.discard(conn)
        self._held.pop(conn, None)
        self._to_flush.pop(conn, None)

    # -- blocking -------------------------------------------------------------------

    def _on_blocked(self, client) -> None:
        req = client.blocked
        if req.timeout_ms > 0:
            client.block_timer = self.loop.call_later(
                req.timeout_ms / 1000.0, self.core.unblock_on_timeout, client)

    def _on_unblocked(self, client) -> None:
        if client.block_timer is not None:
            client.block_timer.cancel()
            client.block_timer = None
        self._on_wake_at(client, None)

    def _on_wake_at(self, client, when_ms: int | None) -> None:
        """(Re)schedule the run of a blocked client's command at ``when_ms`` (None: none)."""
        if client.wake_timer is not None:
            client.wake_timer.cancel()
            client.wake_timer = None
        if when_ms is None:
            return
        # A wake-up beyond the cap is taken in steps: each finds nothing and re-arms.
        delay_ms = min(max(when_ms - self.core.now_ms(), 0), _MAX_WAKE_DELAY_MS)
        client.wake_timer = self.loop.call_later(delay_ms / 1000.0, self._wake, client)

    def _wake(self, client) -> None:
        client.wake_timer = None
        self.core.wake_blocked(client)

    # -- lifecycle --------------------------------------------------------------------

    def _new_connection(self) -> Connection:
        conn = Connection(self)
        self.connections.add(conn)
        return conn

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.stopped = self.loop.create_future()
        cfg = self.core.config
        if cfg["metrics-port"]:
            # Same loop as the Redis listener: a scrape reads the keyspace between turns.
            # Listening first: once a client's PING is answered, a scrape is too.
            from .metrics import start_metrics
            self.servers += await start_metrics(self.core)
        if cfg["console-port"]:
            # Also on this loop, and listening first too: its sessions run their commands
            # through Core.execute between turns, and their replies wait for this
            # server's group commit.
            from .console import start_console
            self.servers += await start_console(self.core, self)
        port = cfg["port"]
        if port:
            for addr in cfg["bind"].split():
                addr = addr.lstrip("-")
                srv = await self.loop.create_server(
                    self._new_connection, addr, port, backlog=cfg["tcp-backlog"],
                    reuse_address=True)
                self.servers.append(srv)
        if cfg["tls-port"]:
            try:
                context = tls.server_context(cfg)
            except tls.TlsConfigError as e:
                raise OSError(f"Failed to configure TLS: {e}") from None
            for addr in cfg["bind"].split():
                srv = await self.loop.create_server(
                    self._new_connection, addr.lstrip("-"), cfg["tls-port"],
                    backlog=cfg["tcp-backlog"], reuse_address=True, ssl=context)
                self.servers.append(srv)
        for srv in self.servers:                 # (lifecycle.py says why)
            for sock in srv.sockets:
                close_in_forked_children(sock.fileno())
        self._cron_handle = self.loop.call_later(1.0 / cfg["hz"], self._cron)

    def _cron(self) -> None:
        """Periodic work (Redis's serverCron): active expiry."""
        try:
            self.core.active_expire_cycle()
            for hook in self.cron_hooks:
                hook()
        finally:
            self._cron_handle = self.loop.call_later(1.0 / self.core.config["hz"], self._cron)

    async def close(self) -> None:
        """Stop listening and drop every connection (a failed start-up, or after
        the shutdown closed the AOF: every reply is durable by then)."""
        for conn in list(self.connections):
            conn.flush()
            if conn.transport is not None:
                conn.transport.close()
        for srv in self.servers:
            srv.close()
        self._cron_handle.cancel()

    def request_stop(self) -> None:
        if self.stopped is not None and not self.stopped.done():
            self.stopped.set_result(True)

    async def serve_until_stopped(self) -> None:
        await self.stopped
        for conn in list(self.connections):
            if conn not in self._held:      # (those go once the AOF's close wrote them)
                conn.flush()
        for srv in self.servers:
            srv.close()
        self._cron_handle.cancel()
