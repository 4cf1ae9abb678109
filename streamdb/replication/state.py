"""The replication state saved next to the data: ``<dir>/replication.state``.

One line: ``replid offset db segment size replid2 second_offset followed``.

* ``replid offset`` -- the stream this server's data is at: a primary's own id and
  offset, or, on a replica, its primary's id and the offset it has applied;
* ``db`` -- the db the stream is in at that offset (a primary's ``cur_db``, -1 when
  its next batch SELECTs anyway; a replica's applying client's db);
* ``segment size`` -- where the AOF ended when that was true;
* ``replid2 second_offset`` -- the psync2 secondary id (a promoted replica);
* ``followed`` -- 1 once another server shares the stream (a replica synced from
  this server, or this server from a primary), 0 while it is this server's alone.
  Only then is losing the state worth telling the operator: no other server holds
  a position in a stream nobody followed.  (A line without it counts as followed.)

At start-up the state is trusted only if the loaded AOF ends exactly at
``segment size``: then the data is the data at ``offset`` of ``replid``, and a
replica (or this server, as one) may continue the stream partially.  Any other
ending (a kill between the AOF write and the state write, a cut torn tail,
appendonly switched off) means a new id and full resyncs: never different data.
The file is written with a rename, so it is either the old or the new line.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from .. import log

__all__ = ["SavedState", "STATE_FILE", "state_path", "load", "save", "remove", "aof_position"]

STATE_FILE = "replication.state"
NO_ID = "0" * 40


class SavedState(NamedTuple):
    replid: str
    offset: int
    db: int
    segment: str
    size: int
    replid2: str = NO_ID
    second_offset: int = -1
    followed: bool = True

    @property
    def aof_pos(self) -> tuple[str, int]:
        return self.segment, self.size


def state_path(cfg) -> str:
    return os.path.join(cfg["dir"], STATE_FILE)


def load(cfg) -> SavedState | None:
    """The saved state, or None (no file, or one that does not parse)."""
    try:
        with open(state_path(cfg), encoding="ascii") as f:
            parts = f.read().split()
        st = SavedState(parts[0], int(parts[1]), int(parts[2]), parts[3], int(parts[4]),
                        *((parts[5], int(parts[6])) if len(parts) >= 7 else ()),
                        *((parts[7] == "1",) if len(parts) >= 8 else ()))
    except (OSError, ValueError, IndexError, UnicodeDecodeError):
        return None
    if len(st.replid) != 40 or len(st.replid2) != 40 or st.offset < 0 \
            or not -1 <= st.db < cfg["databases"]:
        return None
    return st


def save(cfg, st: SavedState) -> bool:
    path = state_path(cfg)
    tmp = path + ".tmp"
    try:
        with open(tmp, "w", encoding="ascii") as f:
            f.write("%s %d %d %s %d %s %d %d\n" % st)
        os.replace(tmp, path)
        return True
    except OSError as e:
        log.log(log.WARNING, f"Cannot write {path}: {e}")
        return False


def remove(cfg) -> None:
    try:
        os.unlink(state_path(cfg))
    except OSError:
        pass


def aof_position(core) -> tuple[str, int] | None:
    """Where the AOF ends now: (last segment, its size); None without an AOF or while
    effects of this turn are not written yet (the state would run ahead of the file)."""
    aof = core.aof
    if aof is None or not aof.manifest.incrs or aof.pending or aof.buf:
        return None
    return aof.manifest.incrs[-1], aof.size
