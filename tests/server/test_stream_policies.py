"""Deletion policies (KEEPREF/DELREF/ACKED), XDELEX, XADD IDMP/IDMPAUTO, XCFGSET,
XIDMPRECORD, XSETID's errors against 7.0, and the replay of their effects.

Policy semantics that need consumer-group state are checked in-process (a
Core with groups built through the engine), so they do not depend on the
XGROUP/XREADGROUP implementation; the wire behaviour is checked on a real
server process through redis-py (``r``).
"""

from __future__ import annotations

import random

import pytest
import redis

import streamdb.commands  # noqa: F401  (fills the command table)
from streamdb.commands import COMMANDS
from streamdb.commands.server import digest_keyspace
from streamdb.engine.policies import delete_with_policy
from streamdb.engine import ConsumerGroup
from streamdb.server.core import Core

from helpers import ServerProcess
from resp_raw import RawClient

# ---------------------------------------------------------------------------
# In-process helpers
# ---------------------------------------------------------------------------


class Env:
    def __init__(self, start_s: float = 1_000_000.0) -> None:
        self.now = start_s
        self.core = Core(clock=lambda: self.now)
        self.client = self.core.new_client()
        self.effects: list[tuple[int, list]] = []
        self.core.add_effect_sink(lambda batch: self.effects.append((batch.db, batch.commands)))

    def __call__(self, *args):
        argv = [a.encode() if isinstance(a, str) else (b"%d" % a if isinstance(a, int) else a)
                for a in args]
        return self.core.execute(self.client, argv)

    def stream(self, key=b"s"):
        return self.core.keyspace[0].data.get(key)


def add_group(s, name: bytes, last: int, pending=(), consumer=b"c", now=1):
    g = ConsumerGroup(name, last_id=last << 64)
    if s.groups is None:
        s.groups = {}
    s.groups[name] = g
    c = g.create_consumer(consumer, now)
    for ms in pending:
        g.add_pending(ms << 64, c, now)
    return g


def ids(*ms):
    return [m << 64 for m in ms]


# ---------------------------------------------------------------------------
# XDELEX and delete_with_policy
# ---------------------------------------------------------------------------


def test_xdelex_keepref_and_missing(r):
    for i in range(1, 4):
        r.xadd("s", {"f": i}, id=f"{i}-0")
    assert r.execute_command("XDELEX", "s", "IDS", 2, "1-0", "9-0") == [1, -1]
    assert r.execute_command("XDELEX", "s", "KEEPREF", "IDS", 1, "1-0") == [-1]
    assert r.execute_command("XDELEX", "nokey", "IDS", 3, "1-0", "2-0", "3-0") == [-1, -1, -1]
    assert r.xlen("s") == 2
    assert info(r)[b"max-deleted-entry-id"] == b"1-0"
    # ids are parsed before the key is looked up
    with pytest.raises(redis.ResponseError, match="Invalid stream ID"):
        r.execute_command("XDELEX", "nokey", "IDS", 1, "bad")


@pytest.mark.parametrize("args,err", [
    (["IDS", "0", "1-0"], "ERR Number of IDs must be a positive integer"),
    (["IDS", "-5", "1-0"], "ERR Number of IDs must be a positive integer"),
    (["IDS", "abc", "1-0"], "ERR Number of IDs must be a positive integer"),
    (["IDS", "3", "1-0", "2-0"], "ERR The `numids` parameter must match the number of arguments"),
    (["IDS", "1", "1-0", "2-0"], "ERR syntax error"),
    (["KEEPREF", "DELREF", "IDS", "1", "1-0"], "ERR syntax error"),
    (["ACKED", "ACKED", "IDS", "1", "1-0"], "ERR syntax error"),
    (["BOGUS", "IDS", "1", "1-0"], "ERR syntax error"),
    (["KEEPREF", "x", "y"], "ERR syntax error"),
    (["IDS", "1", "-"], "ERR Invalid stream ID specified as stream command argument"),
])
def test_xdelex_errors(r, args, err):
    r.xadd("s", {"f": 1}, id="1-0")
    with pytest.raises(redis.ResponseError) as e:
        r.execute_command("XDELEX", "s", *args)
    assert str(e.value) == err.removeprefix("ERR ") or str(e.value) == err
    assert r.xlen("s") == 1


