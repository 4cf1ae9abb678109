"""docs/OPERATIONS.md read from top to bottom, as a reader would on one machine.

Every ``guide-test`` block runs in the guide's order, under ``bash -eu`` (``set -u``: a
variable the guide never sets stops the walk), with the guide's own variables block run
first and nothing else set: its absolute paths are moved into a scratch directory (which
stands for the machine's root) and its ports to free ones.  Between blocks the test does
only what the guide's prose tells the reader to do (start the server it describes, stop a
server before working on its files).  The other tests of the guide's blocks
(test_operations_guide.py, test_backup.py, ...) check what each block gives in detail;
this one checks that the guide works as a whole, in order: a block that reuses a path an
earlier one filled, or names a variable nobody set, fails here."""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

import redis

from docblocks import block_command, block_env, rewrite_ports, runnable_blocks, shell_blocks
from helpers import ServerProcess
from test_operations_guide import fill_sensor_streams
from streamdb.cli.procs import free_port, wait_until_ready

GUIDE = "docs/OPERATIONS.md"
DOC_BLOCKS = {"docs/OPERATIONS.md": {"variables"}}

# The guide's blocks in reading order.  A block added to the guide must be placed here (the
# first test fails until it is), with whatever the reader does around it in the walk below.
WALK = ["variables", "metrics-names", "online-backup", "verify-backup", "restore-backup", "start-restored",
        "point-of-restore", "backup-window", "backup", "restore", "check", "repair",
        "persistence-status", "bgsave-after-fork-failure", "crashtest-faults", "replicate",
        "compare", "promote", "crashtest-failover", "stream-cache", "retention", "stream-tools",
        "dead-letter", "group-time", "import-rdb", "fsync", "stop"]
# Blocks the walk reads but does not run again: they start servers of their own, use no
# variable and no state of the walk, and the test named runs them as written.
SELF_CONTAINED = {"crashtest-faults": "tests/persistence/test_crashtest.py (as root)",
                  "crashtest-failover": "tests/persistence/test_crashtest.py"}


def test_the_walk_covers_every_block_of_the_guide_in_its_order():
    assert [b.label for b in shell_blocks() if b.doc == GUIDE and b.mark == "guide-test"] == WALK


