"""The operator tools on real files: AOF checker/repairer and snapshot inspector."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import streamdb.commands  # noqa: F401
from streamdb.persistence.aof import Aof
from streamdb.persistence.snapshot import write_snapshot
from streamdb.server.core import Core

ROOT = Path(__file__).resolve().parents[2]


def _tool(name: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "tools" / name), *args], capture_output=True,
                          text=True, input=stdin, timeout=120, cwd=ROOT)


def _aof_dir(tmp_path) -> Path:
    d = tmp_path / "aof"
    core = Core()
    aof = Aof(core, str(d), fsync="always")
    aof.open_for_append()
    core.effect_sinks.append(aof.append_batch)
    c = core.new_client()
    for i in range(50):
        core.execute(c, [b"XADD", b"s", b"%d-1" % (i + 1), b"f", b"v"])
        aof.flush()
    aof.close()
    return d


def test_check_aof_reports_valid_torn_and_corrupt(tmp_path):
    d = _aof_dir(tmp_path)
    ok = _tool("check_aof.py", str(d))
    assert ok.returncode == 0 and "AOF is valid" in ok.stdout
    seg = next(d.glob("*.incr.aof"))
    data = seg.read_bytes()
    seg.write_bytes(data[:-7])
    torn = _tool("check_aof.py", str(d))
    assert torn.returncode == 1 and "torn tail" in torn.stdout and "ok_up_to=" in torn.stdout
    declined = _tool("check_aof.py", str(d), "--fix", stdin="n\n")
    assert "Aborted" in declined.stdout and seg.stat().st_size == len(data) - 7
    fixed = _tool("check_aof.py", str(d), "--fix", stdin="y\n")
    assert fixed.returncode == 0 and "Successfully truncated" in fixed.stdout
    assert _tool("check_aof.py", str(d)).returncode == 0
    bad = bytearray(seg.read_bytes())
    bad[100] ^= 0xFF
    seg.write_bytes(bytes(bad))
    corrupt = _tool("check_aof.py", str(d), "--fix", "--yes")
    assert corrupt.returncode == 2 and "CORRUPT" in corrupt.stdout
    assert seg.read_bytes() == bytes(bad)      # never "fixes" corruption in the middle


def test_snapshot_inspector_lists_keys_and_verifies(tmp_path):
    core = Core()
    c = core.new_client()
    for i in range(500):
        core.execute(c, [b"XADD", b"orders", b"%d-0" % (i + 1), b"item", b"x"])
    core.execute(c, [b"XGROUP", b"CREATE", b"orders", b"billing", b"0"])
    core.execute(c, [b"XREADGROUP", b"GROUP", b"billing", b"w", b"COUNT", b"9", b"STREAMS", b"orders", b">"])
    write_snapshot(str(tmp_path / "snap"), core.keyspace, None, 7, 1767323045678)
    out = _tool("inspect_snapshot.py", str(tmp_path / "snap"), "--verify")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "covers AOF segments up to seq: 7" in out.stdout
    assert "written at: 2026-01-02T03:04:05.678Z (1767323045678 ms)" in out.stdout
    assert "orders" in out.stdout and "billing (9)" in out.stdout and "verify: OK" in out.stdout
