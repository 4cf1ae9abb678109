"""Pub/Sub against a real server: redis-py's PubSub (RESP2 and RESP3) and raw RESP.

What Redis Sentinel needs of a node (SUBSCRIBE __sentinel__:hello on one link,
PUBLISH on the other), the RESP2 subscribed-mode rules, RESP3 pushes, and what
tells an operator about subscribers: CLIENT LIST, CLIENT KILL TYPE pubsub, INFO,
and the pubsub class of client-output-buffer-limit.
"""

from __future__ import annotations

import socket
import subprocess

import pytest
import redis

from differential.resp import Err, Null, RawClient, Status
from docblocks import run_block
from helpers import RedisProcess, ServerProcess, wait_until
from streamdb.cli.procs import free_port, wait_until_ready

DOC_BLOCKS = {"README.md": {"pubsub"}}

SUBSCRIBED_MODE = ("ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / "
                   "QUIT / RESET are allowed in this context")


@pytest.fixture
def raw(server):
    clients = []

    def connect(resp3: bool = False) -> RawClient:
        c = RawClient(server.port)
        if resp3:
            c.call("HELLO", "3")
        clients.append(c)
        return c
    yield connect
    for c in clients:
        c.close()


def _numsub(port: int, channel: str) -> int:
    c = RawClient(port)
    try:
        return c.call("PUBSUB", "NUMSUB", channel)[1]
    finally:
        c.close()


def test_sentinel_hello_exchange_with_redis_py(server):
    """Sentinel's pattern: one connection subscribes to __sentinel__:hello, another publishes."""
    sub = redis.Redis(port=server.port)
    pub = redis.Redis(port=server.port)
    ps = sub.pubsub()
    ps.subscribe("__sentinel__:hello")
    assert ps.get_message(timeout=5) == {"type": "subscribe", "pattern": None,
                                         "channel": b"__sentinel__:hello", "data": 1}
    hello = b"127.0.0.1,26379,abc,0,mymaster,127.0.0.1,6379,0"
    assert pub.publish("__sentinel__:hello", hello) == 1
    assert ps.get_message(timeout=5) == {"type": "message", "pattern": None,
                                         "channel": b"__sentinel__:hello", "data": hello}
    ps.psubscribe("__sentinel__:*")
    assert ps.get_message(timeout=5)["data"] == 2
    assert pub.publish("__sentinel__:hello", b"again") == 2
    got = [ps.get_message(timeout=5) for _ in range(2)]
    assert [(m["type"], m["pattern"]) for m in got] == [("message", None),
                                                       ("pmessage", b"__sentinel__:*")]
    ps.close()
    sub.close()
    wait_until(lambda: pub.pubsub_numsub("__sentinel__:hello") == [(b"__sentinel__:hello", 0)],
               what="the closed subscriber's subscription to go")
    assert pub.publish("__sentinel__:hello", b"nobody") == 0
    pub.close()


def test_the_readme_pubsub_block(server, tmp_path):
    out = run_block("README.md", "pubsub", cwd=tmp_path, ports={6379: server.port})
    assert out.splitlines() == ["1", "subscribe", "news", "1", "message", "news", "hello"]


def test_resp3_subscriber_gets_pushes_with_redis_py(server):
    sub = redis.Redis(port=server.port, protocol=3)
    pub = redis.Redis(port=server.port)
    ps = sub.pubsub()
    ps.subscribe("news")
    assert ps.get_message(timeout=5)["type"] == "subscribe"
    assert pub.publish("news", b"hi") == 1
    assert ps.get_message(timeout=5)["data"] == b"hi"
    ps.close()
    sub.close()
    pub.close()


def test_resp2_subscribed_mode_allows_only_the_pubsub_commands(raw):
    c = raw()
    assert c.call("SUBSCRIBE", "a") == [b"subscribe", b"a", 1]
    assert c.call("GET", "k") == Err(SUBSCRIBED_MODE.format("get"))
    assert c.call("CLIENT", "LIST") == Err(SUBSCRIBED_MODE.format("client|list"))
    assert c.call("MULTI") == Err(SUBSCRIBED_MODE.format("multi"))
    # The command's own errors come first, as in Redis.
    assert c.call("GET") == Err("ERR wrong number of arguments for 'get' command")
    assert c.call("PING") == [b"pong", b""]
    assert c.call("PING", "hey") == [b"pong", b"hey"]
    assert c.call("PSUBSCRIBE", "x*") == [b"psubscribe", b"x*", 2]
    assert c.call("UNSUBSCRIBE", "a") == [b"unsubscribe", b"a", 1]
    assert c.call("GET", "k") == Err(SUBSCRIBED_MODE.format("get"))   # a pattern is left
    assert c.call("PUNSUBSCRIBE") == [b"punsubscribe", b"x*", 0]
    assert c.call("GET", "pubsub:absent") is Null
    assert c.call("PING") == Status("PONG")


