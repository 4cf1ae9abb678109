"""The compiled core (protocol/_resp.pyx) behaves exactly as its plain twins.

request.py's RequestParser and reply.py's encode_reply are the specification;
random input, valid and hostile, fed whole, a byte at a time and in random
pieces, must give the same argv lists, the same ProtocolError at the same point,
the same buffered() counts, and the same reply bytes in RESP2 and RESP3.
"""

from __future__ import annotations

import importlib
import math
import os
import shutil
import subprocess
import sys
import time

import pytest
from hypothesis import given, settings, strategies as st

from helpers import ROOT
from streamdb import compiled, protocol
from streamdb.protocol import reply, request
from streamdb.protocol.request import ProtocolError, encode_request

try:
    from streamdb.protocol import _resp
except ImportError:
    _resp = None

needs_compiled = pytest.mark.skipif(
    _resp is None, reason="the compiled core is not built (pip install -e . builds it)")


def test_the_compiled_core_runs_unless_streamdb_pure_is_set():
    """Under ``make test`` the install built the extension: a test run that
    silently fell back to the Python path would prove nothing about it."""
    if os.environ.get("STREAMDB_PURE", "") not in ("", "0"):
        assert protocol.CORE == "python"
        assert protocol.RequestParser is request.RequestParser
    else:
        assert protocol.CORE == "compiled", protocol.CORE_REASON
        assert protocol.RequestParser is _resp.RequestParser
        assert protocol.encode_reply is _resp.encode_reply
        assert protocol.encode_reply_pieces is _resp.encode_reply_pieces
        assert protocol.encode_commands is _resp.encode_commands


def test_every_pure_mode_module_runs_compiled_unless_streamdb_pure_is_set():
    for name in sorted(compiled.PURE_MODE_MODULES):
        module = importlib.import_module(name)
        assert compiled.is_compiled(module) == (not compiled.PURE), name
    core = compiled.status(protocol.CORE, protocol.CORE_REASON)[0]
    assert core == ("python" if compiled.PURE else "compiled")


def test_a_source_newer_than_its_build_runs_as_python(tmp_path):
    """An edited pure-mode module whose extension was not rebuilt must not run the
    old compiled code: its source runs, and the status says why."""
    if compiled.PURE or not compiled.PURE_MODE_MODULES:
        pytest.skip("needs the compiled build")
    copy = tmp_path / "streamdb"
    shutil.copytree(ROOT / "streamdb", copy, ignore=shutil.ignore_patterns("__pycache__"))
    name = sorted(compiled.PURE_MODE_MODULES)[0]
    source = tmp_path / (name.replace(".", "/") + ".py")
    os.utime(source, (time.time() + 10, time.time() + 10))
    out = subprocess.run(
        [sys.executable, "-c", "from streamdb import compiled, protocol; "
         "print(*compiled.status(protocol.CORE, protocol.CORE_REASON), sep='|')"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path), "STREAMDB_PURE": ""},
        capture_output=True, text=True, check=True).stdout.strip()
    core, why = out.split("|")
    assert core == "python" and why.startswith("stale build: "), out
    assert name.replace(".", "/") + ".py" in why


def test_a_core_that_does_not_import_leaves_the_python_path():
    core, reason, parser, encode, pieces, encode_all = protocol.select_core(False, "streamdb.protocol._not_built")
    assert (core, parser, encode, pieces, encode_all) == (
        "python", request.RequestParser, reply.encode_reply, reply.encode_reply_pieces,
        reply.encode_commands)
    assert "not built" in reason
    assert protocol.select_core(True)[:2] == ("python", "STREAMDB_PURE is set")


# ---------------------------------------------------------------------------
# Request parser
# ---------------------------------------------------------------------------

def run_parser(make, ops: list, max_bulk_len: int) -> list:
    """What a parser does with ``ops``: ("feed", bytes), ("next",), ("auth", bool).

    Each step's result and the buffered() count after it; an error ends the run
    (the server closes the connection).
    """
    p = make(max_bulk_len)
    trace = []
    for op in ops:
        if op[0] == "feed":
            p.feed(op[1])
            trace.append(("fed", p.buffered()))
        elif op[0] == "auth":
            p.authenticated = op[1]
        else:
            while True:
                try:
                    argv = p.next_command()
                except ProtocolError as e:
                    trace.append(("error", str(e), p.buffered()))
                    return trace
                if argv is None:
                    trace.append(("wait", p.buffered()))
                    break
                trace.append(("argv", argv, p.buffered()))
    return trace


