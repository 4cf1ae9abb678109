"""Cross protocol scripting: an HTTP request sent to the server's port.

A web page can make a browser POST to 127.0.0.1:6379; before the fix the server
answered the request line and headers with unknown-command errors and then ran
the body as commands.  As Redis, a ``POST`` or ``Host:`` "command" (any case,
inline or multibulk) closes the connection at once, without a reply, and nothing
sent after it runs; the server logs Redis's warning (at most once a minute) and
goes on serving everyone else.
"""

from __future__ import annotations

import socket

import pytest
import redis

from helpers import ServerProcess, raw_exchange
from streamdb.protocol.request import encode_request

# Redis's text, word for word.
CROSS_PROTOCOL_WARNING = (
    "Possible SECURITY ATTACK detected. It looks like somebody is sending POST or Host: "
    "commands to Redis. This is likely due to an attacker attempting to use Cross Protocol "
    "Scripting to compromise your Redis instance. Connection aborted.")

BODY = b"XADD pwned * via browser\r\n"

BROWSER_POST = (b"POST / HTTP/1.1\r\n"
                b"Host: 127.0.0.1:6379\r\n"
                b"User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0\r\n"
                b"Accept: */*\r\n"
                b"Content-Type: text/plain;charset=UTF-8\r\n"
                b"Content-Length: %d\r\n"
                b"Origin: http://attacker.example\r\n"
                b"\r\n" % len(BODY)) + BODY

BROWSER_GET = (b"GET / HTTP/1.1\r\n"
               b"Host: localhost:6379\r\n"
               b"Accept: text/html\r\n"
               b"\r\n") + BODY


def _send_and_read_all(port: int, *writes: bytes) -> bytes:
    """Send each of ``writes`` (one sendall each), then read until the peer closes;
    returns what arrived.  Fails if the connection stays open."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        for data in writes:
            try:
                s.sendall(data)
            except (BrokenPipeError, ConnectionResetError):
                break           # already closed by the server: what we test
        got = b""
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break           # closed with our unread bytes still in its buffer
            except socket.timeout:
                pytest.fail(f"the connection stayed open (received {got!r})")
            if not chunk:
                break
            got += chunk
        return got


@pytest.fixture
def srv(tmp_path):
    with ServerProcess(tmp_path / "sdb", "--appendonly", "no", "--save", "") as s:
        yield s


def _warnings(srv) -> list[str]:
    return [line for line in srv.log_text().splitlines()
            if line.endswith(" # " + CROSS_PROTOCOL_WARNING)]


@pytest.mark.parametrize("request_bytes", [BROWSER_POST, BROWSER_GET], ids=["POST", "GET+Host"])
def test_browser_request_is_dropped_and_its_body_never_runs(srv, request_bytes):
    other = redis.Redis(port=srv.port)
    other.ping()                        # a client connected all along
    assert _send_and_read_all(srv.port, request_bytes) == b""
    assert other.exists("pwned") == 0
    assert other.xadd("s", {"f": "v"}, id="1-1") == b"1-1"   # still served
    assert redis.Redis(port=srv.port).ping()                # and new clients too
    assert len(_warnings(srv)) == 1


def test_headers_and_body_in_separate_writes(srv):
    head, _, body = BROWSER_POST.partition(b"\r\n\r\n")
    assert _send_and_read_all(srv.port, head + b"\r\n\r\n", body) == b""
    assert redis.Redis(port=srv.port).exists("pwned") == 0


@pytest.mark.parametrize("marker", [b"post", b"HOST:", b"Post /x", b"hOsT: a b"])
def test_any_case_inline_or_multibulk_and_what_follows_in_the_packet(srv, marker):
    """What came before runs (as in Redis) but gets no reply; nothing after runs, even
    XADDs the parser splits as one batch and the XADD fast path would defer."""
    multibulk = encode_request(*marker.split())
    for form in (marker + b"\r\n", multibulk):
        before = encode_request("XADD", "before", "*", "a", "1") * 3
        after = encode_request("XADD", "pwned", "*", "via", "browser") * 50
        after_same_key = encode_request("XADD", "before", "*", "a", "1") * 50
        got = _send_and_read_all(srv.port, b"PING\r\n" + before + form + after_same_key + after)
        assert got == b""
    r = redis.Redis(port=srv.port)
    assert r.exists("pwned") == 0
    assert r.xlen("before") == 6            # 3 per packet, none of the 50 after
    assert len(_warnings(srv)) == 1         # once a minute at most, as Redis


def test_checked_before_authentication(srv):
    # (set after start: the start-up probe pings without AUTH)
    redis.Redis(port=srv.port).config_set("requirepass", "secret")
    assert _send_and_read_all(srv.port, BROWSER_POST) == b""   # no -NOAUTH either
    r = redis.Redis(port=srv.port, password="secret")
    assert r.exists("pwned") == 0
    assert len(_warnings(srv)) == 1


def test_same_as_redis(srv, redis_server):
    """The same packets to redis-server 7.0: the same silence and the same keys."""
    packets = [BROWSER_POST, BROWSER_GET,
               b"PING\r\n" + encode_request("XADD", "k", "1-1", "a", "1") + b"host:\r\n"
               + encode_request("XADD", "k", "2-1", "a", "1"),
               b"MULTI\r\nPOST\r\nEXEC\r\n"]
    for port in (srv.port, redis_server.port):
        redis.Redis(port=port).flushall()
    for packet in packets:
        assert (_send_and_read_all(srv.port, packet)
                == _send_and_read_all(redis_server.port, packet) == b"")
    ours, theirs = redis.Redis(port=srv.port), redis.Redis(port=redis_server.port)
    for key in ("pwned", "k"):
        assert ours.exists(key) == theirs.exists(key)
    assert ours.xrange("k") == theirs.xrange("k") == [(b"1-1", {b"a": b"1"})]
    # Not commands (COMMAND INFO knows them not), as in Redis 7.
    command_info = encode_request("COMMAND", "INFO", "post", "host:")
    assert (raw_exchange(srv.port, command_info) == raw_exchange(redis_server.port, command_info)
            == b"*2\r\n$-1\r\n$-1\r\n")
