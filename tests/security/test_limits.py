"""Resource limits on a real server: maxclients, timeout, client-output-buffer-limit,
client-query-buffer-limit, proto-max-bulk-len, maxmemory (noeviction) and the
consumer-group caps.  maxmemory replies are compared with a real redis-server.
"""

from __future__ import annotations

import socket
import time

import pytest
import redis

from helpers import RedisProcess, ServerProcess, wait_until


_wait_for = wait_until


def _closed_by_peer(sock: socket.socket, seconds: float = 10.0) -> bool:
    """Read (and drop) whatever arrives until the server closes the connection."""
    sock.settimeout(0.2)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            data = sock.recv(1 << 20)
        except socket.timeout:
            continue
        except ConnectionResetError:
            return True
        if not data:
            return True
    return False


@pytest.fixture
def srv(tmp_path):
    with ServerProcess(tmp_path, "--appendonly", "no", "--save", "") as s:
        yield s


def test_maxclients_refuses_the_client_past_the_limit(tmp_path):
    with ServerProcess(tmp_path, "--appendonly", "no", "--save", "", "--maxclients", "2") as s:
        first = redis.Redis(port=s.port)
        second = redis.Redis(port=s.port)
        assert first.ping() and second.ping()
        with socket.create_connection(("127.0.0.1", s.port), timeout=5) as extra:
            # Nothing sent: data unread by a closing server would turn its FIN into a reset.
            got = b""
            while True:
                chunk = extra.recv(1024)
                if not chunk:
                    break
                got += chunk
        assert got == b"-ERR max number of clients reached\r\n"
        assert first.info("stats")["rejected_connections"] == 1
        assert len(first.client_list()) == 2


def test_idle_clients_are_closed_but_not_blocked_ones(srv):
    r = redis.Redis(port=srv.port)
    r.config_set("timeout", 1)
    blocked = redis.Redis(port=srv.port, socket_timeout=30)
    blocked_id = blocked.client_id()
    pool = __import__("concurrent.futures").futures.ThreadPoolExecutor(1)
    waiting = pool.submit(blocked.xread, {"idle:s": "$"}, block=0)
    _wait_for(lambda: r.info("clients")["blocked_clients"] == 1, what="the blocked client")
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as idle:
        idle.sendall(b"CLIENT ID\r\n")
        idle_id = int(idle.recv(100)[1:].strip())
        assert _closed_by_peer(idle), "the idle client was not closed"
    ids = {int(c["id"]) for c in r.client_list()}
    assert idle_id not in ids and blocked_id in ids
    r.xadd("idle:s", {"f": "v"})
    assert waiting.result(timeout=10)[0][0] == b"idle:s"
    pool.shutdown()


def test_output_buffer_hard_limit_drops_a_client_that_never_reads(srv):
    r = redis.Redis(port=srv.port)
    payload = "x" * 1000
    pipe = r.pipeline(transaction=False)
    for i in range(2000):
        pipe.xadd("obuf:s", {"f": payload})
    pipe.execute()                                   # about 2 MB per full XRANGE
    r.config_set("client-output-buffer-limit", "normal 4mb 0 0")
    assert r.config_get("client-output-buffer-limit")["client-output-buffer-limit"].startswith(
        "normal 4194304 0 0 slave ")
    reader = socket.socket()
    reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    reader.connect(("127.0.0.1", srv.port))
    with reader:
        request = b"*4\r\n$6\r\nXRANGE\r\n$6\r\nobuf:s\r\n$1\r\n-\r\n$1\r\n+\r\n"
        reader.settimeout(10)
        dropped = False
        for _ in range(100):                          # up to 200 MB asked for, none read
            try:
                reader.sendall(request)
            except (BrokenPipeError, ConnectionResetError):
                dropped = True
                break
            if r.info("stats")["client_output_buffer_limit_disconnections"]:
                dropped = True
                break
            time.sleep(0.01)
        assert dropped
    assert r.info("stats")["client_output_buffer_limit_disconnections"] == 1
    assert "scheduled to be closed ASAP for overcoming of output buffer limits." in srv.log_text()
    assert r.xlen("obuf:s") == 2000                   # the server and other clients go on


def test_pending_output_shows_in_client_list_and_info(srv):
    r = redis.Redis(port=srv.port)
    pipe = r.pipeline(transaction=False)
    for _ in range(1000):
        pipe.xadd("omem:s", {"f": "y" * 1000})
    pipe.execute()
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.connect(("127.0.0.1", srv.port))
    with slow:
        slow.sendall(b"CLIENT SETNAME slow\r\n" +
                     b"*4\r\n$6\r\nXRANGE\r\n$6\r\nomem:s\r\n$1\r\n-\r\n$1\r\n+\r\n" * 30)

        def slow_omem():
            for c in r.client_list():
                if c["name"] == "slow" and int(c["omem"]) > 1_000_000:
                    return int(c["omem"])
            return 0
        omem = _wait_for(slow_omem, what="pending output in CLIENT LIST")
        assert r.info("clients")["client_recent_max_output_buffer"] >= omem
        # normal 0 0 0 (the default): no limit, nothing dropped.
        assert r.info("stats")["client_output_buffer_limit_disconnections"] == 0