def both(ops: list, max_bulk_len: int = 9999) -> list:
    plain = run_parser(request.RequestParser, ops, max_bulk_len)
    compiled = run_parser(_resp.RequestParser, ops, max_bulk_len)
    assert compiled == plain
    return plain


def pieces(data: bytes, cuts: list[int]) -> list:
    """``data`` fed in pieces split at ``cuts``, every request taken after each piece."""
    ops, last = [], 0
    for c in sorted({c % (len(data) + 1) for c in cuts}) + [len(data)]:
        ops += [("feed", data[last:c]), ("next",)]
        last = c
    return ops


def argvs_of(trace: list) -> list:
    return [t[1] for t in trace if t[0] == "argv"]


arg = st.one_of(st.binary(max_size=12), st.sampled_from([b"", b"\r\n", b"\0", b"*1\r\n", b"$"]))
argv_lists = st.lists(arg, min_size=1, max_size=6)
# Inline arguments without quotes, spaces or control bytes come back as they are
# (and without '*', which would start a multibulk).
inline_arg = st.binary(min_size=1, max_size=8).filter(
    lambda b: not any(c in b" \t\r\n\x0b\x0c\x00\"'*" for c in b))


@st.composite
def valid_stream(draw):
    """Requests (multibulk and inline, with ``*0``/``*-1``/blank lines between)
    as bytes, and the argv lists they are."""
    out, expected = [], []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["multibulk", "multibulk", "inline", "empty"]))
        if kind == "multibulk":
            argv = draw(argv_lists)
            out.append(encode_request(*argv))
            expected.append(argv)
        elif kind == "inline":
            argv = draw(st.lists(inline_arg, min_size=1, max_size=4))
            out.append(b" ".join(argv) + draw(st.sampled_from([b"\r\n", b"\n"])))
            expected.append(argv)
        else:
            out.append(draw(st.sampled_from([b"*0\r\n", b"*-1\r\n", b"\r\n", b"\n", b"  \r\n"])))
    return b"".join(out), expected


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(valid_stream(), st.lists(st.integers(0, 10**6), max_size=8), st.binary(max_size=10),
       st.sampled_from([9999, 512 * 1024 * 1024]))
def test_valid_requests_parse_alike_whole_in_pieces_and_a_byte_at_a_time(
        stream, cuts, trailing, max_bulk_len):
    data, expected = stream
    whole = both([("feed", data), ("next",)], max_bulk_len)
    assert argvs_of(whole) == expected
    assert argvs_of(both(pieces(data, cuts), max_bulk_len)) == expected
    one_byte = [op for i in range(len(data)) for op in (("feed", data[i:i + 1]), ("next",))]
    assert argvs_of(both(one_byte, max_bulk_len)) == expected
    # A partial request after them stays buffered (a multibulk header with its
    # CRLF is consumed: its bulks are then awaited).
    tail = encode_request(b"XADD", b"k", b"*", b"f", trailing)[:-1]
    trace = both([("feed", data + tail), ("next",)], max_bulk_len)
    assert argvs_of(trace) == expected
    assert trace[-1][0] == "wait" and 0 < trace[-1][1] <= len(tail)


