"""The Prometheus endpoint (metrics-port): a real server, scraped over HTTP with urllib."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request

import pytest
import redis

from helpers import ServerProcess
from inproc import Delivered
from streamdb.cli.procs import free_port


def parse_exposition(text: str) -> tuple[dict, dict]:
    """(families {name: (type, help)}, samples {(name, frozenset(labels)): value}).

    Checks the format rules on the way: HELP and TYPE come before a family's
    samples, and each family appears once (a histogram's samples are its name
    with _bucket, _sum and _count).
    """
    families: dict[str, list] = {}
    samples: dict = {}
    current = None
    assert text.endswith("\n")
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, help_text = line[7:].split(" ", 1)
            assert name not in families, f"family {name} declared twice"
            families[name] = [None, help_text]
            current = name
        elif line.startswith("# TYPE "):
            name, kind = line[7:].split(" ")
            assert name == current and kind in ("gauge", "counter", "histogram")
            families[name][0] = kind
        else:
            name, labels, value = _parse_sample(line)
            family = name
            if families[current][0] == "histogram":
                family = name.removesuffix("_bucket").removesuffix("_sum").removesuffix("_count")
            assert family == current, f"sample {name} outside its family block"
            samples[(name, frozenset(labels.items()))] = float(value)
    return {k: tuple(v) for k, v in families.items()}, samples


def _parse_sample(line: str) -> tuple[str, dict, str]:
    brace = line.find("{")
    if brace < 0:
        name, value = line.split(" ")
        return name, {}, value
    name, i, labels = line[:brace], brace + 1, {}
    while line[i] != "}":
        eq = line.index("=", i)
        label = line[i:eq]
        assert line[eq + 1] == '"'
        j, chars = eq + 2, []
        while line[j] != '"':
            if line[j] == "\\":
                chars.append({"\\": "\\", '"': '"', "n": "\n"}[line[j + 1]])
                j += 2
            else:
                chars.append(line[j])
                j += 1
        labels[label] = "".join(chars)
        i = j + 1
        if line[i] == ",":
            i += 1
    rest = line[i + 1:]
    assert rest.startswith(" ")
    return name, labels, rest[1:]


def scrape(port: int) -> tuple[dict, dict]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return parse_exposition(resp.read().decode("utf-8"))


def value(samples: dict, name: str, **labels):
    return samples.get((name, frozenset(labels.items())))


def wait_for_value(port: int, name: str, expected, labels: dict, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while True:
        got = value(scrape(port)[1], name, **labels)
        if got == expected or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


@pytest.fixture
def metrics_server(tmp_path):
    mport = free_port()
    with ServerProcess(tmp_path / "sdb", "--appendonly", "yes", "--save", "",
                       "--metrics-port", str(mport)) as srv:
        srv.metrics_port = mport
        yield srv


def test_stream_group_and_consumer_values_follow_the_data(metrics_server):
    r = redis.Redis(port=metrics_server.port)
    mport = metrics_server.metrics_port
    r.xadd("orders", {"n": 1}, id="1-1")
    r.xadd("orders", {"n": 2}, id="1-2")
    r.xadd("orders", {"n": 3}, id="1-3")
    r.xgroup_create("orders", "billing", id="0")
    fams, s = scrape(mport)
    stream = {"db": "0", "key": "orders"}
    group = {**stream, "group": "billing"}
    assert fams["streamdb_stream_length"] == ("gauge", "Entries in the stream (XLEN).")
    assert fams["streamdb_stream_entries_added_total"][0] == "counter"
    assert value(s, "streamdb_stream_length", **stream) == 3
    assert value(s, "streamdb_stream_entries_added_total", **stream) == 3
    # The last id's time part is 1 ms after the epoch: its age is about "now".
    assert value(s, "streamdb_stream_last_entry_age_seconds", **stream) > 1e9
    assert value(s, "streamdb_group_lag", **group) == 3
    assert value(s, "streamdb_group_pending", **group) == 0
    assert value(s, "streamdb_group_oldest_pending_idle_seconds", **group) is None

    r.xreadgroup("billing", "alice", {"orders": ">"}, count=2)
    _, s = scrape(mport)
    consumer = {**group, "consumer": "alice"}
    assert value(s, "streamdb_group_lag", **group) == 1
    assert value(s, "streamdb_group_pending", **group) == 2
    assert value(s, "streamdb_group_entries_read", **group) == 2
    assert value(s, "streamdb_consumer_pending", **consumer) == 2
    assert value(s, "streamdb_consumer_idle_seconds", **consumer) >= 0
    assert value(s, "streamdb_group_oldest_pending_idle_seconds", **group) >= 0

    r.xack("orders", "billing", "1-1")
    r.xadd("orders", {"n": 4}, id="2-1")
    _, s = scrape(mport)
    assert value(s, "streamdb_group_pending", **group) == 1
    assert value(s, "streamdb_consumer_pending", **consumer) == 1
    assert value(s, "streamdb_group_lag", **group) == 2
    assert value(s, "streamdb_stream_entries_added_total", **stream) == 4

    # Deleting an undelivered entry leaves a tombstone ahead of the group:
    # Redis reports the lag as unknown (nil), so the series disappears.
    r.xdel("orders", "1-3")
    _, s = scrape(mport)
    assert value(s, "streamdb_group_lag", **group) is None
    assert value(s, "streamdb_stream_length", **stream) == 3


def test_server_series_and_label_escaping(metrics_server):
    r = redis.Redis(port=metrics_server.port)
    mport = metrics_server.metrics_port
    _, before = scrape(mport)
    odd_key = 'we"ird\\key\nline'
    r.xadd(odd_key, {"f": "v"})
    r.xadd("other", {"f": "v"}, id="5-0")
    _, s = scrape(mport)
    assert value(s, "streamdb_stream_length", db="0", key=odd_key) == 1
    assert value(s, "streamdb_aof_enabled") == 1
    assert value(s, "streamdb_aof_last_write_ok") == 1
    assert value(s, "streamdb_aof_size_bytes") > value(before, "streamdb_aof_size_bytes")
    assert value(s, "streamdb_commands_processed_total") >= value(before, "streamdb_commands_processed_total") + 2
    assert value(s, "streamdb_snapshot_changes_since_last_save") >= 2
    assert value(s, "streamdb_snapshot_bgsave_in_progress") == 0
    assert value(s, "streamdb_connected_clients") >= 1
    assert value(s, "streamdb_used_memory_bytes") > 1_000_000
    assert value(s, "streamdb_uptime_seconds") >= 0
    assert value(s, "streamdb_replication_role", role="master") == 1
    assert value(s, "streamdb_metrics_series_truncated") == 0

    # A client blocked in XREAD is counted while it waits.
    blocker = redis.Redis(port=metrics_server.port)
    conn = blocker.connection_pool.get_connection()
    conn.send_command("XREAD", "BLOCK", "0", "STREAMS", "nothing-yet", "$")
    assert wait_for_value(mport, "streamdb_blocked_clients", 1, {}) == 1
    r.xadd("nothing-yet", {"f": "v"})
    reply = conn.read_response()       # RESP3 map or RESP2 list, as the client negotiated
    assert list(reply) == [b"nothing-yet"] if isinstance(reply, dict) else reply[0][0] == b"nothing-yet"
    blocker.close()


def test_http_errors_and_hostile_clients_do_not_hurt_the_server(metrics_server):
    mport = metrics_server.metrics_port
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"http://127.0.0.1:{mport}/other", timeout=10)
    assert e.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(urllib.request.Request(
            f"http://127.0.0.1:{mport}/metrics", data=b"x", method="POST"), timeout=10)
    assert e.value.code == 405
    assert e.value.headers["Allow"] == "GET, HEAD"

    # A huge request head is refused with 431, not buffered.
    with socket.create_connection(("127.0.0.1", mport), timeout=10) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nX-Junk: " + b"a" * 20000 + b"\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 431 ")

    # Clients that connect and stay silent (or send half a request) keep their
    # socket, but scrapes and Redis commands are served meanwhile.
    silent = [socket.create_connection(("127.0.0.1", mport), timeout=10) for _ in range(4)]
    silent[0].sendall(b"GET /metr")
    r = redis.Redis(port=metrics_server.port)
    try:
        r.xadd("alive", {"f": "v"})
        _, s = scrape(mport)
        assert value(s, "streamdb_stream_length", db="0", key="alive") == 1
        assert r.ping()
        # Sixteen open at once is the limit: the next one is turned away with
        # 503 and Redis clients do not notice.
        silent += [socket.create_connection(("127.0.0.1", mport), timeout=10) for _ in range(12)]
        assert scrape_status(mport, 503) == 503
        assert r.ping()
    finally:
        for sock in silent:
            sock.close()
    assert scrape_status(mport, 200) == 200


def scrape_status(port: int, expected: int, timeout: float = 10.0) -> int:
    """Scrape until the status is ``expected`` (the server notices opened and
    closed sockets asynchronously) or the deadline passes; the last status."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
                status = resp.status
        except urllib.error.HTTPError as e:
            status = e.code
        if status == expected or time.monotonic() > deadline:
            return status
        time.sleep(0.1)


