"""The compiled dispatch (server/core.py, dispatch/registry.py, the per-command
hook of server/observer.py and the cclasses they type) held equal to its source.

``compiled.load_source`` runs a pure-mode module from its ``.py`` beside the
built one; Hypothesis drives both with the same random input: command names and
argv through the registry's look-up and key positions, random durations and
settings through the per-command hook, and random sequences of
requests (the checks' error paths, MULTI/EXEC, SELECT, streams and groups)
through a compiled Core and a source Core, which must give the same reply
bytes, the same effects and the same counters.  Under STREAMDB_PURE both sides
are the source and the tests still hold.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from streamdb import compiled
import streamdb.commands  # noqa: F401  (fills the command table)
from streamdb.dispatch import registry
from streamdb.server import observer as observer_module
from streamdb.server.observer import Observer
from streamdb.config import Config
from streamdb.protocol import encode_reply
from streamdb.server import core as core_module

from inproc import Delivered

SOURCE_REGISTRY = compiled.load_source("streamdb.dispatch.registry")
SOURCE_CORE = compiled.load_source("streamdb.server.core")


SOURCE_OBSERVE = compiled.load_source("streamdb.server.observer")

NAMES = sorted(registry.COMMANDS)


def _recased(name: str, flips: list[bool]) -> bytes:
    return "".join(c.upper() if f else c for c, f in zip(name, flips + [False] * len(name))).encode()


command_names = st.builds(_recased, st.sampled_from(NAMES), st.lists(st.booleans(), max_size=12))
argvs = st.one_of(
    st.lists(st.binary(max_size=6), max_size=4),
    st.builds(lambda name, rest: [name, *rest], command_names, st.lists(st.binary(max_size=4), max_size=4)),
    st.lists(st.text(max_size=4), min_size=1, max_size=2),    # not bytes: no command
)


@settings(max_examples=1000, deadline=None)
@given(argvs)
def test_lookup_finds_the_same_spec_as_the_source(argv):
    SOURCE_REGISTRY.TABLE.replace(dict(registry.COMMANDS))
    assert registry.lookup(argv) is SOURCE_REGISTRY.lookup(argv)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(argvs, st.integers(1, 3), st.booleans()), max_size=10))
def test_runs_of_lookups_find_the_same_specs_as_the_source(runs):
    """A pipeline's runs of one name (the look-up keeps the last name found), the
    table changed between some of them: every look-up as the source's."""
    SOURCE_REGISTRY.TABLE.replace(dict(registry.COMMANDS))
    for argv, repeat, changed in runs:
        if changed:
            registry.TABLE.replace(dict(registry.COMMANDS))
        for _ in range(repeat):
            assert registry.lookup(argv) is SOURCE_REGISTRY.lookup(argv)
            assert registry.lookup([bytes(argv[0])] if argv and isinstance(argv[0], bytes)
                                   else argv) is SOURCE_REGISTRY.lookup(argv)


def test_a_replaced_table_leaves_no_memo_behind():
    """The look-up's memos (the last name, the names as sent) belong to the table:
    once XADD is gone from it, no memo still finds XADD; COMMANDS, a view, cannot be
    changed behind the table's back."""
    whole = dict(registry.COMMANDS)
    xadd = [b"XADD", b"s", b"*", b"f", b"v"]
    try:
        assert registry.lookup(xadd) is whole["xadd"]
        assert registry.lookup([b"xAdd"]) is whole["xadd"]
        registry.TABLE.replace({name: spec for name, spec in whole.items() if name != "xadd"})
        assert registry.lookup(xadd) is None and registry.lookup([b"xAdd"]) is None
        with pytest.raises(TypeError):
            registry.COMMANDS["xadd"] = whole["xadd"]
    finally:
        registry.TABLE.replace(whole)
    assert registry.lookup(xadd) is whole["xadd"]


@settings(max_examples=1000, deadline=None)
@given(st.integers(0, 4), st.integers(-3, 4), st.integers(0, 3), st.integers(1, 9),
       st.sampled_from(["", "write", "readonly fast", "write denyoom"]))
def test_key_positions_and_flags_match_the_source(first, last, step, argc, flags):
    argv = [b"k%d" % i for i in range(argc)]
    fl = frozenset(flags.split())
    ours = registry.CommandSpec("t", -1, fl, first, last, step)
    theirs = SOURCE_REGISTRY.CommandSpec("t", -1, fl, first, last, step)
    assert ours.key_positions(argv) == theirs.key_positions(argv)
    assert ours.keys(argv) == theirs.keys(argv)
    assert ours.is_write == theirs.is_write == ("write" in fl)


