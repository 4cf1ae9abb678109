"""The compiled engine modules behave exactly as their sources.

engine/stream.py, sortedids.py, groups.py, ids.py, keyspace.py and lag.py are each one source that runs
interpreted and is compiled (streamdb/compiled.py).  The source is the
specification: random sequences of operations are applied to an object of the
compiled module and to one of ``compiled.load_source``'s, and every result, every
exception and the whole observable state after each step must be the same.
Streams get tiny node limits, so nodes are opened, sealed, decoded, partly deleted
and dropped all the time.  Under STREAMDB_PURE=1 both sides are the source and
these tests are skipped (the rest of the suite runs the source then).
"""

from __future__ import annotations

import importlib

import pytest
from hypothesis import assume, given, settings, strategies as st

from streamdb import compiled

ENGINE = ("streamdb.engine.stream", "streamdb.engine.sortedids", "streamdb.engine.groups",
          "streamdb.engine.ids", "streamdb.engine.keyspace", "streamdb.engine.lag")

pytestmark = pytest.mark.skipif(
    not all(compiled.is_compiled(importlib.import_module(name)) for name in ENGINE),
    reason="the engine runs from its source (STREAMDB_PURE or not built): nothing to compare")


def both(name: str):
    """(compiled module, source module)."""
    return importlib.import_module(name), compiled.load_source(name)


def outcome(call):
    """What a call gives: ("ok", result) or ("raised", exception type, args)."""
    try:
        return "ok", call()
    except Exception as e:  # noqa: BLE001 (the exact exception is what is compared)
        return "raised", type(e).__name__, e.args


def mid(ms: int, seq: int) -> int:
    return (ms << 64) | seq


# -- streams -------------------------------------------------------------------------

field_lists = st.sampled_from([
    [b"f", b"v"], [b"f", b"w"], [b"f", b"v", b"g", b"x"], [b"g", b"1"], [b"f", b""],
    [b"long", b"x" * 40],
])
small_ids = st.builds(mid, st.integers(0, 30), st.integers(0, 3))

stream_ops = st.one_of(
    st.tuples(st.just("append"), st.integers(0, 3), st.integers(0, 3), field_lists),
    st.tuples(st.just("append_many"), st.integers(1, 15), field_lists),
    st.tuples(st.just("delete"), small_ids),
    st.tuples(st.just("trim_maxlen"), st.integers(0, 30), st.booleans(), st.integers(0, 12),
              st.sampled_from([None, mid(10, 0), mid(20, 2)])),
    st.tuples(st.just("trim_minid"), small_ids, st.booleans(), st.integers(0, 12)),
    st.tuples(st.just("range"), small_ids, small_ids, st.integers(-1, 12), st.booleans()),
    st.tuples(st.just("get"), small_ids),
)


def stream_state(s) -> tuple:
    """Everything a reader of a Stream can see, nodes included."""
    nodes = [(n.first, n.last, n.total, n.live, n.nbytes, n.master, n.ids, n.entries, n.blob,
              sorted(n.deleted) if n.deleted is not None else None, n.contents())
             for n in s.nodes]
    return (s.length, s.last_id, s.entries_added, s.max_deleted_id, s.firsts, s.first_id(),
            nodes, list(s), s.first_entry(), s.last_entry(), s.node_count(),
            s.memory_estimate())


def apply_stream_op(s, last: list, op, max_entries: int, max_bytes: int):
    kind = op[0]
    if kind in ("append", "append_many"):
        steps = [(op[1], op[2], op[3])] if kind == "append" else [(0, 0, op[2])] * op[1]
        for gap_ms, seq, fv in steps:
            sid = mid((last[0] >> 64) + gap_ms, seq)
            if sid <= last[0]:
                sid = last[0] + 1
            s.append(sid, list(fv), max_entries, max_bytes)
            last[0] = sid
        return None
    if kind == "delete":
        return s.delete(op[1])
    if kind == "trim_maxlen":
        removed: list = []
        kw = {} if op[4] is None else {"stop_id": op[4]}
        return s.trim(maxlen=op[1], approx=op[2], limit=op[3], removed=removed, **kw), removed
    if kind == "trim_minid":
        return s.trim(minid=op[1], approx=op[2], limit=op[3])
    if kind == "range":
        lo, hi = min(op[1], op[2]), max(op[1], op[2])
        return s.range(lo, hi, op[3], rev=op[4])
    return s.get(op[1])


