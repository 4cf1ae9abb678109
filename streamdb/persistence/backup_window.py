"""Redis 8.10's BACKUP command family (START, SEAL, LIST, STATUS, ABORT, CLEANUP) on
StreamDB's online backup (persistence/backup.py, which STREAMDB.BACKUP uses too).

Redis's state machine, and what each step is here::

    idle --START--> pending / snapshotting --> incrementing --SEAL--> sealed --CLEANUP--> idle
                         \\______________ABORT______________/               (or backup-sealed-ttl)
                                         v
                                       failed --CLEANUP (or START)--> ...

* START (``pending`` while another child runs, then ``snapshotting``): the online
  backup into ``<dir>/<backupdirname>`` (absent or empty): an incremental snapshot, then
  a forked copy of it and of the AOF up to a frame boundary.  When the copy is done:
  ``incrementing``; writes go on into the live AOF, which the backup will take.
* While ``incrementing``, a segment a snapshot or rewrite retires (deletes) after the
  backup's position is pinned into the backup first (Aof.keep_retired).
* SEAL: the AOF is flushed, fsynced and rotated, so every segment from the backup's
  position to the seal is sealed (never written again); those segments are pinned
  into the backup (a hard link, or a copy of their logical bytes when preallocation
  may leave zeros at a segment's end), then the backup's AOF manifest and its
  ``backup.manifest`` (written last) name exactly this backup's files.  The result is
  what STREAMDB.BACKUP writes: ``streamdb-admin verify-backup`` and ``restore`` take
  it, and it holds the data as of the seal.  Without an AOF the seal writes a
  snapshot in the foreground (as SAVE) and copies it, replacing the START copy.
* A step that fails leaves ``failed`` with the reason, and the directory emptied:
  nothing half-written stays that verify-backup could take for a backup.
"""

from __future__ import annotations

import errno
import os
import time

from .. import log
from .aof import Manifest, copy_segment, segment_logical_size, segment_seq
from .backup import (BACKUP_MANIFEST, Backup, BackupError, _file_entry, clear_directory, read_manifest,
                     write_backup_manifest)

__all__ = ["BackupWindow", "WindowError"]

# Redis's reply texts (src/server.c backupCommand, tests/unit/backup.tcl).
IN_PROGRESS = "A backup is already in progress, ABORT it first"
SEALED_EXISTS = "A sealed backup exists, CLEANUP it first"
NOT_READY = "No backup ready to seal (must be in the incrementing state)"
NO_BACKUP = "No backup in progress"
RUNNING = "Backup is in progress"
ABORTED = "aborted by user"


class WindowError(Exception):
    """A BACKUP subcommand refused in this state; the message is the reply (without ERR)."""


