"""streamdb-admin streams and tail, run as subprocesses against real servers.

streams: every stream with its length, groups, bytes, resident share and retention, read
in pipelined SCAN batches; tail: a follower (XREAD BLOCK) or a group's consumer
(XREADGROUP + XACK) that prints one line an entry and ends on --count or Ctrl-C."""

from __future__ import annotations

import os
import pty
import signal
import subprocess

import pytest
import redis

from docblocks import run_block
from helpers import ServerProcess, wait_until
from test_admin import ADMIN, ROOT, Worker, run_admin
from test_operations_guide import fill_sensor_streams

DOC_BLOCKS = {"docs/OPERATIONS.md": {"stream-tools"}}


@pytest.fixture
def sdb(tmp_path):
    # A small node cache, so that a stream can be mostly cold (on disk only).
    with ServerProcess(tmp_path / "sdb", "--appendonly", "no", "--save", "",
                       "--stream-cache-size", "64kb", "--stream-node-max-entries", "10") as srv:
        srv.client = redis.Redis(port=srv.port)
        yield srv
        srv.client.close()


def plain_rows(output: str) -> dict[str, list[str]]:
    """streams' plain output: the header, then the cells of each stream by key."""
    lines = output.splitlines()
    assert lines[0].split() == ["stream", "length", "groups", "bytes", "resident", "retention"]
    rows = {}
    for line in lines[1:]:
        key, rest = (line[1:].split('" ', 1) if line.startswith('"') else line.split(" ", 1))
        cells = rest.split(" ", 4)
        rows[key] = cells[:4] + [cells[4].strip('"')]
    return rows


def retention_get(r: redis.Redis, key: str) -> dict:
    reply = r.execute_command("STREAMDB.RETENTION", "GET", key)
    return reply if isinstance(reply, dict) else dict(zip(reply[0::2], reply[1::2]))


def fill(r: redis.Redis, key: str, count: int, value: bytes = b"v") -> list[bytes]:
    pipe = r.pipeline(transaction=False)
    for i in range(count):
        pipe.xadd(key, {"n": i, "v": value})
    return pipe.execute()


def test_streams_lists_every_stream_with_bytes_resident_share_and_retention(sdb):
    r = sdb.client
    # More streams than one SCAN page / pipeline batch (200), plus what else a database holds.
    pipe = r.pipeline(transaction=False)
    for i in range(450):
        pipe.xadd(f"s:{i:03}", {"n": i})
    pipe.set("not-a-stream", "x")
    pipe.execute()
    fill(r, "cold", 3000, b"x" * 100)                  # 300 nodes, about 330 KB
    r.xadd("with space", {"a": 1})
    r.xgroup_create("cold", "g1", id="0")
    r.xgroup_create("cold", "g2", id="$")
    r.execute_command("STREAMDB.RETENTION", "SET", "cold", "MAXAGE", 86_400_000, "ACKED")
    r.config_set("stream-retention-max-bytes", "1gb")
    # A snapshot makes the sealed nodes durable; past the 64 KB cache they go cold.
    r.bgsave()
    wait_until(lambda: r.info("persistence")["rdb_bgsave_in_progress"] == 0
               and r.info("memory")["stream_cache_evictions"] > 0, what="nodes to go cold")

    out = run_admin(sdb.port, "streams")
    assert out.returncode == 0, out.stderr
    rows = plain_rows(out.stdout)
    assert len(rows) == 452 and "not-a-stream" not in rows
    cold = retention_get(r, "cold")
    assert 0 < cold[b"resident-bytes"] < cold[b"bytes"] // 2
    share = f"{100 * cold[b'resident-bytes'] / cold[b'bytes']:.0f}%"
    assert rows["cold"] == ["3000", "2", str(cold[b"bytes"]), share, "age 1d, 1.0 GiB, acked"]
    small = retention_get(r, "s:007")
    assert rows["s:007"] == ["1", "0", str(small[b"bytes"]), "100%", "1.0 GiB (default)"]
    assert rows["with space"][:2] == ["1", "0"]

    only = plain_rows(run_admin(sdb.port, "streams", "--match", "s:01*").stdout)
    assert sorted(only) == [f"s:{i:03}" for i in range(10, 20)]


