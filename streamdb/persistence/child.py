"""Background work in a forked child (snapshots, AOF rewrites), as Redis does it.

Fork gives the child a point-in-time, copy-on-write view of the whole heap, so
it can serialise the dataset while the parent's event loop keeps serving and
changing it.  The child must not touch the parent's event loop or files it
shares: it runs one function and leaves with ``os._exit``.
"""

from __future__ import annotations

import os
from typing import Callable

__all__ = ["fork_child", "reap"]


def fork_child(work: Callable[[], None], what: str) -> int:
    """Run ``work()`` in a forked child; returns the child's pid (in the parent).

    The child exits 0 when ``work`` returned, 1 when it raised (the reason goes
    to stderr, which is the server's log).
    """
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        work()
        code = 0
    except BaseException as e:  # noqa: BLE001 - report anything, then exit
        try:
            os.write(2, f"{what} child failed: {e!r}\n".encode())
        except OSError:
            pass
    finally:
        os._exit(code)


def reap(pid: int) -> int | None:
    """The exit code of child ``pid`` if it has finished, else None (never blocks)."""
    done, status = os.waitpid(pid, os.WNOHANG)
    if done == 0:
        return None
    return os.waitstatus_to_exitcode(status)