@settings(max_examples=150, deadline=None)
@given(ops=st.lists(stream_ops, max_size=40),
       max_entries=st.sampled_from([1, 2, 3, 5, 100]),
       max_bytes=st.sampled_from([0, 0, 40, 4096]))
def test_stream_operations_agree_with_the_source(ops, max_entries, max_bytes):
    fast, spec = both("streamdb.engine.stream")
    a, b = fast.Stream(), spec.Stream()
    last_a, last_b = [0], [0]
    for op in ops:
        got = outcome(lambda: apply_stream_op(a, last_a, op, max_entries, max_bytes))
        want = outcome(lambda: apply_stream_op(b, last_b, op, max_entries, max_bytes))
        assert got == want, op
        assert stream_state(a) == stream_state(b), op


@settings(max_examples=100, deadline=None)
@given(ops=st.lists(stream_ops, max_size=40),
       max_entries=st.sampled_from([1, 2, 3, 100]),
       sealed_flags=st.sampled_from([0, 2]))
def test_node_headers_agree_with_the_source(ops, max_entries, sealed_flags):
    """The header column a snapshot writes: the compiled packer's bytes and indexes are
    the source's, for the compiled Node and (by its plain way) the source's Node."""
    fast, spec = both("streamdb.engine.stream")
    a, b = fast.Stream(), spec.Stream()
    last_a, last_b = [0], [0]
    for op in ops:
        outcome(lambda: apply_stream_op(a, last_a, op, max_entries, 0))
        outcome(lambda: apply_stream_op(b, last_b, op, max_entries, 0))
    want = spec.node_headers(b.nodes, sealed_flags)
    assert fast.node_headers(a.nodes, sealed_flags) == want
    assert fast.node_headers(b.nodes, sealed_flags) == want
    assert len(want[0]) == spec.NODE_HEADER.size * len(b.nodes)


@pytest.mark.parametrize("field", ["total", "live", "nbytes"])
@pytest.mark.parametrize("value", [2**32 - 1, 2**32, -1, 2**70, True])
def test_node_header_counts_out_of_range_fail_as_in_the_source(field, value):
    """A count a hostile RESTORE payload set fails the header packing with struct's own
    error in both forms (and True packs as 1, as struct takes it)."""
    results = []
    for module in both("streamdb.engine.stream"):
        s = module.Stream()
        s.append(mid(1, 0), [b"f", b"v"], 100, 0)
        node = s.nodes[0]
        node.seal()
        setattr(node, field, value)
        results.append(outcome(lambda: module.node_headers([node], 0)))
    assert results[0] == results[1]


@settings(max_examples=100, deadline=None)
@given(first_ms=st.integers(0, 2**64 - 1),
       rows=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 5), field_lists),
                     min_size=1, max_size=20))
def test_node_encoding_agrees_with_the_source(first_ms, rows):
    """encode_node/decode_node (sealing, snapshots) give the same blob and entries,
    consecutive ids (one millisecond) and scattered ones alike."""
    fast, spec = both("streamdb.engine.stream")
    ids, entries, sid = [], [], mid(first_ms, 0)
    for gap_ms, gap_seq, fv in rows:
        sid = sid + gap_seq if not gap_ms else mid((sid >> 64) + gap_ms, gap_seq)
        if ids and sid <= ids[-1]:
            sid = ids[-1] + 1
        if sid >> 64 >= 2**64:
            break
        ids.append(sid)
        entries.append(list(fv))
    assume(ids)     # the first id itself past the last possible millisecond: no node
    master = entries[0][0::2]
    blob = fast.encode_node(master, ids, [list(e) for e in entries])
    assert blob == spec.encode_node(master, ids, [list(e) for e in entries])
    assert fast.decode_node(blob) == spec.decode_node(blob) == (ids, entries)


