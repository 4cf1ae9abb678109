"""Retention's decision (engine/retention.py) and its tick (commands/retention.py) in-process.

The engine part takes the time and the ACKED bound as arguments; the tick is run
on a Core whose effects are replayed into a second Core, which must end identical
(DEBUG DIGEST's digest), as a replica or an AOF replay would.
"""

from __future__ import annotations

import pytest

import streamdb.commands  # noqa: F401  (fills the command table)
from streamdb.commands import retention as retention_cmd
from streamdb.commands.server import digest_keyspace
from streamdb.engine import Stream
from streamdb.engine.ids import PAST_MAX_ID, make_id
from streamdb.engine.retention import RetentionPolicy
from streamdb.persistence.codec import clone_value
from streamdb.server.core import Core


def stream_of(ms_values, per_node: int = 10) -> Stream:
    s = Stream()
    for ms in ms_values:
        s.append(make_id(ms, 0), [b"f", b"v"], per_node, 0)
    return s


def node_bytes(s: Stream) -> int:
    return sum(n.nbytes for n in s.nodes)


def test_age_drops_nodes_whose_last_entry_is_older_never_the_last_node():
    s = stream_of(range(1, 101))            # 10 nodes: ms 1-10, 11-20, ...
    p = RetentionPolicy()
    # now 135, max age 100: entries with ms < 35 are old; node 21-30 goes, 31-40 stays.
    assert p.nodes_to_drop(s, 100, 0, 135, PAST_MAX_ID, 100, 100) == 3
    # Everything is old: all but the last node.
    assert p.nodes_to_drop(s, 1, 0, 10_000, PAST_MAX_ID, 100, 100) == 9
    # At most `most`.
    assert p.nodes_to_drop(s, 1, 0, 10_000, PAST_MAX_ID, 4, 100) == 4
    # Never past the ACKED bound: the node holding it (31-40) and later stay.
    assert p.nodes_to_drop(s, 1, 0, 10_000, make_id(35, 0), 100, 100) == 3
    assert p.nodes_to_drop(s, 1, 0, 10_000, make_id(30, 0), 100, 100) == 2
    # One node: nothing.
    assert p.nodes_to_drop(stream_of([1, 2]), 1, 0, 10_000, PAST_MAX_ID, 100, 100) == 0


def test_size_keeps_dropping_while_the_stream_holds_more_than_max_bytes():
    s = stream_of(range(1, 101))
    total = node_bytes(s)
    per_node = s.nodes[0].nbytes
    p = RetentionPolicy()
    assert p.nodes_to_drop(s, 0, total, 0, PAST_MAX_ID, 100, 100) == 0
    # One byte too many: one node goes (whole nodes only).
    assert p.nodes_to_drop(s, 0, total - 1, 0, PAST_MAX_ID, 100, 100) == 1
    s.trim(minid=s.firsts[1], approx=True)
    # The tally followed the trim: room for three nodes keeps three.
    assert p.nodes_to_drop(s, 0, 3 * per_node, 0, PAST_MAX_ID, 100, 100) == 6
    s.trim(minid=s.firsts[6], approx=True)
    assert len(s.nodes) == 3 and node_bytes(s) <= 3 * per_node


def test_size_tally_is_a_lower_bound_until_it_reaches_the_last_node():
    s = stream_of(range(1, 101))
    per_node = s.nodes[0].nbytes
    p = RetentionPolicy()
    # Counting 2 nodes a call: the first calls know 2, then 4 nodes' bytes, not above
    # the limit of 5 nodes, so nothing goes; later calls count further and trim.
    got = []
    for _ in range(6):
        n = p.nodes_to_drop(s, 0, 5 * per_node, 0, PAST_MAX_ID, 100, 2)
        if n:
            s.trim(minid=s.firsts[n], approx=True)
        got.append(n)
    assert got[:2] == [0, 0] and got[-1] == 0 and len(s.nodes) == 5


def test_size_tally_is_counted_again_when_counted_nodes_go():
    s = stream_of(range(1, 101))
    per_node = s.nodes[0].nbytes
    p = RetentionPolicy()
    assert p.nodes_to_drop(s, 0, 10 * per_node, 0, PAST_MAX_ID, 100, 100) == 0
    # XTRIM elsewhere removes 4 counted nodes: a stale tally would trim 4 too many.
    s.trim(minid=s.firsts[4], approx=True)
    assert p.nodes_to_drop(s, 0, 5 * per_node, 0, PAST_MAX_ID, 100, 100) == 1
    # An XDEL that empties a middle node (the node's ids: 51..60).
    s.trim(minid=s.firsts[1], approx=True)
    for ms in range(71, 81):
        assert s.delete(make_id(ms, 0))
    assert len(s.nodes) == 4
    assert p.nodes_to_drop(s, 0, 3 * per_node, 0, PAST_MAX_ID, 100, 100) == 1


