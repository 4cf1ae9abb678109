"""The Grafana dashboard against a real Prometheus: every panel's query returns the series
it is drawn from.

Debian's Prometheus (``make test`` installs it) scrapes a primary and its replica every
second on loopback, with a config and storage of its own in tmp_path; the test then reads
docs/grafana/streamdb-log.json and runs each panel's expression through Prometheus's HTTP
API (/api/v1/query), with Grafana's variables set as a user who picked every server would.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request

import pytest
import redis

from helpers import ROOT, ServerProcess, terminate, wait_until
from streamdb.cli.procs import free_port

PROMETHEUS = shutil.which("prometheus")
DASHBOARD = ROOT / "docs" / "grafana" / "streamdb-log.json"

# Grafana's variables as a user who picked every server sees them ($__rate_interval: a
# window holding several of the 1 s scrapes).
VARIABLES = {"$__rate_interval": "30s", "$instance": ".*"}

STREAMS = {"orders", "events", "old"}
GROUPS = {("orders", "billing"), ("orders", "audit"), ("events", "indexer")}

pytestmark = pytest.mark.skipif(PROMETHEUS is None,
                                reason="prometheus is not installed (make test installs "
                                       "Debian's package)")


def dashboard_targets() -> list[tuple[str, dict]]:
    """(panel title, target) for every query of the dashboard."""
    board = json.loads(DASHBOARD.read_text())
    return [(panel["title"], target) for panel in board["panels"]
            for target in panel.get("targets", [])]


def with_variables(expr: str) -> str:
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, f"a Grafana variable the test does not set: {expr}"
    return expr


class Prometheus:
    """A Prometheus process scraping ``targets`` every second, on a free loopback port."""

    def __init__(self, tmp_path, targets: list[str]) -> None:
        self.port = free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: streamdb\n    static_configs:\n"
            f"      - targets: {json.dumps(targets)}\n")
        self.log = open(tmp_path / "prometheus.log", "ab")
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT)

    def query(self, expr: str) -> dict:
        """/api/v1/query's data for ``expr`` (status success asserted)."""
        url = (f"http://127.0.0.1:{self.port}/api/v1/query?"
               + urllib.parse.urlencode({"query": expr}))
        with urllib.request.urlopen(url, timeout=10) as resp:
            reply = json.loads(resp.read())
        assert reply["status"] == "success", (expr, reply)
        return reply["data"]

    def series(self, expr: str) -> list[dict]:
        """The label sets of the vector ``expr`` returns."""
        data = self.query(expr)
        assert data["resultType"] == "vector", (expr, data["resultType"])
        return [item["metric"] for item in data["result"]]

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"prometheus exited with {self.proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        terminate(self.proc, timeout=20)
        self.log.close()


def fill(r: redis.Redis) -> None:
    """Streams and groups every panel has something to show of: lag, pending entries, a
    consumer, a retention trim, a dead letter."""
    for i in range(6):
        r.xadd("orders", {"n": i})
        r.xadd("events", {"n": i})
    r.xgroup_create("orders", "billing", id="0")
    r.xgroup_create("orders", "audit", id="0")          # never reads: lag, no pending
    r.xgroup_create("events", "indexer", id="0")
    r.xreadgroup("billing", "alice", {"orders": ">"}, count=2)
    for entry_id, _ in r.xreadgroup("indexer", "ix", {"events": ">"})[0][1]:
        r.xack("events", "indexer", entry_id)
    # Ids from 1970: retention with a one-second max age removes all but the last node.
    for i in range(1, 11):
        r.xadd("old", {"n": i}, id=f"{i}-1")
    r.execute_command("STREAMDB.RETENTION", "SET", "old", "MAXAGE", 1000)
    r.execute_command("STREAMDB.GROUP", "SET", "orders", "billing", "MAXDELIVERIES", 1,
                      "DEADLETTER", "orders:dead")
    r.xreadgroup("billing", "alice", {"orders": "0"})        # a second delivery: dead letters


