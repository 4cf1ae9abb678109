"""The value codec (persistence/codec.py): the one serialisation of a stream.

Snapshots, DUMP/RESTORE, AOF base segments and a replica's full sync all use it,
so a round trip must give back the exact state (DEBUG DIGEST covers entries,
deleted marks, counters, groups, PELs, consumers and TTLs).  Big streams travel
as several RESTOREs (``dump_pieces``); documents written before the columnar node
layout must still load (an upgraded server reads its old snapshots).
"""

from __future__ import annotations

import random

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdb.commands.server import digest_keyspace
from streamdb.persistence import codec
from streamdb.persistence.aof import state_commands
from streamdb.dispatch.effects import EffectBatch
from streamdb.protocol.reply import OK
from streamdb.protocol.request import RequestParser
from streamdb.server.core import Core

from inproc import FakeClock, argv
from test_effects_replay import random_workload


def _workload(seed: int) -> Core:
    clock = FakeClock()
    core = Core(clock=clock)
    core.config.values["stream-node-max-entries"] = 5     # many nodes from few entries
    random_workload(core, clock, random.Random(seed), 1500)
    c = core.new_client()
    core.execute(c, argv("SET", "plain", "text"))
    core.execute(c, argv("XADD", "expiring", "1-1", "f", "v"))
    core.execute(c, argv("PEXPIRE", "expiring", 10_000_000))
    # A long stream with holes and a group part-way through it.
    for i in range(1, 201):
        core.execute(c, argv("XADD", "long", f"{i}-{i % 3}", "f", i, "g", "x" * (i % 7)))
    core.execute(c, argv("XDEL", "long", "10-1", "11-2", "150-0"))
    core.execute(c, argv("XGROUP", "CREATE", "long", "readers", "0"))
    core.execute(c, argv("XREADGROUP", "GROUP", "readers", "alice", "COUNT", "120",
                         "STREAMS", "long", ">"))
    core.execute(c, argv("XACK", "long", "readers", "1-1", "2-2", "60-0"))
    return core


def _apply_commands(data: bytes) -> Core:
    """A fresh core that executed ``data`` (RESP commands) as the AOF loader does."""
    core = Core(clock=FakeClock())
    core.config.values["stream-node-max-entries"] = 5
    client = core.replay_client()
    parser = RequestParser(max_bulk_len=1 << 62)
    parser.feed(data)
    while (a := parser.next_command()) is not None:
        reply = core.execute(client, a)
        assert not hasattr(reply, "message"), (a[:2], reply.message)
    return core


@pytest.mark.parametrize("seed", range(4))
def test_state_in_small_pieces_restores_the_exact_state(seed, monkeypatch):
    monkeypatch.setattr(codec, "PIECE_BYTES", 60)      # a piece every node or two
    core = _workload(seed)
    commands = list(state_commands(core.keyspace))
    pieces = sum(1 for cmd in commands if cmd.startswith(b"*4\r\n$7\r\nRESTORE"))
    assert pieces > 10          # the continuation form was really used
    assert digest_keyspace(_apply_commands(b"".join(commands))) == digest_keyspace(core)


@pytest.mark.parametrize("seed", range(3))
def test_dump_and_snapshot_documents_round_trip(seed):
    core = _workload(seed)
    for db in core.keyspace.dbs:
        for key, value in db.data.items():
            copy = codec.load_payload(codec.dump_payload(value), check_nodes=True)
            assert codec.encode_value(copy) == codec.encode_value(value), key
            external: list = []
            doc = codec.encode_value(value, external)
            blobs = {node.first: node.sealed_blob() for node in external}
            again = codec.decode_value(doc, blobs.__getitem__)
            assert codec.encode_value(again) == codec.encode_value(value), key


def _old_form(doc: bytes) -> bytes:
    """The document as servers before the columnar node layout wrote it: one list
    per node [first, last, total, live, nbytes, deleted ids, blob|None, is_open]."""
    d = msgpack.unpackb(doc, raw=False, strict_map_key=False)
    if d["t"] != "stream":
        return doc
    size = 8 + 8 + 8 + 8 + 4 + 4 + 4 + 1
    nodes = []
    for i, blob in enumerate(d.pop("nb")):
        h = d["nh"][i * size:(i + 1) * size]
        first = (int.from_bytes(h[0:8], "big") << 64 | int.from_bytes(h[8:16], "big"))
        last = (int.from_bytes(h[16:24], "big") << 64 | int.from_bytes(h[24:32], "big"))
        total, live, nbytes = (int.from_bytes(h[k:k + 4], "big") for k in (32, 36, 40))
        nodes.append([first.to_bytes(16, "big"), last.to_bytes(16, "big"), total, live, nbytes,
                      d["nd"].get(i, []), blob, bool(h[44] & 1)])
    del d["nh"], d["nd"]
    d["nodes"] = nodes
    return msgpack.packb(d, use_bin_type=True)


