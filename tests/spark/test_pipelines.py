"""The streamdb-spark pipelines (archive + safe trim, reconciliation, group report), run in-process."""

import json
import os
from pathlib import Path

import pytest
import redis

from streamdb.spark.pipelines.cli import main as streamdb_spark

ROOT = Path(__file__).resolve().parents[2]


def _client(server):
    c = redis.Redis(port=server.port)
    c.flushall()
    return c


def test_archive_is_resumable_and_trims_only_what_groups_acked(spark, server, url, tmp_path, capsys):
    r = _client(server)
    day = 86_400_000
    for i in range(1, 31):
        r.xadd("arc:a", {"i": str(i)}, id=f"{((i - 1) // 10) * day + 1000 + i}-0")
    r.xgroup_create("arc:a", "g", id="0")
    r.xreadgroup("g", "c", {"arc:a": ">"}, count=20)         # 20 delivered ...
    ids = [e[0] for e in r.xrange("arc:a")]
    r.xack("arc:a", "g", *ids[:12])                            # ... 12 acknowledged
    out = tmp_path / "archive"
    assert streamdb_spark(["archive", "--url", url, "--streams", "arc:*", "--out", str(out)]) == 0
    dates = sorted(p.name for p in out.glob("date=*"))
    assert dates == ["date=1970-01-01", "date=1970-01-02", "date=1970-01-03"]
    assert spark.read.parquet(str(out)).count() == 30
    # Trimmed up to the group's oldest pending entry (ids[12]), which stays.
    assert r.xrange("arc:a", count=1)[0][0] == ids[12] and r.xlen("arc:a") == 18

    # A crash after writing but before the run was recorded: the re-run redoes that run only.
    for i in range(31, 36):
        r.xadd("arc:a", {"i": str(i)}, id=f"{5 * day + i}-0")
    state = json.loads((out / "_streamdb_archive.json").read_text())
    state["pending"] = {"run": 2, "starts": {"arc:a": state["archived"]["arc:a"]},
                        "ends": {"arc:a": f"{5 * day + 35}-0"}}
    (out / "_streamdb_archive.json").write_text(json.dumps(state))
    (out / "date=1970-01-06" / "run=2").mkdir(parents=True)
    (out / "date=1970-01-06" / "run=2" / "part-leftover.parquet").write_bytes(b"junk")
    assert streamdb_spark(["archive", "--url", url, "--streams", "arc:*", "--out", str(out), "--no-trim"]) == 0
    got = sorted(int(x.fields["i"]) for x in spark.read.parquet(str(out)).collect())
    assert got == list(range(1, 36))
    assert "resuming run 2" in capsys.readouterr().out


def test_reconcile_reports_the_keys_that_differ(spark, server, url, tmp_path, capsys):
    r = _client(server)
    for i in range(40):
        r.xadd("pay:1", {"acct": f"a{i % 4}", "cents": str(i)})
    totals = {f"a{k}": sum(i for i in range(40) if i % 4 == k) for k in range(4)}
    for k, v in totals.items():
        r.set(f"bal:{k}", v)
    args = ["reconcile", "--url", url, "--streams", "pay:*", "--key-field", "acct", "--amount-field", "cents",
            "--table-prefix", "bal:"]
    assert streamdb_spark(args) == 0
    r.incrby("bal:a2", 5)
    r.set("bal:ghost", 1)
    assert streamdb_spark(args + ["--out", str(tmp_path / "rep.csv")]) == 1
    text = capsys.readouterr().out
    assert "5 keys, 3 match, 2 differ" in text and "ghost" in text
    assert (tmp_path / "rep.csv").read_text().count("\n") == 6


def test_group_report(spark, server, url, capsys, monkeypatch):
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    r = _client(server)
    for i in range(10):
        r.xadd("rep:1", {"i": str(i)}, id=f"{1000 + i}-0")
    r.xgroup_create("rep:1", "slow", id="0")
    r.xgroup_create("rep:1", "done", id="$")
    r.xreadgroup("slow", "c1", {"rep:1": ">"}, count=4)
    assert streamdb_spark(["group-report", "--url", url, "--streams", "rep:*"]) == 0
    assert os.environ["SPARK_LOCAL_IP"] == "127.0.0.1"      # a session Spark would start binds to loopback
    lines = capsys.readouterr().out.splitlines()
    slow = next(line for line in lines if " slow " in line).split()
    done = next(line for line in lines if " done " in line).split()
    assert slow[:6] == ["rep:1", "slow", "1", "4", "6", "1003-0"] and slow[6] == "1000-0"
    assert done[:5] == ["rep:1", "done", "0", "0", "0"]


@pytest.mark.soak
def test_bench_spark_runs(tmp_path):
    """tools/bench_spark.py end to end on a small data set (its own server and session)."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "bench_spark.py"), "--quick", "--entries", "3000",
                          "--stream-seconds", "8", "--rate", "2000"],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "sink, XADD IDMP" in out.stdout and "redis-py XRANGE loop" in out.stdout
    assert "CPU per entry" in out.stdout and "lag trend" in out.stdout