def test_xdelex_arity(r):
    with pytest.raises(redis.ResponseError, match="wrong number of arguments for 'xdelex'"):
        r.execute_command("XDELEX", "s", "IDS", "1")


def test_acked_policy():
    env = Env()
    for i in range(1, 7):
        env("XADD", "s", f"{i}-0", "f", "v")
    s = env.stream()
    add_group(s, b"g1", last=4, pending=[2])     # read 1..4, 2 still pending
    add_group(s, b"g2", last=5)                  # read 1..5, all acked
    # 1: read and acked by both -> deleted; 2: pending in g1; 5: g1 has not read it;
    # 6: nobody read it; 9: no such entry
    assert env("XDELEX", "s", "ACKED", "IDS", 5, "1-0", "2-0", "5-0", "6-0", "9-0") == [1, 2, 2, 2, -1]
    assert s.length == 5
    s.groups[b"g1"].ack(2 << 64)
    assert env("XDELEX", "s", "ACKED", "IDS", 1, "2-0") == [1]
    # ACKED never touches PELs; KEEPREF leaves references dangling, like XDEL
    s.groups[b"g1"].add_pending(3 << 64, s.groups[b"g1"].consumers[b"c"], 1)
    assert env("XDELEX", "s", "KEEPREF", "IDS", 1, "3-0") == [1]
    assert (3 << 64) in s.groups[b"g1"].pel


def test_delref_policy_removes_references_everywhere():
    env = Env()
    for i in range(1, 5):
        env("XADD", "s", f"{i}-0", "f", "v")
    s = env.stream()
    g1 = add_group(s, b"g1", last=4, pending=[1, 2, 3])
    g2 = add_group(s, b"g2", last=2, pending=[2])
    env("XDEL", "s", "3-0")                           # 3 now dangles in g1's PEL
    env.effects.clear()
    assert env("XDELEX", "s", "DELREF", "IDS", 3, "2-0", "3-0", "7-0") == [1, -1, -1]
    assert list(g1.pel) == ids(1) and list(g2.pel) == []
    assert (3 << 64) not in g1.consumers[b"c"].pending
    assert env.effects == [(0, [[b"XDELEX", b"s", b"DELREF", b"IDS", b"3", b"2-0", b"3-0", b"7-0"]])]
    # nothing changed -> nothing propagated
    env.effects.clear()
    assert env("XDELEX", "s", "DELREF", "IDS", 1, "7-0") == [-1]
    assert env.effects == []


def test_delete_with_policy_is_reusable():
    env = Env()
    for i in range(1, 4):
        env("XADD", "s", f"{i}-0", "f", "v")
    s = env.stream()
    add_group(s, b"g", last=1)
    changed = []
    assert delete_with_policy(s, ids(1, 2, 8), b"acked", changed) == [1, 2, -1]
    assert changed == ids(1)
    assert delete_with_policy(s, ids(2), b"keepref") == [1]


# ---------------------------------------------------------------------------
# Trimming policies (XADD / XTRIM): ACKED stops at the first referenced entry
# ---------------------------------------------------------------------------


def test_xadd_maxlen_acked_follows_redis():
    """Redis's own 'XADD with MAXLEN option and ACKED option' scenario."""
    env = Env()
    for i in range(1, 6):
        env("XADD", "s", f"{i}-0", "f", "v")
    s = env.stream()
    g = add_group(s, b"g", last=0)
    env("XADD", "s", "MAXLEN", "=", 1, "ACKED", "6-0", "f", "v")
    assert s.length == 6                           # nothing read: everything kept
    g.last_id = 1 << 64                            # read 1-0 and acked it
    env("XADD", "s", "MAXLEN", "=", 1, "ACKED", "7-0", "f", "v")
    assert s.length == 6                           # only 1-0 could go
    g.last_id = 7 << 64                            # everything read and acked
    env("XADD", "s", "MAXLEN", "=", 1, "ACKED", "8-0", "f", "v")
    assert s.length == 1


