"""The append-only file: real files, real SIGKILL, torn tails, corruption, disk errors."""

from __future__ import annotations

import shutil
import socket
import time
from pathlib import Path

import pytest
import redis

import streamdb.commands  # noqa: F401
from streamdb.commands.server import digest_keyspace
from streamdb.dispatch.effects import EffectBatch
from streamdb.persistence.aof import Aof, AofCorruption, AofError, read_segment, segment_logical_size, SEGMENT_MAGIC
from streamdb.server.core import Core

from helpers import ServerProcess, wait_until


def _core_with_aof(d: Path, **kw) -> tuple[Core, Aof]:
    core = Core()
    aof = Aof(core, str(d), **kw)
    aof.load()
    aof.open_for_append()
    core.add_effect_sink(aof.append_batch)
    return core, aof


def _run(core: Core, aof: Aof, client, *args) -> object:
    reply = core.execute(client, [a if isinstance(a, bytes) else str(a).encode() for a in args])
    assert aof.flush()
    return reply


def _load_digest(d: Path, load_truncated: bool = True) -> str:
    core = Core()
    Aof(core, str(d), load_truncated=load_truncated).load()
    return digest_keyspace(core)


@pytest.fixture
def written_aof(tmp_path):
    """An AOF of 12 turns; returns (dir, segment path, [digest after each turn], [segment size after each turn])."""
    d = tmp_path / "aof"
    core, aof = _core_with_aof(d, fsync="always")
    c = core.new_client()
    digests, sizes = [digest_keyspace(core)], [aof.size]

    def turn(*args):
        _run(core, aof, c, *args)
        digests.append(digest_keyspace(core))
        sizes.append(aof.size)

    for i in range(12):
        turn("XADD", "s", f"{i + 1}-1", "field", f"value-{i}")
        if i % 4 == 3:
            core.execute(c, [b"MULTI"])
            core.execute(c, [b"XADD", b"s", f"{i + 1}-2".encode(), b"m", b"1"])
            core.execute(c, [b"SELECT", b"2"])
            core.execute(c, [b"SET", b"other", f"x{i}".encode()])
            core.execute(c, [b"SELECT", b"0"])
            turn("EXEC")
    aof.close()
    seg = d / aof.manifest.incrs[-1]
    return d, seg, digests, sizes


def test_a_torn_tail_at_every_byte_offset_loads_the_last_whole_frame(written_aof, tmp_path):
    d, seg, digests, sizes = written_aof
    original = seg.read_bytes()
    start = sizes[-4]                                 # the last three frames, every byte
    for cut in range(start, len(original)):
        work = tmp_path / f"cut{cut}"
        shutil.copytree(d, work)
        (work / seg.name).write_bytes(original[:cut])
        whole_frames = max(i for i, size in enumerate(sizes) if size <= cut)
        assert _load_digest(work) == digests[whole_frames], f"cut at {cut}"
        # the torn bytes were cut off on load; a second load sees a clean file
        assert (work / seg.name).stat().st_size == sizes[whole_frames]
        shutil.rmtree(work)


def test_torn_tail_is_an_error_when_aof_load_truncated_is_no(written_aof):
    d, seg, digests, sizes = written_aof
    data = seg.read_bytes()
    seg.write_bytes(data[:-3])
    with pytest.raises(AofError, match="aof-load-truncated is no"):
        _load_digest(d, load_truncated=False)
    assert seg.read_bytes() == data[:-3]        # nothing on disk changed


def test_a_bit_flip_in_the_middle_is_a_clear_error_and_changes_nothing(written_aof):
    d, seg, digests, sizes = written_aof
    data = bytearray(seg.read_bytes())
    where = sizes[3] + 20                        # inside the 4th frame's body
    data[where] ^= 0x01
    seg.write_bytes(bytes(data))
    before = sorted((p.name, p.read_bytes()) for p in d.iterdir())
    with pytest.raises(AofError) as e:
        _load_digest(d)
    assert seg.name in str(e.value) and f"offset {sizes[3]}" in str(e.value)
    assert sorted((p.name, p.read_bytes()) for p in d.iterdir()) == before


