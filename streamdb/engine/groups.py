"""Consumer groups: the group, its consumers and the pending entries list (PEL).

Invariants (checked by tests/unit/test_groups_unit.py, check_invariants):

* every PendingEntry in ``group.pel`` is owned by exactly one consumer, and its
  id is in that consumer's ``pending`` set; a consumer's ``pending`` holds
  nothing else;
* except a NACKed entry (XNACK): it has no owner (``consumer`` is None), its
  delivery time is 0 and it is in no consumer's ``pending``; claiming it gives
  it an owner again;
* ``group.nacked`` holds exactly the NACKed ids, in the order they were
  (last) released: CLAIM reads take them in that order, as Redis's NACK zone;
* ``pel`` and every ``pending`` are ordered by id (XPENDING ranges, the
  XAUTOCLAIM cursor and history reads walk them in order).

Times are milliseconds given by the caller: the engine has no clock.

Compiled in Cython's pure mode (streamdb/compiled.py): the three classes are
extension types; their attributes are public because the commands, persistence
and metrics layers read and set them.  Times, counts and ids stay Python ints
(a RESTORE payload may hold any int: it must not overflow a C field).
"""

from __future__ import annotations

import cython

from .ids import MIN_ID
from .sortedids import SortedIds

__all__ = ["ConsumerGroup", "Consumer", "PendingEntry", "DeadLetterPolicy",
           "DEAD_LETTER_FIELDS", "NotADeadLetter", "split_dead_letter", "ENTRIES_READ_INVALID", "MAX_DELIVERY_COUNT",
           "next_delivery_count"]

# Redis's SCG_INVALID_ENTRIES_READ: the group's logical read counter is unknown.
ENTRIES_READ_INVALID = -1

# LLONG_MAX: what XNACK FATAL sets, and where counting deliveries stops (a reply
# integer cannot hold more).
MAX_DELIVERY_COUNT = (1 << 63) - 1


def next_delivery_count(count: int) -> int:
    """One more delivery, saturating at MAX_DELIVERY_COUNT (a FATAL-NACKed entry)."""
    return count + 1 if count < MAX_DELIVERY_COUNT else MAX_DELIVERY_COUNT


@cython.final
@cython.cclass
class PendingEntry:
    """A delivered, not yet acknowledged entry (Redis's streamNACK).

    ``consumer`` is None for an entry released by XNACK: unowned, delivery time 0,
    claimable by anyone at once."""

    consumer = cython.declare(object, visibility="public")
    delivery_time = cython.declare(object, visibility="public")
    delivery_count = cython.declare(object, visibility="public")

    def __init__(self, consumer: "Consumer | None", delivery_time: int,
                 delivery_count: int = 1) -> None:
        self.consumer = consumer
        self.delivery_time = delivery_time
        self.delivery_count = delivery_count

    @property
    def owner_name(self) -> bytes:
        """The owner's name as XPENDING and XINFO show it: empty when NACKed."""
        return b"" if self.consumer is None else self.consumer.name

    def idle(self, now_ms: int) -> int:
        """Milliseconds since the last delivery as replies show it; -1 when NACKed
        (Redis's XPENDING shows a released entry so)."""
        if self.consumer is None:
            return -1
        return max(now_ms - self.delivery_time, 0)

    def claimable(self, now_ms: int, min_idle: int) -> bool:
        """Whether a claim asking for ``min_idle`` ms of idleness may take it: a
        NACKed entry always may."""
        return self.consumer is None or now_ms - self.delivery_time >= min_idle


@cython.final
@cython.cclass
class Consumer:
    name = cython.declare(bytes, visibility="public")
    seen_time = cython.declare(object, visibility="public")
    active_time = cython.declare(object, visibility="public")
    pending = cython.declare(object, visibility="public")   # a SortedIds

    def __init__(self, name: bytes, now_ms: int) -> None:
        self.name = name
        self.seen_time = now_ms       # last interaction of any kind
        self.active_time = -1         # last successful read/claim; -1 = never
        self.pending = SortedIds()          # ids, as a set (values None)


# What a dead-lettered entry holds before its own fields, in this order: the stream
# and id it came from, its group, who had it last ("" when it was NACKed) and how
# often it was delivered.  Fixed and first, so that a replay (streamdb-admin
# dead-letter replay) finds the original fields after them whatever their names.
DEAD_LETTER_FIELDS = (b"dlq-source", b"dlq-id", b"dlq-group", b"dlq-consumer",
                      b"dlq-deliveries")


class NotADeadLetter(ValueError):
    """An entry of a dead-letter stream without the fields the server writes first."""


def split_dead_letter(fields):
    """A dead-lettered entry's flat field list (a list of bytes) as (where it came
    from, a dict keyed by DEAD_LETTER_FIELDS; its original fields as a flat list):
    what a replay (streamdb-admin, the console) appends to the source again.
    Raises NotADeadLetter for an entry a dead-letter policy did not write."""
    n = len(DEAD_LETTER_FIELDS)
    names = tuple(fields[0:2 * n:2])
    if names != DEAD_LETTER_FIELDS or len(fields) < 2 * n + 2:
        raise NotADeadLetter("not written by a dead-letter policy")
    return dict(zip(names, fields[1:2 * n:2])), list(fields[2 * n:])


