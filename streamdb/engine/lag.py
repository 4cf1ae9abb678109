"""Consumer-group progress: the logical read counter ("entries-read") and lag.

Redis tracks, per stream, how many entries were ever added (entries_added)
and, per group, how many of them the group has read (entries_read).  The lag
is their difference, but only when no deleted entry (tombstone) lies ahead of
the group; otherwise the counter is estimated or reported as unknown (nil).
These functions follow Redis's streamEstimateDistanceFromFirstEverEntry(),
streamRangeHasTombstones() and the XINFO lag rules.

Lag in time (StreamDB's own, STREAMDB.GROUP INFO and the metrics) and a group's
position at a time (STREAMDB.GROUP SETID ... TIME): an id's time part is its
milliseconds, and the time "now" is the caller's (the engine reads no clock).  These
walk node headers (first and last id, live count, the in-memory deletion marks) and
read at most the node that holds the boundary (two when every entry of it past the
boundary was deleted), so cold history (engine/nodecache.py) stays on disk.

Compiled in Cython's pure mode (streamdb/compiled.py; lag.pxd gives it the Stream's C
type): a metrics scrape asks every group its lag, time lag and oldest pending age, and
the helpers those call are C calls (ccall, cfunc).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from operator import attrgetter

import cython

from .groups import ENTRIES_READ_INVALID, ConsumerGroup
from .ids import MAX_ID, MIN_ID
from .stream import Node, Stream

__all__ = ["range_has_tombstones", "estimate_entries_read", "group_lag", "advance_entries_read",
           "advance_entries_read_many", "clamp_entries_read", "counter_trusted",
           "first_entry_after", "last_entry_before", "entries_read_at", "time_lag_ms",
           "oldest_pending_ms", "oldest_pending_idle_ms", "groups_progress", "position_at_time", "position_earliest", "position_latest"]


@cython.ccall
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


@cython.ccall
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


@cython.ccall
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


@cython.ccall
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


# -- lag in time and positions at a time ---------------------------------------------

_live = attrgetter("live")


def _id_ms(sid: int) -> int:
    return sid >> 64


@cython.cfunc
def _age_ms(sid: int, now_ms: int) -> int:
    """Milliseconds from entry ``sid``'s time to ``now_ms``; 0 for an id in the future.
    (A metrics scrape asks this of every group, twice: no call to max or _id_ms.)"""
    age = now_ms - (sid >> 64)
    return age if age > 0 else 0


@cython.ccall
def first_entry_after(s: Stream, after: int) -> int | None:
    """The id of the first entry that exists (not deleted, not trimmed) above ``after``;
    None when there is none.  Reads a node's ids only when ``after`` falls inside it or
    the next node's first entry was deleted."""
    nodes: list = s.nodes
    i: cython.Py_ssize_t = bisect_right(s.firsts, after) - 1
    node: Node
    ids: list
    j: cython.Py_ssize_t
    if i < 0:
        i = 0
    while i < len(nodes):
        node = nodes[i]
        i += 1
        if node.last <= after:
            continue
        first = node.first
        if first > after and not node.is_deleted(first):
            return first
        ids = node.contents()[0]
        for j in range(bisect_right(ids, after), len(ids)):
            if not node.is_deleted(ids[j]):
                return ids[j]
    return None


def last_entry_before(s: Stream, bound: int) -> int | None:
    """The id of the last entry that exists below ``bound``; None when there is none.
    Reads a node's ids only when ``bound`` falls inside it or its last entry was
    deleted."""
    nodes = s.nodes
    i = bisect_left(s.firsts, bound) - 1
    while i >= 0:
        node = nodes[i]
        i -= 1
        if node.last < bound and not node.is_deleted(node.last):
            return node.last
        ids, _ = node.contents()
        for j in range(bisect_left(ids, bound) - 1, -1, -1):
            if not node.is_deleted(ids[j]):
                return ids[j]
    return None


def _live_up_to(s: Stream, sid: int) -> int:
    """How many entries that exist have an id <= ``sid`` (what XRANGE - sid counts).

    The nodes wholly before the one holding ``sid`` add their live counts (summed
    from whichever end of the stream is nearer: at most half the nodes' headers);
    that node itself is read only when ``sid`` is not its last id."""
    nodes = s.nodes
    i = bisect_right(s.firsts, sid) - 1
    if i < 0:
        return 0
    if 2 * i < len(nodes):
        before = sum(map(_live, nodes[:i]))
    else:
        before = s.length - sum(map(_live, nodes[i:]))
    node = nodes[i]
    if sid >= node.last:
        return before + node.live
    ids, _ = node.contents()
    upto = bisect_right(ids, sid)
    if node.deleted:
        upto -= sum(1 for d in node.deleted if d <= sid)
    return before + upto


