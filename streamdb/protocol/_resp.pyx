# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled RESP core: request parsing and reply encoding over C buffers.

The same behaviour as the plain twins, request.py (``RequestParser``) and reply.py
(``encode_reply``), which are the readable specification: every rule, limit and
error text there holds here byte for byte, and tests/unit/test_compiled_core.py
holds the two equal on random (also hostile) input.  What differs is only how:

- the parser keeps the unconsumed bytes in one malloc'ed buffer (appending a read
  is a memcpy, consumed bytes are dropped by moving the rest down when the next
  read arrives), reads headers through a char pointer and makes each argument
  with one PyBytes_FromStringAndSize;
- the encoder appends a reply to one growing C buffer, writes length headers with
  its own integer formatting, and makes the reply's bytes once at the end.

Which of the two runs is decided in one place, streamdb/protocol/__init__.py.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.list cimport PyList_New, PyList_SET_ITEM, PyList_GET_SIZE
from cpython.mem cimport PyMem_Malloc, PyMem_Realloc, PyMem_Free
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF, Py_XDECREF
from libc.string cimport memcpy, memmove

cdef extern from "Python.h":
    long long PyLong_AsLongLongAndOverflow(object o, int* overflow) except? -1
    # Nested replies recurse in C: the interpreter's recursion limit still applies
    # (RecursionError, as the plain encoder raises) instead of the C stack running out.
    int Py_EnterRecursiveCall(const char* where)
    void Py_LeaveRecursiveCall()
    # Sets *b to NULL (and raises) when it fails.
    int _PyBytes_Resize(PyObject** b, Py_ssize_t newsize) except -1

from .request import ProtocolError
from .request import INLINE_MAX_SIZE as _INLINE_MAX_SIZE, INT_MAX as _INT_MAX
from .request import UNAUTH_MAX_ARGS as _UNAUTH_MAX_ARGS, UNAUTH_MAX_BULK as _UNAUTH_MAX_BULK
from .request import BIG_BULK as _BIG_BULK
from .reply import (CommandError, Double, Map, NULL_ARRAY, OK, Push, Raw, RSet, Status, Verbatim,
                    _format_double)
from .reply import BIG_PIECE as _BIG_PIECE

__all__ = ["RequestParser", "encode_reply", "encode_reply_pieces", "encode_commands"]

# The plain parser's limits, as C constants (read once from request.py: one source).
cdef Py_ssize_t INLINE_MAX_SIZE = _INLINE_MAX_SIZE
cdef long long INT_MAX = _INT_MAX
cdef long long UNAUTH_MAX_ARGS = _UNAUTH_MAX_ARGS
cdef long long UNAUTH_MAX_BULK = _UNAUTH_MAX_BULK
cdef long long BIG_BULK = _BIG_BULK
cdef long long IN_PLACE_MAX = 512 * 1024 * 1024
# A multibulk of up to this many arguments gets its argv list at its size at once.
cdef long long ARGV_PREALLOC = 1024


# ---------------------------------------------------------------------------
# Request parser
# ---------------------------------------------------------------------------

cdef inline Py_ssize_t find_line_end(const unsigned char* b, Py_ssize_t pos, Py_ssize_t n,
                                     unsigned char ch) noexcept:
    """Where ``ch`` is from ``pos``, or -1: request.py's _find_line_end (a NUL
    byte before it hides it, as for Redis's strchr on the query buffer)."""
    cdef Py_ssize_t i = pos
    while i < n:
        if b[i] == ch:
            return i
        if b[i] == 0:
            return -1
        i += 1
    return -1


