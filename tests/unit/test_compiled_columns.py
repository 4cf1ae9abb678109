"""The compiled server/columns.py gives exactly what its source gives.

A metrics scrape turns every value of its tables into text and finds the absent ones
with columns.py, compiled (streamdb/compiled.py); the source is the specification.
Random columns (ints of every size, 64-bit edges, None, and values of other types the
C loop hands back to Python) go through both, and the results must be the same bytes.
Under STREAMDB_PURE=1 both sides are the source and these tests are skipped.
"""

from __future__ import annotations

import importlib

import pytest
from hypothesis import given, settings, strategies as st

from streamdb import compiled

NAME = "streamdb.server.columns"

pytestmark = pytest.mark.skipif(not compiled.is_compiled(importlib.import_module(NAME)),
                                reason="columns.py runs from its source: nothing to compare")

EDGES = [0, 1, -1, 9, 10, -10, 2**63 - 1, -2**63, 2**63, -2**63 - 1, 2**64, 2**128 + 7]
ints = st.one_of(st.integers(), st.sampled_from(EDGES), st.integers(0, 10**13))
values = st.one_of(ints, st.booleans(), st.floats())


@settings(max_examples=300, deadline=None)
@given(st.lists(values, max_size=50), st.booleans())
def test_value_texts_equal_the_source(column, milliseconds):
    built, source = importlib.import_module(NAME), compiled.load_source(NAME)
    assert built.value_texts(column, milliseconds) == source.value_texts(column, milliseconds)


def test_a_value_past_64_bits_and_a_float_are_formatted_as_python_does():
    built, source = importlib.import_module(NAME), compiled.load_source(NAME)
    column = [2**64 + 1, -2**70, 1.5, 7]
    assert built.value_texts(column, True) == source.value_texts(column, True) == \
        [b"18446744073709551617e-3", b"-1180591620717411303424e-3", b"0.0015", b"7e-3"]
    assert built.value_texts(column) == [b"18446744073709551617", b"-1180591620717411303424",
                                         b"1.5", b"7"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.none(), ints), max_size=50))
def test_present_mask_equals_the_source(column):
    built, source = importlib.import_module(NAME), compiled.load_source(NAME)
    assert built.present_mask(column) == source.present_mask(column)
