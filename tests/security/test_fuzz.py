"""Fuzzing hostile input: the request parser, every command's arguments, raw frames.

Bounded by Hypothesis ``max_examples``; ``STREAMDB_FUZZ_EXAMPLES=<n>`` scales
every test up for a longer run (the default keeps this file near 30 s).  Each
test prints how many examples and commands it ran.

Invariants:
(a) the parser in-process: every input parses or raises ProtocolError, nothing
    else, and fed one byte at a time it gives the same commands and the same error;
(b) every command of the command table with argv drawn from nasty tokens, sent
    to a real server: each request gets a reply or an error (never an internal
    error, never a hang), a canary key no command names keeps its DEBUG
    DIGEST-VALUE, a second connection keeps getting PONG, and the state
    survives a restart from the AOF unchanged (DEBUG DIGEST);
(c) mutated RESP frames on raw sockets: the server answers or closes, the bytes
    it sends are well-formed RESP, and it keeps serving other clients.
"""

from __future__ import annotations

import os
import socket
import time

import hiredis
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import ServerProcess
from streamdb.protocol.request import ProtocolError, RequestParser
from streamdb.protocol.request import encode_request as resp

SCALE = int(os.environ.get("STREAMDB_FUZZ_EXAMPLES", "0"))


def examples(default: int) -> int:
    return SCALE or default


FUZZ_SETTINGS = dict(deadline=None, database=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                            HealthCheck.function_scoped_fixture])

COUNTS: dict[str, int] = {}


def count(name: str, n: int = 1) -> None:
    COUNTS[name] = COUNTS.get(name, 0) + n


@pytest.fixture(scope="module", autouse=True)
def report_counts(request):
    yield
    capman = request.config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled():
        for name, n in sorted(COUNTS.items()):
            print(f"\nfuzz: {name}: {n}")


# -- (a) the request parser, in-process ------------------------------------------

BIG_NUMBERS = [b"0", b"1", b"-1", b"00", b"+1", b" 1", b"1 ", b"1a", b"", b"-0",
               b"2147483647", b"2147483648", b"4294967296", b"9223372036854775807",
               b"9223372036854775808", b"-9223372036854775808", b"-9223372036854775809",
               b"18446744073709551615", b"18446744073709551616", b"1099511627776",
               b"536870912", b"536870913", b"99999999999999999999999", b"\xff1"]

nasty_bytes = st.one_of(
    st.binary(max_size=30),
    st.sampled_from([b"\xff\xfe", b"\xc3\x28", b"\xed\xa0\x80", b"\x00", b"\r", b"\n",
                     b"\r\n", b"\"", b"'", b"\\x", b"\\x4", b"\\xzz", b"a b", b"\"a\"b"]),
)


@st.composite
def frame_piece(draw) -> bytes:
    kind = draw(st.integers(0, 7))
    if kind == 0:   # a well-formed request with binary arguments
        return resp(*draw(st.lists(nasty_bytes, min_size=1, max_size=5)))
    if kind == 1:   # an inline request
        words = draw(st.lists(nasty_bytes.filter(lambda b: b"\n" not in b), min_size=0, max_size=5))
        return b" ".join(words) + draw(st.sampled_from([b"\r\n", b"\n", b""]))
    if kind == 2:   # a multibulk header with an odd count
        return b"*" + draw(st.sampled_from(BIG_NUMBERS)) + b"\r\n"
    if kind == 3:   # a bulk header with an odd length
        return b"$" + draw(st.sampled_from(BIG_NUMBERS)) + b"\r\n"
    if kind == 4:   # arrays, integers, simple strings nested inside a multibulk
        inner = draw(st.sampled_from([b"*1\r\n$1\r\na\r\n", b":1\r\n", b"+OK\r\n", b"-ERR x\r\n",
                                      b"*-1\r\n", b"%1\r\n", b"_\r\n", b"*0\r\n"]))
        depth = draw(st.integers(1, 6))
        return b"*2\r\n" * depth + inner
    if kind == 5:   # a bulk whose payload is shorter or longer than declared
        payload = draw(st.binary(max_size=12))
        declared = len(payload) + draw(st.integers(-3, 3))
        return b"*1\r\n$%d\r\n" % declared + payload + b"\r\n"
    if kind == 6:
        return draw(st.binary(max_size=40))
    return draw(st.sampled_from([b"*", b"$", b"\r\n", b"\r", b"\n", b"*1\r", b"$3\r\nabc",
                                 b"*1\r\n$4\r\nPING\r\n", b"PING\r\n", b"\x00\r\n"]))