cdef inline bint parse_ll(const unsigned char* s, Py_ssize_t k, long long* out) noexcept:
    """request.py's _parse_ll (Redis's string2ll): True and ``*out`` when valid."""
    cdef bint negative = False
    cdef unsigned long long v = 0
    cdef Py_ssize_t i = 0
    if k <= 0 or k > 20:
        return False
    if k == 1 and s[0] == 48:
        out[0] = 0
        return True
    if s[0] == 45:          # '-'
        negative = True
        i = 1
    if i >= k or s[i] == 48 or k - i > 19:     # no digits, a leading zero, or past 2**63
        return False
    while i < k:
        if s[i] < 48 or s[i] > 57:
            return False
        v = v * 10 + (s[i] - 48)
        i += 1
    if negative:
        if v > 9223372036854775808ULL:
            return False
        out[0] = -<long long>(v - 1) - 1
    else:
        if v > 9223372036854775807ULL:
            return False
        out[0] = <long long>v
    return True


cdef inline bint is_inline_space(unsigned char c) noexcept:
    # isspace() plus NUL, as sdssplitargs sees them (request.py's _SPACE)
    return c == 32 or c == 10 or c == 13 or c == 9 or c == 11 or c == 12 or c == 0


cdef inline int hex_value(unsigned char c) noexcept:
    if 48 <= c <= 57:
        return c - 48
    if 97 <= c <= 102:
        return c - 87
    if 65 <= c <= 70:
        return c - 55
    return -1


cdef list split_inline(const unsigned char* line, Py_ssize_t n):
    """request.py's split_inline_args over a C line; None on unbalanced quotes."""
    cdef list args = []
    cdef Py_ssize_t i = 0, k
    cdef unsigned char c, e
    cdef bint inq, insq
    cdef unsigned char* cur = <unsigned char*>PyMem_Malloc(n + 1)   # an argument never outgrows its line
    if cur == NULL:
        raise MemoryError()
    try:
        while True:
            while i < n and is_inline_space(line[i]):
                i += 1
            if i >= n:
                return args
            k = 0
            inq = insq = False
            while True:
                if inq:
                    if i >= n:
                        return None
                    c = line[i]
                    if c == 92 and i + 3 < n and line[i + 1] == 120 \
                            and hex_value(line[i + 2]) >= 0 and hex_value(line[i + 3]) >= 0:
                        cur[k] = hex_value(line[i + 2]) * 16 + hex_value(line[i + 3])
                        k += 1
                        i += 3
                    elif c == 92 and i + 1 < n:
                        i += 1
                        e = line[i]
                        if e == 110:
                            e = 10          # \n
                        elif e == 114:
                            e = 13          # \r
                        elif e == 116:
                            e = 9           # \t
                        elif e == 98:
                            e = 8           # \b
                        elif e == 97:
                            e = 7           # \a
                        cur[k] = e
                        k += 1
                    elif c == 34:
                        if i + 1 < n and not is_inline_space(line[i + 1]):
                            return None
                        i += 1
                        break
                    else:
                        cur[k] = c
                        k += 1
                elif insq:
                    if i >= n:
                        return None
                    c = line[i]
                    if c == 92 and i + 1 < n and line[i + 1] == 39:
                        i += 1
                        cur[k] = 39
                        k += 1
                    elif c == 39:
                        if i + 1 < n and not is_inline_space(line[i + 1]):
                            return None
                        i += 1
                        break
                    else:
                        cur[k] = c
                        k += 1
                else:
                    if i >= n:
                        break
                    c = line[i]
                    if is_inline_space(c):
                        break
                    if c == 34:
                        inq = True
                    elif c == 39:
                        insq = True
                    else:
                        cur[k] = c
                        k += 1
                i += 1
            args.append(PyBytes_FromStringAndSize(<char*>cur, k))
    finally:
        PyMem_Free(cur)


cdef inline int put_arg(list argv, Py_ssize_t filled, Py_ssize_t slots, object arg) except -1:
    """An argument into slot ``filled`` of a multibulk's argv, made at its size up to
    ``slots`` (see start_multibulk), else appended."""
    if filled < slots:
        Py_INCREF(arg)                  # (SET_ITEM takes the reference)
        PyList_SET_ITEM(argv, filled, arg)
        return 0
    return argv.append(arg)


cdef inline str quote_byte(unsigned char b):
    # request.py's _quote_byte: CR and LF become spaces, as Redis's error replies do
    return " " if b == 10 or b == 13 else chr(b)