def test_resp3_subscriber_runs_anything_and_gets_its_own_message_first(raw):
    c = raw(resp3=True)
    assert c.call("SUBSCRIBE", "me") == ("push", [b"subscribe", b"me", 1])
    assert c.call("SET", "k", "v") == Status("OK")
    assert c.call("PING") == Status("PONG")
    # PUBLISH to its own channel: the push is queued before PUBLISH's reply, as in Redis.
    c.sock.sendall(b"*3\r\n$7\r\nPUBLISH\r\n$2\r\nme\r\n$1\r\nx\r\n")
    assert c.read_reply() == ("push", [b"message", b"me", b"x"])
    assert c.read_reply() == 1
    assert c.call("UNSUBSCRIBE") == ("push", [b"unsubscribe", b"me", 0])
    assert c.call("UNSUBSCRIBE") == ("push", [b"unsubscribe", Null, 0])


def test_confirmations_are_one_reply_per_name_with_counts(raw):
    c = raw()
    c.sock.sendall(b"*3\r\n$9\r\nSUBSCRIBE\r\n$1\r\na\r\n$1\r\nb\r\n")
    assert [c.read_reply() for _ in range(2)] == [[b"subscribe", b"a", 1], [b"subscribe", b"b", 2]]
    assert c.call("SUBSCRIBE", "a") == [b"subscribe", b"a", 2]          # already: same count
    assert c.call("SSUBSCRIBE", "s") == [b"ssubscribe", b"s", 1]        # shard: its own count
    assert c.call("SUNSUBSCRIBE", "nope") == [b"sunsubscribe", b"nope", 1]
    c.sock.sendall(b"*1\r\n$11\r\nUNSUBSCRIBE\r\n")
    assert [c.read_reply() for _ in range(2)] == [[b"unsubscribe", b"a", 1],
                                                 [b"unsubscribe", b"b", 0]]
    assert c.call("GET", "k") == Err(SUBSCRIBED_MODE.format("get"))   # the shard channel is left
    assert c.call("SUNSUBSCRIBE") == [b"sunsubscribe", b"s", 0]
    assert c.call("SUNSUBSCRIBE") == [b"sunsubscribe", Null, 0]
    assert c.call("PUNSUBSCRIBE") == [b"punsubscribe", Null, 0]


def test_publish_counts_deliveries_and_patterns_match_as_redis(raw, server):
    sub, patterns, pub = raw(), raw(), raw()
    sub.call("SUBSCRIBE", "h[a]llo")
    patterns.call("PSUBSCRIBE", "h[^e]llo")
    assert patterns.call("PSUBSCRIBE", "h\\[a]llo") == [b"psubscribe", b"h\\[a]llo", 2]
    assert pub.call("PUBLISH", "hallo", "1") == 1        # h[^e]llo only
    assert patterns.read_reply() == [b"pmessage", b"h[^e]llo", b"hallo", b"1"]
    assert pub.call("PUBLISH", "h[a]llo", "2") == 2      # the channel, and the escaped pattern
    assert sub.read_reply() == [b"message", b"h[a]llo", b"2"]
    assert patterns.read_reply() == [b"pmessage", b"h\\[a]llo", b"h[a]llo", b"2"]
    assert pub.call("PUBLISH", "hello", "3") == 0
    assert pub.call("SPUBLISH", "hallo", "4") == 0       # no pattern applies to shard channels
    assert pub.call("PUBSUB", "NUMPAT") == 2
    assert pub.call("PUBSUB", "CHANNELS", "h?a*") == [b"h[a]llo"]
    assert pub.call("PUBSUB", "CHANNELS", "a", "b") == Err(
        "ERR unknown subcommand or wrong number of arguments for 'CHANNELS'. Try PUBSUB HELP.")


def test_reset_and_close_drop_every_subscription(raw, server):
    c = raw()
    c.call("SUBSCRIBE", "gone")
    c.call("PSUBSCRIBE", "g*")
    assert c.call("RESET") == Status("RESET")
    assert _numsub(server.port, "gone") == 0
    assert c.call("GET", "pubsub:absent") is Null                     # out of subscribed mode
    s = socket.create_connection(("127.0.0.1", server.port))
    s.sendall(b"*2\r\n$9\r\nSUBSCRIBE\r\n$4\r\ngone\r\n")
    wait_until(lambda: _numsub(server.port, "gone") == 1, what="the subscription")
    s.close()
    wait_until(lambda: _numsub(server.port, "gone") == 0, what="the closed client to go")
    assert c.call("PUBSUB", "NUMPAT") == 0


