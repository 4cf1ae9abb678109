"""Redis 8.10's BACKUP START | SEAL | LIST | STATUS | ABORT | CLEANUP on real servers and files.

The sealed directory is a StreamDB backup: streamdb-admin verify-backup takes it, and a
server started on it holds the data as of the seal (its DEBUG DIGEST equals the
primary's then), writes made after START included, writes after SEAL not.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from docblocks import run_block
from helpers import ROOT, ServerProcess, wait_until
from resp_raw import RawClient

ADMIN = [sys.executable, "-m", "streamdb.cli.admin"]
GUIDE = "docs/OPERATIONS.md"
# Docs blocks of docs/OPERATIONS.md this module runs.
DOC_BLOCKS = {"docs/OPERATIONS.md": {"backup-window"}}


def status(r: redis.Redis) -> dict:
    return {k.decode(): (v.decode() if isinstance(v, bytes) else v)
            for k, v in r.execute_command("BACKUP", "STATUS").items()}


def start_and_wait(r: redis.Redis) -> None:
    assert r.execute_command("BACKUP", "START") == b"OK"
    wait_until(lambda: status(r)["state"] == "incrementing", what="BACKUP to reach incrementing")


def listed(r: redis.Redis) -> list[str]:
    return [p.decode() for p in r.execute_command("BACKUP", "LIST")]


def plain(tagged) -> str:
    """The text of a RawClient string reply."""
    return tagged[1].decode()


def digest_of_restored(backup: Path, where: Path) -> bytes:
    """verify-backup takes ``backup``; a server started on a copy of it: its DEBUG DIGEST."""
    verified = subprocess.run([*ADMIN, "verify-backup", str(backup)], cwd=ROOT, capture_output=True,
                              text=True, timeout=60)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    shutil.copytree(backup, where)
    with ServerProcess(where, "--appendonly", "yes", "--save", "") as restored:
        return redis.Redis(port=restored.port).execute_command("DEBUG", "DIGEST")


@pytest.mark.parametrize("fsync", ["everysec", "always"])
def test_start_writes_seal_list_verify_restore_cleanup(tmp_path, fsync):
    data = tmp_path / "data"
    with ServerProcess(data, "--appendonly", "yes", "--appendfsync", fsync, "--save", "") as srv:
        r = redis.Redis(port=srv.port)
        for i in range(50):
            r.xadd("s", {"n": i}, id=f"{i + 1}-0")
        r.set("before", "start")
        start_and_wait(r)
        st = status(r)
        assert st["error"] == "" and st["start_time"] > 0 and st["end_time"] == 0
        assert r.info("persistence")["backup_in_progress"] == 1
        # Incrementing: only the snapshot copy is pinned, in <dir>/backupdir.
        backup = data / "backupdir"
        assert listed(r) == [str(backup / "snapshot.lmdb" / "data.mdb")]
        r.xadd("s", {"n": "after-start"}, id="100-0")
        r.bgsave()          # retires the segments before it: the backup pins the ones it needs
        wait_until(lambda: r.info("persistence")["rdb_bgsave_in_progress"] == 0, what="BGSAVE")
        r.set("after", "bgsave")
        r.bgrewriteaof()    # retires them all into a new base: pinned as well
        wait_until(lambda: r.info("persistence")["aof_rewrite_in_progress"] == 0, what="BGREWRITEAOF")
        r.xadd("s", {"n": "after-rewrite"}, id="101-0")
        assert r.execute_command("BACKUP", "SEAL") == b"OK"
        at_seal = r.execute_command("DEBUG", "DIGEST")
        r.set("after", "seal")                  # not in the backup
        st = status(r)
        assert st["state"] == "sealed" and st["end_time"] >= st["start_time"]
        assert r.info("persistence")["backup_in_progress"] == 0
        files = listed(r)
        assert files[0] == str(backup / "snapshot.lmdb" / "data.mdb")
        assert files[-2:] == [str(backup / "appendonlydir" / "appendonly.aof.manifest"),
                              str(backup / "backup.manifest")]
        assert all(os.path.isfile(f) for f in files)
        sizes = {f: os.path.getsize(f) for f in files}
        r.set("more", "x" * 1000)
        assert {f: os.path.getsize(f) for f in files} == sizes      # the sealed set does not grow
        assert digest_of_restored(backup, tmp_path / "restore") == at_seal
        # streamdb-admin restore takes it, and with the live AOF it goes on past the seal.
        final = r.execute_command("DEBUG", "DIGEST")
        with_aof = tmp_path / "restore-with-aof"
        restored = subprocess.run([*ADMIN, "restore", str(backup), str(with_aof), "--aof-from",
                                   str(data / "appendonlydir")], cwd=ROOT, capture_output=True,
                                  text=True, timeout=60)
        assert restored.returncode == 0 and "segment(s)" in restored.stdout, restored.stdout + restored.stderr
        with ServerProcess(with_aof, "--appendonly", "yes", "--save", "") as later:
            assert redis.Redis(port=later.port).execute_command("DEBUG", "DIGEST") == final
        assert r.execute_command("BACKUP", "CLEANUP") == b"OK"
        assert status(r) == {"state": "idle", "error": "", "start_time": 0, "end_time": 0}
        assert backup.is_dir() and os.listdir(backup) == []
        assert r.get("after") == b"seal"


def test_abort_and_the_errors_of_each_state(tmp_path):
    data = tmp_path / "data"
    with ServerProcess(data, "--appendonly", "yes", "--save", "") as srv:
        r = redis.Redis(port=srv.port)
        r.set("k", "v")

        def error(*args) -> str:
            with pytest.raises(redis.ResponseError) as e:
                r.execute_command("BACKUP", *args)
            return str(e.value)

        assert error("ABORT") == "No backup in progress"
        assert error("SEAL") == "No backup ready to seal (must be in the incrementing state)"
        assert r.execute_command("BACKUP", "CLEANUP") == b"OK"          # idle: nothing to do
        assert "wrong number of arguments" in error()
        assert "unknown subcommand" in error("NOPE").lower()
        start_and_wait(r)
        assert error("START") == "A backup is already in progress, ABORT it first"
        assert error("CLEANUP") == "Backup is in progress"
        assert r.execute_command("BACKUP", "ABORT") == b"OK"
        assert status(r)["state"] == "failed" and status(r)["error"] == "aborted by user"
        assert os.listdir(data / "backupdir") == [] and listed(r) == []
        assert error("ABORT") == "No backup in progress"
        assert r.execute_command("BACKUP", "CLEANUP") == b"OK"
        start_and_wait(r)
        assert r.execute_command("BACKUP", "SEAL") == b"OK"
        assert error("START") == "A sealed backup exists, CLEANUP it first"
        assert error("SEAL") == "No backup ready to seal (must be in the incrementing state)"
        assert error("ABORT") == "No backup in progress"
        assert r.execute_command("BACKUP", "CLEANUP") == b"OK"
        # A directory that holds something the server did not write is never used.
        (data / "backupdir" / "theirs").write_text("not ours")
        assert "is not empty" in error("START")
        assert (data / "backupdir" / "theirs").read_text() == "not ours"
        assert status(r)["state"] == "idle"
        # backupdirname is a name under dir, not a path.
        with pytest.raises(redis.ResponseError, match="backupdirname can't be a path"):
            r.config_set("backupdirname", "/tmp/elsewhere")


def test_sealed_ttl_cleans_up_by_itself(tmp_path):
    data = tmp_path / "data"
    with ServerProcess(data, "--appendonly", "yes", "--save", "") as srv:
        r = redis.Redis(port=srv.port)
        assert r.config_get("backup-sealed-ttl") == {"backup-sealed-ttl": "0"}
        assert r.config_get("backupdirname") == {"backupdirname": "backupdir"}
        r.config_set("backup-sealed-ttl", 1)
        r.config_set("backupdirname", "nightly")
        r.set("k", "v")
        start_and_wait(r)
        assert r.execute_command("BACKUP", "SEAL") == b"OK"
        assert (data / "nightly" / "backup.manifest").exists()
        wait_until(lambda: status(r)["state"] == "idle", timeout=20, what="the sealed backup to expire")
        assert os.listdir(data / "nightly") == []
        assert "backup-sealed-ttl" in srv.log_text()


def test_appendonly_no_seals_a_snapshot_of_the_state_at_the_seal(tmp_path):
    data = tmp_path / "data"
    with ServerProcess(data, "--appendonly", "no", "--save", "") as srv:
        r = redis.Redis(port=srv.port)
        r.set("before", "start")
        start_and_wait(r)
        r.xadd("s", {"f": "after-start"}, id="5-0")
        assert r.execute_command("BACKUP", "SEAL") == b"OK"
        at_seal = r.execute_command("DEBUG", "DIGEST")
        r.set("after", "seal")
        assert [os.path.relpath(p, data / "backupdir") for p in listed(r)] == \
            ["snapshot.lmdb/data.mdb", "backup.manifest"]
        assert digest_of_restored(data / "backupdir", tmp_path / "restore") == at_seal


def test_replies_in_resp2_and_resp3_and_command_docs(tmp_path):
    data = tmp_path / "data"
    with ServerProcess(data, "--appendonly", "yes", "--save", "") as srv:
        r = redis.Redis(port=srv.port)
        two, three = RawClient(srv.port), RawClient(srv.port, resp3=True)
        assert two.call("BACKUP", "STATUS") == (b"*", [(b"$", b"state"), (b"$", b"idle"), (b"$", b"error"),
                                                       (b"$", b""), (b"$", b"start_time"), (b":", 0),
                                                       (b"$", b"end_time"), (b":", 0)])
        assert three.call("BACKUP", "STATUS") == (b"%", [(b"$", b"state"), (b"$", b"idle"), (b"$", b"error"),
                                                         (b"$", b""), (b"$", b"start_time"), (b":", 0),
                                                         (b"$", b"end_time"), (b":", 0)])
        assert redis.Redis(port=srv.port, protocol=3).execute_command("BACKUP", "STATUS") == \
            {b"state": b"idle", b"error": b"", b"start_time": 0, b"end_time": 0}
        assert two.call("BACKUP", "LIST") == three.call("BACKUP", "LIST") == (b"*", [])
        assert two.call("BACKUP", "START") == (b"+", b"OK")
        assert three.call("BACKUP", "START") == (b"-", b"ERR A backup is already in progress, ABORT it first")
        (_, [(_, spec)]) = two.call("COMMAND", "INFO", "BACKUP")
        subcommands = {plain(sub[0]): sub for _, sub in spec[9][1]}
        for name in ("start", "seal", "list", "status", "abort", "cleanup"):
            assert sorted(plain(c) for c in subcommands[f"backup|{name}"][6][1]) == \
                ["@admin", "@dangerous", "@slow"]
        (_, docs) = two.call("COMMAND", "DOCS", "BACKUP")
        assert plain(docs[0]) == "backup"
        doc = dict(zip(map(plain, docs[1][1][0::2]), docs[1][1][1::2]))
        assert plain(doc["summary"]) == "A container for backup management commands."
        assert {plain(n) for n in doc["subcommands"][1][0::2]} == \
            {f"backup|{n}" for n in ("start", "seal", "list", "status", "abort", "cleanup", "help")}
        wait_until(lambda: status(r)["state"] == "incrementing", what="incrementing")
        assert three.call("BACKUP", "SEAL") == (b"+", b"OK")
        sealed = three.call("BACKUP", "LIST")
        assert sealed[0] == b"*" and [t for t, _ in sealed[1]] == [b"$"] * len(sealed[1])
        assert sealed == two.call("BACKUP", "LIST")
        state = dict(zip(*[iter(three.call("BACKUP", "STATUS")[1])] * 2))
        assert state[(b"$", b"state")] == (b"$", b"sealed") and state[(b"$", b"end_time")][0] == b":"


def test_the_guide_block_runs_a_whole_window(tmp_path):
    data = tmp_path / "data"
    with ServerProcess(data, "--appendonly", "yes", "--save", "") as srv:
        r = redis.Redis(port=srv.port)
        r.xadd("s", {"f": "v"}, id="1-0")
        digest = r.execute_command("DEBUG", "DIGEST")
        out = run_block(GUIDE, "backup-window", cwd=tmp_path, PORT=srv.port, DATA=data,
                        BACKUP=tmp_path / "backup")
        assert f"digest: {digest.decode()}" in out and "backup OK" in out
        assert status(r)["state"] == "idle" and os.listdir(data / "backupdir") == []
    assert (tmp_path / "backup-sealed" / "backup.manifest").is_file()


@pytest.fixture
def small_backup_disk(tmp_path, tmpfs):
    """The server's data dir, with a 256 KiB tmpfs of this test's own as its backupdir."""
    data = tmp_path / "data"
    tmpfs(data / "backupdir", "256k")
    return data


def test_a_seal_that_fails_leaves_failed_and_nothing_a_verify_would_take(small_backup_disk):
    data = small_backup_disk
    with ServerProcess(data, "--appendonly", "yes", "--save", "") as srv:
        r = redis.Redis(port=srv.port)
        r.set("k", "v")
        start_and_wait(r)
        for i in range(100):                    # ~400 KiB after START: more than the disk holds
            r.xadd("big", {"pad": "x" * 4000}, id=f"{i + 1}-0")
        with pytest.raises(redis.ResponseError, match=r"^Backup seal failed: .*No space left on device"):
            r.execute_command("BACKUP", "SEAL")
        st = status(r)
        assert st["state"] == "failed" and "No space left on device" in st["error"]
        assert os.listdir(data / "backupdir") == [] and listed(r) == []
        # The server goes on: writes, and a new window once there is room.
        r.xtrim("big", maxlen=0)
        assert r.set("after", "failure")
        assert r.execute_command("BACKUP", "CLEANUP") == b"OK" and status(r)["state"] == "idle"
        assert "Backup into" in srv.log_text() and "failed" in srv.log_text()


def test_shutdown_aborts_a_window_not_sealed_and_keeps_a_sealed_one(tmp_path):
    data = tmp_path / "data"
    srv = ServerProcess(data, "--appendonly", "yes", "--save", "").start()
    try:
        start_and_wait(redis.Redis(port=srv.port))
    finally:
        srv.stop()
    assert os.listdir(data / "backupdir") == []
    assert "the server shut down" in srv.log_text()
    with ServerProcess(data, "--appendonly", "yes", "--save", "") as srv:
        r = redis.Redis(port=srv.port)
        start_and_wait(r)
        assert r.execute_command("BACKUP", "SEAL") == b"OK"
    assert (data / "backupdir" / "backup.manifest").is_file()
    with ServerProcess(data, "--appendonly", "yes", "--save", "") as srv:
        r = redis.Redis(port=srv.port)
        assert status(r)["state"] == "idle"         # a restart does not know the sealed backup
        with pytest.raises(redis.ResponseError, match="is not empty"):
            r.execute_command("BACKUP", "START")


def test_start_waits_pending_while_another_snapshot_runs(tmp_path):
    with ServerProcess(tmp_path / "data", "--appendonly", "yes", "--save", "") as srv:
        r = redis.Redis(port=srv.port)
        r.set("k", "v")
        # In one transaction: the BGSAVE's child cannot have been reaped when START runs.
        pipe = r.pipeline(transaction=True)
        pipe.bgsave()
        pipe.execute_command("BACKUP", "START")
        pipe.execute_command("BACKUP", "STATUS")
        pipe.execute_command("BACKUP", "LIST")
        _, started, pending, files = pipe.execute()
        assert started == b"OK" and pending[b"state"] == b"pending" and files == []
        wait_until(lambda: status(r)["state"] == "incrementing", what="the backup to leave pending")
        assert r.execute_command("BACKUP", "SEAL") == b"OK"