def test_a_missing_segment_named_by_the_manifest_is_an_error(written_aof):
    d, seg, _, _ = written_aof
    seg.unlink()
    with pytest.raises(AofError, match="does not exist"):
        _load_digest(d)


def test_a_corrupt_manifest_is_an_error(written_aof):
    d, _, _, _ = written_aof
    m = d / "appendonly.aof.manifest"
    m.write_text(m.read_text().replace("seq", "sex"))
    with pytest.raises(AofError, match="manifest"):
        _load_digest(d)


def test_rewrite_keeps_the_state_and_retires_old_segments(written_aof):
    d, seg, digests, _ = written_aof
    core, aof = _core_with_aof(d)
    assert digest_keyspace(core) == digests[-1]
    aof.rewrite()
    c = core.new_client()
    _run(core, aof, c, "XADD", "s", "100-1", "after", "rewrite")
    expected = digest_keyspace(core)
    aof.close()
    names = sorted(p.name for p in d.iterdir())
    assert seg.name not in names and any(n.endswith(".base.aof") for n in names)
    assert _load_digest(d) == expected


def test_read_segment_rejects_foreign_files():
    with pytest.raises(AofError, match="bad segment header"):
        read_segment(b"*1\r\n$4\r\nPING\r\n", "x.aof")
    # A part of the header is no torn write: the header is fsynced before a manifest names it.
    with pytest.raises(AofCorruption, match="no segment header") as e:
        read_segment(SEGMENT_MAGIC[:5])
    assert e.value.offset == 0


# -- a real server process ---------------------------------------------------------------


def test_kill9_loses_no_acknowledged_write_under_always(tmp_path):
    d = tmp_path / "data"
    acked: list[bytes] = []
    for round_ in range(3):
        srv = ServerProcess(d, "--appendonly", "yes", "--appendfsync", "always", "--save", "").start()
        r = redis.Redis(port=srv.port)
        assert [e[0] for e in r.xrange("log")] == acked
        for i in range(200):
            acked.append(r.xadd("log", {"round": round_, "i": i}))
        # (aof-preallocate: the frames were written over zeros written ahead of them.)
        seg = max((d / "appendonlydir").glob("*.incr.aof"))
        wait_until(lambda: seg.stat().st_size > segment_logical_size(seg), 10, "preallocated zeros")
        srv.kill9()
        srv.stop()
    srv = ServerProcess(d, "--appendonly", "yes", "--save", "").start()
    try:
        assert [e[0] for e in redis.Redis(port=srv.port).xrange("log")] == acked
    finally:
        srv.stop()