# Pieces of hostile requests: headers with bad, huge, negative and odd counts,
# missing or lone CR/LF, non-bulk elements, NUL bytes, quotes and escapes.
hostile_piece = st.one_of(
    st.sampled_from([
        b"*", b"$", b"\r\n", b"\r", b"\n", b"\0", b" ", b":", b"+", b"-", b"\"", b"'", b"\\",
        b"\\x41", b"\\n", b"x", b"PING", b"1", b"3", b"0", b"-1", b"01", b"+5", b" 2",
        b"*1\r\n", b"*2\r\n", b"*3\r\n", b"*0\r\n", b"*-1\r\n", b"*-5\r\n", b"*11\r\n",
        b"*2147483647\r\n", b"*2147483648\r\n", b"*99999999999999999999\r\n",
        b"$0\r\n", b"$1\r\n", b"$3\r\n", b"$-1\r\n", b"$16385\r\n", b"$10000\r\n",
        b"$9223372036854775807\r\n", b"$9223372036854775808\r\n", b"$-9223372036854775808\r\n",
        b":1\r\n", b"+OK\r\n", b"$3\r\nabc\r\n", b"$3\r\nab", b"abc\r\n",
        b"\"a b\"", b"'it\\'s'", b"\"x\"y", b"\"open", b"'open",
    ]),
    st.binary(max_size=6),
    # A header whose count is almost a number.
    st.builds(lambda kind, count: kind + count + b"\r\n", st.sampled_from([b"*", b"$"]),
              st.lists(st.sampled_from(list(b"0123456789-+:/ \0")), max_size=21).map(bytes)),
)
hostile_stream = st.lists(hostile_piece, max_size=24).map(b"".join)


@needs_compiled
@settings(max_examples=1000, deadline=None)
@given(hostile_stream, st.lists(st.integers(0, 10**6), max_size=6),
       st.sampled_from([0, 3, 9999, 512 * 1024 * 1024]), st.booleans(), st.booleans())
def test_hostile_requests_fail_alike(data, cuts, max_bulk_len, authenticated, whole):
    """Both raise the same ProtocolError at the same point, or parse the same argv."""
    ops = [("auth", authenticated)]
    ops += [("feed", data), ("next",)] if whole else pieces(data, cuts)
    both(ops, max_bulk_len)


# Inline lines made of what sdssplitargs treats specially: quotes, escapes, hex
# digits, every byte it counts as a space.
inline_line = st.lists(st.sampled_from(
    [b"a", b"Z", b"\"", b"'", b"\\", b"x", b"4", b"f", b"g", b"n", b"r", b"t", b"b",
     b" ", b"\t", b"\x0b", b"\x0c", b"\0", b"\r", b"\xff"]), max_size=24).map(b"".join)


@needs_compiled
@settings(max_examples=1000, deadline=None)
@given(st.lists(inline_line, min_size=1, max_size=3))
def test_inline_requests_split_alike(lines):
    both([("feed", b"\n".join(lines) + b"\n"), ("next",)])


@needs_compiled
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["feed", "auth"]), hostile_stream, st.booleans()),
                max_size=8))
def test_authentication_changing_between_reads_applies_alike(steps):
    """network.py sets ``authenticated`` after each command (AUTH, HELLO): the caps
    apply to what is parsed after the change."""
    ops: list = []
    for kind, data, flag in steps:
        ops += [("auth", flag)] if kind == "auth" else [("feed", data), ("next",)]
    both(ops)


