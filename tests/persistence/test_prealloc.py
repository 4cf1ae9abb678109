"""The AOF's preallocated zeros (aof-preallocate, persistence/prealloc.py) on real files
and real server processes.

Under ``appendfsync always`` the segment being written is physically longer than its
frames: zeros, written and fdatasync'ed ahead by a thread, follow the last frame.  A
kill -9 leaves them in the file.  What is checked here: that readers take them as the
clean end (and a frame torn by a crash, zeros after it, as a torn tail), that a restart
appends at the end of the frames, that sizes stay logical, that the thread never writes
over a frame, and that tools, backups and restores agree.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

import streamdb.commands  # noqa: F401
from helpers import ROOT, ServerProcess, wait_until
from streamdb.commands.server import digest_keyspace
from streamdb.persistence import prealloc
from streamdb.persistence.aof import (SEGMENT_MAGIC, Aof, AofCorruption, content_end, encode_frame,
                                      read_segment, segment_logical_size)
from streamdb.protocol.request import encode_request
from streamdb.server.core import Core

# (No stream cache even under STREAMDB_TEST_STREAM_CACHE: with one, the server snapshots
# by itself, which rotates the segment these tests follow.)
ALWAYS = ("--appendonly", "yes", "--appendfsync", "always", "--save", "", "--stream-cache-size", "0")


BODIES = [encode_request(b"XADD", b"s", b"%d-1" % i, b"f", b"v" * (i * 7 % 40)) for i in range(1, 13)]
SEGMENT = SEGMENT_MAGIC + b"".join(encode_frame(b) for b in BODIES)


def _same_verdict(a: bytes, b: bytes) -> None:
    """read_segment judges ``a`` and ``b`` alike: frames, end, torn or corrupt and why."""
    def verdict(data):
        try:
            s = read_segment(data, "x.aof")
            return s.frames, s.valid_end, s.torn_at, s.torn_reason
        except AofCorruption as e:
            return "corrupt", e.offset
    assert verdict(a) == verdict(b)


# -- reading -------------------------------------------------------------------------------


def test_zeros_after_the_last_frame_are_the_clean_end():
    for zeros in (1, 3, 4096, (1 << 20) + 5):
        scan = read_segment(SEGMENT + bytes(zeros), "x.aof")
        assert scan.frames == BODIES and scan.torn_at is None
        assert scan.valid_end == scan.end == len(SEGMENT) and scan.size == len(SEGMENT) + zeros
    header_only = read_segment(SEGMENT_MAGIC + bytes(1 << 20))
    assert header_only.frames == [] and header_only.torn_at is None
    assert header_only.valid_end == len(SEGMENT_MAGIC)
    # A file of zeros only lost its header, which is fsynced before a manifest names it:
    # damage, not a torn write.
    with pytest.raises(AofCorruption, match="all zeros"):
        read_segment(bytes(4096))
    assert content_end(bytes(3 << 20)) == 0 and content_end(b"a\0b" + bytes(5)) == 3


def test_a_torn_frame_followed_by_zeros_is_judged_as_one_at_the_end_of_the_file():
    """What a crash leaves of a frame written over the zeros: its first bytes, zeros after
    (the file keeps its size), at every byte of the last three frames."""
    boundaries = [len(SEGMENT) - sum(len(encode_frame(b)) for b in BODIES[k:]) for k in (-3, -2, -1)]
    for cut in range(boundaries[0], len(SEGMENT)):
        torn = SEGMENT[:cut]
        _same_verdict(torn, torn + bytes(len(SEGMENT) - cut))       # zeros to the old end
        _same_verdict(torn, torn + bytes(1 << 16))                  # and further
        scan = read_segment(torn + bytes(8))
        assert (scan.torn_at is None) == (cut in boundaries)
        assert scan.valid_end == max(b for b in boundaries if b <= cut)


def test_a_frame_with_a_hole_of_zeros_and_only_zeros_after_is_a_torn_last_frame():
    # The header and the end of the body reached the disk, a page in between did not.
    last = encode_frame(BODIES[-1] + b"x" * 9000)[:-2] + b"\r\n"
    hole = bytearray(last)
    hole[4096:8192] = bytes(4096)
    scan = read_segment(SEGMENT + bytes(hole) + bytes(1 << 16))
    assert scan.torn_at == len(SEGMENT) and scan.torn_reason == "checksum mismatch in the last frame"
    assert scan.frames == BODIES


@pytest.mark.parametrize("after", [b"x", b"#F 3 00000000\r\nabc", encode_frame(BODIES[0])])
def test_anything_but_zeros_after_the_zeros_is_corruption_in_the_middle(after):
    data = SEGMENT + bytes(5000) + after + bytes(100)
    with pytest.raises(AofCorruption) as e:
        read_segment(data, "x.aof")
    assert e.value.offset == len(SEGMENT) and "corruption in the middle" in str(e.value)
    # A bad frame, zeros, then a byte: in the middle too.
    bad = bytearray(SEGMENT)
    bad[-5] ^= 0x01
    with pytest.raises(AofCorruption):
        read_segment(bytes(bad) + bytes(5000) + b"x")
    # ... while with only zeros after it, it is the torn last frame.
    assert read_segment(bytes(bad) + bytes(5000)).torn_reason == "checksum mismatch in the last frame"


# -- an Aof in this process ----------------------------------------------------------------


def _aof(d: Path, **kw) -> tuple[Core, Aof]:
    core = Core()
    aof = Aof(core, str(d), fsync=kw.pop("fsync", "always"), **kw)
    aof.load()
    aof.open_for_append()
    core.add_effect_sink(aof.append_batch)
    return core, aof


def _xadds(core: Core, aof: Aof, n: int, width: int = 200, first: int = 1) -> None:
    c = core.new_client()
    for i in range(first, first + n):
        core.execute(c, [b"XADD", b"s", b"%d-1" % i, b"f", b"v" * width])
        assert aof.flush()


def _file(aof: Aof) -> Path:
    return Path(aof.dir) / aof.manifest.incrs[-1]


def test_frames_go_at_the_logical_end_with_durable_zeros_ahead_and_sizes_stay_logical(tmp_path):
    core, aof = _aof(tmp_path / "aof")
    seg = _file(aof)
    wait_until(lambda: aof.prealloc.durable >= prealloc.MIN_ROOM, 10, "the first room")
    _xadds(core, aof, 500)
    assert aof.size == aof.total_size == segment_logical_size(seg)
    wait_until(lambda: aof.prealloc.durable > aof.size, 10, "zeros ahead")
    assert seg.stat().st_size > aof.size
    data = seg.read_bytes()
    scan = read_segment(data)
    assert len(scan.frames) == 500 and scan.valid_end == aof.size and scan.torn_at is None
    assert data[aof.size:] == bytes(len(data) - aof.size)
    # Rotation: the sealed segment is cut back to its frames by the thread (the loop goes on).
    aof.rotate()
    wait_until(lambda: seg.stat().st_size == scan.valid_end, 10, "the sealed segment cut back")
    assert aof.segment_size(seg.name) == scan.valid_end and aof.segment_size(_file(aof).name) == aof.size
    _xadds(core, aof, 10, first=501)
    expected = digest_keyspace(core)
    aof.close()                       # a clean shutdown leaves no zeros
    assert _file(aof).stat().st_size == segment_logical_size(_file(aof)) == aof.size
    core2, aof2 = _aof(tmp_path / "aof")
    assert digest_keyspace(core2) == expected
    aof2.close()


def test_a_crash_image_loads_clean_and_appends_after_the_last_frame(tmp_path):
    """The files as a kill -9 leaves them (copied while the Aof is open): zeros after the
    frames, no torn tail; the next run writes at the end of the frames, and a third
    reads everything."""
    core, aof = _aof(tmp_path / "live")
    _xadds(core, aof, 300)
    wait_until(lambda: aof.prealloc.durable > aof.size, 10, "zeros ahead")
    crash = tmp_path / "crash"
    shutil.copytree(tmp_path / "live", crash)
    expected = digest_keyspace(core)
    seg = crash / aof.manifest.incrs[-1]
    size_before = seg.stat().st_size
    assert size_before > aof.size
    core2, aof2 = _aof(crash)
    assert digest_keyspace(core2) == expected
    assert aof2.size == aof.size and aof2.total_size == aof.size      # the logical end, not st_size
    assert seg.stat().st_size >= size_before                          # nothing was cut
    _xadds(core2, aof2, 50, first=301)
    expected = digest_keyspace(core2)
    scan = read_segment(seg.read_bytes())
    assert len(scan.frames) == 350 and scan.torn_at is None
    again = tmp_path / "again"
    shutil.copytree(crash, again)          # crashed again, zeros still there
    core3, aof3 = _aof(again)
    assert digest_keyspace(core3) == expected
    for a in (aof, aof2, aof3):
        a.close()


def test_the_thread_never_writes_zeros_over_a_frame(tmp_path, monkeypatch):
    """Tiny chunks and rooms, frames of every size from a few bytes to more than a
    room: the frames keep catching up with the zeros, and the thread extends hundreds
    of times meanwhile.  Every frame reads back, in order.  (Small values: the test's
    own memory stays low, which the RSS bounds of later tests' servers include.)"""
    monkeypatch.setattr(prealloc, "CHUNK", 1024)
    monkeypatch.setattr(prealloc, "FIRST_CHUNK", 256)
    monkeypatch.setattr(prealloc, "MIN_ROOM", 4096)
    core, aof = _aof(tmp_path / "aof", preallocate=8192)
    rng = random.Random(5)
    c = core.new_client()
    extended = 0
    last_target = aof.prealloc.target
    for i in range(1, 2501):
        core.execute(c, [b"XADD", b"s", b"%d-1" % i, b"f", b"v" * rng.choice((1, 50, 300, 2000, 10000))])
        assert aof.flush()
        if aof.prealloc.target != last_target:
            extended, last_target = extended + 1, aof.prealloc.target
        if i % 500 == 0:
            scan = read_segment(_file(aof).read_bytes())     # while the thread works
            assert len(scan.frames) == i and scan.valid_end == aof.size and scan.torn_at is None
    assert extended > 100
    expected = digest_keyspace(core)
    aof.close()
    core2, aof2 = _aof(tmp_path / "aof")
    assert digest_keyspace(core2) == expected
    aof2.close()


def test_a_failed_write_cuts_the_zeros_back_and_the_retry_lands_after_the_last_frame(tmp_path):
    core, aof = _aof(tmp_path / "aof")
    _xadds(core, aof, 20)
    wait_until(lambda: aof.prealloc.durable > aof.size, 10, "zeros ahead")
    c = core.new_client()
    aof.inject_failures = 1
    core.execute(c, [b"XADD", b"s", b"21-1", b"f", b"v"])
    assert not aof.flush()
    assert _file(aof).stat().st_size == aof.size            # cut back, zeros too
    assert aof.flush()                                      # the retry
    _xadds(core, aof, 20, first=22)
    wait_until(lambda: aof.prealloc.durable > aof.size, 10, "zeros ahead again")
    scan = read_segment(_file(aof).read_bytes())
    assert len(scan.frames) == 41 and scan.valid_end == aof.size
    aof.close()


def test_no_zeros_under_everysec_or_with_aof_preallocate_0_until_always_is_set(tmp_path):
    core, aof = _aof(tmp_path / "a", fsync="everysec")
    _xadds(core, aof, 20)
    assert aof.prealloc is None and _file(aof).stat().st_size == aof.size
    aof.policy = "always"                     # CONFIG SET appendfsync always
    _xadds(core, aof, 1, first=21)
    assert aof.prealloc is not None
    wait_until(lambda: _file(aof).stat().st_size > aof.size, 10, "zeros ahead")
    aof.close()
    core, aof = _aof(tmp_path / "b", preallocate=0)
    _xadds(core, aof, 20)
    time.sleep(0.1)
    assert aof.prealloc is None and _file(aof).stat().st_size == aof.size
    aof.close()


def test_a_crash_image_reopened_under_everysec_loses_its_zeros(tmp_path):
    core, aof = _aof(tmp_path / "live")
    _xadds(core, aof, 30)
    wait_until(lambda: aof.prealloc.durable > aof.size, 10, "zeros ahead")
    shutil.copytree(tmp_path / "live", tmp_path / "crash")
    aof.close()
    core2, aof2 = _aof(tmp_path / "crash", fsync="everysec")
    assert _file(aof2).stat().st_size == aof2.size == aof.size
    aof2.close()


# -- real servers --------------------------------------------------------------------------


def _segment(data_dir: Path) -> Path:
    return sorted((data_dir / "appendonlydir").glob("*.incr.aof"), key=lambda p: int(p.name.split(".")[-3]))[-1]


def _kill9_with_zeros(srv: ServerProcess) -> Path:
    """kill -9 once the segment has zeros after its frames; returns the segment."""
    seg = _segment(srv.data_dir)
    wait_until(lambda: seg.stat().st_size > segment_logical_size(seg) + 4096, 10, "preallocated zeros")
    srv.kill9()
    srv.stop()
    assert seg.stat().st_size > segment_logical_size(seg)
    return seg


def _write_at_logical_end(seg: Path, data: bytes) -> int:
    """Write ``data`` where the next frame would go (over the zeros); returns that offset."""
    at = segment_logical_size(seg)
    with open(seg, "r+b") as f:
        f.seek(at)
        f.write(data)
    assert seg.stat().st_size > at + len(data)          # zeros after it
    return at


def test_kill9_restart_appends_after_the_frames_and_a_second_restart_reads_everything(tmp_path):
    d = tmp_path / "data"
    srv = ServerProcess(d, *ALWAYS).start()
    r = redis.Redis(port=srv.port)
    acked = [r.xadd("log", {"i": i, "pad": "p" * 100}) for i in range(300)]
    info = r.info("persistence")
    seg = _kill9_with_zeros(srv)
    assert info["aof_current_size"] == segment_logical_size(seg) < seg.stat().st_size
    srv = ServerProcess(d, *ALWAYS).start()
    try:
        r = redis.Redis(port=srv.port)
        assert [e[0] for e in r.xrange("log")] == acked
        assert "torn tail" not in srv.log_text()
        assert r.info("persistence")["aof_current_size"] == segment_logical_size(seg)
        acked += [r.xadd("log", {"i": i}) for i in range(300, 400)]
        _kill9_with_zeros(srv)
        scan = read_segment(seg.read_bytes(), str(seg))
        assert scan.torn_at is None and scan.size > scan.end
        srv = ServerProcess(d, *ALWAYS).start()
        assert [e[0] for e in redis.Redis(port=srv.port).xrange("log")] == acked
        assert "torn tail" not in srv.log_text()
    finally:
        srv.stop()
    assert seg.stat().st_size == segment_logical_size(seg)      # a clean stop cuts the zeros


TORN = {
    "body-cut": lambda: encode_frame(encode_request(b"XADD", b"log", b"*", b"torn", b"x" * 3000))[:1500],
    "header-cut": lambda: b"#F 3012 1a2b",
    "hole-in-body": lambda: (lambda f: f[:100] + bytes(2000) + f[2100:])(
        encode_frame(encode_request(b"XADD", b"log", b"*", b"torn", b"x" * 3000))),
}


@pytest.mark.parametrize("torn", TORN)
def test_a_torn_frame_followed_by_zeros_is_a_torn_tail_under_both_settings(tmp_path, torn):
    d = tmp_path / "data"
    srv = ServerProcess(d, *ALWAYS).start()
    r = redis.Redis(port=srv.port)
    acked = [r.xadd("log", {"i": i}) for i in range(50)]
    seg = _kill9_with_zeros(srv)
    at = _write_at_logical_end(seg, TORN[torn]())
    broken = seg.read_bytes()
    refused = ServerProcess(d, *ALWAYS, "--aof-load-truncated", "no")
    with pytest.raises(RuntimeError, match="exited"):
        refused.start()
    refused.stop()
    assert f"at offset {at} (aof-load-truncated is no" in refused.log_text()
    assert "corruption in the middle" not in refused.log_text()
    assert seg.read_bytes() == broken                                   # nothing changed
    srv = ServerProcess(d, *ALWAYS).start()
    try:
        r = redis.Redis(port=srv.port)
        assert [e[0] for e in r.xrange("log")] == acked
        assert f"torn tail in {seg}" in srv.log_text() and f"at offset {at} " in srv.log_text()
        acked.append(r.xadd("log", {"after": "cut"}))
        _kill9_with_zeros(srv)
        srv = ServerProcess(d, *ALWAYS).start()
        assert [e[0] for e in redis.Redis(port=srv.port).xrange("log")] == acked
    finally:
        srv.stop()


def test_garbage_after_the_zeros_is_corruption_in_the_middle(tmp_path):
    d = tmp_path / "data"
    srv = ServerProcess(d, *ALWAYS).start()
    r = redis.Redis(port=srv.port)
    for i in range(20):
        r.xadd("s", {"i": i})
    seg = _kill9_with_zeros(srv)
    end = segment_logical_size(seg)
    with open(seg, "r+b") as f:
        f.seek(end + 3000)
        f.write(encode_frame(encode_request(b"XADD", b"s", b"*", b"late", b"1")))       # a whole frame, after a gap
    broken = seg.read_bytes()
    for setting in ("yes", "no"):
        bad = ServerProcess(d, *ALWAYS, "--aof-load-truncated", setting)
        with pytest.raises(RuntimeError, match="exited"):
            bad.start()
        bad.stop()
        assert f"unreadable frame header at offset {end} " in bad.log_text()
        assert "corruption in the middle" in bad.log_text()
    assert seg.read_bytes() == broken


def test_a_workload_bigger_than_the_first_room_extends_it_and_info_stays_logical(tmp_path):
    d = tmp_path / "data"
    srv = ServerProcess(d, *ALWAYS, "--aof-preallocate", "4mb").start()
    try:
        r = redis.Redis(port=srv.port)
        seg = _segment(d)
        sizes = set()
        for batch in range(12):                         # about 6 MiB of frames
            pipe = r.pipeline(transaction=False)
            for i in range(500):
                pipe.xadd("big", {"b": batch, "i": i, "pad": "x" * 1000})
            pipe.execute()
            sizes.add(seg.stat().st_size)
        logical = r.info("persistence")["aof_current_size"]
        assert logical == segment_logical_size(seg) > 5 << 20
        assert len(sizes) > 3                           # the file grew ahead of the frames, several times
        wait_until(lambda: seg.stat().st_size > logical + (1 << 20), 10, "the room ahead")
        assert seg.stat().st_size <= logical + (4 << 20) + prealloc.CHUNK
        digest = r.execute_command("DEBUG", "DIGEST")
        _kill9_with_zeros(srv)
        scan = read_segment(seg.read_bytes())
        assert scan.torn_at is None and scan.valid_end == logical
        srv = ServerProcess(d, *ALWAYS).start()
        r = redis.Redis(port=srv.port)
        assert r.xlen("big") == 6000 and r.execute_command("DEBUG", "DIGEST") == digest
    finally:
        srv.stop()


def _tool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, input=stdin,
                          timeout=120, cwd=ROOT)