class BackupWindow:
    """The one BACKUP window of a server: commands call start/seal/abort/cleanup,
    the cron calls poll()."""

    def __init__(self, core) -> None:
        self.core = core
        self.engine = Backup(core)          # START's snapshot and copy
        self._state = "idle"                # idle | running (engine) | incrementing | sealed | failed
        self.error = ""
        self.start_time = 0                 # unix seconds
        self.end_time = 0
        self.path = ""                      # the backup directory (absolute)
        self.with_aof = False               # decided at START: SEAL continues from the AOF
        self.pinned: list[str] = []         # segments pinned while incrementing
        self._sealed_at = 0.0               # (monotonic) for backup-sealed-ttl

    # -- what STATUS and LIST say --------------------------------------------------

    @property
    def state(self) -> str:
        if self._state == "running":
            # The engine waits for another child (a snapshot, a rewrite) before its own.
            waiting = self.engine.phase == "snapshot" and self.engine.snapshot_pid is None
            return "pending" if waiting else "snapshotting"
        return self._state

    @property
    def active(self) -> bool:
        """INFO's backup_in_progress: a window between START and SEAL."""
        return self._state in ("running", "incrementing")

    def status(self) -> list[tuple[str, object]]:
        return [("state", self.state), ("error", self.error),
                ("start_time", self.start_time), ("end_time", self.end_time)]

    def files(self) -> list[str]:
        """Absolute paths of the backup's immutable files so far: once incrementing,
        the snapshot copy and the AOF segments before the backup's position (the
        position's own segment grows until the seal); once sealed, every file."""
        if self._state not in ("incrementing", "sealed"):
            return []
        try:
            doc = read_manifest(self.path)
        except BackupError:
            return []
        paths = [e["path"] for e in doc["files"]]
        if self._state == "incrementing":
            last = doc["position"].get("aof_segment")
            paths = [p for p in paths if not p.endswith(".manifest") and os.path.basename(p) != last]
        else:
            paths.append(BACKUP_MANIFEST)
        return [os.path.join(self.path, p) for p in paths]

    # -- the commands ----------------------------------------------------------------

    def start(self) -> None:
        state = self.state
        if state in ("pending", "snapshotting", "incrementing"):
            raise WindowError(IN_PROGRESS)
        if state == "sealed":
            raise WindowError(SEALED_EXISTS)
        try:
            self.path = self.engine.start(self.core.config["backupdirname"])
        except BackupError as e:
            raise WindowError(str(e)) from None
        self._state, self.error = "running", ""
        self.start_time, self.end_time = int(time.time()), 0
        self.with_aof = self.core.aof is not None
        self.pinned = []
        self.poll()

    def seal(self) -> None:
        if self.state != "incrementing":
            raise WindowError(NOT_READY)
        try:
            if self.with_aof:
                self._seal_aof()
            else:
                self._seal_snapshot()
        except Exception as e:  # noqa: BLE001 - a disk, the snapshot, the AOF: the reason is the reply
            reason = f"{e.filename}: {e.strerror or e}" if isinstance(e, OSError) and e.filename else str(e)
            self._fail(f"the seal failed: {reason}")
            raise WindowError(f"Backup seal failed: {reason}") from None
        self._state, self.end_time, self._sealed_at = "sealed", int(time.time()), time.monotonic()
        self._unhook()
        log.log(log.NOTICE, f"Backup sealed in {self.path}")

    def abort(self) -> None:
        if self.state not in ("pending", "snapshotting", "incrementing"):
            raise WindowError(NO_BACKUP)
        self._fail(ABORTED)

    def cleanup(self) -> None:
        """Sealed or failed: remove the backup's files (the directory stays), back to idle.
        Idle: nothing to do."""
        state = self.state
        if state in ("pending", "snapshotting", "incrementing"):
            raise WindowError(RUNNING)
        if state in ("sealed", "failed"):
            clear_directory(self.path)
            log.log(log.NOTICE, f"Backup in {self.path} cleaned up")
        self._state, self.error, self.start_time, self.end_time = "idle", "", 0, 0

    # -- driven by the cron ------------------------------------------------------------

    def poll(self) -> None:
        if self._state == "running":
            self.engine.poll()
            if self.engine.in_progress:
                return
            if self.engine.last_status != "ok":
                self._fail(self.engine.last_error)
                return
            self._state = "incrementing"
            if self.with_aof:
                self.core.aof.keep_retired = self._pin_retired
        elif self._state == "sealed":
            ttl = self.core.config["backup-sealed-ttl"]
            if ttl and time.monotonic() - self._sealed_at >= ttl:
                log.log(log.NOTICE, f"Sealed backup in {self.path} is {ttl} seconds old "
                                    f"(backup-sealed-ttl): cleaning it up")
                self.cleanup()

    def shutdown(self) -> None:
        """A backup not sealed is no backup: its files go (a sealed one stays)."""
        if self.active:
            self._fail("the server shut down")

    # -- the work ----------------------------------------------------------------------

    def _fail(self, reason: str) -> None:
        self.engine.abort(reason)           # a copy child still running is stopped
        self._unhook()
        clear_directory(self.path)
        self._state, self.error = "failed", reason
        log.log(log.WARNING, f"Backup into {self.path} failed: {reason}")

    def _unhook(self) -> None:
        aof = self.core.aof
        if aof is not None and aof.keep_retired == self._pin_retired:
            aof.keep_retired = None

    def _aof_dest(self) -> str:
        return os.path.join(self.path, self.core.config["appenddirname"])

    def _needed(self, name: str) -> bool:
        """Whether the segment ``name`` holds writes after the backup's position."""
        first = self.engine.last_position.get("aof_segment")
        return ".incr." in name and first is not None and segment_seq(name) >= segment_seq(first)

    def _pin_retired(self, name: str, path: str) -> None:
        """Aof.keep_retired while incrementing: a retired segment the seal will need is
        pinned into the backup before its file is deleted.  A failure fails the backup
        (the seal could not hold those writes); the retirement goes on."""
        if not self._needed(name):
            return
        try:
            self._pin(path, os.path.join(self._aof_dest(), name))
        except OSError as e:
            self._fail(f"could not keep {name} for the backup: {e.strerror or e}")
            return
        self.pinned.append(name)

    def _pin(self, src: str, dest: str) -> None:
        """Put the sealed segment ``src`` at ``dest`` (replacing START's copy of it, if
        any): a hard link when nothing will change the file again, else a copy of its
        logical bytes.  Under appendfsync always with aof-preallocate, a sealed segment
        ends in zeros that a thread cuts off later: a link would share that change."""
        aof = self.core.aof
        tmp = dest + ".tmp"
        # (Zeros now: preallocated under a policy since changed, cut off later all the same.)
        if (aof.policy == "always" and aof.preallocate) or segment_logical_size(src) != os.path.getsize(src):
            copy_segment(src, tmp)
        else:
            try:
                os.link(src, tmp)
            except OSError as e:
                if e.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
                    raise
                copy_segment(src, tmp)      # another file system, or one without links
        os.replace(tmp, dest)

    def _seal_aof(self) -> None:
        aof = self.core.aof
        if aof is None:
            raise BackupError("appendonly is stopped")
        covered = aof.rotate()              # flushed and fsynced; every segment <= covered is sealed
        doc = read_manifest(self.path)
        # From here on START's manifest no longer describes the directory: it goes first.
        os.unlink(os.path.join(self.path, BACKUP_MANIFEST))
        dest = self._aof_dest()
        live = [s for s in aof.manifest.incrs if self._needed(s) and segment_seq(s) <= covered]
        for name in live:
            self._pin(os.path.join(aof.dir, name), os.path.join(dest, name))
        added = sorted(set(live) | set(self.pinned), key=segment_seq)
        # Its AOF manifest: START's segments before the position, then the ones pinned.
        names = doc["names"]
        manifest_name = names["appendfilename"] + ".manifest"
        manifest = Manifest.read(os.path.join(dest, manifest_name))
        manifest.incrs = [s for s in manifest.incrs if s not in added] + added
        manifest.seq = max(manifest.seq, covered)
        manifest.save(dest, manifest_name)
        files = [e for e in doc["files"] if not e["path"].startswith(names["appenddirname"] + "/")]
        files += [_file_entry(self.path, f"{names['appenddirname']}/{s}")
                  for s in ([manifest.base] if manifest.base else []) + manifest.incrs]
        files.append(_file_entry(self.path, f"{names['appenddirname']}/{manifest_name}"))
        # The seal's position: the end of the segment the rotation sealed (its logical size).
        position = dict(doc["position"], time_ms=self.core.now_ms(), aof_segment=added[-1],
                        aof_offset=os.path.getsize(os.path.join(dest, added[-1])))
        repl = self.core.replication
        if repl is not None:
            position.update(master_replid=repl.replid, master_repl_offset=repl.offset)
        write_backup_manifest(self.path, dict(doc, created_ms=position["time_ms"], position=position,
                                              files=files))

    def _seal_snapshot(self) -> None:
        """No AOF: the state at the seal is a snapshot taken now (in the foreground, as
        SAVE), copied over START's."""
        snap = self.core.snapshotter
        snap.wait()                         # one BGSAVE under way finishes first
        snap.save()
        clear_directory(self.path)
        self.engine.copy_in_foreground(self.path)
        if self.engine.last_status != "ok":
            raise BackupError(self.engine.last_error)
