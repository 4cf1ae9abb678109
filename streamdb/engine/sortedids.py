"""SortedIds: stream ids in order, each with a value; the PEL's container.

A consumer group's PEL (and each consumer's share of it) is mostly used one
way: XREADGROUP adds ids above every id already there, XACK removes them, often
oldest first.  ``sortedcontainers`` pays ~1.5-2 us (here) per add or remove for
order it keeps up at every step; this keeps a dict for lookups and a plain
sorted list of ids for order, where:

* an id above the last is appended (the usual add: O(1));
* any other add is a ``bisect.insort`` (XCLAIM of an old entry, a SETID back);
* a removed id stays in the list as a tombstone (not in the dict) until the
  tombstones outnumber the live ids, then the list is rebuilt: O(1) amortized.
  Tombstones at either end are dropped at once, so the first and last live ids
  are always at the ends.

Ordered walks (``irange``, iteration, ``items``) skip tombstones.  Used as a
set (a consumer's pending ids), the values are None: ``add``/``discard``.

Compiled in Cython's pure mode (streamdb/compiled.py): an extension type whose
dict, list and positions are C fields, so each step of XREADGROUP's adds and
XACK's removals is a C API call rather than interpreted attribute lookups.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import islice

import cython

__all__ = ["SortedIds"]

_MISSING = object()


@cython.final
@cython.cclass
class SortedIds:
    _map: dict
    # Readable (not writable) from Python: tests check that tombstones are dropped.
    _order = cython.declare(list, visibility="readonly")
    _head = cython.declare(cython.Py_ssize_t, visibility="readonly")
    _dead: cython.Py_ssize_t

    def __init__(self) -> None:
        self._map = {}                  # id -> value
        self._order = []                # ascending; ids not in _map are tombstones
        self._head = 0                  # _order[:_head] are all tombstones
        self._dead = 0                  # tombstones in _order[_head:]

    # -- size and lookup --------------------------------------------------------

    def __len__(self) -> int:
        return len(self._map)

    def __bool__(self) -> bool:
        return bool(self._map)

    def __contains__(self, sid: int) -> bool:
        return sid in self._map

    def __getitem__(self, sid: int):
        return self._map[sid]

    def get(self, sid: int, default=None):
        return self._map.get(sid, default)

    # -- adding -----------------------------------------------------------------

    def __setitem__(self, sid: int, value) -> None:
        m: dict = self._map
        if sid in m:
            m[sid] = value
            return
        m[sid] = value
        order: list = self._order
        i: cython.Py_ssize_t
        if not order or sid > order[-1]:
            order.append(sid)
            return
        i = bisect_left(order, sid, self._head)
        if i < len(order) and order[i] == sid:
            self._dead -= 1             # its tombstone comes back to life
        elif i == self._head and self._head:
            self._head -= 1             # reuse the slot before the live part
            order[self._head] = sid
        else:
            order.insert(i, sid)

    def add(self, sid: int) -> None:
        self[sid] = None

    # -- removing ---------------------------------------------------------------

    def pop(self, sid: int, default=_MISSING):
        m: dict = self._map
        value = m.pop(sid, _MISSING)
        if value is _MISSING:
            if default is _MISSING:
                raise KeyError(sid)
            return default
        order: list = self._order
        if sid == order[-1]:
            order.pop()
            while len(order) > self._head and order[-1] not in m:
                order.pop()
                self._dead -= 1
        elif sid == order[self._head]:
            self._head += 1
            while self._head < len(order) and order[self._head] not in m:
                self._head += 1
                self._dead -= 1
        else:
            self._dead += 1
            if self._dead > 32 and self._dead > len(m):
                self._compact()
        if self._head > 32 and self._head > len(m):
            self._compact()
        if not m:
            self.clear()
        return value

    def append_new(self, sids: list, values: list | None) -> bool:
        """Add ``sids`` (ascending) with ``values`` (a list as long; None: every value
        None, as a set holds them) at once, when all of them lie above every id here
        (XREADGROUP's new entries); False, having changed nothing, when they do not."""
        order: list = self._order
        if order and sids[0] <= order[-1]:
            return False
        # One dict store per id in a C loop, not dict.update(zip(...)) (the pairs'
        # tuples and the generic update path): with pop_many's count by identity,
        # XREADGROUP COUNT 10 + XACK went 253.1k -> 244.7k instructions a pair
        # (callgrind, in-process driver).
        m: dict = self._map
        i: cython.Py_ssize_t
        if values is None:
            for i in range(len(sids)):
                m[sids[i]] = None
        else:
            for i in range(len(sids)):
                m[sids[i]] = values[i]
        order += sids
        return True

    def pop_many(self, sids: list) -> list:
        """``pop(sid, None)`` of each of ``sids`` in turn, the values in a list (None
        where an id was not here); the order list is tidied once at the end."""
        m: dict = self._map
        values: list = [m.pop(sid, _MISSING) for sid in sids]
        # Counted by identity: list.count compares each PendingEntry with _MISSING
        # through rich comparison (~130 instructions an id, callgrind; see append_new).
        gone: cython.Py_ssize_t = 0
        for v in values:
            if v is not _MISSING:
                gone += 1
        order: list
        head: cython.Py_ssize_t
        if not gone:
            return [None] * len(values)
        if not m:
            self.clear()
        else:
            # The removed ids are tombstones now; drop those at either end (the
            # usual: the oldest were acknowledged), as pop() does one by one.
            order = self._order
            self._dead += gone
            head = self._head
            while order[head] not in m:
                head += 1
                self._dead -= 1
            self._head = head
            while order[-1] not in m:
                order.pop()
                self._dead -= 1
            if (self._dead > 32 and self._dead > len(m)) or (head > 32 and head > len(m)):
                self._compact()
        return [None if v is _MISSING else v for v in values] if gone < len(values) else values

    def __delitem__(self, sid: int) -> None:
        self.pop(sid)

    def discard(self, sid: int) -> None:
        self.pop(sid, None)

    def clear(self) -> None:
        self._map.clear()
        self._order = []
        self._head = self._dead = 0

    @cython.cfunc
    def _compact(self) -> cython.void:
        m: dict = self._map
        self._order = [sid for sid in islice(self._order, self._head, None) if sid in m]
        self._head = self._dead = 0

    # -- in order ---------------------------------------------------------------

    def __iter__(self):
        m = self._map
        return (sid for sid in islice(self._order, self._head, None) if sid in m)

    def keys(self):
        return iter(self)

    def items(self):
        m = self._map
        return ((sid, m[sid]) for sid in islice(self._order, self._head, None) if sid in m)

    def irange(self, minimum: int | None = None, maximum: int | None = None):
        """Ids with minimum <= id <= maximum (either bound may be None), ascending."""
        order = self._order
        # Bisect from _head only: the tombstones before it need not stay in order.
        lo = self._head if minimum is None else bisect_left(order, minimum, self._head)
        hi = len(order) if maximum is None else bisect_right(order, maximum, self._head)
        m = self._map
        return (sid for sid in islice(order, lo, hi) if sid in m)

    def peekitem(self, index: int = -1) -> tuple[int, object]:
        """(id, value) of the first (0) or last (-1) id."""
        if not self._map:
            raise IndexError("peekitem on an empty SortedIds")
        sid = self._order[self._head] if index == 0 else self._order[-1] if index == -1 else None
        if sid is None:
            raise ValueError("peekitem takes 0 or -1")
        return sid, self._map[sid]

    def __repr__(self) -> str:
        return f"SortedIds({dict(self.items())!r})"
