"""STREAMDB.BACKUP, streamdb-admin backup / verify-backup and restore, on real servers and files.

The check of "consistent at the backup's position": the writer runs a known sequence of
commands with explicit ids, so the data at any position is the pre-fill plus the first n
commands of the sequence.  The restored server must hold exactly such a prefix (n read
from it), and its DEBUG DIGEST must equal that of a fresh server given the pre-fill and
those n commands.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis

from docblocks import run_block, start_block
from helpers import ROOT, ServerProcess
from streamdb.cli.procs import free_port, wait_until_ready

ADMIN = [sys.executable, "-m", "streamdb.cli.admin"]
GUIDE = "docs/OPERATIONS.md"
PREFILL = 200
# Docs blocks of docs/OPERATIONS.md this module runs.
DOC_BLOCKS = {"docs/OPERATIONS.md": {"online-backup", "verify-backup", "restore-backup",
                                     "start-restored", "point-of-restore"}}


def admin(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*ADMIN, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def prefill_commands() -> list[list]:
    cmds = [["XADD", "s1", f"{i + 1}-0", "n", str(i)] for i in range(PREFILL)]
    cmds += [["XGROUP", "CREATE", "s1", "g", "0"],
             ["XGROUP", "SETID", "s1", "g", f"{PREFILL // 2}-0", "ENTRIESREAD", str(PREFILL // 2)],
             ["SET", "plain", "value"]]
    return cmds


def writer_command(i: int) -> list:
    """The i-th command of the writer's sequence: alternately into s1 and s2, ids rising."""
    return ["XADD", f"s{1 + i % 2}", f"{1000 + i}-1", "n", str(i), "pad", "x" * 40]


def run(r: redis.Redis, cmds: list[list]) -> None:
    pipe = r.pipeline(transaction=False)
    for c in cmds:
        pipe.execute_command(*c)
    pipe.execute()


class Writer(threading.Thread):
    """XADDs the writer's sequence in pipelined batches until stopped."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.r = redis.Redis(port=port)
        self.sent = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            run(self.r, [writer_command(self.sent + k) for k in range(20)])
            self.sent += 20


def wait_backup(r: redis.Redis, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reply = r.execute_command("STREAMDB.BACKUP", "STATUS")     # a map (RESP3), a list (RESP2)
        pairs = reply.items() if isinstance(reply, dict) else zip(reply[::2], reply[1::2])
        st = {k.decode(): v for k, v in pairs}
        if st["in_progress"] == 0:
            return st
        time.sleep(0.05)
    raise AssertionError("backup did not finish")


def writer_prefix_length(r: redis.Redis) -> int:
    """n such that the data holds exactly the pre-fill + the writer's first n commands."""
    s1 = [int(i.split(b"-")[0]) for i, _ in r.xrange("s1", "1000-0", "+")]
    s2 = [int(i.split(b"-")[0]) for i, _ in r.xrange("s2")]
    n = len(s1) + len(s2)
    assert sorted(s1 + s2) == [1000 + i for i in range(n)], "not a prefix of the writer's sequence"
    assert r.xlen("s1") == PREFILL + len(s1)
    return n


def reference_digest(tmp_path: Path, n: int) -> bytes:
    with ServerProcess(tmp_path / "reference", "--appendonly", "no", "--save", "") as ref:
        r = redis.Redis(port=ref.port)
        run(r, prefill_commands())
        for lo in range(0, n, 500):
            run(r, [writer_command(i) for i in range(lo, min(n, lo + 500))])
        return r.execute_command("DEBUG", "DIGEST")


@pytest.mark.parametrize("fsync, save", [("everysec", ""), ("always", ""),
                                         ("everysec", "1 1")])   # snapshots of their own meanwhile