cdef class RequestParser:
    """Splits a client's byte stream into argv lists (lists of bytes): the
    interface and behaviour of request.py's RequestParser."""

    # Its fields are declared in _resp.pxd (the compiled request loop,
    # server/pipeline.py, calls it in C).

    def __cinit__(self):
        self.buf = NULL
        self.n = self.cap = self.pos = 0

    def __init__(self, long long max_bulk_len=512 * 1024 * 1024):
        self.max_bulk_len = max_bulk_len
        self.authenticated = True
        self.argv = None
        self.argc = 0
        self.big = None

    def __dealloc__(self):
        PyMem_Free(self.buf)

    cpdef feed(self, data):
        cdef bytes chunk = data if type(data) is bytes else bytes(data)
        cdef Py_ssize_t k = PyBytes_GET_SIZE(chunk), need, cap, used = 0
        cdef unsigned char* grown
        if self.big is not None:
            used = self.fill_big(PyBytes_AS_STRING(chunk), k)
            if used == k:
                return
            k -= used
        if self.pos:
            # Drop what was consumed: what remains is at most the request in
            # progress, so each byte moves down a bounded number of times.
            self.n -= self.pos
            if self.n:
                memmove(self.buf, self.buf + self.pos, self.n)
            self.pos = 0
        need = self.n + k
        if need > self.cap:
            cap = self.cap or 16384
            while cap < need:
                cap *= 2
            grown = <unsigned char*>PyMem_Realloc(self.buf, cap)
            if grown == NULL:
                raise MemoryError()
            self.buf = grown
            self.cap = cap
        memcpy(self.buf + self.n, PyBytes_AS_STRING(chunk) + used, k)
        self.n = need

    # A big bulk (BIG_BULK bytes or more, request.py's threshold) that has not all
    # arrived is received straight into the bytes object that becomes its argument,
    # made at its full size when its header is read, as Redis reads a big argument
    # into a buffer of its size: through the buffer it was copied in every read, then
    # moved whenever the buffer doubled (64 MB at once on the way to 100), then copied
    # into its object once complete, all of 100 MB in one turn (about 90 ms here).
    # Its pages are touched only as the bytes arrive, and only ``buffered()`` counts
    # towards the query-buffer limit, as before.  A declared size is not trusted past
    # IN_PLACE_MAX (Redis's default proto-max-bulk-len, the most a default client may
    # send), nor when the allocation fails: such a bulk waits in the buffer as any
    # bytes do, so that a hostile length (an AOF frame's, where the limit is 2**62)
    # allocates only what arrived.

    cdef bint start_big(self, Py_ssize_t head, const unsigned char* got, Py_ssize_t k,
                        long long size) except -1:
        """Whether the bulk of ``size`` bytes whose header took ``head`` bytes is
        received in place from now on (``got`` holds its first ``k``, fewer than
        ``size``); False leaves the parser as it was."""
        if size > IN_PLACE_MAX:
            return False
        try:
            self.big = PyBytes_FromStringAndSize(NULL, size)
        except MemoryError:
            return False
        memcpy(PyBytes_AS_STRING(self.big), got, k)
        self.big_filled = k
        self.big_skip = 2               # its CRLF, skipped unchecked as in bulks
        self.big_head = head
        return True

    cdef Py_ssize_t fill_big(self, const char* data, Py_ssize_t k):
        """Feed's part for the big bulk in progress: how many of ``data``'s ``k``
        bytes were its payload and CRLF (the rest goes to the buffer)."""
        cdef Py_ssize_t take = min(k, PyBytes_GET_SIZE(self.big) - self.big_filled), skip
        memcpy(PyBytes_AS_STRING(self.big) + self.big_filled, data, take)
        self.big_filled += take
        skip = min(k - take, self.big_skip)
        self.big_skip -= skip
        return take + skip

    cpdef Py_ssize_t buffered(self):
        """Bytes received but not yet consumed (the query buffer's size)."""
        if self.big is not None:        # (counted from its header, as request.py does)
            return self.n - self.pos + self.big_head + self.big_filled + 2 - self.big_skip
        return self.n - self.pos

    cpdef next_command(self):
        """The next complete argv, or None when more bytes are needed.

        Empty requests (``*0``, blank inline lines) are skipped.
        """
        cdef list argv
        while True:
            if self.argv is None:
                if self.pos >= self.n:
                    return None
                if self.buf[self.pos] == 42:    # '*'
                    if not self.start_multibulk():
                        return None
                    if self.argv is None:       # *0 or negative: nothing to run
                        continue
                else:
                    argv = self.inline()
                    if argv is None:
                        return None
                    if argv:
                        return argv
                    continue
            return self.bulks()

    cdef bint start_multibulk(self) except -1:
        cdef const unsigned char* b = self.buf
        cdef Py_ssize_t pos = self.pos, n = self.n
        cdef Py_ssize_t nl = find_line_end(b, pos, n, 13)
        cdef long long count
        if nl < 0:
            if n - pos > INLINE_MAX_SIZE:
                raise ProtocolError("Protocol error: too big mbulk count string")
            return False
        if nl + 1 >= n:     # one more byte after '\r' (Redis never checks it is '\n')
            return False
        if not parse_ll(b + pos + 1, nl - pos - 1, &count) or count > INT_MAX:
            raise ProtocolError("Protocol error: invalid multibulk length")
        if not self.authenticated and count > UNAUTH_MAX_ARGS:
            raise ProtocolError("Protocol error: unauthenticated multibulk length")
        self.pos = nl + 2
        if count > 0:
            self.argc = count
            # Up to ARGV_PREALLOC arguments the list is made at its size and each bulk
            # put in its slot (as Redis sizes its argv, up to 1024): appends to an empty
            # list cost a malloc and a realloc per request (~300 instructions of an
            # XADD's 5 arguments, callgrind).  The empty slots are never seen: the
            # list leaves the parser complete.
            self.argv = PyList_New(count) if count <= ARGV_PREALLOC else []
            self.filled = 0
        return True

    cdef list bulks(self):
        cdef const unsigned char* b = self.buf
        cdef Py_ssize_t pos = self.pos, n = self.n, nl, start
        cdef Py_ssize_t remaining = self.argc
        cdef long long size
        cdef list argv = self.argv
        cdef Py_ssize_t filled = self.filled, slots = PyList_GET_SIZE(argv)
        if self.big is not None:            # (where a big bulk in progress can be: start_big)
            if self.big_filled < PyBytes_GET_SIZE(self.big) or self.big_skip:
                return None
            put_arg(argv, filled, slots, self.big)
            self.big = None
            filled += 1
            remaining -= 1
        while remaining:
            nl = find_line_end(b, pos, n, 13)
            if nl < 0:
                if n - pos > INLINE_MAX_SIZE:
                    raise ProtocolError("Protocol error: too big bulk count string")
                break
            if nl + 1 >= n:     # one more byte after '\r', not checked to be '\n'
                break
            if b[pos] != 36:    # '$'
                raise ProtocolError("Protocol error: expected '$', got '%s'" % quote_byte(b[pos]))
            if not parse_ll(b + pos + 1, nl - pos - 1, &size) or size < 0 \
                    or size > self.max_bulk_len:
                raise ProtocolError("Protocol error: invalid bulk length")
            if size > UNAUTH_MAX_BULK and not self.authenticated:
                raise ProtocolError("Protocol error: unauthenticated bulk length")
            start = nl + 2
            if start + size + 2 > n:
                if size >= BIG_BULK and start + size > n and \
                        self.start_big(start - pos, b + start, n - start, size):
                    pos = n
                break
            put_arg(argv, filled, slots, PyBytes_FromStringAndSize(<const char*>b + start, size))
            filled += 1
            pos = start + size + 2      # Redis does not check that these two bytes are CRLF
            remaining -= 1
        self.pos = pos
        self.argc = remaining
        self.filled = filled
        if remaining:
            return None
        self.argv = None
        return argv

    cdef list inline(self):
        cdef const unsigned char* b = self.buf
        cdef Py_ssize_t pos = self.pos, nl = find_line_end(b, pos, self.n, 10), end
        cdef list args
        if nl < 0:
            if self.n - pos > INLINE_MAX_SIZE:
                raise ProtocolError("Protocol error: too big inline request")
            return None
        end = nl
        if end > pos and b[end - 1] == 13:
            end -= 1
        self.pos = nl + 1
        args = split_inline(b + pos, end - pos)
        if args is None:
            raise ProtocolError("Protocol error: unbalanced quotes in request")
        return args


