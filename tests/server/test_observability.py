"""Observability commands against a real StreamDB (and redis-server 7.0 where replies must match):
SLOWLOG, LATENCY, MONITOR (raw socket and redis-cli --monitor), MEMORY, OBJECT,
CONFIG REWRITE, INFO field names, CLIENT LIST fields."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import time

import pytest
import redis

from helpers import ServerProcess


@pytest.fixture
def r(server):
    client = redis.Redis(port=server.port, protocol=2)
    client.flushall()
    client.config_set("slowlog-log-slower-than", "10000")
    client.config_set("slowlog-max-len", "128")
    client.config_set("latency-monitor-threshold", "0")
    client.execute_command("SLOWLOG", "RESET")
    client.execute_command("LATENCY", "RESET")
    yield client
    client.config_set("slowlog-log-slower-than", "10000")
    client.config_set("latency-monitor-threshold", "0")
    client.close()


@pytest.fixture
def theirs(redis_server):
    client = redis.Redis(port=redis_server.port, protocol=2)
    client.flushall()
    yield client
    client.close()


def _reply(client, *args):
    try:
        return ("ok", client.execute_command(*args))
    except redis.ResponseError as e:
        return ("err", str(e))


def same(ours, theirs, *args):
    a, b = _reply(ours, *args), _reply(theirs, *args)
    assert a == b, f"{args}: streamdb={a!r} redis={b!r}"
    return a


# -- SLOWLOG ----------------------------------------------------------------------


def test_slowlog_records_entries_newest_first_with_client_fields(r):
    r.config_set("slowlog-log-slower-than", "0")
    r.client_setname("obs-client")
    r.set(b"k", b"v")
    r.xadd(b"s", {b"f": b"1"})
    entries = r.execute_command("SLOWLOG", "GET", "3", NEVER_DECODE=True)
    assert len(entries) == 3
    ids = [e[0] for e in entries]
    assert ids == sorted(ids, reverse=True)
    newest = entries[0]
    assert newest[3][:2] == [b"XADD", b"s"]
    assert isinstance(newest[1], int) and newest[1] > 0
    assert isinstance(newest[2], int) and newest[2] >= 0
    assert re.fullmatch(rb"127\.0\.0\.1:\d+", newest[4])
    assert newest[5] == b"obs-client"
    assert r.execute_command("SLOWLOG", "LEN") >= 3


def test_slowlog_trims_argv_like_redis(r):
    r.config_set("slowlog-log-slower-than", "0")
    r.execute_command("DEL", *[b"k%d" % i for i in range(40)])
    r.set(b"long", b"x" * 130)
    entries = r.execute_command("SLOWLOG", "GET", "2", NEVER_DECODE=True)
    set_argv, del_argv = entries[0][3], entries[1][3]
    assert set_argv == [b"SET", b"long", b"x" * 128 + b"... (2 more bytes)"]
    assert len(del_argv) == 32
    assert del_argv[-1] == b"... (10 more arguments)"
    assert del_argv[:3] == [b"DEL", b"k0", b"k1"]


def test_slowlog_max_len_threshold_and_reset(r):
    r.config_set("slowlog-log-slower-than", "0")
    r.config_set("slowlog-max-len", "3")
    for i in range(10):
        r.set(b"k%d" % i, b"v")
    assert r.execute_command("SLOWLOG", "LEN") == 3
    assert len(r.execute_command("SLOWLOG", "GET", "-1")) == 3
    r.config_set("slowlog-log-slower-than", "-1")
    r.execute_command("SLOWLOG", "RESET")
    r.set(b"k", b"v")
    assert r.execute_command("SLOWLOG", "LEN") == 0


def _raw_commands(port: int, *commands: list[bytes]) -> bytes:
    """Send commands on a fresh raw connection (no client library handshake); the replies' bytes."""
    payload = b"".join(b"*%d\r\n" % len(c) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in c)
                       for c in commands)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(payload)
        return b"\r\n".join(_read_lines(sock, len(commands)))