def test_a_run_of_ids_across_a_millisecond_decodes_as_the_source():
    """Consecutive ids whose sequence numbers pass 64 bits (the last sequence number
    of one millisecond, then the next millisecond's 0) are one run in the blob; the
    compiled decode builds a run's ids from a C sequence number and must take the
    carry into the millisecond as the source's range does."""
    fast, spec = both("streamdb.engine.stream")
    ids = [mid(5, 2**64 - 3) + i for i in range(5)] + [mid(9, 2**64 - 1), mid(10, 0)]
    entries = [[b"f", b"%d" % i] for i in range(len(ids))]
    blob = fast.encode_node([b"f"], ids, [list(e) for e in entries])
    assert fast.decode_node(blob) == spec.decode_node(blob) == (ids, entries)


# Numbers and sizes around each varint length (1 byte below 2**7, 2 below 2**14, ...),
# and items that are canonical integers or only look like them (the compiled
# encode_node writes the bytes itself and tests the digits in C).
_edge_uints = st.sampled_from([0, 1, 127, 128, 255, 256, 16383, 16384, 65535, 65536,
                               2**32 - 1, 2**32, 2**63, 2**64 - 1])
_edge_bytes = st.one_of(
    st.binary(max_size=3),
    st.sampled_from([0, 31, 32, 63, 64, 255, 256, 8191, 8192, 65535, 65536])
    .map(lambda n: b"x" * n),
    st.sampled_from([b"0", b"-0", b"00", b"07", b"-7", b"-", b"+1", b"1234", b"19.8", b"1e3",
                     b"123456789012345678", b"-123456789012345678", b"1234567890123456789",
                     b"-1234567890123456789", b"9" * 18]))


@settings(max_examples=150, deadline=None)
@given(first_ms=st.one_of(_edge_uints, st.integers(0, 2**64 - 1)),
       first_seq=st.one_of(_edge_uints, st.integers(0, 2**64 - 1)),
       gaps=st.lists(st.tuples(st.one_of(st.just(0), _edge_uints), _edge_uints),
                     min_size=0, max_size=40),
       master=st.lists(_edge_bytes, max_size=3),
       rows=st.lists(st.one_of(st.none(), st.lists(_edge_bytes, max_size=8)), min_size=41,
                     max_size=41))