@needs_compiled
@pytest.mark.parametrize("size", [32 * 1024 - 1, 32 * 1024, 100_000])
def test_a_big_bulk_arriving_in_many_reads_parses_alike(size):
    data = encode_request(b"SET", b"k", bytes(range(256)) * (size // 256) + b"x" * (size % 256))
    data += encode_request(b"PING")
    ops = pieces(data, list(range(7, len(data), 4093)))
    trace = both(ops, 512 * 1024 * 1024)
    assert [len(a[-1]) for a in argvs_of(trace)] == [size, 4]


@needs_compiled
@pytest.mark.parametrize("where", ["header", "payload", "cr", "lf", "after"])
@pytest.mark.parametrize("argc", [3, 1500])      # argv made at its size, or appended to
def test_a_big_bulk_received_in_place_parses_alike(where, argc):
    """The compiled parser receives a big bulk straight into its argument (start_big):
    the same argv and buffered() counts whichever read its header, payload, CR, LF or
    the next request's first bytes arrive in."""
    size = 200_000
    data = encode_request(b"SET", *[b"k"] * (argc - 2), b"v" * size) + encode_request(b"PING")
    payload_end = data.index(b"v" * size) + size
    cut = {"header": payload_end - size - 3, "payload": payload_end - 1000,
           "cr": payload_end, "lf": payload_end + 1, "after": payload_end + 5}[where]
    trace = both(pieces(data, [payload_end - size + 10, cut]), 512 * 1024 * 1024)
    assert [len(a) for a in argvs_of(trace)] == [argc, 1]


@needs_compiled
@pytest.mark.parametrize("declared", [2**40, 512 * 1024 * 1024 + 1])
def test_a_declared_length_past_what_is_received_in_place_allocates_nothing(declared):
    """A bulk longer than a receive in place may reserve (an AOF frame's parser allows
    2**62) waits in the buffer as any bytes do: no MemoryError from allocating its
    declared size, the same trace as the plain parser's, and a bulk cut short at the
    end of the input is still an incomplete request."""
    data = b"*2\r\n$4\r\nECHO\r\n$%d\r\n" % declared + b"x" * 100_000
    trace = both(pieces(data, [len(data) - 50_000]), 1 << 62)
    assert argvs_of(trace) == []


@needs_compiled
@pytest.mark.parametrize("data, message", [
    (b"*" + b"1" * 70000, "Protocol error: too big mbulk count string"),
    (b"*1\r\n$" + b"1" * 70000, "Protocol error: too big bulk count string"),
    (b"x" * 70000, "Protocol error: too big inline request"),
    (b"*1\r\n:1\r\n", "Protocol error: expected '$', got ':'"),
    (b"*1\r\n\r\n\r\n", "Protocol error: expected '$', got ' '"),
])
def test_limits_on_lines_without_an_end_fail_alike(data, message):
    trace = both([("feed", data), ("next",)])
    assert trace[-1][:2] == ("error", message)


# ---------------------------------------------------------------------------
# Reply encoder
# ---------------------------------------------------------------------------

text = st.one_of(st.text(max_size=10),
                 st.binary(max_size=10).map(lambda b: b.decode("utf-8", "surrogateescape")))
floats = st.floats(allow_nan=True, allow_infinity=True)
leaf = st.one_of(
    st.binary(max_size=12), st.integers(), st.integers(-2**70, 2**70), st.none(), st.booleans(),
    st.just(reply.NULL_ARRAY), st.just(reply.OK), text, text.map(reply.Status),
    floats, floats.map(reply.Double), st.binary(max_size=8).map(reply.Verbatim),
    st.binary(max_size=8).map(reply.Raw), text.map(reply.CommandError),
    st.sampled_from([object(), {1}, bytearray(b"x"), 1j]),      # not reply values
)
reply_value = st.recursive(leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.lists(inner, max_size=4).map(tuple),
    st.lists(st.tuples(inner, inner), max_size=3).map(reply.Map),
    st.lists(inner, max_size=4).map(reply.RSet),
    st.lists(inner, max_size=4).map(reply.Push),
), max_leaves=12)


def encoded(encode, value, resp3: bool):
    try:
        return encode(value, resp3)
    except Exception as e:  # noqa: BLE001 (the same failure is the expected behaviour)
        return type(e), str(e)


@needs_compiled
@settings(max_examples=1500, deadline=None)
@given(reply_value, st.booleans())
def test_replies_encode_to_the_same_bytes(value, resp3):
    assert encoded(_resp.encode_reply, value, resp3) == encoded(reply.encode_reply, value, resp3)


@needs_compiled
@pytest.mark.parametrize("value", [
    -2**63, 2**63 - 1, 2**63, -2**63 - 1, 0, -1, math.inf, -math.inf, 1e17, 0.1,
    reply.Map([(b"a", [reply.RSet([1]), None])]), reply.CommandError("ERR a\r\nb"),
    [b"x" * 100_000] * 3, [[[[]]]],
    reply.Push([b"message", b"ch", b"hi"]), reply.Push([b"unsubscribe", None, 0]), reply.Push([]),
])
def test_edge_replies_encode_alike(value):
    for resp3 in (False, True):
        assert _resp.encode_reply(value, resp3) == reply.encode_reply(value, resp3)


@needs_compiled
@settings(max_examples=500, deadline=None)
@given(st.lists(st.lists(st.binary(max_size=70), min_size=1, max_size=6), max_size=5))
def test_commands_encode_to_the_same_bytes(commands):
    assert _resp.encode_commands(commands) == reply.encode_commands(commands)
    assert reply.encode_commands(commands) == b"".join(reply.encode_reply(c, False) for c in commands)


MIB = 1024 * 1024


@needs_compiled
@pytest.mark.parametrize("value", [
    b"b" * (MIB - 31), b"b" * (MIB - 32), b"b" * (3 * MIB),          # a bulk sized at once
    [[b"1-1", [b"f", b"v" * (100 * MIB)]]],                          # an XRANGE of a 100 MB value
    [b"a" * (MIB - 300), b"b" * 200, b"c" * 200, 7, None],           # outgrows the C buffer
    [b"d" * (MIB // 2)] * 9 + [reply.Map([(b"k", 1.5)])],            # grows as a bytes object
    [b"e" * (2 * MIB), object()],                                    # fails once big
    [b"e" * 100, [b"x"] * 5000, object()],                           # fails while small
])
def test_big_replies_encode_alike(value):
    """Past 1 MiB the compiled encoder writes into the bytes object it returns
    (BIG_OUT in _resp.pyx): the same bytes, and the same error when a part fails."""
    for resp3 in (False, True):
        assert encoded(_resp.encode_reply, value, resp3) == encoded(reply.encode_reply, value, resp3)
    if all(type(v) is list for v in value):
        assert _resp.encode_commands(value) == reply.encode_commands(value)


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(reply_value, st.booleans())
def test_replies_in_pieces_encode_alike(value, resp3):
    """encode_reply_pieces gives encode_reply's bytes when no bulk is big (these values
    have none), whichever twin runs."""
    for v in (value, [value]):
        assert encoded(_resp.encode_reply_pieces, v, resp3) == encoded(reply.encode_reply, v, resp3)
        assert encoded(reply.encode_reply_pieces, v, resp3) == encoded(reply.encode_reply, v, resp3)


@needs_compiled
@pytest.mark.parametrize("value", [
    [[b"1-1", [b"f", b"v" * (100 * MIB)]]],                          # an XRANGE of a 100 MB value
    [b"a" * MIB, b"b" * MIB, b"c" * (MIB - 1), 7, [b"d" * MIB]],    # big ones side by side
    [reply.Map([(b"k", b"e" * MIB)]), b"f" * (2 * MIB)],
    [b"a" * MIB, object()],                                          # fails after a piece
    b"g" * (2 * MIB), (b"h" * (2 * MIB),),                           # not a list: bytes
])
def test_big_bulks_become_pieces_of_their_own_alike(value):
    """Each bulk of BIG_PIECE bytes or more in an array reply is a piece of its own,
    the value object itself; the pieces joined are encode_reply's bytes."""
    for resp3 in (False, True):
        plain = encoded(reply.encode_reply_pieces, value, resp3)
        compiled_pieces = encoded(_resp.encode_reply_pieces, value, resp3)
        assert compiled_pieces == plain
        whole = encoded(reply.encode_reply, value, resp3)
        if type(plain) is list:
            assert b"".join(plain) == whole
            payloads = compiled_pieces[1::2]       # (between the encoded runs)
            assert all(len(p) >= reply.BIG_PIECE and any(p is b for b in _bulks_of(value))
                       for p in payloads)
        else:
            assert plain == whole


def _bulks_of(value):
    if type(value) is bytes:
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _bulks_of(item)


@needs_compiled
def test_too_deep_a_reply_raises_recursion_error_not_a_crash():
    value: list = []
    for _ in range(100_000):
        value = [value]
    with pytest.raises(RecursionError):
        _resp.encode_reply(value, False)


@given(st.lists(st.lists(st.binary(max_size=40), min_size=1, max_size=8), min_size=1, max_size=5))
@settings(max_examples=300)
def test_effects_encode_as_requests(commands):
    """The AOF and replicas get effects encoded by the reply encoder (an array of bulk
    strings): byte for byte the request form a client sends."""
    from streamdb.protocol import encode_command, encode_commands
    for argv in commands:
        assert encode_command(argv) == encode_request(*argv)
    assert encode_commands(commands) == b"".join(encode_request(*a) for a in commands)
