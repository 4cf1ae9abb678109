"""Stream.extend (the replay fast path's bulk append) builds exactly what append() does.

Node boundaries matter beyond memory: ``~`` trimming removes whole nodes, so a
replayed stream must be cut into the same nodes as the stream that wrote the log.
Every node field (ids, entries, byte and entry counts, master fields, sealed blob)
is compared against one-by-one appends, for random entries, field layouts and
node limits, starting from an empty stream, an open tail and a sealed tail.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdb.engine.stream import Stream, decode_node, encode_node

FIELD_SETS = [[b"a"], [b"a", b"b"], [b"sensor-id", b"temperature"], [b"b", b"a"], [b"x" * 40]]


def random_entries(rng: random.Random, n: int, mixed: bool) -> list[list[bytes]]:
    out = []
    base = rng.choice(FIELD_SETS)
    for _ in range(n):
        fields = rng.choice(FIELD_SETS) if mixed and rng.random() < 0.2 else base
        fv = []
        for f in fields:
            fv += [f, bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 4, 9, 60, 300])))]
        out.append(fv)
    return out


def node_state(s: Stream) -> list[tuple]:
    out = []
    for node in s.nodes:
        ids, entries = node.contents()
        out.append((node.first, node.last, node.total, node.live, node.nbytes, node.master,
                    node.blob, node.blob is None, list(ids), [list(e) for e in entries]))
    return out


def stream_state(s: Stream) -> tuple:
    return (node_state(s), s.firsts, s.length, s.last_id, s.entries_added)


def build(before: list, after: list, max_entries: int, max_bytes: int, use_extend: bool,
          seal_tail: bool) -> Stream:
    s = Stream()
    for sid, fv in before:
        s.append(sid, fv, max_entries, max_bytes)
    if seal_tail and s.nodes:
        s.nodes[-1].seal()        # as a snapshot loads it: the last node may be packed
    if use_extend:
        s.extend([sid for sid, _ in after], [fv for _, fv in after], max_entries, max_bytes)
    else:
        for sid, fv in after:
            s.append(sid, fv, max_entries, max_bytes)
    return s


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32), n_before=st.integers(0, 300), n_after=st.integers(0, 700),
       max_entries=st.sampled_from([0, 1, 2, 7, 100, 1000]),
       max_bytes=st.sampled_from([0, 1, 50, 200, 4096, 1 << 20]),
       mixed=st.booleans(), seal_tail=st.booleans())
def test_extend_builds_the_nodes_append_builds(seed, n_before, n_after, max_entries, max_bytes,
                                               mixed, seal_tail):
    rng = random.Random(seed)
    entries = random_entries(rng, n_before + n_after, mixed)
    sid, pairs = 0, []
    for fv in entries:
        sid += rng.choice([1, 2, 1 << 64, 5 << 64])
        pairs.append((sid, fv))
    before, after = pairs[:n_before], pairs[n_before:]
    one_by_one = build(before, after, max_entries, max_bytes, False, seal_tail)
    bulk = build(before, after, max_entries, max_bytes, True, seal_tail)
    assert stream_state(bulk) == stream_state(one_by_one)


def test_extend_of_nothing_changes_nothing():
    s = Stream()
    s.append(5, [b"f", b"v"], 100, 4096)
    before = stream_state(s)
    s.extend([], [], 100, 4096)
    assert stream_state(s) == before


@pytest.mark.parametrize("fields", [[b"a", b"b"], [b"b", b"a"]])
def test_a_node_encoded_with_the_uniform_hint_is_the_same_blob(fields):
    master = [b"a", b"b"]
    ids = [(7 << 64) | i for i in range(10)]
    entries = [[fields[0], b"%d" % i, fields[1], b"v"] for i in range(10)]
    plain = encode_node(ids[0], master, ids, entries)
    if fields == master:
        assert encode_node(ids[0], master, ids, entries, uniform=True) == plain
    assert decode_node(plain) == (ids, entries)
