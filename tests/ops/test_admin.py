"""streamdb-admin run as a subprocess against real servers; output and resulting state checked."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import pytest
import redis

from helpers import ROOT, ServerProcess
from streamdb.cli.procs import free_port

ADMIN = [sys.executable, "-m", "streamdb.cli.admin"]


def run_admin(port: int, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([*ADMIN, "-p", str(port), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def table_rows(output: str) -> list[list[str]]:
    """The cells of every rich table row in ``output``."""
    return [[cell.strip() for cell in line.strip("│").split("│")]
            for line in output.splitlines() if line.startswith("│")]


class Worker:
    """A long-running admin subprocess whose output lines are collected as they come."""

    def __init__(self, port: int, *args: str) -> None:
        self.proc = subprocess.Popen([*ADMIN, "-p", str(port), *args], cwd=ROOT, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, predicate, timeout: float = 20.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(predicate(line) for line in list(self.lines)):
                return True
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        return any(predicate(line) for line in list(self.lines))

    def stop(self, sig=signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(15)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._reader.join(5)


@pytest.fixture
def sdb(tmp_path):
    with ServerProcess(tmp_path / "sdb", "--appendonly", "no", "--save", "") as srv:
        srv.client = redis.Redis(port=srv.port)
        yield srv
        srv.client.close()


def make_streams(r: redis.Redis) -> None:
    for i in range(5):
        r.xadd("big", {"n": i})
    r.xadd("small", {"n": 0})
    r.set("not-a-stream", "x")
    r.xgroup_create("big", "slow", id="0")          # lag 5
    r.xgroup_create("big", "fast", id="$")          # lag 0
    r.xgroup_create("small", "mid", id="0")         # lag 1
    r.xreadgroup("fast", "worker-1", {"big": ">"})  # nothing new: creates the consumer only
    r.xadd("big", {"n": 5})                         # slow 6, fast 1
    r.xreadgroup("fast", "worker-1", {"big": ">"})  # fast 0, one pending


def test_status_summarises_server_and_ranks_streams(sdb):
    make_streams(sdb.client)
    out = run_admin(sdb.port, "status")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "StreamDB" in text and "role      master" in text
    assert "aof       off" in text and "replicas  none" in text
    rows = table_rows(text)
    by_length = [r for r in rows if len(r) == 3]
    assert [r[:2] for r in by_length] == [["big", "6"], ["small", "1"]]   # no "not-a-stream"
    by_lag = [r for r in rows if len(r) == 4]
    assert [r[:3] for r in by_lag] == [["big", "slow", "6"], ["small", "mid", "1"], ["big", "fast", "0"]]
    assert by_lag[2][3] == "1"                     # fast has one pending entry
    assert "2 streams, 3 consumer groups" in text

    # Options before the subcommand work too, and --top cuts the tables.
    out = subprocess.run([*ADMIN, "-p", str(sdb.port), "status", "--top", "1"], cwd=ROOT,
                         capture_output=True, text=True, timeout=30)
    assert [r[:3] for r in table_rows(out.stdout) if len(r) == 4] == [["big", "slow", "6"]]


def test_status_against_redis_server(redis_server):
    r = redis.Redis(port=redis_server.port)
    r.flushall()
    try:
        make_streams(r)
        out = run_admin(redis_server.port, "status")
        assert out.returncode == 0, out.stderr
        assert "Redis 7." in out.stdout and "role      master" in out.stdout
        rows = table_rows(out.stdout)
        assert [r[:2] for r in rows if len(r) == 3] == [["big", "6"], ["small", "1"]]
        assert [r[:3] for r in rows if len(r) == 4][0] == ["big", "slow", "6"]
    finally:
        r.flushall()
        r.close()


def test_groups_table(sdb):
    make_streams(sdb.client)
    out = run_admin(sdb.port, "groups", "big")
    assert out.returncode == 0, out.stderr
    rows = {r[0]: r for r in table_rows(out.stdout)}
    # group rows: name, lag, pending, oldest pending idle, idle, last delivered, entries read
    assert rows["slow"][1:3] == ["6", "0"] and rows["slow"][3] == "-"
    assert rows["fast"][1:3] == ["0", "1"] and rows["fast"][3].endswith("s")
    assert rows["worker-1"][2] == "1" and rows["worker-1"][4].endswith("s")
    missing = run_admin(sdb.port, "groups", "nope")
    assert missing.returncode == 1 and "no such key" in missing.stderr


def _dead_letter_policy(r, key: str, group: str, most: int, dlq: str) -> None:
    r.execute_command("STREAMDB.GROUP", "SET", key, group, "MAXDELIVERIES", most, "DEADLETTER", dlq)


def test_dead_letter_list_and_replay(sdb):
    r = sdb.client
    ids = [r.xadd("jobs", {"job": str(i), "payload": f"p{i}"}) for i in range(3)]
    r.xgroup_create("jobs", "workers", id="0")
    _dead_letter_policy(r, "jobs", "workers", 1, "jobs:dlq")
    r.xreadgroup("workers", "alice", {"jobs": ">"})
    r.xreadgroup("workers", "alice", {"jobs": "0"})      # the server dead-letters all three
    letters = [i for i, _ in r.xrange("jobs:dlq")]
    assert len(letters) == 3

    out = run_admin(sdb.port, "dead-letter", "list", "jobs:dlq", "--count", "2")
    assert out.returncode == 0, out.stderr
    rows = table_rows(out.stdout)
    assert rows == [[letters[0].decode(), "jobs", ids[0].decode(), "workers", "alice", "1",
                     "job=0 payload=p0"],
                    [letters[1].decode(), "jobs", ids[1].decode(), "workers", "alice", "1",
                     "job=1 payload=p1"]]
    assert "... and 1 more" in out.stdout

    # One by id, with one that is not there: exit 1, the other one replayed.
    out = run_admin(sdb.port, "dead-letter", "replay", "jobs:dlq", letters[1].decode(), "9-9")
    assert out.returncode == 1
    assert "9-9 not found" in out.stdout and "1 replayed, 1 not replayed" in out.stdout
    assert r.xlen("jobs:dlq") == 2 and r.xlen("jobs") == 4
    new_id, fields = r.xrange("jobs")[-1]
    assert fields == {b"job": b"1", b"payload": b"p1"}
    assert r.xreadgroup("workers", "bob", {"jobs": ">"})[0][1] == [(new_id, fields)]

    out = run_admin(sdb.port, "dead-letter", "replay", "jobs:dlq", "--all")
    assert out.returncode == 0 and "2 replayed" in out.stdout
    assert r.xlen("jobs:dlq") == 0
    assert [f[b"job"] for _, f in r.xrange("jobs")] == [b"0", b"1", b"2", b"1", b"0", b"2"]
    # An entry the policy did not write is left alone, and so is one whose source key
    # holds another type by now (its XADD would fail: the XDEL must not run).
    r.xadd("jobs:dlq", {"some": "thing"})
    r.xadd("jobs:dlq", {"dlq-source": "gone", "dlq-id": "1-1", "dlq-group": "g",
                        "dlq-consumer": "c", "dlq-deliveries": 1, "f": "v"})
    r.set("gone", "a string")
    out = run_admin(sdb.port, "dead-letter", "replay", "jobs:dlq", "--all")
    assert out.returncode == 1 and "not written by a dead-letter policy" in out.stdout
    assert "not replayed: gone is no longer a stream" in out.stdout
    assert "0 replayed, 2 not replayed" in out.stdout and r.xlen("jobs:dlq") == 2


def test_dead_letter_replay_pages_through_a_large_stream(sdb):
    r = sdb.client
    pipe = r.pipeline(transaction=False)
    for i in range(250):
        pipe.xadd("dl", {"dlq-source": "many", "dlq-id": f"1-{i + 1}", "dlq-group": "g",
                         "dlq-consumer": "c", "dlq-deliveries": 2, "i": i}, id=f"1-{i + 1}")
    pipe.execute()
    out = run_admin(sdb.port, "dead-letter", "replay", "dl", "--all")
    assert out.returncode == 0, out.stderr
    assert "250 replayed" in out.stdout
    assert r.xlen("dl") == 0 and [f[b"i"] for _, f in r.xrange("many")] == \
        [b"%d" % i for i in range(250)]


def test_claim_idle_once_claims_only_idle_entries(sdb):
    r = sdb.client
    ids = [r.xadd("tasks", {"t": i}) for i in range(4)]
    r.xgroup_create("tasks", "g", id="0")
    r.xreadgroup("g", "crashed", {"tasks": ">"})
    # Two entries look as if delivered a minute ago; two were just delivered.
    r.xclaim("tasks", "g", "crashed", 0, ids[:2], idle=60_000)
    out = run_admin(sdb.port, "claim-idle", "tasks", "g", "--min-idle", "30000", "--consumer", "rescuer", "--once")
    assert out.returncode == 0, out.stderr
    assert f"claimed 2: {ids[0].decode()} {ids[1].decode()}" in out.stdout
    owners = {p["message_id"]: p["consumer"] for p in r.xpending_range("tasks", "g", "-", "+", 10)}
    assert owners == {ids[0]: b"rescuer", ids[1]: b"rescuer", ids[2]: b"crashed", ids[3]: b"crashed"}


def test_claim_idle_passes_do_not_count_as_deliveries_for_the_dead_letter_policy(sdb):
    r = sdb.client
    ids = [r.xadd("jobs", {"t": i}) for i in range(3)]
    r.xgroup_create("jobs", "g", id="0")
    _dead_letter_policy(r, "jobs", "g", 2, "jobs:dlq")
    r.xreadgroup("g", "crashed", {"jobs": ">"})          # delivered once, never processed
    for _ in range(3):
        out = run_admin(sdb.port, "claim-idle", "jobs", "g", "--min-idle", "0", "--consumer", "worker",
                        "--once")
        assert out.returncode == 0, out.stderr
        assert f"claimed 3: {' '.join(i.decode() for i in ids)}" in out.stdout
        rows = r.xpending_range("jobs", "g", "-", "+", 10)
        assert [(p["consumer"], p["times_delivered"]) for p in rows] == [(b"worker", 1)] * 3
    assert r.xlen("jobs:dlq") == 0
    # The processor reading its claimed entries is a delivery (the second): the next
    # claim would hand them out a third time, so the server dead-letters them instead.
    r.xreadgroup("g", "worker", {"jobs": "0"})
    out = run_admin(sdb.port, "claim-idle", "jobs", "g", "--min-idle", "0", "--consumer", "worker",
                    "--once")
    assert out.returncode == 0 and "done: 0 claimed" in out.stdout
    assert r.xlen("jobs:dlq") == 3 and r.xpending("jobs", "g")["pending"] == 0


def test_claim_idle_once_fails_fast_when_the_server_is_down():
    port = free_port()       # nothing listens there
    # Without the fix the tool retries forever and the timeout fails the test.
    out = run_admin(port, "claim-idle", "q", "g", "--min-idle", "1", "--consumer", "w", "--once",
                    timeout=60)
    assert out.returncode == 2
    assert "retrying" not in out.stdout
    assert out.stderr.strip().splitlines() == [out.stderr.strip()]
    assert out.stderr.startswith(f"error: cannot talk to 127.0.0.1:{port}")


def test_help_is_double_dash_because_dash_h_is_the_host():
    out = subprocess.run([*ADMIN, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "-h is the host, as in redis-cli" in out.stdout
    sub = subprocess.run([*ADMIN, "claim-idle", "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=30)
    text = " ".join(sub.stdout.split())      # argparse wraps lines
    assert sub.returncode == 0 and "JUSTID" in text and "delivery count" in text


def test_claim_idle_loop_survives_a_server_restart_and_stops_on_signal(tmp_path):
    srv = ServerProcess(tmp_path / "sdb", "--appendonly", "no", "--save", "").start()
    try:
        redis.Redis(port=srv.port).xgroup_create("q", "g", id="0", mkstream=True)
        worker = Worker(srv.port, "claim-idle", "q", "g", "--min-idle", "1000", "--consumer", "w",
                        "--interval", "0.2", "--max-backoff", "0.5")
        try:
            assert worker.wait_for(lambda line: line.startswith("pass done"))
            srv.kill9()
            assert worker.wait_for(lambda line: line.startswith("connection lost"))
            srv = ServerProcess(tmp_path / "sdb", "--appendonly", "no", "--save", "", port=srv.port).start()
            # The restarted server is empty: until the group exists again the
            # worker reports NOGROUP and keeps going.
            r = redis.Redis(port=srv.port)
            eid = r.xadd("q", {"f": "v"})
            r.xgroup_create("q", "g", id="0")
            r.xreadgroup("g", "dead", {"q": ">"})
            r.xclaim("q", "g", "dead", 0, [eid], idle=5000)
            assert worker.wait_for(lambda line: line == f"claimed 1: {eid.decode()}"), worker.lines
            assert r.xpending_range("q", "g", "-", "+", 1)[0]["consumer"] == b"w"
        finally:
            code = worker.stop(signal.SIGINT)
        assert code == 0
        assert worker.lines[-1] == "stopped by signal"
    finally:
        srv.stop()


def test_claim_idle_reports_a_missing_group(sdb):
    out = run_admin(sdb.port, "claim-idle", "nokey", "g", "--min-idle", "1", "--consumer", "c", "--once")
    assert out.returncode == 1 and "NOGROUP" in out.stderr


def test_password_and_replication_in_status(tmp_path):
    with ServerProcess(tmp_path / "p", "--appendonly", "no", "--save", "") as primary:
        # Set after start: the helper's readiness probe pings without AUTH.
        redis.Redis(port=primary.port).config_set("requirepass", "s3cret")
        refused = run_admin(primary.port, "status")
        assert refused.returncode != 0 and "Authentication required" in refused.stderr
        with ServerProcess(tmp_path / "r", "--appendonly", "no", "--save", "", "--masterauth", "s3cret",
                           "--replicaof", f"127.0.0.1 {primary.port}") as replica:
            deadline = time.monotonic() + 15
            while True:
                out = run_admin(primary.port, "-a", "s3cret", "status")
                if "online behind 0 bytes" in out.stdout or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert out.returncode == 0, out.stderr
            assert "online behind 0 bytes" in out.stdout
            with_user = run_admin(primary.port, "--user", "default", "-a", "s3cret", "groups", "none")
            assert with_user.returncode == 1 and "no such key" in with_user.stderr   # authenticated
            on_replica = run_admin(replica.port, "status")
            assert f"slave of 127.0.0.1:{primary.port}, link up" in on_replica.stdout
