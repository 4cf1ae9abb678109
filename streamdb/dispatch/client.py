"""Per-connection state that commands can see (no sockets here), and the line that
describes a client in CLIENT LIST / CLIENT INFO, the ACL LOG and the server log."""

from __future__ import annotations

import cython

__all__ = ["Client", "Outbox", "client_info_line", "client_type"]


@cython.cclass
class Outbox:
    """Where a client's replies produced outside its request path go: a blocked
    client's reply once it is served, a Pub/Sub message, a MONITOR line, a replica's
    stream.  The network layer's connection implements it (server/pipeline.py's
    RequestLoop); a bare core's clients (tools, tests, replay) have none.

    A class rather than a callable so that the compiled dispatch calls ``deliver``
    in C: a PUBLISH calls it once per subscriber (the Python call of a bound method
    was a quarter of a delivery; tools/bench_request.py, callgrind)."""

    __slots__ = ()

    @cython.ccall
    def deliver(self, reply) -> cython.void:
        """Queue ``reply`` (a reply value, or Raw bytes) for the client."""
        raise NotImplementedError

    @cython.ccall
    def deliver_encoded(self, data) -> cython.void:
        """Queue ``data``, bytes already in the client's protocol, as they are (what
        Pub/Sub encodes once for all its subscribers of one protocol)."""
        raise NotImplementedError

    def queued_bytes(self) -> int:
        """Bytes queued for the client that its socket has not taken yet."""
        raise NotImplementedError


# Compiled, a cclass whose attributes are the C fields declared in client.pxd
# (what the compiled dispatch reads per request); interpreted, a plain class
# with the same attributes as slots.
@cython.cclass
class Client:
    __slots__ = ("id", "name", "db", "resp", "authenticated", "user", "addr", "laddr",
                 "created_ms", "last_ms", "last_cmd", "in_multi", "multi_queue",
                 "multi_error", "watched", "dirty_cas", "blocked", "block_timer", "wake_timer",
                 "outbox", "close", "lib_name", "lib_ver", "flags", "kind",
                 "close_after_reply", "query_buffer", "output_size", "woff", "aof_woff",
                 "acl_check", "pubsub")

    def __init__(self, cid: int, now_ms: int, outbox: Outbox | None = None,
                 addr: str = "", laddr: str = "") -> None:
        self.id = cid
        self.name = b""
        self.db = 0
        self.resp = 2
        self.authenticated = True
        self.user = b"default"
        self.addr = addr
        self.laddr = laddr
        self.created_ms = now_ms
        self.last_ms = now_ms
        self.last_cmd = "NULL"
        self.in_multi = False
        self.multi_queue: list[list[bytes]] = []
        self.multi_error = False
        self.watched: list[tuple[int, bytes]] = []
        self.dirty_cas = False
        self.blocked = None          # BlockRequest while blocked
        self.block_timer = None      # network layer's timer handle
        self.wake_timer = None       # network layer's timer of BlockRequest.next_wake
        # Where replies produced outside the request path go (Outbox); set by the
        # network layer, None for a client with no connection.
        self.outbox = outbox
        self.close = None            # close() asks the network layer to drop the client
        self.lib_name = b""
        self.lib_ver = b""
        self.flags = ""
        self.kind = "normal"         # normal | replica | master | aof
        self.close_after_reply = False
        self.query_buffer = 0
        self.output_size = 0
        self.woff = 0                # replication offset after its last write (WAIT)
        self.aof_woff = 0            # the AOF mark of its last write (WAITAOF; Aof.fsynced)
        # The client's User when that user is restricted, else None (security/enforce.py).
        self.acl_check = None
        # Its Pub/Sub subscriptions (dispatch/pubsub.py's Subscriptions), None while it has none.
        self.pubsub = None


_KIND_FLAGS = {"replica": "S", "master": "M"}


def _client_flags(core, c) -> str:
    """Redis's CLIENT LIST flags letters for the states we have."""
    flags = _KIND_FLAGS.get(c.kind, "")
    if c.id in core.observe.monitors:
        flags += "O"
    if c.pubsub is not None:
        flags += "P"
    if c.in_multi:
        flags += "x"
    if c.blocked is not None:
        flags += "b"
    if c.dirty_cas:
        flags += "d"
    if c.close_after_reply:
        flags += "c"
    return flags or "N"


def client_type(c) -> str:
    """Redis's client type (CLIENT LIST/KILL TYPE, the output-buffer limit classes):
    its kind, but "pubsub" for a normal client with a subscription."""
    return "pubsub" if c.pubsub is not None and c.kind == "normal" else c.kind


def _subscription_counts(c) -> tuple[int, int, int]:
    """CLIENT LIST's sub, psub and ssub: its channels, patterns, shard channels."""
    return (0, 0, 0) if c.pubsub is None else tuple(len(names) for names in c.pubsub.kinds)


def client_info_line(core, c) -> bytes:
    """Redis's CLIENT LIST line for client ``c``."""
    now = core.now_ms()
    flags = _client_flags(core, c)
    # What we hold for the client: queued MULTI commands, unparsed input, pending output.
    multi_mem = sum(len(a) for argv in c.multi_queue for a in argv)
    cmd = c.last_cmd.replace("|", "|")
    sub, psub, ssub = _subscription_counts(c)
    fields = [
        f"id={c.id}", f"addr={c.addr}", f"laddr={c.laddr}", "fd=8",
        f"name={c.name.decode('utf-8', 'replace')}", f"age={(now - c.created_ms) // 1000}",
        f"idle={(now - c.last_ms) // 1000}", f"flags={flags}", f"db={c.db}", f"sub={sub}", f"psub={psub}",
        f"ssub={ssub}", f"multi={len(c.multi_queue) if c.in_multi else -1}", f"qbuf={c.query_buffer}",
        "qbuf-free=0", "argv-mem=0", f"multi-mem={multi_mem}", "rbs=0", "rbp=0", "obl=0", "oll=0",
        f"omem={c.output_size}", f"tot-mem={c.query_buffer + c.output_size + multi_mem}",
        "events=r", f"cmd={cmd}",
        f"user={c.user.decode('utf-8', 'replace')}", "redir=-1", f"resp={c.resp}",
        f"lib-name={c.lib_name.decode('utf-8', 'replace')}",
        f"lib-ver={c.lib_ver.decode('utf-8', 'replace')}",
    ]
    return " ".join(fields).encode()