def test_client_output_buffer_limit_config_errors_match_redis(srv):
    r = redis.Redis(port=srv.port)
    with pytest.raises(redis.ResponseError, match="Wrong number of arguments in buffer limit configuration."):
        r.config_set("client-output-buffer-limit", "normal 1mb")
    with pytest.raises(redis.ResponseError, match="Invalid client class specified in buffer limit configuration."):
        r.config_set("client-output-buffer-limit", "foo 1 2 3")
    r.config_set("client-output-buffer-limit", "replica 1mb 512kb 10")
    assert r.config_get("client-output-buffer-limit")["client-output-buffer-limit"] == \
        "normal 0 0 0 slave 1048576 524288 10 pubsub 33554432 8388608 60"


def test_query_buffer_limit_and_proto_max_bulk_len(srv):
    r = redis.Redis(port=srv.port)
    r.config_set("proto-max-bulk-len", "1mb")
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
        s.sendall(b"*2\r\n$4\r\nECHO\r\n$2000000\r\n")
        assert s.recv(1000) == b"-ERR Protocol error: invalid bulk length\r\n"
    r.config_set("proto-max-bulk-len", "512mb", "client-query-buffer-limit", "1mb")
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
        s.sendall(b"*2\r\n$4\r\nECHO\r\n$3000000\r\n")
        try:
            s.sendall(b"z" * 1_500_000)
        except (BrokenPipeError, ConnectionResetError):
            pass
        assert _closed_by_peer(s)
    assert r.info("stats")["client_query_buffer_limit_disconnections"] == 1


