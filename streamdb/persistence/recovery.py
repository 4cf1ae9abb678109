"""Start-up recovery and the wiring of persistence into a running server.

Recovery = the newest complete snapshot, then the AOF segments it does not
cover, replayed through the same effect-apply path replicas use.  Any problem
with the files is a clear start-up error (RecoveryError) and nothing on disk is
changed by the failed start (except cutting a torn AOF tail when
``aof-load-truncated yes``).
"""

from __future__ import annotations

import asyncio
import gc
import os
import time

from .. import log
from ..engine.nodecache import CACHE
from .aof import Aof, AofError, AofRotationError
from .backup import Backup
from .backup_window import BackupWindow
from .snapshot import DATA_FILE, Snapshotter, SnapshotError, load_snapshot

__all__ = ["Persistence", "RecoveryError", "open_persistence"]


class RecoveryError(Exception):
    pass


class Persistence:
    """The AOF and the snapshotter of one server, and how they hook into it."""

    def __init__(self, core, aof: Aof | None, snapshotter: Snapshotter) -> None:
        self.core = core
        self.aof = aof
        self.snapshotter = snapshotter
        self.backup = Backup(core)       # STREAMDB.BACKUP (commands/backup.py)
        self.backup_window = BackupWindow(core)     # BACKUP START | SEAL | ... (Redis 8.10)

    async def load(self, server) -> None:
        """Recover the data set while the server is already listening.

        Clients may connect: INFO and other commands flagged ``loading`` are
        served between steps; everything else gets Redis's LOADING error.
        Raises RecoveryError (nothing on disk changed) if the files are bad.
        """
        core, aof, snap = self.core, self.aof, self.snapshotter
        cfg = core.config
        core.loading = True
        # Loading allocates millions of long-lived objects: with the cyclic GC on,
        # each generation-2 pass rescans all of them (restart time grows
        # quadratically).  The caller freezes them once loading is done.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            try:
                info = self._load_snapshot()
            except SnapshotError as e:
                raise RecoveryError(f"Fatal error loading the snapshot: {e}") from None
            covered = info.get("aof_seq") if info else None
            core.add_effect_sink(snap.changes, wants_commands=False)
            if aof is not None:
                core.aof = aof
                self._check_log_continues_snapshot(info, covered)
                try:
                    last_pause = time.monotonic()
                    for _ in aof.load_steps(covered_seq=covered):
                        # Let clients in (INFO, LOADING replies) every 10 ms of loading.
                        # A real (if tiny) sleep: sleep(0) does not make uvloop poll sockets.
                        if time.monotonic() - last_pause >= 0.01:
                            await asyncio.sleep(0.0005)
                            last_pause = time.monotonic()
                    if cfg["aof-record-fsync"]:
                        aof.record_fsyncs()
                    aof.open_for_append()
                except (AofError, AofRotationError) as e:
                    raise RecoveryError(f"Fatal error loading the AOF: {e}") from None
                except OSError as e:        # (a file it cannot read or create: permissions, EIO)
                    raise RecoveryError(f"Fatal error loading the AOF: {e.filename or aof.dir}: "
                                        f"{e.strerror or e}") from None
                core.add_effect_sink(aof.append_batch)
                server.before_reply_hooks.append(aof.flush)
                server.reply_gates.append(aof.holds_replies_of)
                aof.loop = asyncio.get_running_loop()
                snap.aof = aof
        finally:
            core.loading = False
            if gc_was_enabled:
                gc.enable()

    def _check_log_continues_snapshot(self, info: dict | None, covered: int | None) -> None:
        """Refuse (RecoveryError) an AOF whose first segments were retired into a
        snapshot that is not the one loaded (missing: its writes would be gone
        without a word, and the next snapshot would make that final).  Reads only."""
        aof = self.aof
        try:
            first = aof.first_segment_after_a_gap(covered)
        except AofError as e:
            raise RecoveryError(f"Fatal error loading the AOF: {e}") from None
        if first is None:
            return
        path = self.snapshotter.path
        data_file = os.path.join(path, DATA_FILE)
        if info is None and not os.path.exists(data_file):
            have = f"there is no snapshot ({data_file} is missing)"
        elif info is None:
            have = f"{data_file} holds no snapshot"
        elif covered is None:
            have = f"the snapshot {path} covers no AOF segment (it was written with appendonly no)"
        else:
            have = f"the snapshot {path} covers the AOF segments only up to seq {covered}"
        raise RecoveryError(
            f"Fatal error: the AOF manifest {aof.manifest_path()} starts at {first}: the "
            f"segments before it were retired into a snapshot, but {have}. Starting would "
            f"lose their writes: the start is refused and nothing on disk was changed. Put "
            f"back the snapshot that covers them, or restore from a backup with the AOF after "
            f"it: streamdb-admin restore BACKUP NEW_DIR --aof-from {aof.dir} "
            f"(docs/OPERATIONS.md, \"Back up and restore\")")

    def _load_snapshot(self) -> dict | None:
        """The snapshot into the keyspace; with a bounded node cache its stream nodes
        stay on disk (start-up reads headers, not node bytes)."""
        snap = self.snapshotter
        cold = CACHE.bounded
        info = load_snapshot(snap.path, self.core.keyspace, cold)
        snap.located = snap.located or cold
        snap.pin_store()
        return info

    def config_changed(self, names: list[str]) -> None:
        if "stream-cache-size" in names:
            self.snapshotter.configure_cache()
        if "save" in names or "stop-writes-on-bgsave-error" in names:
            self.snapshotter.update_write_refusal()

    def cron(self) -> None:
        if self.core.loading:
            # (The loop ticks while the AOF replays: a snapshot now would hold half the
            # replay and cover no segment, so the next start would replay it twice.)
            return
        self.snapshotter.poll()
        self.backup.poll()          # after the snapshotter's poll: it reaps the backup's snapshot
        self.backup_window.poll()
        if self.aof is not None:
            self.aof.poll_rewrite()
            self.aof.flush_pending_retry()
            self.aof.maybe_auto_rewrite(self.core.config)

    def shutdown(self, save: bool | None = None) -> None:
        """Flush and fsync the AOF; snapshot if asked (or if save rules exist and data changed)."""
        self.backup.abort()
        self.backup_window.shutdown()
        self.snapshotter.wait()
        if self.aof is not None:
            while self.aof.rewrite_pid is not None:
                self.aof.poll_rewrite()
                time.sleep(0.01)
        if save is None:
            save = bool(self.core.config["save"].split()) and self.core.dirty > 0
        if save:
            try:
                self.snapshotter.save()
            except Exception as e:  # noqa: BLE001 - the AOF still has everything
                log.log(log.WARNING, f"Error trying to save the DB on shutdown: {e}")
        if self.aof is not None:
            self.aof.close()
            log.log(log.NOTICE, "AOF flushed and fsynced on shutdown")

    def reload(self) -> None:
        """DEBUG RELOAD: snapshot, empty the dataset, load it back."""
        self.snapshotter.wait()
        self.snapshotter.save()
        for db in self.core.keyspace.dbs:
            db.clear()
        CACHE.forget_nodes()
        self.snapshotter.store.close()
        self._load_snapshot()
        # Segments written since the save (none: save rotated the AOF) need no replay.


def open_persistence(core, server, cfg) -> Persistence:
    """Build the persistence objects; ``await Persistence.load(server)`` then recovers."""
    os.makedirs(cfg["dir"], exist_ok=True)
    snap_path = os.path.join(cfg["dir"], cfg["dbfilename"])
    # The snapshotter listens before the AOF is replayed: keys the replay
    # changes are not in the snapshot yet, and the next snapshot (which
    # retires the replayed segments) must write them.
    snapshotter = Snapshotter(core, snap_path, None)
    aof = None
    if cfg["appendonly"]:
        aof = Aof(core, os.path.join(cfg["dir"], cfg["appenddirname"]), cfg["appendfilename"],
                  cfg["appendfsync"], cfg["aof-load-truncated"], cfg["aof-preallocate"])
    p = Persistence(core, aof, snapshotter)
    snapshotter.configure_cache()
    core.config_listeners.append(p.config_changed)
    core.snapshotter = snapshotter
    core.persistence = p
    return p