@st.composite
def mutated_stream(draw) -> bytes:
    data = bytearray(b"".join(draw(st.lists(frame_piece(), min_size=1, max_size=6))))
    for _ in range(draw(st.integers(0, 3))):
        if not data:
            break
        i = draw(st.integers(0, len(data) - 1))
        op = draw(st.integers(0, 2))
        if op == 0:
            data[i] = draw(st.integers(0, 255))
        elif op == 1:
            del data[i]
        else:
            data[i:i] = draw(st.sampled_from([b"\r\n", b"\x00", b"*", b"$", b"9" * 12]))
    return bytes(data)


def parse_outcome(chunks) -> tuple[list, str | None]:
    """(commands, error message or None) from feeding ``chunks`` in order."""
    p = RequestParser(**PARSER_KW)
    commands: list = []
    try:
        for chunk in chunks:
            p.feed(chunk)
            while (argv := p.next_command()) is not None:
                commands.append(argv)
    except ProtocolError as e:
        return commands, str(e)
    return commands, None


PARSER_KW: dict = {}


@pytest.mark.parametrize("variant", ["default", "small-bulk-limit"])
@settings(max_examples=examples(700), **FUZZ_SETTINGS)
@given(data=mutated_stream())
def test_parser_parses_or_raises_protocol_error_and_is_chunking_independent(variant, data):
    PARSER_KW.clear()
    if variant == "small-bulk-limit":
        PARSER_KW["max_bulk_len"] = 8
    count("parser inputs (" + variant + ")")
    # Only ProtocolError may escape: anything else fails the test right here.
    whole = parse_outcome([data])
    one_by_one = parse_outcome([data[i:i + 1] for i in range(len(data))])
    # The 64 KiB line limits depend on how much arrived at once (as in Redis);
    # these inputs stay far below them, so chunking must not matter at all.
    assert len(data) < 16 * 1024
    assert one_by_one == whole


@settings(max_examples=examples(150), **FUZZ_SETTINGS)
@given(header=st.sampled_from([b"*", b"$"]), number=st.sampled_from(BIG_NUMBERS),
       authenticated=st.booleans())
def test_parser_declared_lengths_never_allocate(header, number, authenticated):
    """A header declaring a huge length fails or waits, without buffering anything."""
    count("declared-length headers")
    p = RequestParser()
    p.authenticated = authenticated
    data = (b"*1\r\n" if header == b"$" else b"") + header + number + b"\r\nxy"
    p.feed(data)
    try:
        argv = p.next_command()
    except ProtocolError:
        return
    # Only a small declared length can be satisfied by the two bytes sent.
    assert argv is None or int(number) <= 2
    assert p.buffered() <= len(data)


def test_parser_unauthenticated_limits_hold_for_huge_headers():
    p = RequestParser()
    p.authenticated = False
    p.feed(b"*11\r\n")
    with pytest.raises(ProtocolError, match="unauthenticated multibulk length"):
        p.next_command()
    p = RequestParser()
    p.authenticated = False
    p.feed(b"*1\r\n$1099511627776\r\n")
    with pytest.raises(ProtocolError, match="invalid bulk length"):
        p.next_command()


# -- (b) every command's arguments, over a real connection -------------------------

