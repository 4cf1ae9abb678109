"""Core.execute_xadd_runs against running each XADD through Core.execute.

The same requests, with the same clock, into two engines: one by one, and as
runs (the server's path for pipelined or concurrent plain and ``MAXLEN ~``
XADDs).  Replies and DEBUG DIGEST must be equal, and the effects the runs
record must rebuild the same state in a fresh engine.  Small nodes make the
approximate trims remove whole nodes often.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import streamdb.commands  # noqa: F401  (fills the command table)
from streamdb.commands.server import digest_keyspace
from streamdb.commands.streams import encode_id_replies
from streamdb.engine.ids import U64, format_id_range, make_id
from streamdb.protocol.reply import encode_bulks
from streamdb.server.core import Core

from inproc import FakeClock, Recorder, replay
from inproc import argv as _b


def _engine(clock: FakeClock, node_entries: int) -> Core:
    core = Core(clock=clock)
    core.config.set("stream-node-max-entries", str(node_entries))
    return core


runs = st.lists(st.tuples(
    st.integers(1, 30),                                  # requests in the run
    st.one_of(st.none(), st.integers(0, 60)),            # MAXLEN ~ n, or plain
    st.sampled_from([0, 0, 0.001, 1]),                   # clock step before it
    st.integers(1, 3),                                   # clients it is split over
), min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(runs, st.integers(0, 200), st.sampled_from([3, 5, 100]))
def test_runs_equal_one_by_one(plan, prefill, node_entries):
    one_clock, run_clock = FakeClock(), FakeClock()
    one, batched = _engine(one_clock, node_entries), _engine(run_clock, node_entries)
    recorder = Recorder()
    batched.effect_sinks.append(recorder)
    a = one.new_client()
    clients = [batched.new_client() for _ in range(3)]
    for i in range(prefill):
        one.execute(a, _b("XADD", "s", "*", "n", i))
        batched.execute(clients[0], _b("XADD", "s", "*", "n", i))
    for size, maxlen, step, split in plan:
        one_clock.t += step
        run_clock.t += step
        trim = [] if maxlen is None else ["MAXLEN", "~", maxlen]
        requests = [_b("XADD", "s", *trim, "*", "n", k, "v", "x" * (k % 7)) for k in range(size)]
        parts = [p for p in (requests[k::split] for k in range(split)) if p]   # one share per client
        # One by one, in the order the runs are applied: client after client.
        expected = [encode_bulks([one.execute(a, list(r)) for r in p]) for p in parts]
        got = batched.execute_xadd_runs([(clients[k], p) for k, p in enumerate(parts)])
        if got[0] is None:                 # refused (a lone request, a limit): one by one
            got = [encode_bulks([batched.execute(clients[k], list(r)) for r in p])
                   for k, p in enumerate(parts)]
        assert got == expected
        assert digest_keyspace(batched) == digest_keyspace(one)
    fresh = Core(clock=FakeClock())
    fresh.config.set("stream-node-max-entries", str(node_entries))
    replay(recorder.batches, fresh)
    # The prefill went through execute too, so the recorder holds everything.
    assert digest_keyspace(fresh) == digest_keyspace(batched)


@given(st.integers(0, U64 - 1), st.one_of(st.integers(0, 2000), st.integers(U64 - 40, U64)),
       st.integers(1, 1200))
def test_run_replies_are_the_ids_as_bulk_strings(ms, seq, n):
    """Sequences that gain a digit inside the run (9 -> 10, 999 -> 1000) and runs
    that cross into the next millisecond."""
    first = make_id(ms, seq)
    assert encode_id_replies(first, n) == encode_bulks(format_id_range(first, n))


def test_a_trim_one_limit_would_stop_is_left_to_xadd():
    """A stream far above its cap: one by one, each XADD's trim stops at its LIMIT
    (100 x stream-node-max-entries); a run must not remove more at once."""
    clock = FakeClock()
    core = _engine(clock, 5)
    c = core.new_client()
    for i in range(1000):
        core.execute(c, _b("XADD", "s", "*", "n", i))
    run = [_b("XADD", "s", "MAXLEN", "~", "10", "*", "n", "x") for _ in range(3)]
    assert core.execute_xadd_runs([(c, run)]) == [None]
    assert core.execute(c, _b("XLEN", "s")) == 1000


idmp_runs = st.lists(st.tuples(
    st.lists(st.tuples(st.sampled_from(["p1", "p2", "p3"]), st.integers(0, 12)),
             min_size=1, max_size=25),                   # (pid, iid) of each request
    st.sampled_from([0, 0, 0.001, 1, 30]),               # clock step before it
    st.integers(1, 3),                                   # clients it is split over
), min_size=1, max_size=10)


@settings(max_examples=150, deadline=None)
@given(idmp_runs, st.sampled_from([3, 100]), st.sampled_from([2, 5, 100]),
       st.sampled_from([10, 100]))
def test_idmp_runs_equal_one_by_one(plan, node_entries, maxsize, duration):
    """``XADD key IDMP pid iid * ..`` runs (the Spark sink's form): pid/iids repeat
    within a run and across runs, so duplicates, size evictions (small maxsize)
    and expiries (clock steps past the duration) all happen; replies, digest
    (which includes the IDMP maps) and effect replay must match XADD's."""
    one_clock, run_clock = FakeClock(), FakeClock()
    one, batched = _engine(one_clock, node_entries), _engine(run_clock, node_entries)
    for core in (one, batched):
        core.config.set("stream-idmp-maxsize", str(maxsize))
        core.config.set("stream-idmp-duration", str(duration))
    recorder = Recorder()
    batched.effect_sinks.append(recorder)
    a = one.new_client()
    clients = [batched.new_client() for _ in range(3)]
    for pairs, step, split in plan:
        one_clock.t += step
        run_clock.t += step
        requests = [_b("XADD", "s", "IDMP", pid, iid, "*", "n", iid) for pid, iid in pairs]
        parts = [p for p in (requests[k::split] for k in range(split)) if p]
        one_dirty, batched_dirty = one.dirty, batched.dirty
        expected = [encode_bulks([one.execute(a, list(r)) for r in p]) for p in parts]
        got = batched.execute_xadd_runs([(clients[k], p) for k, p in enumerate(parts)])
        if len(requests) == 1:          # a lone request is left to execute
            assert got == [None]
            got = [encode_bulks([batched.execute(clients[0], list(requests[0]))])]
        assert got == expected
        assert digest_keyspace(batched) == digest_keyspace(one)
        # Duplicates change nothing: only new entries count as changes.
        assert batched.dirty - batched_dirty == one.dirty - one_dirty
        # XINFO STREAM's IDMP counters (duplicates among them) agree too.
        info = _b("XINFO", "STREAM", "s")
        assert batched.execute(clients[0], info) == one.execute(a, info)
    fresh = Core(clock=FakeClock())
    fresh.config.set("stream-node-max-entries", str(node_entries))
    fresh.config.set("stream-idmp-maxsize", str(maxsize))
    fresh.config.set("stream-idmp-duration", str(duration))
    replay(recorder.batches, fresh)
    assert digest_keyspace(fresh) == digest_keyspace(batched)


_names = st.sampled_from([b"f", b"temperature", b"a%b", b"%d", b"", b"\r\n"])
_values = st.binary(max_size=12)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.tuples(_names, _values), min_size=1, max_size=3), min_size=1,
                max_size=20),
       st.booleans(), st.booleans(), st.integers(0, U64 - 30), st.one_of(st.none(), st.just(
           [b"XTRIM", b"k", b"MAXLEN", b"=", b"5"])))