@pytest.mark.parametrize("raw", [None, [], [1, 2], [-1, None, None], [None, "x", None],
                                 [None, None, 1], [1.5, None, None]])
def test_load_refuses_what_dump_never_writes(raw):
    with pytest.raises(ValueError):
        RetentionPolicy.load(raw)


def test_settings_survive_the_codec_and_the_counters_do_not():
    s = stream_of(range(1, 30))
    s.retention = RetentionPolicy(60_000, None, True)
    s.retention.trimmed_entries = 7
    copy = clone_value(s)
    assert copy.retention.settings() == (60_000, None, True)
    assert copy.retention.trimmed_entries == 0
    assert copy.retention.arguments() == [b"MAXAGE", b"60000", b"ACKED"]
    s.retention = RetentionPolicy()         # counters only: nothing in the document
    assert clone_value(s).retention is None


# ---------------------------------------------------------------------------
# The tick, in-process: bounded work, exact effects that replay identically
# ---------------------------------------------------------------------------


class Primary:
    def __init__(self) -> None:
        self.now = 1_000.0
        self.core = Core(clock=lambda: self.now)
        self.client = self.core.new_client()
        self.replica = Core(clock=lambda: self.now)
        self.replay = self.replica.replay_client("master")
        self.effects: list[list[bytes]] = []
        self.core.add_effect_sink(self._apply)

        class _Server:
            cron_hooks: list = []
        self.retention = retention_cmd.install(self.core, _Server())

    def _apply(self, batch) -> None:
        for argv in batch.commands:
            self.effects.append(argv)
            self.replica.execute(self.replay, argv)

    def __call__(self, *args):
        return self.core.execute(self.client, [a if isinstance(a, bytes) else str(a).encode()
                                               for a in args])


def test_tick_work_is_bounded_and_its_trims_replay_identically(monkeypatch):
    p = Primary()
    p("CONFIG", "SET", "stream-node-max-entries", "5")
    for i in range(1, 501):                 # 100 nodes, ids at ms 1..500
        p("XADD", "s", f"{i}-0", "f", "v")
    p("XGROUP", "CREATE", "s", "g", "0")
    p("XREADGROUP", "GROUP", "g", "c", "COUNT", "200", "STREAMS", "s", ">")
    p("XACK", "s", "g", *[f"{i}-0" for i in range(1, 151)])
    p("STREAMDB.RETENTION", "SET", "s", "MAXAGE", "1", "ACKED")
    monkeypatch.setattr(retention_cmd, "NODES_PER_TICK", 7)
    p.effects.clear()
    p.retention.cron()
    assert p("XLEN", "s") == 500 - 35       # 7 nodes of 5
    assert p.effects == [[b"XTRIM", b"s", b"MINID", b"=", b"36-0"]]
    for _ in range(10):
        p.retention.cron()
    # ACKED: entry 151 is pending, so the node 151-155 and everything after stay.
    assert p("XLEN", "s") == 350
    assert p.retention.info_stats() == [("stream_retention_trimmed_entries", 150),
                                        ("stream_retention_trimmed_nodes", 30)]
    assert digest_keyspace(p.core) == digest_keyspace(p.replica)
    p("STREAMDB.RETENTION", "SET", "s", "NOACKED")
    p.retention.cron()
    assert p("XLEN", "s") == 350 - 35
    assert digest_keyspace(p.core) == digest_keyspace(p.replica)


def test_a_replica_does_not_trim_on_its_own():
    p = Primary()
    p("CONFIG", "SET", "stream-retention-max-age", "1")
    for i in range(1, 301):
        p("XADD", "s", f"{i}-0", "f", "v")
    p.core.is_replica = True
    p.retention.cron()
    assert p("XLEN", "s") == 300
    p.core.is_replica = False
    p.retention.cron()
    assert p("XLEN", "s") < 300


def test_the_command_form_rewrite_carries_the_policy():
    """``aof-use-rdb-preamble no``: the base segment's commands set the policy again."""
    from streamdb.persistence.aof import value_commands
    p = Primary()
    for i in range(1, 31):
        p("XADD", "s", f"{i}-0", "f", "v")
    p("STREAMDB.RETENTION", "SET", "s", "MAXBYTES", "4096", "NOACKED")
    rebuilt = Primary()
    for argv in value_commands(b"s", p.core.keyspace[0].data[b"s"], None):
        assert not isinstance(rebuilt.core.execute(rebuilt.client, argv), Exception), argv
    assert digest_keyspace(rebuilt.core) == digest_keyspace(p.core)
    assert rebuilt("STREAMDB.RETENTION", "GET", "s")[3] == (b"own-settings",
                                                            [b"MAXBYTES", b"4096", b"NOACKED"])
