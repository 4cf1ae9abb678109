"""The AOF's writer: frames appended to the current segment, and their durability.

Each loop turn's effects become one frame (format.py), written with one write().
Under ``appendfsync always`` the loop fdatasync()s it at once, before any reply
of the turn leaves the server, as Redis does in beforeSleep: one fdatasync
covers every client's writes of the turn, and the requests that arrive while it
runs make the next turn's frame.  (A child process that fsynced while the loop
went on was measured slower: see docs/ARCHITECTURE.md.)  Under ``everysec`` the
``aof-fsync`` thread fdatasync()s once a second; under ``no`` the OS does.

If a write or fsync fails, the frame stays in memory and is retried, the file is
cut back to its last good frame, and write commands are refused (MISCONF) until
the disk works again.  The replies of the clients whose writes the frame holds
wait for it (``holds_replies_of``): until it is written, under 'always' until it
is fsynced, so that no acknowledged write is only in memory (Redis acknowledges
a write an 'everysec' AOF failed to write, and retries it).  Every other reply
goes out.

Log positions (``written_pos``, ``durable_pos``) count bytes written since the
server opened the AOF, across segments: WAITAOF and a replica's FACK wait on
them (``durable_listeners``).
"""

from __future__ import annotations

import bisect
import errno
import os
import threading
import time

from ... import log
from ...dispatch.effects import EffectBatch
from ..prealloc import Preallocator
from .format import SEGMENT_MAGIC, frame_header, pwritev_all, read_segment
from .manifest import AofDirectory

__all__ = ["AofWriter", "FsyncDurations", "DEFAULT_PREALLOCATE"]

DEFAULT_PREALLOCATE = 16 << 20      # aof-preallocate's default


class FsyncDurations:
    """How long the AOF's fdatasync calls took, counted in buckets: the metrics
    endpoint's histogram ``streamdb_aof_fsync_duration_seconds``.

    Recorded under the writer's ``_sync_lock`` by whichever thread synced (the
    loop under 'always', the aof-fsync thread under 'everysec'); read by the
    loop without it: each count only grows, so a reader sees at worst a sync
    counted in its bucket and not yet in ``seconds``."""

    # Upper bounds (seconds) of the buckets; a last one, +Inf, has the rest.
    BOUNDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

    def __init__(self) -> None:
        self.counts = [0] * (len(self.BOUNDS) + 1)
        self.seconds = 0.0

    def record(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(self.BOUNDS, seconds)] += 1
        self.seconds += seconds


