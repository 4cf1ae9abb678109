"""The faults streamdb-crashtest --faults injects: a full disk and a failed fork.

Both need root and both are undone whatever happens (the caller uses them as
context managers, so an exception or Ctrl-C unmounts the disk and removes the
cgroup):

* ``FaultDisk``: a small tmpfs mounted on a directory of its own, for the
  server's ``dir``; ``fill()`` writes a filler file until the file system
  answers ENOSPC (and tops it up while the episode lasts, since the server
  frees what its failed writes had taken), ``free()`` deletes it.
* ``ForkLimit``: a pids cgroup (v1) with ``pids.max`` set to the number of
  tasks the server has: its threads keep running, but ``fork()`` (and a new
  thread) fails with EAGAIN, as when a machine or container runs out of
  processes.  ``lift()`` gives the server back to the cgroup it came from.
"""

from __future__ import annotations

import errno
import os
import subprocess
import time

__all__ = ["FaultSetupError", "FaultDisk", "ForkLimit", "Faults", "KINDS", "DISK_FULL", "FORK_FAILURE",
           "BOTH", "require_root"]

PIDS_ROOT = "/sys/fs/cgroup/pids"
_FILL_CHUNKS = (1 << 20, 4096)          # fill fast, then the last pages one by one


class FaultSetupError(Exception):
    """A fault cannot be set up on this machine (not root, no tmpfs, no pids cgroup)."""


def require_root() -> None:
    if os.geteuid() != 0:
        raise FaultSetupError("--faults needs root: it mounts a tmpfs for the server's data "
                              "and limits its processes with a pids cgroup (run it with sudo)")


class FaultDisk:
    """A tmpfs of ``size`` bytes mounted on ``mountpoint`` (created, and removed at exit)."""

    def __init__(self, mountpoint: str, size: int) -> None:
        self.mountpoint = mountpoint
        self.size = size
        self.filler = os.path.join(mountpoint, "filler")
        self._fd: int | None = None
        self._mounted = False

    def __enter__(self) -> FaultDisk:
        os.makedirs(self.mountpoint, exist_ok=True)     # (removed at exit if empty)
        out = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size}", "tmpfs", self.mountpoint],
                             capture_output=True, text=True)
        if out.returncode != 0:
            os.rmdir(self.mountpoint)
            raise FaultSetupError(f"cannot mount a tmpfs on {self.mountpoint}: "
                                  f"{(out.stderr or out.stdout).strip() or f'mount exited {out.returncode}'}")
        self._mounted = True
        return self

    def __exit__(self, *exc) -> None:
        self.free()
        if self._mounted:
            # The server is stopped by now; a lazy unmount covers a process
            # still holding a file open (it goes when the process does).
            if subprocess.run(["umount", self.mountpoint], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", self.mountpoint], capture_output=True)
            self._mounted = False
        try:
            os.rmdir(self.mountpoint)
        except OSError:
            pass

    @property
    def full(self) -> bool:
        return self._fd is not None

    def fill(self) -> int:
        """Write the filler until ENOSPC (again, if the server freed space since); returns its size."""
        if self._fd is None:
            self._fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        for chunk in _FILL_CHUNKS:
            block = bytes(chunk)
            while True:
                try:
                    os.write(self._fd, block)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    break
        return os.fstat(self._fd).st_size

    def free(self) -> None:
        if self._fd is None:
            return
        os.close(self._fd)
        self._fd = None
        os.unlink(self.filler)


class ForkLimit:
    """A pids cgroup named ``name`` that clamps one process at a time."""

    def __init__(self, name: str) -> None:
        self.path = os.path.join(PIDS_ROOT, name)
        self._pid: int | None = None
        self._home: str | None = None       # the cgroup the clamped process came from

    def __enter__(self) -> ForkLimit:
        if not os.path.isdir(PIDS_ROOT):
            raise FaultSetupError(f"no pids cgroup (v1) at {PIDS_ROOT}: a failed fork cannot be injected")
        try:
            os.mkdir(self.path)
        except OSError as e:
            raise FaultSetupError(f"cannot create the pids cgroup {self.path}: {e.strerror}") from None
        return self

    def __exit__(self, *exc) -> None:
        self.lift()
        # A child forked after the lift but before the move back may still be
        # in it for a moment: an rmdir then answers EBUSY.
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)

    def clamp(self, pid: int) -> int:
        """Move ``pid`` and every thread of it in, with no room for one more task; returns the limit.

        Raises ProcessLookupError when ``pid`` is gone."""
        self._home = _pids_cgroup_of(pid)
        _write(os.path.join(self.path, "cgroup.procs"), pid)
        self._pid = pid
        for tid in _tasks(pid):          # (cgroup.procs moved them all; a thread made meanwhile too)
            _write(os.path.join(self.path, "tasks"), tid, missing_ok=True)
        limit = len(_tasks(pid))
        _write(os.path.join(self.path, "pids.max"), limit)
        return limit

    def lift(self) -> None:
        """Let the process fork again and give it back to its own cgroup (if it still runs)."""
        if self._pid is None:
            return
        _write(os.path.join(self.path, "pids.max"), "max")
        home = os.path.join(PIDS_ROOT, (self._home or "/").lstrip("/"))
        _write(os.path.join(home, "cgroup.procs"), self._pid, missing_ok=True)
        self._pid = None


def _tasks(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except FileNotFoundError:
        return []


def _pids_cgroup_of(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as f:
            lines = f.readlines()
    except FileNotFoundError:
        raise ProcessLookupError(errno.ESRCH, f"no process {pid}") from None
    for line in lines:
        _, controllers, path = line.rstrip("\n").split(":", 2)
        if "pids" in controllers.split(","):
            return path
    return "/"


def _write(path: str, value, missing_ok: bool = False) -> None:
    try:
        with open(path, "w", encoding="ascii") as f:
            f.write(f"{value}\n")
    except ProcessLookupError:
        if not missing_ok:
            raise


DISK_FULL, FORK_FAILURE, BOTH = "disk-full", "fork-failure", "both"
KINDS = (DISK_FULL, FORK_FAILURE, BOTH)


class Faults:
    """The disk and the fork limit of one run: ``inject`` an episode of a kind, ``lift`` it.

    Entering mounts the disk and creates the cgroup; leaving lifts whatever is
    on and removes both (the caller has stopped the server first)."""

    def __init__(self, mountpoint: str, disk_size: int, cgroup_name: str) -> None:
        self.disk = FaultDisk(mountpoint, disk_size)
        self.forks = ForkLimit(cgroup_name)

    def __enter__(self) -> Faults:
        require_root()
        self.disk.__enter__()
        try:
            self.forks.__enter__()
        except BaseException:
            self.disk.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.forks.__exit__(*exc)
        finally:
            self.disk.__exit__(*exc)

    def inject(self, kind: str, pid: int) -> None:
        """Start an episode: ``pid`` is the server (ProcessLookupError when it is gone)."""
        if kind in (FORK_FAILURE, BOTH):
            self.forks.clamp(pid)
        if kind in (DISK_FULL, BOTH):
            self.disk.fill()

    def keep_on(self) -> None:
        """While an episode lasts: take back what the server freed (a failed write cuts its file back)."""
        if self.disk.full:
            self.disk.fill()

    def lift(self) -> None:
        self.disk.free()
        self.forks.lift()
