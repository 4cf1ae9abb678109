"""The AOF's manifest and segment headers under faults, on real servers and real files:
a disk that fills exactly when the AOF rotates, a lost manifest, a damaged one, a last
segment whose content never reached the disk.  What is checked: no acknowledged write is
lost, a start-up refuses what it cannot trust (naming the file and the way out, with no
traceback, changing no byte), and streamdb-check-aof reports the same and repairs it.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from helpers import ROOT, ServerProcess, wait_until

AOF = ("--appendonly", "yes", "--save", "", "--stream-cache-size", "0")
MANIFEST = "appendonly.aof.manifest"


def _tool(*args: str) -> subprocess.CompletedProcess:
    """streamdb-check-aof, run as its console script does."""
    return subprocess.run([sys.executable, "-m", "streamdb.cli.aofcheck", *args], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)


def _files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def _xadds(port: int, n: int, key: str = "s") -> list[bytes]:
    """``n`` XADDs, pipelined; the ids the server acknowledged."""
    r = redis.Redis(port=port)
    pipe = r.pipeline(transaction=False)
    for i in range(n):
        pipe.xadd(key, {"i": i, "pad": "x" * 20})
    return pipe.execute()


def _ids(port: int, key: str = "s") -> list[bytes]:
    return [e[0] for e in redis.Redis(port=port).xrange(key)]


def _refused_start(data: Path, log_dir: Path, *args: str) -> str:
    """Start a server that must refuse to start; its log."""
    srv = ServerProcess(log_dir, "--dir", str(data), *AOF, *args)
    with pytest.raises(RuntimeError, match="exited"):
        srv.start()
    srv.stop()
    text = srv.log_text()
    assert "Traceback" not in text, text
    return text


@pytest.fixture
def full_disk(tmp_path, tmpfs):
    """A 4 MiB tmpfs of this test's own (the server's data dir) and a way to fill it."""
    return tmpfs(tmp_path / "tmpfs", "4m")


def _fill(mnt: Path, leave_pages: int) -> Path:
    """Fill the file system at ``mnt`` but for ``leave_pages`` pages; the filler file."""
    filler = mnt / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for chunk in (b"\xaa" * (1 << 16), b"\xaa" * 4096):
            try:
                while os.write(fd, chunk):
                    pass
            except OSError as e:
                assert e.errno == errno.ENOSPC
    finally:
        os.close(fd)
    os.truncate(filler, filler.stat().st_size // 4096 * 4096 - leave_pages * 4096)
    return filler


# -- 2: the disk fills when the AOF rotates ------------------------------------------------


def test_a_rotation_whose_manifest_cannot_be_saved_keeps_every_acknowledged_write(full_disk, tmp_path):
    """BGSAVE's rotation creates the new segment (its header takes the last free page)
    but cannot write the manifest naming it: BGSAVE fails with a clear error, the new
    file is removed, and the writes acknowledged afterwards go to the segment the
    manifest names, so a restart after kill -9 has all of them."""
    mnt, logs = full_disk, tmp_path / "logs"
    srv = ServerProcess(logs, "--dir", str(mnt), *AOF, "--appendfsync", "everysec").start()
    try:
        acked = _xadds(srv.port, 100)
        aof_dir = mnt / "appendonlydir"
        before = sorted(p.name for p in aof_dir.iterdir())
        manifest = (aof_dir / MANIFEST).read_bytes()
        # (The server rewrites replication.state when the AOF moves on: once it holds the
        # last write's position it stays, and the one page left free is the rotation's.)
        seg, state = aof_dir / "appendonly.aof.1.incr.aof", mnt / "replication.state"
        wait_until(lambda: state.exists() and f" {seg.name} {seg.stat().st_size} " in state.read_text(),
                   10, "the replication state of the last write")
        filler = _fill(mnt, leave_pages=1)
        r = redis.Redis(port=srv.port)
        with pytest.raises(redis.ResponseError) as e:
            r.bgsave()
        message = str(e.value)
        assert message.startswith("could not start a new AOF segment (saving the manifest"), message
        assert "No space left on device" in message and "Error" not in message.split(":")[0]
        assert sorted(p.name for p in aof_dir.iterdir()) == before
        assert (aof_dir / MANIFEST).read_bytes() == manifest
        assert r.info("persistence")["rdb_last_bgsave_status"] == "err"
        # The other callers of a rotation fail alike; a save rule's cron tick too, quietly.
        with pytest.raises(redis.ResponseError, match="^could not start a new AOF segment"):
            r.bgrewriteaof()
        r.config_set("save", "1 1")
        wait_until(lambda: "changes in 1 seconds. Saving..." in srv.log_text(), 20, "the save rule")
        r.config_set("save", "")
        assert sorted(p.name for p in aof_dir.iterdir()) == before
        filler.unlink()
        acked += _xadds(srv.port, 50)
        r.bgsave()              # the disk has room again: the rotation works
        wait_until(lambda: r.info("persistence")["rdb_bgsave_in_progress"] == 0, 30, "the snapshot")
        assert r.info("persistence")["rdb_last_bgsave_status"] == "ok"
        acked += _xadds(srv.port, 50)
        assert r.xlen("s") == 200
        srv.kill9()
        srv.stop()
        log = srv.log_text()
        assert log.count("could not start a new AOF segment") == 1 and "Traceback" not in log
        assert "AOF segment rotation works again" in log
        srv = ServerProcess(logs, "--dir", str(mnt), *AOF).start()
        assert _ids(srv.port) == acked
    finally:
        srv.stop()


# -- 3: the manifest is missing ------------------------------------------------------------


def test_segments_without_a_manifest_refuse_to_start_and_change_nothing(tmp_path):
    """The manifest is lost: the start stops (it used to start empty and cut the first
    segment to its header), and streamdb-check-aof --fix writes the manifest back from
    the segments: the newest base and the incr segments after it, leaving out an older
    segment that a crash kept from being deleted after the rewrite."""
    data, logs = tmp_path / "data", tmp_path / "logs"
    aof_dir = data / "appendonlydir"
    first = aof_dir / "appendonly.aof.1.incr.aof"
    with ServerProcess(logs, "--dir", str(data), *AOF, "--appendfsync", "always") as srv:
        acked = _xadds(srv.port, 600)
        stale = first.read_bytes()
        r = redis.Redis(port=srv.port)
        r.bgrewriteaof()        # a base of the 600 replaces appendonly.aof.1.incr.aof
        wait_until(lambda: not first.exists(), 30, "the rewrite")
        acked += _xadds(srv.port, 400)
    first.write_bytes(stale)
    (aof_dir / MANIFEST).unlink()
    before = _files(aof_dir)
    log = _refused_start(data, logs)
    assert "Fatal error loading the AOF" in log and "no manifest" in log
    assert str(aof_dir) in log and all(name in log for name in before)
    assert f"streamdb-check-aof --fix {aof_dir}" in log
    assert _files(aof_dir) == before

    report = _tool(str(aof_dir))
    assert report.returncode == 2 and "MISSING manifest" in report.stdout and first.name in report.stdout
    assert "Traceback" not in report.stderr and _files(aof_dir) == before
    fixed = _tool(str(aof_dir), "--fix", "--yes")
    assert fixed.returncode == 0 and "AOF is valid" in fixed.stdout, fixed.stdout + fixed.stderr
    assert f"left out, as older than the base appendonly.aof.1.base.aof: {first.name}" in fixed.stdout
    with ServerProcess(logs, "--dir", str(data), *AOF) as srv:
        assert _ids(srv.port) == acked


def test_a_fresh_directory_still_starts(tmp_path):
    data = tmp_path / "data"
    (data / "appendonlydir").mkdir(parents=True)
    with ServerProcess(tmp_path / "logs", "--dir", str(data), *AOF) as srv:
        assert _xadds(srv.port, 3) and (data / "appendonlydir" / MANIFEST).exists()


# -- 5: the last segment is all zeros ------------------------------------------------------


def test_an_all_zero_last_segment_refuses_to_start_and_nothing_is_cut(tmp_path):
    """What a power cut can leave under everysec without preallocation: the file's size
    reached the disk, its content did not.  Its header was fsynced before the manifest
    named it, so this is damage, not a torn write."""
    data, logs = tmp_path / "data", tmp_path / "logs"
    aof_dir = data / "appendonlydir"
    with ServerProcess(logs, "--dir", str(data), *AOF, "--appendfsync", "everysec") as srv:
        acked = _xadds(srv.port, 2000)
        r = redis.Redis(port=srv.port)
        r.bgrewriteaof()        # the 2000 go to a base segment, what follows to a new incr
        wait_until(lambda: r.info("persistence")["aof_rewrite_in_progress"] == 0, 30, "the rewrite")
        _xadds(srv.port, 500)
    last = max(aof_dir.glob("*.incr.aof"), key=lambda p: int(p.name.split(".")[2]))
    last.write_bytes(bytes(last.stat().st_size))
    before = _files(aof_dir)
    log = _refused_start(data, logs)
    assert "Fatal error loading the AOF" in log and last.name in log and "all zeros" in log
    assert "cutting" not in log and f"streamdb-check-aof --fix {aof_dir}" in log
    assert _files(aof_dir) == before

    for checked in (aof_dir, last):         # the directory, or the segment alone
        report = _tool(str(checked))
        assert report.returncode == 2 and "CORRUPT" in report.stdout and "all zeros" in report.stdout
        assert "Traceback" not in report.stderr and _files(aof_dir) == before
    fixed = _tool(str(aof_dir), "--fix", "--yes")
    assert fixed.returncode == 0 and "damaged segment header" in fixed.stdout, fixed.stdout + fixed.stderr
    assert last.read_bytes() == b"#SDBAOF 1\r\n"
    with ServerProcess(logs, "--dir", str(data), *AOF) as srv:
        assert _ids(srv.port) == acked          # the 500 the disk lost are gone, said so by the fix


# -- 10: a damaged manifest ----------------------------------------------------------------


@pytest.mark.parametrize("damage", [b"\x00\xff\xfe#SDB\x80garbage\x00" * 20, b""], ids=["binary", "empty"])
def test_a_damaged_manifest_is_a_clear_start_error_and_the_checker_rebuilds_it(tmp_path, damage):
    data, logs = tmp_path / "data", tmp_path / "logs"
    aof_dir = data / "appendonlydir"
    with ServerProcess(logs, "--dir", str(data), *AOF) as srv:
        acked = _xadds(srv.port, 300)
    (aof_dir / MANIFEST).write_bytes(damage)
    before = _files(aof_dir)
    log = _refused_start(data, logs)
    assert "Fatal error loading the AOF" in log and str(aof_dir / MANIFEST) in log
    assert f"streamdb-check-aof --fix {aof_dir}" in log and "restore it from a backup" in log
    assert _files(aof_dir) == before

    report = _tool(str(aof_dir))
    assert report.returncode == 2 and "CORRUPT manifest" in report.stdout
    assert "Traceback" not in report.stderr and _files(aof_dir) == before
    fixed = _tool(str(aof_dir), "--fix", "--yes")
    assert fixed.returncode == 0 and "AOF is valid" in fixed.stdout, fixed.stdout + fixed.stderr
    kept = [p for p in aof_dir.iterdir() if p.name.startswith(MANIFEST + ".corrupt-")]
    assert len(kept) == 1 and kept[0].read_bytes() == damage
    with ServerProcess(logs, "--dir", str(data), *AOF) as srv:
        assert _ids(srv.port) == acked
