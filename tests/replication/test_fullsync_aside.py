"""A replica loads a full sync aside and switches only once the payload is complete
(real processes on loopback, the link relayed by linkproxy.LinkProxy to stop it at a
chosen byte of the payload).

The replica has 1k entries of its own; the primary ~21k.  A transfer cut in the
middle (the primary kill -9'd, or the payload damaged on its way) leaves the replica
serving, persisting and -- promoted -- owning exactly its old data, its replication
id/offset unmoved and the payload file gone; so does a payload that does not fit on
the replica's disk (a tmpfs); a complete transfer replaces the data.
"""

from __future__ import annotations

import socket
import subprocess
import zlib

import pytest
import redis

from helpers import ServerProcess, aof_frames
from linkproxy import LinkProxy
import streamdb.commands  # noqa: F401  (the package's import order: commands before replication)
from streamdb.persistence.aof import frame_size, segment_seq, split_commands
from streamdb.protocol import encode_command
from streamdb.replication.fullsync import CHECKSUM_CAPA, MARK_LEN, PayloadAside, PayloadError
from test_replication import client, info, link_up, populate, wait_synced, wait_until
from test_replication_faults import bulk_xadd

OWN_ENTRIES = 1000
PRIMARY_ENTRIES = 21000
HOLD_AT = 200_000          # payload bytes relayed before the transfer is frozen (of ~1 MB)


def payload_files(srv) -> list:
    return sorted(srv.data_dir.glob("temp-fullsync-*"))


def digest(c: redis.Redis) -> bytes:
    return c.execute_command("DEBUG", "DIGEST")


@pytest.fixture
def primary(tmp_path):
    with ServerProcess(tmp_path / "p", "--save", "") as p:
        cp = client(p)
        populate(cp)
        bulk_xadd(p.port, "big", PRIMARY_ENTRIES)
        yield p


@pytest.fixture
def replica_args() -> tuple:
    """More arguments for the replica (a test parametrizes this name to set them)."""
    return ()


@pytest.fixture
def replica(tmp_path, replica_args):
    """A server with data of its own (AOF on), not yet a replica."""
    with ServerProcess(tmp_path / "r", "--save", "", *replica_args) as r:
        cr = client(r)
        bulk_xadd(r.port, "own", OWN_ENTRIES)
        cr.xgroup_create("own", "g", id="0")
        cr.xreadgroup("g", "c", {"own": ">"}, count=10)
        yield r


def frozen_mid_transfer(cr: redis.Redis, proxy: LinkProxy) -> dict:
    """REPLICAOF through the proxy; returns INFO replication once the replica has read
    the payload's first HOLD_AT bytes (the relay holds the rest)."""
    cr.replicaof("127.0.0.1", proxy.port)
    assert proxy.held.wait(20)
    return wait_until(lambda: (lambda i: i if i.get("master_sync_read_bytes", 0) > 0 else None)
                      (info(cr)), 10, "payload bytes read")


def assert_old_data(cr: redis.Redis, before: bytes) -> None:
    assert digest(cr) == before
    assert cr.xlen("own") == OWN_ENTRIES
    assert cr.xlen("big") == 0


def test_primary_kill9_mid_transfer_leaves_the_old_data_served_persisted_and_promotable(
        primary, replica):
    p, r = primary, replica
    cr = client(r)
    before = digest(cr)
    ri = info(cr)
    replid, offset = ri["master_replid"], ri["master_repl_offset"]     # its data's position
    with LinkProxy(p.port, hold_after=HOLD_AT) as proxy:
        ri = frozen_mid_transfer(cr, proxy)
        assert ri["master_sync_in_progress"] == 1 and ri["master_link_status"] == "down"
        assert 0 < ri["master_sync_read_bytes"] <= HOLD_AT
        # Mid-transfer: the old data is served (no -LOADING), the payload is in a file.
        assert_old_data(cr, before)
        assert len(payload_files(r)) == 1
        p.kill9()
        # What the primary had sent past the hold is lost with it (it sits in the
        # relay's socket buffer, which would otherwise deliver it all).
        proxy.cut()
        ri = wait_until(lambda: (lambda i: i if i["master_sync_in_progress"] == 0 else None)
                        (info(cr)), 10, "the cut transfer given up")
    assert ri["master_link_status"] == "down" and "master_link_down_since_seconds" in ri
    # The partial payload moved neither the id nor the offset a later PSYNC would ask for.
    assert (ri["master_replid"], ri["master_repl_offset"]) == (replid, offset)
    assert "connection lost during the full sync transfer" in r.log_text()
    assert "Flushing old data" not in r.log_text()
    assert_old_data(cr, before)
    assert payload_files(r) == []
    # Promoted: exactly the old data.
    assert cr.execute_command("REPLICAOF", "NO", "ONE") == b"OK"
    assert_old_data(cr, before)
    # Its files restart to the same data (the AOF never saw the payload), and it takes writes.
    r.kill9()
    r.start()
    cr = client(r)
    assert_old_data(cr, before)
    cr.xadd("own", {"after": "promotion"})


