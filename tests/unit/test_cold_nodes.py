"""Cold sealed nodes (engine/nodecache.py): a stream whose durable nodes are evicted
and fetched back from a node store reads and changes exactly as one that keeps
everything in memory.

Random operation sequences run on two streams: one with an in-memory node store
and a tiny budget, whose sealed nodes are made durable and evicted at random
points (and which is reloaded with its nodes left cold, as a restart does), and a
reference that never goes cold (no node of it has a location, so the cache never
touches it).  Every result and everything a reader can see must be equal.  The
cold stream runs on the compiled engine and on its source (compiled.load_source).
"""

from __future__ import annotations

import importlib

import pytest
from hypothesis import given, settings, strategies as st

from streamdb import compiled
from streamdb.engine.nodecache import CACHE, ColdReadError, MemoryStore
from streamdb.persistence import codec

from test_compiled_engine import apply_stream_op, outcome, stream_ops

cold_ops = st.one_of(
    stream_ops,
    st.tuples(st.just("durable"), st.floats(0, 1)),
    st.tuples(st.just("durable"), st.just(1.0)),
    st.tuples(st.just("evict"), st.integers(0, 150)),
    st.tuples(st.just("reload")),
    st.tuples(st.just("iterate")),
)


def readable_state(s) -> tuple:
    """What readers see (not where the bytes are)."""
    nodes = [(n.first, n.last, n.total, n.live, n.nbytes,
              sorted(n.deleted) if n.deleted is not None else None, n.contents())
             for n in s.nodes]
    return (s.length, s.last_id, s.entries_added, s.max_deleted_id, s.firsts, s.first_id(),
            nodes, list(s), s.first_entry(), s.last_entry(), s.node_count())


def engines() -> list:
    fast = importlib.import_module("streamdb.engine.stream")
    mods = [fast]
    if compiled.is_compiled(fast):
        mods.append(compiled.load_source("streamdb.engine.stream"))
    return mods


class ColdStream:
    """A stream of engine module ``mod`` whose sealed nodes go to ``store``."""

    def __init__(self, mod, store: MemoryStore, where) -> None:
        self.mod = mod
        self.s = mod.Stream()
        self.store = store
        self.where = where
        self.last = [0]

    def make_durable(self, share: float) -> None:
        """The first ``share`` of the not yet durable sealed nodes become durable."""
        pending = [n for n in self.s.nodes if n.ids is None and n.where is None]
        for node in pending[:int(len(pending) * share + 0.5)]:
            self.store.put(self.where, node.first, node.sealed_blob())
            CACHE.made_durable(node, self.where)

    def reload(self) -> None:
        """Write the stream as a snapshot does, load it back with its nodes cold."""
        external: list = []
        raw = codec.encode_value(self.s, external)
        for node in external:
            self.store.put(self.where, node.first, node.sealed_blob())
        for node in self.s.nodes:
            node.forget()
        self.s = codec.decode_value(raw, lambda first: self.store.fetch(self.where, first),
                                    cold_where=self.where)
        assert all(n.blob is None for n in self.s.nodes[:-1] if n.ids is None)


def apply(cs, ref, ref_last, op, max_entries, max_bytes):
    kind = op[0]
    if kind == "durable":
        cs.make_durable(op[1])
        return None, None
    if kind == "evict":
        CACHE.configure(cs.store, op[1])
        return None, None
    if kind == "reload":
        cs.reload()
        return None, None
    if kind == "iterate":
        return list(cs.s), list(ref)
    got = outcome(lambda: apply_stream_op(cs.s, cs.last, op, max_entries, max_bytes))
    want = outcome(lambda: apply_stream_op(ref, ref_last, op, max_entries, max_bytes))
    return got, want


@pytest.fixture(autouse=True)
def fresh_cache():
    CACHE.reset()
    yield
    CACHE.reset()


@settings(max_examples=150, deadline=None)
@given(ops=st.lists(cold_ops, max_size=50),
       max_entries=st.sampled_from([1, 2, 3, 5, 100]),
       max_bytes=st.sampled_from([0, 0, 40, 4096]),
       budget=st.integers(1, 120))
def test_a_cold_stream_reads_and_changes_as_a_resident_one(ops, max_entries, max_bytes, budget):
    for mod in engines():
        CACHE.reset()
        store = MemoryStore()
        CACHE.configure(store, budget)
        cs = ColdStream(mod, store, b"key")
        ref = mod.Stream()
        ref_last = [0]
        for op in ops:
            got, want = apply(cs, ref, ref_last, op, max_entries, max_bytes)
            assert got == want, (mod.__name__, op)
            assert readable_state(cs.s) == readable_state(ref), (mod.__name__, op)
            assert CACHE.resident <= max(CACHE.budget, 0) or not CACHE.budget
        # Nothing kept resident is counted twice or lost.
        assert CACHE.resident == sum(len(n.blob) for n in CACHE.lru if n.blob is not None)


def make_sealed(mod, n_nodes: int, per_node: int = 3):
    s = mod.Stream()
    sid = 1 << 64
    for _ in range(n_nodes * per_node + 1):
        s.append(sid, [b"f", b"v%d" % sid], per_node, 0)
        sid += 1
    return s


@pytest.mark.parametrize("mod", engines(), ids=lambda m: "compiled" if compiled.is_compiled(m) else "source")
def test_eviction_keeps_resident_bytes_within_the_budget_and_counts(mod):
    store = MemoryStore()
    s = make_sealed(mod, 20)
    sealed = [n for n in s.nodes if n.ids is None]
    size = len(sealed[0].sealed_blob())
    CACHE.configure(store, 3 * size)
    for node in sealed:
        store.put(b"k", node.first, node.blob)
        CACHE.made_durable(node, b"k")
    assert CACHE.resident <= 3 * size
    assert sum(n.blob is None for n in sealed) >= len(sealed) - 3
    assert CACHE.evictions >= len(sealed) - 3
    before = store.fetches
    assert len(s.range(0, 1 << 128)) == len(list(s)) == s.length
    assert store.fetches > before and CACHE.cold_reads >= len(sealed) - 3
    # Unbounded again: what is loaded stays; nothing more is evicted.
    CACHE.configure(store, 0)
    evictions = CACHE.evictions
    list(s)
    assert CACHE.evictions == evictions


@pytest.mark.parametrize("mod", engines(), ids=lambda m: "compiled" if compiled.is_compiled(m) else "source")
def test_unsealing_a_cold_tail_forgets_its_location(mod):
    store = MemoryStore()
    s = mod.Stream()
    for i in range(3):
        s.append((1 << 64) + i, [b"f", b"v"], 3, 0)
    tail = s.nodes[-1]
    tail.seal()
    store.put(b"k", tail.first, tail.blob)
    CACHE.configure(store, 1)
    CACHE.made_durable(tail, b"k")
    assert tail.blob is None and tail.where == b"k"
    s.append((1 << 64) + 3, [b"f", b"w"], 5, 0)     # room left in the tail: it reopens
    assert tail.ids is not None and tail.where is None and tail not in CACHE.lru
    assert [e[0] & 0xFF for e in s] == [0, 1, 2, 3]


def test_a_missing_row_fails_the_read_with_a_clear_error():
    mod = engines()[0]
    store = MemoryStore()
    s = make_sealed(mod, 2)
    node = s.nodes[0]
    CACHE.configure(store, 1)
    CACHE.made_durable(node, b"k")      # claims durability the store does not have
    with pytest.raises(ColdReadError, match="not in the store"):
        s.range(0, 1 << 128)