def test_node_bytes_at_the_format_limits_agree_with_the_source(first_ms, first_seq, gaps,
                                                                master, rows):
    """The compiled encode_node writes the blob itself: every varint length, integer
    and byte items, id runs and gaps (and entries with and without the master
    fields) give the source's bytes."""
    fast, spec = both("streamdb.engine.stream")
    ids = [mid(first_ms, first_seq)]
    for gap_ms, seq in gaps:
        nxt = ids[-1] + 1 + seq % 1000 if not gap_ms else mid((ids[-1] >> 64) + gap_ms, seq)
        if nxt >> 64 >= 2**64 or nxt >= 2**128:
            break
        ids.append(nxt)
    entries = []
    for row in rows[:len(ids)]:
        if row is None:      # an entry with the master fields
            fv = [x for f in master for x in (f, b"v")]
        else:
            fv = row[:len(row) // 2 * 2]
        entries.append(fv)
    blob = fast.encode_node(master, ids, [list(e) for e in entries])
    assert blob == spec.encode_node(master, ids, [list(e) for e in entries])
    assert fast.decode_node(blob) == spec.decode_node(blob)


# -- keyspace ------------------------------------------------------------------------

class Watcher:
    """What a WATCHing client is to a Database: something with ``dirty_cas``."""

    def __init__(self) -> None:
        self.dirty_cas = False


keys = st.sampled_from([b"a", b"b", b"c"])
keyspace_ops = st.one_of(
    st.tuples(st.just("set"), st.integers(0, 2), keys, st.binary(max_size=2), st.booleans()),
    st.tuples(st.just("delete"), st.integers(0, 2), keys),
    st.tuples(st.just("expire"), st.integers(0, 2), keys, st.integers(0, 10)),
    st.tuples(st.just("is_expired"), st.integers(0, 2), keys, st.integers(0, 10)),
    st.tuples(st.just("watch"), st.integers(0, 2), keys),
    st.tuples(st.just("touch"), st.integers(0, 2), keys),
    st.tuples(st.just("clear"), st.integers(0, 2)),
    st.tuples(st.just("swap"), st.integers(0, 2), st.integers(0, 2)),
)


def apply_keyspace_op(ks, watchers: list, op):
    name, i, *args = op
    db = ks[i]
    if name == "set":
        key, value, keep_ttl = args
        return db.set(key, value, keep_ttl=keep_ttl)
    if name == "delete":
        return db.delete(args[0])
    if name == "expire":
        if args[0] in db.data:
            db.expires[args[0]] = args[1]
        return None
    if name == "is_expired":
        return db.is_expired(*args)
    if name == "watch":
        watchers.append((i, args[0], Watcher()))
        db.watchers.setdefault(args[0], set()).add(watchers[-1][2])
        return None
    if name == "touch":
        return db.touch(args[0])
    if name == "clear":
        return db.clear()
    return ks.swap(i, args[0])


def keyspace_state(ks, watchers: list):
    return ([(db.index, len(db), dict(db.data), dict(db.expires)) for db in ks.dbs],
            [(i, key, w.dirty_cas) for i, key, w in watchers])


@settings(max_examples=150, deadline=None)
@given(ops=st.lists(keyspace_ops, max_size=40))
def test_keyspace_operations_agree_with_the_source(ops):
    fast, spec = both("streamdb.engine.keyspace")
    a, b = fast.Keyspace(3), spec.Keyspace(3)
    wa, wb = [], []
    for op in ops:
        assert outcome(lambda: apply_keyspace_op(a, wa, op)) == \
            outcome(lambda: apply_keyspace_op(b, wb, op)), op
        assert keyspace_state(a, wa) == keyspace_state(b, wb), op



# -- lag -----------------------------------------------------------------------------

lag_points = st.builds(mid, st.integers(0, 32), st.integers(0, 3))


def lag_figures(lag, s, g, points: list[int], now_ms: int) -> list:
    """What each of lag.py's readers gives for stream ``s`` and group ``g`` (at each of
    ``points``, an id or a time), and what its writers leave in a copy of the group."""
    figures = [outcome(lambda: lag.group_lag(s, g)), outcome(lambda: lag.time_lag_ms(s, g, now_ms)),
               outcome(lambda: lag.oldest_pending_ms(g, now_ms)),
               outcome(lambda: lag.oldest_pending_idle_ms(g, now_ms)),
               outcome(lambda: lag.groups_progress([s, s], [g, g], now_ms)),
               outcome(lambda: lag.position_earliest(s)), outcome(lambda: lag.position_latest(s))]
    for p in points:
        figures += [outcome(lambda: lag.range_has_tombstones(s, p, None)),
                    outcome(lambda: lag.range_has_tombstones(s, None, p)),
                    outcome(lambda: lag.estimate_entries_read(s, p)),
                    outcome(lambda: lag.counter_trusted(s, g, p)),
                    outcome(lambda: lag.first_entry_after(s, p)),
                    outcome(lambda: lag.last_entry_before(s, p)),
                    outcome(lambda: lag.entries_read_at(s, p)),
                    outcome(lambda: lag.position_at_time(s, p >> 64)),
                    outcome(lambda: lag.clamp_entries_read(s, p & 0xFF))]
    copy = type(g)(g.name, g.last_id, g.entries_read)
    ahead = [p for p in points if p > copy.last_id]
    if ahead:
        figures.append(outcome(lambda: lag.advance_entries_read_many(s, copy, sorted(set(ahead)))))
        figures.append((copy.last_id, copy.entries_read))
    return figures


@settings(max_examples=150, deadline=None)
@given(ops=st.lists(stream_ops, max_size=30), max_entries=st.sampled_from([1, 2, 3, 100]),
       last_id=lag_points, entries_read=st.integers(-1, 40), pending=st.lists(lag_points, max_size=4),
       points=st.lists(lag_points, max_size=6), now_ms=st.integers(0, 40), nacked=st.booleans())
def test_lag_figures_agree_with_the_source(ops, max_entries, last_id, entries_read, pending, points,
                                           now_ms, nacked):
    """lag.py compiled and as source read the same stream and group alike (nodes opened,
    sealed, with deleted entries; counters known, unknown and wrong)."""
    fast, spec = both("streamdb.engine.lag")
    s = importlib.import_module("streamdb.engine.stream").Stream()
    last = [0]
    for op in ops:
        outcome(lambda: apply_stream_op(s, last, op, max_entries, 0))
    groups = importlib.import_module("streamdb.engine.groups")
    g = groups.ConsumerGroup(b"g", last_id, entries_read)
    consumer = g.create_consumer(b"c", 0)
    for sid in pending:
        g.add_pending(sid, consumer, now_ms // 2)
    if nacked and pending:
        g.nack(min(pending), 0)                 # released: no owner, idle -1
    assert lag_figures(fast, s, g, points, now_ms) == lag_figures(spec, s, g, points, now_ms)


def test_a_node_of_bytes_subclasses_encodes_as_one_of_bytes():
    """The compiled encode_node writes exact bytes in C; anything else (a bytes
    subclass) takes the source's path and gives the same blob."""

    class Raw(bytes):
        pass

    for module in both("streamdb.engine.stream"):
        ids = [mid(5, 0), mid(5, 1), mid(7, 0)]
        entries = [[b"f", b"v"], [b"f", b"w"], [b"g", b"x"]]
        blob = module.encode_node([b"f"], ids, entries)
        assert module.encode_node([Raw(b"f")], ids,
                                  [[Raw(x) for x in e] for e in entries]) == blob
        assert module.decode_node(blob) == (ids, entries)


def test_stream_attributes_others_set_stay_writable():
    """persistence/codec.py builds Streams and Nodes attribute by attribute; a huge
    counter from a hostile payload is stored (and rejected later), not an overflow."""
    fast, _ = both("streamdb.engine.stream")
    node = fast.Node(mid(1, 0), [])
    node.master, node.last, node.total, node.live, node.nbytes = [b"f"], mid(2, 0), 2**70, 1, 5
    node.ids = node.entries = None
    node.blob, node.deleted = b"x", {mid(1, 0)}
    s = fast.Stream()
    s.length, s.last_id, s.entries_added, s.max_deleted_id = 2**70, mid(2, 0), 3, mid(1, 0)
    s.nodes, s.firsts, s.groups, s.idmp = [node], [node.first], {}, None
    assert (s.nodes[0].total, s.length, s.groups) == (2**70, 2**70, {})


# -- SortedIds -----------------------------------------------------------------------

sid_values = st.integers(0, 40)
sorted_ops = st.one_of(
    st.tuples(st.just("set"), sid_values, st.integers()),
    st.tuples(st.just("add"), sid_values),
    st.tuples(st.just("pop"), sid_values, st.booleans()),
    st.tuples(st.just("discard"), sid_values),
    st.tuples(st.just("del"), sid_values),
    st.tuples(st.just("append_new"), st.lists(st.integers(0, 60), min_size=1, max_size=8,
                                              unique=True).map(sorted)),
    st.tuples(st.just("pop_many"), st.lists(sid_values, min_size=1, max_size=10)),
    st.tuples(st.just("pop_oldest"), st.integers(1, 10)),
    st.tuples(st.just("irange"), st.one_of(st.none(), sid_values),
              st.one_of(st.none(), sid_values)),
    st.tuples(st.just("peek"), st.sampled_from([0, -1, 1])),
    st.tuples(st.just("clear")),
)


def apply_sorted_op(s, op):
    kind = op[0]
    if kind == "set":
        s[op[1]] = op[2]
    elif kind == "add":
        s.add(op[1])
    elif kind == "pop":
        return s.pop(op[1], "none") if op[2] else s.pop(op[1])
    elif kind == "discard":
        s.discard(op[1])
    elif kind == "del":
        del s[op[1]]
    elif kind == "append_new":
        return s.append_new(op[1], [sid * 2 for sid in op[1]])
    elif kind == "pop_many":
        return s.pop_many(op[1])
    elif kind == "pop_oldest":      # XACK's usual order: oldest first
        return s.pop_many(list(s)[:op[1]])
    elif kind == "irange":
        return list(s.irange(op[1], op[2]))
    elif kind == "peek":
        return s.peekitem(op[1])
    else:
        s.clear()
    return None


def sorted_state(s) -> tuple:
    return (len(s), bool(s), list(s), list(s.keys()), list(s.items()),
            [(k, k in s, s.get(k, "absent")) for k in range(0, 61, 3)], repr(s))


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(sorted_ops, max_size=60))
def test_sortedids_operations_agree_with_the_source(ops):
    fast, spec = both("streamdb.engine.sortedids")
    a, b = fast.SortedIds(), spec.SortedIds()
    for op in ops:
        assert outcome(lambda: apply_sorted_op(a, op)) == outcome(lambda: apply_sorted_op(b, op)), op
        assert sorted_state(a) == sorted_state(b), op
        # Tombstones are dropped as the source drops them (the same memory use).
        assert (len(a._order), a._head) == (len(b._order), b._head), op


# -- consumer groups -----------------------------------------------------------------

names = st.sampled_from([b"alice", b"bob", b"carol"])
group_ops = st.one_of(
    st.tuples(st.just("create"), names, st.integers(0, 100)),
    st.tuples(st.just("deliver_new"), names, st.integers(1, 6), st.integers(0, 100)),
    st.tuples(st.just("claim"), names, sid_values, st.integers(0, 100), st.integers(1, 5)),
    st.tuples(st.just("ack"), sid_values),
    st.tuples(st.just("ack_many"), st.lists(st.integers(0, 80), max_size=10)),
    st.tuples(st.just("nack"), sid_values, st.integers(0, 5)),
    st.tuples(st.just("add_nacked"), sid_values, st.integers(0, 5)),
    st.tuples(st.just("delete_consumer"), names),
    st.tuples(st.just("pel_range"), sid_values, sid_values, st.integers(-1, 10),
              st.one_of(st.none(), names)),
)


def apply_group_op(g, next_id: list, op):
    kind = op[0]
    if kind == "create":
        return g.create_consumer(op[1], op[2]).name
    consumer = g.consumer(op[1]) if kind in ("deliver_new", "claim") else None
    if kind == "deliver_new":       # XREADGROUP >: ids above everything delivered
        if consumer is None:
            return "no consumer"
        sids = list(range(next_id[0], next_id[0] + op[2]))
        next_id[0] += op[2]
        return [(pe.delivery_time, pe.delivery_count)
                for pe in g.add_new_pending(sids, consumer, op[3])]
    if kind == "claim":             # XCLAIM: any id, maybe not pending
        if consumer is None:
            return "no consumer"
        pe = g.add_pending(op[2], consumer, op[3], op[4])
        return pe.owner_name, pe.idle(200), pe.claimable(200, 50)
    if kind == "ack":
        return g.ack(op[1])
    if kind == "ack_many":
        return g.ack_many(op[1])
    if kind == "nack":
        return g.nack(op[1], op[2])
    if kind == "add_nacked":
        return g.add_nacked(op[1], op[2])
    if kind == "delete_consumer":
        return g.delete_consumer(op[1])
    cons = None if op[4] is None else g.consumer(op[4])
    if op[4] is not None and cons is None:
        return "no consumer"
    return [(sid, pe.owner_name, pe.delivery_time, pe.delivery_count)
            for sid, pe in g.pel_range(op[1], op[2], op[3], cons)]


def group_state(g) -> tuple:
    pel = [(sid, pe.owner_name, pe.delivery_time, pe.delivery_count, pe.idle(150))
           for sid, pe in g.pel.items()]
    consumers = [(c.name, c.seen_time, c.active_time, list(c.pending))
                 for c in g.sorted_consumers()]
    return g.name, g.last_id, g.entries_read, pel, consumers, g.nacked_count()


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(group_ops, max_size=50))
def test_consumer_group_operations_agree_with_the_source(ops):
    fast, spec = both("streamdb.engine.groups")
    a, b = fast.ConsumerGroup(b"g"), spec.ConsumerGroup(b"g")
    next_a, next_b = [41], [41]
    for op in ops:
        got = outcome(lambda: apply_group_op(a, next_a, op))
        want = outcome(lambda: apply_group_op(b, next_b, op))
        assert got == want, op
        assert group_state(a) == group_state(b), op


