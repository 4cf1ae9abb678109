"""Online backup (STREAMDB.BACKUP) and the offline check of a backup (streamdb-admin verify-backup).

A backup directory holds what a data directory holds, so a server started on a
copy of it recovers the data the backup was taken at::

    <backup>/snapshot.lmdb/data.mdb      a compacted copy of the snapshot's LMDB environment
    <backup>/appendonlydir/...           the AOF segments after that snapshot, the last one
                                         cut at the backup's position, and their manifest
    <backup>/backup.manifest             what was copied (size, sha256 of every file), where the
                                         backup is consistent, and its own checksum

How, without stopping service (the loop only forks and opens files):

1. An incremental snapshot (the BGSAVE path: the AOF rotates, a forked child
   writes the keys changed since the last snapshot).  Waits first for a snapshot or
   an AOF rewrite already under way: one such child at a time.
2. When it succeeded, in the same cron tick: the AOF's current frames are
   written, the segments after the snapshot are opened (an fd stays readable
   even if a later snapshot or rewrite retires the file) and a second child is
   forked.  The backup's position is the end of the last whole frame written
   then: the current segment's size.
3. The child copies the LMDB environment from a read transaction of its own
   (LMDB's copy: later snapshots may commit meanwhile without changing what it
   reads; the parent never opens the environment, so no LMDB handle crosses a
   fork), fdatasyncs the source segments (the position is durable on the
   server too), copies them up to the position, writes the AOF manifest, then
   ``backup.manifest`` last: a directory without it is not a backup.

Without an AOF the backup is the snapshot alone, at the time of step 1.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time

import lmdb

from .. import __version__, log
from .aof import Aof, AofError, Manifest, copy_segment, read_segment, segment_seq
from ..files import fsync_dir, replace_file
from .child import describe_exit, fork_reporting_child, read_failure_reason, reap
from .snapshot import MAP_SIZE, SnapshotError, load_snapshot, snapshot_info

__all__ = ["Backup", "BackupError", "BACKUP_MANIFEST", "restore_backup", "verify_backup"]

BACKUP_MANIFEST = "backup.manifest"
FORMAT = 1
_CHUNK = 1 << 20


class BackupError(Exception):
    """A backup that cannot be taken or does not check out; the message says what and where."""


def _sha256_copy(src_fd: int, length: int, dest: str) -> str:
    """Copy the first ``length`` bytes of ``src_fd`` to ``dest`` (fsynced); their sha256."""
    h = hashlib.sha256()
    with open(dest, "wb") as out:
        pos = 0
        while pos < length:
            chunk = os.pread(src_fd, min(_CHUNK, length - pos), pos)
            if not chunk:
                raise BackupError(f"{dest}: the source ended at {pos} of {length} bytes")
            out.write(chunk)
            h.update(chunk)
            pos += len(chunk)
        out.flush()
        os.fsync(out.fileno())
    return h.hexdigest()


def _sha256_file(path: str, length: int | None = None) -> str:
    """sha256 of the file at ``path``, or of its first ``length`` bytes."""
    h = hashlib.sha256()
    left = os.path.getsize(path) if length is None else length
    with open(path, "rb") as f:
        while left > 0:
            chunk = f.read(min(_CHUNK, left))
            if not chunk:
                break
            h.update(chunk)
            left -= len(chunk)
    return h.hexdigest()


def _manifest_checksum(doc: dict) -> str:
    body = {k: v for k, v in doc.items() if k != "checksum"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


# ---------------------------------------------------------------------------
# The backup of a running server
# ---------------------------------------------------------------------------


class Backup:
    """One STREAMDB.BACKUP at a time: start(), then the cron's poll() drives it to the end."""

    def __init__(self, core) -> None:
        self.core = core
        self.phase = "idle"              # idle -> snapshot -> copying -> idle
        self.dir = ""
        self.started = 0.0
        self.snapshot_pid: int | None = None
        self.copy_pid: int | None = None
        self._copy_reason_fd: int | None = None     # where the copy child says why it failed
        self.repl_at_snapshot: tuple[str, int] | None = None
        self.last_status = "none"        # none | ok | err
        self.last_dir = ""
        self.last_error = ""
        self.last_bytes = 0
        self.last_seconds = 0.0
        self.last_position: dict = {}
        self._created: list[str] = []    # what a failed backup removes again

    @property
    def in_progress(self) -> bool:
        return self.phase != "idle"

    def start(self, directory: str) -> str:
        """Begin a backup into ``directory`` (absent or empty); returns its absolute path.
        A relative path is taken from the server's ``dir``, as Redis takes every
        relative path (it works in ``dir``), never from wherever it was started.

        Raises BackupError with the reply's text when it cannot begin."""
        if self.in_progress:
            raise BackupError(f"Backup already in progress (into {self.dir})")
        path = os.path.abspath(os.path.join(self.core.config["dir"], directory))
        if os.path.exists(path) and not os.path.isdir(path):
            raise BackupError(f"Backup directory {path} exists and is not a directory")
        if os.path.isdir(path) and os.listdir(path):
            raise BackupError(f"Backup directory {path} is not empty")
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as e:
            raise BackupError(f"Can't create the backup directory {path}: {e.strerror or e}") from None
        self.dir, self.phase, self.started = path, "snapshot", time.monotonic()
        self.snapshot_pid = self.copy_pid = None
        log.log(log.NOTICE, f"Backup started into {path}")
        self.poll()
        return path

    def poll(self) -> None:
        """Cron (after the snapshotter's poll, which reaps its child): move the backup on."""
        if self.phase == "snapshot":
            self._snapshot_step()
        elif self.phase == "copying":
            code = reap(self.copy_pid)
            if code is not None:
                self.copy_pid = None
                self._copy_finished(code)

    def _snapshot_step(self) -> None:
        snap, aof = self.core.snapshotter, self.core.aof
        if self.snapshot_pid is None:
            if snap.child_pid is not None or (aof is not None and aof.rewrite_pid is not None):
                return          # one child at a time: ours starts when that one is done
            try:
                snap.bgsave()
            except Exception as e:  # noqa: BLE001 - the reason goes to the status
                self._fail(f"the snapshot could not start: {e}")
                return
            self.snapshot_pid = snap.child_pid
            self.repl_at_snapshot = self._replication_position()
            return
        if snap.child_pid == self.snapshot_pid:
            return              # still writing
        if not snap.last_ok:
            self._fail(f"the snapshot failed: {snap.last_error}")
            return
        self._start_copy()

    def _replication_position(self) -> tuple[str, int] | None:
        repl = self.core.replication
        return (repl.replid, repl.offset) if repl is not None else None

    def _start_copy(self) -> None:
        core, aof = self.core, self.core.aof
        cfg = core.config
        position: dict = {"time_ms": core.now_ms()}
        segments: list[tuple[str, bool, int, int]] = []     # (name, is base, fd, length)
        try:
            if aof is not None:
                aof.flush()         # this turn's effects so far are in the file: a frame boundary
                exact = not aof.pending and not aof.buf
                current = aof.manifest.incrs[-1] if aof.manifest.incrs else None
                for name in aof.manifest.segments():
                    fd = os.open(os.path.join(aof.dir, name), os.O_RDONLY)
                    # Logical sizes: the current segment (and one sealed a moment ago)
                    # has preallocated zeros after its frames, which no backup holds.
                    length = aof.segment_size(name)
                    segments.append((name, name == aof.manifest.base, fd, length))
                position.update(aof_segment=current, aof_offset=aof.size)
                repl = self._replication_position() if exact else None
            else:
                repl = self.repl_at_snapshot
            if repl is not None:
                position.update(master_replid=repl[0], master_repl_offset=repl[1])
            job = _CopyJob(snapshot=core.snapshotter.path, dest=self.dir,
                           dbfilename=cfg["dbfilename"],
                           appenddirname=cfg["appenddirname"] if aof is not None else None,
                           appendfilename=cfg["appendfilename"],
                           aof_seq=aof.manifest.seq if aof is not None else None,
                           segments=[(n, b, fd, ln) for n, b, fd, ln in segments],
                           position=position)
            self.copy_pid, self._copy_reason_fd = fork_reporting_child(job.run, "backup")
        except OSError as e:
            self._fail(f"could not start copying: {e.strerror or e}")
            return
        finally:
            for _name, _base, fd, _len in segments:
                os.close(fd)
        self.phase = "copying"
        self.last_position = position

    def _copy_finished(self, code: int) -> None:
        reason = read_failure_reason(self._copy_reason_fd)
        self._copy_reason_fd = None
        if code != 0:
            # The child's own words (ENOSPC, EIO, a source that ended early), which
            # it could not have written into the backup directory when that is full.
            self._fail(f"copying failed: {reason}" if reason else f"the copy child {describe_exit(code)}")
            return
        try:
            with open(os.path.join(self.dir, BACKUP_MANIFEST), encoding="utf-8") as f:
                manifest = json.load(f)
        except (OSError, ValueError) as e:
            self._fail(f"the backup manifest is unreadable: {e}")
            return
        self.last_bytes = sum(f["size"] for f in manifest["files"])
        self.last_position = manifest["position"]
        self._finish("ok", "")
        pos = self.last_position
        where = (f"AOF {pos['aof_segment']} offset {pos['aof_offset']}" if pos.get("aof_segment")
                 else "the snapshot (no AOF)")
        log.log(log.NOTICE, f"Backup finished into {self.last_dir}: {len(manifest['files'])} files, "
                            f"{self.last_bytes} bytes, {self.last_seconds:.3f} seconds, "
                            f"consistent at {where}")

    def _fail(self, reason: str) -> None:
        directory = self.dir
        # What a failed backup wrote is no backup: remove it, so that the same
        # directory can be used again (it was absent or empty when we began).
        clear_directory(directory)
        self._finish("err", reason)
        log.log(log.WARNING, f"Backup into {directory} failed: {reason}")

    def _finish(self, status: str, error: str) -> None:
        self.last_status, self.last_error, self.last_dir = status, error, self.dir
        self.last_seconds = time.monotonic() - self.started
        self.phase = "idle"
        self.snapshot_pid = None

    def copy_in_foreground(self, directory: str) -> None:
        """Copy the snapshot as it is now (and the AOF up to its end) into ``directory``
        (empty), waiting for the copy child: BACKUP SEAL without an AOF, right after a
        SAVE.  ``last_status`` / ``last_error`` say how it went."""
        self.dir, self.started = directory, time.monotonic()
        self.repl_at_snapshot = self._replication_position()
        self._start_copy()
        if self.copy_pid is None:
            return          # (failed: _start_copy said why)
        _pid, status = os.waitpid(self.copy_pid, 0)
        self.copy_pid = None
        self._copy_finished(os.waitstatus_to_exitcode(status))

    def abort(self, reason: str = "the server shut down") -> None:
        """Shutdown (or BACKUP ABORT): a copy child still running is stopped; its
        directory is no backup."""
        if self.copy_pid is not None:
            try:
                os.kill(self.copy_pid, 15)
                os.waitpid(self.copy_pid, 0)
            except OSError:
                pass
            self.copy_pid = None
        if self._copy_reason_fd is not None:
            os.close(self._copy_reason_fd)
            self._copy_reason_fd = None
        if self.in_progress:
            self._fail(reason)

    def status_fields(self) -> list[tuple[str, object]]:
        """STREAMDB.BACKUP STATUS and INFO persistence (as backup_<name>)."""
        return [("in_progress", int(self.in_progress)), ("phase", self.phase),
                ("dir", self.dir if self.in_progress else ""),
                ("last_status", self.last_status), ("last_dir", self.last_dir),
                ("last_error", self.last_error), ("last_bytes", self.last_bytes),
                ("last_seconds", f"{self.last_seconds:.3f}"),
                ("last_aof_segment", self.last_position.get("aof_segment") or ""),
                ("last_aof_offset", self.last_position.get("aof_offset", -1))]