def test_xtrim_acked_and_delref():
    env = Env()
    for i in range(1, 11):
        env("XADD", "s", f"{i}-0", "f", "v")
    s = env.stream()
    g = add_group(s, b"g", last=8, pending=[4, 9])
    env.effects.clear()
    # ACKED keeps each entry still needed, one by one (Redis's streamEntryIsReferenced):
    # 4-0 is pending, so it stays, and 5-0 and 6-0 after it go.  What went is not a
    # leading run: the effect is the exact ACKED trim below the last entry removed.
    assert env("XTRIM", "s", "MINID", "=", "7-0", "ACKED") == 5
    assert [sid for sid, _ in s] == ids(4, 7, 8, 9, 10)
    assert env.effects == [(0, [[b"XTRIM", b"s", b"MINID", b"=", b"6-1", b"ACKED"]])]
    assert env("XTRIM", "s", "MAXLEN", "=", "2", "DELREF") == 3    # 4, 7, 8 go, refs of 4 too
    assert list(g.pel) == ids(9)
    assert env.effects[-1] == (0, [[b"XTRIM", b"s", b"MINID", b"=", b"9-0", b"DELREF"]])
    assert env("XTRIM", "s", "MAXLEN", "0", "KEEPREF") == 2
    assert list(g.pel) == ids(9)                                     # KEEPREF: dangling


def test_approximate_acked_trim_goes_into_nodes_with_pending_entries(tmp_path):
    # Redis 8.2+: ACKED keeps each entry still needed, one by one, also in an
    # approximate trim: a node the trim lets go whole but that holds a pending entry
    # loses its other entries.  Nodes of two entries: [1 2] [3 4] [5], with 3-0 and
    # 5-0 still pending, MINID ~ 6-0 removes 1-0, 2-0 and 4-0 (3; the trim stopped at
    # the first pending entry, 2, before).  The effect replays to the same state.
    with ServerProcess(tmp_path, "--appendonly", "yes", "--save", "",
                       "--stream-node-max-entries", "2") as srv:
        c = redis.Redis(port=srv.port)
        for i in range(1, 6):
            c.xadd("s", {"f": i}, id=f"{i}-0")
        c.xgroup_create("s", "g", id="0")
        c.xreadgroup("g", "c", {"s": ">"})
        c.xack("s", "g", "1-0", "2-0", "4-0")
        assert c.execute_command("XTRIM", "s", "MINID", "~", "6-0", "ACKED") == 3
        assert [sid for sid, _ in c.xrange("s")] == [b"3-0", b"5-0"]
        digest = c.execute_command("DEBUG", "DIGEST")
        c.execute_command("DEBUG", "LOADAOF")
        assert c.execute_command("DEBUG", "DIGEST") == digest
        c.close()


def test_acked_without_groups_is_keepref(r):
    for i in range(1, 6):
        r.xadd("s", {"f": i}, id=f"{i}-0")
    assert r.execute_command("XTRIM", "s", "MAXLEN", "2", "ACKED") == 3
    assert r.execute_command("XDELEX", "s", "ACKED", "IDS", 1, "4-0") == [1]


# ---------------------------------------------------------------------------
# IDMP / IDMPAUTO / XCFGSET / XIDMPRECORD on a real server process
# ---------------------------------------------------------------------------


def info(r, key="s"):
    raw = r.execute_command("XINFO", "STREAM", key)     # redis-py parses it into a dict
    if not isinstance(raw, dict):
        raw = dict(zip(raw[0::2], raw[1::2]))
    return {k.encode() if isinstance(k, str) else k: v for k, v in raw.items()}


