"""The compiled stream command handlers behave exactly as their sources.

commands/args.py, streams.py and groups.py are pure-mode modules, and so is
engine/policies.py, whose trims and deletions only they run: the source is the
specification, the extension module built from it must not differ.  Random
workloads of stream and consumer group commands (options, odd ids, errors,
MULTI/EXEC, blocking) run once through the command table as the build fills it
and once through the handlers run from source; the replies, the effects and the
keyspace digest must be the same.  Under STREAMDB_PURE=1 both sides are the
source (the test then only holds the workloads themselves deterministic).
"""

from __future__ import annotations

import random
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdb import compiled
import streamdb.commands  # noqa: F401  (fills the command table)
from streamdb.dispatch import registry
from streamdb.commands.groups import new_delivery_effects, xclaim_effect
from streamdb.commands.server import digest_keyspace
from streamdb.engine import ConsumerGroup
from streamdb.protocol.reply import encode_reply
from streamdb.server.core import BLOCKED

from inproc import command_table, table_from_sources, table_installed
from test_groups_unit import Env, random_group_workload

# In import order: each one's source must see the sources before it.
HANDLER_MODULES = ("streamdb.engine.policies", "streamdb.commands.args",
                   "streamdb.commands.streams", "streamdb.commands.groups")


@pytest.fixture(scope="module")
def source_table():
    """The command table with the handler modules' sources registered in it (each
    source importing the others' sources); the build's table is put back at once."""
    return table_from_sources(HANDLER_MODULES)[0]


class RecordingEnv(Env):
    """Env that also keeps every reply, as the client would read it."""

    def __init__(self) -> None:
        super().__init__()
        self.replies: list[bytes] = []

    def run(self, *args, client=None):
        reply = super().run(*args, client=client)
        self.replies.append(b"(blocked)" if reply is BLOCKED else encode_reply(reply, False))
        return reply


def random_stream_workload(e: RecordingEnv, rng: random.Random, steps: int) -> None:
    """Stream commands with their options, valid and not, over two keys."""
    keys = ["s1", "s2"]
    ids = ["0-1", "5", "1-*", "(3-0", "-", "+", "0-0", "x"]
    for n in range(steps):
        e.clock.t += rng.choice([0, 0.001, 1])
        k = rng.choice(keys)
        some = rng.choice(ids)
        op = rng.randrange(12)
        if op < 4:
            opts = rng.choice([[], ["NOMKSTREAM"], ["MAXLEN", rng.randrange(0, 8)],
                               ["MAXLEN", "~", rng.randrange(0, 8)], ["MINID", "=", some],
                               ["MAXLEN", "~", 3, "LIMIT", rng.randrange(0, 3)],
                               ["LIMIT", 2], ["DELREF"], ["ACKED", "MAXLEN", 2],
                               ["IDMPAUTO", "p"], ["IDMP", "p", rng.choice(["a", "b"])]])
            fields = rng.choice([["f", n], ["f", n], ["f", n, "g", "v"], ["f"]])
            sid = rng.choice(["*", "*", "*", "*", some, f"{n + 10}-*", "1700000009999-*"]
                             + ["18446744073709551615-0"] * (rng.random() < 0.02))
            r = e.run("XADD", k, *(opts if rng.random() < 0.5 else []), sid, *fields)
            if isinstance(r, bytes):
                ids.append(r.decode())
        elif op < 6:
            cmd, lo, hi = rng.choice([("XRANGE", "-", "+"), ("XREVRANGE", "+", "-")])
            bounds = rng.choice([[lo, hi], [some, hi], [lo, some], [some, rng.choice(ids)]])
            count = rng.choice([[], ["COUNT", rng.randrange(-1, 4)], ["COUNT"], ["BAD", 1]])
            e.run(cmd, k, *bounds, *count)
        elif op < 8:
            opts = rng.choice([[], ["COUNT", rng.randrange(0, 4)], ["MAXCOUNT", 2],
                               ["MAXSIZE", rng.choice([1, 40, 200])], ["NOACK"], ["BLOCK", -1]])
            streams = rng.choice([[k, some], [k, "$"], [k, "+"], ["s1", "s2", some, "0"],
                                  [k]])
            e.run("XREAD", *opts, "STREAMS", *streams)
        elif op == 8:
            e.run("XTRIM", k, *rng.choice([["MAXLEN", rng.randrange(0, 6)],
                                           ["MINID", "~", some], ["LIMIT", 1]]))
        elif op == 9:
            e.run("XDEL", k, *rng.sample(ids, rng.randrange(1, 3)))
        elif op == 10:
            e.run("XDELEX", k, *rng.choice([[], ["ACKED"], ["DELREF"]]), "IDS",
                  rng.choice([1, 2]), some, rng.choice(ids))
        else:
            e.run("XSETID", k, some, *rng.choice([[], ["ENTRIESADDED", 99],
                                                 ["MAXDELETEDID", "0-1"]]))


def _outcome(table: dict, workload, seed: int):
    with table_installed(table):
        e = RecordingEnv()
        workload(e, random.Random(seed), 200)
        return e.replies, e.batches, digest_keyspace(e.core)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32))
def test_stream_commands_compiled_as_from_source(source_table, seed):
    assert (_outcome(command_table(), random_stream_workload, seed)
            == _outcome(source_table, random_stream_workload, seed))


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32))
def test_group_commands_compiled_as_from_source(source_table, seed):
    assert (_outcome(command_table(), random_group_workload, seed)
            == _outcome(source_table, random_group_workload, seed))


def test_the_handler_modules_run_compiled_unless_streamdb_pure_is_set(source_table):
    for name in HANDLER_MODULES:
        assert compiled.is_compiled(sys.modules[name]) == (not compiled.PURE), name
    # The comparison above compares two different things (or, under PURE, the same).
    for name in ("xadd", "xrange", "xreadgroup", "xack"):
        built, source = registry.COMMANDS[name].handler, source_table[name][0].handler
        assert source is not built
        assert source.__code__.co_filename.endswith(".py")
        assert (type(built) is type(source)) == compiled.PURE, name


def test_new_delivery_effects_are_the_xclaims_of_first_deliveries():
    """A ">" read's effects, built with their shared parts formatted once, are
    exactly xclaim_effect of each new PEL entry with LASTID its own id."""
    g = ConsumerGroup(b"g", 0, 0)
    consumer = g.create_consumer(b"alice", 5)
    sids = [(7 << 64) | 1, (7 << 64) | 2, 9 << 64]
    pes = g.add_new_pending(sids, consumer, 1234)
    texts = [b"7-1", b"7-2", b"9-0"]
    assert new_delivery_effects(b"s", g, consumer, 1234, texts) == [
        xclaim_effect(b"s", g, sid, pe, sid) for sid, pe in zip(sids, pes)]