def test_a_server_refuses_to_start_on_a_corrupt_aof(tmp_path):
    d = tmp_path / "data"
    srv = ServerProcess(d, "--appendonly", "yes", "--appendfsync", "always", "--save", "").start()
    r = redis.Redis(port=srv.port)
    for i in range(20):
        r.xadd("s", {"i": i})
    srv.stop()
    seg = next((d / "appendonlydir").glob("*.incr.aof"))
    data = bytearray(seg.read_bytes())
    data[len(data) // 2] ^= 0x40
    seg.write_bytes(bytes(data))
    bad = ServerProcess(d, "--appendonly", "yes", "--save", "")
    with pytest.raises(RuntimeError, match="exited"):
        bad.start()
    bad.stop()
    assert "Fatal error loading the AOF" in bad.log_text() and seg.name in bad.log_text()
    assert seg.read_bytes() == bytes(data)


@pytest.mark.parametrize("inject", ["AOF-INJECT-ERROR", "AOF-INJECT-FSYNC-ERROR"])
def test_write_or_fsync_errors_hold_replies_refuse_writes_and_recover(tmp_path, inject):
    """A failed write, or a failed fsync on the aof-fsync thread (under always it runs
    pipelined with the loop): the reply stays held, writes are refused, the frames are
    written again, and once the disk works the write is acknowledged and survives kill -9."""
    d = tmp_path / "data"
    srv = ServerProcess(d, "--appendonly", "yes", "--appendfsync", "always", "--save", "").start()
    try:
        r = redis.Redis(port=srv.port)
        r.xadd("s", {"a": 1}, id="1-1")
        assert r.execute_command("DEBUG", inject, "25") == b"OK"   # ~2-3 s of failing retries
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        s.sendall(b"XADD s 2-1 a 2\r\n")
        s.settimeout(0.25)
        with pytest.raises(socket.timeout):      # not acknowledged while not durable
            s.recv(100)
        with pytest.raises(redis.ResponseError, match="MISCONF Errors writing to the AOF file"):
            r.xadd("s", {"a": 3}, id="3-1")
        assert r.xlen("s") == 2                  # reads keep working
        s.settimeout(10)
        assert s.recv(100) == b"$3\r\n2-1\r\n"   # the retry succeeded: acknowledged now
        r.xadd("s", {"a": 4}, id="4-1")          # and writes are accepted again
        assert r.info("persistence")["aof_last_write_status"] == "ok"
        srv.kill9()
        srv.stop()
        srv = ServerProcess(d, "--appendonly", "yes", "--save", "").start()
        assert [e[0] for e in redis.Redis(port=srv.port).xrange("s")] == [b"1-1", b"2-1", b"4-1"]
    finally:
        srv.stop()


def test_no_snapshot_or_rewrite_starts_while_a_failed_write_waits_for_the_disk(tmp_path):
    """A snapshot or a rewrite starts by rotating the AOF.  With a frame that failed to
    write still waiting, the snapshot would hold its effects and the retry would write
    them into the new segment as well: the restart would apply them twice and stop.
    So BGSAVE and BGREWRITEAOF are refused until the frame is on disk."""
    d = tmp_path / "data"
    srv = ServerProcess(d, "--appendonly", "yes", "--appendfsync", "always", "--save", "").start()
    try:
        r = redis.Redis(port=srv.port)
        r.xadd("s", {"a": 1}, id="1-1")
        assert r.execute_command("DEBUG", "AOF-INJECT-ERROR", "25") == b"OK"
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=20)
        # One read, one turn: the XADD's frame fails to write when BGSAVE rotates.
        s.sendall(b"XADD s 2-1 a 2\r\nBGSAVE\r\nBGREWRITEAOF\r\n")
        replies = b""
        while replies.count(b"\r\n") < 4:
            replies += s.recv(1000)
        refused = b"-ERR the AOF's last writes are not on disk yet (No space left on device); " \
                  b"try again once they are\r\n"
        assert replies == b"$3\r\n2-1\r\n" + refused + refused
        assert r.bgsave()
        wait_until(lambda: r.info("persistence")["rdb_bgsave_in_progress"] == 0)
        srv.kill9()
        srv.stop()
        srv = ServerProcess(d, "--appendonly", "yes", "--save", "").start()
        assert [e[0] for e in redis.Redis(port=srv.port).xrange("s")] == [b"1-1", b"2-1"]
    finally:
        srv.stop()


def _write_xadds(d: Path, n: int) -> None:
    """An AOF (no snapshot) of ``n`` XADDs to ``s``, written through a core as a server would."""
    core, aof = _core_with_aof(d / "appendonlydir", fsync="no")
    c = core.new_client()
    for i in range(n):
        core.execute(c, [b"XADD", b"s", b"%d-1" % (i + 1), b"sensor-id", b"1234", b"temperature", b"19.8"])
        if i % 1000 == 0:
            aof.flush()
    aof.close()


