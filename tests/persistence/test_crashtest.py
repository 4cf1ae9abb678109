"""The operators' crash-test tool, run for real in a bounded form (SIGKILL, restart, verify).

The default suite runs a few short rounds; ``-m soak`` runs longer loops whose
length is set by STREAMDB_SOAK_SECONDS (CI runs a short bounded soak).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _crashtest(*args: str, timeout: int = 600) -> str:
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "crashtest.py"), *args],
                         capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def _totals(text: str) -> dict[str, int]:
    line = next(l for l in text.splitlines() if l.startswith("TOTAL"))
    return {k: int(v) for k, v in (kv.split("=") for kv in line.split()[1:])}


def test_always_loses_nothing_acknowledged_across_kill9(tmp_path):
    t = _totals(_crashtest("--rounds", "3", "--max-seconds", "1.0", "--seed", "1",
                           "--dir", str(tmp_path / "d")))
    assert t["acked_xadds"] > 100
    assert t["lost"] == t["bad_fields"] == t["ack_violations"] == 0
    assert t["pending_violations"] == t["lastid_regressions"] == 0


def test_always_survives_power_loss_cuts(tmp_path):
    t = _totals(_crashtest("--rounds", "3", "--max-seconds", "1.0", "--seed", "2", "--power-loss",
                           "--dir", str(tmp_path / "d")))
    assert t["lost"] == t["ack_violations"] == t["pending_violations"] == 0


SOAK_SECONDS = float(os.environ.get("STREAMDB_SOAK_SECONDS", "120"))


@pytest.mark.soak
@pytest.mark.timeout(int(SOAK_SECONDS * 3) + 300)
def test_soak_crash_loop(tmp_path):
    # A round is a start-up, up to 2 s of load, a SIGKILL and a verification:
    # about 4 s on this machine, so half the budget per mode.
    rounds = max(2, int(SOAK_SECONDS / 2 / 4))
    for mode in (["--power-loss"], []):
        t = _totals(_crashtest("--rounds", str(rounds), "--max-seconds", "2.0", *mode,
                               "--dir", str(tmp_path / ("pl" if mode else "k9")),
                               timeout=int(SOAK_SECONDS * 2) + 240))
        assert t["lost"] == t["ack_violations"] == t["pending_violations"] == 0
