"""Incremental parser of client requests: RESP multibulk and inline commands.

Sans-I/O (after h11): ``feed(bytes)`` then iterate ``next_command()`` until it
returns None (need more bytes).  A malformed request raises ProtocolError
carrying Redis's exact message; the server replies it and closes the connection,
as Redis does, after executing the commands that came before it.

We parse in Python rather than with hiredis.Reader because Redis's framing
rules are stricter than a RESP *reply* reader's: only bulk strings inside the
array (``expected '$', got ':'``), limits checked on the declared lengths before
any payload arrives (``proto-max-bulk-len``, the 10-argument/16 KiB limits for
unauthenticated clients), the trailing CRLF of a bulk not checked, ``*0`` and
``*-1`` silently skipped.  A reply reader accepts nested arrays and integers and
waits forever for a 100 GB bulk; getting exact errors out of it would mean
re-parsing anyway.
"""

from __future__ import annotations

__all__ = ["ProtocolError", "RequestParser", "split_inline_args"]

INLINE_MAX_SIZE = 64 * 1024   # Redis's PROTO_INLINE_MAX_SIZE
INT_MAX = 2**31 - 1
UNAUTH_MAX_ARGS = 10
UNAUTH_MAX_BULK = 16384
# Bulks at least this big are gathered in pieces while they arrive (Redis's
# PROTO_MBULK_BIG_ARG is the same size and idea).
BIG_BULK = 32 * 1024


class ProtocolError(Exception):
    """A request that cannot be parsed.  ``str(e)`` is Redis's error text.

    The text may quote one byte of the request (``expected '$', got '%c'``):
    it is that byte as a latin-1 character, so ``str(e).encode("latin-1")``
    gives the exact bytes Redis sends.
    """


def _find_line_end(buf: bytes, pos: int, char: bytes) -> int:
    """Where ``char`` is, as Redis's strchr() on the query buffer finds it.

    Redis searches a C string, so a NUL byte before ``char`` hides it: the
    line then counts as incomplete (and, past 64 KiB, as too big).
    """
    i = buf.find(char, pos)
    if i > pos and buf.find(b"\0", pos, i) >= 0:
        return -1
    return i


def _quote_byte(b: int) -> str:
    # Redis's addReplyErrorFormat() turns CR and LF into spaces so the error
    # stays one protocol line; other bytes are sent as they are.
    return " " if b in (10, 13) else chr(b)


def _parse_ll(raw: bytes) -> int | None:
    # Redis's string2ll(): optional '-', digits, no spaces, no '+', no leading zero.
    if not raw or len(raw) > 20:
        return None
    if raw == b"0":
        return 0
    body = raw[1:] if raw[:1] == b"-" else raw
    if not body.isdigit() or body[:1] == b"0" or not body.isascii():
        return None
    v = int(raw)
    if v < -(1 << 63) or v >= (1 << 63):
        return None
    return v


