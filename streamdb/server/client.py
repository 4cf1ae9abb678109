"""Per-connection state that commands can see (no sockets here)."""

from __future__ import annotations

from typing import Callable

__all__ = ["Client"]


class Client:
    __slots__ = ("id", "name", "db", "resp", "authenticated", "user", "addr", "laddr",
                 "created_ms", "last_ms", "last_cmd", "in_multi", "multi_queue",
                 "multi_error", "watched", "dirty_cas", "blocked", "block_timer",
                 "deliver", "close", "lib_name", "lib_ver", "flags", "kind",
                 "close_after_reply", "query_buffer", "output_size", "woff", "aof_woff",
                 "acl_check")

    def __init__(self, cid: int, now_ms: int, deliver: Callable | None = None,
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
        # deliver(reply) sends a reply produced outside the request path
        # (a blocked client being served); set by the network layer.
        self.deliver = deliver
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
