"""SortedIds (the PEL's container) against a plain dict kept sorted on demand.

Operations are drawn so that the usual shape (ids added above the last, removed
oldest first) and the unusual one (adds below the last, removals in the middle,
re-adding removed ids) both happen, with enough removals to make it compact.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdb.engine.sortedids import SortedIds

ops = st.lists(st.one_of(
    st.tuples(st.just("set"), st.integers(0, 40), st.integers()),
    st.tuples(st.just("append"), st.integers(1, 5), st.integers()),
    st.tuples(st.just("pop"), st.integers(0, 40), st.none()),
    st.tuples(st.just("pop_first"), st.none(), st.none()),
    st.tuples(st.just("pop_last"), st.none(), st.none()),
    st.tuples(st.just("range"), st.integers(-5, 45), st.integers(-5, 45)),
    st.tuples(st.just("clear"), st.none(), st.none()),
    # Batches: ids appended above the last (or, refused, not), ids popped at once.
    st.tuples(st.just("append_new"), st.integers(-3, 4), st.integers(1, 6)),
    st.tuples(st.just("pop_many"), st.lists(st.integers(0, 45), max_size=12), st.none()),
    st.tuples(st.just("pop_oldest"), st.integers(1, 12), st.none()),
), min_size=30, max_size=400)


def check(s: SortedIds, ref: dict) -> None:
    keys = sorted(ref)
    assert len(s) == len(ref) and bool(s) == bool(ref)
    assert list(s) == keys
    assert list(s.items()) == [(k, ref[k]) for k in keys]
    if keys:
        assert s.peekitem(0) == (keys[0], ref[keys[0]])
        assert s.peekitem(-1) == (keys[-1], ref[keys[-1]])


@settings(max_examples=300, deadline=None)
@given(ops)
def test_behaves_like_a_sorted_dict(operations):
    s, ref = SortedIds(), {}
    for op, a, b in operations:
        if op == "set":
            s[a] = b
            ref[a] = b
        elif op == "append":
            k = (max(ref) if ref else 0) + a
            s[k] = b
            ref[k] = b
        elif op == "pop":
            assert s.pop(a, "none") == ref.pop(a, "none")
        elif op == "pop_first" and ref:
            k = min(ref)
            assert s.pop(k) == ref.pop(k)
        elif op == "pop_last" and ref:
            k = max(ref)
            del s[k]
            del ref[k]
        elif op == "range":
            assert list(s.irange(a, b)) == [k for k in sorted(ref) if a <= k <= b]
            assert list(s.irange(a)) == [k for k in sorted(ref) if a <= k]
            assert list(s.irange(None, b)) == [k for k in sorted(ref) if k <= b]
        elif op == "clear":
            s.clear()
            ref.clear()
        elif op == "append_new":
            first = (max(ref) if ref else 0) + a
            sids = list(range(first, first + b))
            fits = not ref or first > max(ref)
            assert s.append_new(sids, [k * 10 for k in sids]) == fits
            if fits:
                ref.update((k, k * 10) for k in sids)
        elif op in ("pop_many", "pop_oldest"):
            sids = a if op == "pop_many" else sorted(ref)[:a]
            assert s.pop_many(sids) == [ref.pop(k, None) for k in sids]
        if op in ("append_new", "pop_many", "pop_oldest"):
            a = b = None
        for k in (a, b):
            if isinstance(k, int):
                assert (k in s) == (k in ref) and s.get(k) == ref.get(k)
        check(s, ref)


def test_a_fifo_pel_stays_small():
    """Added at the top, acknowledged oldest first: no tombstones pile up."""
    s = SortedIds()
    for i in range(100_000):
        s.add(i)
        if i >= 10:
            s.discard(i - 10)
    assert len(s) == 10 and len(s._order) - s._head == 10
    assert len(s._order) < 100


def test_errors_like_a_dict():
    s = SortedIds()
    with pytest.raises(KeyError):
        s.pop(1)
    with pytest.raises(KeyError):
        del s[1]
    with pytest.raises(IndexError):
        s.peekitem(0)
    s.discard(1)          # a set's discard: no error


def test_a_removed_id_added_again_in_the_middle():
    s = SortedIds()
    for i in range(5):
        s[i] = i
    s.pop(2)
    s[2] = 9
    assert list(s.items()) == [(0, 0), (1, 1), (2, 9), (3, 3), (4, 4)]
    s.pop(0)
    s.pop(1)
    s[0] = 7               # below the live part: takes a slot before it
    assert list(s) == [0, 2, 3, 4] and s.peekitem(0) == (0, 7)
    assert list(s.irange(1, 3)) == [2, 3]