@pytest.fixture
def cluster(tmp_path):
    """A primary (AOF, fsync always, small nodes for retention) and its replica, each with
    its metrics port, and a Prometheus scraping both."""
    pm, rm = free_port(), free_port()
    with ServerProcess(tmp_path / "primary", "--appendonly", "yes", "--appendfsync", "always",
                       "--save", "", "--stream-node-max-entries", "2",
                       "--metrics-port", str(pm)) as primary, \
         ServerProcess(tmp_path / "replica", "--appendonly", "yes", "--save", "",
                       "--replicaof", f"127.0.0.1 {primary.port}",
                       "--metrics-port", str(rm)) as replica:
        prom = Prometheus(tmp_path, [f"127.0.0.1:{pm}", f"127.0.0.1:{rm}"])
        try:
            wait_until(prom.ready, timeout=60, what="prometheus ready")
            r = redis.Redis(port=primary.port)
            fill(r)
            wait_until(lambda: redis.Redis(port=replica.port).xlen("orders") == 6,
                       what="the replica caught up")
            prom.primary_instance, prom.replica_instance = f"127.0.0.1:{pm}", f"127.0.0.1:{rm}"
            prom.instances = {prom.primary_instance, prom.replica_instance}
            prom.primary = r
            yield prom
        finally:
            prom.stop()


def test_every_dashboard_query_returns_its_series(cluster):
    prom = cluster
    r = prom.primary
    wait_until(lambda: r.xlen("old") < 10, what="retention trimming the old stream")
    # Three scrapes of both servers with all the data in (and a counter born with the
    # trim), as the rate() and increase() windows need two samples or more.
    data_in = time.monotonic()

    def scrapes_since_data_in() -> int:
        seconds = max(1, int(time.monotonic() - data_in))
        return len(prom.series(f"count_over_time(redis_up[{seconds}s]) >= 3"))
    wait_until(lambda: scrapes_since_data_in() == 2, timeout=60, what="three scrapes of both servers")
    r.xadd("orders", {"n": "late"})               # an fsync inside the rate window
    wait_until(lambda: prom.series('streamdb_stream_length{key="orders"} == 7'),
               timeout=30, what="a scrape after the last write")

    targets = dashboard_targets()
    assert len(targets) >= 30
    first_query_series = {}
    for title, target in targets:
        expr = with_variables(target["expr"])
        series = prom.series(expr)
        assert series, f"panel {title!r}: {expr} returned nothing"
        for labels in series:
            for name in re.findall(r"{{(\w+)}}", target["legendFormat"]):
                assert labels.get(name), f"panel {title!r}: a series without {name}: {labels}"
            assert labels.get("instance", prom.primary_instance) in prom.instances, labels
            assert labels.get("stream", labels.get("key", "old")) in STREAMS | {"orders:dead"}, labels
        if target["refId"] == "A":
            first_query_series[title] = series

    for title, label_names, values in EXPECTED:
        assert title in first_query_series, f"no panel {title!r}"
        shown = {tuple(labels.get(n) for n in label_names) for labels in first_query_series[title]}
        assert values(prom) <= shown, f"panel {title!r} shows {shown}"


# (panel title, labels, the values its first query must show at least): the series the
# data of ``fill`` puts in each panel, on top of "non-empty, with the legend's labels".
EXPECTED = [
    ("Up", ("instance",), lambda prom: {(i,) for i in prom.instances}),
    ("Connected replicas", ("instance",), lambda prom: {(i,) for i in prom.instances}),
    ("Lag per group (entries)", ("stream", "group"), lambda prom: GROUPS),
    ("Pending entries per group", ("stream", "group"), lambda prom: GROUPS),
    ("Consumers per group", ("stream", "group"), lambda prom: GROUPS),
    ("Time lag per group", ("stream", "group"), lambda prom: GROUPS),
    ("Oldest pending entry per group", ("stream", "group"), lambda prom: {("orders", "billing")}),
    ("Dead letters per second", ("stream", "group"), lambda prom: {("orders", "billing")}),
    ("Stream length", ("stream",), lambda prom: {(s,) for s in STREAMS}),
    ("Entries appended per second", ("key",), lambda prom: {(s,) for s in STREAMS}),
    ("Entries removed by retention, by stream", ("key",), lambda prom: {("old",)}),
    ("AOF fsync latency", ("instance",), lambda prom: {(prom.primary_instance,)}),
    ("Replica lag (bytes)", ("instance",), lambda prom: {(prom.primary_instance,)}),
    ("Link to the primary", ("instance",), lambda prom: {(prom.replica_instance,)}),
]