def test_check_aof_on_a_crashed_servers_preallocated_segment(tmp_path):
    d = tmp_path / "data"
    srv = ServerProcess(d, *ALWAYS).start()
    r = redis.Redis(port=srv.port)
    for i in range(30):
        r.xadd("s", {"i": i}, id=f"{i + 1}-1")
    seg = _kill9_with_zeros(srv)
    zeros = seg.stat().st_size - segment_logical_size(seg)
    ok = _tool("streamdb.cli.aofcheck", str(d / "appendonlydir"))
    assert ok.returncode == 0 and "AOF is valid" in ok.stdout, ok.stdout
    assert f"preallocated_zeros={zeros}" in ok.stdout and "frames=30" in ok.stdout
    torn_bytes = encode_frame(encode_request(b"XADD", b"s", b"31-1", b"i", b"x"))[:-4]
    at = _write_at_logical_end(seg, torn_bytes)
    torn = _tool("streamdb.cli.aofcheck", str(d / "appendonlydir"))
    assert torn.returncode == 1 and f"torn tail (truncated frame at offset {at})" in torn.stdout
    size = seg.stat().st_size
    fixed = _tool("streamdb.cli.aofcheck", str(d / "appendonlydir"), "--fix", stdin="y\n")
    assert fixed.returncode == 0, fixed.stdout
    assert f"from {size} to {at} bytes, dropping its last {size - at} bytes " \
           f"({zeros - len(torn_bytes)} of them preallocated zeros)" in fixed.stdout
    assert seg.stat().st_size == at
    with ServerProcess(d, *ALWAYS) as srv:
        assert redis.Redis(port=srv.port).xlen("s") == 30


