"""Zero-filled room ahead of the AOF's current incr segment (``aof-preallocate``).

Under ``appendfsync always`` every frame is followed by an fdatasync.  A frame
appended at the end of the file grows it, and on ext4 that fdatasync must also
commit the new size through the journal; a frame written over bytes that are
already in the file (zeros written and fdatasync'ed before) needs only its data
written.  Measured here (3000 x write of 3000 bytes + fdatasync): 134-156 us per
fdatasync appending against 98-103 us over durable zeros.  ``posix_fallocate``
does not help: its unwritten extents must be converted through the journal on
the first write, so the zeros are really written.

So a segment is kept physically longer than its logical end (its header and
frames), the bytes past it zeros, and the frames are written at the logical end
with ``os.pwrite``.  One ``Preallocator`` per segment owns a thread that writes
those zeros in chunks (``os.pwrite`` and ``os.fdatasync`` release the GIL, so
the event loop never waits for them) whenever the room ahead falls below half
of what it wants, and is started with the segment (the first room of a new
segment is written by the thread too: nothing on the loop).

The one rule: the thread never writes zeros where a frame is.  It zeroes only
from ``max(zeroed, logical)`` on, holding ``io_lock`` while its ``pwrite``
runs; the loop writes a frame that ends at or before ``zeroed`` (a value only
the thread raises, once its zeros are in the file) without any lock, and takes
``io_lock`` only for a frame that goes past it, recording its end as
``logical`` so that the thread's next chunk starts after it.  Frames that catch
up with the zeros are simply appended, as without preallocation (correct,
just slower fdatasyncs); they wait at most for one chunk's ``pwrite`` into the
page cache, and only in that case.

The thread has an fd of its own (``os.dup``): the loop may close its fd (a
rotation) while the thread works, and a number the loop closed and reused for
the next segment is never written by the old thread.  When its segment is sealed
(``retire``) the thread cuts the file back to the segment's final logical size
and closes its fd; at shutdown (``close``) the AOF waits for it and cuts the file
itself, so segments at rest hold no zeros unless the server died.
"""

from __future__ import annotations

import os
import threading

from .. import log

__all__ = ["Preallocator", "room_wanted", "CHUNK", "FIRST_CHUNK", "MIN_ROOM"]

CHUNK = 1 << 20           # one pwrite + fdatasync of zeros
FIRST_CHUNK = 64 << 10    # a new segment's first chunks double from here up to CHUNK
MIN_ROOM = 1 << 20        # the room a small segment keeps ahead (see room_wanted)
_ZEROS = bytes(64 << 10)   # a chunk is written from this buffer, repeated (os.pwritev)
_RETRY_AFTER_ERROR = 1.0  # seconds the thread rests after a failed zero write


def room_wanted(logical_end: int, limit: int) -> int:
    """Bytes of zeros to keep ahead of ``logical_end``: as much as the segment holds
    already (at least ``MIN_ROOM``), at most ``limit`` (``aof-preallocate``).  A
    segment that stays small (many rotations: BGSAVE, tests) costs little; a big
    one has ``limit`` ahead, extended once less than half of it is left."""
    return min(limit, max(MIN_ROOM, logical_end))


