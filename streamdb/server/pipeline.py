"""A connection's request loop: the requests of one read, run in order.

Each connection (server/network.py) holds a ``RequestLoop`` and calls its
``serve`` once per read: it feeds the bytes to the connection's parser, takes
the complete requests out of it, runs each through the one entry point
(``Core.execute``) and queues each reply, encoded, on the connection's output
list, until the parser has no complete request left or the client may not go
on (blocked, dropped, closing); ``write_out`` writes the queued replies at the
end of the turn.  Like the connection, it knows frames, not commands: it names
none.

Compiled (streamdb/compiled.py), this is the per-request work of the network
layer out of the interpreter: the connection is an ``asyncio.Protocol`` and
cannot be an extension type, so what it does per request lives here.
"""

from __future__ import annotations

import cython

from .. import log
from ..protocol import CommandError, ProtocolError, encode_reply, encode_reply_pieces
from ..dispatch.client import Client, Outbox
from .core import BLOCKED, DROP, Core, Stats

__all__ = ["RequestLoop", "flush_connections", "READ_ON", "DROP_NOW", "CLOSE_AFTER_FLUSH",
           "QUERY_BUFFER_FULL"]

# What the connection does once RequestLoop.serve returns.
READ_ON = 0            # go on reading (a blocked client is resumed by its delivery)
DROP_NOW = 1           # close at once, dropping what is queued (Core.execute's DROP)
CLOSE_AFTER_FLUSH = 2  # write what is queued, then close (QUIT, a killed client, a protocol error)
QUERY_BUFFER_FULL = 3  # the unparsed input is over client-query-buffer-limit: close, run nothing