# ---------------------------------------------------------------------------
# Reply encoder
# ---------------------------------------------------------------------------

cdef struct Out:
    char* p
    Py_ssize_t n
    Py_ssize_t cap
    # NULL, or the bytes object ``p`` is the contents of (a big reply, see BIG_OUT).
    PyObject* obj
    # encode_reply_pieces: whether big bulks become pieces of their own; the list of
    # pieces so far (NULL until the first), which out_close releases.
    bint pieces_allowed
    PyObject* pieces


# A reply that outgrows this many bytes is written straight into the bytes object that
# is returned (grown with _PyBytes_Resize, which for a buffer of this size moves pages
# rather than bytes), instead of into a C buffer copied into a new bytes object at the
# end: that copy of a 100 MB XRANGE reply (or AOF effect) into fresh memory took about
# 90 ms of the loop here, as long as the whole rest of the encoding.  Smaller replies
# keep the C buffer, whose copy is cheaper than shrinking an oversized object.
cdef Py_ssize_t BIG_OUT = 1 << 20
cdef Py_ssize_t BIG_PIECE = _BIG_PIECE


cdef inline int out_open(Out* o, Py_ssize_t cap) except -1:
    """An empty buffer of ``cap`` bytes; out_close must follow, whatever happens."""
    cdef object big
    o.n = 0
    o.cap = cap
    o.obj = NULL
    o.p = NULL
    o.pieces_allowed = False
    o.pieces = NULL
    if cap > BIG_OUT:
        big = PyBytes_FromStringAndSize(NULL, cap)
        Py_INCREF(big)              # (the reference o.obj holds)
        o.obj = <PyObject*>big
        o.p = PyBytes_AS_STRING(big)
        return 0
    o.p = <char*>PyMem_Malloc(cap)
    if o.p == NULL:
        raise MemoryError()
    return 0