def test_promoted_during_the_transfer_keeps_exactly_the_old_data(primary, replica):
    p, r = primary, replica
    cr = client(r)
    before = digest(cr)
    with LinkProxy(p.port, hold_after=HOLD_AT) as proxy:
        frozen_mid_transfer(cr, proxy)
        assert cr.execute_command("REPLICAOF", "NO", "ONE") == b"OK"
        proxy.release()
        assert_old_data(cr, before)
        assert payload_files(r) == []
        assert "master_sync_in_progress" not in info(cr)
        r.kill9()
        r.start()
        assert_old_data(client(r), before)


def test_a_damaged_payload_is_discarded_and_the_next_sync_switches(primary, replica):
    p, r = primary, replica
    cp, cr = client(p), client(r)
    with LinkProxy(p.port, corrupt_at=HOLD_AT) as proxy:
        cr.replicaof("127.0.0.1", proxy.port)
        assert proxy.corrupted.wait(20)
        wait_until(lambda: link_up(cr), 30, "link up after the retry")
        wait_synced(cp, cr, timeout=30)
    log = r.log_text()
    assert "checksum does not match" in log
    # The damaged copy never replaced anything: one flush, the good copy's.
    assert log.count("Flushing old data") == 1
    assert cp.info("stats")["sync_full"] == 2


def test_a_complete_sync_switches_to_the_primary_data_and_persists_it(primary, replica):
    p, r = primary, replica
    cp, cr = client(p), client(r)
    cr.replicaof("127.0.0.1", p.port)
    wait_until(lambda: link_up(cr), 30, "link up")
    theirs = wait_synced(cp, cr, timeout=30)
    assert cr.exists("own") == 0 and cr.xlen("big") == PRIMARY_ENTRIES
    assert payload_files(r) == []
    # The replica's own files describe the new data set: restarted, it has it, and
    # continues the primary's stream partially.
    r.kill9()
    r.args += ["--replicaof", "127.0.0.1", str(p.port)]
    r.start()
    cr = client(r)
    wait_until(lambda: link_up(cr), 30, "link up after restart")
    assert wait_synced(cp, cr, timeout=30) == theirs
    assert cp.info("stats")["sync_full"] == 1