def test_series_cap_counts_what_it_leaves_out(tmp_path):
    mport = free_port()
    with ServerProcess(tmp_path / "sdb", "--appendonly", "no", "--save", "",
                       "--metrics-port", str(mport), "--metrics-max-series", "3") as srv:
        r = redis.Redis(port=srv.port)
        for i in range(5):
            r.xadd(f"s{i}", {"f": "v"})
        r.xgroup_create("s0", "g", id="0")
        _, s = scrape(mport)
        exported_streams = [k for k in s if k[0] == "streamdb_stream_length"]
        exported_groups = [k for k in s if k[0] == "streamdb_group_pending"]
        # 5 streams + 1 group = 6 series objects, 3 exported.
        assert len(exported_streams) + len(exported_groups) == 3
        assert value(s, "streamdb_metrics_series_truncated") == 3
        r.config_set("metrics-max-series", 100)
        _, s = scrape(mport)
        assert value(s, "streamdb_metrics_series_truncated") == 0
        assert len([k for k in s if k[0] == "streamdb_stream_length"]) == 5


def test_replication_series_on_primary_and_replica(tmp_path):
    pm, rm = free_port(), free_port()
    with ServerProcess(tmp_path / "p", "--appendonly", "no", "--save", "",
                       "--metrics-port", str(pm)) as primary:
        with ServerProcess(tmp_path / "r", "--appendonly", "no", "--save", "",
                           "--metrics-port", str(rm),
                           "--replicaof", f"127.0.0.1 {primary.port}") as replica:
            assert wait_for_value(rm, "streamdb_master_link_up", 1, {}) == 1
            _, s = scrape(rm)
            assert value(s, "streamdb_replication_role", role="slave") == 1
            assert wait_for_value(pm, "streamdb_connected_replicas", 1, {}) == 1
            redis.Redis(port=primary.port).xadd("replicated", {"f": "v"})
            _, s = scrape(pm)
            lag_keys = [k for k in s if k[0] == "streamdb_replica_lag_bytes"]
            assert len(lag_keys) == 1
            (label,) = [v for n, v in lag_keys[0][1] if n == "replica"]
            assert label.startswith("127.0.0.1:")
            assert s[lag_keys[0]] >= 0
            # Once the replica has acked, it is not behind.
            assert wait_for_value(pm, "streamdb_replica_lag_bytes", 0, {"replica": label}) == 0
            assert wait_for_value(rm, "streamdb_stream_length", 1, {"db": "0", "key": "replicated"}) == 1
        assert wait_for_value(pm, "streamdb_connected_replicas", 0, {}) == 0


