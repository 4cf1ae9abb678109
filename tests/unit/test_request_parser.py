"""The request parser, tested the h11 way.

Every case is fed three ways: the whole buffer at once, one byte at a time
(the parser must wait for more, never fail early), and followed by trailing
bytes of a next request (which must be left in the buffer untouched).  A
Hypothesis fuzz holds it to "parses or raises ProtocolError, nothing else",
and a model check compares random well-formed pipelines with what was encoded.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdb.protocol.request import ProtocolError, RequestParser, split_inline_args


def cmd(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def parse_all(parser: RequestParser) -> list[list[bytes]]:
    out = []
    for _ in range(100_000):
        argv = parser.next_command()
        if argv is None:
            return out
        out.append(argv)
    raise AssertionError("parser did not stop")


def whole(data: bytes, **kw) -> list[list[bytes]]:
    p = RequestParser(**kw)
    p.feed(data)
    return parse_all(p)


def byte_by_byte(data: bytes, **kw) -> list[list[bytes]]:
    p = RequestParser(**kw)
    out = []
    for i in range(len(data)):
        p.feed(data[i:i + 1])
        out += parse_all(p)
    return out


# (request bytes, the argvs they hold).  Each is complete: nothing is left over.
COMPLETE = [
    (cmd(b"PING"), [[b"PING"]]),
    (cmd(b"XADD", b"s", b"*", b"f", b"v"), [[b"XADD", b"s", b"*", b"f", b"v"]]),
    (cmd(b"ECHO", b""), [[b"ECHO", b""]]),
    (cmd(b"ECHO", b"a\r\nb"), [[b"ECHO", b"a\r\nb"]]),          # CRLF inside a bulk
    (cmd(b"ECHO", b"\x00\xff"), [[b"ECHO", b"\x00\xff"]]),
    (cmd(b"ECHO", b"x" * 20000), [[b"ECHO", b"x" * 20000]]),
    (cmd(b"PING") + cmd(b"PING"), [[b"PING"], [b"PING"]]),
    (b"PING\r\n", [[b"PING"]]),
    (b"PING\n", [[b"PING"]]),
    (b"  SET  k   v \r\n", [[b"SET", b"k", b"v"]]),
    (b"\r\n\n\r\nPING\r\n", [[b"PING"]]),
    (b"ECHO \"a b\" 'c d'\r\n", [[b"ECHO", b"a b", b"c d"]]),
    (b"ECHO \"\\x41\\n\\\\\"\r\n", [[b"ECHO", b"A\n\\"]]),
    (b"*0\r\n*-1\r\n*-7\r\n" + cmd(b"PING"), [[b"PING"]]),
    (b"*1\r\n$4\r\nPINGxx", [[b"PING"]]),                          # trailing CRLF not checked
    (b"*1\r\n$4\rXPING\r\n", [[b"PING"]]),                          # nor the byte after '\r'
    (b"*2\r\n$1\r\na\r\n$0\r\n\r\n", [[b"a", b""]]),
]

# Requests that are incomplete: no command, no error, whatever is fed in pieces.
INCOMPLETE = [b"*", b"*1", b"*1\r", b"*1\r\n", b"*1\r\n$", b"*1\r\n$4", b"*1\r\n$4\r\n",
              b"*1\r\n$4\r\nPING", b"*1\r\n$4\r\nPING\r", b"PING", b"PING\r",
              b"*1\r\n$536870912\r\n",                 # exactly proto-max-bulk-len
              b"*1\x00\r\n", b"*1\r\n$4\x00\r\nPING\r\n", b"PING\x00\r\nPING\r\n"]

# Malformed requests and Redis's error text.
MALFORMED = [
    (b"*abc\r\n", "Protocol error: invalid multibulk length"),
    (b"*01\r\n", "Protocol error: invalid multibulk length"),
    (b"*-0\r\n", "Protocol error: invalid multibulk length"),
    (b"*2147483648\r\n", "Protocol error: invalid multibulk length"),
    (b"*1\r\n$-5\r\n", "Protocol error: invalid bulk length"),
    (b"*1\r\n$536870913\r\n", "Protocol error: invalid bulk length"),
    (b"*1\r\n$+4\r\n", "Protocol error: invalid bulk length"),
    (b"*1\r\n:5\r\n", "Protocol error: expected '$', got ':'"),
    (b"*1\r\n\r\n", "Protocol error: expected '$', got ' '"),
    (b"*1\r\n\xff\r\n", "Protocol error: expected '$', got '\xff'"),
    (b"ECHO \"abc\r\n", "Protocol error: unbalanced quotes in request"),
    (b"ECHO 'abc'd\r\n", "Protocol error: unbalanced quotes in request"),
    (b"*" + b"1" * 70000, "Protocol error: too big mbulk count string"),
    (b"*1\r\n$" + b"1" * 70000, "Protocol error: too big bulk count string"),
    (b"GET " + b"k" * 70000, "Protocol error: too big inline request"),
]


@pytest.mark.parametrize("data, expected", COMPLETE)
def test_complete_requests_whole_buffer(data, expected):
    assert whole(data) == expected


@pytest.mark.parametrize("data, expected", COMPLETE)
def test_complete_requests_one_byte_at_a_time(data, expected):
    assert byte_by_byte(data) == expected


@pytest.mark.parametrize("data, expected", COMPLETE)
@pytest.mark.parametrize("trailing, rest", [
    (b"*3\r", b"\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n"),     # not even a whole header
    (b"SET k", b" v\r\n"),                                      # half an inline command
    (b"*3\r\n$3\r\nSET\r\n$1\r\nk", b"\r\n$1\r\nv\r\n"),       # headers parsed, bulk pending
])
def test_trailing_bytes_are_left_untouched(data, expected, trailing, rest):
    p = RequestParser()
    p.feed(data + trailing)
    assert parse_all(p) == expected
    # What the parser has not returned yet is still there (in its buffer, or
    # for a multibulk whose headers it already read, in its pending argv).
    assert p.buffered() <= len(trailing)
    assert p.buf.endswith(p.buf[p.pos:]) and trailing.endswith(p.buf[p.pos:])
    p.feed(rest)
    assert parse_all(p) == [[b"SET", b"k", b"v"]]
    assert p.buffered() == 0


@pytest.mark.parametrize("data", INCOMPLETE)
def test_incomplete_requests_wait(data):
    assert whole(data) == []
    assert byte_by_byte(data) == []


@pytest.mark.parametrize("data, message", MALFORMED)
def test_malformed_requests_raise_redis_errors(data, message):
    with pytest.raises(ProtocolError) as e:
        whole(data)
    assert str(e.value) == message


@pytest.mark.parametrize("data, message", MALFORMED)
def test_malformed_requests_fail_the_same_byte_by_byte(data, message):
    if len(data) > 1000:
        pytest.skip("64 KiB one byte at a time is slow; the whole-buffer test covers it")
    with pytest.raises(ProtocolError) as e:
        byte_by_byte(data)
    assert str(e.value) == message


def test_commands_before_an_error_are_returned_first():
    p = RequestParser()
    p.feed(cmd(b"PING") + b"*1\r\n:5\r\n")
    assert p.next_command() == [b"PING"]
    with pytest.raises(ProtocolError):
        p.next_command()


def test_unauthenticated_limits():
    p = RequestParser()
    p.authenticated = False
    p.feed(b"*11\r\n")
    with pytest.raises(ProtocolError, match="^Protocol error: unauthenticated multibulk length$"):
        p.next_command()
    p = RequestParser()
    p.authenticated = False
    p.feed(b"*1\r\n$16385\r\n")
    with pytest.raises(ProtocolError, match="^Protocol error: unauthenticated bulk length$"):
        p.next_command()
    p = RequestParser()
    p.authenticated = False
    p.feed(cmd(b"AUTH", b"x" * 16384))
    assert p.next_command() == [b"AUTH", b"x" * 16384]


def test_smaller_proto_max_bulk_len():
    assert whole(b"*1\r\n$1024\r\n", max_bulk_len=1024) == []
    with pytest.raises(ProtocolError, match="invalid bulk length"):
        whole(b"*1\r\n$1025\r\n", max_bulk_len=1024)


@pytest.mark.parametrize("line, args", [
    (b"", []),
    (b"a b", [b"a", b"b"]),
    (b"\"\"", [b""]),
    (b"\"a\\\"b\"", [b"a\"b"]),
    (b"'a\\'b'", [b"a'b"]),
    (b"'a\\nb'", [b"a\\nb"]),           # no escapes inside single quotes
    (b"\"\\x4g\"", [b"x4g"]),
    (b"a\"b c\"d", None),               # closing quote must be followed by a space
    (b"\"abc", None),
    (b"\"abc\\", None),
])
def test_split_inline_args(line, args):
    assert split_inline_args(line) == args


# -- fuzz ---------------------------------------------------------------------------

_pieces = st.sampled_from([b"*", b"$", b"\r\n", b"\r", b"\n", b"1", b"2", b"0", b"-", b"3", b"a",
                           b"PING", b" ", b"\"", b"'", b"\\", b"x", b"\x00", b":", b"+",
                           b"*2\r\n", b"$3\r\n", b"$1\r\n", b"abc", b"\xff"])


@settings(max_examples=600, deadline=None)
@given(st.lists(_pieces, max_size=30), st.lists(st.integers(1, 7), min_size=1, max_size=10))
def test_fuzz_parses_or_raises_protocol_error(pieces, cuts):
    data = b"".join(pieces)
    try:
        expected = ("ok", whole(data))
    except ProtocolError as e:
        expected = ("error", str(e))
    # Chunked the same data must give the same commands (up to the same error).
    p = RequestParser()
    got = []
    i = 0
    k = 0
    try:
        while i < len(data):
            n = cuts[k % len(cuts)]
            k += 1
            p.feed(data[i:i + n])
            i += n
            got += parse_all(p)
        result = ("ok", got)
    except ProtocolError as e:
        result = ("error", str(e))
    if expected[0] == "ok":
        assert result == expected
    else:
        assert result[0] == "error" and result[1] == expected[1]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_random_bytes(data):
    try:
        whole(data)
    except ProtocolError:
        pass


argvs = st.lists(st.lists(st.binary(max_size=40), min_size=1, max_size=6), min_size=1, max_size=8)


@settings(max_examples=300, deadline=None)
@given(argvs, st.integers(1, 64))
def test_well_formed_pipelines_round_trip(commands, chunk):
    data = b"".join(cmd(*argv) for argv in commands)
    assert whole(data) == commands
    p = RequestParser()
    got = []
    for i in range(0, len(data), chunk):
        p.feed(data[i:i + chunk])
        got += parse_all(p)
    assert got == commands
    assert p.buffered() == 0


@settings(max_examples=60, deadline=None)
@given(st.integers(32 * 1024, 200 * 1024), st.integers(1, 70_000), st.binary(min_size=1, max_size=8))
def test_big_bulks_arriving_in_pieces(size, chunk, tail):
    """Bulks of 32 KiB and more are gathered apart while they arrive (one join, not a copy
    per read); the command after them, the byte count and the CRLF split must not suffer."""
    big = bytes(range(256)) * (size // 256) + b"z" * (size % 256)
    data = cmd(b"RESTORE", b"k", big) + cmd(b"PING", tail)
    p = RequestParser()
    got = []
    fed = 0
    for i in range(0, len(data), chunk):
        piece = data[i:i + chunk]
        p.feed(piece)
        fed += len(piece)
        got += parse_all(p)
        consumed = sum(len(cmd(*a)) for a in got)
        # What client-query-buffer-limit sees: every byte not yet parsed, held
        # pieces included (the small header lines already parsed do not count).
        assert 0 <= (fed - consumed) - p.buffered() < 100
    assert got == [[b"RESTORE", b"k", big], [b"PING", tail]]
    assert p.buffered() == 0


# -- pipelines ---------------------------------------------------------------------


def test_pipelined_requests_count_as_buffered_until_the_last_is_taken():
    p = RequestParser()
    data = cmd(b"XADD", b"k", b"*", b"f", b"v") * 3
    p.feed(data)
    assert p.next_command() == [b"XADD", b"k", b"*", b"f", b"v"]
    assert p.buffered() > 0          # a blocked client's loop resumes on this
    assert len(parse_all(p)) == 2
    assert p.buffered() == 0


def test_a_request_waits_for_the_crlf_after_its_last_bulk():
    p = RequestParser()
    data = cmd(b"XADD", b"k", b"*", b"f", b"v") * 2
    p.feed(data[:-2])
    assert parse_all(p) == [[b"XADD", b"k", b"*", b"f", b"v"]]     # the first is whole
    p.feed(data[-2:])
    assert parse_all(p) == [[b"XADD", b"k", b"*", b"f", b"v"]]
    assert p.buffered() == 0