class DeadLetterPolicy:
    """A group's dead-letter policy (STREAMDB.GROUP SET): an entry pending in the group
    that was delivered ``max_deliveries`` times (>= 1) goes to the stream at ``key``
    instead of being delivered again.  Never changed once made (SET makes a new one)."""

    __slots__ = ("max_deliveries", "key")

    def __init__(self, max_deliveries: int, key: bytes) -> None:
        self.max_deliveries = max_deliveries
        self.key = key

    def __eq__(self, other) -> bool:
        return (type(other) is DeadLetterPolicy and other.max_deliveries == self.max_deliveries
                and other.key == self.key)

    def __repr__(self) -> str:
        return f"DeadLetterPolicy({self.max_deliveries}, {self.key!r})"


@cython.final
@cython.cclass
class ConsumerGroup:
    name = cython.declare(bytes, visibility="public")
    last_id = cython.declare(object, visibility="public")
    entries_read = cython.declare(object, visibility="public")
    pel = cython.declare(object, visibility="public")   # a SortedIds
    consumers = cython.declare(dict, visibility="public")
    nacked = cython.declare(dict, visibility="public")
    dead_letter = cython.declare(object, visibility="public")     # a DeadLetterPolicy or None
    dead_lettered = cython.declare(object, visibility="public")

    def __init__(self, name: bytes, last_id: int = MIN_ID,
                 entries_read: int = ENTRIES_READ_INVALID) -> None:
        self.name = name
        self.last_id = last_id
        self.entries_read = entries_read
        self.pel = SortedIds()                       # id -> PendingEntry
        self.consumers = {}                          # name -> Consumer
        self.nacked = {}                             # NACKed id -> None, in release order
        self.dead_letter = None
        # Entries this group dead-lettered since it was created (RESET of the policy
        # keeps it: it counts what happened, not what the policy is).
        self.dead_lettered = 0

    def dead_letter_due(self, delivery_count: int) -> bool:
        """Whether an entry pending with ``delivery_count`` deliveries is dead-lettered
        rather than delivered again (never without a policy)."""
        policy = self.dead_letter
        return policy is not None and delivery_count >= policy.max_deliveries

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
        pe: PendingEntry = self.pel.get(sid)
        if pe is None:
            pe = PendingEntry(consumer, now_ms, count)
            self.pel[sid] = pe
        else:
            if pe.consumer is not consumer:
                if pe.consumer is not None:
                    pe.consumer.pending.discard(sid)
                else:
                    del self.nacked[sid]
                pe.consumer = consumer
            pe.delivery_time = now_ms
            pe.delivery_count = count
        consumer.pending.add(sid)
        return pe

    def add_new_pending(self, sids: list[int], consumer: Consumer, now_ms: int) -> list:
        """``add_pending(sid, consumer, now_ms)`` of each of ``sids``: entries new to
        the group (XREADGROUP ``>``), ascending; returns their PendingEntry."""
        pes: list = [PendingEntry(consumer, now_ms, 1) for _ in sids]
        if not (self.pel.append_new(sids, pes) and consumer.pending.append_new(sids, None)):
            # Not above everything pending (an XCLAIM FORCE of ids never delivered):
            # one at a time.  (The first append_new changes nothing when it fails;
            # the second cannot fail when the first did not.)
            return [self.add_pending(sid, consumer, now_ms) for sid in sids]
        return pes

    def ack_many(self, sids: list[int]) -> int:
        """``ack`` of each of ``sids`` in turn; returns how many were pending."""
        pes: list = self.pel.pop_many(sids)
        acked: cython.Py_ssize_t = 0
        owner: Consumer = None
        mine: list = []
        pe: PendingEntry
        for sid, pe in zip(sids, pes):
            if pe is None:
                continue
            acked += 1
            if pe.consumer is None:         # NACKed: in no consumer's pending
                del self.nacked[sid]
                continue
            if pe.consumer is not owner:
                if mine:
                    owner.pending.pop_many(mine)
                owner, mine = pe.consumer, []
            mine.append(sid)
        if mine:
            owner.pending.pop_many(mine)
        return acked

    def ack(self, sid: int) -> bool:
        pe: PendingEntry = self.pel.pop(sid, None)
        if pe is None:
            return False
        if pe.consumer is not None:
            pe.consumer.pending.discard(sid)
        else:
            del self.nacked[sid]
        return True

    def nack(self, sid: int, count: int) -> None:
        """XNACK of a pending ``sid``: no owner, delivery time 0, ``count`` deliveries,
        last in the release order (an entry NACKed again moves there too)."""
        pe = self.pel[sid]
        if pe.consumer is not None:
            pe.consumer.pending.discard(sid)
            pe.consumer = None
        pe.delivery_time = 0
        pe.delivery_count = count
        self.nacked.pop(sid, None)
        self.nacked[sid] = None

    def add_nacked(self, sid: int, count: int) -> None:
        """XNACK FORCE of an ``sid`` not pending: a new unowned PEL entry, last in
        the release order (a snapshot's NACKed entries load in their order)."""
        self.pel[sid] = PendingEntry(None, 0, count)
        self.nacked[sid] = None

    def nacked_count(self) -> int:
        return len(self.nacked)

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
