"""The log: Redis's line format, the start-up banner and load summary, loglevel (also
live via CONFIG SET), SIGHUP reopening a rotated logfile, the syslog directives."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest
import redis

from helpers import ROOT, ServerProcess
from streamdb import __version__

# pid:role dd Mon yyyy HH:MM:SS.mmm mark message
LINE = re.compile(r"^(\d+):([MSCX]) \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2}\.\d{3} ([.\-*#]) (.+)$")


def _wait_for(path: Path, text: str, timeout: float = 15) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        content = path.read_text() if path.exists() else ""
        if text in content:
            return content
        time.sleep(0.05)
    raise AssertionError(f"{text!r} never appeared in {path}")


def _terminate(srv: ServerProcess) -> None:
    srv.proc.send_signal(signal.SIGTERM)
    assert srv.proc.wait(timeout=20) == 0
    srv.stop()


def test_every_line_has_the_redis_format_and_the_banner_says_what_runs(tmp_path):
    data = tmp_path / "data"
    conf = tmp_path / "my.conf"
    conf.write_text("appendonly yes\nappendfsync always\nsave 900 1\n")
    srv = ServerProcess(data, config=str(conf)).start()
    r = redis.Redis(port=srv.port)
    for i in range(30):
        r.xadd("a", {"n": i})
    r.xadd("b", {"n": 0})
    _terminate(srv)
    lines = srv.log_text().splitlines()
    assert lines, "nothing was logged"
    for line in lines:
        m = LINE.match(line)
        assert m, f"not a log line: {line!r}"
        assert m.group(1) == str(srv.proc.pid) and m.group(2) == "M"
    text = "\n".join(lines)
    assert f"StreamDB version={__version__}, bits=64, pid={srv.proc.pid}, just started" in text
    assert f"Configuration loaded from {conf}" in text
    assert f"Running mode=standalone, port={srv.port}," in text
    assert "Persistence: appendonly=yes, appendfsync=always, save rules=900 1" in text
    assert f"Data directory {data}" in text
    assert "DB loaded from disk: 0 keys, 0 stream entries, AOF 0 bytes" in text

    # A restart reports what it loaded: the segments, not the manifest nor a copy that
    # streamdb-check-aof --fix kept (it is not replayed).
    aof_dir = data / "appendonlydir"
    aof_bytes = sum(p.stat().st_size for p in aof_dir.iterdir() if p.suffix == ".aof")
    (aof_dir / "appendonly.aof.1.incr.aof.corrupt-20261127-090000").write_bytes(b"x" * 5000)
    with ServerProcess(data, "--save", "") as again:
        line = _wait_for(again.log_path, "Ready to accept connections")
        assert f"DB loaded from disk: 2 keys, 31 stream entries, AOF {aof_bytes} bytes," in line


def test_loglevel_warning_hides_notice_lines_and_config_set_changes_it_live(tmp_path):
    quiet = ServerProcess(tmp_path / "quiet", "--loglevel", "warning", "--save", "").start()
    _terminate(quiet)
    marks = [LINE.match(l).group(3) for l in quiet.log_text().splitlines()]
    assert marks and set(marks) == {"#"}          # the shutdown lines are warnings, as in Redis

    logfile = tmp_path / "live.log"
    with ServerProcess(tmp_path / "live", "--logfile", str(logfile), "--save", "") as srv:
        r = redis.Redis(port=srv.port)
        r.config_set("loglevel", "warning")
        assert r.config_get("loglevel") == {"loglevel": "warning"}
        r.save()                                   # logs "DB saved on disk" as a notice: hidden
        r.config_set("loglevel", "notice")
        r.save()
        text = _wait_for(logfile, "DB saved on disk")
        assert text.count("DB saved on disk") == 1
        with pytest.raises(redis.ResponseError, match=r"^CONFIG SET failed \(possibly related to "
                           r"argument 'loglevel'\) - argument\(s\) must be one of the following: "
                           r"debug, verbose, notice, warning$"):
            r.config_set("loglevel", "loud")


def test_sighup_reopens_a_renamed_logfile(tmp_path):
    logfile = tmp_path / "streamdb.log"
    with ServerProcess(tmp_path / "data", "--logfile", str(logfile), "--save", "") as srv:
        _wait_for(logfile, "Ready to accept connections")
        rotated = tmp_path / "streamdb.log.1"
        os.rename(logfile, rotated)                # what logrotate does
        srv.proc.send_signal(signal.SIGHUP)
        _wait_for(logfile, "Received SIGHUP, log file reopened.")
        srv.proc.send_signal(signal.SIGTERM)
        assert srv.proc.wait(timeout=20) == 0
    new_text = logfile.read_text()
    assert "StreamDB is now ready to exit, bye bye..." in new_text
    assert "oO0OoO0OoO0Oo StreamDB is starting" not in new_text
    old_text = rotated.read_text()
    assert "oO0OoO0OoO0Oo StreamDB is starting" in old_text
    assert "bye bye" not in old_text


def test_an_unwritable_logfile_stops_the_start(tmp_path):
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-m", "streamdb", "--port", "0", "--dir", str(tmp_path / "d"),
                           "--logfile", str(tmp_path / "missing" / "x.log")],
                          cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert "Can't open the log file: [Errno 2] No such file or directory" in proc.stderr
    assert not (tmp_path / "d").exists()


def test_syslog_directives_are_startup_only_as_in_redis(tmp_path):
    # No syslog daemon is assumed on the test machine: this checks the directives, and that
    # a server with syslog on still logs to its own output.
    with ServerProcess(tmp_path / "d", "--syslog-enabled", "yes", "--syslog-ident", "sdb-test",
                       "--syslog-facility", "local3", "--save", "") as srv:
        r = redis.Redis(port=srv.port)
        assert r.config_get("syslog-*") == {"syslog-enabled": "yes", "syslog-ident": "sdb-test",
                                            "syslog-facility": "local3"}
        for name, value in (("syslog-ident", "x"), ("syslog-enabled", "no"), ("syslog-facility", "user")):
            with pytest.raises(redis.ResponseError, match=rf"^CONFIG SET failed \(possibly related to "
                               rf"argument '{name}'\) - can't set immutable config$"):
                r.config_set(name, value)
        assert "Ready to accept connections" in srv.log_text()


@pytest.mark.skipif(os.path.exists("/dev/log") or os.geteuid() != 0,
                    reason="needs to stand in for the syslog daemon at /dev/log (root, none running)")
def test_syslog_enabled_sends_each_line_to_the_syslog_socket(tmp_path):
    """A stand-in syslog daemon: a datagram socket at /dev/log, where the C library sends."""
    import socket
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("/dev/log")
    try:
        sock.settimeout(15)
        with ServerProcess(tmp_path / "d", "--syslog-enabled", "yes", "--syslog-ident", "sdb-test",
                           "--syslog-facility", "local3", "--save", "") as srv:
            redis.Redis(port=srv.port).ping()
            seen = []
            deadline = time.monotonic() + 15
            while not any(b"Ready to accept connections" in m for m in seen):
                assert time.monotonic() < deadline, seen
                seen.append(sock.recv(4096))
        # <priority>: local3 (19) * 8 + notice (5) = 157; the ident names the program.
        ready = next(m for m in seen if b"Ready to accept connections" in m)
        assert ready.startswith(b"<157>") and b"sdb-test" in ready
    finally:
        sock.close()
        os.unlink("/dev/log")
