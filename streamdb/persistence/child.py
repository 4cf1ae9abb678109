"""Background work in a forked child (snapshots, AOF rewrites), as Redis does it.

Fork gives the child a point-in-time, copy-on-write view of the whole heap, so
it can serialise the dataset while the parent's event loop keeps serving and
changing it.  The child must not touch the parent's event loop or files it
shares: it runs one function and leaves with ``os._exit``.
"""

from __future__ import annotations

import ctypes
import os
import signal
from typing import Callable

__all__ = ["fork_child", "reap"]

_PR_SET_PDEATHSIG = 1       # linux/prctl.h


def fork_child(work: Callable[[], None], what: str) -> int:
    """Run ``work()`` in a forked child; returns the child's pid (in the parent).

    The child exits 0 when ``work`` returned, 1 when it raised (the reason goes
    to stderr, which is the server's log).
    """
    parent = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        _die_with(parent)
        work()
        code = 0
    except BaseException as e:  # noqa: BLE001 - report anything, then exit
        try:
            os.write(2, f"{what} child failed: {e!r}\n".encode())
        except OSError:
            pass
    finally:
        os._exit(code)


def _die_with(parent: int) -> None:
    """The child ends when its parent does (``prctl(PR_SET_PDEATHSIG, SIGKILL)``):
    its work is only worth anything to a live parent, which reaps it and records the
    result, and a killed server's child must not go on writing the data directory
    the restarted server reads.  (A parent gone before the call: exit now.)"""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):       # not Linux: the child finishes its work
        return
    if os.getppid() != parent:
        os._exit(1)


def reap(pid: int) -> int | None:
    """The exit code of child ``pid`` if it has finished, else None (never blocks)."""
    done, status = os.waitpid(pid, os.WNOHANG)
    if done == 0:
        return None
    return os.waitstatus_to_exitcode(status)
