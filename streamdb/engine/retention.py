"""Retention: which of a stream's leading nodes its age and size limits let go.

A stream's retention is by whole nodes, like ``~`` trimming: a node goes when
its last entry is older than the maximum age (ids carry milliseconds), or while
the stream's bytes exceed the maximum size; never the stream's last node (the
one XADD appends to), and never past the bound the ACKED rule sets
(engine/policies.py's ``acked_bound``).  The decision is the primary's alone
(it reaches the AOF and replicas as an exact ``XTRIM key MINID = <id>``), so
the time and the ACKED bound come in as arguments: nothing here reads a clock.

The stream's bytes are the sum of its nodes' byte counts (what
``stream-node-max-bytes`` bounds).  Summing a 100M-entry stream's million
nodes on every tick would stall the loop, so a policy keeps a tally of its
stream's leading nodes, extended by a bounded number of nodes per call.  A
node other than the last never changes its byte count (XDEL only marks), and
nodes are only ever added after the last one, so the tally stays exact while
the nodes it counted are all still there; when some went (XTRIM, XDEL) it is
counted again.  Until the tally reaches the last node it is a lower bound, so
the size rule can trim too little for a while, never too much.
"""

from __future__ import annotations

from bisect import bisect_left

from .ids import MIN_ID
from .stream import Node, Stream

__all__ = ["RetentionPolicy", "node_byte_counts"]


def node_byte_counts(s: Stream) -> tuple[int, int]:
    """(the stream's bytes, the part of them in memory): its nodes' byte counts, the
    measure MAXBYTES limits, and of those the nodes whose content is resident (the
    open node, sealed nodes holding their blob); a cold node's content is on disk only
    (engine/nodecache.py).  Walks every node header: O(nodes), no node is read back."""
    total = resident = 0
    node: Node
    for node in s.nodes:
        total += node.nbytes
        if node.blob is not None or node.ids is not None:
            resident += node.nbytes
    return total, resident


class RetentionPolicy:
    """A stream's own retention settings (None: the server's default applies),
    what retention removed from it since the server started, and its byte tally."""

    __slots__ = ("max_age_ms", "max_bytes", "acked", "trimmed_entries", "trimmed_nodes",
                 "_tally_upto", "_tally_nodes", "_tally_bytes")

    def __init__(self, max_age_ms: int | None = None, max_bytes: int | None = None,
                 acked: bool | None = None) -> None:
        self.max_age_ms = max_age_ms
        self.max_bytes = max_bytes
        self.acked = acked
        self.trimmed_entries = 0
        self.trimmed_nodes = 0
        # The tally: the bytes of the leading nodes whose first id is below _tally_upto
        # (_tally_nodes of them).
        self._tally_upto = MIN_ID
        self._tally_nodes = 0
        self._tally_bytes = 0

    # -- settings (the stream's state: persisted, replicated, in DEBUG DIGEST) --------

    def settings(self) -> tuple:
        """(max age ms, max bytes, acked), None where the server's default applies."""
        return self.max_age_ms, self.max_bytes, self.acked

    def has_settings(self) -> bool:
        return self.settings() != (None, None, None)

    def arguments(self) -> list[bytes]:
        """The ``STREAMDB.RETENTION SET`` options that give these settings."""
        args = []
        if self.max_age_ms is not None:
            args += [b"MAXAGE", b"%d" % self.max_age_ms]
        if self.max_bytes is not None:
            args += [b"MAXBYTES", b"%d" % self.max_bytes]
        if self.acked is not None:
            args.append(b"ACKED" if self.acked else b"NOACKED")
        return args

    def effective(self, max_age_ms: int, max_bytes: int, acked: bool) -> tuple[int, int, bool]:
        """The settings in force, given the server's defaults."""
        return (max_age_ms if self.max_age_ms is None else self.max_age_ms,
                max_bytes if self.max_bytes is None else self.max_bytes,
                acked if self.acked is None else self.acked)

    # -- the decision ---------------------------------------------------------------

    def nodes_to_drop(self, s: Stream, max_age_ms: int, max_bytes: int, now_ms: int,
                      stop_id: int, most: int, count_most: int) -> int:
        """How many leading nodes of ``s`` retention removes now: at most ``most``,
        never the last node, none whose last id is >= ``stop_id`` (ACKED).  Extends
        the byte tally by at most ``count_most`` nodes.

        The caller removes exactly that many (``Stream.trim(minid=s.firsts[n], approx=True)``):
        the tally already leaves them out.
        """
        nodes = s.nodes
        limit = min(len(nodes) - 1, most)
        if limit <= 0:
            return 0
        known = self._known_bytes(s, count_most if max_bytes else 0)
        excess = known - max_bytes if max_bytes else 0
        oldest_kept_ms = now_ms - max_age_ms if max_age_ms else -1
        counted = self._tally_nodes
        n = 0
        dropped_bytes = 0
        node: Node
        while n < limit:
            node = nodes[n]
            if node.last >= stop_id:
                break
            if n < counted and excess > 0:
                excess -= node.nbytes
                dropped_bytes += node.nbytes
            elif (node.last >> 64) >= oldest_kept_ms:
                break
            elif n < counted:
                dropped_bytes += node.nbytes
            n += 1
        if n <= counted:
            self._tally_nodes -= n
            self._tally_bytes -= dropped_bytes
        else:
            self._tally_upto, self._tally_nodes, self._tally_bytes = MIN_ID, 0, 0
        return n

    def _known_bytes(self, s: Stream, count_most: int) -> int:
        """The stream's bytes, or a lower bound while the tally has not reached its
        last node; counts at most ``count_most`` more nodes."""
        nodes = s.nodes
        if bisect_left(s.firsts, self._tally_upto) != self._tally_nodes:
            # Some counted node went (XTRIM, XDEL, a trim by another policy): count again.
            self._tally_upto, self._tally_nodes, self._tally_bytes = MIN_ID, 0, 0
        start = self._tally_nodes
        end = min(len(nodes) - 1, start + count_most)     # the last node still grows
        if end > start:
            node: Node
            for node in nodes[start:end]:
                self._tally_bytes += node.nbytes
            self._tally_nodes = end
            self._tally_upto = nodes[end].first
        known = self._tally_bytes
        if self._tally_nodes == len(nodes) - 1:
            known += nodes[-1].nbytes
        return known

    # -- persistence ----------------------------------------------------------------

    def dump(self) -> list:
        return list(self.settings())

    @classmethod
    def load(cls, raw) -> "RetentionPolicy":
        """From ``dump()``'s form; ValueError on anything else (a hostile file)."""
        if type(raw) is not list or len(raw) != 3:
            raise ValueError("bad retention settings")
        max_age, max_bytes, acked = raw
        for v in (max_age, max_bytes):
            if v is not None and (type(v) is not int or v < 0):
                raise ValueError("bad retention settings")
        if acked is not None and type(acked) is not bool:
            raise ValueError("bad retention settings")
        return cls(max_age, max_bytes, acked)
