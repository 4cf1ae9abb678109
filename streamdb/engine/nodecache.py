"""Sealed nodes on disk, the hot tail in memory: the node store and the node cache.

A sealed node (engine/stream.py) is one immutable blob.  Once the persistence layer
has made that blob durable it tells the node where it lives (``Node.where``); from
then on memory may drop the blob (the node is *cold*) and keep only its header
(first and last id, counts, deletion marks).  Every engine path that needs a sealed
node's content gets it through ``Node.sealed_blob``, which fetches a cold node back
from the *node store* this module is handed.

The engine does no I/O: the store is an object with one method,
``fetch(where, first) -> bytes`` (``where`` is the opaque location the store gave,
shared by all the nodes of one key, ``first`` the node's first id).  The server hands
the LMDB store (persistence/nodestore.py); unit tests hand a ``MemoryStore``.

The ``NodeCache`` bounds the bytes of durable sealed nodes kept in memory: an LRU of
the *evictable* nodes (sealed, resident, ``where`` set); past the budget the least
recently used lose their blob.  A budget of 0 means no bound: nothing is evicted,
and the server gives no node a location, so every path behaves exactly as when the
cache did not exist.  Nodes not yet durable, the open tail node, stream metadata and
consumer groups are never evicted.
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["NodeCache", "MemoryStore", "CACHE", "ColdReadError"]


class ColdReadError(Exception):
    """A cold node could not be read back from the store (missing or corrupt row)."""


class MemoryStore:
    """A node store in a dict: what unit tests hand the engine."""

    def __init__(self) -> None:
        self.rows: dict = {}
        self.fetches = 0

    def put(self, where, first: int, blob: bytes) -> None:
        self.rows[(where, first)] = blob

    def fetch(self, where, first: int) -> bytes:
        self.fetches += 1
        try:
            return self.rows[(where, first)]
        except KeyError:
            raise ColdReadError(f"node {first >> 64}-{first & (2**64 - 1)} not in the store") from None


class NodeCache:
    """The budget for resident durable sealed nodes, their LRU and the counters."""

    def __init__(self) -> None:
        self.store = None
        self.budget = 0           # bytes; 0 = unbounded
        self.resident = 0         # bytes of the blobs of the nodes in ``lru``
        self.lru: OrderedDict = OrderedDict()   # evictable nodes, least recently used first
        self.cold_reads = 0       # fetches from the store (misses)
        self.hits = 0             # reads of a durable node that was resident
        self.evictions = 0
        self.sealed_pending = 0   # bytes sealed since the last durable point (see take_pending)
        # A MemoryStore that makes every node durable as it is sealed (tests: every
        # command path then meets cold nodes without a snapshot).
        self.write_through: MemoryStore | None = None
        self._rows = 0

    # -- configuration ------------------------------------------------------------

    def configure(self, store, budget: int) -> None:
        """Hand the store and the byte budget (start-up, CONFIG SET); evicts down to it."""
        self.store = store
        self.budget = budget
        self.evict()

    @property
    def bounded(self) -> bool:
        return self.budget > 0

    def forget_nodes(self) -> None:
        """The data set is replaced (DEBUG RELOAD): no node of it stays evictable."""
        self.lru.clear()
        self.resident = 0

    def reset(self) -> None:
        """Forget every node and counter (tests; a fresh data set)."""
        self.__init__()

    # -- the nodes ----------------------------------------------------------------

    def sealed(self, node) -> None:
        """``node`` was sealed (or arrived sealed): its bytes wait to become durable."""
        blob = node.blob
        self.sealed_pending += len(blob)
        if self.write_through is not None:
            self._rows += 1
            self.write_through.put(self._rows, node.first, blob)
            self.made_durable(node, self._rows)

    def fetch(self, node) -> bytes:
        """The blob of cold ``node`` from the store; the node is resident (and
        evictable) again."""
        if self.store is None:
            raise ColdReadError("a cold stream node but no node store")
        blob = self.store.fetch(node.where, node.first)
        self.cold_reads += 1
        node.blob = blob
        self._admit(node, blob)
        return blob

    def touch(self, node) -> None:
        """A read of resident durable ``node``: it becomes the most recently used."""
        self.hits += 1
        lru = self.lru
        if node in lru:
            lru.move_to_end(node)

    def made_durable(self, node, where) -> None:
        """The store holds ``node``'s blob at ``where``: the node may go cold."""
        node.where = where
        blob = node.blob
        if blob is not None and node not in self.lru:
            self._admit(node, blob)

    def discard(self, node) -> None:
        """``node`` left the stream or changes shape (unseal): not evictable any more."""
        if self.lru.pop(node, False) is not False and node.blob is not None:
            self.resident -= len(node.blob)

    def _admit(self, node, blob: bytes) -> None:
        self.lru[node] = None
        self.resident += len(blob)
        if self.budget and self.resident > self.budget:
            self.evict()

    def evict(self) -> None:
        """Drop blobs, least recently used first, until the resident bytes fit."""
        if not self.budget:
            return
        lru = self.lru
        while self.resident > self.budget and lru:
            node, _ = lru.popitem(last=False)
            blob = node.blob
            if blob is None:
                continue
            self.resident -= len(blob)
            node.go_cold()
            self.evictions += 1

    # -- not yet durable ------------------------------------------------------------

    def take_pending(self) -> int:
        """The bytes sealed since the last call (a snapshot starts: they are in it)."""
        n, self.sealed_pending = self.sealed_pending, 0
        return n

    def stats(self) -> dict:
        reads = self.hits + self.cold_reads
        return {
            "stream_cache_size": self.budget,
            "stream_cache_resident_bytes": self.resident,
            "stream_cache_evictable_nodes": len(self.lru),
            "stream_cache_cold_reads": self.cold_reads,
            "stream_cache_hits": self.hits,
            "stream_cache_hit_rate": f"{self.hits / reads:.4f}" if reads else "1.0000",
            "stream_cache_evictions": self.evictions,
            "stream_cache_sealed_pending_bytes": self.sealed_pending,
        }


# The process's one cache: nodes reach it without knowing their stream or server (a
# Node holds no back reference), as the decoded-node LRU in stream.py does.
CACHE = NodeCache()