def test_no_snapshot_starts_while_the_aof_replays(tmp_path):
    """The loop ticks while a long AOF replays (clients get LOADING meanwhile).  An
    automatic snapshot started then (here: the node cache's, which replayed seals ask
    for) would hold half the replay and cover no segment, and the next start would
    replay those commands a second time and refuse to start."""
    d = tmp_path / "data"
    _write_xadds(d, 60_000)
    args = ("--appendonly", "yes", "--save", "", "--hz", "100", "--stream-cache-size", "1kb")
    for start in range(2):          # the second start loads what the first one left
        srv = ServerProcess(d, *args).start()
        try:
            r = redis.Redis(port=srv.port)
            wait_until(lambda: r.info("persistence")["loading"] == 0, 60, "the load")
            assert r.xlen("s") == 60_000
            if start == 0:
                log = srv.log_path.read_text().splitlines()
                loaded = next(i for i, line in enumerate(log) if "DB loaded from disk" in line)
                assert not [line for line in log[:loaded] if "Background saving started" in line]
        finally:
            srv.kill9()
            srv.stop()


def test_clients_see_loading_progress_while_a_large_aof_loads(tmp_path):
    """The server listens while it recovers: INFO reports progress, other commands get LOADING."""
    d = tmp_path / "data"
    _write_xadds(d, 60_000)
    import subprocess
    import sys as _sys
    from helpers import ROOT, free_port
    port = free_port()
    proc = subprocess.Popen([_sys.executable, "-m", "streamdb", "--port", str(port), "--dir", str(d),
                             "--appendonly", "yes", "--save", ""], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=10)
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.005)
        f = s.makefile("rb")

        def reply() -> bytes:
            line = f.readline()
            if line.startswith(b"$"):
                return line + f.read(int(line[1:]) + 2)
            return line

        seen_progress = seen_loading_error = False
        while time.monotonic() < deadline:
            s.sendall(b"INFO persistence\r\nXLEN s\r\n")      # one pipelined pair per poll
            info, xlen = reply(), reply()
            assert info.startswith(b"$"), info
            if b"loading:1" not in info:
                assert xlen == b":60000\r\n"
                break
            seen_progress = seen_progress or b"loading_loaded_perc:" in info
            assert xlen in (b"-LOADING Redis is loading the dataset in memory\r\n", b":60000\r\n")
            seen_loading_error = seen_loading_error or xlen.startswith(b"-LOADING")
            time.sleep(0.01)
        assert seen_progress and seen_loading_error
        s.close()
    finally:
        proc.terminate()
        proc.wait(30)


def test_bgrewriteaof_compacts_in_a_child_while_writes_continue(tmp_path):
    d = tmp_path / "data"
    srv = ServerProcess(d, "--appendonly", "yes", "--appendfsync", "always", "--save", "").start()
    try:
        r = redis.Redis(port=srv.port)
        for i in range(2000):
            r.xadd("s", {"i": i}, maxlen=500, approximate=False)
        r.xgroup_create("s", "g", id="0")
        r.xreadgroup("g", "c", {"s": ">"}, count=5)
        # (Logical sizes: the segment being written has zeros preallocated after its frames.)
        before = sum(segment_logical_size(p) for p in (d / "appendonlydir").glob("*.aof"))
        assert r.bgrewriteaof()
        for i in range(50):                                  # the loop keeps serving
            r.xadd("s", {"during": i})
        deadline = time.monotonic() + 30
        while r.info("persistence")["aof_rewrite_in_progress"] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert r.info("persistence")["aof_last_bgrewrite_status"] == "ok"
        names = sorted(p.name for p in (d / "appendonlydir").iterdir())
        assert sum(1 for n in names if n.endswith(".base.aof")) == 1
        after = sum(segment_logical_size(p) for p in (d / "appendonlydir").glob("*.aof"))
        assert after < before
        digest = r.execute_command("DEBUG", "DIGEST")
        srv.kill9()
        srv.stop()
        srv = ServerProcess(d, "--appendonly", "yes", "--save", "").start()
        assert redis.Redis(port=srv.port).execute_command("DEBUG", "DIGEST") == digest
    finally:
        srv.stop()


