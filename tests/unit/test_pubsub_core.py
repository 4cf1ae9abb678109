"""Pub/Sub on a bare Core (no sockets): deliveries go through client.outbox, a
message reaches the effect sinks as a batch that is not data (replicas get it, the
AOF and the snapshot do not), and a removed client leaves no subscription behind."""

from __future__ import annotations

from inproc import Delivered, Recorder, argv
from streamdb.protocol import encode_reply
from streamdb.protocol.reply import Push, Raw
from streamdb.server.core import Core


def test_publish_delivers_pushes_and_propagates_a_message_not_data():
    core = Core()
    recorder = Recorder()
    core.add_effect_sink(recorder)
    data_flags: list = []
    core.add_effect_sink(lambda batch: data_flags.append(batch.data))
    got: list = []
    sub = core.new_client(outbox=Delivered(got.append))
    pub = core.new_client()
    assert isinstance(core.execute(sub, argv("SUBSCRIBE", "a")), Raw)
    core.execute(sub, argv("PSUBSCRIBE", "a*"))
    assert core.execute(pub, argv("PUBLISH", "a", "m")) == 2
    assert got == [encode_reply(Push([b"message", b"a", b"m"]), False),
                   encode_reply(Push([b"pmessage", b"a*", b"a", b"m"]), False)]
    assert all(type(m) is bytes for m in got)   # encoded once, delivered as they are
    assert core.execute(pub, argv("SPUBLISH", "a", "m")) == 0
    assert recorder.batches == [(0, [[b"PUBLISH", b"a", b"m"]]), (0, [[b"SPUBLISH", b"a", b"m"]])]
    assert data_flags == [False, False]
    assert core.dirty == 0


def test_a_message_is_encoded_once_per_protocol_for_all_its_subscribers():
    core = Core()
    resp2: list = [[], []]
    resp3: list = [[], []]
    for got in resp2 + resp3:
        sub = core.new_client(outbox=Delivered(got.append))
        if any(got is box for box in resp3):
            core.execute(sub, argv("HELLO", "3"))
        core.execute(sub, argv("SUBSCRIBE", "a"))
    assert core.execute(core.new_client(), argv("PUBLISH", "a", "m")) == 4
    assert resp2[0] == [b"*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$1\r\nm\r\n"]
    assert resp3[0] == [b">3\r\n$7\r\nmessage\r\n$1\r\na\r\n$1\r\nm\r\n"]
    assert resp2[0][0] is resp2[1][0] and resp3[0][0] is resp3[1][0]


def test_a_message_makes_no_batch_when_no_sink_records_commands():
    core = Core()
    seen: list = []
    core.add_effect_sink(seen.append, wants_commands=False)     # as the snapshot's tracker
    pub = core.new_client()
    assert core.execute(pub, argv("PUBLISH", "a", "m")) == 0
    assert core.execute(pub, argv("SPUBLISH", "a", "m")) == 0
    assert seen == []
    core.execute(pub, argv("XADD", "s", "1-1", "f", "v"))
    assert len(seen) == 1                   # data still reaches it


def test_a_removed_client_leaves_no_subscription():
    core = Core()
    sub = core.new_client(outbox=Delivered(lambda reply: None))
    core.execute(sub, argv("SUBSCRIBE", "a", "b"))
    core.execute(sub, argv("SSUBSCRIBE", "s"))
    core.execute(sub, argv("PSUBSCRIBE", "a*"))
    assert list(core.pubsub.matchers) == [b"a*"]
    core.remove_client(sub)
    assert sub.pubsub is None
    assert core.pubsub.kinds == ({}, {}, {})
    assert core.pubsub.matchers == {}
    assert core.execute(core.new_client(), argv("PUBLISH", "a", "m")) == 0
