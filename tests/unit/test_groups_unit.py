"""Consumer groups in-process: PEL invariants (engine), effect forms, and replay.

* engine/groups.py: random operations keep the PEL invariants (Hypothesis).
* commands/groups.py: the effects each command records have the documented
  deterministic form, and replaying every effect of a group-heavy workload into a
  fresh Core rebuilds a state with the same DEBUG DIGEST (PEL owners, delivery
  times and counts, last ids, entries-read, consumers).
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import streamdb.commands  # noqa: F401  (fills the command table)
from streamdb.commands.server import digest_keyspace
from streamdb.engine import ConsumerGroup
from streamdb.protocol.reply import encode_reply
from streamdb.server.core import BLOCKED, Core

from inproc import Delivered, FakeClock, replay
from inproc import argv as _b

# ---------------------------------------------------------------------------
# Engine: PEL invariants
# ---------------------------------------------------------------------------


def check_invariants(g: ConsumerGroup) -> None:
    owned = {}
    for c in g.consumers.values():
        assert list(c.pending) == sorted(c.pending)
        for sid in c.pending:
            assert sid not in owned, "an id is pending for two consumers"
            owned[sid] = c
    assert list(g.pel.keys()) == sorted(g.pel.keys())
    nacked = {sid for sid, pe in g.pel.items() if pe.consumer is None}
    assert set(owned) | nacked == set(g.pel.keys()) and not set(owned) & nacked
    assert set(g.nacked) == nacked and g.nacked_count() == len(nacked)
    for sid, pe in g.pel.items():
        assert pe.delivery_count >= 0
        if pe.consumer is None:         # NACKed: unowned, delivery time 0
            assert pe.delivery_time == 0 and pe.owner_name == b""
            continue
        assert owned[sid] is pe.consumer
        assert g.consumers.get(pe.consumer.name) is pe.consumer


NAMES = st.sampled_from([b"a", b"b", b"c", b"d"])
IDS = st.integers(min_value=0, max_value=40).map(lambda n: (n // 4) << 64 | n % 4)


class PelMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.g = ConsumerGroup(b"g")
        self.model: dict[int, tuple[bytes, int, int]] = {}   # id -> (owner, time, count)
        self.released: list[int] = []       # the NACKed ids, in the order of their release
        self.now = 1000

    def _forget_release(self, sid: int) -> None:
        if sid in self.released:
            self.released.remove(sid)

    def _consumer(self, name: bytes):
        return self.g.consumer(name) or self.g.create_consumer(name, self.now)

    @rule(name=NAMES, sid=IDS, count=st.integers(0, 5))
    def deliver(self, name, sid, count):
        self.now += 1
        self.g.add_pending(sid, self._consumer(name), self.now, count)
        self.model[sid] = (name, self.now, count)
        self._forget_release(sid)

    @rule(sid=IDS)
    def ack(self, sid):
        assert self.g.ack(sid) == (sid in self.model)
        self.model.pop(sid, None)
        self._forget_release(sid)

    @rule(name=NAMES, first=IDS, n=st.integers(1, 6))
    def deliver_new(self, name, first, n):
        """XREADGROUP >'s batch: consecutive ids, usually above everything pending,
        sometimes not (ids an XCLAIM FORCE put there): then one by one."""
        self.now += 1
        sids = list(range(first, first + n))
        pes = self.g.add_new_pending(sids, self._consumer(name), self.now)
        assert [self.g.pel[sid] for sid in sids] == pes
        for sid in sids:
            self.model[sid] = (name, self.now, 1)
            self._forget_release(sid)

    @rule(sids=st.lists(IDS, max_size=8))
    def ack_many(self, sids):
        """XACK of many ids (repeats and ids not pending among them), owned by
        one consumer or several."""
        expected = 0
        for sid in sids:
            if self.model.pop(sid, None) is not None:
                expected += 1
            self._forget_release(sid)
        assert self.g.ack_many(sids) == expected

    @rule(name=NAMES)
    def delete_consumer(self, name):
        if self.g.consumer(name) is None:
            return
        mine = [sid for sid, (owner, _, _) in self.model.items() if owner == name]
        assert self.g.delete_consumer(name) == len(mine)
        for sid in mine:
            del self.model[sid]

    @rule(name=NAMES)
    def create_consumer(self, name):
        self._consumer(name)

    @rule(sid=IDS, count=st.integers(0, 5))
    def nack(self, sid, count):
        """XNACK: a pending entry loses its owner; FORCE adds an unowned one."""
        if sid in self.g.pel:
            self.g.nack(sid, count)
        else:
            self.g.add_nacked(sid, count)
        self.model[sid] = (None, 0, count)
        self._forget_release(sid)        # NACKed again: last in the release order
        self.released.append(sid)

    @rule(start=IDS, end=IDS, count=st.integers(0, 10), name=st.none() | NAMES)
    def pel_range(self, start, end, count, name):
        c = self.g.consumer(name) if name is not None else None
        if name is not None and c is None:
            return
        got = [sid for sid, _ in self.g.pel_range(start, end, count, c)]
        want = sorted(sid for sid, (owner, _, _) in self.model.items()
                      if start <= sid <= end and (name is None or owner == name))[:max(count, 0)]
        assert got == want

    @invariant()
    def invariants(self):
        check_invariants(self.g)
        assert set(self.g.pel) == set(self.model)
        assert list(self.g.nacked) == self.released
        for sid, (owner, when, count) in self.model.items():
            pe = self.g.pel[sid]
            name = None if pe.consumer is None else pe.consumer.name
            assert (name, pe.delivery_time, pe.delivery_count) == (owner, when, count)


TestPelMachine = PelMachine.TestCase
TestPelMachine.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


# ---------------------------------------------------------------------------
# In-process core helpers
# ---------------------------------------------------------------------------


class Env:
    """A Core with a fake clock and an effect recorder."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.core = Core(clock=self.clock)
        self.batches: list[tuple[int, list[list[bytes]]]] = []
        self.seen = 0
        self.core.add_effect_sink(
            lambda batch: self.batches.append((batch.db, [list(a) for a in batch.commands])))
        self.delivered: list = []
        self.client = self.core.new_client(outbox=Delivered(self.delivered.append))

    def run(self, *args, client=None):
        return self.core.execute(client or self.client, _b(*args))

    def effects(self) -> list[list[bytes]]:
        """The effects since the last call, without MULTI/EXEC wrappers."""
        new = self.batches[self.seen:]
        self.seen = len(self.batches)
        return [a for _, eff in new for a in eff if a[0] not in (b"MULTI", b"EXEC")]

    def replay_into_fresh(self) -> Core:
        fresh = Core(clock=FakeClock(self.clock.t + 3600))  # replay happens later; times must not move
        replay(self.batches, fresh)
        return fresh


