"""engine/lag.py's positions in time against counting entry by entry: after any
sequence of appends, deletions and trims, the first entry after an id, the last one
before an id, the number of entries up to an id and a group's entries-read at an id
are what a walk over every entry the stream ever had gives."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from streamdb.engine.groups import ConsumerGroup
from streamdb.engine.ids import MIN_ID
from streamdb.engine.lag import (_live_up_to, entries_read_at, first_entry_after, group_lag,
                                 last_entry_before, position_at_time, time_lag_ms)
from streamdb.engine.stream import Stream

from test_compiled_engine import apply_stream_op, mid, stream_ops


def _added_ids(s: Stream, ops, max_entries: int) -> list[int]:
    """Apply ``ops`` to ``s``; the id of every entry ever added, in order."""
    last = [0]
    added: list[int] = []
    for op in ops:
        if op[0] in ("range", "get"):
            continue
        before = s.last_id
        apply_stream_op(s, last, op, max_entries, 0)
        if s.last_id != before:
            added.extend(sid for sid, _ in s.range(before + 1, s.last_id))
    return added


probe_ids = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 3)), min_size=1, max_size=8)


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(stream_ops, max_size=40), max_entries=st.sampled_from([1, 2, 3, 5, 100]),
       probes=probe_ids)
def test_positions_agree_with_counting_every_entry(ops, max_entries, probes):
    s = Stream()
    added = _added_ids(s, ops, max_entries)
    live = [sid for sid, _ in s]
    for ms, seq in probes:
        sid = mid(ms, seq)
        after = [x for x in live if x > sid]
        before = [x for x in live if x < sid]
        assert first_entry_after(s, sid) == (after[0] if after else None)
        assert last_entry_before(s, sid) == (before[-1] if before else None)
        assert _live_up_to(s, sid) == len([x for x in live if x <= sid])
        # entries-read: every entry ever added up to the id, for an id from the first
        # entry on (trimmed entries all lie before it).  Exact unless a whole node after
        # it was deleted: a deleted entry then lies ahead, and lag is unknown.
        read = entries_read_at(s, sid)
        if s.length and s.first_id() <= sid and s.max_deleted_id <= sid:
            assert read == len([x for x in added if x <= sid])
            assert s.entries_added - read == len(after)
        # A group placed at a time: its lag counts what is left, when it can be counted.
        g = ConsumerGroup(b"g")
        g.last_id, g.entries_read = position_at_time(s, ms)
        left = [x for x in live if x >= mid(ms, 0)]
        if s.last_id < mid(ms, 0):                   # past the end: LATEST
            assert (g.last_id, g.entries_read) == (s.last_id, s.entries_added)
        else:
            assert g.last_id == ([x for x in live if x < mid(ms, 0)] or [MIN_ID])[-1]
        lag = group_lag(s, g)
        assert lag is None or lag == len(left)
        if s.max_deleted_id < mid(ms, 0) and g.last_id >= s.first_id():
            assert lag == len(left)
        assert time_lag_ms(s, g, 10**6) == (max(10**6 - (left[0] >> 64), 0) if left else 0)