cdef inline bytes out_bytes(Out* o):
    """What was written, as bytes: the object itself cut to its length, for a big
    reply; a copy of the C buffer otherwise."""
    cdef bytes done
    if o.obj == NULL:
        return PyBytes_FromStringAndSize(o.p, o.n)
    o.p = NULL                      # (a failed resize frees the object and sets obj NULL)
    _PyBytes_Resize(&o.obj, o.n)
    done = <bytes>o.obj
    return done


cdef inline void out_close(Out* o) noexcept:
    Py_XDECREF(o.pieces)
    o.pieces = NULL
    if o.obj == NULL:
        PyMem_Free(o.p)
    else:
        Py_XDECREF(o.obj)
        o.obj = NULL
    o.p = NULL


cdef inline int reserve(Out* o, Py_ssize_t extra) except -1:
    if o.n + extra <= o.cap:
        return 0
    return grow(o, extra)


cdef int grow(Out* o, Py_ssize_t extra) except -1:
    """reserve's slow part, apart so that its every-put test stays inlined."""
    cdef Py_ssize_t cap = o.cap
    cdef char* grown
    cdef object big
    while cap < o.n + extra:
        cap *= 2
    if o.obj != NULL:
        o.p = NULL                  # (a failed resize frees the object and sets obj NULL)
        _PyBytes_Resize(&o.obj, cap)
        o.p = PyBytes_AS_STRING(<object>o.obj)
    elif cap > BIG_OUT:
        # Past BIG_OUT: the contents so far (at most BIG_OUT bytes) move into the object.
        big = PyBytes_FromStringAndSize(NULL, cap)
        memcpy(PyBytes_AS_STRING(big), o.p, o.n)
        PyMem_Free(o.p)
        Py_INCREF(big)
        o.obj = <PyObject*>big
        o.p = PyBytes_AS_STRING(big)
    else:
        grown = <char*>PyMem_Realloc(o.p, cap)
        if grown == NULL:
            raise MemoryError()
        o.p = grown
    o.cap = cap
    return 0


