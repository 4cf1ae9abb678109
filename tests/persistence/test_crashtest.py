"""The operators' crash-test tool, run for real in a bounded form (SIGKILL, restart, verify).

The default suite runs a few short rounds; ``-m soak`` runs longer loops whose
length is set by STREAMDB_SOAK_SECONDS (CI runs a short bounded soak).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import redis

from docblocks import run_block
from helpers import ServerProcess
from streamdb.cli.crashfailover import FailoverRound, verify_promises
from streamdb.cli.crashtest import (AOF_AT_KILL, DEAD_LETTERS, DLQ_GROUP, GROUP, STREAM, Check, Ledger,
                                     PowerCut, RoundResult, _trace_losses, judge, verify)

ROOT = Path(__file__).resolve().parents[2]
GUIDE = "docs/OPERATIONS.md"
DOC_BLOCKS = {"docs/OPERATIONS.md": {"crashtest-faults", "crashtest-failover"}}
CRASHTEST = [sys.executable, "-m", "streamdb.cli.crashtest"]


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
    # The group with a dead-letter policy: its failing consumer's entries were moved.
    assert t["dead_letters"] > 100 and t["dlq_violations"] == 0
    # acked_xadds is per round: the rows add up to the total.
    rows = _rows(out)
    assert len(rows) == 3 and all(int(r["acked_xadds"]) > 0 for r in rows)
    assert sum(int(r["acked_xadds"]) for r in rows) == t["acked_xadds"]


def test_always_survives_power_loss_cuts(tmp_path):
    t = _totals(_crashtest("--rounds", "3", "--max-seconds", "1.0", "--seed", "2", "--power-loss",
                           "--dir", str(tmp_path / "d")))
    assert t["lost"] == t["ack_violations"] == t["pending_violations"] == t["failures"] == 0
    assert t["dlq_violations"] == 0


def test_the_dead_letter_check_finds_an_entry_lost_and_one_duplicated(tmp_path):
    """What the check after a restart reports when a dead-lettering and its XACK did
    not stay together (made here by hand: the server keeps them together)."""
    with ServerProcess(tmp_path / "d", "--save", "") as srv:
        r = redis.Redis(port=srv.port)
        for i in (1, 2, 3):
            r.xadd(STREAM, {"producer": "p", "seq": i}, id=f"1-{i}")
        r.xgroup_create(STREAM, GROUP, id="$")
        r.xgroup_create(STREAM, DLQ_GROUP, id="0")
        r.xreadgroup(DLQ_GROUP, "failing", {STREAM: ">"})
        r.xack(STREAM, DLQ_GROUP, "1-1")                          # acked, never dead-lettered
        r.xadd(DEAD_LETTERS, {"dlq-source": STREAM, "dlq-id": "1-2"})   # and still pending
        check = verify(srv.port, Ledger(), b"0-0")
        assert (check.dlq_lost, check.dlq_duplicated, check.dead_letters) == ([b"1-1"], [b"1-2"], 1)
        result = RoundResult(1, 1.0, 0)
        judge(result, check, Ledger(), "everysec")
        assert result.failures == result.dlq_violations == 2
        assert any(f"of {DLQ_GROUP} are neither pending nor dead-lettered (e.g. 1-1)" in n
                   for n in result.notes)


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


# --faults: fault episodes (a full disk, failed forks, both) on a tmpfs, under load.

FAULT_KINDS = ("disk-full", "fork-failure", "both")
needs_root = pytest.mark.skipif(os.geteuid() != 0,
                                reason="--faults mounts a tmpfs and uses a pids cgroup: root only")


def _faults(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    out = _run("--faults", *args, timeout=timeout)
    if out.returncode == 2 and ("cannot mount" in out.stderr or "pids cgroup" in out.stderr):
        pytest.skip(out.stderr.strip())
    assert "Traceback" not in out.stderr, out.stderr
    return out


def _fault_rows(text: str) -> dict[str, dict[str, str]]:
    lines = text.splitlines()
    at = next(i for i, l in enumerate(lines) if l.strip().startswith("fault |"))
    header = [h.strip() for h in lines[at].split("|")]
    rows = [dict(zip(header, (c.strip() for c in line.split("|")))) for line in lines[at + 1:at + 5]]
    return {row["fault"]: row for row in rows}


def _mounted_under(path: Path) -> list[str]:
    with open("/proc/mounts") as f:
        return [line.split()[1] for line in f if line.split()[1].startswith(str(path))]


def _cgroup_of_tool(pid: int) -> Path:
    return Path("/sys/fs/cgroup/pids") / f"streamdb-crashtest-{pid}"


@needs_root
def test_the_guides_faults_run_goes_through_each_kind_of_episode_loses_nothing_and_cleans_up(tmp_path):
    # docs/OPERATIONS.md's block, as written: three rounds, one episode of each kind.
    out = run_block(GUIDE, "crashtest-faults", cwd=tmp_path, timeout=280)    # (exit 0: nothing lost)
    t = _totals(out)
    rows = _fault_rows(out)
    assert [int(rows[kind]["episodes"]) for kind in FAULT_KINDS] == [1, 1, 1], out
    total = rows["total"]
    assert int(total["acked_xadds"]) == t["acked_xadds"] > 100
    assert total["lost_writes"] == total["lastid_regress"] == "0" and total["verdict"] == "ok"
    assert int(total["restarts"]) == 3
    # Under the fork limit, BGSAVE and BGREWRITEAOF are refused: the fault is real.
    assert int(rows["fork-failure"]["bg_refused"]) >= 1, out
    # Nothing of the faults is left behind: no mount (the scratch directory is gone too).
    assert _mounted_under(Path(tempfile.gettempdir()) / "streamdb-crash-") == []


@needs_root
def test_faults_are_undone_when_the_run_is_interrupted(tmp_path):
    scratch = tmp_path / "d"
    # Ctrl-C's SIGINT as a terminal sends it to a tool run in the foreground.  A test
    # run started in the background (nohup, '&' without job control) has SIGINT
    # ignored, and Python keeps a signal ignored at start-up ignored: reset it.
    proc = subprocess.Popen([*CRASHTEST, "--faults", "--rounds", "50", "--min-seconds", "2",
                             "--max-seconds", "3", "--dir", str(scratch)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    cgroup = _cgroup_of_tool(proc.pid)
    try:
        deadline = time.monotonic() + 60
        # Wait until a round is under load (the server has written to its AOF on the tmpfs).
        while not (scratch / "disk" / "appendonlydir").exists() or not cgroup.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        time.sleep(1.5)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stdout + stderr
    assert "interrupted" in stderr and "Traceback" not in stderr, stderr
    assert _mounted_under(scratch) == []
    assert not cgroup.exists()


def test_faults_without_root_exit_2_with_a_clear_message(tmp_path):
    # unshare -U: the same files, but an unprivileged user (euid 65534) that cannot mount.
    if subprocess.run(["unshare", "-U", "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare -U (a user namespace) is not allowed here")
    command = ["unshare", "-U", *CRASHTEST, "--faults", "--rounds", "1", "--dir", str(tmp_path / "d")]
    out = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 2
    assert out.stderr.strip() == ("streamdb-crashtest: --faults needs root: it mounts a tmpfs for the "
                                  "server's data and limits its processes with a pids cgroup "
                                  "(run it with sudo)")


def test_a_loss_is_traced_in_the_aof_files_the_kill_left(tmp_path):
    # The evidence a --faults loss is reported with: whether the AOF as the kill
    # left it holds the lost XADD (written, then not loaded) or not (never written).
    with ServerProcess(tmp_path / "data", "--appendonly", "yes", "--save", "") as srv:
        written = redis.Redis(port=srv.port).xadd(STREAM, {"producer": "p0", "seq": 1})
        srv.kill9()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (tmp_path / "data" / "appendonlydir").rename(scratch / AOF_AT_KILL)
    result = RoundResult(7, 1.0, 2)
    _trace_losses(result, Check([written, b"1-1"], 0, [], [], b"0-0", False), str(scratch))
    kept = scratch / f"{AOF_AT_KILL}-round7"
    assert result.notes == [f"of the 2 lost XADDs (e.g. {written.decode()}), the AOF files the kill left "
                            f"hold 1 and not the other 1: see {kept}"]
    assert kept.is_dir() and not (scratch / AOF_AT_KILL).exists()


@pytest.mark.soak
@needs_root
@pytest.mark.timeout(int(SOAK_SECONDS * 3) + 300)
def test_soak_faults_lose_nothing_acknowledged(tmp_path):
    # A round is a start-up, up to 0.5 s of load, an episode of up to 2 s, up to 2 s
    # more after it, a SIGKILL and a verification: about 7 s here, so half the budget per policy.
    rounds = max(3, int(SOAK_SECONDS / 2 / 7))
    for fsync in ("always", "everysec"):
        out = _faults("--rounds", str(rounds), "--max-seconds", "2.0", "--fsync", fsync,
                      "--dir", str(tmp_path / fsync), timeout=int(SOAK_SECONDS * 2) + 240)
        total = _fault_rows(out.stdout)["total"]
        assert out.returncode == 0 and total["verdict"] == "ok", out.stdout
        assert total["lost_writes"] == total["lastid_regress"] == "0"
        assert int(total["restarts"]) == rounds


# --failover: a primary, two replicas and three Sentinels (issue 29).

def _failover_totals(text: str) -> dict[str, float]:
    line = next(l for l in text.splitlines() if l.startswith("TOTAL"))
    return {k: float(v) for k, v in (kv.split("=") for kv in line.split()[1:]) if v != "-"}


def _sentinel_installed() -> None:
    if not (shutil.which("redis-sentinel") or shutil.which("redis-server")):
        pytest.skip("Redis Sentinel is not installed (make test installs redis-sentinel)")


def test_failover_round_keeps_every_waitaof_promised_write(tmp_path):
    """One kill -9 of the primary under three Sentinels: a new primary is named, the
    killed node comes back as a replica, nothing WAITAOF 1 1 confirmed is lost, and
    every node converges (a round is about 15 s: Sentinel waits before it reconfigures
    the restarted node)."""
    _sentinel_installed()
    # docs/OPERATIONS.md's block, as written (exit 0: no promise broken).
    out = run_block(GUIDE, "crashtest-failover", cwd=tmp_path, timeout=240)
    t = _failover_totals(out)
    assert t["rounds"] == 1 and t["promised"] > 0
    assert t["lost_promised"] == t["group_regressions"] == t["failures"] == 0
    assert len(_rows(out)) == 1 and float(_rows(out)[0]["failover_s"]) > 0


def test_failover_verification_finds_a_promised_write_gone_and_a_group_behind(tmp_path):
    """The verification on a real server's data: an entry deleted behind the tool's
    back (XDEL) is a lost promise, a group position behind the promised one is a
    regression, and either makes the round a failure."""
    with ServerProcess(tmp_path / "s") as srv:
        r = redis.Redis(port=srv.port)
        r.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
        ledger = Ledger()
        for n in range(5):
            sid = r.xadd(STREAM, {"n": n})
            ledger.added[sid] = ("p0", n)
            ledger.promised.add(sid)
        unpromised = r.xadd(STREAM, {"n": 5})
        ledger.added[unpromised] = ("p0", 5)
        assert verify_promises(r, ledger).lost_promised == []
        gone = sorted(ledger.promised)[2]
        r.xdel(STREAM, gone, unpromised)
        ledger.promised_delivered = gone          # promised delivered, never delivered here
        check = verify_promises(r, ledger)
        assert check.lost_promised == [gone] and check.lost_unpromised == [unpromised]
        assert check.group_regressed and check.last_delivered == b"0-0"
    result = FailoverRound(1, lost_promised=len(check.lost_promised), group_regressed=check.group_regressed)
    assert result.failures == 2


def test_failover_tool_errors_are_one_clear_line(tmp_path):
    out = _run("--failover", "--faults")
    assert out.returncode == 2 and "--failover is a run of its own" in out.stderr
    assert "Traceback" not in out.stderr
    # No Sentinel on PATH: said so, exit status 2 (the nodes run by absolute path).
    out = subprocess.run([*CRASHTEST, "--failover", "--rounds", "1", "--dir", str(tmp_path / "d")],
                         capture_output=True, text=True, timeout=60, cwd=ROOT,
                         env={**os.environ, "PATH": str(tmp_path)})
    assert out.returncode == 2, out.stdout + out.stderr
    assert "--failover needs Redis Sentinel: install redis-sentinel" in out.stderr
    assert "Traceback" not in out.stderr