# No node cache: its snapshot, soon after the switch, would rotate the AOF and retire the
# frame this test cuts (STREAMDB_TEST_STREAM_CACHE would set one).
@pytest.mark.parametrize("replica_args", [("--stream-cache-size", "0")])
def test_the_switch_is_one_aof_frame_so_a_kill9_while_writing_it_restarts_with_the_old_data(
        primary, replica):
    p, r = primary, replica
    cp, cr = client(p), client(r)
    before = digest(cr)
    cr.replicaof("127.0.0.1", p.port)
    wait_until(lambda: link_up(cr), 30, "link up")
    wait_synced(cp, cr, timeout=30)
    r.kill9()
    seg = max((r.data_dir / "appendonlydir").glob("*.incr.aof"), key=lambda f: segment_seq(f.name))
    frames = aof_frames(seg)
    # The FLUSHALL and the whole payload (up to its last key, in db 2) are the last frame.
    flushes = [i for i, (_, body) in enumerate(frames) if b"FLUSHALL" in body]
    assert flushes == [len(frames) - 1]
    offset, body = frames[-1]
    assert b"big" in body and b"elsewhere" in body
    # A kill -9 in the middle of writing it: the segment ends half way into the frame.
    with open(seg, "r+b") as f:
        f.truncate(offset + frame_size(body) // 2)
    r.start()
    assert_old_data(client(r), before)

@pytest.fixture
def small_disk(tmp_path, tmpfs):
    """A 512 KiB tmpfs for the replica's directory: room for its own data, not for the
    primary's ~1 MB payload."""
    return tmpfs(tmp_path / "small", "512k")


def test_a_payload_that_does_not_fit_on_disk_leaves_the_old_data_then_syncs_once_it_does(
        primary, small_disk):
    p = primary
    cp = client(p)
    with ServerProcess(small_disk / "r", "--save", "") as r:
        cr = client(r)
        bulk_xadd(r.port, "own", OWN_ENTRIES)
        before = digest(cr)
        cr.replicaof("127.0.0.1", p.port)
        wait_until(lambda: "No space left on device" in r.log_text(), 20, "the disk full")
        # The failed receive changed nothing: old data served, the file gone.
        wait_until(lambda: payload_files(r) == [], 10, "the partial payload removed")
        assert_old_data(cr, before)
        assert info(cr)["master_link_status"] == "down"
        assert "Flushing old data" not in r.log_text()
        # With room on the disk the next attempt switches.
        subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
        wait_until(lambda: link_up(cr), 30, "link up once the payload fits")
        wait_synced(cp, cr, timeout=30)
        assert cr.exists("own") == 0


# -- the payload's framing, both ends ---------------------------------------------------

def read_payload(port: int, *capas: bytes) -> tuple[bytes, bytes]:
    """A replica's handshake on a raw socket, announcing ``capas``: (the ``$`` header
    line, everything after it up to and including the end mark)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        capa = b"".join(b"$4\r\ncapa\r\n$%d\r\n%s\r\n" % (len(c), c) for c in capas)
        s.sendall(b"*%d\r\n$8\r\nREPLCONF\r\n%s" % (1 + 2 * len(capas), capa)
                  + b"*3\r\n$5\r\nPSYNC\r\n$1\r\n?\r\n$2\r\n-1\r\n")
        got = b""
        while got.count(b"\r\n") < 3:            # +OK, +FULLRESYNC, the $ header
            got += s.recv(65536)
        head, rest = got.split(b"\r\n", 3)[2:]
        mark = head.split(b":")[1]
        while not rest.endswith(mark):            # the live stream waits for our ACK
            data = s.recv(1 << 20)
            assert data, "primary closed the link"
            rest += data
        return head, rest


def test_the_checksum_goes_only_to_a_replica_that_asks_for_it(primary):
    """An older replica (no capa streamdb-crc32) gets the old form, which it would
    otherwise take the checksum for part of: upgrades run old and new side by side."""
    head, rest = read_payload(primary.port, b"eof", b"psync2")
    assert head.startswith(b"$EOF:") and len(head) == 5 + MARK_LEN
    body = rest[:-MARK_LEN]
    assert split_commands(body)[-1] == [b"SELECT", b"0"]      # the body ends on a command
    head, rest = read_payload(primary.port, b"eof", b"psync2", CHECKSUM_CAPA)
    assert head.endswith(b":crc32") and len(head) == 5 + MARK_LEN + 6
    body, crc = rest[:-MARK_LEN - 8], rest[-MARK_LEN - 8:-MARK_LEN]
    assert crc == b"%08x" % zlib.crc32(body)
    assert split_commands(body)[-1] == [b"SELECT", b"0"]


BODY = encode_command([b"SELECT", b"0"]) + encode_command([b"SET", b"k", b"v" * 5000])
MARK = b"m" * MARK_LEN


def fed(tmp_path, header: bytes, wire: bytes, step: int = 7):
    """A PayloadAside fed ``wire`` in ``step``-byte reads: (it, whether it completed)."""
    aside = PayloadAside(str(tmp_path), header)
    done = False
    for i in range(0, len(wire), step):
        done = aside.feed(wire[i:i + step])
        if done:
            assert i + step >= len(wire), "complete before the end"
    return aside, done


@pytest.mark.parametrize("header, wire", [
    (b"$EOF:" + MARK, BODY + MARK),
    (b"$EOF:" + MARK + b":crc32", BODY + b"%08x" % zlib.crc32(BODY) + MARK),
    (b"$%d" % len(BODY), BODY),
])
def test_a_replica_accepts_each_form_and_reads_back_the_body(tmp_path, header, wire):
    aside, done = fed(tmp_path, header, wire)
    try:
        assert done and aside.size == len(BODY) and aside.commands == 2
        assert [argv for batch in aside.batches() for argv in batch] == split_commands(BODY)
    finally:
        aside.remove()
    assert list(tmp_path.iterdir()) == []


def test_a_replica_refuses_a_wrong_checksum_and_a_body_cut_inside_a_command(tmp_path):
    with pytest.raises(PayloadError, match="checksum does not match"):
        fed(tmp_path, b"$EOF:" + MARK + b":crc32", BODY + b"%08x" % (zlib.crc32(BODY) ^ 1) + MARK)
    with pytest.raises(PayloadError, match="middle of a command"):
        fed(tmp_path, b"$EOF:" + MARK, BODY[:-3] + MARK)
    aside, done = fed(tmp_path, b"$EOF:" + MARK, BODY + MARK[:-1])      # cut before the end
    assert not done
    aside.remove()