def test_documents_of_the_older_layout_still_load():
    core = _workload(7)
    for db in core.keyspace.dbs:
        for key, value in db.data.items():
            old = _old_form(codec.encode_value(value))
            assert codec.encode_value(codec.decode_value(old)) == codec.encode_value(value), key
            external: list = []
            old = _old_form(codec.encode_value(value, external))
            blobs = {node.first: node.sealed_blob() for node in external}
            assert codec.encode_value(codec.decode_value(old, blobs.__getitem__)) == \
                codec.encode_value(value), key


def test_an_older_layout_document_with_a_count_out_of_range_is_a_codec_error():
    """A hostile document of the older layout whose node count does not fit the header
    column fails as bad data, not with an exception from deep inside."""
    core = _workload(7)
    value = next(v for db in core.keyspace.dbs for v in db.data.values()
                 if type(v) is not bytes and v.nodes)
    d = msgpack.unpackb(_old_form(codec.encode_value(value)), raw=False, strict_map_key=False)
    d["nodes"][0][2] = 2**40
    with pytest.raises(codec.CodecError):
        codec.decode_value(msgpack.packb(d, use_bin_type=True))


def _stream_with_nodes(n: int) -> tuple[Core, list[bytes]]:
    core = Core(clock=FakeClock())
    core.config.values["stream-node-max-entries"] = 2
    c = core.new_client()
    for i in range(1, n + 1):
        core.execute(c, argv("XADD", "s", f"{i}-0", "f", i))
    return core, list(codec.dump_pieces(core.keyspace.dbs[0].data[b"s"], 1))


def _refused(reply) -> bool:
    return getattr(reply, "message", None) == "ERR Bad data format"


def test_a_restore_of_a_further_piece_must_continue_a_stream():
    core, pieces = _stream_with_nodes(6)          # nodes of 2 entries: a piece each
    assert len(pieces) == 3
    c = core.new_client()

    def restore(key: bytes, piece: bytes):
        return core.execute(c, [b"RESTORE", key, b"0", piece])

    assert _refused(restore(b"new", pieces[1]))   # no stream to continue
    assert not core.keyspace.dbs[0].data.get(b"new")
    core.execute(c, argv("SET", "str", "x"))
    assert _refused(restore(b"str", pieces[1]))   # not a stream
    assert restore(b"copy", pieces[0]) == OK
    assert restore(b"copy", pieces[2]) == OK      # later ids: accepted (a gap is legal)
    assert core.execute(c, argv("XLEN", "copy")) == 4
    assert _refused(restore(b"copy", pieces[1]))  # ids before the stream's last node
    assert _refused(restore(b"copy", pieces[2]))  # the same piece twice
    assert core.execute(c, argv("XLEN", "copy")) == 4
    firsts = [n.first >> 64 for n in core.keyspace.dbs[0].data[b"copy"].nodes]
    assert firsts == [1, 5]


def test_a_crafted_piece_from_a_client_is_refused():
    core, pieces = _stream_with_nodes(6)
    c = core.new_client()
    assert core.execute(c, [b"RESTORE", b"copy", b"0", pieces[0]]) == OK
    doc = msgpack.unpackb(pieces[1][4:-4], raw=False, strict_map_key=False)
    doc["nh"] = doc["nh"][:36] + (7).to_bytes(4, "big") + doc["nh"][40:]   # live = 7 of 2
    crafted = codec._seal(msgpack.packb(doc, use_bin_type=True))
    assert _refused(core.execute(c, [b"RESTORE", b"copy", b"0", crafted]))
    assert core.execute(c, argv("XLEN", "copy")) == 2


_args = st.binary(max_size=8) | st.sampled_from([b"%", b"%d", b"%b", b"\r\n", b"SELECT", b"XADD"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(
    st.lists(_args, min_size=1, max_size=5),
    st.integers(0, 15).map(lambda db: [b"SELECT", b"%d" % db]),
    st.just([b"XADD", b"k", b"1-1", b"f", b"v"])), max_size=30))
def test_final_db_finds_the_db_a_batch_ends_in(commands):
    selects = [int(c[1]) for c in commands if c[0] == b"SELECT" and len(c) == 2 and c[1].isdigit()]
    if all(len(c) == 2 and c[1].isdigit() for c in commands if c[0] == b"SELECT"):
        assert EffectBatch(3, commands).final_db() == (selects[-1] if selects else 3)
