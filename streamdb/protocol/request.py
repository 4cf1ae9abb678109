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


# Headers with canonical small lengths ("*1".."*9999", "$0".."$9999"): exactly
# the lines the general parser accepts for these values, so a hit needs no
# further checks.
_MBULK_HDR = {b"*%d" % i: i for i in range(1, 10000)}
_BULK_HDR = {b"$%d" % i: i for i in range(10000)}
_bulk_len = _BULK_HDR.get
_WINDOW = 32 * 1024     # bytes split per pass of the fast path (RequestParser._split_window)


def _fast_batch(parts: list, i: int, size: int):
    """Fast path over ``parts`` (the unconsumed buffer split on CRLF, ``size``
    bytes) at part ``i``: the whole requests there that have the same number
    of arguments as the first, every header a canonical small length that
    matches its bulk.  A pipeline is usually one command repeated, so one pass
    of C-level operations checks them all.

    Returns ``(argvs, bytes_consumed, parts_consumed)`` (for a lone request,
    ``(argv, ...)``: its argv itself), or None when not even
    the first request qualifies (incomplete, odd, erroneous, a bulk containing
    CRLF, big); the general parser then handles it with all of Redis's rules
    and errors.
    """
    head = parts[i]
    argc = _MBULK_HDR.get(head)
    if argc is None:
        return None
    stride = 2 * argc + 1
    m = (len(parts) - i) // stride          # requests the parts could hold
    if m <= 1:
        # One request (no pipeline): for a handful of arguments a plain loop
        # beats the batch's C-level passes and bookkeeping.
        if not m:
            return None
        j = i + stride
        n = len(head) + 2
        get = _bulk_len
        k = i + 1
        while k < j:
            h = parts[k]
            lv = len(parts[k + 1])
            if get(h) != lv:
                return None
            n += len(h) + lv + 4
            k += 2
        return (parts[i + 2:j:2], n, stride) if n <= size else None
    heads = parts[i:i + m * stride:stride]
    if heads.count(head) != m:
        m = next(c for c, h in enumerate(heads) if h != head)
    region = parts[i:i + m * stride]
    del region[::stride]                    # the *<argc> lines: headers and bulks remain
    bulks = region[1::2]
    lengths = list(map(_bulk_len, region[0::2]))
    if lengths != list(map(len, bulks)):
        # Usually only the last request is cut short by the end of what arrived:
        # check the others with one more pass before looking for the first bad one.
        k = (m - 1) * argc
        if lengths[:k] == list(map(len, bulks[:k])):
            m -= 1
        else:
            bad = next(k for k, (a, b) in enumerate(zip(lengths, map(len, bulks))) if a != b)
            m = bad // argc
        if not m:
            return None
    nparts = m * stride
    # parts[i:] and their CRLFs make up the ``size`` bytes: count the batch's bytes
    # directly, or as ``size`` less what follows it, whichever is the shorter pass.
    rest = len(parts) - i - nparts
    if rest < nparts:
        nbytes = size - sum(map(len, parts[i + nparts:])) - 2 * (rest - 1)
    else:
        nbytes = sum(map(len, parts[i:i + nparts])) + 2 * nparts
    # The last request may end past the bytes received (its bulk's CRLF not yet here).
    if nbytes > size:
        m -= 1
        if not m:
            return None
        nparts -= stride
        last = parts[i + nparts:i + nparts + stride]
        nbytes -= sum(map(len, last)) + 2 * stride
    if m == 1:
        return bulks[:argc], nbytes, nparts
    return [bulks[k:k + argc] for k in range(0, m * argc, argc)], nbytes, nparts


def _lone_request(data: bytes) -> list[bytes] | None:
    """The argv of ``data`` when it is exactly one whole request whose headers are
    canonical small lengths matching their bulks (what ``_fast_batch`` accepts),
    else None.  Each header equal to the length of the part after it, and the
    parts rejoined by CRLF being all of ``data``, make the split the same as
    reading bulk by bulk by length; a bulk holding a CRLF breaks the match."""
    argc = _MBULK_HDR.get(data[:data.find(b"\r\n")])
    if argc is None:
        return None
    # At most one request's worth of splitting: a pipeline is left whole for
    # _fast_batch (its remainder is then the last part, not empty).
    parts = data.split(b"\r\n", 2 * argc + 1)
    if len(parts) != 2 * argc + 2 or parts[-1]:
        return None
    get = _bulk_len
    k = 1
    while k < 2 * argc:         # a loop beats C-level passes for a handful of arguments
        if get(parts[k]) != len(parts[k + 1]):
            return None
        k += 2
    return parts[2::2]


