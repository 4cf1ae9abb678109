# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Spike core, Cython .pyx flavour: typed C buffers for parsing, replies and effects.

The same work as core_pure_mode.py (parse, look up, XADD/PING/XLEN, reply, the
XADD effect as RESP), with the request bytes read through a char pointer, argv
elements made by PyBytes_FromStringAndSize, and replies/effects appended to a
malloc'ed buffer with snprintf'd ids.  ``Conn`` is the asyncio protocol compiled
too, so uvloop calls C methods for every read.
"""
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memcpy
from libc.stdio cimport snprintf
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.list cimport PyList_New

cdef class OutBuf:
    cdef char* p
    cdef Py_ssize_t n, cap
    def __cinit__(self):
        self.cap = 65536
        self.p = <char*>malloc(self.cap)
        self.n = 0
    def __dealloc__(self):
        free(self.p)
    cdef inline void reserve(self, Py_ssize_t extra):
        if self.n + extra > self.cap:
            while self.n + extra > self.cap:
                self.cap *= 2
            self.p = <char*>realloc(self.p, self.cap)
    cdef inline void put(self, const char* s, Py_ssize_t k):
        self.reserve(k)
        memcpy(self.p + self.n, s, k)
        self.n += k
    cdef bytes take(self):
        cdef bytes b = PyBytes_FromStringAndSize(self.p, self.n)
        self.n = 0
        return b


cdef class Parser:
    cdef bytes buf
    cdef Py_ssize_t pos
    def __init__(self):
        self.buf = b""
        self.pos = 0

    cpdef list feed(self, bytes data):
        if self.pos < len(self.buf):
            self.buf = self.buf[self.pos:] + data
        else:
            self.buf = data
        self.pos = 0
        cdef list out = []
        cdef const unsigned char* b = <const unsigned char*>PyBytes_AS_STRING(self.buf)
        cdef Py_ssize_t n = PyBytes_GET_SIZE(self.buf), pos = 0, i, count, k, blen
        cdef list argv
        cdef bint ok
        while pos < n:
            if b[pos] != 42:
                eol = self.buf.find(b"\n", pos)
                if eol < 0:
                    break
                out.append(self.buf[pos:eol].split())
                pos = eol + 1
                continue
            i = pos + 1
            count = 0
            while i < n and b[i] != 13:
                count = count * 10 + (b[i] - 48)
                i += 1
            if i + 1 >= n:
                break
            i += 2
            argv = []
            ok = True
            for k in range(count):
                if i >= n or b[i] != 36:
                    ok = False
                    break
                i += 1
                blen = 0
                while i < n and b[i] != 13:
                    blen = blen * 10 + (b[i] - 48)
                    i += 1
                if i + 2 + blen + 2 > n:
                    ok = False
                    break
                i += 2
                argv.append(PyBytes_FromStringAndSize(<const char*>b + i, blen))
                i += blen + 2
            if not ok:
                break
            out.append(argv)
            pos = i
        self.pos = pos
        return out


cdef class Stream:
    cdef public list ids
    cdef public list fields
    cdef unsigned long long last_ms, last_seq
    def __init__(self):
        self.ids = []
        self.fields = []
        self.last_ms = 0
        self.last_seq = 0


cdef class Core:
    cdef dict keys
    cdef OutBuf out
    cdef OutBuf aof
    cdef bint record_effects
    cdef unsigned long long now_ms
    cdef public long long effects_bytes

    def __init__(self, record_effects=False):
        self.keys = {}
        self.out = OutBuf()
        self.aof = OutBuf()
        self.record_effects = record_effects
        self.effects_bytes = 0

    cdef void xadd(self, list argv):
        cdef Py_ssize_t n = len(argv)
        cdef char idbuf[48]
        cdef char hdr[64]
        cdef int idlen, hl
        cdef bytes key, a
        if n < 5 or (n - 3) % 2 != 0:
            self.out.put(b"-ERR wrong number of arguments for 'xadd' command\r\n", 52)
            return
        key = argv[1]
        s = self.keys.get(key)
        if s is None:
            s = Stream()
            self.keys[key] = s
        cdef Stream st = <Stream>s
        if self.now_ms > st.last_ms:
            st.last_ms = self.now_ms
            st.last_seq = 0
        else:
            st.last_seq += 1
        st.ids.append((<object>st.last_ms << 64) | st.last_seq)
        st.fields.append(argv[3:])
        idlen = snprintf(idbuf, 48, b"%llu-%llu", st.last_ms, st.last_seq)
        hl = snprintf(hdr, 64, b"$%d\r\n", idlen)
        self.out.put(hdr, hl)
        self.out.put(idbuf, idlen)
        self.out.put(b"\r\n", 2)
        if self.record_effects:
            hl = snprintf(hdr, 64, b"*%d\r\n$4\r\nXADD\r\n", <int>n)
            self.aof.put(hdr, hl)
            for i in range(1, n):
                if i == 2:
                    hl = snprintf(hdr, 64, b"$%d\r\n", idlen)
                    self.aof.put(hdr, hl); self.aof.put(idbuf, idlen); self.aof.put(b"\r\n", 2)
                    continue
                a = argv[i]
                hl = snprintf(hdr, 64, b"$%d\r\n", <int>len(a))
                self.aof.put(hdr, hl); self.aof.put(PyBytes_AS_STRING(a), len(a)); self.aof.put(b"\r\n", 2)

    cpdef bytes run(self, Parser parser, bytes data, unsigned long long now_ms):
        self.now_ms = now_ms
        cdef list argv
        cdef bytes name
        for argv in parser.feed(data):
            name = argv[0]
            if name == b"XADD" or name == b"xadd":
                self.xadd(argv)
            elif name == b"PING" or name == b"ping":
                self.out.put(b"+PONG\r\n", 7)
            elif name == b"XLEN" or name == b"xlen":
                s = self.keys.get(argv[1])
                r = b":%d\r\n" % (len((<Stream>s).ids) if s is not None else 0)
                self.out.put(r, len(r))
            else:
                self.out.put(b"-ERR unknown command\r\n", 22)
        if self.record_effects:
            self.effects_bytes += self.aof.n
            self.aof.n = 0
        return self.out.take()


from posix.time cimport clock_gettime, timespec, CLOCK_REALTIME

cdef class Conn:
    """The connection itself compiled: uvloop calls these methods directly."""
    cdef object t
    cdef object write
    cdef Parser p
    cdef Core core
    def __init__(self, Core core):
        self.core = core
        self.p = Parser()
    def connection_made(self, t):
        self.t = t
        self.write = t.write
    def connection_lost(self, exc):
        self.t = None
        self.write = None
    def eof_received(self):
        return False
    def pause_writing(self):
        pass
    def resume_writing(self):
        pass
    def data_received(self, bytes data):
        cdef timespec ts
        clock_gettime(CLOCK_REALTIME, &ts)
        self.write(self.core.run(self.p, data, <unsigned long long>ts.tv_sec * 1000 + ts.tv_nsec // 1000000))