def test_aof_write_failure_shows_until_a_retry_succeeds(metrics_server):
    mport = metrics_server.metrics_port
    admin = redis.Redis(port=metrics_server.port)
    assert value(scrape(mport)[1], "streamdb_aof_last_write_ok") == 1
    admin.execute_command("DEBUG", "AOF-INJECT-ERROR", "1000000")
    # This write cannot reach the disk: its reply is held, so send it without waiting.
    writer = socket.create_connection(("127.0.0.1", metrics_server.port), timeout=10)
    try:
        writer.sendall(b"XADD failing * f v\r\n")
        assert wait_for_value(mport, "streamdb_aof_last_write_ok", 0, {}) == 0
        admin.execute_command("DEBUG", "AOF-INJECT-ERROR", "0")
        assert wait_for_value(mport, "streamdb_aof_last_write_ok", 1, {}) == 1
        assert writer.recv(100).startswith(b"$")      # the held reply went out after the retry
    finally:
        writer.close()


def test_head_request_and_unknown_method(metrics_server):
    mport = metrics_server.metrics_port
    with urllib.request.urlopen(urllib.request.Request(
            f"http://127.0.0.1:{mport}/metrics", method="HEAD"), timeout=10) as resp:
        assert resp.status == 200 and int(resp.headers["Content-Length"]) > 1000
        assert resp.read() == b""
    with socket.create_connection(("127.0.0.1", mport), timeout=10) as s:
        s.sendall(b"garbage\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 400 ")


def test_metrics_port_is_start_up_only_and_says_so(metrics_server):
    """CONFIG SET refuses it with Redis's words for an immutable directive, the endpoint
    stays where it started, and the directive's doc and streamdb.conf say so."""
    from helpers import ROOT
    from streamdb.config import DIRECTIVES
    r = redis.Redis(port=metrics_server.port, decode_responses=True)
    for name, value in (("metrics-port", str(free_port())), ("metrics-bind", "0.0.0.0")):
        with pytest.raises(redis.ResponseError) as err:
            r.config_set(name, value)
        assert str(err.value) == (f"CONFIG SET failed (possibly related to argument '{name}') "
                                  "- can't set immutable config")
    assert r.config_get("metrics-port") == {"metrics-port": str(metrics_server.metrics_port)}
    assert scrape(metrics_server.metrics_port)[1]
    conf = (ROOT / "streamdb.conf").read_text()
    for name in ("metrics-port", "metrics-bind"):
        doc = DIRECTIVES[name].doc
        assert "Start-up only" in doc
        assert f"# {doc}\n{name} " in conf


def _redis_labels(labels: frozenset) -> frozenset:
    """StreamDB's labels as redis_exporter names them (db="db0", stream=...)."""
    renamed = {"key": "stream"}
    return frozenset((renamed.get(k, k), "db" + v if k == "db" else v) for k, v in labels)