def group_state(core: Core, key=b"s", group=b"g"):
    s = core.keyspace[0].data[key]
    g = s.groups[group]
    return (g.last_id, g.entries_read, sorted(g.consumers),
            [(sid, pe.owner_name, pe.delivery_time, pe.delivery_count) for sid, pe in g.pel.items()])


# ---------------------------------------------------------------------------
# Effect forms
# ---------------------------------------------------------------------------


def test_xreadgroup_effects_createconsumer_xclaim_setid():
    e = Env()
    now = e.core.now_ms()
    e.run("XADD", "s", "1-0", "a", "1")
    e.run("XADD", "s", "2-0", "b", "2")
    e.run("XGROUP", "CREATE", "s", "g", "0")
    e.effects()
    assert e.run("XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", ">") == \
        [[b"s", [[b"1-0", [b"a", b"1"]], [b"2-0", [b"b", b"2"]]]]]
    t = b"%d" % now
    assert e.effects() == [
        [b"XGROUP", b"CREATECONSUMER", b"s", b"g", b"alice"],
        [b"XCLAIM", b"s", b"g", b"alice", b"0", b"1-0", b"TIME", t, b"RETRYCOUNT", b"1",
         b"FORCE", b"JUSTID", b"LASTID", b"1-0"],
        [b"XCLAIM", b"s", b"g", b"alice", b"0", b"2-0", b"TIME", t, b"RETRYCOUNT", b"1",
         b"FORCE", b"JUSTID", b"LASTID", b"2-0"],
        [b"XGROUP", b"SETID", b"s", b"g", b"2-0", b"ENTRIESREAD", b"2"],
    ]


