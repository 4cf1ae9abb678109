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

from .. import log

__all__ = ["fork_child", "fork_reporting_child", "read_failure_reason", "reap",
           "describe_failure", "describe_exit", "NotStarted"]

_PR_SET_PDEATHSIG = 1       # linux/prctl.h


class NotStarted(RuntimeError):
    """A background job (snapshot, AOF rewrite) could not start: its fork (or a step
    before it) failed.  Already logged and recorded as a failed job by the raiser,
    which gave back what it had taken; the command answers as Redis does."""


def fork_child(work: Callable[[], None], what: str) -> int:
    """Run ``work()`` in a forked child; returns the child's pid (in the parent).

    The child exits 0 when ``work`` returned, 1 when it raised (the reason goes
    to the server's log).  A failed fork raises OSError (EAGAIN: a pids limit;
    ENOMEM: no memory to copy the page tables of a big heap) and starts nothing.
    """
    return _fork(work, what, None)


def fork_reporting_child(work: Callable[[], None], what: str) -> tuple[int, int]:
    """``fork_child``, plus the read end of a pipe on which the child, if ``work``
    raises, leaves the reason (``read_failure_reason`` reads it once the child has
    been reaped).  A pipe, not a file: the disk may be the very thing that failed."""
    rfd, wfd = os.pipe2(os.O_CLOEXEC)
    try:
        pid = _fork(work, what, wfd)
    except BaseException:
        os.close(rfd)
        raise
    finally:
        os.close(wfd)       # (the parent's copy: the pipe ends when the child exits)
    return pid, rfd


def read_failure_reason(fd: int) -> str:
    """What a reaped child of ``fork_reporting_child`` said it failed of ("" when it
    said nothing: it returned, or was killed); closes ``fd``."""
    try:
        return os.read(fd, _REASON_MAX).decode("utf-8", "replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


_REASON_MAX = 512           # < PIPE_BUF: the child's one write into an empty pipe never blocks


def describe_failure(e: BaseException) -> str:
    """One line for an exception: an OSError's strerror (and the file it names),
    else its message (else its type's name)."""
    if isinstance(e, OSError) and e.strerror:
        return f"{e.strerror}: {e.filename}" if e.filename else e.strerror
    return str(e) or type(e).__name__


def describe_exit(code: int) -> str:
    """A reaped child's exit code (``reap``) in words, for the log."""
    return f"terminated by signal {-code}" if code < 0 else f"exited with code {code}"


def _fork(work: Callable[[], None], what: str, report_fd: int | None) -> int:
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
        reason = describe_failure(e)
        try:
            log.log(log.WARNING, f"{what} child failed: {reason} ({e!r})")
            if report_fd is not None:
                os.write(report_fd, reason.encode("utf-8", "replace")[:_REASON_MAX])
        except BaseException:  # noqa: BLE001 - exiting matters more than reporting
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