class AofWriter:
    """Appends frames to the current incr segment (the manifest's last) and makes
    them durable under the fsync policy; knows the log's logical sizes."""

    def __init__(self, core, directory: AofDirectory, fsync: str = "everysec",
                 preallocate: int = DEFAULT_PREALLOCATE) -> None:
        self.core = core
        self.directory = directory
        self.policy = fsync
        self.fd: int | None = None    # the current segment's (None before open and after close)
        self.cur_db = 0               # the db the segment's replayer will be in
        self.buf: list[bytes] = []    # this turn's effects
        self.pending: bytes = b""     # a frame that failed to write, retried
        self.size = 0                 # current segment's logical size (header and frames)
        # The whole log's logical sizes: moved on by each write, counted again
        # (``recount_sizes``) when the manifest changes.
        self.base_size = 0
        self.total_size = 0
        # aof-preallocate: the most zeros kept written ahead of the current
        # segment's logical end under 'always' (0: none); the Preallocator of the
        # current segment, if it has one.
        self.preallocate = preallocate
        self.prealloc: Preallocator | None = None
        self.last_write_ok = True
        self.last_error = ""
        self.inject_failures = 0      # DEBUG AOF-INJECT-ERROR: fail the next N writes
        self.inject_fsync_failures = 0    # DEBUG AOF-INJECT-FSYNC-ERROR: fail the next N 'always' fsyncs
        self.fsync_log: int | None = None     # fd of fsync.log when aof-record-fsync is on
        self._dirty_since_fsync = False
        self._stop = False
        self._fsync_thread: threading.Thread | None = None
        # Log positions count bytes written since open_for_append, across
        # segments: a client's write is durable once ``durable_pos`` reaches the
        # end of the frame that holds it (WAITAOF, a replica's FACK).
        self.written_pos = 0
        self.durable_pos = 0
        self._sync_lock = threading.Lock()      # held during an fsync; rotation takes it
        self._wake = threading.Condition()      # wakes the everysec thread to stop
        # Bumped when a failed 'always' fsync makes the loop rewrite a frame: the
        # everysec thread's fsyncs started before that no longer mean anything.
        self._sync_epoch = 0
        # Called with each new durable position: WAITAOF's waiters, a
        # replica's FACK (replication/).
        self.durable_listeners: list = []
        self.loop = None
        self.fsync_durations = FsyncDurations()

    # -- opening ------------------------------------------------------------------

    def record_fsyncs(self) -> None:
        os.makedirs(self.directory.dir, exist_ok=True)
        self.fsync_log = os.open(os.path.join(self.directory.dir, "fsync.log"),
                                 os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def continue_segment(self, name: str) -> None:
        """Start-up (``Aof.open_for_append``): frames go on at the end of the last whole
        frame of the existing segment ``name``, as the load judged it: it is never
        created, nor given a header, here."""
        path = os.path.join(self.directory.dir, name)
        known = self.directory.sizes.get(name)
        if known is None:       # (not replayed, as the snapshot covers it: judged here)
            with open(path, "rb") as f:
                known = read_segment(f.read(), path).valid_end
        # No O_APPEND: frames go at the logical end (os.pwrite at ``size``), which
        # the load found (the end of the last whole frame), not the file's end:
        # after a crash the zeros of its preallocation follow it.
        self.fd = os.open(path, os.O_WRONLY)
        self.size = known
        self._adopt_tail(name)

    def start_fsync_thread(self) -> None:
        if self._fsync_thread is None:
            # everysec's once-a-second fsync (CONFIG SET appendfsync may switch live).
            self._fsync_thread = threading.Thread(target=self._fsync_loop, name="aof-fsync", daemon=True)
            self._fsync_thread.start()

    def _adopt_tail(self, name: str) -> None:
        """open_for_append of an existing segment: what follows its logical end.

        Zeros (a crashed server's preallocation; the load checked that only zeros
        follow) are made durable, so that frames may be written over them, and
        kept as the room ahead under 'always'; otherwise they are cut off."""
        file_end = os.fstat(self.fd).st_size
        if file_end > self.size:
            if self.policy == "always" and self.preallocate:
                os.fdatasync(self.fd)        # (a kill -9 may have left them in the page cache only)
            else:
                os.ftruncate(self.fd, self.size)
                os.fsync(self.fd)
        self._start_prealloc(name)

    def _start_prealloc(self, name: str, logical_end: int | None = None) -> None:
        """Under 'always' (with aof-preallocate), the current segment gets its
        Preallocator, whose thread writes the first room at once (the segment's
        first frames may be appended meanwhile).  Under the other policies frames
        are appended: one fdatasync a second (or none) has little to gain, and
        the zeros would double what the disk writes."""
        if self.prealloc is None and self.policy == "always" and self.preallocate:
            end = self.size if logical_end is None else logical_end
            try:
                self.prealloc = Preallocator(self.fd, name, end, os.fstat(self.fd).st_size)
            except (RuntimeError, OSError) as e:
                # No thread (a pids limit, as when forks fail) or no fd: the zeros are a
                # speed-up, not a need.  This segment's frames are appended instead.
                log.log(log.WARNING, f"Cannot preallocate the AOF segment {name} ({e}): "
                                     "its frames are appended")
                return
            self.prealloc.extend(end, self.preallocate)

    def segment_size(self, name: str | None) -> int:
        """The logical size of segment ``name`` (its header and frames, without
        preallocated zeros): what INFO, auto-rewrite and backups count."""
        if not name:
            return 0
        if name == self.directory.current_segment() and self.fd is not None:
            return self.size
        return self.directory.sealed_size(name)

    def recount_sizes(self) -> None:
        """``base_size`` and ``total_size`` again, from the segments the manifest names."""
        manifest = self.directory.manifest
        self.base_size = self.segment_size(manifest.base)
        self.total_size = self.base_size + sum(self.segment_size(s) for s in manifest.incrs)

    # -- rotation's steps -----------------------------------------------------------

    def sync_written(self) -> None:
        """fdatasync what is written to the current segment and not durable yet: its
        frames must be durable before its fd goes.  Raises OSError."""
        # (Under the lock: the fsync thread must not be inside an fsync of the old fd.)
        with self._sync_lock:
            if self.fd is not None and self.written_pos > self.durable_pos:
                self._timed_fdatasync()

    def switch_to(self, fd: int, name: str) -> None:
        """A rotation's last step: frames go to the new segment ``name`` (open at
        ``fd``, holding its header; the manifest saved names it).  The current one
        (the manifest in memory still names it last) is sealed and closed; all
        written before is durable (``sync_written``)."""
        with self._sync_lock:
            if self.fd is not None:
                self._seal_current()
                os.close(self.fd)
            self.fd = fd
            self.size = len(SEGMENT_MAGIC)
        self._mark_durable(self.written_pos)
        self.cur_db = 0
        self._start_prealloc(name)

    def _seal_current(self) -> None:
        """The current segment gets no more frames: its logical size is final, and
        its zeros are cut off by its Preallocator's thread (the loop goes on)."""
        if self.directory.manifest.incrs:
            self.directory.sizes[self.directory.current_segment()] = self.size
        if self.prealloc is not None:
            self.prealloc.retire(self.size)
            self.prealloc = None

    # -- appending --------------------------------------------------------------

    def append_batch(self, batch: EffectBatch) -> None:
        """Effect sink: queue one command's effects (their RESP, after a SELECT when
        the segment is in another database) for this turn's frame.

        The writing client's ``aof_woff`` becomes the mark ``fsynced`` checks:
        one past where the frame holding these effects will start (every frame
        kept back is written before it, in one write with it)."""
        if not batch.data:
            return          # a Pub/Sub message: for replicas only, never data
        writer = self.core.current_client
        if writer is not None:
            writer.aof_woff = self.written_pos + len(self.pending) + 1
        self.buf.append(batch.resp_from(self.cur_db))
        self.cur_db = batch.final_db()

    def flush(self) -> bool:
        """The server's hook at the end of each loop turn: write this turn's frame
        (after any a failed write kept back) and, under 'always', fdatasync it.

        Returns False when the frame could not be written or synced: the caller
        holds the turn's replies and the frame is retried on the next turn or tick.
        """
        # This turn's effects become one frame, behind any kept back: written as
        # pieces, never joined (a 100 MB value's frame would be copied once more).
        pieces = [self.pending] if self.pending else []
        if self.buf:
            body = b"".join(self.buf)
            self.buf.clear()
            pieces += [frame_header(body), body]
        return self._write_pending(pieces)

    def _write_pending(self, pieces: list[bytes]) -> bool:
        """Write the frames ``pieces`` hold (``pending``'s first, if any) in one write;
        under 'always', fsync them.  False when the write or the fsync failed (see
        ``flush``): they are then ``pending``, joined."""
        if not pieces:
            return True
        try:
            if self.inject_failures:
                self.inject_failures -= 1
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            write_started = time.perf_counter()
            self._write_all(pieces)
            self.core.observe.latency_sample(
                "aof-write", int((time.perf_counter() - write_started) * 1000))
        except OSError as e:
            self.pending = b"".join(pieces)
            self._write_failed(e)
            return False
        written = sum(map(len, pieces))
        start = self.size
        self.size += written
        self.total_size += written
        self.written_pos += written
        self.pending = b""
        if self.policy == "always":
            return self._sync_now(start, pieces)
        else:
            self._dirty_since_fsync = True
            self._clear_write_error()
        return True

    def holds_replies_of(self, client) -> bool:
        """The server's reply gate while a frame waits for the disk: whether
        ``client``'s replies must wait.  Under 'always' a write is acknowledged only
        once it is durable, so they wait while its last write (``aof_woff``) is not.
        Under the other policies a write is acknowledged once it is written (the OS
        has it, so a kill -9 loses nothing), so they wait while the frame holding it
        is not: a full disk.  (Redis acknowledges such a write anyway and retries it
        from memory, where a kill -9 meanwhile loses it.)"""
        if self.policy == "always":
            return not self.fsynced(client.aof_woff)
        return client.aof_woff > self.written_pos

    def _clear_write_error(self) -> None:
        """Writes are accepted again (under 'always': once an fsync succeeded, not just a write)."""
        if not self.last_write_ok:
            log.log(log.WARNING, "AOF write error solved: writes accepted again")
        self.last_write_ok = True
        self.last_error = ""
        self.core.write_refusal = None

    def flush_pending_retry(self) -> None:
        """Cron: retry a frame that failed to write even when no new turn comes."""
        if self.pending and not self.buf and not self.last_write_ok:
            self.flush()

    def _write_all(self, pieces: list[bytes]) -> None:
        """Write ``pieces``, one after the other, at the logical end (``size``; the
        caller moves it on).

        Past the zeros the preallocation thread has written (or with none), the
        frame is appended; while that thread may be writing right there, under its
        ``io_lock`` (see prealloc.py)."""
        end = self.size + sum(map(len, pieces))
        pa = self.prealloc
        if pa is None or end <= pa.zeroed:
            pwritev_all(self.fd, pieces, self.size)
        else:
            with pa.io_lock:
                pwritev_all(self.fd, pieces, self.size)
                pa.logical = end
        if self.policy == "always" and self.preallocate:
            if pa is None:      # (appendfsync switched to always at run time)
                self._start_prealloc(self.directory.current_segment(), end)
            else:
                pa.extend(end, self.preallocate)

    def _write_failed(self, e: OSError) -> None:
        # Cut back whatever part of the frame reached the file, so that the
        # retried frame does not follow a torn one (the zeros ahead go too).
        try:
            if self.prealloc is not None:
                self.prealloc.cut_back(self.fd, self.size)
            else:
                os.ftruncate(self.fd, self.size)
        except OSError:
            pass
        if self.policy == "always":
            waiting = "the replies to those writes wait for it"
        else:
            waiting = f"those writes were acknowledged (appendfsync {self.policy})"
        self._refuse_writes(f"Error writing to the AOF file: {e.strerror or e}; refusing writes "
                            f"until the disk works again (what could not be written is kept in "
                            f"memory and retried; {waiting})", e)

    def _refuse_writes(self, message: str, e: OSError) -> None:
        """A write or fsync failed: write commands get MISCONF until one works again
        (``_clear_write_error``); ``message`` is logged when that starts, not per retry."""
        if self.last_write_ok:
            log.log(log.WARNING, message)
        self.last_write_ok = False
        self.last_error = e.strerror or str(e)
        self.core.write_refusal = f"MISCONF Errors writing to the AOF file: {self.last_error}"

    def _fsync_loop(self) -> None:
        """The aof-fsync thread: once a second under 'everysec'."""
        while True:
            with self._wake:
                if not self._stop:
                    self._wake.wait(1.0)
                if self._stop:
                    return
            if self.policy == "everysec" and self._dirty_since_fsync:
                self._sync_everysec()

    def unsynced(self) -> int:
        """Bytes written to the log and not yet known durable."""
        return self.written_pos - self.durable_pos

    def sync_soon(self) -> None:
        """Under 'everysec': have the aof-fsync thread fdatasync now instead of at its
        next second (``unsynced`` drops once it did), so that an fsync the loop must
        make itself (a rotation's ``sync_written``) finds little left to write."""
        with self._wake:
            self._wake.notify()

    def fsynced(self, mark: int) -> bool:
        """Whether the effects appended when ``aof_woff`` was ``mark`` are durable.

        Durable positions are always the ends of whole writes, so one past the
        frame's start is reached only once the whole frame is covered."""
        return mark <= self.durable_pos

    def _sync_now(self, start: int, frame: list[bytes]) -> bool:
        """'always': fdatasync what is written, on the loop thread, before the
        turn's replies go: ``frame``'s pieces, just written at ``start`` in the segment.
        False when the fsync failed: the frame is cut back to be written again,
        and the replies wait."""
        target = self.written_pos
        name, offset = self.directory.current_segment(), self.size
        with self._sync_lock:      # the everysec thread may be syncing after a policy switch
            try:
                if self.inject_fsync_failures:
                    self.inject_fsync_failures -= 1
                    raise OSError(errno.EIO, os.strerror(errno.EIO))
                took = self._timed_fdatasync()
                err = None
            except OSError as e:
                err = e
        if err is None:
            self._record_fsync_at(name, offset)
            self.core.observe.latency_sample("aof-fsync-always", int(took * 1000))
            self._mark_durable(target)
            return True
        # The kernel may have dropped the dirty pages, so the frame cannot be
        # trusted: cut the segment back to its start and write it again (its
        # replies are held meanwhile).
        with self._sync_lock:
            self._sync_epoch += 1
            self.pending = b"".join(frame) + self.pending
            self.written_pos = self.durable_pos
            self.total_size -= self.size - start
            self.size = start
            self._write_failed(err)
        return False

    def _sync_everysec(self) -> None:
        """The aof-fsync thread's fdatasync.  A failure refuses writes (MISCONF) and
        leaves the log dirty, so that the next second tries again: with writes
        refused nothing else would, and the refusal would outlive the failing disk."""
        with self._sync_lock:
            self._dirty_since_fsync = False
            if self.fd is None:
                return
            name, offset, target = self.directory.current_segment(), self.size, self.written_pos
            epoch = self._sync_epoch
            try:
                if self.inject_fsync_failures:
                    self.inject_fsync_failures -= 1
                    raise OSError(errno.EIO, os.strerror(errno.EIO))
                self._timed_fdatasync()
            except OSError as e:
                self._dirty_since_fsync = True
                self._call_in_loop(self._everysec_failed, e)
                return
        self._record_fsync_at(name, offset)
        self._call_in_loop(self._everysec_synced, target, epoch)

    def _timed_fdatasync(self) -> float:
        """fdatasync the current segment (the caller holds ``_sync_lock``), counted in
        ``fsync_durations``; returns the seconds it took.  Raises OSError."""
        started = time.perf_counter()
        os.fdatasync(self.fd)
        took = time.perf_counter() - started
        self.fsync_durations.record(took)
        return took

    def _everysec_failed(self, e: OSError) -> None:
        """Loop thread: the everysec thread's fdatasync failed."""
        self._refuse_writes(f"Error fsyncing the AOF file: {e.strerror or e}; refusing writes "
                            f"until an fsync works again (tried every second)", e)

    def _call_in_loop(self, fn, *args) -> None:
        loop = self.loop
        if loop is None or loop.is_closed():
            fn(*args)           # no loop (tests, shutdown): the caller's thread is fine
        else:
            try:
                loop.call_soon_threadsafe(fn, *args)
            except RuntimeError:     # the loop closed meanwhile
                pass

    def _everysec_synced(self, target: int, epoch: int) -> None:
        """Loop thread: the everysec thread's fsync covered the log up to ``target``
        (unless a failed 'always' fsync has cut the segment back since it began)."""
        if epoch == self._sync_epoch:
            self._mark_durable(target)
            if not self.pending:
                # (With nothing new written since a failed fsync, _mark_durable has no
                # new position to clear the refusal on.)
                self._clear_write_error()

    def _mark_durable(self, pos: int) -> None:
        if pos <= self.durable_pos:
            return
        self.durable_pos = pos
        for listener in self.durable_listeners:
            listener()
        if not self.pending:
            self._clear_write_error()

    def _record_fsync_at(self, segment: str, offset: int) -> None:
        """aof-record-fsync (crash testing): note that ``segment`` is durable up to ``offset``.

        The note is a plain write (no fsync): it only has to survive SIGKILL,
        after which the crash tool simulates a power loss by cutting the
        segment back to a point after the last durable offset.
        """
        if self.fsync_log is None:
            return
        try:
            os.write(self.fsync_log, b"%s %d\n" % (segment.encode(), offset))
        except OSError:
            pass

    def close(self) -> None:
        """Shutdown: write what is left, fsync it, stop the everysec thread."""
        self.flush()
        with self._wake:
            self._stop = True
            self._wake.notify()
        if self._fsync_thread is not None:
            self._fsync_thread.join(timeout=5)
            self._fsync_thread = None
        self._cut_zeros()
        with self._sync_lock:
            if self.fd is not None:
                try:
                    os.fsync(self.fd)
                except OSError:
                    pass
                os.close(self.fd)
                self.fd = None
        self._mark_durable(self.written_pos)

    def _cut_zeros(self) -> None:
        """Shutdown: stop the preallocation and cut the current segment back to its
        logical size (the fsync after it makes that durable): a stopped server's
        segments hold no zeros, only a crashed one's may."""
        pa, self.prealloc = self.prealloc, None
        if pa is not None and not pa.close():
            return          # its thread is stuck in the disk: leave the zeros (a valid tail)
        if self.fd is None:
            return
        try:
            if os.fstat(self.fd).st_size > self.size:
                os.ftruncate(self.fd, self.size)
        except OSError:
            pass

    # -- snapshots ------------------------------------------------------------------