def test_xreadgroup_without_effect_recorders_counts_the_same_changes():
    """With no sink that records effects (no AOF, no replica) XREADGROUP leaves its
    XCLAIMs out; the state, the reply and the change count must not differ."""
    cores = []
    for recorded in (True, False):
        core = Core(clock=FakeClock())
        if recorded:
            core.add_effect_sink(lambda batch: None)
        c = core.new_client()
        for i in range(25):
            core.execute(c, _b("XADD", "s", "*", "n", i))
        core.execute(c, _b("XGROUP", "CREATE", "s", "g", "0"))
        before = core.dirty
        replies = [core.execute(c, _b("XREADGROUP", "GROUP", "g", "c1", "COUNT", 10,
                                      "STREAMS", "s", ">")) for _ in range(3)]
        cores.append((replies, core.dirty - before, group_state(core), digest_keyspace(core)))
    assert cores[0] == cores[1]
    # Each read's SETID and the new consumer; as in Redis, the deliveries themselves
    # add nothing (stream-cgroups.tcl: "XREADGROUP of multiple entries changes dirty by one").
    assert cores[0][1] == 3 + 1


def test_noack_propagates_only_setid_and_known_consumer_is_not_recreated():
    e = Env()
    e.run("XADD", "s", "1-0", "a", "1")
    e.run("XGROUP", "CREATE", "s", "g", "0")
    e.run("XGROUP", "CREATECONSUMER", "s", "g", "bob")
    e.effects()
    e.run("XREADGROUP", "GROUP", "g", "bob", "NOACK", "STREAMS", "s", ">")
    assert e.effects() == [[b"XGROUP", b"SETID", b"s", b"g", b"1-0", b"ENTRIESREAD", b"1"]]


def test_xgroup_create_dollar_propagates_resolved_id_and_mkstream():
    e = Env()
    e.run("XADD", "s", "5-1", "a", "1")
    e.effects()
    e.run("XGROUP", "CREATE", "s", "g", "$")
    e.run("XGROUP", "CREATE", "new", "g", "$", "MKSTREAM", "ENTRIESREAD", "0")
    assert e.effects() == [
        [b"XGROUP", b"CREATE", b"s", b"g", b"5-1", b"ENTRIESREAD", b"-1"],
        [b"XGROUP", b"CREATE", b"new", b"g", b"0-0", b"ENTRIESREAD", b"0", b"MKSTREAM"],
    ]
    e.run("XGROUP", "SETID", "s", "g", "$")
    assert e.effects() == [[b"XGROUP", b"SETID", b"s", b"g", b"5-1", b"ENTRIESREAD", b"-1"]]


def test_claims_of_deleted_entries_propagate_xack():
    e = Env()
    for i in range(1, 4):
        e.run("XADD", "s", f"{i}-0", "f", str(i))
    e.run("XGROUP", "CREATE", "s", "g", "0")
    e.run("XREADGROUP", "GROUP", "g", "a", "STREAMS", "s", ">")
    e.run("XDEL", "s", "1-0", "2-0")
    e.effects()
    assert e.run("XCLAIM", "s", "g", "b", "0", "1-0", "JUSTID") == []
    assert e.effects() == [[b"XACK", b"s", b"g", b"1-0"]]
    assert e.run("XAUTOCLAIM", "s", "g", "b", "0", "0", "JUSTID") == [b"0-0", [b"3-0"], [b"2-0"]]
    eff = e.effects()
    assert eff[0] == [b"XACK", b"s", b"g", b"2-0"]
    assert eff[1][:6] == [b"XCLAIM", b"s", b"g", b"b", b"0", b"3-0"]
    assert eff[1][8:10] == [b"RETRYCOUNT", b"1"]     # JUSTID: the count did not move


