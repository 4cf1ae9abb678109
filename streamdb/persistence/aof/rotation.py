"""The AOF's rotation: the log moves on to a new incr segment, which the manifest
on disk names before any frame goes to it.

A snapshot, a rewrite or a backup rotates: a snapshot taken right after covers
every segment before the new one, and ``retire_through`` then drops those from
the manifest, and their files.
"""

from __future__ import annotations

import os
import time

from ... import log
from .format import SEGMENT_MAGIC, pwrite_all, segment_seq
from .manifest import AofDirectory, Manifest, ManifestNotDurable
from .writer import AofWriter

__all__ = ["AofRotationError", "AofUnwritten", "Rotation"]

class AofUnwritten(RuntimeError):
    """A rotation refused: frames that failed to write are still waiting for the disk."""


class AofRotationError(RuntimeError):
    """A new segment could not be started (the disk is full, ...): nothing changed,
    the AOF goes on in its current segment, and the caller (BGSAVE, BGREWRITEAOF, a
    backup) fails with this message."""


# Seconds an automatic rotation (auto-aof-rewrite) waits after a failed one, as Redis
# waits before retrying a failed background save.
_ROTATION_RETRY_DELAY = 5


class Rotation:
    """Starts the new segments of ``directory`` that ``writer`` goes on in, and
    retires the ones a snapshot covers.  ``error``: why the last rotation failed
    ("" once one succeeds), at ``failed_at`` (monotonic)."""

    def __init__(self, directory: AofDirectory, writer: AofWriter) -> None:
        self.directory = directory
        self.writer = writer
        self.error = ""
        self.failed_at = 0.0      # automatic work that rotates waits a while after it

    def rotate(self) -> int:
        """Start a new incr segment; returns the seq of the last segment before it.

        A snapshot taken right after covers every segment up to that seq.
        AofRotationError when the new segment could not be started (see
        ``new_incr_segment``): nothing changed.

        Refused (``AofUnwritten``) while a frame that failed to write waits for the
        disk: the snapshot would hold its effects and the retry would write them into
        the new segment too, which a restart would then apply a second time.
        """
        self.writer.flush()
        if self.writer.pending:
            raise AofUnwritten("the AOF's last writes are not on disk yet "
                               f"({self.writer.last_error}); try again once they are")
        covered = self.directory.manifest.seq
        self.new_incr_segment()
        return covered

    def snapshot_point(self) -> int:
        """``rotate()`` for a snapshot: the seq through which a snapshot taken now
        covers the log.  When the current segment holds no frame yet (nothing was
        written since the last rotation, e.g. by a save that failed and is tried
        again while writes get MISCONF), the segments before it already hold every
        change: no new segment is started for each try."""
        self.writer.flush()
        incrs = self.directory.manifest.incrs
        if not self.writer.pending and incrs and self.writer.size == len(SEGMENT_MAGIC):
            return segment_seq(incrs[-1]) - 1
        return self.rotate()

    def retire_through(self, seq: int) -> None:
        """Drop segments a snapshot now covers (seq <= ``seq``) from the manifest, then the files."""
        d = self.directory
        old = [s for s in d.manifest.segments() if segment_seq(s) <= seq]
        if not old:
            return
        base = d.manifest.base if d.manifest.base and segment_seq(d.manifest.base) > seq else None
        try:
            d.replace_manifest(Manifest(base, [s for s in d.manifest.incrs if segment_seq(s) > seq],
                                        d.manifest.seq), "retiring the segments a snapshot covers")
        except OSError:
            return          # (they are retired after the next snapshot)
        for name in old:
            d.drop_segment_file(name)
        self.writer.recount_sizes()
        log.log(log.VERBOSE, f"Retired {len(old)} AOF segment(s) covered by the snapshot")

    def backing_off(self) -> bool:
        """Whether automatic work that rotates (auto-aof-rewrite, a save rule's or the
        node cache's snapshot) waits: the last rotation failed a moment ago."""
        return bool(self.error) and \
            time.monotonic() - self.failed_at < _ROTATION_RETRY_DELAY

    def new_incr_segment(self) -> None:
        """Move the log on to a new incr segment, in the order that leaves the
        directory loadable whichever step a crash or a full disk stops:

        1. the segment is created under a name no file has, with its header, fsynced;
        2. the old segment's frames are fsynced (they must be durable before its fd goes);
        3. the manifest naming the new segment is saved (aside, fsync, rename, fsync dir);
        4. only then does memory switch: frames go to the new segment.

        When a step fails, what the rotation created is removed, frames keep going to
        the old segment, ``manifest`` is unchanged, and AofRotationError (logged once
        while failures last) tells the caller why.
        """
        d = self.directory
        seq, name, fd = self._create_segment()
        manifest = Manifest(d.manifest.base, d.manifest.incrs + [name], seq)
        step = f"fsyncing {d.current_segment()}"
        try:
            self.writer.sync_written()
            step = f"saving the manifest {d.manifest_name}"
            manifest.save(d.dir, d.manifest_name)
        except OSError as e:
            os.close(fd)
            self._remove_created_segment(name, isinstance(e, ManifestNotDurable))
            raise self._failed(step, e) from None
        self.writer.switch_to(fd, name)     # (seals the segment the manifest in memory names last)
        d.manifest = manifest
        if self.error:
            log.log(log.WARNING, "AOF segment rotation works again")
            self.error = ""

    def _create_segment(self) -> tuple[int, str, int]:
        """A new incr segment holding its header, fsynced: (seq, name, fd).

        It gets the first seq after the manifest's that no file holds (O_EXCL): a
        file left in the way (a crash or a failed rotation left it before a manifest
        named it) is not ours to overwrite."""
        seq = self.directory.manifest.seq
        while True:
            seq += 1
            name = f"{self.directory.basename}.{seq}.incr.aof"
            path = os.path.join(self.directory.dir, name)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                log.log(log.WARNING, f"AOF: {name} exists but the manifest does not name it; "
                                     f"leaving it as it is and skipping its sequence number")
                continue
            except OSError as e:
                raise self._failed(f"creating {name}", e) from None
            try:
                pwrite_all(fd, SEGMENT_MAGIC, 0)
                os.fsync(fd)
            except OSError as e:
                os.close(fd)
                self._remove_created_segment(name)
                raise self._failed(f"writing the header of {name}", e) from None
            return seq, name, fd

    def _remove_created_segment(self, name: str, manifest_renamed: bool = False) -> None:
        """Undo a failed rotation: remove the segment ``name`` it created.

        ``manifest_renamed``: the manifest naming it was renamed into place but not
        made durable.  The one memory believes is put back first; if that fails too,
        the file stays, since a manifest naming a missing segment stops the next start
        while a segment holding only its header is harmless."""
        d = self.directory
        if manifest_renamed:
            try:
                d.manifest.save(d.dir, d.manifest_name)
            except OSError:
                return
        try:
            os.unlink(os.path.join(d.dir, name))
        except OSError:
            pass

    def _failed(self, step: str, e: OSError) -> "AofRotationError":
        """The error for a rotation that failed at ``step``; logged at the first failure."""
        current = self.directory.current_segment()
        message = (f"could not start a new AOF segment ({step}: {e.strerror or e}); "
                   + (f"the AOF goes on in {current}" if current else "the AOF has no segment yet"))
        if not self.error:
            log.log(log.WARNING, message)
        self.error = message
        self.failed_at = time.monotonic()
        return AofRotationError(message)
