"""A snapshot that is missing, cut short, or was being written when the disk filled up.

Real servers, real files: a start either loads everything acknowledged or refuses
with a log line naming the file and the way out (exit code 1, never a signal), and
changes nothing on disk; ``streamdb-snapshot --verify`` says the same without a
traceback; a snapshot that fails leaves nothing a start takes for one.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from streamdb.persistence.aof import Manifest

from helpers import ROOT, ServerProcess, wait_until

AOF_ARGS = ("--appendonly", "yes", "--appendfsync", "always", "--aof-preallocate", "0", "--save", "")


def _files(d: Path) -> dict[str, bytes]:
    """Every file under the data directory but the servers' logs, with its bytes."""
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*"))
            if p.is_file() and not p.name.endswith(".log")}


def _bgsave(r: redis.Redis) -> str:
    """BGSAVE and wait for its end; ``ok``, ``err``, or ``refused`` (it did not start)."""
    try:
        r.bgsave()
    except redis.ResponseError:
        return "refused"
    wait_until(lambda: r.info("persistence")["rdb_bgsave_in_progress"] == 0, what="the snapshot")
    return r.info("persistence")["rdb_last_bgsave_status"]


def _xadd_all(r: redis.Redis, key: str, count: int, value: bytes = b"19.8") -> None:
    pipe = r.pipeline(transaction=False)
    for i in range(count):
        pipe.xadd(key, {"sensor-id": str(i), "temperature": value})
    pipe.execute()


def _start_refused(d: Path, *args: str) -> ServerProcess:
    """A server on ``d`` that must refuse to start: it exits 1 (a signal, e.g. SIGBUS,
    is a negative code here), and its log is there to read."""
    srv = ServerProcess(d, *args)
    with pytest.raises(RuntimeError, match="exited"):
        srv.start()
    srv.stop()
    assert srv.proc.returncode == 1, srv.log_text()
    return srv


def _snapshot_tool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "streamdb.tools.snapinspect", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


# ---------------------------------------------------------------------------
# Item 4: the snapshot the AOF was retired into is missing
# ---------------------------------------------------------------------------


def test_a_missing_snapshot_that_segments_were_retired_into_stops_the_start(tmp_path):
    d = tmp_path / "data"
    srv = ServerProcess(d, *AOF_ARGS).start()
    try:
        r = redis.Redis(port=srv.port)
        _xadd_all(r, "s", 3000)
        assert _bgsave(r) == "ok"
        manifest_path = d / "appendonlydir" / "appendonly.aof.manifest"
        wait_until(lambda: "appendonly.aof.1.incr.aof" not in manifest_path.read_text(),
                   what="the segment the snapshot covers to be retired")
        _xadd_all(r, "s", 500)
        assert r.xlen("s") == 3500
    finally:
        srv.stop()
    shutil.rmtree(d / "snapshot.lmdb")
    before = _files(d)

    refused = _start_refused(d, *AOF_ARGS)

    log = refused.log_text()
    first = Manifest.parse(manifest_path.read_text(), "").segments()[0]
    assert f"starts at {first}" in log
    assert f"there is no snapshot ({d / 'snapshot.lmdb' / 'data.mdb'} is missing)" in log
    assert "streamdb-admin restore BACKUP NEW_DIR --aof-from" in log
    assert _files(d) == before


# ---------------------------------------------------------------------------
# Item 10 (the snapshot part): a data file cut short
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("keep", [0.5, 0.0], ids=["cut-in-half", "empty"])
def test_a_data_file_cut_short_is_a_clear_start_error_and_a_clear_verify_error(tmp_path, keep):
    d = tmp_path / "data"
    srv = ServerProcess(d, *AOF_ARGS).start()
    try:
        r = redis.Redis(port=srv.port)
        _xadd_all(r, "s", 5000)
        assert _bgsave(r) == "ok"
    finally:
        srv.stop()
    mdb = d / "snapshot.lmdb" / "data.mdb"
    size = mdb.stat().st_size
    os.truncate(mdb, int(size * keep) // 4096 * 4096)
    before = _files(d)

    refused = _start_refused(d, *AOF_ARGS)

    log = refused.log_text()
    assert f"Fatal error loading the snapshot: {mdb} is " in log
    assert "Restore the snapshot from a backup" in log
    assert "Traceback" not in log
    assert _files(d) == before

    for args in ([], ["--verify"]):
        out = _snapshot_tool(str(d / "snapshot.lmdb"), *args)
        assert out.returncode == 2, out
        assert f"ERROR: {mdb} is " in out.stdout
        assert "Traceback" not in out.stdout + out.stderr
    assert _files(d) == before


# ---------------------------------------------------------------------------
# Item 8: a snapshot written while the disk fills up
# ---------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MB tmpfs of this test's own (root only), unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "disk"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", f"snapfaults-{tmp_path.name}",
                              str(mnt)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


class Filler:
    """Fills a file system up with one-page files, and frees some of them again."""

    def __init__(self, where: Path) -> None:
        self.dir = where
        self.dir.mkdir()
        self.pages: list[Path] = []

    def fill(self) -> None:
        """Until not one more page fits."""
        while True:
            p = self.dir / f"page-{len(self.pages)}"
            try:
                with open(p, "wb") as f:
                    f.write(b"\xff" * 4096)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
                p.unlink(missing_ok=True)
                return
            self.pages.append(p)

    def free(self, count: int | None = None) -> None:
        """``count`` pages (all without one)."""
        count = len(self.pages) if count is None else count
        for _ in range(count):
            self.pages.pop().unlink()


def test_a_first_snapshot_on_a_full_disk_leaves_no_snapshot_and_loses_nothing(tmp_path, small_disk):
    """With from 0 to 24 pages free, the first snapshot fails (the lock file, LMDB's
    meta pages, the data: somewhere it runs out) or succeeds; after each failure the
    snapshot directory holds no data file, the server serves on, and in the end a
    start on the freed disk has every acknowledged write."""
    logs = tmp_path / "logs"
    args = ("--dir", str(small_disk), *AOF_ARGS)
    srv = ServerProcess(logs, *args).start()
    filler = Filler(small_disk / "filler")
    failures = 0
    try:
        r = redis.Redis(port=srv.port)
        _xadd_all(r, "big", 2000, value=b"x" * 200)
        acked = [r.xadd("s", {"n": str(i)}) for i in range(20)]
        for free_pages in range(25):
            filler.fill()
            filler.free(free_pages)
            status = _bgsave(r)
            assert r.ping() and r.xlen("big") == 2000          # serving on
            if status == "ok":
                break
            failures += 1
            assert not (small_disk / "snapshot.lmdb" / "data.mdb").exists()
        assert failures, "no snapshot failed: the disk was never full enough"
        assert "Background saving error" in srv.log_text()
    finally:
        srv.stop()
    filler.free()
    srv = ServerProcess(logs, *args).start()
    try:
        r = redis.Redis(port=srv.port)
        assert r.xlen("big") == 2000
        assert [i for i, _ in r.xrange("s")] == acked
        assert _bgsave(r) == "ok"                          # and snapshots work again
    finally:
        srv.stop()