# -- ids -----------------------------------------------------------------------------

id_pieces = st.sampled_from([b"0", b"1", b"00", b"18446744073709551615", b"18446744073709551616",
                             b"-", b"+", b"*", b"-0", b"-5", b" 7", b"+3", b"\t9", b"1\x002",
                             b"", b"(", b"x", b"99999999999999999999999", b"9223372036854775808"])
id_texts = st.one_of(
    st.lists(id_pieces, max_size=4).map(b"".join),
    st.builds(lambda a, b: b"%d-%d" % (a, b), st.integers(0, 2**65), st.integers(0, 2**65)),
    st.binary(max_size=140),
)


@settings(max_examples=500, deadline=None)
@given(text=id_texts, missing_seq=st.sampled_from([0, 2**64 - 1]), strict=st.booleans(),
       star=st.booleans())
def test_id_parsing_agrees_with_the_source(text, missing_seq, strict, star):
    """Valid and malformed ids alike: the same id, or the same exception."""
    fast, spec = both("streamdb.engine.ids")
    assert outcome(lambda: fast.parse_u64(text)) == outcome(lambda: spec.parse_u64(text))
    assert outcome(lambda: fast.parse_id(text, missing_seq, strict=strict, allow_seq_star=star)) \
        == outcome(lambda: spec.parse_id(text, missing_seq, strict=strict, allow_seq_star=star))
    assert outcome(lambda: fast.parse_interval_id(text, missing_seq)) \
        == outcome(lambda: spec.parse_interval_id(text, missing_seq))
    # (parse_strict_id is parse_id's strict id, with its C path for plain ids)
    assert outcome(lambda: fast.parse_strict_id(text)) \
        == outcome(lambda: spec.parse_strict_id(text)) \
        == outcome(lambda: spec.parse_id(text, 0, strict=True)[0])