def _oom_script(r: redis.Redis) -> list:
    """Replies (or error texts) of a fixed sequence run while over maxmemory."""
    out = []

    def run(*args):
        try:
            out.append(r.execute_command(*args))
        except redis.ResponseError as e:
            out.append(f"ERR:{e}")
    run("XADD", "oom:s", "*", "f", "v")
    run("XGROUP", "CREATE", "oom:s", "g2", "0")
    run("XGROUP", "CREATECONSUMER", "oom:s", "g", "c9")
    run("SET", "oom:k", "v")
    run("XLEN", "oom:s")
    run("XRANGE", "oom:s", "-", "+")
    run("XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "oom:s", ">")
    run("XACK", "oom:s", "g", "1-1")
    run("XDEL", "oom:s", "2-1")
    run("XTRIM", "oom:s", "MAXLEN", "1")
    run("DEL", "oom:other")
    return out


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _over_maxmemory(r: redis.Redis) -> bool:
    try:
        r.set("oom:probe", "1")
    except redis.exceptions.OutOfMemoryError:
        return True
    return False


def test_maxmemory_noeviction_matches_redis(srv, tmp_path):
    if not RedisProcess.available():
        pytest.skip("needs redis-server")
    with RedisProcess(tmp_path / "redis") as real:
        replies = []
        for port in (srv.port, real.port):
            r = redis.Redis(port=port)
            r.xadd("oom:s", {"f": "v"}, id="1-1")
            r.xadd("oom:s", {"f": "v"}, id="2-1")
            r.xgroup_create("oom:s", "g", id="0")
            queued = socket.create_connection(("127.0.0.1", port), timeout=5)
            queued.sendall(b"MULTI\r\nXADD oom:s * f v\r\n")
            assert _read_exactly(queued, len(b"+OK\r\n+QUEUED\r\n")) == b"+OK\r\n+QUEUED\r\n"
            r.config_set("maxmemory", "1mb")
            _wait_for(lambda: _over_maxmemory(r), what="the OOM state")
            replies.append(_oom_script(r))
            # A transaction queued before the limit was crossed, holding a denyoom command.
            expected = (b"-EXECABORT Transaction discarded because of: "
                        b"OOM command not allowed when used memory > 'maxmemory'.\r\n")
            queued.sendall(b"EXEC\r\n")
            replies[-1].append(_read_exactly(queued, len(expected)))
            queued.close()
            # Inside MULTI every command (even a read) is refused; EXEC then aborts.
            pipe = r.pipeline(transaction=True)
            pipe.get("oom:k")
            with pytest.raises(redis.ResponseError, match="maxmemory"):
                pipe.execute()
            r.config_set("maxmemory", "0")
            _wait_for(lambda: not _over_maxmemory(r), what="the end of the OOM state")
        ours, theirs = replies
        assert ours == theirs
        assert ours[0] == "ERR:command not allowed when used memory > 'maxmemory'."
        assert ours[-1].startswith(b"-EXECABORT Transaction discarded because of: OOM")
        rs = redis.Redis(port=srv.port)
        assert rs.info("stats")["total_error_replies"] > 0
        assert rs.info("memory")["maxmemory"] == 0


def test_eviction_policies_are_accepted_and_act_as_noeviction(srv):
    r = redis.Redis(port=srv.port)
    r.set("keep", "1")
    r.config_set("maxmemory-policy", "allkeys-lru")
    r.config_set("maxmemory", "1mb")
    _wait_for(lambda: _over_maxmemory(r), what="the OOM state")
    assert r.get("keep") == b"1"                      # nothing evicted
    assert r.info("memory")["maxmemory_policy"] == "allkeys-lru"
    assert "treated as noeviction" in srv.log_text()
    r.config_set("maxmemory", "0")


def test_group_pel_cap_delivers_up_to_the_cap_then_errors(srv):
    r = redis.Redis(port=srv.port)
    for i in range(1, 6):
        r.xadd("cap:s", {"n": i}, id=f"{i}-1")
    r.xgroup_create("cap:s", "g", id="0")
    r.config_set("stream-group-max-pel", 3)
    got = r.xreadgroup("g", "c1", {"cap:s": ">"}, count=2)
    assert [e[0] for e in got[0][1]] == [b"1-1", b"2-1"]
    got = r.xreadgroup("g", "c1", {"cap:s": ">"})           # room for one more only
    assert [e[0] for e in got[0][1]] == [b"3-1"]
    with pytest.raises(redis.ResponseError, match="pending entries list .* is full"):
        r.xreadgroup("g", "c1", {"cap:s": ">"})
    # NOACK reads do not grow the PEL; XACK makes room again.
    assert [e[0] for e in r.xreadgroup("g", "c1", {"cap:s": ">"}, count=1, noack=True)[0][1]] == [b"4-1"]
    assert r.xack("cap:s", "g", "1-1") == 1
    assert [e[0] for e in r.xreadgroup("g", "c1", {"cap:s": ">"})[0][1]] == [b"5-1"]
    assert r.xinfo_groups("cap:s")[0]["pending"] == 3


def test_group_consumer_cap_refuses_a_new_consumer(srv):
    r = redis.Redis(port=srv.port)
    r.xadd("capc:s", {"n": 1}, id="1-1")
    r.xgroup_create("capc:s", "g", id="0")
    r.config_set("stream-group-max-consumers", 2)
    assert r.xgroup_createconsumer("capc:s", "g", "a") == 1
    assert r.xreadgroup("g", "b", {"capc:s": ">"})           # creates consumer b
    for make_third in (lambda: r.xgroup_createconsumer("capc:s", "g", "c"),
                       lambda: r.xreadgroup("g", "c", {"capc:s": "0"}),
                       lambda: r.xclaim("capc:s", "g", "c", 0, ["1-1"])):
        with pytest.raises(redis.ResponseError, match="stream-group-max-consumers"):
            make_third()
    assert r.xgroup_createconsumer("capc:s", "g", "a") == 0   # existing consumers are fine
    assert len(r.xinfo_consumers("capc:s", "g")) == 2


def _read_line(sock: socket.socket) -> bytes:
    line = b""
    while not line.endswith(b"\r\n"):
        chunk = sock.recv(1)
        if not chunk:
            raise ConnectionError("closed")
        line += chunk
    return line


def _fake_replica(port: int, r: redis.Redis) -> socket.socket:
    """A raw connection that completes a full sync (PSYNC, payload, ACK) and then stops
    reading, so the primary treats it as an online replica link."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.settimeout(5)
    sock.sendall(b"PSYNC ? -1\r\n")
    assert _read_line(sock).startswith(b"+FULLRESYNC")
    header = _read_line(sock)[1:].rstrip(b"\r\n")
    if header.startswith(b"EOF:"):                  # diskless form: ends with the mark
        mark, payload = header[4:], b""
        while not payload.endswith(mark):
            payload += sock.recv(65536)
    else:
        _read_exactly(sock, int(header))

    def online():
        sock.sendall(b"REPLCONF ACK 0\r\n")
        return r.info("replication").get("slave0", {}).get("state") == "online"
    _wait_for(online, what="the replica link to be online")
    return sock


def test_replica_links_use_the_replica_class_and_are_never_idle_closed(srv):
    r = redis.Redis(port=srv.port)
    r.config_set("timeout", 1, "client-output-buffer-limit", "normal 0 0 0 replica 1mb 0 0")
    with _fake_replica(srv.port, r) as replica, \
            socket.create_connection(("127.0.0.1", srv.port), timeout=5) as idle:
        idle.sendall(b"PING\r\n")
        assert idle.recv(100) == b"+PONG\r\n"
        assert _closed_by_peer(idle), "the idle normal client was not closed"
        # The replica link, as idle as that client, is still there.
        assert r.info("replication")["connected_slaves"] == 1
        # It never reads: the replication stream piles up past the replica class's limit.
        pipe = r.pipeline(transaction=False)
        for i in range(1000):                        # about 10 MB of stream
            pipe.xadd("repl-obuf:s", {"f": "z" * 10_000})
        pipe.execute()

        def dropped():
            try:       # ACKs keep the link online (a primary may hold the stream until one)
                replica.sendall(b"REPLCONF ACK 0\r\n")
            except OSError:
                pass
            return r.info("stats")["client_output_buffer_limit_disconnections"] == 1
        _wait_for(dropped, what="the replica link to be dropped")
        _wait_for(lambda: r.info("replication")["connected_slaves"] == 0,
                  what="the replica to be gone")
    assert "scheduled to be closed ASAP for overcoming of output buffer limits." in srv.log_text()