def test_streams_draws_a_table_on_a_terminal(sdb):
    r = sdb.client
    fill(r, "b", 2)
    r.xadd("a", {"k": "v"})
    controller, terminal = pty.openpty()
    proc = subprocess.Popen([*ADMIN, "-p", str(sdb.port), "streams"], cwd=ROOT, stdout=terminal,
                            stderr=terminal, env={**os.environ, "NO_COLOR": "1", "COLUMNS": "120"})
    os.close(terminal)
    chunks = []
    try:
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:            # EIO: the terminal's last writer is gone
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert proc.wait(15) == 0
    finally:
        os.close(controller)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = b"".join(chunks).decode()
    rows = [[cell.strip() for cell in line.strip().strip("│").split("│")]
            for line in text.splitlines() if line.strip().startswith("│")]
    # Sorted by key; bytes in units.
    assert [row[:3] for row in rows] == [["a", "1", "0"], ["b", "2", "0"]]
    assert rows[0][3].endswith(" B") and rows[0][4:] == ["100%", "none"]
    assert "2 streams, 3 entries" in text


def test_streams_reports_a_refused_command_instead_of_listing_nothing(sdb):
    r = sdb.client
    r.xadd("s", {"k": "v"})
    r.acl_setuser("viewer", enabled=True, passwords=["+pw"], keys=["~*"],
                  commands=["+@all", "-streamdb.retention"])
    out = run_admin(sdb.port, "--user", "viewer", "-a", "pw", "streams")
    assert out.returncode == 1
    assert out.stderr == ("error: User viewer has no permissions to run the "
                          "'streamdb.retention|get' command\n")
    assert out.stdout.splitlines()[1:] == []           # the header only: no stream is hidden


def test_streams_against_redis_server(redis_server):
    r = redis.Redis(port=redis_server.port)
    r.flushall()
    try:
        r.xadd("orders", {"item": "book"})
        r.xgroup_create("orders", "billing", id="0")
        out = run_admin(redis_server.port, "streams")
        assert out.returncode == 0, out.stderr
        row = plain_rows(out.stdout)["orders"]
        assert row[:2] == ["1", "1"] and int(row[2]) == r.memory_usage("orders")
        assert row[3:] == ["-", "-"]
    finally:
        r.flushall()
        r.close()


def test_the_tools_say_in_one_line_when_the_server_is_not_there(tmp_path):
    with ServerProcess(tmp_path / "gone") as srv:
        port = srv.port
    for args in (["streams"], ["tail", "s"]):
        out = run_admin(port, *args)
        assert out.returncode == 2 and out.stdout == ""
        assert out.stderr.startswith(f"error: cannot talk to 127.0.0.1:{port}: ")
        assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


def blocked_readers(r: redis.Redis) -> int:
    return r.info("clients")["blocked_clients"]


def test_tail_follows_new_entries_and_stops_after_count(sdb):
    r = sdb.client
    fill(r, "log", 3)                                  # before the tail: not shown
    tail = Worker(sdb.port, "tail", "log", "--count", "4")
    try:
        wait_until(lambda: blocked_readers(r) == 1, what="the tail to block")
        ids = [r.xadd("log", {"msg": f"line {i}", "n": i, "a=b": "c"}) for i in range(5)]
        assert tail.proc.wait(15) == 0
        tail.stop()
        assert tail.lines == [f'{eid.decode()} msg="line {i}" n={i} "a=b"=c' for i, eid in enumerate(ids[:4])]
    finally:
        tail.stop()