def test_slowlog_secrets_are_redacted(server, r):
    r.config_set("slowlog-log-slower-than", "0")
    reply = _raw_commands(server.port, [b"AUTH", b"someone", b"secret-password"])
    assert reply.startswith(b"-WRONGPASS")
    entries = r.execute_command("SLOWLOG", "GET", "-1", NEVER_DECODE=True)
    auth = [e[3] for e in entries if e[3][0] == b"AUTH"]
    assert auth == [[b"AUTH", b"(redacted)", b"(redacted)"]]
    assert not any(b"secret-password" in arg for e in entries for arg in e[3])


def test_slowlog_errors_and_help_match_redis(r, theirs):
    for args in (("SLOWLOG", "GET", "x"), ("SLOWLOG", "GET", "-2"), ("SLOWLOG", "HELP"),
                 ("SLOWLOG", "LEN", "extra"), ("SLOWLOG", "NOPE"), ("SLOWLOG",)):
        same(r, theirs, *args)


def test_redis_cli_slowlog_get(server, r):
    if shutil.which("redis-cli") is None:
        pytest.skip("redis-cli not installed")
    r.config_set("slowlog-log-slower-than", "0")
    subprocess.run(["redis-cli", "-p", str(server.port), "set", "cli-key", "v"],
                   capture_output=True, timeout=10, check=True)
    out = subprocess.run(["redis-cli", "-p", str(server.port), "slowlog", "get", "2"],
                         capture_output=True, text=True, timeout=10).stdout
    assert "cli-key" in out


# -- LATENCY ----------------------------------------------------------------------


def test_latency_monitor_records_slow_commands(r):
    r.execute_command("DEBUG", "SLEEP", "0.02")
    assert r.execute_command("LATENCY", "LATEST") == []      # threshold 0: monitor off
    r.config_set("latency-monitor-threshold", "5")
    r.execute_command("DEBUG", "SLEEP", "0.02")
    r.set(b"fast", b"1")                                     # below the threshold
    latest = r.execute_command("LATENCY", "LATEST")
    assert len(latest) == 1
    event, when, last_ms, max_ms = latest[0]
    assert event == b"command" and when > 0 and 20 <= last_ms <= max_ms
    history = r.execute_command("LATENCY", "HISTORY", "command")
    assert len(history) == 1 and history[0][1] >= 20
    assert r.execute_command("LATENCY", "HISTORY", "no-such-event") == []
    assert b"command: 1 latency spikes" in r.execute_command("LATENCY", "DOCTOR")
    assert r.execute_command("LATENCY", "RESET", "command", "other") == 1
    assert r.execute_command("LATENCY", "LATEST") == []
    assert r.execute_command("LATENCY", "DOCTOR").startswith(b"Dave, no latency spike")
    r.config_set("latency-monitor-threshold", "0")
    assert r.execute_command("LATENCY", "DOCTOR").startswith(b"I'm sorry, Dave")


def test_latency_errors_match_redis(r, theirs):
    for args in (("LATENCY", "HISTORY"), ("LATENCY", "NOPE"), ("LATENCY", "LATEST", "x"),
                 ("LATENCY", "RESET"), ("LATENCY", "DOCTOR")):
        same(r, theirs, *args)     # DOCTOR: both have latency-monitor-threshold 0


def test_latency_histogram_counts_calls(r):
    for _ in range(5):
        r.ping()
    reply = r.execute_command("LATENCY", "HISTOGRAM", "ping")
    assert reply[0] == b"ping"
    fields = dict(zip(reply[1][0::2], reply[1][1::2]))
    assert fields[b"calls"] >= 5
    buckets = fields[b"histogram_usec"]
    counts = buckets[1::2]
    assert counts == sorted(counts) and counts[-1] == fields[b"calls"]



def test_config_set_latency_tracking_stops_and_restarts_the_histogram(r):
    # The per-command hook keeps its settings in fields that CONFIG SET refreshes.
    def ping_calls():
        reply = r.execute_command("LATENCY", "HISTOGRAM", "ping")
        return dict(zip(reply[1][0::2], reply[1][1::2]))[b"calls"] if reply else 0

    r.ping()
    before = ping_calls()
    r.config_set("latency-tracking", "no")
    for _ in range(3):
        r.ping()
    assert ping_calls() == before
    r.config_set("latency-tracking", "yes")
    r.ping()
    assert ping_calls() == before + 1