def test_redis_exporter_names_carry_the_same_values_with_its_labels(metrics_server):
    """Every StreamDB series that redis_exporter also exports is there under its name,
    type, HELP and labels, with the same value; and its series StreamDB has no name of
    its own for follow the data."""
    from streamdb.server.metrics import REDIS_EXPORTER_NAMES
    r = redis.Redis(port=metrics_server.port)
    r.xadd("orders", {"n": 1}, id="1700000000000-0")
    r.xadd("orders", {"n": 2}, id="1700000000123-0")
    r.xgroup_create("orders", "billing", id="0")
    r.xgroup_create("orders", "audit", id="$")
    r.xreadgroup("billing", "alice", {"orders": ">"}, count=1)
    r.xreadgroup("billing", "bob", {"orders": ">"}, count=1)
    fams, s = scrape(metrics_server.metrics_port)

    for own, (alias, help_text) in REDIS_EXPORTER_NAMES.items():
        assert fams[alias] == (fams[own][0], help_text)
        for (name, labels), v in s.items():
            if name == own:          # (one computation: equal even for the clock and memory)
                assert s[(alias, _redis_labels(labels))] == v, (own, labels)
    assert fams["redis_stream_group_consumer_idle_seconds"] == ("gauge", "Consumer idle time in seconds")
    assert fams["redis_commands_processed_total"][0] == "counter"

    stream = {"db": "db0", "stream": "orders"}
    billing = {**stream, "group": "billing"}
    assert value(s, "redis_up") == 1
    assert value(s, "redis_stream_length", **stream) == 2
    assert value(s, "redis_stream_groups", **stream) == 2
    assert value(s, "redis_stream_last_generated_id", **stream) == 1700000000123
    assert value(s, "redis_stream_group_consumers", **billing) == 2
    assert value(s, "redis_stream_group_consumers", **stream, group="audit") == 0
    assert value(s, "redis_stream_group_messages_pending", **billing) == 2
    assert value(s, "redis_stream_group_lag", **billing) == 0
    assert value(s, "redis_stream_group_lag", **stream, group="audit") == 0
    assert value(s, "redis_stream_group_last_delivered_id", **billing) == 1700000000123
    assert value(s, "redis_stream_group_consumer_messages_pending", **billing, consumer="bob") == 1
    assert value(s, "redis_db_keys", db="db0") == 1
    assert value(s, "redis_connected_slaves") == 0
    assert value(s, "redis_commands_total", cmd="xreadgroup") == 2
    assert value(s, "redis_commands_duration_seconds_total", cmd="xreadgroup") > 0
    assert value(s, "redis_commands_total", cmd="xgroup|create") == 2
    (info,) = [dict(labels) for name, labels in s if name == "redis_instance_info"]
    assert info["role"] == "master" and info["tcp_port"] == str(metrics_server.port)
    assert info["redis_version"] == r.info("server")["redis_version"]
    assert info["run_id"] == r.info("server")["run_id"]


def test_aof_fsync_durations_are_a_histogram(tmp_path):
    mport = free_port()
    with ServerProcess(tmp_path / "sdb", "--appendonly", "yes", "--appendfsync", "always",
                       "--save", "", "--metrics-port", str(mport)) as srv:
        r = redis.Redis(port=srv.port)
        fams, before = scrape(mport)
        assert fams["streamdb_aof_fsync_duration_seconds"][0] == "histogram"
        for i in range(5):
            r.xadd("durable", {"i": i})
        _, s = scrape(mport)
    name = "streamdb_aof_fsync_duration_seconds"
    count = value(s, name + "_count")
    assert count >= value(before, name + "_count") + 5       # one fdatasync per write turn
    assert value(s, name + "_sum") > 0
    buckets = sorted((float(dict(labels)["le"]), v) for (n, labels), v in s.items()
                     if n == name + "_bucket")
    assert buckets[-1] == (float("inf"), count)
    assert [v for _, v in buckets] == sorted(v for _, v in buckets)     # cumulative


DOC_BLOCKS = {"docs/OPERATIONS.md": {"metrics-names"}}


def test_the_guides_curl_finds_redis_exporters_group_series(metrics_server, tmp_path):
    from docblocks import run_block
    r = redis.Redis(port=metrics_server.port)
    r.xadd("sensor:0", {"t": "19.5"})
    r.xgroup_create("sensor:0", "alerts", id="0")
    out = run_block("docs/OPERATIONS.md", "metrics-names", cwd=tmp_path,
                    ports={6379: metrics_server.port, 9121: metrics_server.metrics_port})
    assert out.splitlines() == ['redis_stream_group_lag{db="db0",stream="sensor:0",group="alerts"} 1',
                                'redis_stream_group_messages_pending{db="db0",stream="sensor:0",group="alerts"} 0']


def test_what_kedas_redis_streams_scaler_reads_matches_the_metrics(metrics_server):
    """KEDA's scaler asks the server (XPENDING summary, XINFO GROUPS lag, XLEN), not the
    metrics: the numbers it scales on are the ones the dashboard draws."""
    r = redis.Redis(port=metrics_server.port, decode_responses=True)
    for i in range(5):
        r.xadd("jobs", {"i": i})
    r.xgroup_create("jobs", "workers", id="0")
    r.xreadgroup("workers", "w1", {"jobs": ">"}, count=3)
    _, s = scrape(metrics_server.metrics_port)
    group = {"db": "db0", "stream": "jobs", "group": "workers"}
    assert r.xpending("jobs", "workers")["pending"] == value(s, "redis_stream_group_messages_pending", **group) == 3
    (info,) = r.xinfo_groups("jobs")
    assert info["lag"] == value(s, "redis_stream_group_lag", **group) == 2
    assert r.xlen("jobs") == value(s, "redis_stream_length", db="db0", stream="jobs") == 5


