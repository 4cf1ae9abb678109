"""Effects are the whole truth: replaying them into a fresh engine gives the same state.

A long random workload (every write command we have, XNACK, capped or CLAIM reads
and dead-letter policies among them, blocking reads that XADD serves, MULTI/EXEC, several databases) runs in-process against a Core; every effect batch the
core emits is recorded.  Replaying the batches through a replay client (the path the
AOF loader and replicas use) into a fresh Core must give an equal DEBUG DIGEST.
"""

from __future__ import annotations

import random

import pytest

import streamdb.commands  # noqa: F401  (fills the command table)
from streamdb.commands import COMMANDS
from streamdb.commands.server import digest_keyspace
from streamdb.server.core import BLOCKED, Core

from inproc import Delivered, FakeClock, Recorder, replay
from inproc import argv as _b


def random_workload(core: Core, clock: FakeClock, rng: random.Random, steps: int) -> None:
    have = set(COMMANDS)
    clients = [core.new_client(outbox=Delivered(lambda reply: None)) for _ in range(4)]
    keys = [b"s1", b"s2", b"s3"]
    groups = [b"g1", b"g2"]
    consumers = [b"alice", b"bob", b"carol"]
    seen_ids: list[bytes] = [b"0-1"]

    def run(client, *args):
        reply = core.execute(client, _b(*args))
        if isinstance(reply, bytes) and b"-" in reply and reply[:1].isdigit():
            seen_ids.append(reply)
        return reply

    for _ in range(steps):
        clock.t += rng.choice([0, 0, 0.001, 0.005, 0.2, 3])
        c = rng.choice(clients)
        if c.blocked is not None:
            continue
        k = rng.choice(keys)
        g = rng.choice(groups)
        who = rng.choice(consumers)
        some_id = rng.choice(seen_ids)
        op = rng.randrange(26)
        if op < 6:
            fields = ["f", rng.randrange(100)] if rng.random() < 0.7 else ["x", 1, "y", rng.randrange(9)]
            trim = []
            r = rng.random()
            if r < 0.15:
                trim = ["MAXLEN", rng.choice(["~", "="]), rng.randrange(0, 30)]
            elif r < 0.2:
                trim = ["MINID", "~", some_id.decode()]
            run(c, "XADD", k, *trim, "*", *fields)
        elif op == 6:
            run(c, "XDEL", k, some_id)
        elif op == 7:
            run(c, "XTRIM", k, "MAXLEN", rng.choice(["~", "="]), rng.randrange(0, 40))
        elif op == 8 and "xgroup" in have:
            run(c, "XGROUP", "CREATE", k, g, rng.choice(["0", "$"]), "MKSTREAM")
        elif op in (9, 10) and "xreadgroup" in have:
            block = ["BLOCK", rng.choice([0, 50])] if rng.random() < 0.3 else []
            noack = ["NOACK"] if rng.random() < 0.1 else []
            claim = ["CLAIM", rng.choice([0, 100, 5000])] if rng.random() < 0.3 else []
            caps = []
            if rng.random() < 0.3:
                caps += ["MAXCOUNT", rng.randrange(1, 4)]
            if rng.random() < 0.3:
                caps += ["MAXSIZE", rng.choice([1, 40, 120])]
            other = rng.choice(keys)
            streams = [k, other] if other != k and rng.random() < 0.3 else [k]
            run(c, "XREADGROUP", "GROUP", g, who, "COUNT", rng.randrange(1, 5), *caps, *block,
                *noack, *claim, "STREAMS", *streams,
                *[rng.choice([">", ">", "0"]) for _ in streams])
        elif op == 11 and "xack" in have:
            run(c, "XACK", k, g, some_id)
        elif op == 12 and "xclaim" in have:
            run(c, "XCLAIM", k, g, who, rng.choice([0, 100]), some_id)
        elif op == 13 and "xautoclaim" in have:
            run(c, "XAUTOCLAIM", k, g, who, rng.choice([0, 100]), "0", "COUNT", 3)
        elif op == 14 and "xgroup" in have:
            sub = rng.choice(["SETID", "DELCONSUMER", "CREATECONSUMER", "DESTROY"])
            if sub == "SETID":
                run(c, "XGROUP", "SETID", k, g, rng.choice(["0", "$", some_id.decode()]))
            elif sub == "DESTROY" and rng.random() < 0.2:
                run(c, "XGROUP", "DESTROY", k, g)
            else:
                run(c, "XGROUP", sub, k, g, who)
        elif op == 15:
            run(c, "XREAD", "BLOCK", rng.choice([0, 10]), "STREAMS", k, "$")
        elif op == 16:
            run(c, "MULTI")
            run(c, "XADD", k, "*", "m", 1)
            if "xreadgroup" in have:
                run(c, "XREADGROUP", "GROUP", g, who, "COUNT", 2, "STREAMS", k, ">")
            run(c, "XADD", rng.choice(keys), "*", "m", 2)
            run(c, "EXEC")
        elif op == 17:
            run(c, "SELECT", rng.choice([0, 0, 1]))
        elif op == 18:
            run(c, "SET", b"str", rng.randrange(5))
            run(c, "INCR", b"counter")
        elif op == 19 and rng.random() < 0.1:
            run(c, "DEL", k)
        elif op == 20:
            run(c, "XSETID", k, "+" if False else rng.choice(seen_ids))
        elif op == 21 and "xdelex" in have:
            run(c, "XDELEX", k, rng.choice(["KEEPREF", "DELREF", "ACKED"]), "IDS", 1, some_id)
        elif op in (22, 23) and "xnack" in have:
            ids = rng.sample(seen_ids, min(len(seen_ids), rng.randrange(1, 4)))
            opts = ["RETRYCOUNT", rng.randrange(0, 4)] if rng.random() < 0.3 else []
            if rng.random() < 0.3:
                opts.append("FORCE")
            run(c, "XNACK", k, g, rng.choice(["SILENT", "FAIL", "FATAL"]), "IDS", len(ids),
                *ids, *opts)
        elif op == 24 and "streamdb.group" in have:
            # A dead-letter policy: redeliveries and XNACKs then move entries to another
            # stream (one of the workload's own streams, too), or not (a string there).
            run(c, "STREAMDB.GROUP", "SET", k, g, "MAXDELIVERIES", rng.randrange(1, 4),
                "DEADLETTER", rng.choice(["dlq", "s3", "str"]))
        elif op == 25 and "streamdb.group" in have and rng.random() < 0.3:
            run(c, "STREAMDB.GROUP", "RESET", k, g)


@pytest.mark.parametrize("seed", range(6))
def test_replayed_effects_reproduce_the_state(seed):
    clock = FakeClock()
    core = Core(clock=clock)
    core.config.values["stream-node-max-entries"] = 5
    rec = Recorder()
    core.add_effect_sink(rec)
    random_workload(core, clock, random.Random(seed), 1500)

    replica = Core(clock=FakeClock())
    replica.config.values["stream-node-max-entries"] = 5
    replay(rec.batches, replica)
    assert digest_keyspace(replica) == digest_keyspace(core)
    assert digest_keyspace(core) != "0" * 40


def test_blocked_xread_is_served_in_the_same_call_as_the_xadd():
    clock = FakeClock()
    core = Core(clock=clock)
    got = []
    reader = core.new_client(outbox=Delivered(got.append))
    writer = core.new_client()
    assert core.execute(reader, _b("XREAD", "BLOCK", 0, "STREAMS", "s", "$")) is BLOCKED
    reply = core.execute(writer, _b("XADD", "s", "5-1", "a", "1"))
    assert reply == b"5-1"
    assert got == [[[b"s", [[b"5-1", [b"a", b"1"]]]]]]
    assert reader.blocked is None
