"""Spike core, Cython pure-Python mode: one source that runs interpreted or compiled.

Run as plain Python it is the readable twin; cythonize compiles the same file.
It holds: an incremental RESP multibulk parser, a command table lookup, XADD on
an in-memory tail node, PING/XLEN, reply encoding, and the XADD effect encoded
as RESP (what the AOF/replicas would get).
"""
import cython

CR = 13
LF = 10


@cython.cclass
class Parser:
    buf: bytes
    pos: cython.Py_ssize_t

    def __init__(self):
        self.buf = b""
        self.pos = 0

    @cython.ccall
    def feed(self, data: bytes) -> list:
        """Append data; return every complete request as a list of bytes (argv)."""
        if self.pos < len(self.buf):
            self.buf = self.buf[self.pos:] + data
        else:
            self.buf = data
        self.pos = 0
        out: list = []
        buf: bytes = self.buf
        n: cython.Py_ssize_t = len(buf)
        pos: cython.Py_ssize_t = 0
        while pos < n:
            if buf[pos] != 42:          # '*': an inline command, one line
                eol: cython.Py_ssize_t = buf.find(b"\n", pos)
                if eol < 0:
                    break
                out.append(buf[pos:eol].split())
                pos = eol + 1
                continue
            i: cython.Py_ssize_t = pos + 1
            count: cython.Py_ssize_t = 0
            while i < n and buf[i] != CR:
                count = count * 10 + (buf[i] - 48)
                i += 1
            if i + 1 >= n:
                break
            i += 2
            argv: list = []
            ok: cython.bint = True
            k: cython.Py_ssize_t
            for k in range(count):
                if i >= n:
                    ok = False
                    break
                if buf[i] != 36:        # '$'
                    raise ValueError("expected bulk")
                i += 1
                blen: cython.Py_ssize_t = 0
                while i < n and buf[i] != CR:
                    blen = blen * 10 + (buf[i] - 48)
                    i += 1
                if i + 2 + blen + 2 > n:
                    ok = False
                    break
                i += 2
                argv.append(buf[i:i + blen])
                i += blen + 2
            if not ok:
                break
            out.append(argv)
            pos = i
        self.pos = pos
        return out


@cython.cclass
class Stream:
    ids: list
    fields: list
    last_ms: cython.ulonglong
    last_seq: cython.ulonglong

    def __init__(self):
        self.ids = []
        self.fields = []
        self.last_ms = 0
        self.last_seq = 0

    @cython.ccall
    def add_auto(self, now_ms: cython.ulonglong, fv: list) -> bytes:
        if now_ms > self.last_ms:
            self.last_ms = now_ms
            self.last_seq = 0
        else:
            self.last_seq += 1
        self.ids.append((cython.cast(object, self.last_ms) << 64) | self.last_seq)
        self.fields.append(fv)
        return b"%d-%d" % (self.last_ms, self.last_seq)


@cython.cclass
class Core:
    keys: dict
    out: list
    effects = cython.declare(list, visibility="public")
    record_effects: cython.bint
    now_ms: cython.ulonglong

    def __init__(self, record_effects: bool = False):
        self.keys = {}
        self.out = []
        self.effects = []
        self.record_effects = record_effects
        self.now_ms = 0

    @cython.ccall
    def execute(self, argv: list) -> bytes:
        name: bytes = argv[0]
        handler = TABLE.get(name)
        if handler is None:
            handler = TABLE.get(name.upper())
            if handler is None:
                return b"-ERR unknown command\r\n"
        return handler(self, argv)

    @cython.ccall
    def run(self, parser: Parser, data: bytes, now_ms: cython.ulonglong) -> bytes:
        self.now_ms = now_ms
        replies: list = []
        argv: list
        for argv in parser.feed(data):
            replies.append(self.execute(argv))
        if len(replies) == 1:
            return replies[0]
        return b"".join(replies)


def bulk(b: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(b), b)


def encode_command(argv: list) -> bytes:
    parts: list = [b"*%d\r\n" % len(argv)]
    a: bytes
    for a in argv:
        parts.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(parts)


def cmd_xadd(core: Core, argv: list) -> bytes:
    n: cython.Py_ssize_t = len(argv)
    if n < 5 or (n - 3) % 2 != 0:
        return b"-ERR wrong number of arguments for 'xadd' command\r\n"
    key: bytes = argv[1]
    if argv[2] != b"*":
        return b"-ERR spike: only * ids\r\n"
    s = core.keys.get(key)
    if s is None:
        s = Stream()
        core.keys[key] = s
    st: Stream = s
    fv: list = argv[3:]
    idb: bytes = st.add_auto(core.now_ms, fv)
    if core.record_effects:
        core.effects.append(encode_command([b"XADD", key, idb] + fv))
        if len(core.effects) > 10000:
            core.effects.clear()
    return bulk(idb)


def cmd_ping(core: Core, argv: list) -> bytes:
    return b"+PONG\r\n"


def cmd_xlen(core: Core, argv: list) -> bytes:
    s = core.keys.get(argv[1])
    if s is None:
        return b":0\r\n"
    st: Stream = s
    return b":%d\r\n" % len(st.ids)


TABLE = {b"XADD": cmd_xadd, b"xadd": cmd_xadd, b"PING": cmd_ping, b"ping": cmd_ping,
         b"XLEN": cmd_xlen, b"xlen": cmd_xlen}
