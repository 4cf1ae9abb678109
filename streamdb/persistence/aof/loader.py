"""The AOF's loader: at start-up, every segment the manifest names replayed into
the core through its replay client, checked whole before anything is applied.

A torn tail (format.py) is cut off when ``aof-load-truncated yes`` allows it;
anything else bad refuses the start with an error naming the file and offset,
and nothing on disk is changed.  The server drives ``load_steps`` from the
event loop, serving INFO (``loading_*``) between steps.
"""

from __future__ import annotations

import os
import time

from ... import log
from .format import (SEGMENT_MAGIC, SEGMENT_NAME, AofError, frame_size, read_segment, segment_seq,
                     split_commands)
from .manifest import AofDirectory, Manifest, manifest_way_out

__all__ = ["AofLoader"]

# Replay yields to its caller (which lets clients in) after a frame once this many
# commands ran since the last time.
_LOAD_STEP = 2000


class AofLoader:
    """Replays the segments of ``directory`` into ``core``; what it read becomes the
    directory's manifest and the segments' sizes, and ``end_db`` the db the last
    segment ends in (where appends go on)."""

    def __init__(self, core, directory: AofDirectory, load_truncated: bool = True) -> None:
        self.core = core
        self.directory = directory
        self.load_truncated = load_truncated
        # INFO's loading_* fields while ``load_steps`` runs.
        self.loading = False
        self.loaded_perc = 0.0
        self.loaded_bytes = 0
        self.loading_total_bytes = 0
        self.loading_start = 0.0
        self.end_db = 0           # the db the last segment replayed ends in

    def load_steps(self, covered_seq: int | None = None):
        """Replay every segment into the core, yielding the commands applied so far now and then.

        The server drives this from the event loop and serves INFO (and answers
        everything else with LOADING) between steps.

        Segments with a sequence number <= ``covered_seq`` are already in the
        snapshot that was loaded first, and are skipped.

        Refuses (AofError) on anything but a clean log or a torn tail allowed by
        ``aof-load-truncated``; nothing on disk is changed unless a torn tail is cut.
        """
        if not os.path.exists(self.directory.manifest_path()):
            self._refuse_segments_without_manifest()
            return
        self.directory.manifest = Manifest.read(self.directory.manifest_path())
        segments = [s for s in self.directory.manifest.segments()
                    if covered_seq is None or segment_seq(s) > covered_seq]
        paths = [os.path.join(self.directory.dir, s) for s in segments]
        for p in paths:
            if not os.path.exists(p):
                raise AofError(f"{self.directory.manifest_path()}: names segment {os.path.basename(p)} "
                               f"which does not exist")
        total = sum(os.path.getsize(p) for p in paths) or 1
        self.loading_total_bytes = total
        self.loading_start = time.time()
        done_bytes = 0
        applied = 0
        next_step = _LOAD_STEP
        client = self.core.replay_client("aof")
        self.loading = True
        t0 = time.monotonic()
        last_log = t0
        scans = []
        # First check every segment, so that a bad file changes nothing in memory or on disk.
        for i, p in enumerate(paths):
            with open(p, "rb") as f:
                data = f.read()
            scan = read_segment(data, p)
            if scan.torn_at is not None:
                if i != len(paths) - 1:
                    raise AofError(f"{p}: {scan.torn_reason} at offset {scan.torn_at} in a segment "
                                   f"that is not the last one (a hole in the log: "
                                   f"'streamdb-check-aof --fix {self.directory.dir}' cuts the log there, "
                                   f"after saying what that loses and asking)")
                if not self.load_truncated:
                    raise AofError(f"{p}: {scan.torn_reason} at offset {scan.torn_at} "
                                   f"(aof-load-truncated is no; run the AOF checker with --fix)")
            scans.append((p, scan, len(data)))
        # (What the progress counts: the frames, not the zeros a segment may end with.)
        self.loading_total_bytes = total = sum(scan.end for _, scan, _ in scans) or 1
        for p, scan, size in scans:
            client.db = 0          # every segment is written starting from db 0
            if p.endswith(".base.aof"):
                for db in self.core.keyspace.dbs:   # a base segment is the whole state
                    db.clear()
            offset = len(SEGMENT_MAGIC)
            for body in scan.frames:
                commands = split_commands(body)
                failed = self.core.replay(client, commands)
                if failed is not None:
                    # Frames are checksummed, so this is not disk corruption: the
                    # log holds an effect this version cannot apply.  Refuse to
                    # start rather than come up with a state that differs from it.
                    index, error = failed
                    self.core.remove_client(client)
                    self.loading = False
                    raise AofError(f"{p}: the frame at offset {offset} holds a command that "
                                   f"fails to apply ({commands[index][0].decode('latin-1')}: "
                                   f"{error.message})")
                applied += len(commands)
                if applied >= next_step:
                    next_step = applied + _LOAD_STEP
                    self.loaded_bytes = done_bytes
                    yield applied
                offset += frame_size(body)
                done_bytes += len(body)
                self.loaded_perc = 100.0 * done_bytes / total
                now = time.monotonic()
                if now - last_log >= 1.0:
                    last_log = now
                    self.loaded_perc = 100.0 * done_bytes / total
                    log.log(log.NOTICE, f"Loading AOF: {self.loaded_perc:.1f}% "
                                        f"({applied} commands, {applied / max(now - t0, 1e-9):.0f}/s)")
            if scan.torn_at is not None:
                zeros = (f" and the {size - scan.end} bytes of preallocated zeros after it"
                         if size > scan.end else "")
                log.log(log.WARNING, f"!!! Warning: torn tail in {p} ({scan.torn_reason}) at offset "
                                     f"{scan.torn_at} of {scan.end}: cutting {scan.end - scan.torn_at} "
                                     f"bytes{zeros} (aof-load-truncated yes)")
                # Cut to the last whole frame, zeros included: what is appended next
                # goes there, and the room ahead is written afresh.
                with open(p, "r+b") as f:
                    f.truncate(scan.valid_end)
                    f.flush()
                    os.fsync(f.fileno())
            self.directory.sizes[os.path.basename(p)] = scan.valid_end
        self.end_db = client.db
        self.core.remove_client(client)
        self.loading = False
        self.loaded_perc = 100.0
        dt = time.monotonic() - t0
        log.log(log.NOTICE, f"DB loaded from append only file: {dt:.3f} seconds "
                            f"({applied} commands)")
        yield applied

    def _refuse_segments_without_manifest(self) -> None:
        """No manifest: a fresh directory, unless segments are there.  Those are a
        previous run's log whose manifest was lost; starting empty would write a new
        manifest and overwrite the first of them, so the start stops instead."""
        d = self.directory
        try:
            found = sorted(n for n in os.listdir(d.dir) if SEGMENT_NAME.fullmatch(n))
        except FileNotFoundError:
            return
        if found:
            raise AofError(f"{d.dir} holds AOF segments but no manifest {d.manifest_name} "
                           f"({', '.join(found)}): refusing to start empty over them; "
                           f"{manifest_way_out(d.dir)}, or move them away to start empty")

    def first_segment_after_a_gap(self, covered_seq: int | None) -> str | None:
        """The segment a load would replay first, when the segments before it are
        gone and ``covered_seq`` (the snapshot's, None without one) does not cover
        them: they were retired into a snapshot that is not this one (missing, or
        older).  None when the log continues from the snapshot (or the very start).

        A query of the manifest on disk, before ``load_steps``: nothing changes.
        Raises AofError when the manifest is unreadable."""
        if not os.path.exists(self.directory.manifest_path()):
            return None
        manifest = Manifest.read(self.directory.manifest_path())
        replayed = [s for s in manifest.segments()
                    if covered_seq is None or segment_seq(s) > covered_seq]
        if not replayed or replayed[0].endswith(".base.aof"):
            return None          # (a base segment is the whole state)
        # Seqs count from 1; a rotation before a snapshot starts the segment after the
        # one it covers.
        return replayed[0] if segment_seq(replayed[0]) > (covered_seq or 0) + 1 else None
