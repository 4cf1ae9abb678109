"""The snapshot's changed-key tracker (persistence/changes.py) compiled, held equal to
its source: random batches of effects (XADD runs, SELECT, MULTI/EXEC, whole-database
changes, multi-key and unknown commands) must leave the same ``dirty`` keys and
``full`` flag.  Under STREAMDB_PURE both sides are the source and the test still holds.
"""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from streamdb import commands  # noqa: F401  (fills the command table the tracker reads)
from streamdb import compiled
from streamdb.persistence import changes

SOURCE = compiled.load_source("streamdb.persistence.changes")

keys = st.sampled_from([b"a", b"b", b"s"])
effects = st.one_of(
    st.builds(lambda k: [b"XADD", k, b"1-1", b"f", b"v"], keys),
    st.builds(lambda k: [b"xadd", k, b"1-2", b"f", b"v"], keys),
    st.builds(lambda d: [b"SELECT", b"%d" % d], st.integers(0, 3)),
    st.just([b"MULTI"]), st.just([b"EXEC"]),
    st.sampled_from([[b"FLUSHALL"], [b"FLUSHDB"], [b"SWAPDB", b"0", b"1"]]),
    st.builds(lambda ks: [b"DEL", *ks], st.lists(keys, min_size=1, max_size=3)),
    st.builds(lambda k: [b"XTRIM", k, b"MINID", b"=", b"1-0"], keys),
    st.builds(lambda k: [b"XGROUP", b"CREATE", k, b"g", b"0"], keys),
    st.just([b"NOSUCHCOMMAND", b"a"]),
)


@settings(max_examples=200, deadline=None)
@given(full=st.booleans(), batches=st.lists(
    st.tuples(st.integers(0, 3), st.lists(effects, min_size=1, max_size=6)), max_size=8))
def test_changed_keys_agree_with_the_source(full, batches):
    fast, spec = changes.ChangedKeys(full), SOURCE.ChangedKeys(full)
    for db, batch in batches:
        fast(db, batch)
        spec(db, batch)
        assert (fast.dirty, fast.full) == (spec.dirty, spec.full)
    assert fast.records_commands is spec.records_commands is False