def test_history_read_bumps_and_propagates_delivery():
    e = Env()
    e.run("XADD", "s", "1-0", "a", "1")
    e.run("XGROUP", "CREATE", "s", "g", "0")
    e.run("XREADGROUP", "GROUP", "g", "a", "STREAMS", "s", ">")
    e.clock.t += 5
    e.effects()
    e.run("XREADGROUP", "GROUP", "g", "a", "STREAMS", "s", "0")
    (eff,) = e.effects()
    assert eff[:10] == [b"XCLAIM", b"s", b"g", b"a", b"0", b"1-0", b"TIME",
                        b"%d" % e.core.now_ms(), b"RETRYCOUNT", b"2"]


def test_replayed_xclaim_keeps_a_future_time():
    """An effect is applied exactly, even when the applying clock is behind."""
    e = Env()
    e.run("XADD", "s", "1-0", "a", "1")
    e.run("XGROUP", "CREATE", "s", "g", "0")
    future = e.core.now_ms() + 10_000_000
    r = e.core.replay_client()
    e.core.execute(r, _b("XCLAIM", "s", "g", "x", "0", "1-0", "TIME", future, "RETRYCOUNT", 3,
                         "FORCE", "JUSTID", "LASTID", "1-0"))
    pe = e.core.keyspace[0].data[b"s"].groups[b"g"].pel[1 << 64]
    assert (pe.consumer.name, pe.delivery_time, pe.delivery_count) == (b"x", future, 3)
    # A normal client's future TIME is clamped to now, as Redis does.
    e.run("XCLAIM", "s", "g", "y", "0", "1-0", "TIME", future, "JUSTID")
    assert pe.delivery_time == e.core.now_ms()


def test_xreadgroup_claim_effects_and_reply():
    e = Env()
    for i in range(1, 4):
        e.run("XADD", "s", f"{i}-0", "f", str(i))
    e.run("XGROUP", "CREATE", "s", "g", "0")
    e.run("XREADGROUP", "GROUP", "g", "a", "COUNT", "1", "STREAMS", "s", ">")    # 1-0 at t0
    e.clock.t += 1
    e.run("XREADGROUP", "GROUP", "g", "b", "COUNT", "1", "STREAMS", "s", ">")    # 2-0 at t0+1s
    e.clock.t += 1
    e.effects()
    got = e.run("XREADGROUP", "GROUP", "g", "c", "CLAIM", "500", "STREAMS", "s", ">")
    # longest idle first, with idle ms and the previous delivery count; then new
    # entries, in the same four-element shape (idle 0, delivered 0 times before)
    assert encode_reply(got, False) == encode_reply(
        [[b"s", [[b"1-0", [b"f", b"1"], 2000, 1], [b"2-0", [b"f", b"2"], 1000, 1],
                 [b"3-0", [b"f", b"3"], 0, 0]]]], False)
    st_ = group_state(e.core)
    assert [(p[1], p[3]) for p in st_[3]] == [(b"c", 2), (b"c", 2), (b"c", 1)]
    assert st_[0] == 3 << 64
    fresh = e.replay_into_fresh()
    assert group_state(fresh) == group_state(e.core)


def test_xnack_is_recorded_as_called_and_replays_exactly():
    # Redis's xnackCommand neither rewrites nor replaces itself: the call is what
    # goes to the AOF and the replicas, and only when it released something.
    e = Env()
    for i in range(1, 5):
        e.run("XADD", "s", f"{i}-0", "f", str(i))
    e.run("XGROUP", "CREATE", "s", "g", "0")
    e.run("XREADGROUP", "GROUP", "g", "a", "COUNT", "3", "STREAMS", "s", ">")
    e.effects()
    assert e.run("XNACK", "s", "g", "SILENT", "IDS", "3", "1-0", "2-0", "9-0") == 2
    assert e.effects() == [[b"XNACK", b"s", b"g", b"SILENT", b"IDS", b"3", b"1-0", b"2-0",
                            b"9-0"]]
    assert e.run("XNACK", "s", "g", "FATAL", "IDS", "2", "3-0", "4-0", "FORCE") == 2
    assert e.effects() == [[b"XNACK", b"s", b"g", b"FATAL", b"IDS", b"2", b"3-0", b"4-0",
                            b"FORCE"]]
    assert e.run("XNACK", "s", "g", "FAIL", "IDS", "1", "9-0", "FORCE") == 0
    assert e.effects() == []
    pel = group_state(e.core)[3]
    assert [(p[1], p[2]) for p in pel] == [(b"", 0)] * 4
    # A claim of a NACKed entry counts one more delivery, saturating at the max.
    e.run("XCLAIM", "s", "g", "b", "999999", "4-0")
    assert group_state(e.core)[3][3][1:] == (b"b", e.core.now_ms(), (1 << 63) - 1)
    fresh = e.replay_into_fresh()
    assert group_state(fresh) == group_state(e.core)
    assert digest_keyspace(fresh) == digest_keyspace(e.core)