def test_idmp_dedup_and_counters(r):
    a = r.execute_command("XADD", "s", "IDMP", "p1", "req-1", "*", "amount", "100")
    b = r.execute_command("XADD", "s", "IDMP", "p1", "req-1", "*", "amount", "200")
    c = r.execute_command("XADD", "s", "IDMP", "p2", "req-1", "*", "amount", "300")
    assert a == b != c
    assert r.xlen("s") == 2
    assert r.xrange("s")[0][1] == {b"amount": b"100"}
    i = info(r)
    assert (i[b"pids-tracked"], i[b"iids-tracked"], i[b"iids-added"], i[b"iids-duplicates"]) == (2, 2, 2, 1)
    assert (i[b"idmp-duration"], i[b"idmp-maxsize"]) == (100, 100)


def test_idmpauto_ignores_field_order(r):
    a = r.execute_command("XADD", "s", "IDMPAUTO", "p", "*", "f1", "a", "f2", "b")
    b = r.execute_command("XADD", "s", "IDMPAUTO", "p", "*", "f2", "b", "f1", "a")
    c = r.execute_command("XADD", "s", "IDMPAUTO", "p", "*", "f2", "a", "f1", "b")
    d = r.execute_command("XADD", "s", "KEEPREF", "IDMPAUTO", "p", "MAXLEN", "~", "100", "*",
                          "f1", "a", "f2", "b")
    assert a == b == d != c and r.xlen("s") == 2


@pytest.mark.parametrize("args,err", [
    (["IDMP", "p1", "*", "f", "v"], "Invalid stream ID specified as stream command argument"),
    (["IDMP", "p1", "i1", "1-1", "f", "v"], "IDMP/IDMPAUTO can be used only with auto-generated IDs"),
    (["IDMPAUTO", "p1", "5-*", "f", "v"], "IDMP/IDMPAUTO can be used only with auto-generated IDs"),
    (["IDMP", "p1", "i1", "IDMP", "p2", "i2", "*", "f", "v"], "IDMP/IDMPAUTO specified multiple times"),
    (["IDMPAUTO", "p1", "IDMP", "p2", "i2", "*", "f", "v"], "IDMP/IDMPAUTO specified multiple times"),
    (["IDMP", "", "i1", "*", "f", "v"], "IDMP requires a non-empty producer ID"),
    (["IDMP", "p1", "", "*", "f", "v"], "IDMP requires a non-empty idempotent ID"),
    (["IDMPAUTO", "", "*", "f", "v"], "IDMPAUTO requires a non-empty producer ID"),
])
def test_idmp_errors(r, args, err):
    with pytest.raises(redis.ResponseError) as e:
        r.execute_command("XADD", "s", *args)
    assert str(e.value) == err
    assert r.exists("s") == 0


def test_idmp_nomkstream_and_maxsize(r):
    assert r.execute_command("XADD", "s", "NOMKSTREAM", "IDMP", "p", "i", "*", "f", "v") is None
    first = r.execute_command("XADD", "s", "IDMP", "p", "init", "*", "f", "v")
    assert r.execute_command("XCFGSET", "s", "IDMP-MAXSIZE", 3, "IDMP-DURATION", 60) == b"OK"
    got = [r.execute_command("XADD", "s", "IDMP", "p", f"r{i}", "*", "f", i) for i in range(1, 5)]
    # r1 was evicted by r4 (maxsize 3); r2..r4 still deduplicate
    assert r.execute_command("XADD", "s", "IDMP", "p", "r1", "*", "f", "x") not in got
    assert r.execute_command("XADD", "s", "IDMP", "p", "r4", "*", "f", "x") == got[3]
    assert info(r)[b"iids-tracked"] == 3 and info(r)[b"iids-added"] == 6
    assert first not in got


