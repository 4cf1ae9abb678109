"""Consumer groups: the group, its consumers and the pending entries list (PEL).

Invariants (checked by tests/unit/test_groups.py):

* every PendingEntry in ``group.pel`` is owned by exactly one consumer, and its
  id is in that consumer's ``pending`` set; a consumer's ``pending`` holds
  nothing else;
* ``pel`` and every ``pending`` are ordered by id (XPENDING ranges, the
  XAUTOCLAIM cursor and history reads walk them in order).

Times are milliseconds given by the caller: the engine has no clock.
"""

from __future__ import annotations

from itertools import repeat

from .ids import MIN_ID
from .sortedids import SortedIds

__all__ = ["ConsumerGroup", "Consumer", "PendingEntry", "ENTRIES_READ_INVALID"]

# Redis's SCG_INVALID_ENTRIES_READ: the group's logical read counter is unknown.
ENTRIES_READ_INVALID = -1


class PendingEntry:
    """A delivered, not yet acknowledged entry (Redis's streamNACK)."""

    __slots__ = ("consumer", "delivery_time", "delivery_count")

    def __init__(self, consumer: "Consumer", delivery_time: int, delivery_count: int = 1) -> None:
        self.consumer = consumer
        self.delivery_time = delivery_time
        self.delivery_count = delivery_count


class Consumer:
    __slots__ = ("name", "seen_time", "active_time", "pending")

    def __init__(self, name: bytes, now_ms: int) -> None:
        self.name = name
        self.seen_time = now_ms       # last interaction of any kind
        self.active_time = -1         # last successful read/claim; -1 = never
        self.pending = SortedIds()          # ids, as a set (values None)


class ConsumerGroup:
    __slots__ = ("name", "last_id", "entries_read", "pel", "consumers")

    def __init__(self, name: bytes, last_id: int = MIN_ID,
                 entries_read: int = ENTRIES_READ_INVALID) -> None:
        self.name = name
        self.last_id = last_id
        self.entries_read = entries_read
        self.pel = SortedIds()                       # id -> PendingEntry
        self.consumers: dict[bytes, Consumer] = {}

    # -- consumers ----------------------------------------------------------

    def consumer(self, name: bytes) -> Consumer | None:
        return self.consumers.get(name)

    def create_consumer(self, name: bytes, now_ms: int) -> Consumer:
        c = Consumer(name, now_ms)
        self.consumers[name] = c
        return c

    def delete_consumer(self, name: bytes) -> int:
        """Remove a consumer and its pending entries; returns how many it had."""
        c = self.consumers.pop(name)
        for sid in c.pending:
            del self.pel[sid]
        return len(c.pending)

    def sorted_consumers(self) -> list[Consumer]:
        # Redis keeps consumers in a radix tree: byte order of their names.
        return [self.consumers[k] for k in sorted(self.consumers)]

    # -- the PEL --------------------------------------------------------------

    def add_pending(self, sid: int, consumer: Consumer, now_ms: int, count: int = 1) -> PendingEntry:
        """Record ``sid`` as delivered to ``consumer``, moving it if someone else held it."""
        pe = self.pel.get(sid)
        if pe is None:
            pe = PendingEntry(consumer, now_ms, count)
            self.pel[sid] = pe
        else:
            if pe.consumer is not consumer:
                pe.consumer.pending.discard(sid)
                pe.consumer = consumer
            pe.delivery_time = now_ms
            pe.delivery_count = count
        consumer.pending.add(sid)
        return pe

    def add_new_pending(self, sids: list[int], consumer: "Consumer", now_ms: int) -> list:
        """``add_pending(sid, consumer, now_ms)`` of each of ``sids``: entries new to
        the group (XREADGROUP ``>``), ascending; returns their PendingEntry."""
        pes = [PendingEntry(consumer, now_ms, 1) for _ in sids]
        if not (self.pel.append_new(sids, pes) and consumer.pending.append_new(sids, repeat(None))):
            # Not above everything pending (an XCLAIM FORCE of ids never delivered):
            # one at a time.  (The first append_new changes nothing when it fails;
            # the second cannot fail when the first did not.)
            return [self.add_pending(sid, consumer, now_ms) for sid in sids]
        return pes

    def ack_many(self, sids: list[int]) -> int:
        """``ack`` of each of ``sids`` in turn; returns how many were pending."""
        pes = self.pel.pop_many(sids)
        acked = 0
        owner = None
        mine: list[int] = []
        for sid, pe in zip(sids, pes):
            if pe is None:
                continue
            acked += 1
            if pe.consumer is not owner:
                if mine:
                    owner.pending.pop_many(mine)
                owner, mine = pe.consumer, []
            mine.append(sid)
        if mine:
            owner.pending.pop_many(mine)
        return acked

    def ack(self, sid: int) -> bool:
        pe = self.pel.pop(sid, None)
        if pe is None:
            return False
        pe.consumer.pending.discard(sid)
        return True

    def pel_range(self, start: int, end: int, count: int, consumer: Consumer | None = None):
        """(id, PendingEntry) pairs with start <= id <= end, ascending, at most ``count``."""
        source = consumer.pending if consumer is not None else self.pel
        out = []
        if count <= 0:
            return out
        for sid in source.irange(start, end):
            out.append((sid, self.pel[sid]))
            if len(out) >= count:
                break
        return out