def encode_request(*args) -> bytes:
    """A command as a client sends it: a RESP array of bulk strings (bytes as they are,
    anything else as its str() in UTF-8).  For tools and tests that speak RESP on raw
    sockets; the server's own logs encode effects with ``protocol.encode_command``."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if type(a) is not bytes:
            a = str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class RequestParser:
    """Splits a client's byte stream into argv lists (lists of bytes)."""

    __slots__ = ("buf", "pos", "max_bulk_len", "authenticated", "_argc", "_argv",
                 "_big", "_big_got", "_big_missing", "_big_skip", "_big_head")

    def __init__(self, max_bulk_len: int = 512 * 1024 * 1024) -> None:
        self.buf = b""
        self.pos = 0
        self.max_bulk_len = max_bulk_len
        # When False (requirepass set, not yet authenticated) Redis caps the
        # request size so that an unauthenticated peer cannot make it allocate.
        self.authenticated = True
        self._argc = 0          # remaining bulks of the multibulk in progress
        self._argv: list[bytes] | None = None
        # A big bulk (BIG_BULK bytes or more) still arriving is received apart from
        # ``buf``: its payload's reads are kept as they come and joined once, into
        # its argument, when complete (appending each read to ``buf`` would copy the
        # bulk again for every read: quadratic in its size).  None, or its payload's
        # reads so far; with the bytes in them, the payload bytes still to come, the
        # CRLF bytes after it still to skip, and its header's size (buffered() counts
        # from the header).
        self._big: list[bytes] | None = None
        self._big_got = 0
        self._big_missing = 0
        self._big_skip = 0
        self._big_head = 0

    def feed(self, data: bytes) -> None:
        if self._big is not None:
            data = self._fill_big(data)
            if not data:
                return
        if self.pos == len(self.buf) and self._argv is None:
            # Everything before was consumed: the usual case, a client that sends
            # one request and waits for its reply.
            self.buf = data
            self.pos = 0
            return
        if self.pos:
            self.buf = self.buf[self.pos:] + data
            self.pos = 0
        elif self.buf:
            self.buf += data
        else:
            self.buf = data

    def _fill_big(self, data: bytes) -> bytes:
        """feed's part for the big bulk in progress: keeps its payload and skips its
        CRLF (unchecked, as in _bulks) from ``data``; returns the rest."""
        take = min(len(data), self._big_missing)
        if take:
            self._big.append(data if take == len(data) else data[:take])
            self._big_got += take
            self._big_missing -= take
        skip = min(len(data) - take, self._big_skip)
        self._big_skip -= skip
        return data[take + skip:] if take + skip < len(data) else b""

    def buffered(self) -> int:
        """Bytes received but not yet consumed (the query buffer's size)."""
        if self._big is not None:
            return len(self.buf) - self.pos + self._big_head + self._big_got + 2 - self._big_skip
        return len(self.buf) - self.pos

    def next_command(self) -> list[bytes] | None:
        """The next complete argv, or None when more bytes are needed.

        Empty requests (``*0``, blank inline lines) are skipped.
        """
        while True:
            if self._argv is None:
                if self.pos >= len(self.buf):
                    return None
                if self.buf[self.pos] == 42:   # '*'
                    if not self._start_multibulk():
                        return None
                    if self._argv is None:     # *0 or negative: nothing to run
                        continue
                else:
                    argv = self._inline()
                    if argv is None:
                        return None
                    if argv:
                        return argv
                    continue
            argv = self._bulks()
            if argv is None:
                return None
            return argv

    # -- multibulk --------------------------------------------------------

    def _start_multibulk(self) -> bool:
        buf, pos = self.buf, self.pos
        nl = _find_line_end(buf, pos, b"\r")
        if nl < 0:
            if len(buf) - pos > INLINE_MAX_SIZE:
                raise ProtocolError("Protocol error: too big mbulk count string")
            return False
        if nl + 1 >= len(buf):   # one more byte after '\r' (Redis never checks it is '\n')
            return False
        n = _parse_ll(buf[pos + 1:nl])
        if n is None or n > INT_MAX:
            raise ProtocolError("Protocol error: invalid multibulk length")
        if not self.authenticated and n > UNAUTH_MAX_ARGS:
            raise ProtocolError("Protocol error: unauthenticated multibulk length")
        self.pos = nl + 2
        if n > 0:
            self._argc = n
            self._argv = []
        return True

    def _bulks(self) -> list[bytes] | None:
        buf = self.buf
        pos = self.pos
        argv = self._argv
        remaining = self._argc
        size = len(buf)
        max_bulk = self.max_bulk_len
        while remaining:
            if self._big is not None:
                if self._big_missing or self._big_skip:
                    break
                argv.append(b"".join(self._big))
                self._big = None
                remaining -= 1
                continue
            nl = _find_line_end(buf, pos, b"\r")
            if nl < 0:
                if size - pos > INLINE_MAX_SIZE:
                    raise ProtocolError("Protocol error: too big bulk count string")
                break
            if nl + 1 >= size:   # one more byte after '\r', not checked to be '\n'
                break
            if buf[pos] != 36:   # '$'
                raise ProtocolError("Protocol error: expected '$', got '%s'" % _quote_byte(buf[pos]))
            n = _parse_ll(buf[pos + 1:nl])
            if n is None or n < 0 or n > max_bulk:
                raise ProtocolError("Protocol error: invalid bulk length")
            if n > UNAUTH_MAX_BULK and not self.authenticated:
                raise ProtocolError("Protocol error: unauthenticated bulk length")
            start = nl + 2
            end = start + n
            if end + 2 > size:
                if n >= BIG_BULK and end > size:
                    self._big = [buf[start:]]
                    self._big_got = size - start
                    self._big_missing = end - size
                    self._big_skip = 2
                    self._big_head = start - pos
                    pos = size
                break
            argv.append(buf[start:end])
            pos = end + 2   # Redis does not check that these two bytes are CRLF
            remaining -= 1
        self.pos = pos
        self._argc = remaining
        if remaining:
            return None
        self._argv = None
        return argv

    # -- inline -----------------------------------------------------------

    def _inline(self) -> list[bytes] | None:
        buf, pos = self.buf, self.pos
        nl = _find_line_end(buf, pos, b"\n")
        if nl < 0:
            if len(buf) - pos > INLINE_MAX_SIZE:
                raise ProtocolError("Protocol error: too big inline request")
            return None
        line = buf[pos:nl]
        if line.endswith(b"\r"):
            line = line[:-1]
        self.pos = nl + 1
        args = split_inline_args(line)
        if args is None:
            raise ProtocolError("Protocol error: unbalanced quotes in request")
        return args


_SPACE = b" \n\r\t\x0b\x0c\x00"  # isspace() plus NUL, as sdssplitargs sees them
_ESCAPES = {ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t", ord("b"): b"\b", ord("a"): b"\a"}
_HEX = b"0123456789abcdefABCDEF"


def split_inline_args(line: bytes) -> list[bytes] | None:
    """Split an inline command like Redis's sdssplitargs(); None on unbalanced quotes."""
    args: list[bytes] = []
    i, n = 0, len(line)
    while True:
        while i < n and line[i] in _SPACE:
            i += 1
        if i >= n:
            return args
        cur = bytearray()
        inq = insq = False
        while True:
            if inq:
                if i >= n:
                    return None
                c = line[i]
                if c == 92 and i + 3 < n and line[i + 1] == ord("x") \
                        and line[i + 2] in _HEX and line[i + 3] in _HEX:
                    cur.append(int(line[i + 2:i + 4], 16))
                    i += 3
                elif c == 92 and i + 1 < n:
                    i += 1
                    cur += _ESCAPES.get(line[i], bytes([line[i]]))
                elif c == 34:
                    if i + 1 < n and line[i + 1] not in _SPACE:
                        return None
                    i += 1
                    break
                else:
                    cur.append(c)
            elif insq:
                if i >= n:
                    return None
                c = line[i]
                if c == 92 and i + 1 < n and line[i + 1] == 39:
                    i += 1
                    cur.append(39)
                elif c == 39:
                    if i + 1 < n and line[i + 1] not in _SPACE:
                        return None
                    i += 1
                    break
                else:
                    cur.append(c)
            else:
                if i >= n:
                    break
                c = line[i]
                if c in _SPACE:
                    break
                if c == 34:
                    inq = True
                elif c == 39:
                    insq = True
                else:
                    cur.append(c)
            i += 1
        args.append(bytes(cur))