def test_xcfgset(r):
    with pytest.raises(redis.ResponseError, match="^no such key$"):
        r.execute_command("XCFGSET", "s", "IDMP-DURATION", 5)
    a = r.execute_command("XADD", "s", "IDMP", "p", "i", "*", "f", "v")
    for args, err in [([], "At least one parameter must be specified"),
                      (["IDMP-DURATION"], "syntax error"),
                      (["BOGUS", "1"], "syntax error"),
                      (["IDMP-DURATION", "0"], "IDMP-DURATION must be between 1 and 86400 seconds"),
                      (["IDMP-DURATION", "86401"], "IDMP-DURATION must be between 1 and 86400 seconds"),
                      (["IDMP-MAXSIZE", "10001"], "IDMP-MAXSIZE must be between 1 and 10000 entries"),
                      (["IDMP-MAXSIZE", "3.5"], "value is not an integer or out of range"),
                      (["IDMP-MAXSIZE", "007"], "value is not an integer or out of range")]:
        with pytest.raises(redis.ResponseError) as e:
            r.execute_command("XCFGSET", "s", *args)
        assert str(e.value) == err, args
    # same values: history kept
    assert r.execute_command("XCFGSET", "s", "IDMP-DURATION", 100, "IDMP-MAXSIZE", 100) == b"OK"
    assert r.execute_command("XADD", "s", "IDMP", "p", "i", "*", "f", "v") == a
    # a changed value clears every producer (lifetime counters stay)
    assert r.execute_command("XCFGSET", "s", "IDMP-DURATION", 50) == b"OK"
    i = info(r)
    assert (i[b"idmp-duration"], i[b"pids-tracked"], i[b"iids-tracked"], i[b"iids-added"]) == (50, 0, 0, 1)
    assert r.execute_command("XADD", "s", "IDMP", "p", "i", "*", "f", "v") != a
    r.set("str", "x")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        r.execute_command("XCFGSET", "str", "IDMP-DURATION", 5)


def test_xidmprecord(r):
    with pytest.raises(redis.ResponseError, match="no such key"):
        r.execute_command("XIDMPRECORD", "s", "p", "i", "1-0")
    r.xadd("s", {"f": "v"}, id="1-0")
    r.xadd("s", {"f": "v"}, id="2-0")
    assert r.execute_command("XIDMPRECORD", "s", "p", "i", "1-0") == b"OK"
    assert r.execute_command("XIDMPRECORD", "s", "p", "i", "1-0") == b"OK"      # idempotent
    for args in (["p", "i", "2-0"], ["p", "j", "3-0"], ["", "i", "1-0"], ["p", "", "1-0"]):
        with pytest.raises(redis.ResponseError):
            r.execute_command("XIDMPRECORD", "s", *args)
    r.xdel("s", "2-0")
    with pytest.raises(redis.ResponseError):
        r.execute_command("XIDMPRECORD", "s", "p", "k", "2-0")
    assert info(r)[b"iids-added"] == 1


def test_idmp_expiry_uses_duration():
    env = Env()
    a = env("XADD", "s", "IDMP", "p", "i", "*", "f", "v")
    env("XCFGSET", "s", "IDMP-DURATION", 2)                 # clears: i forgotten
    b = env("XADD", "s", "IDMP", "p", "i", "*", "f", "v")
    assert a != b
    env.now += 1.5
    assert env("XADD", "s", "IDMP", "p", "i", "*", "f", "v") == b
    env.now += 1.0
    c = env("XADD", "s", "IDMP", "p", "i", "*", "f", "v")
    assert c != b
    assert env.stream().idmp.iids_tracked() == 1


# ---------------------------------------------------------------------------
# XSETID: every error text against Redis 7.0
# ---------------------------------------------------------------------------