def test_replay_of_xadd_runs_gives_the_live_state_whatever_the_frame_layout(tmp_path):
    """AOF load executes the logged effects as commands: interleaved keys, node sealing,
    several dbs, groups, transactions and expiring keys in the same frames load to the
    same state."""
    import random
    rng = random.Random(7)
    d = tmp_path / "aof"
    core, aof = _core_with_aof(d, fsync="no")
    core.config.values["stream-node-max-entries"] = 7       # many sealed nodes
    c = core.new_client()
    keys = [b"a", b"b", b"c"]
    for k in keys:
        core.execute(c, [b"XGROUP", b"CREATE", k, b"g", b"$", b"MKSTREAM"])
    for _ in range(3000):
        r = rng.random()
        k = rng.choice(keys)
        if r < 0.75:
            core.execute(c, [b"XADD", k, b"*", b"f", b"%d" % rng.randrange(100), b"g", b"x"])
        elif r < 0.80:
            core.execute(c, [b"XREADGROUP", b"GROUP", b"g", b"c1", b"COUNT", b"3", b"STREAMS", k, b">"])
        elif r < 0.83:
            core.execute(c, [b"XTRIM", k, b"MAXLEN", b"~", b"40"])
        elif r < 0.86:
            core.execute(c, [b"SELECT", b"%d" % rng.randrange(3)])
        elif r < 0.88:
            core.execute(c, [b"MULTI"])
            core.execute(c, [b"XADD", k, b"*", b"in", b"multi"])
            core.execute(c, [b"XADD", b"d", b"*", b"in", b"multi"])
            core.execute(c, [b"EXEC"])
        elif r < 0.89:
            core.execute(c, [b"PEXPIRE", b"e", b"100000000"])
            core.execute(c, [b"XADD", b"e", b"*", b"exp", b"1"])
        else:
            core.execute(c, [b"XDEL", k, b"%d-0" % rng.randrange(1, 10**13)])
        if rng.random() < 0.1:
            aof.flush()                     # frames of a few to a few dozen commands
    aof.close()
    expected = digest_keyspace(core)
    assert _load_digest(d) == expected


def test_an_xadd_effect_the_stream_refuses_stops_the_load_with_the_frame_offset(tmp_path):
    """A logged XADD the stream refuses stops the load, naming the problem."""
    d = tmp_path / "aof"
    core, aof = _core_with_aof(d, fsync="no")
    c = core.new_client()
    core.execute(c, [b"XADD", b"s", b"5-1", b"f", b"v"])
    aof.append_batch(EffectBatch(0, [[b"XADD", b"s", b"6-1", b"f", b"v"],
                                     [b"XADD", b"s", b"4-1", b"f", b"v"]], atomic=False))
    aof.close()
    with pytest.raises(AofError, match="fails to apply.*equal or smaller"):
        _load_digest(d)


