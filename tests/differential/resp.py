"""A tiny blocking RESP2/RESP3 client that keeps every reply detail.

redis-py turns replies into Python values and loses what a differential test
must compare: ``$-1`` versus ``*-1``, a status versus a bulk string, a map
versus a flat array.  This client parses replies into tagged structures, so
two servers' replies compare equal only if their bytes mean exactly the same.
"""

from __future__ import annotations

import socket

from streamdb.protocol.request import encode_request as encode_command  # noqa: F401 (used by the tests)

__all__ = ["RawClient", "Err", "Status", "Null", "NullArray", "RMap", "RSet", "encode_command"]


class Err(str):
    """An error reply (``-...``)."""

    def __repr__(self) -> str:
        return f"Err({str.__repr__(self)})"


class Status(str):
    """A simple string reply (``+...``)."""

    def __repr__(self) -> str:
        return f"Status({str.__repr__(self)})"


class _Singleton:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


Null = _Singleton("Null")            # $-1 (RESP2) or _ (RESP3)
NullArray = _Singleton("NullArray")  # *-1 (RESP2 only; RESP3 sends _)


class RMap(tuple):
    """A RESP3 map: a tuple of (key, value) pairs in the order sent."""

    def __repr__(self) -> str:
        return f"RMap({tuple.__repr__(self)})"


class RSet(tuple):
    def __repr__(self) -> str:
        return f"RSet({tuple.__repr__(self)})"


class Double(float):
    def __repr__(self) -> str:
        return f"Double({float.__repr__(self)})"


class RawClient:
    """``RawClient(port).call("XADD", "s", "1-1", "f", "v")`` -> parsed reply."""

    def __init__(self, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""
        self.pos = 0

    def close(self) -> None:
        self.sock.close()

    def call(self, *args):
        self.sock.sendall(encode_command(*args))
        return self.read_reply()

    def pipeline(self, commands: list[tuple]) -> list:
        self.sock.sendall(b"".join(encode_command(*c) for c in commands))
        return [self.read_reply() for _ in commands]

    # -- reading -----------------------------------------------------------

    def _fill(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("server closed the connection")
        if self.pos:
            self.buf = self.buf[self.pos:]
            self.pos = 0
        self.buf += data

    def _line(self) -> bytes:
        while True:
            i = self.buf.find(b"\r\n", self.pos)
            if i >= 0:
                line = self.buf[self.pos:i]
                self.pos = i + 2
                return line
            self._fill()

    def _exact(self, n: int) -> bytes:
        while len(self.buf) - self.pos < n + 2:
            self._fill()
        data = self.buf[self.pos:self.pos + n]
        self.pos += n + 2
        return data

    def read_reply(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return Status(rest.decode())
        if t == b"-":
            return Err(rest.decode())
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            return Null if n < 0 else self._exact(n)
        if t == b"*":
            n = int(rest)
            return NullArray if n < 0 else [self.read_reply() for _ in range(n)]
        if t == b"_":
            return Null
        if t == b"%":
            return RMap((self.read_reply(), self.read_reply()) for _ in range(int(rest)))
        if t == b"~":
            return RSet(self.read_reply() for _ in range(int(rest)))
        if t == b",":
            return Double(float(rest))
        if t == b"#":
            return rest == b"t"
        if t == b"=":
            return ("verbatim", self._exact(int(rest)))
        if t == b"(":
            return ("bignum", int(rest))
        if t == b">":
            return ("push", [self.read_reply() for _ in range(int(rest))])
        if t == b"|":
            attrs = [(self.read_reply(), self.read_reply()) for _ in range(int(rest))]
            return ("attr", attrs, self.read_reply())
        raise ValueError(f"unexpected reply type {line!r}")
