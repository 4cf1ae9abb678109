"""Fsync off the event loop for ``appendfsync always``: a child process does it.

Under ``always`` no reply leaves the server before the frames of its turn are
on disk.  An fdatasync takes a few hundred microseconds here; doing it on the
loop thread (as Redis does in beforeSleep) leaves the CPU idle for that long
every turn, so throughput is bound by CPU time plus disk time.  A thread could
overlap them, but each finished fsync must take the GIL back from the busy
loop to report (measured in an earlier design: those hand-offs cost more than
the overlap saved).  A child process shares no GIL: the loop sends it the AOF's
file descriptor and goes on executing the next turns, whose replies wait; the
child's answer comes back on a socket the loop watches like a client's.  The
bound becomes the slower of the CPU and the disk, and one fdatasync covers
every frame written while the previous one ran.  The cycle is: the loop asks,
the child wakes and fdatasyncs, the loop reads the answer and, in that same
callback, writes the frames kept back meanwhile and asks again, then releases
the replies the answer covers.  (Where the time of one cycle goes, and the
variants measured slower -- two children, a child that syncs again by itself,
syncing on the loop, asking at the end of the turn -- are in
docs/PERFORMANCE.md.)

The child (``fsync_child.py``) imports nothing of StreamDB and exits when its
socket closes, so it never outlives the server, even after ``kill -9``.

States: idle -> ``request(fd)`` -> syncing -> answer (``on_answer(None)``, or
``on_answer(OSError)`` when the fdatasync failed) -> idle.  One request at a
time (``busy``).  If the child dies, ``on_answer`` gets ``ChildGone`` and the
caller fsyncs by itself from then on.
"""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys

__all__ = ["Syncer", "ChildGone"]

_CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fsync_child.py")


class ChildGone(OSError):
    """The fsync child exited (or could not be reached): its request is unanswered."""


class Syncer:
    def __init__(self, loop, on_answer) -> None:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            # -I -S: no environment, no site packages: a bare interpreter starts fastest.
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", _CHILD, str(child.fileno())],
                pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL)
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        parent.setblocking(False)
        self.sock = parent
        self.loop = loop
        self.on_answer = on_answer
        self.busy = False
        self._generation = None      # of the file the child holds
        self._partial = b""
        loop.add_reader(parent.fileno(), self._readable)

    def request(self, fd: int, generation: int) -> None:
        """Ask for an fdatasync of ``fd``, the file of ``generation`` (the caller
        counts its file changes): the child gets its own copy of the descriptor
        only when the generation changed (passing one costs more than the
        request).  The answer comes through ``on_answer``.  Raises ChildGone."""
        if self.sock is None:
            raise ChildGone(errno.ECHILD, "the fsync child exited")
        try:
            if generation != self._generation:
                socket.send_fds(self.sock, [b"S"], [fd])
                self._generation = generation
            else:
                self.sock.send(b"S")
        except OSError as e:
            raise ChildGone(e.errno or errno.EPIPE, "the fsync child is gone") from None
        self.busy = True

    def _readable(self) -> None:
        try:
            data = self.sock.recv(256)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.close()
            if self.busy:
                self.busy = False
                self.on_answer(ChildGone(errno.ECHILD, "the fsync child exited"))
            return
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            self.busy = False
            if line == b"+":
                self.on_answer(None)
            else:
                code = int(line[1:] or errno.EIO)
                self.on_answer(OSError(code, os.strerror(code)))

    def close(self) -> None:
        """Stop the child (it exits when its socket closes)."""
        if self.sock is None:
            return
        try:
            self.loop.remove_reader(self.sock.fileno())
        except (ValueError, RuntimeError):
            pass            # the loop is closed already
        self.sock.close()
        self.sock = None
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