XSETID_SEQUENCE = [
    ["DEL", "s"], ["XSETID", "s", "1-0"], ["XADD", "s", "5-0", "a", "b"], ["XADD", "s", "6-0", "a", "b"],
    ["XSETID", "s", "5-0"], ["XSETID", "s", "7-0", "ENTRIESADDED", "1"],
    ["XSETID", "s", "7-0", "ENTRIESADDED", "-1"], ["XSETID", "s", "7-0", "MAXDELETEDID", "8-0"],
    ["XSETID", "s", "7-0", "MAXDELETEDID", "x"], ["XSETID", "s", "x"], ["XSETID", "s", "7-0", "bogus"],
    ["XSETID", "s", "7-0", "ENTRIESADDED"], ["XSETID", "s", "7-0", "ENTRIESADDED", "x"],
    ["XSETID", "s", "7-0", "ENTRIESADDED", "10", "MAXDELETEDID", "3-0"], ["XSETID", "s", "7"],
    ["XSETID", "s", "-"], ["XSETID", "s", "+"], ["XDEL", "s", "5-0", "6-0"], ["XSETID", "s", "9-0"],
    ["XSETID", "s", "9-0", "ENTRIESADDED", "0"], ["XSETID", "s"], ["SET", "str", "v"],
    ["XSETID", "str", "1-0"], ["XRANGE", "s", "-", "+"], ["XLEN", "s"],
]


def test_xsetid_matches_70(server, redis_server):
    ours, ref = RawClient(server.port), RawClient(redis_server.port)
    try:
        ours.call("FLUSHALL")
        ref.call("FLUSHALL")
        for cmd in XSETID_SEQUENCE:
            assert ours.call(*cmd) == ref.call(*cmd), cmd
        mine = dict(zip(*[iter(ours.call("XINFO", "STREAM", "s")[1])] * 2))
        theirs = dict(zip(*[iter(ref.call("XINFO", "STREAM", "s")[1])] * 2))
        assert {k: v for k, v in mine.items() if k[1] in {k2[1] for k2 in theirs}} == theirs
    finally:
        ours.close()
        ref.close()


def test_xsetid_below_max_deleted_id_is_refused_unlike_70(server, redis_server):
    # Deliberate difference: Redis >= 7.2 refuses a last id below the stream's
    # max-deleted-entry-id (an XADD could otherwise re-create a deleted id); 7.0 accepts it.
    ours, ref = RawClient(server.port), RawClient(redis_server.port)
    try:
        for c in (ours, ref):
            c.call("FLUSHALL")
            for cmd in (["XADD", "s", "5-1", "f", "v"], ["XDEL", "s", "5-1"]):
                c.call(*cmd)
        for cmd in (["XSETID", "s", "4-1"], ["XSETID", "s", "5-0", "MAXDELETEDID", "0-1"]):
            assert ref.call(*cmd) == (b"+", b"OK")
            assert ours.call(*cmd) == (
                b"-", b"ERR The ID specified in XSETID is smaller than current max_deleted_entry_id")
        assert ours.call("XSETID", "s", "5-1") == (b"+", b"OK")        # equal is allowed
        assert ours.call("XADD", "s", "5-*", "f", "v") == (b"$", b"5-2")
        # Current Redis checks max-deleted-entry-id before the top item; 7.0 has only the latter.
        for c in (ours, ref):
            for cmd in (["XADD", "t", "1-1", "f", "v"], ["XADD", "t", "7-0", "f", "v"],
                        ["XDEL", "t", "7-0"]):
                c.call(*cmd)
        assert ref.call("XSETID", "t", "0-1") == (
            b"-", b"ERR The ID specified in XSETID is smaller than the target stream top item")
        assert ours.call("XSETID", "t", "0-1") == (
            b"-", b"ERR The ID specified in XSETID is smaller than current max_deleted_entry_id")
    finally:
        ours.close()
        ref.close()


# ---------------------------------------------------------------------------
# Effects: replaying what a workload propagated rebuilds the same keyspace
# ---------------------------------------------------------------------------


def _replay(effects, clock_s: float) -> Core:
    fresh = Core(clock=lambda: clock_s)
    client = fresh.replay_client()
    for db, batch in effects:
        if db != client.db:
            assert fresh.execute(client, [b"SELECT", b"%d" % db]) is not None
        for argv in batch:
            reply = fresh.execute(client, argv)
            assert not isinstance(reply, Exception), (argv, reply)
    return fresh