class Preallocator:
    """The zeros ahead of one segment and the thread that writes them.

    ``zeroed``: the file holds zeros (written, maybe not yet durable) from the
    logical end up to here; ``durable``: up to here they are fdatasync'ed too;
    ``target``: where the thread is asked to get to; ``logical``: the loop's
    logical end as far as the thread needs to know (updated when a frame goes
    past ``zeroed``)."""

    def __init__(self, fd: int, name: str, logical_end: int, file_end: int) -> None:
        self.fd = os.dup(fd)
        self.name = name
        self.io_lock = threading.Lock()        # held by whoever pwrites past ``zeroed``
        self.cond = threading.Condition()      # wakes the thread (never held during I/O)
        self.logical = logical_end
        self.zeroed = self.durable = self.target = max(file_end, logical_end)
        self.error: OSError | None = None
        self._generation = 0                   # bumped by cut_back: older chunks mean nothing
        self._stopping = False
        self._stopped = threading.Event()      # (the rest after an error ends early on it)
        self._retire_to: int | None = None
        self._thread = threading.Thread(target=self._run, name="aof-prealloc", daemon=True)
        try:
            self._thread.start()
        except RuntimeError:        # no thread to be had (a pids limit): the caller appends
            os.close(self.fd)
            raise

    # -- the loop's side -------------------------------------------------------

    def extend(self, logical_end: int, limit: int) -> None:
        """After a frame ending at ``logical_end``: ask for more zeros when less than
        half of the room wanted is left."""
        want = room_wanted(logical_end, limit)
        if self.target - logical_end < want // 2:
            with self.cond:
                self.target = max(self.target, logical_end + want)
                self.cond.notify()

    def cut_back(self, fd: int, size: int) -> None:
        """A failed write or fsync: the AOF cuts its file back to ``size`` (the frames
        are written again from there).  The zeros go too; new ones come with the
        next frame that is written."""
        with self.io_lock:
            self._generation += 1
            os.ftruncate(fd, size)
            self.logical = self.zeroed = self.durable = self.target = size

    def retire(self, final_size: int) -> None:
        """The segment is sealed at ``final_size``: the thread stops zeroing, cuts
        the zeros off and closes its fd, on its own time (the loop does not wait)."""
        with self.cond:
            self._retire_to = final_size
            self._stopping = True
            self.cond.notify()
        self._stopped.set()

    def close(self, timeout: float = 5.0) -> bool:
        """Shutdown: stop the thread and wait for it (the caller cuts the file).
        False if it did not stop in time (its fd is then left to it)."""
        with self.cond:
            self._stopping = True
            self.cond.notify()
        self._stopped.set()
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # -- the thread ------------------------------------------------------------

    def _run(self) -> None:
        chunk = FIRST_CHUNK
        try:
            while True:
                with self.cond:
                    while not self._stopping and max(self.zeroed, self.logical) >= self.target:
                        self.cond.wait()
                    if self._stopping:
                        break
                try:
                    chunk = self._zero_chunk(chunk)
                except OSError as e:
                    self._failed(e)
        finally:
            self._finish()

    def _zero_chunk(self, chunk: int) -> int:
        with self.io_lock:
            if self._stopping:
                return chunk
            start = max(self.zeroed, self.logical)
            n = min(chunk, self.target - start)
            if n <= 0:
                return chunk
            done = 0
            while done < n:           # (one call: the GIL is taken back once per chunk)
                left = n - done
                bufs = [_ZEROS] * (left // len(_ZEROS))
                if left % len(_ZEROS):
                    bufs.append(memoryview(_ZEROS)[:left % len(_ZEROS)])
                done += os.pwritev(self.fd, bufs, start + done)
            self.zeroed = start + n
            generation = self._generation
        os.fdatasync(self.fd)
        with self.io_lock:
            if generation == self._generation:
                self.durable = max(self.durable, start + n)
        self.error = None
        return min(chunk * 2, CHUNK)

    def _failed(self, e: OSError) -> None:
        # (ENOSPC, EIO: the frames will meet the same disk and say so; the zeros
        # written so far stay, zeros being a valid tail.)  Rest, then try again
        # only when a frame asks for more.
        if self.error is None:
            log.log(log.WARNING, f"AOF preallocation of {self.name} failed: {e.strerror or e}; "
                                 f"frames are appended to the file meanwhile")
        self.error = e
        with self.cond:
            self.target = min(self.target, max(self.zeroed, self.logical))
        self._stopped.wait(_RETRY_AFTER_ERROR)

    def _finish(self) -> None:
        if self._retire_to is not None:
            try:
                os.ftruncate(self.fd, self._retire_to)
            except OSError:
                pass            # zeros after the frames are a valid tail
        os.close(self.fd)