cdef inline int put(Out* o, const char* s, Py_ssize_t k) except -1:
    reserve(o, k)
    memcpy(o.p + o.n, s, k)
    o.n += k
    return 0


cdef inline int put_bytes(Out* o, bytes s) except -1:
    return put(o, PyBytes_AS_STRING(s), PyBytes_GET_SIZE(s))


cdef int put_line(Out* o, char prefix, long long v) except -1:
    """``<prefix><v>\\r\\n``: a length header or an integer reply."""
    cdef char digits[24]
    cdef int k = 0
    cdef unsigned long long u = <unsigned long long>(-(v + 1)) + 1 if v < 0 else <unsigned long long>v
    reserve(o, 24)
    o.p[o.n] = prefix
    o.n += 1
    if v < 0:
        o.p[o.n] = 45
        o.n += 1
    while True:
        digits[k] = <char>(48 + u % 10)
        k += 1
        u //= 10
        if u == 0:
            break
    while k:
        k -= 1
        o.p[o.n] = digits[k]
        o.n += 1
    o.p[o.n] = 13
    o.p[o.n + 1] = 10
    o.n += 2
    return 0


cdef inline int put_bulk(Out* o, bytes s) except -1:
    put_line(o, 36, PyBytes_GET_SIZE(s))
    if o.pieces_allowed and PyBytes_GET_SIZE(s) >= BIG_PIECE:
        put_piece(o, s)
    else:
        put_bytes(o, s)
    return put(o, b"\r\n", 2)


cdef int put_piece(Out* o, bytes s) except -1:
    """encode_reply_pieces: what is written so far becomes a piece, ``s`` the next one."""
    cdef list pieces
    if o.pieces == NULL:
        pieces = []
        Py_INCREF(pieces)           # (the reference o.pieces holds)
        o.pieces = <PyObject*>pieces
    pieces = <list>o.pieces
    pieces.append(PyBytes_FromStringAndSize(o.p, o.n))
    pieces.append(s)
    o.n = 0
    return 0


cdef int put_int(Out* o, object value) except -1:
    """An integer reply; one past 64 bits is written as Python writes it."""
    cdef int overflow = 0
    cdef long long v
    try:
        v = value
    except OverflowError:
        overflow = 1
    if overflow:
        return put_bytes(o, b":%d\r\n" % value)
    return put_line(o, 58, v)


cdef int encode_items(Out* o, object items, bint resp3) except -1:
    """The elements of an array or a set, one after the other."""
    if Py_EnterRecursiveCall(" while encoding a reply"):
        return -1
    try:
        for item in items:
            encode_into(o, item, resp3)
    finally:
        Py_LeaveRecursiveCall()
    return 0