class Reader:
    """A shell session on the reader's machine: the guide's variables, then one block."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ports = {6379: free_port(), 6380: free_port(), 6381: free_port(), 9121: free_port()}
        # The machine's directories the guide's paths live in (a backup disk at /backup, and
        # /run/streamdb as systemd's RuntimeDirectory makes it).
        for d in ("var/lib", "backup", "run/streamdb"):
            (root / d).mkdir(parents=True)
        variables = runnable_blocks(GUIDE)["variables"]
        self.variables = re.sub(r"(?m)^(\w+)=/", rf"\g<1>={root}/", rewrite_ports(variables, self.ports))
        self.env = block_env(root, self.ports)

    def path(self, name: str) -> Path:
        """The value the guide's variable ``name`` has in this walk."""
        return Path(self.run_script(f'printf %s "${name}"'))

    def run_script(self, text: str) -> str:
        proc = subprocess.run(["bash", "-eu", "-c", self.variables + "\n" + text], env=self.env,
                              cwd=self.root, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"{text!r} failed:\n{proc.stdout}\n{proc.stderr}"
        return proc.stdout

    def run(self, name: str) -> str:
        return self.run_script(block_command(GUIDE, name, self.ports))

    def start(self, name: str, port: int) -> subprocess.Popen:
        """A block that runs a server in the foreground; the reader stops it with Ctrl-C."""
        proc = subprocess.Popen(["bash", "-eu", "-c", self.variables + "\nexec " +
                                 block_command(GUIDE, name, self.ports)],
                                env=self.env, cwd=self.root, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        wait_until_ready(port, proc)
        return proc


def _redis_rdb_file() -> bytes:
    """A small Redis RDB file as redis-server 7.0 writes one: its header and an aux
    field, database 0 with a string and a stream (the stream's object is Redis's DUMP
    form of it, type 19), the end and the CRC64 of it all."""
    from streamdb.engine import Stream
    from streamdb.persistence import rdb
    stream = Stream()
    stream.append((1 << 64) | 1, [b"sku", b"A-100"], 0, 0)
    stream_object = rdb.dump_payload(stream)[1:-10]

    def string(s: bytes) -> bytes:
        return bytes((len(s),)) + s

    data = (b"REDIS0010" + b"\xfa" + string(b"redis-ver") + string(b"7.0.15") + b"\xfe\x00" +
            b"\x00" + string(b"greeting") + string(b"hello") +
            b"\x13" + string(b"orders:eu") + stream_object + b"\xff")
    return data + rdb.crc64(data).to_bytes(8, "little")


def _stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 0


def test_the_guide_from_top_to_bottom(tmp_path):
    reader = Reader(tmp_path)
    port, replica_port, restore_port = (reader.ports[p] for p in (6379, 6380, 6381))
    reader.run("variables")
    data, pidfile = reader.path("DATA"), reader.path("PIDFILE")

    # Deploy: the server the guide speaks of, with its data directory and pidfile.
    def start_primary() -> ServerProcess:
        return ServerProcess(data, "--appendonly", "yes", "--pidfile", str(pidfile),
                             "--metrics-port", str(reader.ports[9121]), port=port).start()

    primary = start_primary()
    replica = None
    try:
        digest = fill_sensor_streams(port)

        # Monitor: the metrics endpoint (metrics-port 9121 in the shipped config).
        assert 'redis_stream_group_lag{db="db0",stream="sensor:0",group="alerts"}' in reader.run("metrics-names")

        # Back up and restore: online backup, verify, restore it, look at it.
        reader.run("online-backup")
        assert reader.run("verify-backup").endswith("backup OK\n")
        reader.run("restore-backup")
        restored = reader.start("start-restored", restore_port)
        assert redis.Redis(port=restore_port).execute_command("DEBUG", "DIGEST") == digest
        _stop(restored)
        reader.run("point-of-restore")
        assert (reader.path("RESTORE_DIR").parent / "streamdb-restored-with-aof").is_dir()
        # Redis's BACKUP window, sealed, checked, copied away and cleaned up.
        assert reader.run("backup-window").splitlines()[-1] == "OK"
        assert (reader.path("BACKUP").parent / (reader.path("BACKUP").name + "-sealed") / "backup.manifest").is_file()

        # Without the backup command: a copy, then a second server on it.
        reader.run("backup")
        copy = reader.start("restore", restore_port)
        assert redis.Redis(port=restore_port).execute_command("DEBUG", "DIGEST") == digest
        _stop(copy)

        # "The tools work on a stopped server's files": the reader stops it first, and
        # starts it again after the repair.
        primary.stop()
        assert "AOF is valid" in reader.run("check")
        reader.run("repair")
        primary = start_primary()
        assert redis.Redis(port=port).execute_command("DEBUG", "DIGEST") == digest

        # When the disk fills, a fork fails or a file is damaged: where things stand, and
        # the snapshot an operator asks for once the cause is fixed.
        assert "aof_last_write_status:ok" in reader.run("persistence-status")
        assert "rdb_last_bgsave_status:ok" in reader.run("bgsave-after-fork-failure")

        # Replicate and promote: "a replica is a second server".
        replica = ServerProcess(tmp_path / "replica-data", "--save", "", port=replica_port).start()
        reader.run("replicate")
        assert "digest: equal" in reader.run("compare")
        assert reader.run("promote").splitlines()[1] == "master"

        for name in ("stream-cache", "retention"):
            reader.run(name)
        # The tools read sensor:0: its third entry is i = 6 of fill_sensor_streams (19 + 6).
        assert reader.run("stream-tools").splitlines()[-1].endswith(" temperature=25.5")

        # Dead letters: a billing worker failed an order once too often.
        r = redis.Redis(port=port)
        r.xadd("orders", {"item": "book"}, id="1-1")
        r.xgroup_create("orders", "billing", id="0")
        r.execute_command("STREAMDB.GROUP", "SET", "orders", "billing", "MAXDELIVERIES", 5,
                          "DEADLETTER", "orders:dlq")
        r.xreadgroup("billing", "worker", {"orders": ">"})
        for _ in range(5):                         # the fifth time back dead-letters it
            r.xreadgroup("billing", "worker", {"orders": "0"})
        dead = reader.run("dead-letter")
        assert "orders:dlq" in dead and "1 replayed" in dead
        reader.run("group-time")

        # Move streams from Redis: the reader has a Redis server's dump.rdb at $REDIS_RDB.
        rdb_path = reader.path("REDIS_RDB")
        rdb_path.parent.mkdir(parents=True)
        rdb_path.write_bytes(_redis_rdb_file())
        assert "imported 2 keys" in reader.run("import-rdb")
        assert redis.Redis(port=port).xrange("orders:eu") == [(b"1-1", {b"sku": b"A-100"})]

        reader.run("fsync")

        reader.run("stop")
        assert primary.proc.wait(timeout=30) == 0
        assert not pidfile.exists()
    finally:
        primary.stop()
        if replica is not None:
            replica.stop()
