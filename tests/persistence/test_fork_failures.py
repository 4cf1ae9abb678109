"""Failed forks and failing background jobs (snapshots, AOF rewrites, backups) on real
servers: no acknowledged write is lost, clients get Redis's answers (-ERR, MISCONF),
the log says what failed once per try, and automatic jobs back off.

Forks fail for real: the server is put into a pids cgroup (v1) whose limit is its
current task count, so that fork() gets EAGAIN as under a container's pids limit.
ENOSPC comes from a small tmpfs.  Tests skip, saying why, where neither can be set up.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import redis

from helpers import ServerProcess, raw_exchange, wait_until

PIDS_ROOT = Path("/sys/fs/cgroup/pids")
REWRITE_NOT_STARTED = ("Can't execute an AOF background rewriting. "
                       "Please check the server logs for more information.")
MISCONF_SAVE = ("MISCONF Redis is configured to save RDB snapshots, but it's currently unable to "
                "persist to disk. Commands that may modify the data set are disabled, because this "
                "instance is configured to report errors during writes if RDB snapshotting fails "
                "(stop-writes-on-bgsave-error option). Please check the Redis logs for details "
                "about the RDB error.")


class ForkBlocker:
    """A pids cgroup of its own for one server: ``block()`` makes its fork() (and any
    new thread) fail with EAGAIN, ``lift()`` lets it fork again."""

    def __init__(self, path: Path, pid: int) -> None:
        self.path = path
        self.pid = pid

    def block(self) -> None:
        # Every thread, not only the process: a task left in the old cgroup would fork
        # from there.  (cgroup.procs moves the thread group; tasks catches stragglers.)
        (self.path / "cgroup.procs").write_text(str(self.pid))
        for tid in os.listdir(f"/proc/{self.pid}/task"):
            (self.path / "tasks").write_text(tid)
        (self.path / "pids.max").write_text((self.path / "pids.current").read_text().strip())

    def lift(self) -> None:
        (self.path / "pids.max").write_text("max")

    def release(self) -> None:
        """Teardown: no limit, every task back in the root cgroup, the cgroup gone."""
        self.lift()
        for _ in range(200):
            tasks = (self.path / "tasks").read_text().split()
            for tid in tasks:
                try:
                    (PIDS_ROOT / "tasks").write_text(tid)
                except OSError:
                    pass            # exited meanwhile
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.05)    # a child still exiting


@pytest.fixture
def fork_blocker(tmp_path):
    """``fork_blocker(srv)``: a ForkBlocker for the server (skips if none can be made)."""
    if os.geteuid() != 0:
        pytest.skip("a pids cgroup needs root")
    if not (PIDS_ROOT / "cgroup.procs").exists():
        pytest.skip(f"no pids cgroup (v1) hierarchy at {PIDS_ROOT}")
    made: list[ForkBlocker] = []

    def make(srv: ServerProcess) -> ForkBlocker:
        path = PIDS_ROOT / f"streamdb-test-{os.getpid()}-{abs(hash(str(tmp_path)))}-{len(made)}"
        try:
            path.mkdir()
        except OSError as e:
            pytest.skip(f"cannot create the pids cgroup {path}: {e}")
        blocker = ForkBlocker(path, srv.proc.pid)
        made.append(blocker)
        return blocker

    yield make
    for blocker in made:
        blocker.release()


def persistence(r: redis.Redis) -> dict:
    return r.info("persistence")


def wait_bgsave_done(r: redis.Redis) -> dict:
    return wait_until(lambda: (lambda i: i if not i["rdb_bgsave_in_progress"] else None)(persistence(r)),
                      what="the background save to end")


def wait_rewrite_done(r: redis.Redis) -> dict:
    return wait_until(lambda: (lambda i: i if not i["aof_rewrite_in_progress"] else None)(persistence(r)),
                      what="the AOF rewrite to end")


def segments(srv: ServerProcess) -> list[str]:
    return sorted(p.name for p in (srv.data_dir / "appendonlydir").iterdir() if p.name.endswith(".aof"))


def restarted(srv: ServerProcess) -> ServerProcess:
    """kill -9, then a new server on the same directory and port."""
    srv.kill9()
    srv.stop()
    return ServerProcess(srv.data_dir, *srv.args, port=srv.port).start()


def test_a_failed_fork_loses_no_write_the_next_snapshot_retires(tmp_path, fork_blocker):
    """Issue 26 item 1, step by step: the writes between the last good snapshot and a
    BGSAVE whose fork fails are still there after the next good snapshot and kill -9."""
    srv = ServerProcess(tmp_path / "d", "--save", "").start()
    try:
        r = redis.Redis(port=srv.port)
        r.set("k", "v0")
        r.xadd("s", {"a": 1}, id="1-1")
        assert r.bgsave()
        assert wait_bgsave_done(r)["rdb_last_bgsave_status"] == "ok"
        r.set("k", "v1")
        r.xadd("s", {"a": 2}, id="2-1")
        blocker = fork_blocker(srv)
        blocker.block()
        # Redis's answer to a failed fork: a bare -ERR (the log says why).
        assert raw_exchange(srv.port, b"BGSAVE\r\n") == b"-ERR\r\n"
        assert persistence(r)["rdb_last_bgsave_status"] == "err"
        blocker.lift()
        r.set("j", "x")
        assert r.bgsave()
        assert wait_bgsave_done(r)["rdb_last_bgsave_status"] == "ok"
        log = srv.log_text()
        assert log.count("Can't save in background: fork: Resource temporarily unavailable") == 1
        assert "Traceback" not in log and "internal error" not in log.lower()
        srv = restarted(srv)
        r = redis.Redis(port=srv.port)
        assert r.get("k") == b"v1"
        assert r.xlen("s") == 2
        assert r.get("j") == b"x"
    finally:
        srv.stop()


def test_no_thread_for_the_preallocation_still_rotates_and_loses_nothing(tmp_path, fork_blocker):
    """Under appendfsync always a new segment gets a thread that writes its zeros; a pids
    limit refuses threads as it refuses forks.  The rotation then appends to the segment
    instead: BGSAVE answers the fork's error (not Python's "can't start new thread"),
    writes are acknowledged meanwhile, and a kill -9 loses none of them."""
    srv = ServerProcess(tmp_path / "d", "--save", "", "--appendonly", "yes",
                        "--appendfsync", "always").start()
    try:
        r = redis.Redis(port=srv.port)
        r.xadd("s", {"a": 0}, id="1-1")
        blocker = fork_blocker(srv)
        replies = set()
        for i in range(2, 12):
            blocker.block()         # (again: a retired segment's thread may have left a slot)
            for command in (b"BGSAVE\r\n", b"BGREWRITEAOF\r\n"):
                replies.add(raw_exchange(srv.port, command).split(b"\r\n")[0])
            r.xadd("s", {"a": i}, id=f"{i}-1")
        blocker.lift()
        assert not [reply for reply in replies if b"thread" in reply], replies
        log = srv.log_text()
        assert "Cannot preallocate the AOF segment" in log and "frames are appended" in log
        assert "Traceback" not in log
        srv = restarted(srv)
        assert redis.Redis(port=srv.port).xlen("s") == 11
    finally:
        srv.stop()


def test_save_rules_back_off_while_forks_fail_and_save_once_they_work(tmp_path, fork_blocker):
    """Under ``save 1 1`` with forks failing: no traceback out of the cron, no new AOF
    segment per tick, one warning per try (every 5 s, Redis's retry delay), writes get
    MISCONF; once forks work the rule saves by itself and nothing was lost."""
    srv = ServerProcess(tmp_path / "d", "--save", "1 1").start()
    try:
        r = redis.Redis(port=srv.port)
        blocker = fork_blocker(srv)
        blocker.block()
        r.set("k", "v1")
        r.xadd("s", {"a": 1}, id="1-1")
        wait_until(lambda: persistence(r)["rdb_last_bgsave_status"] == "err", what="a failed save")
        before = segments(srv)
        time.sleep(2.5)         # 25 ticks: at most one more try (Redis: one per 5 s)
        log = srv.log_text()
        assert "Traceback" not in log
        tries = log.count("Can't save in background: fork:")
        assert 1 <= tries <= 2, log
        assert len(segments(srv)) <= len(before) + 1, (before, segments(srv))
        # While saves fail, writes are refused with Redis's words; reads go on.
        with pytest.raises(redis.ResponseError) as err:
            r.set("k", "lost?")
        assert str(err.value) == MISCONF_SAVE
        assert r.get("k") == b"v1" and r.ping()
        blocker.lift()
        info = wait_until(lambda: (lambda i: i if i["rdb_last_bgsave_status"] == "ok" and
                                   not i["rdb_bgsave_in_progress"] else None)(persistence(r)),
                          timeout=20, what="the save rule to save once forks work")
        assert info["rdb_changes_since_last_save"] == 0
        r.set("after", "1")         # accepted again
        srv = restarted(srv)
        r = redis.Redis(port=srv.port)
        assert r.get("k") == b"v1" and r.xlen("s") == 1 and r.get("after") == b"1"
    finally:
        srv.stop()


def test_misconf_follows_the_last_save_and_the_directives(tmp_path, fork_blocker):
    """BGSAVE's failed fork: INFO says err, writes get MISCONF (EXEC of writes too) while
    stop-writes-on-bgsave-error is yes and save rules exist; reads, PING and INFO are
    answered; a good save ends it."""
    srv = ServerProcess(tmp_path / "d", "--save", "3600 1").start()
    try:
        r = redis.Redis(port=srv.port)
        r.set("k", "v1")
        blocker = fork_blocker(srv)
        blocker.block()
        with pytest.raises(redis.ResponseError):
            r.bgsave()
        assert persistence(r)["rdb_last_bgsave_status"] == "err"
        for write in (lambda: r.set("k", "v2"), lambda: r.xadd("s", {"a": 1})):
            with pytest.raises(redis.ResponseError) as err:
                write()
            assert str(err.value) == MISCONF_SAVE
        pipe = r.pipeline(transaction=True)
        pipe.set("k", "v3")
        with pytest.raises(redis.ResponseError) as err:
            pipe.execute()
        assert MISCONF_SAVE in str(err.value)
        assert r.get("k") == b"v1" and r.ping() and r.dbsize() == 1
        # The directives, live: off, then no save rules, each lifts the refusal.
        r.config_set("stop-writes-on-bgsave-error", "no")
        assert r.set("k", "v4")
        r.config_set("stop-writes-on-bgsave-error", "yes")
        with pytest.raises(redis.ResponseError):
            r.set("k", "v5")
        r.config_set("save", "")
        assert r.set("k", "v6")
        r.config_set("save", "3600 1")
        with pytest.raises(redis.ResponseError):
            r.set("k", "v7")
        blocker.lift()
        assert r.bgsave()
        assert wait_bgsave_done(r)["rdb_last_bgsave_status"] == "ok"
        assert r.set("k", "v8")
        log = srv.log_text()
        assert log.count("write commands are refused (MISCONF)") >= 1
        assert "Traceback" not in log
        srv = restarted(srv)
        assert redis.Redis(port=srv.port).get("k") == b"v8"
    finally:
        srv.stop()


def test_a_snapshot_child_that_fails_to_write_is_a_failed_save(tmp_path, tmpfs):
    """The child exits non-zero (ENOSPC on the snapshot's disk): the log says why, writes
    get MISCONF until a save succeeds, and the keys it took are written by the next one."""
    data = tmp_path / "d"
    tmpfs(data / "snapshot.lmdb", "256k")
    srv = ServerProcess(data, "--save", "3600 1").start()
    try:
        r = redis.Redis(port=srv.port)
        r.set("small", "1")
        assert r.bgsave()
        assert wait_bgsave_done(r)["rdb_last_bgsave_status"] == "ok"
        big = os.urandom(400_000)
        r.set("big", big)
        assert r.bgsave()
        assert wait_bgsave_done(r)["rdb_last_bgsave_status"] == "err"
        # The child's reason (LMDB reports a short write as EIO).
        assert re.search(r"# Background saving error: .*(No space left on device|Input/output error)",
                         srv.log_text())
        with pytest.raises(redis.ResponseError) as err:
            r.set("x", "1")
        assert str(err.value) == MISCONF_SAVE
        subprocess.run(["mount", "-o", "remount,size=16m", str(data / "snapshot.lmdb")], check=True)
        assert r.bgsave()
        assert wait_bgsave_done(r)["rdb_last_bgsave_status"] == "ok"
        r.set("x", "1")
        assert r.bgsave()
        wait_bgsave_done(r)
        srv = restarted(srv)
        r = redis.Redis(port=srv.port)
        assert r.get("big") == big and r.get("x") == b"1" and r.get("small") == b"1"
    finally:
        srv.stop()


def test_failing_automatic_rewrites_back_off(tmp_path, fork_blocker):
    """Automatic AOF rewrites whose fork fails: 3 tries, then the limit (said once), not a
    fork and a new segment per tick.  BGREWRITEAOF answers as Redis; once forks work it
    rewrites and the count of failures in a row goes back to 0."""
    srv = ServerProcess(tmp_path / "d", "--save", "", "--auto-aof-rewrite-percentage", "100",
                        "--auto-aof-rewrite-min-size", "64kb").start()
    try:
        r = redis.Redis(port=srv.port)
        blocker = fork_blocker(srv)
        blocker.block()
        pipe = r.pipeline(transaction=False)
        for i in range(200):
            pipe.xadd("s", {"n": i, "pad": "x" * 500}, id=f"{i + 1}-1")
        pipe.execute()
        wait_until(lambda: persistence(r)["aof_rewrites_consecutive_failures"] >= 3,
                   what="three failed automatic rewrites")
        before = segments(srv)
        time.sleep(2)           # 20 ticks
        after = segments(srv)
        info = persistence(r)
        assert info["aof_rewrites_consecutive_failures"] == 3, info
        assert info["aof_last_bgrewrite_status"] == "err"
        assert after == before, (before, after)
        log = srv.log_text()
        assert log.count("Can't rewrite append only file in background: fork:") == 3
        assert log.count("triggered the limit, will retry in 1 minutes") == 1
        assert "Traceback" not in log
        # BGREWRITEAOF is not held by the limit, and answers a failed fork as Redis does.
        with pytest.raises(redis.ResponseError) as err:
            r.bgrewriteaof()
        assert str(err.value) == REWRITE_NOT_STARTED
        assert r.set("k", "v")          # a failed rewrite refuses no write
        blocker.lift()
        assert r.bgrewriteaof()
        info = wait_rewrite_done(r)
        assert info["aof_last_bgrewrite_status"] == "ok"
        assert info["aof_rewrites_consecutive_failures"] == 0
        srv = restarted(srv)
        r = redis.Redis(port=srv.port)
        assert r.xlen("s") == 200 and r.get("k") == b"v"
    finally:
        srv.stop()


def test_a_killed_rewrite_leaves_no_temp_file(tmp_path):
    """A server killed with -9 mid-rewrite (its child dies with it) leaves the base's
    ``.base.aof.tmp``: the next start removes it, and no file the manifest names.  A
    rewrite child killed with -9 leaves none either."""
    srv = ServerProcess(tmp_path / "d", "--save", "").start()
    try:
        r = redis.Redis(port=srv.port)
        for start in range(0, 40_000, 5_000):
            pipe = r.pipeline(transaction=False)
            for i in range(start, start + 5_000):
                pipe.set(f"k{i}", "v" * 50)
            pipe.execute()
        aof_dir = srv.data_dir / "appendonlydir"
        assert r.bgrewriteaof()
        stale = wait_until(lambda: list(aof_dir.glob("*.base.aof.tmp")), what="the rewrite's temp file")
        srv.kill9()
        srv.stop()
        assert all(p.exists() for p in stale)       # what a killed rewrite leaves behind
        named = segments(srv)
        srv = ServerProcess(srv.data_dir, *srv.args, port=srv.port).start()
        r = redis.Redis(port=srv.port)
        assert not any(p.exists() for p in stale)
        assert segments(srv) == named           # (the manifest's files: all kept)
        assert "left by an interrupted AOF rewrite" in srv.log_text()
        assert r.dbsize() == 40_000
        # The child alone killed with -9: its temp file goes when it is reaped.
        assert r.bgrewriteaof()
        wait_until(lambda: list(aof_dir.glob("*.base.aof.tmp")), what="the rewrite's temp file")
        os.kill(int(Path(f"/proc/{srv.proc.pid}/task/{srv.proc.pid}/children").read_text().split()[0]),
                signal.SIGKILL)
        assert wait_rewrite_done(r)["aof_last_bgrewrite_status"] == "err"
        assert not list(aof_dir.glob("*.tmp"))
        assert "Background AOF rewrite terminated with error: the child terminated by signal 9" \
            in srv.log_text()
    finally:
        srv.stop()


def test_a_backup_that_runs_out_of_space_says_so(tmp_path, tmpfs):
    """STREAMDB.BACKUP into a full disk: backup_last_error gives the real reason
    (ENOSPC), not that "the copy child failed"."""
    srv = ServerProcess(tmp_path / "d", "--save", "").start()
    try:
        r = redis.Redis(port=srv.port, decode_responses=True)
        pipe = r.pipeline(transaction=False)
        for i in range(200):
            pipe.xadd("s", {"n": i, "pad": os.urandom(300).hex()})
        pipe.execute()
        dest = tmpfs(tmp_path / "bk", "64k")
        r.execute_command("STREAMDB.BACKUP", str(dest))
        info = wait_until(lambda: (lambda i: i if i["backup_last_status"] != "none" and
                                   not i["backup_in_progress"] else None)(r.info("persistence")),
                          what="the backup to end")
        assert info["backup_last_status"] == "err"
        assert "No space left on device" in info["backup_last_error"], info["backup_last_error"]
        assert r.xlen("s") == 200
    finally:
        srv.stop()