def test_effects_replay_rebuilds_state():
    rnd = random.Random(7)
    env = Env()
    # Small nodes on the primary, default ones in the replay: "~" trims depend on node
    # boundaries, so this also proves the propagated trims are exact.
    env.core.config.set("stream-node-max-entries", "8")
    has_groups = "xgroup" in COMMANDS and "xreadgroup" in COMMANDS
    for key in ("a", "b"):
        env("XADD", key, "*", "init", "1")
        if has_groups:
            assert env("XGROUP", "CREATE", key, "g", "0") is not None
    for step in range(400):
        env.now += rnd.choice([0, 0, 0.001, 0.05, 1, 3])
        key = rnd.choice(["a", "b"])
        op = rnd.random()
        fv = ["f", str(rnd.randrange(5)), "g", str(rnd.randrange(3))]
        if op < 0.25:
            env("XADD", key, "IDMP", f"p{rnd.randrange(3)}", f"i{rnd.randrange(12)}", "*", *fv)
        elif op < 0.40:
            env("XADD", key, "IDMPAUTO", f"p{rnd.randrange(2)}",
                *rnd.choice([[], ["MAXLEN", "~", "20"], ["ACKED", "MAXLEN", "=", "15"]]), "*", *fv)
        elif op < 0.55:
            env("XADD", key, *rnd.choice([[], ["MAXLEN", "~", "10"], ["DELREF", "MINID", "~", "0"]]),
                "*", *fv)
        elif op < 0.62:
            env("XTRIM", key, rnd.choice(["MAXLEN", "MAXLEN"]), rnd.choice(["=", "~"]),
                str(rnd.randrange(5, 30)), rnd.choice(["KEEPREF", "DELREF", "ACKED"]))
        elif op < 0.75:
            s = env.stream(key.encode())
            pick = [f"{sid >> 64}-{sid & (2**64 - 1)}" for sid, _ in s.range(0, 2**128 - 1)][:30]
            chosen = rnd.sample(pick, min(len(pick), 3)) + ["1-1"]
            env("XDELEX", key, rnd.choice(["KEEPREF", "DELREF", "ACKED"]), "IDS", len(chosen), *chosen)
        elif op < 0.78:
            env("XCFGSET", key, "IDMP-DURATION", rnd.choice([2, 5, 100]),
                "IDMP-MAXSIZE", rnd.choice([3, 5, 100]))
        elif has_groups and op < 0.92:
            env("XREADGROUP", "GROUP", "g", f"c{rnd.randrange(2)}", "COUNT", rnd.randrange(1, 4),
                "STREAMS", key, ">")
        elif has_groups:
            s = env.stream(key.encode())
            pel = list(s.groups[b"g"].pel)[:2] if s.groups else []
            if pel:
                env("XACK", key, "g", *[f"{p >> 64}-{p & (2**64 - 1)}" for p in pel])
    before = digest_keyspace(env.core)
    assert any(b"XIDMPRECORD" in argv[0] for _, batch in env.effects for argv in batch)
    # Replayed much later: IDMP maps must still come out identical (times come from ids).
    replayed = _replay(env.effects, env.now + 10_000)
    assert digest_keyspace(replayed) == before
    for key in (b"a", b"b"):
        s1, s2 = env.stream(key), replayed.keyspace[0].data[key]
        assert list(s1) == list(s2)
        assert list(s1.idmp.items()) == list(s2.idmp.items())
        assert s1.idmp.added == s2.idmp.added


def test_duplicate_xadd_propagates_nothing():
    env = Env()
    env("XADD", "s", "IDMP", "p", "i", "MAXLEN", "=", "1", "*", "f", "v")
    n = len(env.effects)
    assert env.effects[-1][1][:2] == [[b"MULTI"], [b"XADD", b"s", b"1000000000-0", b"f", b"v"]]
    assert env.effects[-1][1][2] == [b"XIDMPRECORD", b"s", b"p", b"i", b"1000000000-0"]
    env("XADD", "s", "IDMP", "p", "i", "MAXLEN", "=", "1", "*", "f", "v2")
    assert len(env.effects) == n