def test_backup_of_a_preallocated_segment_and_restore_from_a_crashed_servers_segments(tmp_path):
    d, backup, restored = tmp_path / "data", tmp_path / "backup", tmp_path / "restored"
    srv = ServerProcess(d, *ALWAYS).start()
    try:
        r = redis.Redis(port=srv.port)
        for i in range(200):
            r.xadd("s", {"i": i, "pad": "x" * 200}, id=f"{i + 1}-1")
        r.execute_command("STREAMDB.BACKUP", str(backup))
        wait_until(lambda: r.info("persistence")["backup_in_progress"] == 0, 30, "the backup")
        assert r.info("persistence")["backup_last_status"] == "ok"
        for i in range(200, 300):                       # after the backup
            r.xadd("s", {"i": i}, id=f"{i + 1}-1")
        digest = r.execute_command("DEBUG", "DIGEST")
        seg = _kill9_with_zeros(srv)
    finally:
        srv.stop()
    manifest = json.loads((backup / "backup.manifest").read_text())
    for entry in manifest["files"]:
        if entry["path"].endswith(".aof"):
            p = backup / entry["path"]
            assert p.stat().st_size == entry["size"] == segment_logical_size(p)     # no zeros copied
    verified = _tool("streamdb.cli.admin", "verify-backup", str(backup))
    assert verified.returncode == 0 and "backup OK" in verified.stdout, verified.stderr
    out = _tool("streamdb.cli.admin", "restore", str(backup), str(restored),
                "--aof-from", str(d / "appendonlydir"))
    assert out.returncode == 0, out.stderr
    copy = restored / "appendonlydir" / seg.name
    assert copy.stat().st_size == segment_logical_size(seg) < seg.stat().st_size
    with ServerProcess(restored, *ALWAYS) as again:
        r = redis.Redis(port=again.port)
        assert r.xlen("s") == 300 and r.execute_command("DEBUG", "DIGEST") == digest


def test_spark_files_reader_reads_a_crashed_servers_segment(tmp_path):
    pytest.importorskip("pyspark")
    from streamdb.spark.files import recover
    d = tmp_path / "data"
    srv = ServerProcess(d, *ALWAYS).start()
    r = redis.Redis(port=srv.port)
    for i in range(40):
        r.xadd("s", {"i": i})
    _kill9_with_zeros(srv)
    assert recover(str(d)).keyspace[0].data[b"s"].length == 40