def test_backup_under_write_load_restores_the_data_at_its_position(tmp_path, fsync, save):
    backup = tmp_path / "backup"
    with ServerProcess(tmp_path / "source", "--appendonly", "yes", "--appendfsync", fsync,
                       "--save", save) as src:
        r = redis.Redis(port=src.port)
        run(r, prefill_commands())
        writer = Writer(src.port)
        writer.start()
        try:
            while writer.sent < 200:
                time.sleep(0.01)
            out = admin("-p", str(src.port), "backup", str(backup))
            assert out.returncode == 0, out.stderr
            assert f"Backup started into {backup}" in out.stdout
            assert "backup done" in out.stdout
            sent_at_end = writer.sent
            time.sleep(0.2)           # the writer goes on after the backup
        finally:
            writer.stop.set()
            writer.join(10)
        assert writer.sent > sent_at_end
        st = wait_backup(r)
        assert st["last_status"] == b"ok" and st["last_dir"] == str(backup).encode()
        assert "Backup finished into" in src.log_text()

    manifest = json.loads((backup / "backup.manifest").read_text())
    last = backup / "appendonlydir" / manifest["position"]["aof_segment"]
    assert last.stat().st_size == manifest["position"]["aof_offset"]
    assert manifest["position"]["aof_offset"] > len(b"#SDBAOF 1\r\n")   # writes after the snapshot

    verified = admin("verify-backup", str(backup))
    assert verified.returncode == 0, verified.stderr
    assert "backup OK" in verified.stdout

    # Restore: the backup's files copied into an empty directory, a server on another port.
    restore = tmp_path / "restore"
    shutil.copytree(backup, restore)
    with ServerProcess(restore, "--appendonly", "yes", "--save", "") as restored:
        rr = redis.Redis(port=restored.port)
        n = writer_prefix_length(rr)
        digest = rr.execute_command("DEBUG", "DIGEST")
    assert 200 <= n < writer.sent         # written under load: some before, some after
    assert f"digest: {digest.decode()}" in verified.stdout
    assert digest == reference_digest(tmp_path, n)


def test_backup_without_aof_is_the_snapshot(tmp_path):
    backup = tmp_path / "backup"
    with ServerProcess(tmp_path / "source", "--appendonly", "no", "--save", "") as src:
        r = redis.Redis(port=src.port)
        run(r, prefill_commands())
        digest = r.execute_command("DEBUG", "DIGEST")
        assert r.execute_command("STREAMDB.BACKUP", str(backup)) == f"Backup started into {backup}".encode()
        assert wait_backup(r)["last_status"] == b"ok"
    assert not (backup / "appendonlydir").exists()
    verified = admin("verify-backup", str(backup))
    assert verified.returncode == 0, verified.stderr
    assert f"digest: {digest.decode()}" in verified.stdout
    assert "entries: 200" in verified.stdout and "groups: 1" in verified.stdout
    with ServerProcess(backup, "--appendonly", "no", "--save", "") as restored:
        assert redis.Redis(port=restored.port).execute_command("DEBUG", "DIGEST") == digest


def test_a_relative_backup_directory_is_taken_from_the_servers_dir(tmp_path):
    """As Redis works in its ``dir``: a relative path never lands where the server was started."""
    data = tmp_path / "source"
    with ServerProcess(data, "--appendonly", "yes", "--save", "") as src:
        r = redis.Redis(port=src.port)
        r.xadd("s", {"f": "v"}, id="1-1")
        reply = r.execute_command("STREAMDB.BACKUP", "nightly/1")
        assert reply == f"Backup started into {data / 'nightly' / '1'}".encode()
        assert wait_backup(r)["last_status"] == b"ok"
    assert (data / "nightly" / "1" / "backup.manifest").is_file()
    assert not (ROOT / "nightly").exists()


@pytest.fixture
def taken_backup(tmp_path):
    """A backup with a snapshot and a non-empty AOF segment after it."""
    backup = tmp_path / "backup"
    with ServerProcess(tmp_path / "source", "--appendonly", "yes", "--save", "") as src:
        r = redis.Redis(port=src.port)
        run(r, prefill_commands())
        r.bgsave()
        time.sleep(0.5)
        run(r, [writer_command(i) for i in range(50)])
        r.execute_command("STREAMDB.BACKUP", str(backup))
        assert wait_backup(r)["last_status"] == b"ok"
    assert admin("verify-backup", str(backup)).returncode == 0
    return backup


def _segment(backup: Path) -> Path:
    return max((backup / "appendonlydir").glob("*.aof"), key=lambda p: p.stat().st_size)


