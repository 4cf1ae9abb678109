"""Idempotent producers (XADD IDMP / IDMPAUTO): per stream, per producer, iid -> entry id.

A stream that has seen ``XADD ... IDMP pid iid`` keeps an ``IdmpState`` in
``Stream.idmp``.  For every producer id (pid) it holds an insertion-ordered map
of idempotent ids (iid) to the entry id the first XADD created.  A later XADD
with the same pid/iid adds nothing and answers that entry id.

Memory is bounded the way Redis bounds it:

* ``maxsize``: at most this many iids per producer; the oldest goes first;
* ``duration`` (seconds): an iid is forgotten once it is that old.

Determinism (AOF replay and replicas must rebuild the same maps):

* An iid's timestamp is the *millisecond part of its entry id*, not the wall
  clock, so ``XIDMPRECORD key pid iid <id>`` replayed later records exactly
  what the primary recorded.
* Only ``record`` changes the maps (it evicts the producer's expired and
  surplus iids, using the new entry's id time as "now").  ``lookup`` is pure:
  it treats an expired iid as absent but leaves it in place, so a duplicate
  XADD, which propagates nothing, changes nothing a replica would need to know.
  (The ``duplicates`` counter is the one exception: it is a statistic, like
  Redis's, and not replicated.)

``duration``/``maxsize`` are None until XCFGSET sets them; until then the
server's ``stream-idmp-duration``/``stream-idmp-maxsize`` apply, passed in by
the caller.  Nothing here reads a clock or the config.
"""

from __future__ import annotations

from .ids import id_ms

__all__ = ["IdmpState", "auto_iid", "DURATION_MIN", "DURATION_MAX", "MAXSIZE_MIN", "MAXSIZE_MAX"]

DURATION_MIN, DURATION_MAX = 1, 86400
MAXSIZE_MIN, MAXSIZE_MAX = 1, 10000


def auto_iid(fv: list[bytes]) -> bytes:
    """IDMPAUTO's iid: a digest of the field/value pairs, independent of their order."""
    import hashlib       # here, not at start-up (~2 ms of import); cached after the first call
    pairs = sorted(zip(fv[0::2], fv[1::2]))
    h = hashlib.blake2b(digest_size=16)
    for f, v in pairs:
        h.update(b"%d:" % len(f))
        h.update(f)
        h.update(b"%d:" % len(v))
        h.update(v)
    return h.digest()


class IdmpState:
    __slots__ = ("duration", "maxsize", "producers", "added", "duplicates")

    def __init__(self) -> None:
        self.duration: int | None = None       # seconds; None = server default
        self.maxsize: int | None = None        # None = server default
        # pid -> {iid: entry id}, oldest first (a dict keeps insertion order).  An
        # iid's time is its entry id's millisecond part (see the module's notes),
        # so it is not kept apart.  Plain dicts of bytes -> int on purpose: the
        # cyclic GC never tracks them, where an OrderedDict, or a tuple per iid,
        # made every young collection walk each iid recorded since the last one
        # (about 9 ms per 100k iids).
        self.producers: dict[bytes, dict[bytes, int]] = {}
        self.added = 0          # lifetime count of recorded iids (iids-added)
        self.duplicates = 0     # lifetime count of rejected duplicates (statistic)

    # -- settings -------------------------------------------------------------

    def effective(self, default_duration: int, default_maxsize: int) -> tuple[int, int]:
        return (self.duration if self.duration is not None else default_duration,
                self.maxsize if self.maxsize is not None else default_maxsize)

    def configure(self, duration: int | None, maxsize: int | None,
                  default_duration: int, default_maxsize: int) -> bool:
        """XCFGSET: set what is given; forget every producer if a value changed.

        Returns whether the maps were cleared.
        """
        cur_d, cur_m = self.effective(default_duration, default_maxsize)
        changed = (duration is not None and duration != cur_d) or \
                  (maxsize is not None and maxsize != cur_m)
        if duration is not None:
            self.duration = duration
        if maxsize is not None:
            self.maxsize = maxsize
        if changed:
            self.producers.clear()
        return changed

    # -- lookups and records ------------------------------------------------

    def lookup(self, pid: bytes, iid: bytes, now_ms: int, duration_s: int) -> int | None:
        """The entry id remembered for pid/iid, or None (never seen, or expired)."""
        m = self.producers.get(pid)
        if m is None:
            return None
        sid = m.get(iid)
        if sid is None:
            return None
        if (sid >> 64) + duration_s * 1000 <= now_ms:     # id_ms(sid): its time
            return None
        return sid

    def record(self, pid: bytes, iid: bytes, sid: int, duration_s: int, maxsize: int) -> None:
        """Remember pid/iid -> sid (a new entry), evicting by age and by size first."""
        t = id_ms(sid)
        m = self.producers.get(pid)
        if m is None:
            m = self.producers[pid] = {}
        else:
            m.pop(iid, None)          # an expired iid being reused
            limit = t - duration_s * 1000
            while m:
                oldest = next(iter(m))
                if m[oldest] >> 64 > limit:
                    break
                del m[oldest]
        while len(m) >= maxsize:
            del m[next(iter(m))]
        m[iid] = sid
        self.added += 1

    def mapped(self, pid: bytes, iid: bytes) -> tuple[int, int] | None:
        """(entry id, time ms) stored for pid/iid regardless of age (XIDMPRECORD's check)."""
        m = self.producers.get(pid)
        sid = None if m is None else m.get(iid)
        return None if sid is None else (sid, sid >> 64)

    # -- introspection ------------------------------------------------------

    def pids_tracked(self) -> int:
        return sum(1 for m in self.producers.values() if m)

    def iids_tracked(self) -> int:
        return sum(len(m) for m in self.producers.values())

    def items(self):
        """(pid, iid, entry id, time ms) in a canonical order (digests, snapshots)."""
        for pid in sorted(self.producers):
            for iid, sid in self.producers[pid].items():
                yield pid, iid, sid, sid >> 64

    def dump(self) -> list:
        """A plain-list form for snapshots (msgpack-able)."""
        low = (1 << 64) - 1
        # [iid, ms, seq, time]: the time (= ms) stays in the layout older files have.
        return [self.duration, self.maxsize, self.added, self.duplicates,
                [[pid, [[iid, sid >> 64, sid & low, sid >> 64] for iid, sid in m.items()]]
                 for pid, m in self.producers.items()]]

    @classmethod
    def load(cls, data: list) -> "IdmpState":
        st = cls()
        st.duration, st.maxsize, st.added, st.duplicates, producers = data
        for pid, items in producers:
            m = st.producers[pid] = {}
            for iid, ms, seq, _ in items:     # (the time is ms, kept for older readers)
                m[iid] = (ms << 64) | seq
        return st
