"""engine/stream.py against a model: a plain sorted list of (id, fields).

A Hypothesis state machine appends, deletes and trims (exact and ``~``, with
and without LIMIT) on a Stream with tiny nodes (so nodes are sealed, dropped
and partly deleted all the time) and on the model, and checks after every
step that ranges, reverse ranges, counts, length, first/last entry, lookups
and the counters agree.  Exact trims must remove exactly what the model does;
``~`` trims may stop early, but only at a node boundary, and never below the
threshold.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from streamdb.engine.ids import MAX_ID, MIN_ID, make_id
from streamdb.engine.stream import NODE_FORMAT, Stream, decode_node, encode_node, unpack_node

field_lists = st.sampled_from([
    [b"f", b"v"], [b"f", b"w"], [b"f", b"v", b"g", b"x"], [b"g", b"1"], [b"f", b""],
    [b"long", b"x" * 40],
])


class StreamModel(RuleBasedStateMachine):
    @initialize(max_entries=st.sampled_from([1, 2, 3, 5, 100]),
                max_bytes=st.sampled_from([0, 0, 40, 4096]))
    def setup(self, max_entries, max_bytes):
        self.s = Stream()
        self.model: list[tuple[int, list]] = []
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.last_id = MIN_ID
        self.max_deleted = MIN_ID
        self.added = 0

    # -- helpers -------------------------------------------------------------

    def ids(self) -> list[int]:
        return [sid for sid, _ in self.model]

    # -- changes ---------------------------------------------------------------

    @rule(gap_ms=st.integers(0, 3), seq=st.integers(0, 3), fv=field_lists)
    def append(self, gap_ms, seq, fv):
        ms = (self.last_id >> 64) + gap_ms
        sid = make_id(ms, seq)
        if sid <= self.last_id:
            sid = self.last_id + 1
        self.s.append(sid, list(fv), self.max_entries, self.max_bytes)
        self.model.append((sid, list(fv)))
        self.last_id = sid
        self.added += 1

    @rule(n=st.integers(1, 12), fv=field_lists)
    def append_many(self, n, fv):
        for _ in range(n):
            self.append(0, 0, fv)

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def delete_existing(self, data):
        sid = data.draw(st.sampled_from(self.ids()))
        assert self.s.delete(sid) is True
        self.model = [(i, fv) for i, fv in self.model if i != sid]
        self.max_deleted = max(self.max_deleted, sid)

    @rule(ms=st.integers(0, 40), seq=st.integers(0, 3))
    def delete_any(self, ms, seq):
        sid = make_id(ms, seq)
        existed = sid in self.ids()
        assert self.s.delete(sid) is existed
        if existed:
            self.model = [(i, fv) for i, fv in self.model if i != sid]
            self.max_deleted = max(self.max_deleted, sid)

    @rule(maxlen=st.integers(0, 30))
    def trim_maxlen_exact(self, maxlen):
        removed = []
        n = self.s.trim(maxlen=maxlen, removed=removed)
        drop = max(len(self.model) - maxlen, 0)
        assert n == drop
        assert removed == self.ids()[:drop]
        self.model = self.model[drop:]

    @rule(ms=st.integers(0, 40), seq=st.integers(0, 3))
    def trim_minid_exact(self, ms, seq):
        minid = make_id(ms, seq)
        drop = bisect_left(self.ids(), minid)
        n = self.s.trim(minid=minid)
        assert n == drop
        self.model = self.model[drop:]

    @rule(maxlen=st.integers(0, 30), limit=st.sampled_from([0, 0, 1, 3, 5, 10]))
    def trim_maxlen_approx(self, maxlen, limit):
        before = len(self.model)
        n = self.s.trim(maxlen=maxlen, approx=True, limit=limit)
        assert 0 <= n <= max(before - maxlen, 0)
        if limit:
            assert n <= limit
        self.model = self.model[n:]
        assert self.s.first_id() == (self.model[0][0] if self.model else MIN_ID)

    @rule(ms=st.integers(0, 40), limit=st.sampled_from([0, 0, 1, 3, 5, 10]))
    def trim_minid_approx(self, ms, limit):
        minid = make_id(ms, 0)
        n = self.s.trim(minid=minid, approx=True, limit=limit)
        assert 0 <= n <= bisect_left(self.ids(), minid)
        if limit:
            assert n <= limit
        self.model = self.model[n:]

    @rule(maxlen=st.integers(0, 30), stop_ms=st.integers(0, 40))
    def trim_with_stop_id(self, maxlen, stop_ms):
        # The ACKED policy: nothing at or above stop_id goes.
        stop = make_id(stop_ms, 0)
        n = self.s.trim(maxlen=maxlen, stop_id=stop)
        ids = self.ids()
        expect = min(max(len(ids) - maxlen, 0), bisect_left(ids, stop))
        assert n == expect
        self.model = self.model[n:]

    # -- checks ---------------------------------------------------------------

    @rule(lo_ms=st.integers(0, 40), hi_ms=st.integers(0, 40), count=st.integers(0, 6),
          rev=st.booleans())
    def ranges(self, lo_ms, hi_ms, count, rev):
        lo, hi = make_id(lo_ms, 0), make_id(hi_ms, 2**64 - 1)
        got = self.s.range(lo, hi, count, rev)
        assert [(sid, list(fv)) for sid, fv in got] == self.expected_range(lo, hi, count, rev)

    def expected_range(self, lo: int, hi: int, count: int, rev: bool) -> list:
        """The model's entries with lo <= id <= hi, as XRANGE (or XREVRANGE) orders them."""
        ids = self.ids()
        sel = self.model[bisect_left(ids, lo):bisect_right(ids, hi)]
        if rev:
            sel = sel[::-1]
        return sel[:count] if count else sel

    @rule(ms=st.integers(0, 40), seq=st.integers(0, 3))
    def get(self, ms, seq):
        sid = make_id(ms, seq)
        want = dict(self.model).get(sid)
        got = self.s.get(sid)
        assert (list(got) if got is not None else None) == want

    @invariant()
    def agrees_with_model(self):
        s = self.s
        assert s.length == len(self.model)
        assert [(sid, list(fv)) for sid, fv in s] == self.model
        assert s.range(MIN_ID, MAX_ID) == [(sid, fv) for sid, fv in s]
        assert s.first_id() == (self.model[0][0] if self.model else MIN_ID)
        last = s.last_entry()
        first = s.first_entry()
        assert (last[0] if last else None) == (self.model[-1][0] if self.model else None)
        assert (first[0] if first else None) == (self.model[0][0] if self.model else None)
        assert s.last_id == self.last_id
        assert s.entries_added == self.added
        assert s.max_deleted_id >= self.max_deleted
        # Node structure: ordered, non-empty, first-id index in step.
        assert s.firsts == [n.first for n in s.nodes]
        assert all(n.live > 0 for n in s.nodes)
        assert sum(n.live for n in s.nodes) == s.length
        for a, b in zip(s.nodes, s.nodes[1:]):
            assert a.last < b.first
        if self.max_entries:
            assert all(n.total <= self.max_entries for n in s.nodes)