class _CopyJob:
    """What the copy child does (runs after the fork; the fds were opened before it)."""

    def __init__(self, **kw) -> None:
        self.__dict__.update(kw)

    def run(self) -> None:
        files: list[dict] = []
        snap_dest = os.path.join(self.dest, self.dbfilename)
        os.mkdir(snap_dest)
        # Its own read transaction (lock=True registers the reader, so a snapshot
        # committing meanwhile leaves the pages it reads alone).
        env = lmdb.open(self.snapshot, map_size=MAP_SIZE, max_dbs=4, subdir=True, readonly=True,
                        lock=True, create=False)
        try:
            env.copy(snap_dest, compact=True)
        finally:
            env.close()
        data = os.path.join(snap_dest, "data.mdb")
        fd = os.open(data, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        info = snapshot_info(snap_dest) or {}
        files.append({"path": f"{self.dbfilename}/data.mdb", "size": os.path.getsize(data),
                      "sha256": _sha256_file(data)})
        covered = info.get("aof_seq")
        self.position["snapshot_aof_seq"] = covered
        if self.appenddirname is not None:
            aof_dest = os.path.join(self.dest, self.appenddirname)
            os.mkdir(aof_dest)
            kept = [s for s in self.segments if covered is None or segment_seq(s[0]) > covered]
            manifest = Manifest(seq=self.aof_seq)
            for name, is_base, fd, length in kept:
                os.fdatasync(fd)        # the position is durable on the server too
                digest = _sha256_copy(fd, length, os.path.join(aof_dest, name))
                files.append({"path": f"{self.appenddirname}/{name}", "size": length, "sha256": digest})
                if is_base:
                    manifest.base = name
                else:
                    manifest.incrs.append(name)
            name = self.appendfilename + ".manifest"
            manifest.save(aof_dest, name)
            p = os.path.join(aof_dest, name)
            files.append({"path": f"{self.appenddirname}/{name}", "size": os.path.getsize(p),
                          "sha256": _sha256_file(p)})
        write_backup_manifest(self.dest, {
            "format": FORMAT, "server_version": __version__, "created_ms": self.position["time_ms"],
            "names": {"dbfilename": self.dbfilename, "appenddirname": self.appenddirname,
                      "appendfilename": self.appendfilename},
            "position": self.position, "files": files})


def write_backup_manifest(directory: str, doc: dict) -> None:
    """Make ``doc`` (with its checksum added) the backup manifest of ``directory``:
    written aside, fsynced, renamed, the directory fsynced.  Written last: a
    directory without it is no backup."""
    doc = dict(doc)
    doc.pop("checksum", None)
    doc["checksum"] = _manifest_checksum(doc)
    replace_file(os.path.join(directory, BACKUP_MANIFEST),
                 json.dumps(doc, indent=1, sort_keys=True).encode("utf-8"))
    fsync_dir(directory)


def _file_entry(directory: str, relpath: str) -> dict:
    """A backup manifest's line for the file ``relpath`` of ``directory``."""
    p = os.path.join(directory, relpath)
    return {"path": relpath, "size": os.path.getsize(p), "sha256": _sha256_file(p)}


def clear_directory(directory: str) -> None:
    """Remove everything in ``directory`` (the directory stays): what a backup wrote
    into a directory that was absent or empty when it began."""
    if os.path.isdir(directory):
        for name in os.listdir(directory):
            p = os.path.join(directory, name)
            shutil.rmtree(p, ignore_errors=True) if os.path.isdir(p) else os.unlink(p)


# ---------------------------------------------------------------------------
# Checking a backup (no server)
# ---------------------------------------------------------------------------


def read_manifest(directory: str) -> dict:
    path = os.path.join(directory, BACKUP_MANIFEST)
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise BackupError(f"{path} is missing: {directory} is not a complete backup") from None
    except (OSError, ValueError) as e:
        raise BackupError(f"{path} is unreadable: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise BackupError(f"{path}: unsupported backup format {doc.get('format')!r}"
                          if isinstance(doc, dict) else f"{path}: not a backup manifest")
    if doc.get("checksum") != _manifest_checksum(doc):
        raise BackupError(f"{path}: checksum mismatch (the manifest was changed or damaged)")
    return doc


def check_files(directory: str, doc: dict) -> None:
    """Every file the manifest lists is there with its size and sha256."""
    for entry in doc["files"]:
        p = os.path.join(directory, entry["path"])
        if not os.path.isfile(p):
            raise BackupError(f"{entry['path']} is missing")
        size = os.path.getsize(p)
        if size != entry["size"]:
            raise BackupError(f"{entry['path']}: {size} bytes, the manifest says {entry['size']} "
                              f"(truncated or torn)")
        if _sha256_file(p) != entry["sha256"]:
            raise BackupError(f"{entry['path']}: sha256 mismatch (the file is damaged)")


def verify_backup(directory: str, core) -> dict:
    """Check ``directory`` and load it into ``core`` (a fresh Core: its keyspace is empty)
    through the server's recovery code.

    Returns the backup's manifest.  Raises BackupError naming the problem."""
    doc = read_manifest(directory)
    check_files(directory, doc)
    names = doc["names"]
    try:
        info = load_snapshot(os.path.join(directory, names["dbfilename"]), core.keyspace)
    except SnapshotError as e:
        raise BackupError(f"the snapshot does not load: {e}") from None
    if info is None:
        raise BackupError(f"{names['dbfilename']}/data.mdb holds no snapshot")
    if names["appenddirname"] is not None:
        aof_dir = os.path.join(directory, names["appenddirname"])
        for entry in doc["files"]:
            if entry["path"].endswith(".aof"):
                p = os.path.join(directory, entry["path"])
                with open(p, "rb") as f:
                    scan = read_segment(f.read(), p)
                if scan.torn_at is not None:
                    raise BackupError(f"{entry['path']}: {scan.torn_reason} at offset {scan.torn_at}")
        # load_truncated=False: a torn tail is an error here, and nothing is cut.
        aof = Aof(core, aof_dir, names["appendfilename"], "no", load_truncated=False)
        try:
            aof.load(covered_seq=info.get("aof_seq"))
        except AofError as e:
            raise BackupError(f"the AOF does not load: {e}") from None
    return doc


# ---------------------------------------------------------------------------
# Restoring (no server)
# ---------------------------------------------------------------------------


def restore_backup(directory: str, datadir: str, aof_from: str | None = None) -> dict:
    """Copy the backup ``directory`` into ``datadir`` (absent or empty), checked on the way.

    With ``aof_from`` (the old server's AOF directory), the segments the old server
    wrote after the backup's position are added, so that a server started on
    ``datadir`` replays them too (the point of restore goes past the backup).  They
    must continue the backup's history: the old copy of the backup's last segment
    starts with exactly the bytes the backup holds.  Returns what was done."""
    doc = read_manifest(directory)
    check_files(directory, doc)
    if os.path.exists(datadir) and (not os.path.isdir(datadir) or os.listdir(datadir)):
        raise BackupError(f"{datadir} is not an empty directory")
    names, position = doc["names"], doc["position"]
    later: list[str] = []
    if aof_from is not None:
        later = _later_segments(doc, directory, aof_from)
    os.makedirs(datadir, exist_ok=True)
    for entry in doc["files"]:
        dest = os.path.join(datadir, entry["path"])
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(os.path.join(directory, entry["path"]), dest)
    added = 0
    if later:
        aof_dir = os.path.join(datadir, names["appenddirname"])
        manifest_name = names["appendfilename"] + ".manifest"
        manifest = Manifest.read(os.path.join(aof_dir, manifest_name))
        for name in later:
            # (Without the zeros a running or crashed server's last segment ends with.)
            added += copy_segment(os.path.join(aof_from, name), os.path.join(aof_dir, name))
            if name not in manifest.incrs:
                manifest.incrs.append(name)
        manifest.seq = max(manifest.seq, max(segment_seq(n) for n in later))
        manifest.save(aof_dir, manifest_name)
    return {"position": position, "segments_added": later, "bytes_added": added}


def _later_segments(doc: dict, directory: str, aof_from: str) -> list[str]:
    """The old server's segments from the backup's last one on (that one whole)."""
    names, position = doc["names"], doc["position"]
    last = position.get("aof_segment")
    if names["appenddirname"] is None or not last:
        raise BackupError("the backup was taken without an AOF: there is no position to continue from")
    manifest_path = os.path.join(aof_from, names["appendfilename"] + ".manifest")
    try:
        old = Manifest.read(manifest_path)
    except AofError as e:
        raise BackupError(str(e)) from None
    if last not in old.incrs:
        raise BackupError(f"{aof_from} no longer holds {last} (a snapshot or AOF rewrite after the "
                          f"backup retired it): the writes after the backup cannot be replayed from it")
    old_copy = os.path.join(aof_from, last)
    ours = next(e for e in doc["files"] if e["path"] == f"{names['appenddirname']}/{last}")
    if os.path.getsize(old_copy) < ours["size"] or _sha256_file(old_copy, ours["size"]) != ours["sha256"]:
        raise BackupError(f"{old_copy} does not begin with the backup's copy of it: another "
                          f"server's (or a damaged) AOF")
    return [s for s in old.incrs if segment_seq(s) >= segment_seq(last)]