def test_a_scrape_sliced_across_loop_turns_reads_the_keyspace_as_it_changes(monkeypatch):
    """The loop runs commands between two slices of a scrape: streams deleted or added
    meanwhile neither break it nor show up stale.  (In-process, every key a slice of
    its own: the real Core, driven the way the endpoint drives it.)"""
    from inproc import argv
    from streamdb.server import metrics
    from streamdb.server.core import Core
    monkeypatch.setattr(metrics, "SLICE_SECONDS", 0.0)
    core = Core()
    client = core.replay_client()
    for i in range(5):
        core.execute(client, argv("XADD", f"s{i}", "1-1", "f", "v"))
    body: list[bytes] = []
    steps = metrics._render_steps(core, core.clock(), metrics.ScrapeRecord(), body)
    next(steps)                                   # the first slice: s0
    core.execute(client, argv("DEL", "s3"))
    core.execute(client, argv("XADD", "late", "1-1", "f", "v"))
    for _ in steps:
        core.execute(client, argv("XADD", "s4", "2-1", "f", "v"))      # between later slices
    _, s = parse_exposition(b"".join(body).decode())
    exported = {dict(labels)["key"] for name, labels in s if name == "streamdb_stream_length"}
    assert exported == {"s0", "s1", "s2", "s4"}
    assert value(s, "streamdb_stream_length", db="0", key="s4") == 2


def test_label_forms_of_the_three_kinds_of_family():
    """StreamDB's own labels (key), redis_exporter's (db0, stream) for its names, and
    redis_exporter's label names with StreamDB's db number for the streamdb_stream_group_*
    families: one Labels, rendered once per entity, feeds all three."""
    from streamdb.server.metrics import Exposition, Labels
    out = Exposition()
    out.declare("streamdb_group_pending", "gauge", "own form")
    out.alias("streamdb_group_pending", "redis_stream_group_messages_pending", "redis form")
    out.declare("streamdb_stream_group_lag_seconds", "gauge", "stream form")
    group = Labels.of({"db": "3", "key": 'o"rders'}).child("group", b"billing")
    out.table(("streamdb_group_pending", "streamdb_stream_group_lag_seconds")).add(group, (2, 1.5))
    out.add("streamdb_group_pending", 7, {"db": "0", "key": "k", "group": "g"})
    _, s = parse_exposition(out.text())
    assert s == {
        ("streamdb_group_pending", frozenset({"db": "3", "key": 'o"rders', "group": "billing"}.items())): 2,
        ("redis_stream_group_messages_pending",
         frozenset({"db": "db3", "stream": 'o"rders', "group": "billing"}.items())): 2,
        ("streamdb_stream_group_lag_seconds",
         frozenset({"db": "3", "stream": 'o"rders', "group": "billing"}.items())): 1.5,
        ("streamdb_group_pending", frozenset({"db": "0", "key": "k", "group": "g"}.items())): 7,
        ("redis_stream_group_messages_pending", frozenset({"db": "db0", "stream": "k", "group": "g"}.items())): 7,
    }


def test_a_scrape_reports_the_previous_ones_duration_and_longest_slice(metrics_server):
    mport = metrics_server.metrics_port
    r = redis.Redis(port=metrics_server.port)
    for i in range(50):
        r.xadd(f"s{i}", {"f": "v"})
    _, first = scrape(mport)
    assert value(first, "streamdb_metrics_last_scrape_duration_seconds") is None
    _, s = scrape(mport)
    took = value(s, "streamdb_metrics_last_scrape_duration_seconds")
    longest = value(s, "streamdb_metrics_last_scrape_longest_slice_seconds")
    assert 0 < longest <= took