StreamModel.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
test_stream_matches_model = StreamModel.TestCase


def test_approx_trim_removes_whole_nodes_only():
    s = Stream()
    for i in range(1, 24):
        s.append(make_id(i, 1), [b"f", b"v"], 5, 0)
    assert s.trim(maxlen=12, approx=True) == 10     # nodes 5,5,5,5,3: two go, 13 left
    assert s.length == 13
    assert s.trim(maxlen=12, approx=True) == 0
    assert s.trim(maxlen=0, approx=True, limit=4) == 0   # a whole node does not fit the limit
    assert s.trim(maxlen=0, approx=True, limit=5) == 5


def test_deleting_every_entry_of_a_node_drops_it():
    s = Stream()
    for i in range(1, 8):
        s.append(make_id(i, 0), [b"f", b"v"], 3, 0)
    assert len(s.nodes) == 3
    for i in (4, 5, 6):
        assert s.delete(make_id(i, 0))
    assert len(s.nodes) == 2
    assert [sid >> 64 for sid, _ in s] == [1, 2, 3, 7]
    assert s.max_deleted_id == make_id(6, 0)


# -- the sealed node's blob --------------------------------------------------------------

def _varint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    return bytes(out + bytes([v]))


_items = st.one_of(
    st.binary(max_size=3),
    st.sampled_from([b"0", b"-0", b"007", b"-7", b"1234", b"19.8", b"+1", b" 1", b"1 ", b"1_0",
                     b"123456789012345678", b"-123456789012345678", b"1234567890123456789",
                     b"\xd9\xa3", b"x" * 63, b"x" * 64, b"x" * 8191, b"x" * 8192]))


@settings(max_examples=200, deadline=None)
@given(first_ms=st.sampled_from([0, 1, 127, 128, 16383, 16384, 2**63, 2**64 - 1]),
       first_seq=st.sampled_from([0, 1, 127, 128, 2**64 - 2, 2**64 - 1]),
       gaps=st.lists(st.tuples(st.sampled_from([0, 0, 0, 1, 200, 2**40]),
                               st.sampled_from([0, 1, 2, 127, 2**64 - 1])), max_size=30),
       master=st.lists(_items, max_size=3),
       rows=st.lists(st.one_of(st.none(), st.lists(_items, max_size=6)), min_size=31, max_size=31))
