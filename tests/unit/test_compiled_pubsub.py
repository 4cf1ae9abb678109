"""The compiled Pub/Sub modules behave exactly as their sources.

dispatch/pubsub.py (the subscriptions and the delivery loop) and commands/pubsub.py
(the commands) are pure-mode modules: the source is the specification, the
extension modules built from it must not differ.  Random workloads of (un)subscribe,
publish and PUBSUB commands, by clients speaking RESP2 and RESP3, with RESET and
clients going away, run once on a core with the build's table and subscriptions and
once with both modules run from source; every reply, every delivered message and
every batch sent to the replicas must be the same.  Under STREAMDB_PURE=1 both sides
are the source (the test then only holds the workloads deterministic).
"""

from __future__ import annotations

import random
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inproc import Delivered, Recorder, argv, command_table, table_from_sources, table_installed
from streamdb import compiled
import streamdb.commands  # noqa: F401  (fills the command table)
from streamdb.protocol import encode_reply
from streamdb.server.core import Core

# In import order: the commands' source must see the subscriptions' source.
PUBSUB_MODULES = ("streamdb.dispatch.pubsub", "streamdb.commands.pubsub")

CHANNELS = ["a", "b", "ab", "__keyspace@0__:s"]
PATTERNS = ["a*", "?", "[ab]*", "*", "__key*"]


@pytest.fixture(scope="module")
def sources():
    """(the command table with the commands' source registered, the subscriptions'
    source module); the build's table is put back at once."""
    table, loaded = table_from_sources(PUBSUB_MODULES)
    return table, loaded["streamdb.dispatch.pubsub"]


def workload(core: Core, rng: random.Random, steps: int) -> list:
    """What every client saw: (client, reply bytes) per command and (client, message)
    per delivery, in the order they happened."""
    seen: list = []
    clients: list = []

    def connect():
        i = len(clients)
        c = core.new_client(outbox=Delivered(lambda m, i=i: seen.append((i, "push", bytes(m)))))
        if rng.random() < 0.4:
            core.execute(c, argv("HELLO", "3"))
        clients.append(c)

    for _ in range(4):
        connect()
    for step in range(steps):
        i = rng.randrange(len(clients))
        c = clients[i]
        op = rng.randrange(14)
        if op < 3:
            cmd = rng.choice(["SUBSCRIBE", "UNSUBSCRIBE", "SSUBSCRIBE", "SUNSUBSCRIBE"])
            names = rng.sample(CHANNELS, rng.randrange(0 if "UN" in cmd else 1, 3))
            args = [cmd, *names]
        elif op < 5:
            cmd = rng.choice(["PSUBSCRIBE", "PUNSUBSCRIBE"])
            args = [cmd, *rng.sample(PATTERNS, rng.randrange(0 if "UN" in cmd else 1, 3))]
        elif op < 9:
            args = [rng.choice(["PUBLISH", "PUBLISH", "SPUBLISH"]), rng.choice(CHANNELS),
                    f"m{rng.randrange(100)}"]
        elif op < 11:
            args = rng.choice([["PUBSUB", "CHANNELS"], ["PUBSUB", "CHANNELS", rng.choice(PATTERNS)],
                               ["PUBSUB", "NUMSUB", *rng.sample(CHANNELS, 2)], ["PUBSUB", "NUMPAT"],
                               ["PUBSUB", "SHARDCHANNELS"], ["PUBSUB", "SHARDNUMSUB", "a"],
                               ["PUBSUB", "NOPE"]])
        elif op == 11:
            args = rng.choice([["PING"], ["PING", "x"], ["XLEN", "s"], ["RESET"]])
        elif op == 12:
            args = ["XADD", "s", f"{step + 1}-0", "f", "v"]     # keyspace events, when enabled
        else:
            core.remove_client(c)
            clients[i] = core.new_client(outbox=Delivered(lambda m, i=i: seen.append((i, "push", bytes(m)))))
            seen.append((i, "reconnected", b""))
            continue
        reply = core.execute(c, argv(*args))
        seen.append((i, " ".join(args), encode_reply(reply, c.resp == 3)))
    return seen


def _outcome(table: dict, pubsub_module, seed: int):
    with table_installed(table):
        core = Core()
        if pubsub_module is not None:
            core.pubsub = pubsub_module.PubSub()
        recorder = Recorder()
        core.add_effect_sink(recorder)
        rng = random.Random(seed)
        core.config.set("notify-keyspace-events", rng.choice(["", "KEA", "Et"]))
        core.refresh_notify_flags()
        seen = workload(core, rng, 150)
        return seen, recorder.batches


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32))
def test_pubsub_compiled_as_from_source(sources, seed):
    table, pubsub_source = sources
    assert _outcome(command_table(), None, seed) == _outcome(table, pubsub_source, seed)


def test_the_pubsub_modules_run_compiled_unless_streamdb_pure_is_set():
    for name in PUBSUB_MODULES:
        assert compiled.is_compiled(sys.modules[name]) == (not compiled.PURE), name