# The stream, group and consumer lines of _pinned_keyspace_scrape, as the scrape wrote
# them before it formatted them from tables (issue 30): the text is the contract.
PINNED_KEYSPACE_LINES = [
    'streamdb_stream_length{db="0",key="o\\"rd\\\\ers\\n\\\\xff"} 4',
    'streamdb_stream_length{db="0",key="empty"} 0',
    'streamdb_stream_length{db="1",key="jobs"} 1',
    'streamdb_stream_last_entry_age_seconds{db="0",key="o\\"rd\\\\ers\\n\\\\xff"} 11745e-3',
    'streamdb_stream_last_entry_age_seconds{db="0",key="empty"} 1700000001745e-3',
    'streamdb_stream_last_entry_age_seconds{db="1",key="jobs"} 1750e-3',
    'streamdb_stream_entries_added_total{db="0",key="o\\"rd\\\\ers\\n\\\\xff"} 5',
    'streamdb_stream_entries_added_total{db="0",key="empty"} 1',
    'streamdb_stream_entries_added_total{db="1",key="jobs"} 1',
    'streamdb_group_lag{db="1",key="jobs",group="workers"} 0',
    'streamdb_group_pending{db="0",key="o\\"rd\\\\ers\\n\\\\xff",group="billing"} 2',
    'streamdb_group_pending{db="0",key="o\\"rd\\\\ers\\n\\\\xff",group="audit"} 0',
    'streamdb_group_pending{db="1",key="jobs",group="workers"} 0',
    'streamdb_group_oldest_pending_idle_seconds{db="0",key="o\\"rd\\\\ers\\n\\\\xff",group="billing"} 1750e-3',
    'streamdb_group_entries_read{db="0",key="o\\"rd\\\\ers\\n\\\\xff",group="billing"} 2',
    'streamdb_stream_group_lag_seconds{db="0",stream="o\\"rd\\\\ers\\n\\\\xff",group="billing"} 11747e-3',
    'streamdb_stream_group_lag_seconds{db="0",stream="o\\"rd\\\\ers\\n\\\\xff",group="audit"} 11745e-3',
    'streamdb_stream_group_lag_seconds{db="1",stream="jobs",group="workers"} 0e-3',
    'streamdb_stream_group_oldest_pending_seconds{db="0",stream="o\\"rd\\\\ers\\n\\\\xff",group="billing"} 11749e-3',
    'streamdb_stream_group_oldest_pending_seconds{db="0",stream="o\\"rd\\\\ers\\n\\\\xff",group="audit"} 0e-3',
    'streamdb_stream_group_oldest_pending_seconds{db="1",stream="jobs",group="workers"} 0e-3',
    'streamdb_stream_group_dead_lettered_total{db="0",stream="o\\"rd\\\\ers\\n\\\\xff",group="billing"} 0',
    'streamdb_stream_group_dead_lettered_total{db="0",stream="o\\"rd\\\\ers\\n\\\\xff",group="audit"} 0',
    'streamdb_stream_group_dead_lettered_total{db="1",stream="jobs",group="workers"} 0',
    'streamdb_consumer_pending{db="0",key="o\\"rd\\\\ers\\n\\\\xff",group="billing",consumer="alice"} 2',
    'streamdb_consumer_pending{db="1",key="jobs",group="workers",consumer="bob"} 0',
    'streamdb_consumer_idle_seconds{db="0",key="o\\"rd\\\\ers\\n\\\\xff",group="billing",consumer="alice"} 1750e-3',
    'streamdb_consumer_idle_seconds{db="1",key="jobs",group="workers",consumer="bob"} 1750e-3',
    'redis_stream_length{db="db0",stream="o\\"rd\\\\ers\\n\\\\xff"} 4',
    'redis_stream_length{db="db0",stream="empty"} 0',
    'redis_stream_length{db="db1",stream="jobs"} 1',
    'redis_stream_group_lag{db="db1",stream="jobs",group="workers"} 0',
    'redis_stream_group_messages_pending{db="db0",stream="o\\"rd\\\\ers\\n\\\\xff",group="billing"} 2',
    'redis_stream_group_messages_pending{db="db0",stream="o\\"rd\\\\ers\\n\\\\xff",group="audit"} 0',
    'redis_stream_group_messages_pending{db="db1",stream="jobs",group="workers"} 0',
    'redis_stream_group_entries_read{db="db0",stream="o\\"rd\\\\ers\\n\\\\xff",group="billing"} 2',
    'redis_stream_group_consumer_messages_pending{db="db0",stream="o\\"rd\\\\ers\\n\\\\xff",group="billing",consumer="alice"} 2',
    'redis_stream_group_consumer_messages_pending{db="db1",stream="jobs",group="workers",consumer="bob"} 0',
    'redis_stream_group_consumer_idle_seconds{db="db0",stream="o\\"rd\\\\ers\\n\\\\xff",group="billing",consumer="alice"} 1750e-3',
    'redis_stream_group_consumer_idle_seconds{db="db1",stream="jobs",group="workers",consumer="bob"} 1750e-3',
    'redis_db_keys{db="db0"} 2',
    'redis_db_keys{db="db1"} 1',
    'redis_db_keys_expiring{db="db0"} 0',
    'redis_db_keys_expiring{db="db1"} 0',
    'redis_stream_groups{db="db0",stream="o\\"rd\\\\ers\\n\\\\xff"} 2',
    'redis_stream_groups{db="db0",stream="empty"} 0',
    'redis_stream_groups{db="db1",stream="jobs"} 1',
    'redis_stream_last_generated_id{db="db0",stream="o\\"rd\\\\ers\\n\\\\xff"} 1699999990005',
    'redis_stream_last_generated_id{db="db0",stream="empty"} 5',
    'redis_stream_last_generated_id{db="db1",stream="jobs"} 1700000000000',
    'redis_stream_group_consumers{db="db0",stream="o\\"rd\\\\ers\\n\\\\xff",group="billing"} 1',
    'redis_stream_group_consumers{db="db0",stream="o\\"rd\\\\ers\\n\\\\xff",group="audit"} 0',
    'redis_stream_group_consumers{db="db1",stream="jobs",group="workers"} 1',
    'redis_stream_group_last_delivered_id{db="db0",stream="o\\"rd\\\\ers\\n\\\\xff",group="billing"} 1699999990002',
    'redis_stream_group_last_delivered_id{db="db0",stream="o\\"rd\\\\ers\\n\\\\xff",group="audit"} 1699999990003',
    'redis_stream_group_last_delivered_id{db="db1",stream="jobs",group="workers"} 1700000000000',
]