def test_a_sealed_node_blob_gives_back_its_entries(first_ms, first_seq, gaps, master, rows):
    """Format 2: ids in runs and gaps (the seq running over into the next ms too),
    items that are canonical integers and ones that only look like them, entries
    with the master field names and without, and an empty master."""
    ids = [make_id(first_ms, first_seq)]
    for gap_ms, seq in gaps:
        nxt = ids[-1] + 1 + seq % 3 if not gap_ms else make_id((ids[-1] >> 64) + gap_ms, seq)
        if nxt > MAX_ID:
            break
        ids.append(nxt)
    entries = [[x for f in master for x in (f, b"1234")] if row is None else row[:len(row) // 2 * 2]
               for row in rows[:len(ids)]]
    blob = encode_node(master, ids, [list(e) for e in entries])
    assert blob.startswith(NODE_FORMAT)
    assert unpack_node(blob) == (master, ids, entries)


def test_the_bench_entry_takes_under_eight_bytes_of_blob():
    """`sensor-id 1234 temperature 19.8` from a pipelined producer (ids in runs of one
    ms): values with 1-byte lengths, 1234 as an integer, no per-entry id bytes
    (msgpack's format 1 took 15.4 bytes an entry)."""
    ids = [make_id(1_700_000_000_000 + i // 60, i % 60) for i in range(100)]
    entries = [[b"sensor-id", b"1234", b"temperature", b"19.8"] for _ in ids]
    blob = encode_node([b"sensor-id", b"temperature"], ids, entries)
    assert len(blob) / 100 < 8
    assert decode_node(blob) == (ids, entries)


# A node sealed by the version before format 2 (a msgpack document; snapshots, the
# node store and DUMP payloads of that version hold such blobs): 4 entries, one of
# them without the master field names.
FORMAT_1_BLOB = bytes.fromhex(
    "94cf0000018bcfe5680092c40973656e736f722d6964c40b74656d706572"
    "61747572659800000001050005099492c40431323334c40431392e3892c4022d37c40432"
    "302e3193c0c4056f74686572c4c8"
) + b"x" * 200 + bytes.fromhex("92c40130c400")
FORMAT_1_IDS = [make_id(1700000000000, 0), make_id(1700000000000, 1),
                make_id(1700000000005, 0), make_id(1700000000005, 9)]
FORMAT_1_ENTRIES = [[b"sensor-id", b"1234", b"temperature", b"19.8"],
                    [b"sensor-id", b"-7", b"temperature", b"20.1"],
                    [b"other", b"x" * 200],
                    [b"sensor-id", b"0", b"temperature", b""]]


def test_a_format_1_node_still_reads_and_is_rewritten_in_format_2():
    assert unpack_node(FORMAT_1_BLOB) == ([b"sensor-id", b"temperature"], FORMAT_1_IDS,
                                          FORMAT_1_ENTRIES)
    s = Stream()
    s.append(FORMAT_1_IDS[0], list(FORMAT_1_ENTRIES[0]), 4, 0)
    node = s.nodes[0]
    node.master = node.ids = node.entries = None      # the node as a snapshot loads it
    node.blob, node.last, node.total, node.live = FORMAT_1_BLOB, FORMAT_1_IDS[-1], 4, 4
    s.length, s.last_id = 4, FORMAT_1_IDS[-1]
    assert s.range(MIN_ID, MAX_ID) == list(zip(FORMAT_1_IDS, FORMAT_1_ENTRIES))
    s.append(make_id(1700000000006, 0), [b"sensor-id", b"5"], 5, 0)   # reopens the node
    node.seal()
    assert node.blob.startswith(NODE_FORMAT)
    assert decode_node(node.blob) == (FORMAT_1_IDS + [make_id(1700000000006, 0)],
                                      FORMAT_1_ENTRIES + [[b"sensor-id", b"5"]])


def test_a_malformed_format_2_blob_is_a_value_error():
    """Every cut of a blob, a varint past 64 bits, counts past what the blob can hold
    (no huge allocation) and trailing bytes: ValueError, which RESTORE reports."""
    ids = [make_id(5, 0), make_id(5, 1), make_id(9, 3)]
    blob = encode_node([b"f"], ids, [[b"f", b"1"], [b"g", b"x"], [b"f", b"abc"]])
    for cut in range(len(NODE_FORMAT), len(blob)):
        with pytest.raises(ValueError):
            decode_node(blob[:cut])
    head = NODE_FORMAT + _varint(5) + _varint(0)
    for bad in (blob + b"\x00",
                NODE_FORMAT + b"\xff" * 10 + b"\x01",                  # a varint past 64 bits
                head + _varint(2**40) + _varint(1) + _varint(2) + b"f" + _varint(0),
                head + _varint(1) + _varint(2**62),                   # master count
                head + _varint(2) + _varint(0) + _varint(5),          # a run past n
                head + _varint(1) + _varint(0) + _varint(0) + _varint(3) + _varint(0),
                head + _varint(1) + _varint(0) + _varint(0) + _varint(1) + _varint(0)
                + _varint(2**30)):                                   # element count
        with pytest.raises(ValueError):
            decode_node(bad)