def test_entries_left_out_by_maxcount_or_maxsize_have_no_effect():
    e = Env()
    for i in range(1, 4):
        e.run("XADD", "s", f"{i}-0", "f", "x" * 20)
    e.run("XGROUP", "CREATE", "s", "g", "0")
    e.run("XGROUP", "CREATECONSUMER", "s", "g", "a")
    e.effects()
    t = b"%d" % e.core.now_ms()
    e.run("XREADGROUP", "GROUP", "g", "a", "MAXSIZE", "1", "STREAMS", "s", ">")
    assert e.effects() == [
        [b"XCLAIM", b"s", b"g", b"a", b"0", b"1-0", b"TIME", t, b"RETRYCOUNT", b"1",
         b"FORCE", b"JUSTID", b"LASTID", b"1-0"],
        [b"XGROUP", b"SETID", b"s", b"g", b"1-0", b"ENTRIESREAD", b"1"]]
    e.run("XREADGROUP", "GROUP", "g", "a", "MAXCOUNT", "1", "STREAMS", "s", ">")
    assert [a[5] for a in e.effects() if a[0] == b"XCLAIM"] == [b"2-0"]
    assert group_state(e.core)[:2] == (2 << 64, 2)
    # MAXCOUNT on a history read: only the first pending entry is delivered again.
    e.run("XREADGROUP", "GROUP", "g", "a", "MAXCOUNT", "1", "STREAMS", "s", "0")
    assert [a[5] for a in e.effects()] == [b"1-0"]


# ---------------------------------------------------------------------------
# Blocking in-process
# ---------------------------------------------------------------------------