def _pinned_keyspace_scrape() -> list[str]:
    """Two databases; a binary key that needs escaping; a group with a pending entry
    and one whose lag and entries-read are unknown (a deleted entry after its id); an
    empty stream; a consumer that never read."""
    from inproc import FakeClock, argv
    from streamdb.server import metrics
    from streamdb.server.core import Core
    clock = FakeClock(1_700_000_000.0)
    core = Core(clock=clock)
    client = core.new_client(outbox=Delivered(lambda *_: None))
    key = b'o"rd\\ers\n\xff'
    for i in range(1, 6):
        core.execute(client, argv("XADD", key, f"{1_699_999_990_000 + i}-0", "f", "v"))
    core.execute(client, argv("XGROUP", "CREATE", key, "billing", "0"))
    core.execute(client, argv("XREADGROUP", "GROUP", "billing", "alice", "COUNT", "2", "STREAMS", key, ">"))
    core.execute(client, argv("XGROUP", "CREATE", key, "audit", "1699999990003-0"))
    core.execute(client, argv("XDEL", key, "1699999990004-0"))
    core.execute(client, argv("XADD", "empty", "MAXLEN", "0", "5-1", "f", "v"))
    core.execute(client, argv("SELECT", "1"))
    core.execute(client, argv("XADD", "jobs", "1700000000000-0", "f", "v"))
    core.execute(client, argv("XGROUP", "CREATE", "jobs", "workers", "$"))
    core.execute(client, argv("XGROUP", "CREATECONSUMER", "jobs", "workers", "bob"))
    clock.t += 1.5
    text = metrics.render(core, clock.t + 0.25)
    return [line for line in text.splitlines()
            if line.startswith(("streamdb_stream_", "streamdb_group_", "streamdb_consumer_",
                                "redis_stream_", "redis_db_keys"))
            and not line.startswith("streamdb_stream_cache_")]       # the process's node cache


@pytest.mark.parametrize("rows_per_piece, label_cache_max, streams_per_batch",
                         [(None, None, None), (1, None, None), (None, 2, None), (None, None, 2)])
def test_the_exposition_of_a_fixed_keyspace_is_pinned(monkeypatch, rows_per_piece, label_cache_max,
                                                      streams_per_batch):
    """Byte for byte, in the same order, whatever pieces a family is written in (a
    piece per line and a loop slice per piece: every piece boundary is crossed), on
    the first scrape and the next (which finds the labels cached), with label caches
    emptied every few names, and with the streams read in batches of one (a slice per
    stream) or two (a batch that fills up)."""
    from streamdb.server import metrics
    if rows_per_piece is not None:
        monkeypatch.setattr(metrics, "ROWS_PER_PIECE", rows_per_piece)
        monkeypatch.setattr(metrics, "SLICE_SECONDS", 0.0)
    if streams_per_batch is not None:
        monkeypatch.setattr(metrics, "STREAMS_PER_BATCH", streams_per_batch)
    if label_cache_max is not None:
        monkeypatch.setattr(metrics, "LABEL_CACHE_MAX", label_cache_max)
    metrics._entity_labels.clear()
    assert _pinned_keyspace_scrape() == PINNED_KEYSPACE_LINES
    assert _pinned_keyspace_scrape() == PINNED_KEYSPACE_LINES


def _in_process_core():
    """A real Core driven in-process, and a function that runs a command on it."""
    from inproc import argv
    from streamdb.server.core import Core
    core = Core()
    client = core.new_client(outbox=Delivered(lambda *_: None))
    return core, lambda *args: core.execute(client, argv(*args))


def _exported_entities(text: str) -> list[tuple]:
    """The streams', groups' and consumers' label sets a scrape exported, in order."""
    _, s = parse_exposition(text)
    names = ("streamdb_stream_length", "streamdb_group_pending", "streamdb_consumer_pending")
    return [dict(labels) for name, labels in s if name in names]


def test_the_series_cap_cuts_a_stream_between_its_groups_and_consumers(monkeypatch):
    """metrics-max-series counts a stream, then each of its groups followed by that
    group's consumers: a cap that falls inside a stream exports exactly its first
    series in that order, and counts the rest as truncated.  (In-process, every cap
    from 1 to past the whole keyspace.)"""
    from streamdb.server import metrics
    core, run = _in_process_core()
    for key in ("a", "b"):
        run("XADD", key, "1-1", "f", "v")
        for group, consumers in (("g1", ("c1", "c2")), ("g2", ()), ("g3", ("c3",))):
            run("XGROUP", "CREATE", key, group, "0")
            for consumer in consumers:
                run("XGROUP", "CREATECONSUMER", key, group, consumer)
    in_order = []                                     # depth first, as the cap counts
    for key in ("a", "b"):
        in_order.append({"db": "0", "key": key})
        for group, consumers in (("g1", ("c1", "c2")), ("g2", ()), ("g3", ("c3",))):
            in_order.append({"db": "0", "key": key, "group": group})
            in_order += [{"db": "0", "key": key, "group": group, "consumer": c} for c in consumers]
    for cap in range(1, len(in_order) + 2):
        core.config.set("metrics-max-series", str(cap))
        text = metrics.render(core)
        exported = _exported_entities(text)
        kept = in_order[:cap]
        assert sorted(map(sorted, map(dict.items, exported))) == sorted(map(sorted, map(dict.items, kept))), cap
        _, s = parse_exposition(text)
        assert value(s, "streamdb_metrics_series_truncated") == len(in_order) - len(kept)