cdef int encode_into(Out* o, object value, bint resp3) except -1:
    """reply.py's _encode: one value (and what it holds) appended to ``o``."""
    cdef object t = type(value)
    cdef bytes raw
    if t is bytes:
        return put_bulk(o, <bytes>value)
    if t is list or t is tuple:
        put_line(o, 42, len(value))
        return encode_items(o, value, resp3)
    if t is int:
        return put_int(o, value)
    if t is Raw:
        return put_bytes(o, <bytes>value)
    if value is None:
        return put(o, b"_\r\n", 3) if resp3 else put(o, b"$-1\r\n", 5)
    if t is Status:
        put(o, b"+", 1)
        put_bytes(o, value.encode())
        return put(o, b"\r\n", 2)
    if t is str:
        return put_bulk(o, value.encode())
    if t is Map:
        if resp3:
            put_line(o, 37, len(value))
        else:
            put_line(o, 42, 2 * len(value))
        if Py_EnterRecursiveCall(" while encoding a reply"):
            return -1
        try:
            for k, v in value:
                encode_into(o, k, resp3)
                encode_into(o, v, resp3)
        finally:
            Py_LeaveRecursiveCall()
        return 0
    if isinstance(value, CommandError):
        msg = value.message.replace("\r", " ").replace("\n", " ")
        # surrogateescape: an error may quote client bytes that are not UTF-8
        put(o, b"-", 1)
        put_bytes(o, msg.encode("utf-8", "surrogateescape"))
        return put(o, b"\r\n", 2)
    if value is NULL_ARRAY:
        return put(o, b"_\r\n", 3) if resp3 else put(o, b"*-1\r\n", 5)
    if t is RSet:
        put_line(o, 126 if resp3 else 42, len(value))
        return encode_items(o, value, resp3)
    if t is Push:
        put_line(o, 62 if resp3 else 42, len(value))
        return encode_items(o, value, resp3)
    if t is Double:
        raw = _format_double(value)
        if resp3:
            put(o, b",", 1)
            put_bytes(o, raw)
            return put(o, b"\r\n", 2)
        return put_bulk(o, raw)
    if t is Verbatim:
        if resp3:
            put_line(o, 61, len(value) + 4)
            put(o, b"txt:", 4)
            put_bytes(o, <bytes>value)
            return put(o, b"\r\n", 2)
        return put_bulk(o, <bytes>value)
    if t is bool:
        return put_line(o, 58, 1 if value else 0)
    if t is float:
        return encode_into(o, Double(value), resp3)
    raise TypeError(f"cannot encode reply of type {t.__name__}")


cdef bytes OK_BYTES = b"+OK\r\n"
# The integer replies 0..SMALL_INTS-1, made once: counts (PUBLISH's receivers, XACK,
# XDEL, XLEN of a small stream) are mostly small, and one of these is a tuple index
# where an encoding is a buffer, a formatted line and a new bytes object (~250
# instructions a PUBLISH heard by nobody, callgrind).
cdef Py_ssize_t SMALL_INTS = 1024
cdef tuple SMALL_INT_REPLIES = tuple([b":%d\r\n" % i for i in range(SMALL_INTS)])


cpdef encode_reply(value, bint resp3):
    """Encode one reply value as RESP bytes (reply.py's encode_reply)."""
    cdef Out o
    cdef object t = type(value)
    cdef long long small
    cdef int overflow = 0
    if value is OK:
        return OK_BYTES
    if t is Raw:
        return value
    if t is int:
        small = PyLong_AsLongLongAndOverflow(value, &overflow)
        if not overflow and 0 <= small < SMALL_INTS:
            return SMALL_INT_REPLIES[small]
    # Room for the usual reply at once: a bulk's payload and header, or a small array.
    out_open(&o, PyBytes_GET_SIZE(<bytes>value) + 32 if t is bytes else 256)
    try:
        encode_into(&o, value, resp3)
        return out_bytes(&o)
    finally:
        out_close(&o)


cpdef encode_reply_pieces(value, bint resp3):
    """reply.py's encode_reply_pieces: encode_reply's bytes, or for an array holding
    bulks of BIG_PIECE bytes or more, the list of pieces they are when joined (each such
    payload the value object itself)."""
    cdef Out o
    cdef list pieces
    if type(value) is not list:
        return encode_reply(value, resp3)
    out_open(&o, 256)
    o.pieces_allowed = True
    try:
        encode_into(&o, value, resp3)
        if o.pieces == NULL:
            return out_bytes(&o)
        pieces = <list>o.pieces
        pieces.append(out_bytes(&o))
        return pieces
    finally:
        out_close(&o)


cpdef bytes encode_commands(list commands):
    """Commands (lists of bytes) as RESP arrays, concatenated, built in one buffer:
    every write's effects pass here on their way to the AOF (reply.py's encode_commands)."""
    cdef Out o
    out_open(&o, 256)
    try:
        for argv in commands:
            encode_into(&o, argv, False)
        return out_bytes(&o)
    finally:
        out_close(&o)
