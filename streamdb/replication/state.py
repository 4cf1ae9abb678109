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
import time
from typing import NamedTuple

from .. import log
from ..files import replace_file

__all__ = ["SavedState", "STATE_FILE", "state_path", "load", "StateWriter", "remove", "aof_position"]

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


class StateWriter:
    """Writes the state file (``save``), which the cron asks for every tick while the
    state has changed.  A failed write (a full disk) is said once, at warning level,
    and retried with a growing delay (``RETRY_FIRST`` doubling up to ``RETRY_MAX``
    seconds); that it works again is said once too.  Until then a restart finds the
    old state, which only costs replicas a full resync."""

    RETRY_FIRST = 0.1
    RETRY_MAX = 10.0

    def __init__(self) -> None:
        self.failing = False
        self._delay = 0.0
        self._next_try = 0.0

    def save(self, cfg, st: SavedState, now_or_never: bool = False) -> bool:
        """Write ``st``; whether it is in the file now.  While writes fail, a call
        before the retry delay is up does nothing (False), unless ``now_or_never``
        (shutdown: the last chance to write it)."""
        now = time.monotonic()
        if self.failing and now < self._next_try and not now_or_never:
            return False
        path = state_path(cfg)
        try:
            _write(path, st)
        except OSError as e:
            if not self.failing:
                log.log(log.WARNING, f"Cannot write {path}: {e.strerror or e}; replicas will need "
                                     f"a full resync if this server restarts before it works "
                                     f"again (retrying with a growing delay)")
            self.failing = True
            self._delay = min(max(self._delay * 2, self.RETRY_FIRST), self.RETRY_MAX)
            self._next_try = now + self._delay
            return False
        if self.failing:
            log.log(log.WARNING, f"Writing {path} works again")
        self.failing = False
        self._delay = 0.0
        return True


def _write(path: str, st: SavedState) -> None:
    """The line into a file aside, renamed over ``path``; on failure the file aside
    goes (it holds room a full disk may need)."""
    replace_file(path, ("%s %d %d %s %d %s %d %d\n" % st).encode("ascii"), durable=False)


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