def test_cached_labels_follow_renamed_groups_and_consumers(monkeypatch):
    """The Labels kept across scrapes (a stream's groups', a group's consumers') never
    show a group or consumer that is gone, nor miss a new one, and the values beside
    them are this scrape's: with the caches kept, and emptied every few labels."""
    from streamdb.server import metrics
    for cache_max in (metrics.LABEL_CACHE_MAX, 3):
        monkeypatch.setattr(metrics, "LABEL_CACHE_MAX", cache_max)
        metrics._entity_labels.clear()
        core, run = _in_process_core()
        run("XADD", "s", "1-1", "f", "v")
        run("XGROUP", "CREATE", "s", "old", "0")
        run("XGROUP", "CREATECONSUMER", "s", "old", "alice")
        _, before = parse_exposition(metrics.render(core))
        assert value(before, "streamdb_consumer_pending", db="0", key="s", group="old", consumer="alice") == 0
        run("XGROUP", "DESTROY", "s", "old")
        run("XGROUP", "CREATE", "s", "new", "0")
        run("XREADGROUP", "GROUP", "new", "bob", "STREAMS", "s", ">")
        run("XADD", "s", "2-1", "f", "v")
        text = metrics.render(core)
        assert [e for e in _exported_entities(text) if "group" in e] == [
            {"db": "0", "key": "s", "group": "new"},
            {"db": "0", "key": "s", "group": "new", "consumer": "bob"}]
        _, after = parse_exposition(text)
        assert value(after, "streamdb_consumer_pending", db="0", key="s", group="new", consumer="bob") == 1
        assert value(after, "redis_stream_group_lag", db="db0", stream="s", group="new") == 1
        assert value(after, "streamdb_stream_length", db="0", key="s") == 2


@pytest.mark.parametrize("rows_per_piece", [None, 1])
def test_a_count_that_changes_between_scrapes_shows_in_the_next(monkeypatch, rows_per_piece):
    """The pieces kept from the scrape before (_kept_pieces) are taken again only when
    their entities and values are the same: a length, a pending count and a lag that
    change between two scrapes show their new values, beside those that did not
    change; a piece per line, or all of a family's lines in one."""
    from streamdb.server import metrics
    if rows_per_piece is not None:
        monkeypatch.setattr(metrics, "ROWS_PER_PIECE", rows_per_piece)
    core, run = _in_process_core()
    for key in ("a", "b", "c"):
        run("XADD", key, "1-1", "f", "v")
        run("XGROUP", "CREATE", key, "g", "0")
        run("XREADGROUP", "GROUP", "g", "w", "STREAMS", key, ">")
    for _ in range(2):                       # the second scrape takes every piece again
        _, s = parse_exposition(metrics.render(core))
    assert [value(s, "redis_stream_length", db="db0", stream=k) for k in "abc"] == [1, 1, 1]
    run("XADD", "b", "2-1", "f", "v")
    run("XACK", "c", "g", "1-1")
    _, s = parse_exposition(metrics.render(core))
    assert [value(s, "streamdb_stream_length", db="0", key=k) for k in "abc"] == [1, 2, 1]
    assert [value(s, "redis_stream_length", db="db0", stream=k) for k in "abc"] == [1, 2, 1]
    assert [value(s, "streamdb_group_pending", db="0", key=k, group="g") for k in "abc"] == [1, 1, 0]
    assert [value(s, "streamdb_consumer_pending", db="0", key=k, group="g", consumer="w")
            for k in "abc"] == [1, 1, 0]
    assert [value(s, "redis_stream_group_lag", db="db0", stream=k, group="g") for k in "abc"] == [0, 1, 0]


def test_an_entry_from_the_future_is_zero_seconds_old():
    """An id set ahead of the clock (XADD with an explicit id) gives its stream a last
    entry age of 0, as the group ages count an entry from the future, not a negative
    one."""
    from streamdb.server import metrics
    core, run = _in_process_core()
    future_ms = int(core.clock() * 1000) + 3_600_000
    run("XADD", "ahead", f"{future_ms}-0", "f", "v")
    run("XGROUP", "CREATE", "ahead", "g", "0")
    _, samples = parse_exposition(metrics.render(core))
    ages = {name: value for (name, labels), value in samples.items()
            if name in ("streamdb_stream_last_entry_age_seconds", "streamdb_stream_group_lag_seconds")}
    assert ages == {"streamdb_stream_last_entry_age_seconds": 0.0,
                    "streamdb_stream_group_lag_seconds": 0.0}