def test_a_runs_effects_encode_as_their_argv_lists(entries, same_fields, long_key, seq, trim):
    """XaddRunEffects.resp() (the AOF's and replication's encoding of a run, one
    template) is byte for byte encode_command of each of its argv lists, which
    it also is as a sequence; field names with '%' or CRLF, empty ones, entries
    with other field names or another number of fields (resp() gives None then)."""
    from streamdb.commands.streams import XaddRunEffects
    from streamdb.persistence.aof import encode_command, encode_commands, last_select
    if same_fields:
        names = [f for f, _ in entries[0]]
        entries = [[(f, v) for f, (_, v) in zip(names, e)] for e in entries
                   if len(e) >= len(names)] or [entries[0]]
        entries = [e[:len(names)] for e in entries]
    fvs = [[x for pair in e for x in pair] for e in entries]
    key = b"k" * 300 if long_key else b"k"
    ids = format_id_range(make_id(1_700_000_000_000, seq), len(fvs))
    effects = XaddRunEffects(key, ids, fvs, trim)
    argvs = [[b"XADD", key, sid, *fv] for sid, fv in zip(ids, fvs)] + ([trim] if trim else [])
    assert list(effects) == argvs and len(effects) == len(argvs)
    assert [effects[i] for i in range(len(argvs))] == argvs
    expected = b"".join(map(encode_command, argvs))
    assert encode_commands(effects) == expected
    resp = XaddRunEffects(key, ids, fvs, trim).resp()
    uniform = all(f[0::2] == fvs[0][0::2] for f in fvs)
    assert resp == (expected if uniform else None)
    assert last_select(effects) is None
