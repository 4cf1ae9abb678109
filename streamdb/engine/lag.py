"""Consumer-group progress: the logical read counter ("entries-read") and lag.

Redis tracks, per stream, how many entries were ever added (entries_added)
and, per group, how many of them the group has read (entries_read).  The lag
is their difference, but only when no deleted entry (tombstone) lies ahead of
the group; otherwise the counter is estimated or reported as unknown (nil).
These functions follow Redis's streamEstimateDistanceFromFirstEverEntry(),
streamRangeHasTombstones() and the XINFO lag rules.
"""

from __future__ import annotations

from .groups import ENTRIES_READ_INVALID, ConsumerGroup
from .ids import MAX_ID, MIN_ID
from .stream import Stream

__all__ = ["range_has_tombstones", "estimate_entries_read", "group_lag", "advance_entries_read",
           "advance_entries_read_many", "clamp_entries_read", "counter_trusted"]


def range_has_tombstones(s: Stream, start: int | None, end: int | None) -> bool:
    """Whether a deleted entry may lie in [start, end] (None = open end)."""
    if not s.length or s.max_deleted_id == MIN_ID:
        return False
    if s.first_id() > s.max_deleted_id:
        return False
    lo = MIN_ID if start is None else start
    hi = MAX_ID if end is None else end
    return lo <= s.max_deleted_id <= hi


def clamp_entries_read(s: Stream, entries_read: int) -> int:
    """An ENTRIESREAD given to XGROUP CREATE/SETID, at most the stream's entries-added.

    A group cannot have read more entries than were ever added; current Redis clamps
    the value when it is set (redis/redis#14257: 7.0 stored it as given, and XINFO
    GROUPS then showed a negative lag).  -1 (unknown) stays.
    """
    if entries_read > s.entries_added:
        return s.entries_added
    return entries_read


def estimate_entries_read(s: Stream, sid: int) -> int:
    """The entries-read counter a group would have after reading up to ``sid``.

    ENTRIES_READ_INVALID (-1) when it cannot be known.
    """
    if not s.entries_added:
        return 0
    if not s.length and sid <= s.last_id:
        return s.entries_added
    if sid == s.last_id:
        return s.entries_added
    if sid > s.last_id:
        return ENTRIES_READ_INVALID
    first = s.first_id()
    if s.max_deleted_id == MIN_ID or s.max_deleted_id < first:
        if sid < first:
            return s.entries_added - s.length
        if sid == first:
            return s.entries_added - s.length + 1
    return ENTRIES_READ_INVALID


def counter_trusted(s: Stream, g: ConsumerGroup, after: int) -> bool:
    """Whether the group's entries-read counter still counts exactly, reading on from ``after``.

    Not when it is unknown, when a deleted entry may lie at or after ``after``, or (Redis
    7.4+, redis/redis#13473 and #13958) when the group's last id is behind the stream's
    first entry: entries were trimmed that the group never read, so its counter no longer
    says how many of the remaining ones it has read.
    """
    return (g.entries_read != ENTRIES_READ_INVALID and g.last_id >= s.first_id()
            and not range_has_tombstones(s, after, None))


def advance_entries_read(s: Stream, g: ConsumerGroup, sid: int) -> None:
    """Update ``g`` after it was delivered entry ``sid`` (> its last id)."""
    if counter_trusted(s, g, sid):
        g.entries_read += 1
    elif s.entries_added:
        g.entries_read = estimate_entries_read(s, sid)
    g.last_id = sid


def advance_entries_read_many(s: Stream, g: ConsumerGroup, sids: list[int]) -> None:
    """``advance_entries_read`` of each of ``sids`` (ascending, all above the
    group's last id) in turn.  With no tombstone at or after the first of them
    each one only adds 1, so that is done at once."""
    if counter_trusted(s, g, sids[0]):
        g.entries_read += len(sids)
        g.last_id = sids[-1]
        return
    for sid in sids:
        advance_entries_read(s, g, sid)


def group_lag(s: Stream, g: ConsumerGroup) -> int | None:
    """The group's lag for XINFO, or None (nil) when it cannot be computed.

    An empty stream has nothing left to read: its lag is 0 whatever the group's
    counter says (current Redis; after ``XTRIM MAXLEN 0`` 7.0 still counted the
    entries added since the group's last read).
    """
    if not s.entries_added or not s.length:
        return 0
    if counter_trusted(s, g, g.last_id):
        return s.entries_added - g.entries_read
    est = estimate_entries_read(s, g.last_id)
    if est != ENTRIES_READ_INVALID:
        return s.entries_added - est
    return None