@settings(max_examples=300, deadline=None)
@given(ms=st.integers(0, 2**64 - 1), seq=st.integers(0, 2**64 - 1))
def test_id_formatting_agrees_with_the_source(ms, seq):
    fast, spec = both("streamdb.engine.ids")
    sid = fast.make_id(ms, seq)
    assert sid == spec.make_id(ms, seq)
    assert (fast.id_ms(sid), fast.id_seq(sid)) == (spec.id_ms(sid), spec.id_seq(sid)) == (ms, seq)
    assert fast.format_id(sid) == spec.format_id(sid) == b"%d-%d" % (ms, seq)
    assert fast.parse_id(fast.format_id(sid)) == (sid, True)


@pytest.mark.parametrize("sid", [0, 1, 2**64, 2**128 - 1, 2**128, 2**200, -1, -(2**64), True])
def test_id_formatting_edges_agree_with_the_source(sid):
    """The compiled range test (the C conversion of the high half) sends exactly the ids
    outside 0..2**128-1, and anything not an int, to the source's formatting."""
    fast, spec = both("streamdb.engine.ids")
    assert fast.format_id(sid) == spec.format_id(sid) == b"%d-%d" % (sid >> 64, sid & (2**64 - 1))


@pytest.mark.parametrize("text", [
    b"18446744073709551615-18446744073709551615", b"18446744073709551616-0",
    b"18446744073709551619-0", b"0-18446744073709551620", b"1844674407370955161-5",
    b"000000000000000000000000000001-1", b"0-", b"-0", b"1--1", b"1-2-3", b"-", b"+",
    b"1-*", b"1\x00-2", b" 1-2", b"1-+2", b"\xff1-2", b"1-2\xb9", b"9" * 127, b"1-" + b"2" * 126,
])
def test_id_parsing_edges_agree_with_the_source(text):
    """The compiled fast path's edges: U64 exactly and one past it, bytes that are
    not ASCII digits, a second dash, the 127-byte limit."""
    fast, spec = both("streamdb.engine.ids")
    for star in (False, True):
        assert outcome(lambda: fast.parse_id(text, 7, allow_seq_star=star)) \
            == outcome(lambda: spec.parse_id(text, 7, allow_seq_star=star))