def _recorded_after(s: Stream, sid: int) -> int:
    """How many entries above ``sid`` the stream's nodes still record: those that exist,
    and those deleted (XDEL) from a node that remains.  The deletion marks are in
    memory; only nodes up to the one holding max-deleted-entry-id can have any."""
    after = s.length - _live_up_to(s, sid)
    if s.max_deleted_id <= sid:
        return after
    nodes = s.nodes
    i = bisect_right(s.firsts, sid) - 1
    if i >= 0 and nodes[i].deleted:
        after += sum(1 for d in nodes[i].deleted if d > sid)
    for node in nodes[i + 1:bisect_right(s.firsts, s.max_deleted_id)]:
        if node.deleted:
            after += len(node.deleted)
    return after


def entries_read_at(s: Stream, sid: int) -> int:
    """The entries-read counter of a group whose last id is ``sid``: how many entries
    were ever added up to ``sid``, as Redis counts a group's reads (deleted and trimmed
    ones included), so that its lag (entries-added minus it) is the number of entries
    after ``sid``.  With nothing deleted or trimmed up to ``sid``, that is what counting
    XRANGE - sid gives.

    Computed as entries-added minus the entries recorded after ``sid``: exact but when
    every entry of a node after ``sid`` was deleted (the node is gone, its count with
    it); a deleted entry then lies ahead of the group, and Redis's rules report its lag
    as unknown until it has read past it."""
    return s.entries_added - _recorded_after(s, sid)


def position_earliest(s: Stream) -> tuple[int, int]:
    """(last id, entries-read) of a group placed before the stream's first entry."""
    return MIN_ID, s.entries_added - s.length


def position_latest(s: Stream) -> tuple[int, int]:
    """(last id, entries-read) of a group placed at the stream's end (XGROUP SETID $)."""
    return s.last_id, s.entries_added


def position_at_time(s: Stream, time_ms: int) -> tuple[int, int]:
    """(last id, entries-read) of a group placed at ``time_ms``: its last id is the last
    entry before that time (every entry from ``time_ms`` on is still to be read);
    before the first entry when there is none.  A time after the stream's last id is
    its end, as LATEST (the last id, even when that entry was deleted: no deleted entry
    then lies ahead, and the lag stays countable)."""
    bound = time_ms << 64
    if s.last_id < bound:
        return position_latest(s)
    sid = last_entry_before(s, bound)
    if sid is None:
        return position_earliest(s)
    return sid, entries_read_at(s, sid)


@cython.ccall
def time_lag_ms(s: Stream, g: ConsumerGroup, now_ms: int) -> int:
    """The age at ``now_ms`` of the oldest entry the group has not been given (the
    first entry that exists after its last id); 0 when it has been given everything."""
    if not s.length or g.last_id >= s.last_id:
        return 0
    sid = first_entry_after(s, g.last_id)
    return 0 if sid is None else _age_ms(sid, now_ms)


@cython.ccall
def oldest_pending_ms(g: ConsumerGroup, now_ms: int) -> int:
    """The age at ``now_ms`` of the group's oldest pending entry (its lowest id; NACKed
    ones included); 0 when nothing is pending."""
    return _oldest_pending(g, now_ms)[0]


@cython.ccall
def oldest_pending_idle_ms(g: ConsumerGroup, now_ms: int) -> int | None:
    """Milliseconds at ``now_ms`` since the group's oldest pending entry (its lowest id)
    was last delivered, 0 for a NACKed one; None when nothing is pending."""
    return _oldest_pending(g, now_ms)[1]


@cython.cfunc
def _oldest_pending(g: ConsumerGroup, now_ms: int) -> tuple:
    """(oldest_pending_ms, oldest_pending_idle_ms) of ``g``, its oldest pending entry
    looked up once (a metrics scrape asks both of every group)."""
    pel = g.pel
    if not pel:
        return 0, None
    sid, pe = pel.peekitem(0)
    idle: int = pe.idle(now_ms)
    return _age_ms(sid, now_ms), (idle if idle > 0 else 0)


def groups_progress(streams: list, groups: list, now_ms: int) -> tuple[list, list, list, list]:
    """What a metrics scrape asks of every group, in one call: ``group_lag``,
    ``time_lag_ms``, ``oldest_pending_ms`` and ``oldest_pending_idle_ms`` of each of
    ``groups`` (``streams[i]`` is the stream of ``groups[i]``), a list each.  (Compiled,
    a C loop of C calls: a map of each over the groups made a Python call per group.)"""
    lags, time_lags, oldest_ages, oldest_idles = [], [], [], []
    i: cython.Py_ssize_t
    s: Stream
    for i in range(len(groups)):
        s, g = streams[i], groups[i]
        lags.append(group_lag(s, g))
        time_lags.append(time_lag_ms(s, g, now_ms))
        oldest_age, oldest_idle = _oldest_pending(g, now_ms)
        oldest_ages.append(oldest_age)
        oldest_idles.append(oldest_idle)
    return lags, time_lags, oldest_ages, oldest_idles