def test_client_list_and_kill_and_info_see_subscribers(raw):
    sub, admin = raw(), raw()
    sub.call("CLIENT", "SETNAME", "listener")
    sub.call("SUBSCRIBE", "a", "b")
    sub.read_reply()
    sub.call("PSUBSCRIBE", "p*")
    sub.call("SSUBSCRIBE", "s")
    lines = admin.call("CLIENT", "LIST", "TYPE", "pubsub").decode().splitlines()
    assert len(lines) == 1 and "name=listener" in lines[0]
    fields = dict(f.split("=", 1) for f in lines[0].split(" "))
    assert (fields["flags"], fields["sub"], fields["psub"], fields["ssub"]) == ("P", "2", "1", "1")
    assert b"name=listener" not in admin.call("CLIENT", "LIST", "TYPE", "normal")
    info = dict(line.split(":", 1) for line in admin.call("INFO", "stats").decode().splitlines()
                if line.startswith("pubsub"))
    assert info == {"pubsub_channels": "2", "pubsub_patterns": "1", "pubsubshard_channels": "1"}
    assert admin.call("CLIENT", "KILL", "TYPE", "pubsub") == 1
    with pytest.raises(ConnectionError):
        sub.read_reply()


def test_pubsub_output_buffer_limit_drops_a_slow_subscriber(tmp_path):
    """A subscriber that stops reading is dropped by the pubsub class's limit (the normal
    class has none): Redis's protection of the server's memory from slow listeners."""
    with ServerProcess(tmp_path / "sdb", "--appendonly", "no", "--save", "",
                       "--client-output-buffer-limit", "pubsub 256kb 0 0") as srv:
        slow = socket.create_connection(("127.0.0.1", srv.port))
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.sendall(b"*2\r\n$9\r\nSUBSCRIBE\r\n$4\r\nfeed\r\n")
        pub = RawClient(srv.port)
        wait_until(lambda: pub.call("PUBSUB", "NUMSUB", "feed")[1] == 1, what="the subscriber")
        big = b"x" * 64 * 1024
        # Unread, the socket buffers fill and the rest waits in the server until the limit.
        wait_until(lambda: pub.call("PUBLISH", "feed", big) == 0, what="the slow subscriber dropped")
        stats = pub.call("INFO", "stats").decode()
        assert "client_output_buffer_limit_disconnections:1" in stats
        assert "overcoming of output buffer limits" in srv.log_text()
        pub.close()
        slow.close()


def test_pubsub_help_and_errors(raw):
    c = raw()
    assert c.call("PUBSUB", "HELP")[0] == Status("PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:")
    assert c.call("PUBSUB", "nope") == Err("ERR unknown subcommand 'nope'. Try PUBSUB HELP.")
    assert c.call("PUBSUB", "NUMPAT", "x") == Err("ERR wrong number of arguments for 'pubsub|numpat' command")
    assert c.call("PUBLISH", "a") == Err("ERR wrong number of arguments for 'publish' command")
    assert c.call("SUBSCRIBE") == Err("ERR wrong number of arguments for 'subscribe' command")


def test_a_real_sentinel_talks_to_the_server_over_pubsub(server, tmp_path):
    """redis-server --sentinel monitoring StreamDB: its pubsub link subscribes to
    __sentinel__:hello and stays up, and the hellos it PUBLISHes reach our subscriber."""
    if not RedisProcess.available():
        pytest.skip("redis-server is not installed (make test installs it)")
    port = free_port()
    conf = tmp_path / "sentinel.conf"
    conf.write_text(f"port {port}\nbind 127.0.0.1\ndir {tmp_path}\n"
                    f"sentinel monitor mymaster 127.0.0.1 {server.port} 1\n")
    listener = redis.Redis(port=server.port).pubsub()
    listener.subscribe("__sentinel__:hello")
    with open(tmp_path / "sentinel.log", "wb") as log:
        sentinel = subprocess.Popen(["redis-server", str(conf), "--sentinel"], stdout=log,
                                    stderr=subprocess.STDOUT)
    try:
        wait_until_ready(port, sentinel)
        s = redis.Redis(port=port)
        wait_until(lambda: _numsub(server.port, "__sentinel__:hello") == 2,
                   what="Sentinel's pubsub link to subscribe")
        sentinel_id = s.execute_command("SENTINEL", "MYID")

        def hello():
            m = listener.get_message(timeout=0.5)
            return m if m and m["type"] == "message" and sentinel_id in m["data"] else None
        msg = wait_until(hello, what="a hello published by Sentinel")
        assert msg["data"].split(b",")[5:7] == [b"127.0.0.1", str(server.port).encode()]
        master = s.execute_command("SENTINEL", "MASTER", "mymaster")
        flags = (master if isinstance(master, dict) else dict(zip(master[::2], master[1::2])))[b"flags"]
        assert flags == b"master"          # no "disconnected": both its links are up
    finally:
        sentinel.terminate()
        sentinel.wait(timeout=10)
        listener.close()