def test_blocked_xreadgroup_served_by_xadd_and_replayed():
    e = Env()
    e.run("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    blocked = e.core.new_client(outbox=Delivered(e.delivered.append))
    assert e.run("XREADGROUP", "GROUP", "g", "w", "BLOCK", "0", "STREAMS", "s", ">",
                 client=blocked) is BLOCKED
    # A change that brings nothing new keeps it blocked.
    e.run("XGROUP", "CREATECONSUMER", "s", "g", "other")
    assert e.delivered == [] and blocked.blocked is not None
    e.clock.t += 1
    e.run("XADD", "s", "7-0", "k", "v")
    assert [encode_reply(r, False) for r in e.delivered] == \
        [encode_reply([[b"s", [[b"7-0", [b"k", b"v"]]]]], False)]
    assert blocked.blocked is None
    fresh = e.replay_into_fresh()
    assert digest_keyspace(fresh) == digest_keyspace(e.core)
    assert group_state(fresh)[3] == [(7 << 64, b"w", e.core.now_ms(), 1)]


def _blocked_reader(e: "Env", key: str = "s", command: str = "XREADGROUP"):
    """A client blocked on ``key`` by XREADGROUP GROUP g w (or XREAD $), in db 0."""
    c = e.core.new_client(outbox=Delivered(e.delivered.append))
    if command == "XREAD":
        assert e.run("XREAD", "BLOCK", "0", "STREAMS", key, "$", client=c) is BLOCKED
    else:
        assert e.run("XREADGROUP", "GROUP", "g", "w", "BLOCK", "0", "STREAMS", key, ">",
                     client=c) is BLOCKED
    return c


def _nogroup(key: str = "s") -> str:
    return f"NOGROUP No such key '{key}' or consumer group 'g' in XREADGROUP with GROUP option"


WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"


def test_blocked_xreadgroup_runs_again_when_key_or_group_goes():
    """Redis >= 7.2 behaviour (7.0 answers 'UNBLOCKED the stream key no longer
    exists'): the waiting command runs again and answers what it answers now."""
    e = Env()
    e.run("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    e.run("XGROUP", "CREATE", "t", "g", "$", "MKSTREAM")
    e.run("XGROUP", "CREATE", "u", "g", "$", "MKSTREAM")
    c1, c2, c3 = _blocked_reader(e, "s"), _blocked_reader(e, "t"), _blocked_reader(e, "u")
    e.run("DEL", "s")
    e.run("XGROUP", "DESTROY", "t", "g")
    e.run("SET", "u", "x")
    assert [d.message for d in e.delivered] == [_nogroup("s"), _nogroup("t"), WRONGTYPE]
    assert c1.blocked is c2.blocked is c3.blocked is None
    stats = e.core.stats.commands["xreadgroup"]
    assert (stats.calls, stats.failed) == (3, 3)


def test_rename_onto_a_blocked_xreadgroup_key_serves_or_answers_nogroup():
    """What the stream renamed over the key holds decides, as for a re-run command."""
    e = Env()
    e.run("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    e.run("XGROUP", "CREATE", "t", "g", "$", "MKSTREAM")
    _blocked_reader(e, "s")
    _blocked_reader(e, "t")
    e.run("XGROUP", "CREATE", "with-group", "g", "$", "MKSTREAM")
    e.run("XADD", "with-group", "100-0", "f1", "v1")
    e.run("XADD", "no-group", "100-0", "f1", "v1")
    e.run("RENAME", "with-group", "s")
    e.run("RENAME", "no-group", "t")
    assert encode_reply(e.delivered[0], False) == \
        encode_reply([[b"s", [[b"100-0", [b"f1", b"v1"]]]]], False)
    assert e.delivered[1].message == _nogroup("t")


@pytest.mark.parametrize("flush", [("FLUSHDB",), ("FLUSHALL",), ("FLUSHALL", "ASYNC")])
def test_blocked_xreadgroup_answers_nogroup_after_a_flush(flush):
    e = Env()
    e.run("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    c = _blocked_reader(e)
    reader = _blocked_reader(e, "s", "XREAD")
    e.run(*flush)
    assert [d.message for d in e.delivered] == [_nogroup()]
    assert c.blocked is None
    assert reader.blocked is not None          # XREAD finds nothing to read: it waits on
    e.run("XADD", "s", "5-1", "f", "v")
    assert reader.blocked is None


def test_blocked_xreadgroup_after_swapdb():
    """After SWAPDB the waiting command runs against the database now under its number:
    served when the stream there has the group and new entries, NOGROUP/WRONGTYPE otherwise."""
    e = Env()
    e.run("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    e.run("XGROUP", "CREATE", "t", "g", "$", "MKSTREAM")
    e.run("XGROUP", "CREATE", "u", "g", "$", "MKSTREAM")
    waiting = [_blocked_reader(e, k) for k in ("s", "t", "u")]
    e.run("SELECT", "3")
    e.run("XGROUP", "CREATE", "s", "g", "0", "MKSTREAM")
    e.run("XADD", "s", "1-1", "f", "v")
    e.run("SET", "t", "x")
    e.run("SELECT", "0")
    assert e.delivered == []
    e.run("SWAPDB", "0", "3")
    assert encode_reply(e.delivered[0], False) == \
        encode_reply([[b"s", [[b"1-1", [b"f", b"v"]]]]], False)
    assert [d.message for d in e.delivered[1:]] == [WRONGTYPE, _nogroup("u")]
    assert all(c.blocked is None for c in waiting)


def test_swapdb_serves_an_xread_blocked_on_a_key_the_other_database_has():
    e = Env()
    c = _blocked_reader(e, "x", "XREAD")
    e.run("SELECT", "1")
    e.run("XADD", "x", "3-1", "f", "v")
    assert c.blocked is not None
    e.run("SWAPDB", "1", "0")
    assert e.delivered == [[[b"x", [[b"3-1", [b"f", b"v"]]]]]]
    assert e.effects()[-1] == [b"SWAPDB", b"1", b"0"]


def test_blocked_xread_keeps_waiting_when_its_key_goes():
    """XREAD re-run finds no stream and waits on; the $ it blocked with stays."""
    e = Env()
    e.run("XADD", "s", "666-0", "f", "v")
    c = _blocked_reader(e, "s", "XREAD")
    e.run("DEL", "s")
    e.run("SET", "s", "x")
    e.run("DEL", "s")
    assert c.blocked is not None and e.delivered == []
    e.run("XADD", "s", "667-0", "f", "v")
    assert e.delivered == [[[b"s", [[b"667-0", [b"f", b"v"]]]]]]


# ---------------------------------------------------------------------------
# Replay of a random group workload
# ---------------------------------------------------------------------------


def random_group_workload(e: Env, rng: random.Random, steps: int) -> None:
    clients = [e.core.new_client(outbox=Delivered(lambda reply: None)) for _ in range(3)]
    keys = ["s1", "s2"]
    groups = ["g1", "g2"]
    names = ["alice", "bob", "carol"]
    ids: list[str] = ["0-1"]
    for n in range(steps):
        e.clock.t += rng.choice([0, 0.001, 0.05, 1, 30])
        c = rng.choice(clients)
        if c.blocked is not None:
            continue
        k, g, who = rng.choice(keys), rng.choice(groups), rng.choice(names)
        some = rng.choice(ids)
        op = rng.randrange(20)

        def run(*args):
            return e.run(*args, client=c)

        if op < 5:
            r = run("XADD", k, "*", "f", n)
            if isinstance(r, bytes):
                ids.append(r.decode())
        elif op == 5:
            run("XGROUP", "CREATE", k, g, rng.choice(["0", "$", some]), "MKSTREAM")
        elif op < 9:
            extra = rng.choice([[], ["NOACK"], ["CLAIM", rng.choice([0, 1000, 60000])],
                                ["BLOCK", "0"]])
            run("XREADGROUP", "GROUP", g, who, "COUNT", rng.randrange(1, 4), *extra,
                "STREAMS", k, rng.choice([">", ">", "0", some]))
        elif op == 9:
            run("XACK", k, g, some)
        elif op == 10:
            run("XCLAIM", k, g, who, rng.choice([0, 1000]), some, *rng.choice(
                [[], ["JUSTID"], ["FORCE"], ["IDLE", 500], ["RETRYCOUNT", 9], ["LASTID", some]]))
        elif op == 11:
            run("XAUTOCLAIM", k, g, who, rng.choice([0, 1000]), rng.choice(["0", some]),
                "COUNT", rng.randrange(1, 4), *rng.choice([[], ["JUSTID"]]))
        elif op == 12:
            run("XDEL", k, some)
        elif op == 13:
            run("XACKDEL", k, g, rng.choice(["KEEPREF", "DELREF", "ACKED"]), "IDS", 1, some)
        elif op == 14:
            run("XGROUP", "SETID", k, g, rng.choice(["0", "$", some]))
        elif op == 15:
            run("XGROUP", rng.choice(["CREATECONSUMER", "DELCONSUMER"]), k, g, who)
        elif op == 16:
            run("XTRIM", k, "MAXLEN", rng.randrange(0, 6))
        elif op == 17:
            run("MULTI")
            run("XREADGROUP", "GROUP", g, who, "STREAMS", k, ">")
            run("XACK", k, g, some)
            run("EXEC")
        elif op == 18 and rng.random() < 0.1:
            run("XGROUP", "DESTROY", k, g)
        elif op == 19 and rng.random() < 0.05:
            run("DEL", k)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32))
def test_group_workload_effects_replay_to_same_digest(seed):
    e = Env()
    random_group_workload(e, random.Random(seed), 250)
    fresh = e.replay_into_fresh()
    assert digest_keyspace(fresh) == digest_keyspace(e.core)
    for db in e.core.keyspace.dbs:
        for value in db.data.values():
            for g in (getattr(value, "groups", None) or {}).values():
                check_invariants(g)