# -- MONITOR ----------------------------------------------------------------------


def _read_lines(sock: socket.socket, n: int, deadline_s: float = 5.0) -> list[bytes]:
    buf = b""
    deadline = time.monotonic() + deadline_s
    while buf.count(b"\r\n") < n and time.monotonic() < deadline:
        sock.settimeout(max(deadline - time.monotonic(), 0.01))
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            break
        if not chunk:
            break
        buf += chunk
    return buf.split(b"\r\n")[:n]


def test_monitor_streams_commands_in_redis_format(server, r):
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as mon:
        mon.sendall(b"*1\r\n$7\r\nMONITOR\r\n")
        assert _read_lines(mon, 1) == [b"+OK"]
        _raw_commands(server.port, [b"SELECT", b"0"], [b"SET", b'a"b', b"x\ny"],
                      [b"AUTH", b"user", b"secret"],
                      [b"CONFIG", b"GET", b"port"],      # admin: not shown to monitors
                      [b"XADD", b"s", b"1-1", b"f", b"\x01"])
        lines = _read_lines(mon, 4)
    pattern = rb'\+\d+\.\d{6} \[0 127\.0\.0\.1:\d+\] (.*)'
    shown = [re.fullmatch(pattern, line).group(1) for line in lines]
    assert shown == [b'"SELECT" "0"', b'"SET" "a\\"b" "x\\ny"',
                     b'"AUTH" "(redacted)" "(redacted)"',
                     b'"XADD" "s" "1-1" "f" "\\x01"']
    # The monitor disconnected: its flag goes once the server has seen the close.
    deadline = time.monotonic() + 5
    while any("O" in c["flags"] for c in r.client_list()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any("O" in c["flags"] for c in r.client_list())


def test_client_list_shows_monitor_flag(server, r):
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as mon:
        mon.sendall(b"*1\r\n$7\r\nMONITOR\r\n")
        assert _read_lines(mon, 1) == [b"+OK"]
        flags = [c["flags"] for c in r.client_list()]
        assert "O" in flags


def test_redis_cli_monitor(server, r):
    if shutil.which("redis-cli") is None:
        pytest.skip("redis-cli not installed")
    # redis-cli 7.0 spells it as a command ("redis-cli monitor"); it has no --monitor flag.
    proc = subprocess.Popen(["redis-cli", "-p", str(server.port), "monitor"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "OK"
        # Keep writing until the line shows up: the monitor registers asynchronously.
        deadline = time.monotonic() + 5
        r.set(b"via-cli", b"1")
        line = proc.stdout.readline()
        while "via-cli" not in line and time.monotonic() < deadline:
            line = proc.stdout.readline()
        assert re.fullmatch(r'\d+\.\d{6} \[0 127\.0\.0\.1:\d+\] "SET" "via-cli" "1"\n', line)
    finally:
        proc.kill()
        proc.wait(5)


# -- MEMORY / OBJECT ----------------------------------------------------------------


def test_memory_usage_grows_with_entries_groups_and_pel(r):
    r.xadd(b"s", {b"f": b"v"})
    small = r.memory_usage(b"s")
    for i in range(500):
        r.xadd(b"s", {b"field": b"value-%d" % i})
    grown = r.memory_usage(b"s")
    assert grown > small + 500 * 10
    r.xgroup_create(b"s", b"g", id=b"0")
    r.xreadgroup(b"g", b"c1", {b"s": b">"}, count=300)
    with_pel = r.memory_usage(b"s")
    assert with_pel > grown + 300 * 50
    assert r.memory_usage(b"s", samples=0) > 0
    r.set(b"str", b"x" * 1000)
    assert 1000 < r.memory_usage(b"str") < 1300
    assert r.memory_usage(b"missing") is None


def test_memory_and_object_replies_match_redis(r, theirs):
    for c in (r, theirs):
        c.set(b"int", b"12345")
        c.set(b"big", b"12345678901234567890123")
        c.set(b"lead", b"0123")
        c.set(b"short", b"hello")
        c.set(b"long", b"y" * 45)
    for key in (b"int", b"big", b"lead", b"short", b"long", b"missing"):
        same(r, theirs, "OBJECT", "ENCODING", key)
        same(r, theirs, "OBJECT", "REFCOUNT", key)
    for args in (("OBJECT", "FREQ", "int"), ("OBJECT", "HELP"), ("OBJECT", "NOPE", "x"),
                 ("MEMORY", "HELP"), ("MEMORY", "USAGE", "int", "SAMPLES"),
                 ("MEMORY", "USAGE", "int", "SAMPLES", "x"), ("MEMORY", "USAGE", "int", "FOO"),
                 ("MEMORY", "USAGE", "missing"), ("MEMORY", "MALLOC-STATS", "x")):
        same(r, theirs, *args)
    r.xadd(b"s", {b"f": b"v"})
    assert r.object("encoding", b"s") == b"stream"
    assert r.object("idletime", b"s") == 0


def test_memory_stats_and_doctor(r):
    stats = r.execute_command("MEMORY", "STATS")
    fields = dict(zip(stats[0::2], stats[1::2]))
    for name in (b"peak.allocated", b"total.allocated", b"startup.allocated", b"keys.count",
                 b"dataset.bytes", b"overhead.total"):
        assert name in fields
    assert fields[b"peak.allocated"] >= fields[b"total.allocated"] > 0
    assert r.execute_command("MEMORY", "DOCTOR").startswith(b"Hi Sam")


# -- CONFIG REWRITE -----------------------------------------------------------------


def test_config_rewrite_keeps_comments_and_order(tmp_path):
    conf = tmp_path / "streamdb.conf"
    conf.write_text("# my comment\nappendonly no\n\n# the slowlog\nslowlog-max-len 10\n"
                    "save \"\"\nslowlog-max-len 11\n# tail comment\n")
    conf.chmod(0o640)
    with ServerProcess(tmp_path / "data", config=str(conf)) as srv:
        c = redis.Redis(port=srv.port)
        c.config_set("slowlog-max-len", "64")
        c.config_set("latency-monitor-threshold", "7")
        c.config_set("timeout", "30")
        assert c.config_rewrite()
        text = conf.read_text()
        c.config_set("timeout", "31")
        assert c.config_rewrite()
        again = conf.read_text()
        c.close()
    lines = text.splitlines()
    assert lines[:8] == [
        "# my comment", "appendonly no", "", "# the slowlog", "slowlog-max-len 64",
        'save ""', "# tail comment", "# Generated by CONFIG REWRITE"]
    # Everything not at its default is appended, command-line options included (as Redis).
    assert sorted(lines[8:]) == sorted([
        f"port {srv.port}", f"dir {tmp_path / 'data'}", "timeout 30",
        "latency-monitor-threshold 7"])
    assert again.count("# Generated by CONFIG REWRITE") == 1
    assert "timeout 31" in again and "timeout 30" not in again
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]     # (the file aside)
    assert conf.stat().st_mode & 0o7777 == 0o640       # the operator's permissions stay
    with ServerProcess(tmp_path / "data", config=str(conf)) as srv:
        c = redis.Redis(port=srv.port)
        assert c.config_get("slowlog-max-len") == {"slowlog-max-len": "64"}
        assert c.config_get("timeout") == {"timeout": "31"}
        c.close()


def test_config_rewrite_keeps_memory_sizes_in_units(tmp_path):
    """Redis writes 512mb back as 512mb (rewriteConfigFormatMemory), not 536870912;
    CONFIG GET still answers bytes."""
    conf = tmp_path / "streamdb.conf"
    conf.write_text("maxmemory 512mb\nstream-cache-size 16mb\n")
    with ServerProcess(tmp_path / "data", "--save", "", config=str(conf)) as srv:
        c = redis.Redis(port=srv.port, decode_responses=True)
        c.config_set("stream-node-max-bytes", "5000")
        c.config_set("client-query-buffer-limit", "2gb")
        assert c.config_get("maxmemory") == {"maxmemory": str(512 * 1024 * 1024)}
        assert c.config_rewrite()
        c.close()
    lines = conf.read_text().splitlines()
    assert lines[:2] == ["maxmemory 512mb", "stream-cache-size 16mb"]
    assert "stream-node-max-bytes 5000" in lines and "client-query-buffer-limit 2gb" in lines


def test_config_rewrite_without_config_file(r):
    with pytest.raises(redis.ResponseError, match="^The server is running without a config file$"):
        r.config_rewrite()


# -- INFO / CLIENT LIST ---------------------------------------------------------------

_INFO_FIELDS = {
    "server": ["redis_version", "redis_mode", "os", "arch_bits", "process_id", "run_id",
               "tcp_port", "uptime_in_seconds", "uptime_in_days", "hz", "executable",
               "config_file"],
    "clients": ["connected_clients", "blocked_clients", "tracking_clients", "maxclients",
                "client_recent_max_input_buffer", "client_recent_max_output_buffer",
                "total_blocking_keys"],
    "memory": ["used_memory", "used_memory_human", "used_memory_rss", "used_memory_peak",
               "maxmemory", "maxmemory_policy", "mem_fragmentation_ratio"],
    "stats": ["total_connections_received", "total_commands_processed",
              "instantaneous_ops_per_sec", "rejected_connections", "expired_keys",
              "keyspace_hits", "keyspace_misses", "total_net_input_bytes",
              "total_net_output_bytes", "total_error_replies", "instantaneous_input_kbps",
              "instantaneous_output_kbps"],
    "cpu": ["used_cpu_sys", "used_cpu_user", "used_cpu_sys_children", "used_cpu_user_children"],
    "replication": ["role", "connected_slaves", "master_replid", "master_repl_offset"],
    "persistence": ["loading", "rdb_changes_since_last_save", "aof_enabled"],
}


def _info_text(client, *sections: str) -> str:
    """INFO's raw text (redis-py's info() parses it into a dict)."""
    conn = client.connection_pool.get_connection()
    try:
        conn.send_command("INFO", *sections)
        return conn.read_response().decode()
    finally:
        client.connection_pool.release(conn)


def _section_fields(client, section: str) -> dict[str, str]:
    text = _info_text(client, section)
    return dict(line.split(":", 1) for line in text.splitlines() if line and not line.startswith("#"))


# Fields newer Redis versions added (7.2), which redis-server 7.0 cannot vouch for.
_NEWER_REDIS_FIELDS = {"total_blocking_keys"}


def test_info_sections_have_redis_field_names(r, theirs):
    for section, names in _INFO_FIELDS.items():
        ours, redis_fields = _section_fields(r, section), _section_fields(theirs, section)
        for name in names:
            assert name in redis_fields or name in _NEWER_REDIS_FIELDS, \
                f"{section}.{name} is not a Redis field"
            assert name in ours, f"INFO {section} lacks {name}"


def _headers(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("#")]


def test_info_sections_and_their_order_match_redis(r, theirs):
    # The default and "all" lists are the same in 7.0 and 8.x (cluster included).
    for args in ((), ("default",), ("all",), ("everything",), ("keyspace", "server", "cluster")):
        assert _headers(_info_text(r, *args)) == _headers(_info_text(theirs, *args)), args
    assert _info_text(r, "cluster") == "# Cluster\r\ncluster_enabled:0\r\n"
    assert _section_fields(r, "cluster") == _section_fields(theirs, "cluster")


def test_reported_redis_version_is_current_redis_not_70(r, theirs):
    # Deliberate difference: StreamDB reports the Redis release whose stream commands
    # it implements (8.10.0 by default), where the reference server says 7.0.x.
    assert _section_fields(theirs, "server")["redis_version"].startswith("7.0.")
    server = _section_fields(r, "server")
    assert server["redis_version"] == "8.10.0"
    assert server["streamdb_version"]
    hello = r.execute_command("HELLO", "3")
    assert hello[b"version"] == b"8.10.0" and hello[b"server"] == b"redis"
    r.execute_command("HELLO", "2")


def test_redis_version_compat_directive(r):
    try:
        assert r.config_set("redis-version-compat", "7.2.4")
        assert _section_fields(r, "server")["redis_version"] == "7.2.4"
        hello = r.execute_command("HELLO")          # RESP2: a flat list of pairs
        assert hello[hello.index(b"version") + 1] == b"7.2.4"
        with pytest.raises(redis.ResponseError, match="must be a version"):
            r.config_set("redis-version-compat", "8.x")
        assert r.config_get("redis-version-compat") == {"redis-version-compat": "7.2.4"}
    finally:
        r.config_set("redis-version-compat", "8.10.0")


def test_info_commandstats_latencystats_errorstats(r):
    for _ in range(3):
        r.set(b"k", b"v")
    with pytest.raises(redis.ResponseError):
        r.execute_command("XADD", "k", "*", "f", "v")     # WRONGTYPE
    text = _info_text(r, "everything")
    assert re.search(r"^cmdstat_set:calls=\d+,usec=\d+,usec_per_call=[\d.]+,"
                     r"rejected_calls=\d+,failed_calls=\d+\r$", text, re.M)
    assert re.search(r"^cmdstat_xadd:calls=\d+,.*failed_calls=[1-9]\d*\r$", text, re.M)
    assert "# Latencystats" in text
    assert re.search(r"^latency_percentiles_usec_set:p50=\d+\.\d{3},p99=\d+\.\d{3},"
                     r"p99\.9=\d+\.\d{3}\r$", text, re.M)
    assert re.search(r"^errorstat_WRONGTYPE:count=[1-9]\d*\r$", text, re.M)


def test_instantaneous_ops_per_sec_moves(r):
    deadline = time.monotonic() + 5
    ops = 0
    while time.monotonic() < deadline and ops == 0:
        pipe = r.pipeline(transaction=False)
        for _ in range(200):
            pipe.ping()
        pipe.execute()
        ops = int(_section_fields(r, "stats")["instantaneous_ops_per_sec"])
    assert ops > 0


def test_client_list_fields_in_redis_order(r, theirs):
    def names(client):
        line = client.execute_command("CLIENT", "INFO").decode().strip()
        return [kv.split("=", 1)[0] for kv in line.split(" ")]
    redis_names = names(theirs)
    ours = names(r)
    assert ours[:len(redis_names)] == redis_names
    assert ours[len(redis_names):] in ([], ["lib-name", "lib-ver"])


def test_client_list_reports_multi_memory(server, r):
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"*1\r\n$5\r\nMULTI\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100\r\n"
                     + b"v" * 100 + b"\r\n")
        assert _read_lines(sock, 2) == [b"+OK", b"+QUEUED"]
        mine = [c for c in r.client_list() if c["flags"] == "x"]
        assert len(mine) == 1
        assert int(mine[0]["multi-mem"]) >= 104 and mine[0]["multi"] == "1"
        assert int(mine[0]["tot-mem"]) >= int(mine[0]["multi-mem"])


# -- INFO keyspace_hits / keyspace_misses / total_reads_processed / total_writes_processed --

_COUNTERS = ("keyspace_hits", "keyspace_misses", "total_reads_processed", "total_writes_processed")

# Each command's effect on the counters, compared with redis-server's: a read lookup
# (lookupKeyRead) is a hit or a miss, a write's lookup neither; XREAD and XREADGROUP
# look each key up twice, as Redis does.
_COUNTED_SEQUENCE = [
    ["XLEN", "s"], ["XLEN", "nope"], ["XRANGE", "s", "-", "+"], ["XRANGE", "nope", "-", "+"],
    ["XREVRANGE", "s", "+", "-"], ["XREAD", "STREAMS", "s", "0"], ["XREAD", "STREAMS", "nope", "0"],
    ["XREAD", "STREAMS", "s", "$"], ["XREAD", "COUNT", "1", "STREAMS", "s", "nope", "0", "0"],
    ["XREAD", "STREAMS", "nope", "s", "0", "bad"],
    ["XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"],
    ["XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "0"],
    ["XREADGROUP", "GROUP", "g", "c", "STREAMS", "nope", ">"],
    ["XINFO", "STREAM", "s"], ["XINFO", "STREAM", "nope"], ["XINFO", "GROUPS", "s"],
    ["XINFO", "CONSUMERS", "s", "g"], ["XINFO", "STREAM", "s", "FULL"],
    ["XPENDING", "s", "g"], ["XPENDING", "s", "g", "-", "+", "10"], ["XPENDING", "nope", "g"],
    ["TYPE", "s"], ["TYPE", "nope"], ["EXISTS", "s", "nope", "s"], ["TTL", "s"], ["PTTL", "nope"],
    ["EXPIRETIME", "s"], ["DUMP", "s"], ["DUMP", "nope"], ["OBJECT", "ENCODING", "s"],
    ["OBJECT", "IDLETIME", "nope"], ["MEMORY", "USAGE", "s"], ["COPY", "s", "s2"],
    ["COPY", "nope", "s3"], ["GET", "k"], ["SET", "k", "v"], ["GET", "k"], ["GET", "s"],
    ["MGET", "k", "nope"], ["SET", "k", "v2", "GET"], ["SET", "k2", "v", "GET"], ["XLEN", "k"],
    ["XADD", "s", "*", "a", "1"], ["XACK", "s", "g", "1-1"], ["XCLAIM", "s", "g", "c", "0", "1-1"],
    ["XAUTOCLAIM", "s", "g", "c", "0", "0"], ["XDEL", "s", "9-9"], ["XTRIM", "s", "MAXLEN", "100"],
    ["XGROUP", "CREATECONSUMER", "s", "g", "c2"], ["XSETID", "s", "99999999999999-0"],
    ["EXPIRE", "s2", "100"], ["PERSIST", "s2"], ["RENAME", "s2", "s4"], ["INCR", "n"],
    ["DEL", "s4"], ["KEYS", "*"], ["SCAN", "0"],
]


def _counters(client) -> tuple[int, ...]:
    stats = client.info("stats")
    return tuple(stats[name] for name in _COUNTERS)


def _deltas(client, command) -> dict:
    before = _counters(client)
    try:
        client.execute_command(*command)
    except (redis.ResponseError, IndexError):   # (redis-py's XPENDING parser on the extended form)
        pass
    return dict(zip(_COUNTERS, (b - a for a, b in zip(before, _counters(client)))))


def test_keyspace_hits_misses_and_io_counts_match_redis(r, theirs):
    for client in (r, theirs):
        client.xadd("s", {"a": 1}, id="1-1")
        client.xgroup_create("s", "g", id="0")
    for command in _COUNTED_SEQUENCE:
        ours, redis_ = _deltas(r, command), _deltas(theirs, command)
        assert ours == redis_, f"{command}: streamdb={ours} redis={redis_}"
    # A lone hit and a lone miss move exactly their counter; one request is one read
    # and one write (INFO's own included: the first INFO's write, the second's read).
    assert _deltas(r, ["XLEN", "s"]) == {"keyspace_hits": 1, "keyspace_misses": 0,
                                         "total_reads_processed": 2, "total_writes_processed": 2}
    assert _deltas(r, ["XLEN", "nope"])["keyspace_misses"] == 1


def test_a_pipeline_is_one_read_and_one_write_as_in_redis(r, theirs):
    for client in (r, theirs):
        before = _counters(client)
        pipe = client.pipeline(transaction=False)
        for i in range(20):
            pipe.xadd("p", {"i": i})
        pipe.xrange("p")
        pipe.execute()
        after = _counters(client)
        assert after[2] - before[2] == 2 and after[3] - before[3] == 2, (client, before, after)
    assert all(v > 0 for v in _counters(r))
    r.config_resetstat()
    assert _counters(r)[:2] == (0, 0)
