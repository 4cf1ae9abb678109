"""Redis-style logging: one line per event, ``pid:role dd Mon yyyy HH:MM:SS.mmm mark message``.

Levels and their marks are Redis's: debug ``.``, verbose ``-``, notice ``*``,
warning ``#``.  The role is Redis's too: ``M`` primary, ``S`` replica, ``C`` a
forked child (set automatically after ``os.fork``), ``X`` sentinel (unused).

Lines go to standard output or to ``logfile`` (kept open; ``reopen`` after
logrotate moved it, on SIGHUP), and also to syslog when ``syslog-enabled``.
"""

from __future__ import annotations

import os
import sys
import syslog
import time

__all__ = ["log", "configure", "set_level", "set_role", "reopen", "format_line",
           "DEBUG", "VERBOSE", "NOTICE", "WARNING"]

DEBUG, VERBOSE, NOTICE, WARNING = 0, 1, 2, 3
LEVELS = {"debug": DEBUG, "verbose": VERBOSE, "notice": NOTICE, "warning": WARNING}
_MARKS = ".-*#"
# Redis's mapping of its levels to syslog priorities.
_SYSLOG_PRIORITY = (syslog.LOG_DEBUG, syslog.LOG_INFO, syslog.LOG_NOTICE, syslog.LOG_WARNING)
SYSLOG_FACILITIES = {"user": syslog.LOG_USER, **{f"local{i}": getattr(syslog, f"LOG_LOCAL{i}")
                                                  for i in range(8)}}


class _State:
    level = NOTICE
    role = "M"
    stream = sys.stdout
    path = ""               # "" = standard output
    to_syslog = False


def configure(level: str = "notice", logfile: str = "", role: str = "M",
              syslog_enabled: bool = False, syslog_ident: str = "streamdb",
              syslog_facility: str = "local0") -> None:
    """Set up logging; raises OSError when ``logfile`` cannot be opened."""
    _State.level = LEVELS.get(level, NOTICE)
    _State.role = role
    _State.stream = _open(logfile)
    _State.path = logfile
    _State.to_syslog = syslog_enabled
    if syslog_enabled:
        syslog.openlog(syslog_ident, syslog.LOG_PID | syslog.LOG_NDELAY | syslog.LOG_NOWAIT,
                       SYSLOG_FACILITIES[syslog_facility])


def _open(logfile: str):
    if not logfile:
        return sys.stdout
    return open(logfile, "a", buffering=1, encoding="utf-8")


def set_level(level: str) -> None:
    """CONFIG SET loglevel: takes effect with the next line."""
    _State.level = LEVELS[level]


def set_role(role: str) -> None:
    _State.role = role


def reopen() -> None:
    """Open ``logfile`` again by name (logrotate moved the old one away).

    If the new file cannot be opened the old handle is kept, so nothing is lost.
    """
    if not _State.path:
        return
    fresh = _open(_State.path)
    old, _State.stream = _State.stream, fresh
    try:
        old.close()
    except OSError:
        pass


def format_line(level: int, message: str, now: float | None = None) -> str:
    now = time.time() if now is None else now
    stamp = time.strftime("%d %b %Y %H:%M:%S", time.localtime(now))
    return f"{os.getpid()}:{_State.role} {stamp}.{int(now * 1000) % 1000:03d} {_MARKS[level]} {message}\n"


def log(level: int, message: str) -> None:
    if level < _State.level:
        return
    try:
        _State.stream.write(format_line(level, message))
        _State.stream.flush()
    except (OSError, ValueError):
        pass
    if _State.to_syslog:
        syslog.syslog(_SYSLOG_PRIORITY[level], message)


# A forked child (snapshot, AOF rewrite) logs as "C", like Redis's children.
os.register_at_fork(after_in_child=lambda: set_role("C"))