def encode_request(*args) -> bytes:
    """A command as a client sends it: a RESP array of bulk strings (bytes as they are,
    anything else as its str() in UTF-8).  For tools and tests that speak RESP on raw
    sockets; the server's own logs encode effects with ``persistence.aof.encode_command``."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if type(a) is not bytes:
            a = str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class RequestParser:
    """Splits a client's byte stream into argv lists (lists of bytes)."""

    __slots__ = ("buf", "pos", "max_bulk_len", "authenticated", "_argc", "_argv",
                 "_parts", "_part", "_parts_end", "_fast_ok", "_missing", "_chunks", "_held",
                 "_ready", "_ready_at", "_ready_end")

    def __init__(self, max_bulk_len: int = 512 * 1024 * 1024) -> None:
        self.buf = b""
        self.pos = 0
        self.max_bulk_len = max_bulk_len
        # When False (requirepass set, not yet authenticated) Redis caps the
        # request size so that an unauthenticated peer cannot make it allocate.
        self.authenticated = True
        self._argc = 0          # remaining bulks of the multibulk in progress
        self._argv: list[bytes] | None = None
        # Fast path state: a window of the unconsumed buffer split on CRLF (made
        # lazily, again after each feed), the index of the part at ``pos``.
        self._parts: list[bytes] | None = None
        self._part = 0
        self._parts_end = 0     # offset in buf where the split window ends
        self._fast_ok = False
        # A big bulk arriving in many reads: its chunks are kept apart until the
        # bulk is complete and joined once (appending each read to ``buf`` would
        # copy the bulk again for every read: quadratic in its size).
        self._missing = 0       # bytes the incomplete big bulk still needs
        self._chunks: list[bytes] = []
        self._held = 0          # bytes in _chunks
        # Requests the fast path parsed as a batch, handed out one per call from
        # index _ready_at.  ``pos`` stays at the batch's first byte until the
        # last is handed out, then jumps to _ready_end: until then the batch's
        # bytes count as buffered, so a client that blocks mid-batch is resumed.
        self._ready: list = []
        self._ready_at = 0
        self._ready_end = 0

    def feed(self, data: bytes) -> None:
        if self._missing:
            self._chunks.append(data)
            self._held += len(data)
            self._missing -= len(data)
            if self._missing > 0:
                return
            data = b"".join(self._chunks)
            self._chunks, self._held, self._missing = [], 0, 0
        self._parts = None
        fast = self._fast_ok = self.authenticated and self.max_bulk_len >= 10000
        if self.pos == len(self.buf) and self._argv is None:
            # Everything before was consumed: the usual case, a client that sends
            # one request and waits for its reply.  When ``data`` is exactly one
            # whole request, it is split here at once (``_lone_request``) and
            # handed out as a batch of one (so it counts as buffered until taken).
            self.buf = data
            self.pos = 0
            if fast:
                argv = _lone_request(data)
                if argv is not None:
                    self._ready = [argv]
                    self._ready_at = 0
                    self._ready_end = len(data)
            return
        if self.pos:
            self.buf = self.buf[self.pos:] + data
            self._ready_end -= self.pos
            self.pos = 0
        elif self.buf:
            self.buf += data
        else:
            self.buf = data

    def buffered(self) -> int:
        """Bytes received but not yet consumed (the query buffer's size)."""
        return len(self.buf) - self.pos + self._held

    def next_command(self) -> list[bytes] | None:
        """The next complete argv, or None when more bytes are needed.

        Empty requests (``*0``, blank inline lines) are skipped.
        """
        ready = self._ready
        if ready:
            argv = ready[self._ready_at]
            self._ready_at += 1
            if self._ready_at == len(ready):
                self._ready = []
                self.pos = self._ready_end
            return argv
        if self._missing:
            return None
        while True:
            if self._argv is None:
                if self.pos >= len(self.buf):
                    return None
                if self.buf[self.pos] == 42:   # '*'
                    if self._fast_ok and self.authenticated:
                        parts = self._parts
                        if parts is None:
                            parts = self._split_window()
                        got = _fast_batch(parts, self._part, self._parts_end - self.pos)
                        if got is None and self._parts_end < len(self.buf) and self._part:
                            # The window's complete requests are used up, not the
                            # buffer's: the next window starts here.
                            parts = self._split_window()
                            got = _fast_batch(parts, 0, self._parts_end - self.pos)
                        if got is not None:
                            argvs, nbytes, nparts = got
                            self._part += nparts
                            if type(argvs[0]) is bytes:     # a lone request: its argv
                                self.pos += nbytes
                                return argvs
                            self._ready = argvs
                            self._ready_at = 1
                            self._ready_end = self.pos + nbytes
                            return argvs[0]
                        # Until more bytes arrive, the general parser is in charge
                        # (it consumes bytes the split parts would not follow).
                        self._fast_ok = False
                        self._parts = None
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

    def _split_window(self) -> list[bytes]:
        """The fast path's parts: at most _WINDOW bytes from ``pos`` split on CRLF.
        A long pipeline is taken a window at a time: the same C-level passes
        over lists that stay in the CPU caches cost less per request than over
        one list of the whole buffer (12-argument XADDs read 256 KiB at a time:
        1.6 us each with 32 KiB windows, 2.7 us splitting all of it)."""
        end = min(self.pos + _WINDOW, len(self.buf))
        self._parts = parts = self.buf[self.pos:end].split(b"\r\n")
        self._part = 0
        self._parts_end = end
        return parts

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
                if n >= BIG_BULK:
                    self._missing = end + 2 - size
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
