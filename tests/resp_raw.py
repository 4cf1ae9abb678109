"""A tiny RESP client that keeps the wire types, for differential reply checks.

Each reply becomes a tagged value: ``(b"$", b"data")``, ``(b":", 5)``,
``(b"_", None)`` / ``(b"$", None)`` for nils, ``(b"*", [...])``, ``(b"%", [k, v, ...])``,
``(b"+", b"OK")``, ``(b"-", b"ERR ...")``.  Comparing two of them compares
types as well as values, so a bulk string where Redis sends an integer fails.
"""

from __future__ import annotations

import socket


def encode(args) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a.encode() if isinstance(a, str) else (b"%d" % a if isinstance(a, int) else a)
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class RawClient:
    def __init__(self, port: int, resp3: bool = False) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.f = self.sock.makefile("rb")
        if resp3:
            self.call("HELLO", "3")

    def call(self, *args):
        self.sock.sendall(encode(args))
        return self._read()

    def _read(self):
        line = self.f.readline()
        if not line:
            raise ConnectionError("closed")
        t, rest = line[:1], line[1:-2]
        if t in (b"+", b"-"):
            return (t, rest)
        if t == b":":
            return (t, int(rest))
        if t == b"_":
            return (t, None)
        if t == b",":
            return (t, rest)
        if t in (b"$", b"="):
            n = int(rest)
            if n < 0:
                return (t, None)
            data = self.f.read(n + 2)[:-2]
            return (t, data)
        if t in (b"*", b"~", b">", b"%"):
            n = int(rest)
            if n < 0:
                return (t, None)
            k = 2 * n if t == b"%" else n
            return (t, [self._read() for _ in range(k)])
        raise ValueError(line)

    def close(self) -> None:
        self.f.close()
        self.sock.close()


def plain(v):
    """Drop the type tags (for readable assertions)."""
    t, x = v
    if isinstance(x, list):
        return [plain(i) for i in x]
    return x


def as_pairs(v) -> list:
    """A map reply (flat array or RESP3 map) as [(key bytes, tagged value), ...]."""
    items = v[1]
    return [(items[i][1], items[i + 1]) for i in range(0, len(items), 2)]