# Requests that walk every check of execute (unknown command, arity, subcommand,
# MULTI queueing and its refusals, EXECABORT) and the handlers' common paths.
REQUESTS = [
    [b"PING"], [b"PING", b"hi"], [b"PING", b"a", b"b"], [b"ECHO", b"x"], [b"echo"],
    [b"XADD", b"s", b"*", b"f", b"v"], [b"xadd", b"s", b"*", b"f"], [b"XADD", b"s", b"1-1", b"f", b"v"],
    [b"XLEN", b"s"], [b"XLEN", b"t"], [b"xLeN"], [b"XRANGE", b"s", b"-", b"+"],
    [b"XTRIM", b"s", b"MAXLEN", b"1"], [b"XDEL", b"s", b"1-1"],
    [b"XGROUP", b"CREATE", b"s", b"g", b"0"], [b"XGROUP", b"CREATE", b"s", b"g"],
    [b"XGROUP", b"NOPE"], [b"XGROUP"], [b"XGROUP", b"HELP"],
    [b"XREADGROUP", b"GROUP", b"g", b"c", b"COUNT", b"2", b"STREAMS", b"s", b">"],
    [b"XACK", b"s", b"g", b"0-1"], [b"XPENDING", b"s", b"g"],
    [b"MULTI"], [b"EXEC"], [b"DISCARD"], [b"WATCH", b"s"], [b"UNWATCH"],
    [b"SELECT", b"1"], [b"SELECT", b"0"], [b"DBSIZE"], [b"DEL", b"s"], [b"TYPE", b"s"],
    [b"NOPE", b"a", b"b"], [b"GET\0x"],
]


def _run(core_class, requests):
    core = core_class(Config(), clock=lambda: 1_700_000_000.5)
    effects = []
    core.add_effect_sink(lambda batch: effects.append((batch.db, batch.commands)))
    client = core.new_client(outbox=Delivered(lambda reply: None))
    replies = [encode_reply(core.execute(client, list(argv)), False) for argv in requests]
    stats = core.stats
    counters = (stats.commands_processed, stats.error_replies, dict(stats.errors),
                {name: (s.calls, s.rejected, s.failed) for name, s in stats.commands.items()},
                core.dirty, client.db, client.in_multi, client.multi_error, client.last_cmd)
    return replies, effects, counters


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(REQUESTS), max_size=40))
def test_a_compiled_core_and_a_source_core_answer_alike(requests):
    assert _run(core_module.Core, requests) == _run(SOURCE_CORE.Core, requests)


def _observe(observer_class, settings, calls):
    core = core_module.Core(Config(), clock=lambda: 1_700_000_000.5)
    core.config.values.update(settings)
    observer = observer_class(core)
    client = core.new_client()
    for name, argv, elapsed_ns in calls:
        observer.command_done(registry.COMMANDS[name], client, argv, elapsed_ns)
    histograms = {name: list(counts) for name, counts in observer.histograms.items()}
    latency = {name: (ev.max, list(ev.samples)) for name, ev in observer.latency.items()}
    return histograms, list(observer.slowlog), observer.slowlog_next_id, latency


@settings(max_examples=300, deadline=None)
@given(st.fixed_dictionaries({
           "latency-tracking": st.booleans(),
           "slowlog-log-slower-than": st.sampled_from([-1, 0, 1, 1000, 2**63 - 1]),
           "latency-monitor-threshold": st.sampled_from([0, 1, 5, 2**63 - 1])}),
       st.lists(st.tuples(st.sampled_from(["ping", "xadd", "exec", "config"]),
                          st.lists(st.binary(max_size=3), min_size=1, max_size=3),
                          st.one_of(st.integers(0, 2**20), st.integers(0, 2**62))),
                max_size=20))
def test_the_per_command_hook_records_as_the_source(settings_, calls):
    assert (_observe(Observer, settings_, calls)
            == _observe(SOURCE_OBSERVE.Observer, settings_, calls))


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.integers(0, 2**12), st.integers(0, 2**63 - 1)))
def test_a_duration_is_counted_in_the_bucket_around_it(elapsed_ns):
    """The bucket keeps the duration's top _HIST_BITS bits: its lower bound is the
    duration with the lower bits cleared, its upper bound has them all set."""
    for observer_class in (Observer, SOURCE_OBSERVE.Observer):
        histograms, _, _, _ = _observe(observer_class, {"latency-tracking": True},
                                       [("ping", [b"PING"], elapsed_ns)])
        [(lower, n)] = observer_module.histogram_buckets(histograms["ping"])
        bits = elapsed_ns.bit_length() - observer_module._HIST_BITS
        assert n == 1 and lower == (elapsed_ns >> bits << bits if bits > 0 else elapsed_ns)
        assert lower <= elapsed_ns <= observer_module.bucket_upper_ns(lower)


def test_the_source_modules_really_are_the_source():
    assert not compiled.is_compiled(SOURCE_CORE)
    assert not compiled.is_compiled(SOURCE_REGISTRY)
    assert not compiled.is_compiled(SOURCE_OBSERVE)