MAX_ID = b"18446744073709551615-18446744073709551615"
TOKENS = [
    # ids and numbers at and past the limits
    MAX_ID, b"18446744073709551615-0", b"18446744073709551616-0", b"0-0", b"0-1", b"-1", b"0", b"1",
    b"-", b"+", b"$", b">", b"*", b"0-*", b"1-*", b"5-18446744073709551615", b"-0", b"00",
    b"9223372036854775807", b"9223372036854775808", b"-9223372036854775808",
    b"18446744073709551615", b"18446744073709551616", b"2147483648", b"1e3", b"0x10",
    b"1.5", b"inf", b"-inf", b"nan", b"NaN", b" 1", b"1 ",
    # strings that break naive decoding
    b"", b"\xff\xfe", b"\xc3\x28", b"\x00", b"\r\n", b"a" * 300,
    # option words, to land in the wrong places
    b"MAXLEN", b"MINID", b"~", b"=", b"LIMIT", b"COUNT", b"BLOCK", b"STREAMS", b"GROUP",
    b"NOACK", b"IDLE", b"TIME", b"RETRYCOUNT", b"FORCE", b"JUSTID", b"LASTID", b"ENTRIESREAD",
    b"MKSTREAM", b"NOMKSTREAM", b"KEEPREF", b"DELREF", b"ACKED", b"IDMP", b"IDMPAUTO", b"IDS",
    b"CLAIM", b"TYPE", b"MATCH", b"REPLACE", b"ABSTTL", b"NX", b"XX", b"GT", b"LT", b"EX",
    b"PX", b"EXAT", b"PXAT", b"KEEPTTL", b"GET", b"DB", b"FULL", b"CONSUMER", b"DURATION",
    b"MAXSIZE", b"SAVE", b"NOSAVE", b"ON", b"OFF", b"stream", b"string",
    # keys, groups and consumers that exist in the seeded state
    b"s1", b"s1", b"s2", b"str", b"missing", b"g1", b"g1", b"g2", b"c1", b"c2",
]

CANARY = b"canary:untouched"

# Commands that would stop the fuzzer itself (or the server) are left out;
# blocking arguments are capped below.
# MIGRATE connects to the host it is given (a name may wait on DNS): its arguments are
# tested in tests/persistence/test_rdb_interop.py.
EXCLUDED = {"shutdown", "flushall", "flushdb", "replicaof", "slaveof", "psync", "sync", "quit",
            "monitor", "subscribe", "psubscribe", "ssubscribe", "migrate"}
EXCLUDED_SUB = {("client", "kill"), ("client", "pause"), ("config", "set"),
                ("config", "rewrite"), ("debug", None)}
DEBUG_SUBS = [b"DIGEST", b"DIGEST-VALUE", b"HELP", b"OBJECT", b"NOPE"]
BLOCK_VALUES = [b"1", b"5", b"-1", b"x", b"9223372036854775808", b"1.5"]


def command_choices() -> list[tuple[bytes, ...]]:
    from streamdb.commands import COMMANDS    # (importing the package fills the table)
    out = []
    for name, spec in sorted(COMMANDS.items()):
        if name in EXCLUDED:
            continue
        if name == "debug":
            out += [(b"debug", s) for s in DEBUG_SUBS]
            continue
        out.append((name.encode(),))
        for sub in spec.subcommands:
            if (name, sub) not in EXCLUDED_SUB:
                out.append((name.encode(), sub.encode()))
    return out


def cap_blocking(argv: list[bytes]) -> list[bytes]:
    """Replace what follows BLOCK (and WAIT's timeout) by a small or invalid value."""
    argv = list(argv)
    for i in range(len(argv) - 1):
        if argv[i].upper() == b"BLOCK":
            argv[i + 1] = BLOCK_VALUES[len(argv[i + 1]) % len(BLOCK_VALUES)]
    if argv[0].lower() == b"wait" and len(argv) >= 3:
        argv[2] = BLOCK_VALUES[len(argv[2]) % len(BLOCK_VALUES)]
    return argv