# Compiled, a cclass: what serve reads per request are C fields (pipeline.pxd).
@cython.cclass
class RequestLoop(Outbox):
    """One connection's request path: its client, parser and output list; and its
    client's Outbox (what is delivered joins the replies)."""

    __slots__ = ("core", "client", "parser", "out", "transport", "conn", "to_flush",
                 "on_output", "on_resume", "closing", "soft_limit_since",
                 "pieces_queued")

    def __init__(self, core: Core, client: Client | None, parser, out: list, transport=None,
                 conn=None, to_flush: dict | None = None, on_output=None,
                 on_resume=None) -> None:
        self.core = core
        self.client = client            # None until the connection is accepted (accept)
        self.parser = parser
        self.out = out
        self.transport = transport
        self.conn = conn                # the connection (None once it is gone)
        # The server's connections to write at the end of this turn (Server._to_flush,
        # each mapped to its RequestLoop): whenever it is not empty, the end of the turn
        # is scheduled.
        self.to_flush = to_flush
        self.on_output = on_output      # schedules the end of the turn
        self.on_resume = on_resume      # runs the requests a blocked client left, next turn
        # ``out`` holds the pieces of a reply with big bulks (encode_reply_pieces):
        # write_out writes the list as it is instead of joining it.
        self.pieces_queued = False
        # The connection's state that the per-read and per-flush paths test, kept here
        # as C fields (the connection's attributes of the same names read them): nothing
        # more is read once closing; when pending output first went past the soft
        # output-buffer limit (limits.py), or None.
        self.closing = False
        self.soft_limit_since = None

    def accept(self, client: Client, transport) -> None:
        """The connection was accepted: ``client`` is served from now on, over
        ``transport``; what is delivered to it joins the replies."""
        self.client = client
        self.transport = transport
        client.outbox = self

    @cython.ccall
    def data_received(self, data) -> cython.void:
        """A read's bytes (None: resume what the parser holds), from the event loop:
        the connection's ``data_received`` is this method, so a read runs no Python
        frame (Connection.process, interpreted, was ~1.5k instructions a read).  What
        ``serve`` says besides READ_ON goes back to the connection."""
        if self.closing:
            return
        action: cython.int = self.serve(data)
        if action != READ_ON:
            self.conn.stop_reading(action)

    @cython.ccall
    def deliver(self, reply) -> cython.void:
        """A reply produced outside the request path (a blocked client served, a
        MONITOR line, a replica's stream): queued, encoded, with the replies."""
        client: Client = self.client
        self.deliver_encoded(encode_reply(reply, client.resp == 3))

    @cython.ccall
    def deliver_encoded(self, data) -> cython.void:
        """``data``, already encoded, queued with the replies (``deliver``'s end, and
        each Pub/Sub message).

        Here and not in the connection so that it runs compiled: a PUBLISH calls it
        once per subscriber.  What a delivery does is kept to the list append: the
        connection joins the turn's writes only with its first output since its last
        write (output queued means it has joined them already, or is being served and
        joins them after its read), and only the first connection of a turn calls out
        (``on_output``, to schedule the turn's end).  A connection that is gone takes
        nothing; one whose transport is closing is emptied by its flush
        (``flush_connections``), not tested per delivery.  Measured per delivery,
        PUBLISH -P 16 to 10 subscribers (tools/bench_request.py, callgrind): the
        transport's is_closing() 314 instructions, the dict insert 161."""
        if self.conn is None:
            return
        client: Client = self.client
        out: list = self.out
        if not out:
            self._join_turn()
        out.append(data)
        if client.blocked is None and self.parser.buffered():
            # Resume the requests that arrived while blocked, on a later turn.
            self.on_resume()

    def queued_bytes(self) -> int:
        transport = self.transport
        if transport is None:
            return 0
        return transport.get_write_buffer_size() + sum([len(b) for b in self.out])

    @cython.ccall
    def serve(self, data) -> cython.int:
        """Feed ``data`` (one read's bytes; None: resume what is buffered) to the
        parser and run the complete requests in it, in order, appending each
        reply's bytes to the output list; what the connection must do next.

        Reading stops while the client is blocked (its reply comes through
        the client's outbox) and for good once it is to be closed:
        ``client.close_after_reply`` (QUIT, SHUTDOWN; the network layer's
        ``client.close``, e.g. CLIENT KILL of itself, sets it too).  A malformed
        request is answered with Redis's protocol error and the connection closed
        after it; the requests before it ran.  A connection left with replies to
        write joins the turn's writes."""
        stats: Stats
        core: Core = self.core
        parser = self.parser
        if data is not None:
            stats = core.stats
            stats.net_input_bytes += len(data)
            stats.reads_processed += 1
            parser.feed(data)
            # Read per read, not cached: CONFIG SET changes it.
            if parser.buffered() > core.config.values["client-query-buffer-limit"]:
                return QUERY_BUFFER_FULL
        action: cython.int = self._run_requests()
        self.client.query_buffer = parser.buffered()
        if self.out and self.to_flush is not None:
            self._join_turn()
        return action

    @cython.cfunc
    def _join_turn(self) -> cython.void:
        """The connection joins the turn's writes (the server's ``to_flush``); the
        first of a turn schedules the turn's end (``on_output``).  Here, compiled,
        rather than a Python call of the connection's per read."""
        to_flush: dict = self.to_flush
        if not to_flush:
            self.on_output()
        to_flush[self.conn] = self

    @cython.cfunc
    def _run_requests(self) -> cython.int:
        client: Client = self.client
        parser = self.parser
        out: list = self.out
        core: Core = self.core
        reply: object
        encoded: object
        # The parser applies the unauthenticated limits; AUTH and HELLO change it.
        authenticated: cython.bint = client.authenticated
        parser.authenticated = authenticated
        try:
            while client.blocked is None:
                argv = parser.next_command()
                if argv is None:
                    break
                reply = core.execute(client, argv)      # a C call compiled (core.pxd)
                if client.authenticated != authenticated:
                    authenticated = client.authenticated
                    parser.authenticated = authenticated
                if reply is BLOCKED:
                    break
                if reply is DROP:
                    return DROP_NOW
                encoded = encode_reply_pieces(reply, client.resp == 3)
                if type(encoded) is list:
                    out.extend(encoded)
                    self.pieces_queued = True
                else:
                    out.append(encoded)
                if client.close_after_reply:
                    return CLOSE_AFTER_FLUSH
        except ProtocolError as e:
            # latin-1: the message quotes the offending byte raw, as Redis does.
            out.append(b"-ERR %s\r\n" % str(e).encode("latin-1", "replace"))
            core.count_error(CommandError(f"ERR {e}"))
            log.log(log.VERBOSE, f"Protocol error ({e}) from client: id={client.id} addr={client.addr}")
            return CLOSE_AFTER_FLUSH
        return READ_ON

    @cython.ccall
    def write_out(self, transport) -> cython.bint:
        """Write the queued replies (there are some) to ``transport`` as one write
        and empty the list; whether the transport holds output the socket did not
        take (the connection then checks its output-buffer limits)."""
        out: list = self.out
        stats: Stats = self.core.stats
        stats.writes_processed += 1
        if self.pieces_queued:
            # (one write of the pieces as they are: joined, a 100 MB value is copied)
            self.pieces_queued = False
            stats.net_output_bytes += sum([len(b) for b in out])
            transport.writelines(out)
            out.clear()
        else:
            # Not typed bytes: a reply may be a bytes subclass (a replica's Raw stream).
            data = b"".join(out) if len(out) > 1 else out[0]
            out.clear()
            stats.net_output_bytes += len(data)
            transport.write(data)
        if transport.get_write_buffer_size():
            return True
        self.client.output_size = 0
        return False


@cython.ccall
def flush_connections(conns: dict) -> tuple:
    """The end of a turn's writes (Server._end_of_turn), compiled for the usual
    connection: open, not closing, its queued replies all taken by the socket.
    ``conns`` maps each connection to its RequestLoop (None for what has none, like
    a replica's state writer).  Each usual connection is written here; returned are
    (the ones that flush themselves: closing, gone, or with no RequestLoop; the ones
    written whose socket kept some output: their output-buffer limits are checked).

    As a Python method per connection, the flush was most of a PUBLISH to 100
    subscribers at -P 1 after the delivery itself (each message is a turn, and each
    turn writes to every subscriber); what it tests per connection is the
    RequestLoop's C fields, not the connection's attributes."""
    later: list = []
    pending: list = []
    loop: RequestLoop
    for conn, requests in conns.items():
        if requests is None:
            later.append(conn)
            continue
        loop = requests
        transport = loop.transport
        if loop.closing or transport.is_closing():
            later.append(conn)
            continue
        if loop.out:
            if loop.write_out(transport):
                pending.append(conn)
            elif loop.soft_limit_since is not None:
                loop.soft_limit_since = None
    return later, pending
