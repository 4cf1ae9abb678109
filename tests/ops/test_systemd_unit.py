"""docs/systemd/streamdb.service: systemd accepts it, and the server runs its command line.

``systemd-analyze verify`` needs no running systemd, but insists that ExecStart's program
exists: the check runs on a copy whose program is this checkout's installed
``streamdb-server`` (every other line as shipped).  Then the unit's ExecStart, with its
/etc, /var/lib and /run paths moved into a scratch directory, starts a real server that
SIGTERM (the unit's KillSignal) stops cleanly with exit status 0, so Restart=on-failure
does not restart a server that was asked to stop."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from helpers import ROOT
from streamdb.cli.procs import free_port, wait_until_ready

UNIT = ROOT / "docs/systemd/streamdb.service"
INSTALLED_SERVER = "/opt/streamdb/.venv/bin/streamdb-server"


def unit_settings(text: str) -> dict[str, list[str]]:
    """Key -> its values in the unit (a key may repeat)."""
    settings: dict[str, list[str]] = {}
    for line in text.splitlines():
        m = re.match(r"^(\w+)=(.*)$", line)
        if m:
            settings.setdefault(m.group(1), []).append(m.group(2))
    return settings


def test_systemd_analyze_verify_accepts_the_unit(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian's systemd package has it)")
    server = Path(sys.executable).parent / "streamdb-server"
    if not server.is_file():
        pytest.skip(f"{server} is missing: the console scripts are not installed in this venv")
    text = UNIT.read_text()
    assert INSTALLED_SERVER in text
    copy = tmp_path / "streamdb.service"
    copy.write_text(text.replace(INSTALLED_SERVER, str(server)))
    proc = subprocess.run([analyze, "verify", str(copy)], capture_output=True, text=True, timeout=60)
    # A warning (an unknown key, a bad value) still exits 0: none is allowed either.
    assert proc.returncode == 0 and proc.stderr == "" and proc.stdout == "", proc.stderr + proc.stdout


def test_the_unit_names_what_a_log_service_needs():
    got = unit_settings(UNIT.read_text())
    # No sd_notify in the server: Type=notify would wait for a READY=1 that never comes.
    assert got["Type"] == ["simple"]
    assert got["WorkingDirectory"] == ["/var/lib/streamdb"] and got["StateDirectory"] == ["streamdb"]
    assert got["User"] == ["streamdb"] and got["Group"] == ["streamdb"]
    assert int(got["LimitNOFILE"][0]) >= 10_000 + 32          # maxclients' default and files
    assert got["Restart"] == ["on-failure"] and got["RestartPreventExitStatus"] == ["1"]
    assert int(got["TimeoutStopSec"][0]) >= 120 and got["KillSignal"] == ["SIGTERM"]


def test_the_units_command_line_runs_a_server_that_sigterm_stops_cleanly(tmp_path):
    exec_start = shlex.split(unit_settings(UNIT.read_text())["ExecStart"][0])
    assert exec_start[0] == INSTALLED_SERVER
    scratch = {"/etc/streamdb/streamdb.conf": str(ROOT / "streamdb.conf"),
               "/var/lib/streamdb": str(tmp_path / "var-lib-streamdb"),
               "/run/streamdb/streamdb.pid": str(tmp_path / "run" / "streamdb.pid")}
    args = [scratch.get(arg, arg) for arg in exec_start[1:]]
    assert not [a for a in args if a.startswith(("/etc", "/var", "/run"))], args
    for d in ("var-lib-streamdb", "run"):                       # StateDirectory, RuntimeDirectory
        (tmp_path / d).mkdir()
    port = free_port()
    # The unit's WorkingDirectory is the data directory; the source tree is on PYTHONPATH.
    proc = subprocess.Popen([sys.executable, "-m", "streamdb", *args, "--port", str(port)],
                            cwd=tmp_path / "var-lib-streamdb",
                            env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until_ready(port, proc)
        r = redis.Redis(port=port)
        r.xadd("s", {"k": "v"})
        assert r.config_get("dir")["dir"] == str(tmp_path / "var-lib-streamdb")
        r.close()
        assert (tmp_path / "run" / "streamdb.pid").read_text().strip() == str(proc.pid)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert not (tmp_path / "run" / "streamdb.pid").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
