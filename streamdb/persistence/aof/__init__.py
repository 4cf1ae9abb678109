"""The append-only file: segments, manifest, group commit, fsync policies, loading.

One piece per stage of the AOF's life, each owning its state:

    format.py     the on-disk format: segment files, checksummed frames (one per loop
                  turn), reading a segment (torn tail or corruption), zeros at its end
    manifest.py   the manifest (which segments make up the log) and AofDirectory, the
                  manifest and segment sizes a running server believes
    loader.py     AofLoader: start-up replay of every segment
    writer.py     AofWriter: frames appended, fsync policies, a failed write or fsync
                  retried (writes refused meanwhile), the replies that wait for it
    rotation.py   Rotation: a new incr segment, named by the manifest on disk first
    rewrite.py    Rewriter: a new base segment written by a forked child

Lifecycle (the one state machine of the AOF, driven through ``Aof``):
``load()`` (start-up: replay every segment through the core's replay client;
loader.py) -> ``open_for_append()`` -> for every turn ``append_batch()`` ...
``flush()`` (writer.py) -> ``rotate()`` (a snapshot, rewrite or backup: a new incr
segment, which the manifest on disk names before any frame goes to it;
rotation.py) -> ``rewrite()`` (compaction: a new base segment holding the current
state; rewrite.py) -> ``close()`` (shutdown: flush and fsync; writer.py).

Other modules import what they need from here (``from ..persistence.aof import X``).
"""

from __future__ import annotations

import os

from .format import (FRAME_HEADER_MAX, SEGMENT_MAGIC, SEGMENT_NAME, AofCorruption, AofError, SegmentScan,
                     content_end, copy_segment, encode_frame, frame_size, read_segment,
                     segment_logical_size, segment_seq, split_commands)
from .loader import AofLoader
from .manifest import AofDirectory, Manifest, ManifestNotDurable, manifest_way_out
from .rewrite import Rewriter, state_commands, value_commands, write_base
from .rotation import AofRotationError, AofUnwritten, Rotation
from .writer import DEFAULT_PREALLOCATE, AofWriter

__all__ = ["Aof", "AofCorruption", "AofError", "AofRotationError", "AofUnwritten", "DEFAULT_PREALLOCATE",
           "FRAME_HEADER_MAX", "Manifest", "ManifestNotDurable", "SEGMENT_MAGIC", "SEGMENT_NAME",
           "SegmentScan", "content_end", "copy_segment", "encode_frame", "frame_size",
           "manifest_way_out", "read_segment", "segment_logical_size", "segment_seq",
           "split_commands", "state_commands", "value_commands", "write_base"]


# What ``Aof`` answers for its pieces: piece -> its attributes (and methods) under
# the same names, or ``facade_name=piece_name``.
_DELEGATED = {
    "directory": "dir basename manifest_name manifest manifest_path keep_retired",
    "loader": "load_truncated loading loaded_perc loaded_bytes loading_total_bytes loading_start "
              "first_segment_after_a_gap",
    "writer": "policy preallocate prealloc fd cur_db buf pending size base_size total_size segment_size "
              "last_write_ok last_error inject_failures inject_fsync_failures fsync_log record_fsyncs "
              "written_pos durable_pos durable_listeners loop append_batch flush flush_pending_retry "
              "holds_replies_of fsynced fsync_durations close",
    "rotation": "rotate snapshot_point retire_through rotation_backing_off=backing_off rotation_error=error",
    "rewriter": "rewrites rewrite_base_size rewrite_pid last_rewrite_ok rewrite_failures rewrite bgrewrite "
                "poll_rewrite=poll maybe_auto_rewrite",
}


class _Delegated:
    """An attribute of ``Aof`` that is the attribute ``name`` of its piece ``piece``:
    read, set and called through the piece."""

    def __init__(self, piece: str, name: str) -> None:
        self.piece = piece
        self.name = name

    def __get__(self, aof, owner=None):
        if aof is None:
            return self
        return getattr(getattr(aof, self.piece), self.name)

    def __set__(self, aof, value) -> None:
        setattr(getattr(aof, self.piece), self.name, value)


class Aof:
    """The AOF of one server: its pieces composed, under the names the rest of the
    server uses (``core.aof``; ``_DELEGATED``).  It holds no state of its own."""

    def __init__(self, core, dirpath: str, basename: str = "appendonly.aof",
                 fsync: str = "everysec", load_truncated: bool = True,
                 preallocate: int = DEFAULT_PREALLOCATE) -> None:
        self.directory = AofDirectory(dirpath, basename)
        self.loader = AofLoader(core, self.directory, load_truncated)
        self.writer = AofWriter(core, self.directory, fsync, preallocate)
        self.rotation = Rotation(self.directory, self.writer)
        self.rewriter = Rewriter(core, self.directory, self.writer, self.rotation)

    def load(self, covered_seq: int | None = None) -> int:
        """Replay every segment into the core in one go; returns the number of commands."""
        applied = 0
        for applied in self.load_steps(covered_seq):
            pass
        return applied

    def load_steps(self, covered_seq: int | None = None):
        """``AofLoader.load_steps``; once it is through, appends go on in the db the
        log ends in (what a replay of the segment being appended to will be in)."""
        yield from self.loader.load_steps(covered_seq)
        self.writer.cur_db = self.loader.end_db

    def open_for_append(self) -> None:
        """Start-up, after ``load``: frames go on at the end of the last whole frame of
        the manifest's last incr segment, or into a new one when it names none (a fresh
        directory, or a base only).  An existing segment is opened as the load judged
        it: it is never created, nor given a header, here."""
        os.makedirs(self.dir, exist_ok=True)
        self.rewriter.remove_stale_files()
        if not self.manifest.incrs:
            self.rotation.new_incr_segment()
        else:
            self.writer.continue_segment(self.manifest.incrs[-1])
        self.writer.recount_sizes()
        self.rewriter.rewrite_base_size = self.writer.total_size
        self.writer.start_fsync_thread()


for _piece, _names in _DELEGATED.items():
    for _name in _names.split():
        _facade_name, _, _piece_name = _name.partition("=")
        setattr(Aof, _facade_name, _Delegated(_piece, _piece_name or _facade_name))
del _piece, _names, _name, _facade_name, _piece_name
