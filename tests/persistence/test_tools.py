"""The operator tools on real files: AOF checker/repairer and snapshot inspector."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import redis

import streamdb.commands  # noqa: F401
from helpers import ServerProcess, aof_frames, corrupt_aof_frame
from streamdb.persistence.aof import Aof
from streamdb.persistence.snapshot import write_snapshot
from streamdb.server.core import Core

ROOT = Path(__file__).resolve().parents[2]


def _tool(module: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """Run an operator tool as its console script does (its module's main)."""
    return subprocess.run([sys.executable, "-m", f"streamdb.cli.{module}", *args], capture_output=True,
                          text=True, input=stdin, timeout=120, cwd=ROOT)


def _write_aof(d: Path, entries: int = 50, rotate_after: int | None = None) -> Path:
    """An AOF directory holding XADD s <i>-1 for i = 1..entries, one frame each."""
    core = Core()
    aof = Aof(core, str(d), fsync="always")
    aof.open_for_append()
    core.add_effect_sink(aof.append_batch)
    c = core.new_client()
    for i in range(1, entries + 1):
        core.execute(c, [b"XADD", b"s", b"%d-1" % i, b"f", b"v"])
        aof.flush()
        if i == rotate_after:       # later entries go to a new segment
            aof.rotate()
    aof.close()
    return d


def test_check_aof_reports_valid_torn_and_corrupt(tmp_path):
    d = _write_aof(tmp_path / "aof")
    ok = _tool("aofcheck", str(d))
    assert ok.returncode == 0 and "AOF is valid" in ok.stdout
    seg = next(d.glob("*.incr.aof"))
    data = seg.read_bytes()
    seg.write_bytes(data[:-7])
    torn = _tool("aofcheck", str(d))
    assert torn.returncode == 1 and "torn tail" in torn.stdout and "ok_up_to=" in torn.stdout
    declined = _tool("aofcheck", str(d), "--fix", stdin="n\n")
    assert "Aborted" in declined.stdout and seg.stat().st_size == len(data) - 7
    unanswered = _tool("aofcheck", str(d), "--fix", stdin="")      # cron, CI: no terminal
    assert unanswered.returncode == 1 and "Traceback" not in unanswered.stderr
    assert "No answer (standard input is closed): nothing was changed." in unanswered.stdout
    assert seg.stat().st_size == len(data) - 7
    fixed = _tool("aofcheck", str(d), "--fix", stdin="y\n")
    assert fixed.returncode == 0 and "Successfully truncated" in fixed.stdout
    assert _tool("aofcheck", str(d)).returncode == 0
    missing = _tool("aofcheck", str(tmp_path / "no-such-dir"))
    assert missing.returncode == 2 and "Traceback" not in missing.stdout + missing.stderr
    assert (missing.stdout + missing.stderr) == \
        f"streamdb-check-aof: {tmp_path / 'no-such-dir'}: No such file or directory\n"


def _files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in d.iterdir()}


def test_fix_cuts_a_corrupt_segment_at_its_last_valid_frame_after_asking(tmp_path):
    data_dir = tmp_path / "data"
    aof_dir = data_dir / "appendonlydir"
    with ServerProcess(data_dir, "--appendonly", "yes", "--appendfsync", "always", "--save", "") as srv:
        r = redis.Redis(port=srv.port)
        for i in range(1, 41):
            r.xadd("s", {"n": i}, id=f"{i}-1")          # one request, one turn, one frame each
    seg = next(aof_dir.glob("*.incr.aof"))
    frames = aof_frames(seg)
    assert len(frames) == 40
    bad_at = corrupt_aof_frame(seg, 25)
    broken = _files(aof_dir)

    refused = ServerProcess(data_dir, "--appendonly", "yes", "--save", "")
    with pytest.raises(RuntimeError):
        refused.start()
    refused.stop()
    assert f"'streamdb-check-aof --fix {aof_dir}'" in refused.log_text()

    report = _tool("aofcheck", str(aof_dir))
    assert report.returncode == 2 and f"CORRUPT" in report.stdout
    assert f"Run 'streamdb-check-aof --fix {aof_dir}'" in report.stdout
    declined = _tool("aofcheck", str(aof_dir), "--fix", stdin="n\n")
    assert declined.returncode == 2 and "Aborted." in declined.stdout
    assert f"the bad frame at offset {bad_at} and 14 valid frames (14 commands) after it" in declined.stdout
    assert f"This will cut {seg.name} from {len(broken[seg.name])} to {bad_at} bytes, dropping its " \
           f"last {len(broken[seg.name]) - bad_at} bytes" in declined.stdout
    assert _files(aof_dir) == broken

    fixed = _tool("aofcheck", str(aof_dir), "--fix", "--yes")
    assert fixed.returncode == 0 and "Successfully truncated" in fixed.stdout, fixed.stdout
    assert seg.stat().st_size == bad_at
    backups = list(aof_dir.glob(seg.name + ".corrupt-*"))
    assert [b.read_bytes() for b in backups] == [broken[seg.name]]
    assert _tool("aofcheck", str(aof_dir)).returncode == 0
    with ServerProcess(data_dir, "--appendonly", "yes", "--save", "") as srv:
        entries = redis.Redis(port=srv.port).xrange("s")
    assert [e[0] for e in entries] == [b"%d-1" % i for i in range(1, 26)]


def test_fix_retires_the_segments_after_a_hole(tmp_path):
    data_dir = tmp_path / "data"
    aof_dir = data_dir / "appendonlydir"
    _write_aof(aof_dir, rotate_after=30)
    first, second = sorted(aof_dir.glob("*.incr.aof"))
    bad_at = corrupt_aof_frame(first, 10)
    fixed = _tool("aofcheck", str(aof_dir), "--fix", "--yes")
    assert fixed.returncode == 0, fixed.stdout
    assert "19 valid frames (19 commands) after it" in fixed.stdout
    assert f"1 later segment(s) are retired from the manifest too" in fixed.stdout
    assert f"20 frames (20 commands): {second.name}" in fixed.stdout
    assert not second.exists() and len(list(aof_dir.glob(second.name + ".retired-*"))) == 1
    assert first.stat().st_size == bad_at
    with ServerProcess(data_dir, "--appendonly", "yes", "--save", "") as srv:
        entries = redis.Redis(port=srv.port).xrange("s")
    assert [e[0] for e in entries] == [b"%d-1" % i for i in range(1, 11)]


def test_snapshot_inspector_lists_keys_and_verifies(tmp_path):
    core = Core()
    c = core.new_client()
    for i in range(500):
        core.execute(c, [b"XADD", b"orders", b"%d-0" % (i + 1), b"item", b"x"])
    core.execute(c, [b"XGROUP", b"CREATE", b"orders", b"billing", b"0"])
    core.execute(c, [b"XREADGROUP", b"GROUP", b"billing", b"w", b"COUNT", b"9", b"STREAMS", b"orders", b">"])
    write_snapshot(str(tmp_path / "snap"), core.keyspace, None, 7, 1767323045678)
    out = _tool("snapinspect", str(tmp_path / "snap"), "--verify")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "covers AOF segments up to seq: 7" in out.stdout
    assert "written at: 2026-01-02T03:04:05.678Z (1767323045678 ms)" in out.stdout
    assert "orders" in out.stdout and "billing (9)" in out.stdout and "verify: OK" in out.stdout
