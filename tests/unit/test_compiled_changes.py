"""The snapshot's changed-key tracker (persistence/changes.py) and the effect batch it
reads (dispatch/effects.py) compiled, held equal to their sources: random batches of
effects (XADD runs, SELECT, MULTI/EXEC, whole-database changes, multi-key and unknown
commands) must leave the same ``dirty`` keys and ``full`` flag, and give the same
changes, RESP and final database.  Under STREAMDB_PURE both sides are the source and
the test still holds.
"""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from streamdb import commands  # noqa: F401  (fills the command table the batch reads)
from streamdb import compiled
from streamdb.dispatch import effects as effects_module
from streamdb.persistence import changes

SOURCE = compiled.load_source("streamdb.persistence.changes")
EFFECTS_SOURCE = compiled.load_source("streamdb.dispatch.effects")

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
batches = st.lists(st.tuples(st.integers(0, 3), st.lists(effects, min_size=1, max_size=6),
                             st.booleans()), max_size=8)


@settings(max_examples=200, deadline=None)
@given(full=st.booleans(), batches=batches)
def test_changed_keys_agree_with_the_source(full, batches):
    fast, spec = changes.ChangedKeys(full), SOURCE.ChangedKeys(full)
    for db, batch, atomic in batches:
        fast(effects_module.EffectBatch(db, batch, atomic))
        spec(EFFECTS_SOURCE.EffectBatch(db, batch, atomic))
        assert (fast.dirty, fast.full) == (spec.dirty, spec.full)


@settings(max_examples=200, deadline=None)
@given(batches=batches, selected=st.integers(-1, 3))
def test_effect_batches_agree_with_the_source(batches, selected):
    for db, batch, atomic in batches:
        fast = effects_module.new_batch(db, batch, atomic)
        spec = EFFECTS_SOURCE.EffectBatch(db, batch, atomic)
        assert (fast.db, fast.commands) == (spec.db, spec.commands)
        assert fast.changes() == spec.changes()
        assert fast.final_db() == spec.final_db()
        assert fast.resp_from(selected) == spec.resp_from(selected)
        assert fast.resp() == spec.resp()
