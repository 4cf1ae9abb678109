"""The operators' crash-test tool, run for real in a bounded form (SIGKILL, restart, verify).

The default suite runs a few short rounds; ``-m soak`` runs longer loops whose
length is set by STREAMDB_SOAK_SECONDS (CI runs a short bounded soak).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from streamdb.tools.crashtest import Check, Ledger, PowerCut, RoundResult, judge

ROOT = Path(__file__).resolve().parents[2]
CRASHTEST = [sys.executable, "-m", "streamdb.tools.crashtest"]


def _run(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([*CRASHTEST, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def _crashtest(*args: str, timeout: int = 600) -> str:
    out = _run(*args, timeout=timeout)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def _totals(text: str) -> dict[str, int]:
    line = next(l for l in text.splitlines() if l.startswith("TOTAL"))
    return {k: int(v) for k, v in (kv.split("=") for kv in line.split()[1:])}


def _rows(text: str) -> list[dict[str, str]]:
    lines = text.splitlines()
    at = next(i for i, l in enumerate(lines) if l.strip().startswith("round |"))
    header = [h.strip() for h in lines[at].split("|")]
    rows = []
    for line in lines[at + 1:]:
        if line.startswith("TOTAL"):
            return rows
        rows.append(dict(zip(header, (c.strip() for c in line.split("|")))))
    return rows


def test_always_loses_nothing_acknowledged_across_kill9(tmp_path):
    out = _crashtest("--rounds", "3", "--max-seconds", "1.0", "--seed", "1", "--dir", str(tmp_path / "d"))
    t = _totals(out)
    assert t["acked_xadds"] > 100
    assert t["lost"] == t["bad_fields"] == t["ack_violations"] == 0
    assert t["pending_violations"] == t["lastid_regressions"] == t["failures"] == 0
    # acked_xadds is per round: the rows add up to the total.
    rows = _rows(out)
    assert len(rows) == 3 and all(int(r["acked_xadds"]) > 0 for r in rows)
    assert sum(int(r["acked_xadds"]) for r in rows) == t["acked_xadds"]


def test_always_survives_power_loss_cuts(tmp_path):
    t = _totals(_crashtest("--rounds", "3", "--max-seconds", "1.0", "--seed", "2", "--power-loss",
                           "--dir", str(tmp_path / "d")))
    assert t["lost"] == t["ack_violations"] == t["pending_violations"] == t["failures"] == 0


def test_everysec_power_loss_reports_its_loss_and_exits_0(tmp_path):
    out = _run("--rounds", "3", "--max-seconds", "1.0", "--seed", "3", "--fsync", "everysec", "--power-loss",
               "--dir", str(tmp_path / "d"))
    assert out.returncode == 0, out.stdout + out.stderr
    t = _totals(out.stdout)
    assert t["failures"] == 0
    report = re.search(r"^lost (\d+) acknowledged XADDs .*the last (\d+\.\d\d) s before the cut at most, "
                       r"all written after the last fsync: appendfsync everysec allows up to ~2 s$",
                       out.stdout, re.M)
    assert report, out.stdout
    assert int(report[1]) == t["lost"]
    assert float(report[2]) == round(t["max_loss_window_ms"] / 1000, 2) <= 2.0


def test_rounds_do_not_wait_out_client_back_offs(tmp_path):
    # Eight rounds of 0.2 s of load.  When the load threads waited out redis-py's
    # retry back-off after the kill (5-6 s a round), this took about 45 s; now a
    # round is a start-up, the load and a verification (about 1 s here).
    t = _totals(_crashtest("--rounds", "8", "--min-seconds", "0.2", "--max-seconds", "0.2",
                           "--producers", "2", "--consumers", "1", "--dir", str(tmp_path / "d"),
                           timeout=30))
    assert t["rounds"] == 8 and t["failures"] == 0


def test_help_shows_defaults_what_is_verified_and_how_long_it_takes():
    out = subprocess.run([*CRASHTEST, "--help"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    text = " ".join(out.stdout.split())
    assert out.returncode == 0
    assert "kill -9 rounds (default: 10)" in text and "(default: always)" in text
    assert "every acknowledged XADD is present" in text and "10 rounds take about" in text


def _round(cut: PowerCut, cut_ms: float = 10_000.0) -> RoundResult:
    return RoundResult(1, 1.0, 10, cut=cut, cut_ms=cut_ms)


def _check(lost: list[bytes]) -> Check:
    return Check(lost, 0, [], [], b"0-0", False)


def test_judging_losses_by_policy():
    # The verdicts on losses a real run cannot be made to produce on purpose.
    unsynced = PowerCut(100, {b"9500-0"})
    for fsync, cut, lost, failures in [
            ("always", unsynced, [b"9500-0"], 1),      # always: any loss fails
            ("everysec", PowerCut(), [b"9500-0"], 1),  # kill -9 only: nothing may be lost
            ("everysec", unsynced, [b"9500-0"], 0),    # after the last fsync, 0.5 s back: allowed
            ("everysec", unsynced, [b"9000-0"], 1),    # had been fsynced
            ("everysec", PowerCut(100, {b"7000-0"}), [b"7000-0"], 1),   # 3 s back: beyond 2 s
            ("no", PowerCut(100, {b"7000-0"}), [b"7000-0"], 0)]:        # no: no time bound
        result = _round(cut)
        judge(result, _check(lost), Ledger(), fsync)
        assert result.failures == failures, (fsync, lost)
        assert result.loss_window_ms == 10_000 - int(lost[0].split(b"-")[0])


SOAK_SECONDS = float(os.environ.get("STREAMDB_SOAK_SECONDS", "120"))


@pytest.mark.soak
@pytest.mark.timeout(int(SOAK_SECONDS * 3) + 300)
def test_soak_crash_loop(tmp_path):
    # A round is a start-up, up to 2 s of load, a SIGKILL and a verification:
    # about 2 s on this machine, so half the budget per mode.
    rounds = max(2, int(SOAK_SECONDS / 2 / 2))
    for mode in (["--power-loss"], []):
        t = _totals(_crashtest("--rounds", str(rounds), "--max-seconds", "2.0", *mode,
                               "--dir", str(tmp_path / ("pl" if mode else "k9")),
                               timeout=int(SOAK_SECONDS * 2) + 240))
        assert t["lost"] == t["ack_violations"] == t["pending_violations"] == 0