def test_swapdb_replays_from_the_aof_and_reaches_an_incremental_snapshot(tmp_path):
    """SWAPDB is logged as it is: a restart from the AOF alone, and one from a snapshot
    taken after the swap (incremental before it), reproduce the swapped databases."""
    d = tmp_path / "data"
    args = ("--appendonly", "yes", "--appendfsync", "always", "--save", "")
    srv = ServerProcess(d, *args).start()
    try:
        r0, r3 = redis.Redis(port=srv.port), redis.Redis(port=srv.port, db=3)
        r0.xadd("s", {"f": "zero"}, id="1-1")
        r0.set("plain", "x")
        r3.xadd("s", {"f": "three"}, id="2-1")
        r3.xgroup_create("s", "g", id="0")
        r0.swapdb(0, 3)
        r0.xadd("s", {"f": "after"}, id="3-1")
        assert r0.xrange("s") == [(b"2-1", {b"f": b"three"}), (b"3-1", {b"f": b"after"})]
        assert r3.get("plain") == b"x"
        digest = r0.execute_command("DEBUG", "DIGEST")
        srv.kill9()
        srv = ServerProcess(d, *args).start()
        r0, r3 = redis.Redis(port=srv.port), redis.Redis(port=srv.port, db=3)
        assert r0.execute_command("DEBUG", "DIGEST") == digest
        r0.save()                        # from here snapshots are incremental
        r3.xadd("s", {"f": "late"}, id="4-1")
        r0.swapdb(3, 0)
        r0.save()                        # covers every segment: the swap must be in it
        digest = r0.execute_command("DEBUG", "DIGEST")
        srv.kill9()
        srv = ServerProcess(d, *args).start()
        r0 = redis.Redis(port=srv.port)
        assert r0.execute_command("DEBUG", "DIGEST") == digest
        assert r0.xrange("s") == [(b"1-1", {b"f": b"zero"}), (b"4-1", {b"f": b"late"})]
    finally:
        srv.stop()


def test_a_clients_aof_mark_is_fsynced_only_once_its_frame_is(tmp_path):
    """WAITAOF's local test (Aof.fsynced): a write's mark is covered by an fsync of its
    frame, not by one of the frames before it, and not by a failed fsync."""
    core, aof = _core_with_aof(tmp_path / "aof", fsync="always")
    a, b = core.new_client(), core.new_client()
    assert aof.fsynced(a.aof_woff)                    # nothing written: covered
    _run(core, aof, a, "XADD", "s", "1-1", "f", "v")   # no loop: fsynced in flush
    assert aof.fsynced(a.aof_woff)
    core.execute(b, [b"XADD", b"s", b"2-1", b"f", b"v"])
    assert aof.fsynced(a.aof_woff) and not aof.fsynced(b.aof_woff)   # still in the buffer
    aof.inject_fsync_failures = 1
    assert not aof.flush()                            # written, the fsync failed
    assert not aof.fsynced(b.aof_woff)
    core.execute(a, [b"XADD", b"s", b"3-1", b"f", b"v"])   # queued behind the retried frame
    assert aof.flush()
    assert aof.fsynced(b.aof_woff) and aof.fsynced(a.aof_woff)
    aof.close()


def test_an_automatic_rewrite_has_the_log_synced_by_the_fsync_thread_before_it_rotates(tmp_path):
    """An automatic rewrite rotates first, and the rotation fdatasyncs the old segment on
    the loop: after a big write that held every client (about 150 ms per 100 MB).  Under
    everysec the rewrite now first has the aof-fsync thread sync the log, whose fsyncs
    fsync.log records (the rotation's own is not): the first segment was synced to past
    its big frame by the thread, before the rotation left it.  (hz 100: without this, the
    rewrite starts within 10 ms of the write, and the thread's own once-a-second fsync
    almost never falls in between.)"""
    big = 8 << 20
    srv = ServerProcess(tmp_path / "d", "--save", "", "--appendfsync", "everysec", "--hz", "100",
                        "--aof-record-fsync", "yes", "--auto-aof-rewrite-percentage", "100",
                        "--auto-aof-rewrite-min-size", "1mb").start()
    try:
        r = redis.Redis(port=srv.port)
        r.xadd("s", {"f": b"x" * big}, id="1-1")
        wait_until(lambda: r.info("persistence")["aof_rewrites"] >= 1 and
                   not r.info("persistence")["aof_rewrite_in_progress"], what="the automatic rewrite")
        synced = [line.split() for line in
                  (srv.data_dir / "appendonlydir" / "fsync.log").read_text().splitlines()]
        assert any(seg == "appendonly.aof.1.incr.aof" and int(offset) > big
                   for seg, offset in synced), synced
        assert r.xrange("s") == [(b"1-1", {b"f": b"x" * big})]
    finally:
        srv.stop()
