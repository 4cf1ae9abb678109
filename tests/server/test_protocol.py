"""The wire protocol, byte for byte, on StreamDB and on a real redis-server.

Every test runs against both servers (``peer`` is parametrised) and asserts
the exact bytes, so the expected bytes are Redis's own.  Malformed requests
get Redis's error text and then the connection is closed, after the replies
to the commands that came before them; other clients are not affected.
"""

from __future__ import annotations

import socket
import time

import pytest

from helpers import raw_exchange
from streamdb.protocol.request import encode_request as cmd

BIG = 536870912      # proto-max-bulk-len's default (512 MiB)


@pytest.fixture(params=["streamdb", "redis"])
def port(request, server):
    if request.param == "streamdb":
        return server.port
    return request.getfixturevalue("redis_server").port


def exchange(port: int, payload: bytes, wait: float = 0.3, chunks: int = 1) -> tuple[bytes, bool]:
    """Send ``payload`` (in ``chunks`` pieces, or byte by byte if chunks is 0).

    Returns (everything received, whether the server closed the connection).
    """
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if chunks == 0:
            for i in range(len(payload)):
                s.sendall(payload[i:i + 1])
        else:
            step = max(1, -(-len(payload) // chunks))
            for i in range(0, len(payload), step):
                s.sendall(payload[i:i + step])
                time.sleep(0.005)
        s.settimeout(wait)
        got = b""
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                data = s.recv(65536)
            except socket.timeout:
                return got, False
            if not data:
                return got, True
            got += data
        return got, False


# -- well-formed requests -----------------------------------------------------------


def test_pipelined_commands_get_replies_in_order(port):
    payload = (cmd("DEL", "proto:s") + cmd("XADD", "proto:s", "1-1", "f", "v") +
               cmd("XLEN", "proto:s") + b"PING\r\n" + cmd("XRANGE", "proto:s", "-", "+") +
               cmd("GET", "proto:nokey") + cmd("DEL", "proto:s"))
    expected = (b":0\r\n$3\r\n1-1\r\n:1\r\n+PONG\r\n"
                b"*1\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n$-1\r\n:1\r\n")
    assert exchange(port, payload) == (expected, False)
    # The same bytes one at a time: the server waits for whole requests.
    assert exchange(port, payload, chunks=0) == (expected, False)


def test_many_pipelined_requests(port):
    payload = cmd("PING") * 500 + cmd("ECHO", "x" * 3000) * 50
    got, closed = exchange(port, payload, wait=1.0)
    assert not closed
    assert got == b"+PONG\r\n" * 500 + b"$3000\r\n" + b"x" * 3000 + b"\r\n" * 1 + \
        (b"$3000\r\n" + b"x" * 3000 + b"\r\n") * 49


@pytest.mark.parametrize("request_bytes, reply", [
    (b"PING\r\n", b"+PONG\r\n"),
    (b"PING\n", b"+PONG\r\n"),
    (b"ping hello\r\n", b"$5\r\nhello\r\n"),
    (b"\r\n\r\n   \r\nPING\r\n", b"+PONG\r\n"),             # blank lines are skipped
    (b"ECHO \"a b\"\r\n", b"$3\r\na b\r\n"),
    (b"ECHO 'a b'\r\n", b"$3\r\na b\r\n"),
    (b"ECHO \"a\\x41\\n\\t\"\r\n", b"$4\r\naA\n\t\r\n"),     # escapes inside double quotes
    (b"ECHO \"\\xZZ\"\r\n", b"$3\r\nxZZ\r\n"),                # not a hex escape
    (b"ECHO 'it\\'s'\r\n", b"$4\r\nit's\r\n"),
    (b"ECHO \"\"\r\n", b"$0\r\n\r\n"),
    (b"ECHO ab\"c d\"\r\n", b"$5\r\nabc d\r\n"),              # a quote inside a word opens quoting
    (b"ECHO \"a\" 'b'\r\n", b"-ERR wrong number of arguments for 'echo' command\r\n"),
    (b"PI\rNG\r\n", b"-ERR unknown command 'PI', with args beginning with: 'NG' \r\n"),
    (b"*-1\r\n*0\r\n*-5\r\nPING\r\n", b"+PONG\r\n"),          # empty and null requests are skipped
    (b"*1\r\n$4\r\nPINGxx*1\r\n$4\r\nPING\r\n", b"+PONG\r\n+PONG\r\n"),   # CRLF after a bulk is not checked
    (b"*1\r\n$4\rXPING\r\n", b"+PONG\r\n"),                    # nor the byte after '\r'
    (b"*2\r\n$4\r\nECHO\r\n$3\r\na\x00b\r\n", b"$3\r\na\x00b\r\n"),
])
def test_inline_and_multibulk_requests(port, request_bytes, reply):
    assert exchange(port, request_bytes) == (reply, False)


def test_incomplete_requests_wait(port):
    for partial in (b"PING", b"*1\r\n$4\r\nPIN", b"*1\r\n$4\r\nPING\r", b"*2\r\n$4\r\nECHO\r\n",
                    b"*1\r\n$%d\r\n" % BIG,                 # the limit itself is allowed
                    b"ECHO a\x00b\r\nPING\r\n",             # a NUL hides the newline (C strings)
                    b"*1\x00\r\n", b"*1\r\n$4\x00\r\nPING\r\n"):
        assert exchange(port, partial, wait=0.2) == (b"", False), partial


def test_unknown_command_and_arity_errors(port):
    payload = (cmd("NOSUCHCMD", "a", "b c") + cmd("nosuch") + cmd("") + cmd("XADD", "k") +
               cmd("xlen") + cmd("XRANGE", "k", "-") + cmd("GET", "a", "b") +
               cmd("XREAD", "STREAMS", "k") + cmd("PING", "a", "b"))
    expected = (b"-ERR unknown command 'NOSUCHCMD', with args beginning with: 'a' 'b c' \r\n"
                b"-ERR unknown command 'nosuch', with args beginning with: \r\n"
                b"-ERR unknown command '', with args beginning with: \r\n"
                b"-ERR wrong number of arguments for 'xadd' command\r\n"
                b"-ERR wrong number of arguments for 'xlen' command\r\n"
                b"-ERR wrong number of arguments for 'xrange' command\r\n"
                b"-ERR wrong number of arguments for 'get' command\r\n"
                b"-ERR wrong number of arguments for 'xread' command\r\n"
                b"-ERR wrong number of arguments for 'ping' command\r\n")
    assert exchange(port, payload) == (expected, False)


def test_unknown_command_error_truncates_long_arguments(port):
    got, _ = exchange(port, cmd("NOPE", "x" * 300))
    assert got == b"-ERR unknown command 'NOPE', with args beginning with: '" + b"x" * 128 + b"' \r\n"


# -- malformed requests: error, then the connection is closed ---------------------------


@pytest.mark.parametrize("request_bytes, error", [
    (b"*abc\r\n", b"invalid multibulk length"),
    (b"*01\r\n", b"invalid multibulk length"),
    (b"*-0\r\n", b"invalid multibulk length"),
    (b"*+1\r\n", b"invalid multibulk length"),
    (b"*1\n$4\r\nPING\r\n", b"invalid multibulk length"),
    (b"*3000000000\r\n", b"invalid multibulk length"),
    (b"*1\r\n$-5\r\n", b"invalid bulk length"),
    (b"*1\r\n$-0\r\n", b"invalid bulk length"),
    (b"*1\r\n$01\r\na\r\n", b"invalid bulk length"),
    (b"*1\r\n$ 4\r\nPING\r\n", b"invalid bulk length"),
    (b"*1\r\n$x\r\n", b"invalid bulk length"),
    (b"*1\r\n$%d\r\n" % (BIG + 1), b"invalid bulk length"),
    (b"*1\r\n$9223372036854775808\r\n", b"invalid bulk length"),
    (b"*1\r\n:5\r\n", b"expected '$', got ':'"),
    (b"*1\r\n*1\r\n", b"expected '$', got '*'"),
    (b"*2\r\n$4\r\nECHO\r\n+x\r\n", b"expected '$', got '+'"),
    (b"*1\r\n\r\n", b"expected '$', got ' '"),               # CR shown as a space
    (b"ECHO \"abc\r\n", b"unbalanced quotes in request"),
    (b"ECHO 'abc\r\n", b"unbalanced quotes in request"),
    (b"ECHO \"abc\"x\r\n", b"unbalanced quotes in request"),
    (b"ECHO \"abc\\\"\r\n", b"unbalanced quotes in request"),
    (b"*" + b"1" * 70000, b"too big mbulk count string"),
    (b"*1\r\n$" + b"1" * 70000, b"too big bulk count string"),
    (b"PING " + b"a" * 70000, b"too big inline request"),
])
def test_malformed_request_gets_error_and_close(port, request_bytes, error):
    got, closed = exchange(port, request_bytes, wait=2.0)
    assert got == b"-ERR Protocol error: " + error + b"\r\n"
    assert closed


def test_commands_before_a_protocol_error_are_answered(port):
    payload = cmd("PING") + b"PING\r\n" + b"*1\r\n:5\r\n" + cmd("PING")
    got, closed = exchange(port, payload, wait=2.0)
    assert got == b"+PONG\r\n+PONG\r\n-ERR Protocol error: expected '$', got ':'\r\n"
    assert closed


def test_protocol_error_closes_only_that_connection(port):
    with socket.create_connection(("127.0.0.1", port), timeout=2) as other:
        other.sendall(cmd("PING"))
        assert other.recv(100) == b"+PONG\r\n"
        got, closed = exchange(port, b"*1\r\n$-5\r\n", wait=2.0)
        assert closed and got == b"-ERR Protocol error: invalid bulk length\r\n"
        other.sendall(cmd("ECHO", "still here"))
        assert other.recv(100) == b"$10\r\nstill here\r\n"


def test_protocol_error_quotes_a_non_ascii_byte_raw(server):
    got, closed = exchange(server.port, b"*1\r\n\xff\r\n", wait=2.0)
    assert got == b"-ERR Protocol error: expected '$', got '\xff'\r\n"


def test_protocol_error_quotes_a_non_ascii_byte_raw_on_redis(redis_server):
    got, closed = exchange(redis_server.port, b"*1\r\n\xff\r\n", wait=2.0)
    assert got == b"-ERR Protocol error: expected '$', got '\xff'\r\n" and closed


# -- RESP3 ----------------------------------------------------------------------------


def test_resp3_nulls_and_maps(port):
    got, _ = exchange(port, cmd("DEL", "proto:r3") + cmd("XADD", "proto:r3", "1-1", "f", "v"))
    assert got.endswith(b"$3\r\n1-1\r\n")
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(cmd("HELLO", "3"))
        time.sleep(0.2)
        hello = s.recv(65536)
        assert hello.startswith(b"%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n")
        assert b"$5\r\nproto\r\n:3\r\n" in hello
        s.sendall(cmd("GET", "proto:nokey") + cmd("XRANGE", "proto:r3", "-", "+", "COUNT", "0") +
                  cmd("XREAD", "STREAMS", "proto:r3", "1-1") +
                  cmd("XREAD", "STREAMS", "proto:r3", "0") +
                  cmd("XADD", "proto:nokey", "NOMKSTREAM", "*", "f", "v") +
                  cmd("DEL", "proto:r3"))
        expected = (b"_\r\n_\r\n_\r\n"
                    b"%1\r\n$8\r\nproto:r3\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n"
                    b"_\r\n:1\r\n")
        got = b""
        deadline = time.monotonic() + 2
        while len(got) < len(expected) and time.monotonic() < deadline:
            got += s.recv(65536)
        assert got == expected


def test_resp2_null_shapes(port):
    payload = (cmd("DEL", "proto:r2") + cmd("XADD", "proto:r2", "1-1", "f", "v") +
               cmd("XRANGE", "proto:r2", "-", "+", "COUNT", "0") +
               cmd("XREAD", "STREAMS", "proto:r2", "1-1") + cmd("GET", "proto:nokey") +
               cmd("XADD", "proto:nokey", "NOMKSTREAM", "*", "f", "v") + cmd("DEL", "proto:r2"))
    got, _ = exchange(port, payload)
    assert got.endswith(b"$3\r\n1-1\r\n*-1\r\n*-1\r\n$-1\r\n$-1\r\n:1\r\n")


def test_hello_with_bad_version(port):
    got, _ = exchange(port, cmd("HELLO", "4") + cmd("HELLO", "x") + cmd("PING"))
    assert got == (b"-NOPROTO unsupported protocol version\r\n"
                   b"-ERR Protocol version is not an integer or out of range\r\n+PONG\r\n")


def test_raw_exchange_helper_sees_the_reply(server):
    assert raw_exchange(server.port, b"PING\r\n") == b"+PONG\r\n"


def test_requests_pipelined_behind_a_blocked_xread_wait_for_it(port):
    payload = cmd("XREAD", "BLOCK", "100", "STREAMS", "proto:blk", "$") + cmd("PING")
    assert exchange(port, payload, wait=0.6) == (b"*-1\r\n+PONG\r\n", False)


def test_transaction_replies(port):
    payload = (cmd("DEL", "proto:tx") + cmd("MULTI") + cmd("XADD", "proto:tx", "1-1", "f", "v") +
               cmd("XADD", "proto:tx", "0-0", "f", "v") + cmd("XLEN", "proto:tx") + cmd("EXEC") +
               cmd("MULTI") + cmd("XADD", "proto:tx", "2-1", "f") + cmd("EXEC") + cmd("DEL", "proto:tx"))
    got, _ = exchange(port, payload)
    assert got == (b":0\r\n+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n"
                   b"*3\r\n$3\r\n1-1\r\n-ERR The ID specified in XADD must be greater than 0-0\r\n:1\r\n"
                   b"+OK\r\n-ERR wrong number of arguments for 'xadd' command\r\n"
                   b"-EXECABORT Transaction discarded because of previous errors.\r\n:1\r\n")


def test_unknown_command_quotes_at_most_128_bytes_of_arguments(port):
    got, _ = exchange(port, cmd("NOPE", "a" * 100, "b" * 100, "c") + cmd("NOPE", *["abcdefghij"] * 20))
    assert got == (b"-ERR unknown command 'NOPE', with args beginning with: '" + b"a" * 100 + b"' '" +
                   b"b" * 25 + b"' \r\n"
                   b"-ERR unknown command 'NOPE', with args beginning with: " +
                   b"'abcdefghij' " * 10 + b"\r\n")


def test_error_replies_quote_client_bytes_raw(port):
    # Up to a NUL (Redis formats C strings), CR/LF as spaces, other bytes as sent.
    payload = (cmd(b"NOPE", b"a\x00b", b"c\r\nd") + cmd(b"NOPE", b"\xff\xfe") +
               cmd(b"CONFIG", b"\xffa\x00z"))
    got, _ = exchange(port, payload)
    assert got == (b"-ERR unknown command 'NOPE', with args beginning with: 'a' 'c  d' \r\n"
                   b"-ERR unknown command 'NOPE', with args beginning with: '\xff\xfe' \r\n"
                   b"-ERR unknown subcommand '\xffa'. Try CONFIG HELP.\r\n")


def test_big_values_go_in_and_out_whole_among_pipelined_requests(port):
    """Bulks of megabytes arriving in pieces (the parser receives them in place) and sent
    back in replies with them and around them (the request loop writes a big payload as a
    piece of its own): the same bytes as Redis, in order."""
    key = b"bigvalue-%d" % time.monotonic_ns()
    one, two = bytes(range(256)) * 12289, b"2" * (3 << 20)         # ~3 MB each
    payload = (cmd(b"PING") + cmd(b"XADD", key, b"1-1", b"f", one) + cmd(b"XRANGE", key, b"-", b"+")
               + cmd(b"XADD", key, b"2-1", b"f", two, b"g", one) + cmd(b"XRANGE", key, b"2", b"+")
               + cmd(b"DEL", key) + cmd(b"PING"))

    def entry(sid: bytes, *fields: bytes) -> bytes:
        return (b"*2\r\n$%d\r\n%s\r\n*%d\r\n" % (len(sid), sid, len(fields))
                + b"".join(b"$%d\r\n%s\r\n" % (len(f), f) for f in fields))

    got, closed = exchange(port, payload, wait=2.0, chunks=7)
    assert not closed
    assert got == (b"+PONG\r\n$3\r\n1-1\r\n" + b"*1\r\n" + entry(b"1-1", b"f", one)
                   + b"$3\r\n2-1\r\n" + b"*1\r\n" + entry(b"2-1", b"f", two, b"g", one)
                   + b":1\r\n+PONG\r\n")