def test_tail_from_an_id_or_a_time_reads_history_first(sdb):
    r = sdb.client
    for ms in (1000, 2000, 3000, 4000):
        r.xadd("hist", {"at": ms}, id=f"{ms}-0")
    whole = run_admin(sdb.port, "tail", "hist", "--from", "0", "--count", "4")
    assert whole.returncode == 0 and whole.stdout.split("\n")[:4] == [
        "1000-0 at=1000", "2000-0 at=2000", "3000-0 at=3000", "4000-0 at=4000"]
    # From 1970-01-01T00:00:02Z: the entries of that millisecond and later.
    timed = run_admin(sdb.port, "tail", "hist", "--from-time", "1970-01-01T00:00:02+00:00", "--count", "2")
    assert timed.stdout.splitlines() == ["2000-0 at=2000", "3000-0 at=3000"]
    after = run_admin(sdb.port, "tail", "hist", "--from", "2000-0", "--count", "1")
    assert after.stdout.splitlines() == ["3000-0 at=3000"]
    bad = run_admin(sdb.port, "tail", "hist", "--from-time", "yesterday")
    assert bad.returncode == 2 and "not an ISO 8601 time" in bad.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_tail_ends_cleanly_on_ctrl_c(sdb, sig):
    r = sdb.client
    tail = Worker(sdb.port, "tail", "live")           # a stream that does not exist yet
    try:
        wait_until(lambda: blocked_readers(r) == 1, what="the tail to block")
        eid = r.xadd("live", {"k": "v"})
        assert tail.wait_for(lambda line: line == f"{eid.decode()} k=v")
        assert tail.stop(sig) == 0
        assert "Traceback" not in "\n".join(tail.lines) and len(tail.lines) == 1
    finally:
        tail.stop()


def test_tail_with_a_group_consumes_and_acks_what_it_printed(sdb):
    r = sdb.client
    ids = fill(r, "jobs", 5)
    r.xgroup_create("jobs", "workers", id="0")
    out = run_admin(sdb.port, "tail", "jobs", "--group", "workers", "--consumer", "tailer", "--count", "3")
    assert out.returncode == 0, out.stderr
    assert [line.split()[0] for line in out.stdout.splitlines()] == [i.decode() for i in ids[:3]]
    group = r.xinfo_groups("jobs")[0]
    # Exactly three taken from the group, all acknowledged: two still to deliver.
    assert group["pending"] == 0 and group["last-delivered-id"] == ids[2] and group["lag"] == 2

    kept = run_admin(sdb.port, "tail", "jobs", "--group", "workers", "--consumer", "looker",
                     "--no-ack", "--count", "2")
    assert kept.returncode == 0, kept.stderr
    pending = r.xpending_range("jobs", "workers", "-", "+", 10)
    assert [(p["message_id"], p["consumer"]) for p in pending] == [(ids[3], b"looker"), (ids[4], b"looker")]

    nogroup = run_admin(sdb.port, "tail", "jobs", "--group", "nope", "--consumer", "c", "--count", "1")
    assert nogroup.returncode == 1 and nogroup.stderr.startswith("error: NOGROUP")
    mixed = run_admin(sdb.port, "tail", "jobs", "--group", "workers", "--count", "1")
    assert mixed.returncode == 1 and "--group and --consumer go together" in mixed.stderr


def test_tail_into_a_closed_pipe_stops_quietly(sdb):
    r = sdb.client
    fill(r, "many", 5)
    # As `streamdb-admin tail many | head -1`: the reader takes a line and goes away.
    proc = subprocess.Popen([*ADMIN, "-p", str(sdb.port), "tail", "many", "--from", "0"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().endswith(" n=0 v=v\n")
        proc.stdout.close()
        # The next write meets the closed pipe: entries keep coming until it does.
        wait_until(lambda: r.xadd("many", {"more": 1}) and proc.poll() is not None,
                   what="the tail to notice the closed pipe")
        assert proc.returncode == 0 and proc.stderr.read() == ""
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_the_operations_guide_stream_tools_block(sdb):
    fill_sensor_streams(sdb.port)                      # sensor:0, :1, :2, 100 entries each
    r = sdb.client
    first = [eid.decode() for eid, _ in r.xrange("sensor:0", count=3)]
    out = run_block("docs/OPERATIONS.md", "stream-tools", cwd=ROOT, PORT=sdb.port).splitlines()
    # sort -n puts the header (no number) last; the three streams are equally long.
    assert sorted(line.split()[:3] for line in out[:3]) == [
        ["sensor:0", "100", "1"], ["sensor:1", "100", "0"], ["sensor:2", "100", "0"]]
    assert out[3].startswith("stream length groups")
    assert [line.split()[0] for line in out[4:7]] == first and out[7] == "OK"
    assert [line.split()[0] for line in out[8:]] == first
    audit = [g for g in r.xinfo_groups("sensor:0") if g["name"] == b"audit"][0]
    assert audit["pending"] == 0 and audit["entries-read"] == 3