def _flip(path: Path, at: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[at] ^= 0x01
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("damage, message", [
    (lambda b: _flip(_segment(b), _segment(b).stat().st_size // 2), "sha256 mismatch"),
    (lambda b: _flip(b / "snapshot.lmdb" / "data.mdb", 5000), "snapshot.lmdb/data.mdb: sha256 mismatch"),
    (lambda b: _segment(b).write_bytes(_segment(b).read_bytes()[:-7]), "(truncated or torn)"),
    (lambda b: _segment(b).unlink(), "is missing"),
    (lambda b: (b / "backup.manifest").unlink(), "is not a complete backup"),
    (lambda b: (b / "backup.manifest").write_text(
        (b / "backup.manifest").read_text().replace('"format": 1', '"format": 1, "x": 1')),
     "checksum mismatch"),
])
def test_a_damaged_backup_fails_verify_with_a_clear_message(taken_backup, damage, message):
    damage(taken_backup)
    out = admin("verify-backup", str(taken_backup))
    assert out.returncode == 1
    assert message in out.stderr and str(taken_backup) in out.stderr
    assert "backup OK" not in out.stdout


def test_refusals_redis_cli_and_acl(tmp_path):
    with ServerProcess(tmp_path / "source", "--appendonly", "yes", "--save", "") as src:
        r = redis.Redis(port=src.port)
        run(r, prefill_commands())
        busy = tmp_path / "busy"
        busy.mkdir()
        (busy / "something").write_text("x")
        with pytest.raises(redis.ResponseError, match=f"Backup directory {busy} is not empty"):
            r.execute_command("STREAMDB.BACKUP", str(busy))
        # Two in one request: the second arrives while the first is under way.
        pipe = r.pipeline(transaction=False)
        pipe.execute_command("STREAMDB.BACKUP", str(tmp_path / "one"))
        pipe.execute_command("STREAMDB.BACKUP", str(tmp_path / "two"))
        first, second = pipe.execute(raise_on_error=False)
        assert first == f"Backup started into {tmp_path / 'one'}".encode()
        assert isinstance(second, redis.ResponseError)
        assert str(second) == f"Backup already in progress (into {tmp_path / 'one'})"
        assert wait_backup(r)["last_status"] == b"ok"
        assert not (tmp_path / "two").exists()
        info = r.info("persistence")
        assert info["backup_in_progress"] == 0 and info["backup_last_status"] == "ok"
        assert info["backup_last_dir"] == str(tmp_path / "one")

        cli = subprocess.run(["redis-cli", "-p", str(src.port), "STREAMDB.BACKUP", str(tmp_path / "cli")],
                             capture_output=True, text=True, timeout=30)
        assert cli.stdout.strip() == f"Backup started into {tmp_path / 'cli'}"
        wait_backup(r)
        cli = subprocess.run(["redis-cli", "-p", str(src.port), "STREAMDB.BACKUP", "STATUS"],
                             capture_output=True, text=True, timeout=30)
        assert cli.stdout.splitlines()[:4] == ["in_progress", "0", "phase", "idle"]

        for category in ("admin", "dangerous"):
            assert "streamdb.backup" in r.acl_cat(category)
        r.execute_command("ACL", "SETUSER", "app", "on", "nopass", "+@all", "-@dangerous", "~*")
        app = redis.Redis(port=src.port, username="app", password="x")
        with pytest.raises(redis.exceptions.NoPermissionError):
            app.execute_command("STREAMDB.BACKUP", str(tmp_path / "denied"))
        with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
            r.execute_command("STREAMDB.BACKUP")
    failed = admin("-p", str(src.port), "backup", str(tmp_path / "gone"))
    assert failed.returncode == 2      # the server is gone: exit 2, as the other subcommands


def test_admin_backup_reports_a_refusal(tmp_path):
    with ServerProcess(tmp_path / "source", "--save", "") as src:
        busy = tmp_path / "busy"
        busy.mkdir()
        (busy / "x").write_text("x")
        out = admin("-p", str(src.port), "backup", str(busy))
    assert out.returncode == 1
    assert f"Backup directory {busy} is not empty" in out.stderr


def test_the_guide_blocks_back_up_verify_and_restore(tmp_path):
    backup, restore_dir = tmp_path / "backup", tmp_path / "restore"
    with ServerProcess(tmp_path / "source", "--appendonly", "yes", "--save", "") as src:
        r = redis.Redis(port=src.port)
        run(r, prefill_commands() + [writer_command(i) for i in range(30)])
        digest = r.execute_command("DEBUG", "DIGEST")
        out = run_block(GUIDE, "online-backup", cwd=tmp_path, PORT=src.port, BACKUP=backup)
        assert "backup done" in out
    out = run_block(GUIDE, "verify-backup", cwd=tmp_path, BACKUP=backup)
    assert f"digest: {digest.decode()}" in out and "backup OK" in out
    run_block(GUIDE, "restore-backup", cwd=tmp_path, BACKUP=backup, RESTORE_DIR=restore_dir)
    port = free_port()
    restored = start_block(GUIDE, "start-restored", cwd=tmp_path, RESTORE_PORT=port,
                           RESTORE_DIR=restore_dir)
    try:
        wait_until_ready(port, restored)
        assert redis.Redis(port=port).execute_command("DEBUG", "DIGEST") == digest
    finally:
        restored.terminate()
        assert restored.wait(timeout=20) == 0


def test_point_of_restore_replays_the_old_servers_later_segments(tmp_path):
    data, backup, restore_dir = tmp_path / "source", tmp_path / "backup", tmp_path / "restore"
    with ServerProcess(data, "--appendonly", "yes", "--save", "") as src:
        r = redis.Redis(port=src.port)
        run(r, prefill_commands())
        r.execute_command("STREAMDB.BACKUP", str(backup))
        assert wait_backup(r)["last_status"] == b"ok"
        run(r, [writer_command(i) for i in range(300)])        # after the backup
        final = r.execute_command("DEBUG", "DIGEST")
        src.kill9()
    shutil.rmtree(data / "snapshot.lmdb")                         # the disaster: the snapshot is gone
    out = run_block(GUIDE, "point-of-restore", cwd=tmp_path, BACKUP=backup, RESTORE_DIR=restore_dir,
                    DATA=data)
    assert "plus 1 segment(s)" in out
    restored_dir = tmp_path / "restore-with-aof"                # the block's "$RESTORE_DIR-with-aof"
    with ServerProcess(restored_dir, "--appendonly", "yes", "--save", "") as restored:
        rr = redis.Redis(port=restored.port)
        assert writer_prefix_length(rr) == 300
        assert rr.execute_command("DEBUG", "DIGEST") == final


def test_point_of_restore_refuses_what_does_not_continue_the_backup(tmp_path):
    data, backup = tmp_path / "source", tmp_path / "backup"
    with ServerProcess(data, "--appendonly", "yes", "--save", "") as src:
        r = redis.Redis(port=src.port)
        run(r, prefill_commands())
        r.execute_command("STREAMDB.BACKUP", str(backup))
        assert wait_backup(r)["last_status"] == b"ok"
        run(r, [writer_command(i) for i in range(10)])
        position = json.loads((backup / "backup.manifest").read_text())["position"]["aof_segment"]
        # Another history: the segment the backup ends in, with different bytes.
        foreign_dir = tmp_path / "foreign"
        shutil.copytree(data / "appendonlydir", foreign_dir)
        _flip(foreign_dir / position, 5)
        foreign = admin("restore", str(backup), str(tmp_path / "r1"), "--aof-from", str(foreign_dir))
        assert foreign.returncode == 1
        assert f"{foreign_dir / position} does not begin with the backup's copy" in foreign.stderr
        assert not (tmp_path / "r1").exists()

        r.bgsave()                  # a snapshot after the backup retires the segment it ends in
        deadline = time.monotonic() + 20
        while (data / "appendonlydir" / position).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    retired = admin("restore", str(backup), str(tmp_path / "r2"), "--aof-from", str(data / "appendonlydir"))
    assert retired.returncode == 1
    assert f"no longer holds {position}" in retired.stderr
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("x")
    refused = admin("restore", str(backup), str(busy))
    assert refused.returncode == 1 and "is not an empty directory" in refused.stderr
    plain = admin("restore", str(backup), str(tmp_path / "r3"))
    assert plain.returncode == 0 and "plus" not in plain.stdout
    assert sorted(p.name for p in (tmp_path / "r3").iterdir()) == ["appendonlydir", "snapshot.lmdb"]


def test_a_backup_waits_for_a_rewrite_under_way(tmp_path):
    backup = tmp_path / "backup"
    with ServerProcess(tmp_path / "source", "--appendonly", "yes", "--save", "") as src:
        r = redis.Redis(port=src.port)
        run(r, prefill_commands())
        pipe = r.pipeline(transaction=False)
        pipe.execute_command("BGREWRITEAOF")
        pipe.execute_command("STREAMDB.BACKUP", str(backup))
        pipe.execute_command("INFO", "persistence")
        rewrite, started, info = pipe.execute()
        assert info["aof_rewrite_in_progress"] == 1 and info["rdb_bgsave_in_progress"] == 0
        assert info["backup_in_progress"] == 1 and info["backup_phase"] == "snapshot"
        assert wait_backup(r)["last_status"] == b"ok"
        digest = r.execute_command("DEBUG", "DIGEST")
    verified = admin("verify-backup", str(backup))
    assert verified.returncode == 0, verified.stderr
    assert f"digest: {digest.decode()}" in verified.stdout
