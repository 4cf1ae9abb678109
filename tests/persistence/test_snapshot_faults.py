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
    return subprocess.run([sys.executable, "-m", "streamdb.cli.snapinspect", *args], cwd=ROOT,
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
def small_disk(tmp_path, tmpfs):
    """A 4 MB tmpfs of this test's own (root only), unmounted afterwards."""
    return tmpfs(tmp_path / "disk", "4m")


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


def _fill_until_a_snapshot_fails(r: redis.Redis, filler: Filler, snapshot: Path) -> int:
    """Fill the disk up but for 0, 1, 2, ... pages until a BGSAVE fails (on a disk
    too full the rotation of the AOF it starts with refuses it first); after each
    try the server serves on.  Returns the pages that were free."""
    for free_pages in range(32):
        filler.fill()
        filler.free(free_pages)
        status = _bgsave(r)
        assert r.ping() and r.xlen("s") > 0                     # serving on
        assert status != "ok", "the disk was never full enough for the snapshot to fail"
        if status == "err":
            return free_pages
    raise AssertionError("no snapshot failed")


def _restarted_holds(logs: Path, args: tuple, entries: dict[str, list]) -> None:
    """A server started on the files has every acknowledged entry, and snapshots."""
    srv = ServerProcess(logs, *args).start()
    try:
        r = redis.Redis(port=srv.port)
        for key, ids in entries.items():
            assert [i for i, _ in r.xrange(key)] == ids
        assert _bgsave(r) == "ok"
    finally:
        srv.stop()


# The full-disk snapshot tests fill the disk page by page around one BGSAVE; a bounded
# node cache (STREAMDB_TEST_STREAM_CACHE) would take snapshots of its own meanwhile.
NO_NODE_CACHE = ("--stream-cache-size", "0")


def test_a_snapshot_on_a_full_disk_is_an_error_not_a_sigbus(tmp_path, small_disk):
    """LMDB maps its lock file, made sparse by ftruncate: on a full disk its first write
    through the map was a SIGBUS (the snapshot child, or the server itself when its node
    store opened the snapshot, died without a word).  Its space is now reserved with
    plain calls first: an ENOSPC the snapshot reports."""
    filler = Filler(small_disk / "filler")
    filler.fill()
    script = ("from streamdb.persistence.snapshot import write_snapshot\n"
              "from streamdb.engine.keyspace import Keyspace\n"
              "try:\n"
              f"    write_snapshot({str(small_disk / 'snapshot.lmdb')!r}, Keyspace(), None, None, 0)\n"
              "except OSError as e:\n"
              "    print(e.strerror)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert (done.returncode, done.stdout) == (0, "No space left on device\n"), done.stderr
    assert not (small_disk / "snapshot.lmdb" / "data.mdb").exists()


def test_a_first_snapshot_on_a_full_disk_leaves_nothing_a_start_takes_for_a_snapshot(tmp_path, small_disk):
    """The first snapshot runs out of room while LMDB creates its file (its lock
    file, its meta pages or the data): the snapshot directory is left without a data
    file, the server serves on, and a start on the freed disk has every acknowledged
    write (it used to die on the half-made file, MDB_INVALID, until it was deleted)."""
    logs = tmp_path / "logs"
    args = ("--dir", str(small_disk), *AOF_ARGS, *NO_NODE_CACHE)
    srv = ServerProcess(logs, *args).start()
    filler = Filler(small_disk / "filler")
    try:
        r = redis.Redis(port=srv.port)
        _xadd_all(r, "s", 2000, value=b"x" * 200)
        acked = {"s": [i for i, _ in r.xrange("s")]}
        _fill_until_a_snapshot_fails(r, filler, small_disk / "snapshot.lmdb")
        assert "Background saving error" in srv.log_text()
        assert not (small_disk / "snapshot.lmdb" / "data.mdb").exists()
    finally:
        srv.stop()
    filler.free()
    _restarted_holds(logs, args, acked)
    _restarted_holds(logs, args, acked)        # (from the snapshot this time)


def test_what_a_killed_first_snapshot_leaves_is_no_snapshot_and_goes_with_the_next(tmp_path):
    """A first snapshot killed while LMDB builds it leaves its directory aside (here: a
    data file without its meta pages, as a kill in LMDB's creation leaves it): a start
    takes it for no snapshot and replays the AOF, and the next snapshot removes it."""
    d = tmp_path / "data"
    srv = ServerProcess(d, *AOF_ARGS).start()
    try:
        r = redis.Redis(port=srv.port)
        _xadd_all(r, "s", 300)
        ids = [i for i, _ in r.xrange("s")]
    finally:
        srv.kill9()
        srv.stop()
    aside = d / "snapshot.lmdb" / "first-snapshot.tmp"
    aside.mkdir(parents=True)
    (aside / "data.mdb").write_bytes(b"\0" * 4096)
    srv = ServerProcess(d, *AOF_ARGS).start()
    try:
        r = redis.Redis(port=srv.port)
        assert [i for i, _ in r.xrange("s")] == ids
        assert _bgsave(r) == "ok"
        assert not aside.exists()
        assert (d / "snapshot.lmdb" / "data.mdb").exists()
    finally:
        srv.stop()


def test_a_later_snapshot_on_a_full_disk_leaves_the_last_one_loadable(tmp_path, small_disk):
    """A later snapshot is one LMDB write transaction into the existing file: when it
    runs out of room the last committed snapshot is still whole, and a start on it
    (with the AOF after it) has every acknowledged write."""
    logs = tmp_path / "logs"
    args = ("--dir", str(small_disk), *AOF_ARGS, *NO_NODE_CACHE)
    srv = ServerProcess(logs, *args).start()
    filler = Filler(small_disk / "filler")
    try:
        r = redis.Redis(port=srv.port)
        _xadd_all(r, "s", 500)
        assert _bgsave(r) == "ok"
        committed = (small_disk / "snapshot.lmdb" / "data.mdb").stat().st_size
        _xadd_all(r, "t", 2000, value=b"y" * 300)           # (many new pages to write)
        acked = {"s": [i for i, _ in r.xrange("s")], "t": [i for i, _ in r.xrange("t")]}
        _fill_until_a_snapshot_fails(r, filler, small_disk / "snapshot.lmdb")
        assert (small_disk / "snapshot.lmdb" / "data.mdb").stat().st_size >= committed
    finally:
        srv.stop()
    filler.free()
    _restarted_holds(logs, args, acked)


def test_a_data_file_that_ends_before_its_free_pages_is_whole(tmp_path):
    """LMDB never writes a page a transaction took and freed again, so a sound file may
    end before its last page in use when the pages after its end are all free: such a
    file is read without a fault, and the check must not refuse it.  One page less is."""
    import lmdb

    from streamdb.persistence.lmdbfile import damage

    path = tmp_path / "env"
    env = lmdb.open(str(path), map_size=1 << 30, max_dbs=4)
    db = env.open_db(b"rows")
    with env.begin(write=True) as txn:
        for i in range(50):
            txn.put(i.to_bytes(4, "big"), b"x" * 100, db=db)
    with env.begin(write=True) as txn:
        txn.put(b"big", os.urandom(200_000), db=db)       # overflow pages at the end
    with env.begin(write=True) as txn:
        txn.delete(b"big", db=db)                         # ... free from now on
    with env.begin(write=True) as txn:
        txn.put(b"small", b"y", db=db)
    page = env.stat()["psize"]
    last = env.info()["last_pgno"]
    env.close()
    mdb = path / "data.mdb"
    assert mdb.stat().st_size == (last + 1) * page
    # Cut the file where its run of free pages at the end starts (while it stays whole).
    pages = last + 1
    while pages > 2:
        os.truncate(mdb, (pages - 1) * page)
        if damage(str(mdb)) is not None:
            os.truncate(mdb, pages * page)
            break
        pages -= 1
    assert pages < last - 40, "the free overflow pages were not at the end of the file"
    env = lmdb.open(str(path), map_size=1 << 30, max_dbs=4, readonly=True, lock=False)
    with env.begin() as txn:
        rows = dict(txn.cursor(db=env.open_db(b"rows", txn=txn, create=False)))
    env.close()
    assert len(rows) == 51 and rows[b"small"] == b"y"
    os.truncate(mdb, (pages - 1) * page)
    assert "was cut short" in damage(str(mdb))
