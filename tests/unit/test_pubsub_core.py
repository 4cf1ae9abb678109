"""Pub/Sub on a bare Core (no sockets): deliveries go through client.deliver, nothing
reaches the effect sinks (the AOF, replicas: a message is not data), and a removed
client leaves no subscription behind."""

from __future__ import annotations

from inproc import Recorder, argv
from streamdb.protocol.reply import Push, Raw
from streamdb.server.core import Core


def test_publish_delivers_pushes_and_records_no_effect():
    core = Core()
    recorder = Recorder()
    core.effect_sinks.append(recorder)
    got: list = []
    sub = core.new_client(deliver=got.append)
    pub = core.new_client()
    assert isinstance(core.execute(sub, argv("SUBSCRIBE", "a")), Raw)
    core.execute(sub, argv("PSUBSCRIBE", "a*"))
    assert core.execute(pub, argv("PUBLISH", "a", "m")) == 2
    assert got == [Push([b"message", b"a", b"m"]), Push([b"pmessage", b"a*", b"a", b"m"])]
    assert all(type(m) is Push for m in got)
    assert core.execute(pub, argv("SPUBLISH", "a", "m")) == 0
    assert recorder.batches == []
    assert core.dirty == 0


def test_a_removed_client_leaves_no_subscription():
    core = Core()
    sub = core.new_client(deliver=lambda reply: None)
    core.execute(sub, argv("SUBSCRIBE", "a", "b"))
    core.execute(sub, argv("SSUBSCRIBE", "s"))
    core.remove_client(sub)
    assert sub.pubsub is None
    assert core.pubsub.kinds == ({}, {}, {})
    assert core.execute(core.new_client(), argv("PUBLISH", "a", "m")) == 0
