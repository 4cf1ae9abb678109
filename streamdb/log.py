"""Redis-style logging: one line per event, ``pid:role date time.ms level message``.

Levels and their marks are Redis's: debug ``.``, verbose ``-``, notice ``*``,
warning ``#``.
"""

from __future__ import annotations

import os
import sys
import time

__all__ = ["log", "configure", "DEBUG", "VERBOSE", "NOTICE", "WARNING"]

DEBUG, VERBOSE, NOTICE, WARNING = 0, 1, 2, 3
_LEVELS = {"debug": DEBUG, "verbose": VERBOSE, "notice": NOTICE, "warning": WARNING}
_MARKS = ".-*#"


class _State:
    level = NOTICE
    role = "M"
    stream = sys.stdout


def configure(level: str = "notice", logfile: str = "", role: str = "M") -> None:
    _State.level = _LEVELS.get(level, NOTICE)
    _State.role = role
    if logfile:
        _State.stream = open(logfile, "a", buffering=1, encoding="utf-8")
    else:
        _State.stream = sys.stdout


def set_role(role: str) -> None:
    _State.role = role


def log(level: int, message: str) -> None:
    if level < _State.level:
        return
    now = time.time()
    stamp = time.strftime("%d %b %Y %H:%M:%S", time.localtime(now))
    line = f"{os.getpid()}:{_State.role} {stamp}.{int(now * 1000) % 1000:03d} {_MARKS[level]} {message}\n"
    try:
        _State.stream.write(line)
        _State.stream.flush()
    except (OSError, ValueError):
        pass