class RawClient:
    """A loopback connection that sends argv and reads one reply with a timeout."""

    def __init__(self, port: int, timeout: float = 5.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.reader = hiredis.Reader()

    def call(self, *argv: bytes):
        self.sock.sendall(resp(*argv))
        while True:
            reply = self.reader.gets()
            if reply is not False:
                return reply
            data = self.sock.recv(65536)   # socket.timeout = a hang: the test fails
            if not data:
                raise ConnectionError("server closed the connection")
            self.reader.feed(data)

    def close(self) -> None:
        self.sock.close()


def seed(c: RawClient) -> None:
    for key in (b"s1", b"s2", b"str", b"missing"):
        c.call(b"DEL", key)
    for i in range(1, 6):
        c.call(b"XADD", b"s1", b"%d-%d" % (i, i), b"f", b"v%d" % i, b"g", b"x")
    c.call(b"XGROUP", b"CREATE", b"s1", b"g1", b"0")
    c.call(b"XREADGROUP", b"GROUP", b"g1", b"c1", b"COUNT", b"3", b"STREAMS", b"s1", b">")
    c.call(b"XADD", b"s2", b"MAXLEN", b"100", b"*", b"a", b"1")
    c.call(b"SET", b"str", b"hello")


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzz")
    srv = ServerProcess(d, "--appendonly", "yes", "--appendfsync", "no", "--save", "",
                        "--stream-node-max-entries", "4")
    with srv:
        c = RawClient(srv.port)
        for i in range(20):
            c.call(b"XADD", CANARY, b"*", b"n", b"%d" % i)
        c.call(b"XGROUP", b"CREATE", CANARY, b"cg", b"0")
        c.call(b"XREADGROUP", b"GROUP", b"cg", b"cc", b"COUNT", b"7", b"STREAMS", CANARY, b">")
        srv.canary_digest = c.call(b"DEBUG", b"DIGEST-VALUE", CANARY)
        srv.watcher = c
        yield srv
        c.close()


COMMAND_CHOICES = command_choices()


# Valid requests, mutated one or two tokens at a time, reach deeper into the
# option parsing than purely random argv does.
TEMPLATES = [line.split(b" ") for line in [
    b"XADD s1 MAXLEN ~ 10 LIMIT 5 * f v", b"XADD s1 NOMKSTREAM MINID = 0-1 * f v",
    b"XADD s2 IDMP p1 i1 * f v", b"XADD s2 IDMPAUTO p2 * f v", b"XADD s1 KEEPREF 9-0 f v",
    b"XTRIM s1 MAXLEN = 2", b"XTRIM s1 MINID ~ 3-0 LIMIT 1 ACKED", b"XDEL s1 1-1 2-2",
    b"XDELEX s1 DELREF IDS 2 1-1 3-3", b"XRANGE s1 - + COUNT 2", b"XREVRANGE s1 + - COUNT 2",
    b"XREAD COUNT 2 BLOCK 1 STREAMS s1 s2 0 $", b"XREADGROUP GROUP g1 c2 COUNT 2 NOACK STREAMS s1 >",
    b"XREADGROUP GROUP g1 c1 CLAIM 0 COUNT 2 STREAMS s1 >", b"XACK s1 g1 1-1 2-2",
    b"XACKDEL s1 g1 ACKED IDS 1 1-1", b"XPENDING s1 g1 IDLE 0 - + 10 c1", b"XPENDING s1 g1",
    b"XCLAIM s1 g1 c2 0 1-1 IDLE 5 TIME 5 RETRYCOUNT 3 FORCE JUSTID LASTID 3-3",
    b"XAUTOCLAIM s1 g1 c2 0 0-0 COUNT 2 JUSTID", b"XGROUP CREATE s1 g2 $ MKSTREAM ENTRIESREAD 3",
    b"XGROUP SETID s1 g1 2-2 ENTRIESREAD 1", b"XGROUP CREATECONSUMER s1 g1 c3",
    b"XGROUP DELCONSUMER s1 g1 c1", b"XGROUP DESTROY s1 g1", b"XINFO STREAM s1 FULL COUNT 2",
    b"XINFO GROUPS s1", b"XINFO CONSUMERS s1 g1", b"XSETID s1 9-9 ENTRIESADDED 9 MAXDELETEDID 1-1",
    b"XCFGSET s2 DURATION 10 MAXSIZE 10", b"SET str v EX 10 NX GET", b"COPY s1 s3 DB 1 REPLACE",
    b"RESTORE s4 0 x REPLACE ABSTTL IDLETIME 1", b"SCAN 0 MATCH * COUNT 10 TYPE stream",
    b"EXPIRE s1 100 GT", b"INCRBY str 1", b"OBJECT ENCODING s1", b"CLIENT LIST ID 1",
]]


@st.composite
def fuzz_request(draw) -> list[bytes]:
    if draw(st.booleans()):
        argv = list(draw(st.sampled_from(TEMPLATES)))
        for _ in range(draw(st.integers(1, 3))):
            i = draw(st.integers(1, len(argv)))
            token = draw(st.sampled_from(TOKENS))
            if draw(st.booleans()) and i < len(argv):
                argv[i] = token
            else:
                argv.insert(i, token)
        return cap_blocking(argv)
    head = list(draw(st.sampled_from(COMMAND_CHOICES)))
    args = draw(st.lists(st.sampled_from(TOKENS), max_size=9))
    return cap_blocking(head + args)


@settings(max_examples=examples(250), **FUZZ_SETTINGS)
@given(requests=st.lists(fuzz_request(), min_size=1, max_size=8))
def test_every_command_answers_hostile_arguments(fuzz_server, requests):
    count("command examples")
    c = RawClient(fuzz_server.port)
    try:
        seed(c)
        for argv in requests:
            count("commands sent")
            reply = c.call(*argv)
            if not isinstance(reply, hiredis.ReplyError):
                count("commands that succeeded")
            else:
                assert "internal error" not in str(reply), (argv, reply)
    finally:
        c.close()
    watcher = fuzz_server.watcher
    assert watcher.call(b"PING") == b"PONG"
    assert watcher.call(b"DEBUG", b"DIGEST-VALUE", CANARY) == fuzz_server.canary_digest
    assert fuzz_server.proc.poll() is None


def test_fuzzed_state_survives_a_restart_from_the_aof(fuzz_server):
    """Runs after the command fuzz: every effect it recorded replays to the same state."""
    assert "Internal error" not in fuzz_server.log_text()
    w = fuzz_server.watcher
    before = w.call(b"DEBUG", b"DIGEST")
    w.close()
    fuzz_server.stop()
    fuzz_server.start()
    fuzz_server.watcher = w = RawClient(fuzz_server.port)
    deadline = time.monotonic() + 30
    while True:
        after = w.call(b"DEBUG", b"DIGEST")
        if not isinstance(after, hiredis.ReplyError) or time.monotonic() > deadline:
            break
        time.sleep(0.05)   # LOADING
    assert after == before
    assert w.call(b"DEBUG", b"DIGEST-VALUE", CANARY) == fuzz_server.canary_digest


# -- (c) mutated frames on raw sockets --------------------------------------------

SEED_FRAMES = [
    resp(b"PING"), resp(b"XADD", b"s1", b"*", b"f", b"v"), resp(b"XRANGE", b"s1", b"-", b"+"),
    resp(b"XREADGROUP", b"GROUP", b"g1", b"c1", b"COUNT", b"2", b"STREAMS", b"s1", b">"),
    resp(b"SET", b"str", b"v" * 40), b"PING\r\n", b"XLEN s1\r\n", b"ECHO \"a\\x41b\"\r\n",
]


@st.composite
def mutated_frames(draw) -> bytes:
    data = bytearray(b"".join(draw(st.lists(st.sampled_from(SEED_FRAMES), min_size=1, max_size=4))))
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(data) - 1))
        op = draw(st.integers(0, 3))
        if op == 0:
            data[i] = draw(st.integers(0, 255))
        elif op == 1:
            del data[i]
        elif op == 2:
            data[i:i] = draw(st.sampled_from([b"\r\n", b"*", b"$", b"\x00", b"\xff"]))
        else:   # a length replaced by a huge or odd number
            data[i:i] = draw(st.sampled_from(BIG_NUMBERS))
        if not data:
            data = bytearray(b"*")
    return bytes(data)


@settings(max_examples=examples(150), **FUZZ_SETTINGS)
@given(payload=mutated_frames())
def test_mutated_frames_get_replies_or_a_close(fuzz_server, payload):
    count("raw mutated frames")
    reader = hiredis.Reader()
    with socket.create_connection(("127.0.0.1", fuzz_server.port), timeout=5) as s:
        s.sendall(payload)
        s.settimeout(0.05)   # a partial request legitimately waits for more bytes
        try:
            while data := s.recv(65536):
                reader.feed(data)
        except socket.timeout:
            pass
    # What came back is well-formed RESP (hiredis raises ProtocolError otherwise).
    while (reply := reader.gets()) is not False:
        if isinstance(reply, hiredis.ReplyError):
            assert "internal error" not in str(reply), (payload, reply)
    assert fuzz_server.watcher.call(b"PING") == b"PONG"
    assert fuzz_server.proc.poll() is None
