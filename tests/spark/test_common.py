"""The pyspark-free helpers of streamdb.spark."""

import pytest

from streamdb.spark.common import (MAX_SEQ, Codec, next_id, parse_id, prev_id, resolve_offsets,
                                   split_range)


def test_ids_and_neighbours():
    assert parse_id("5-3") == (5, 3) and parse_id(b"7") == (7, 0)
    assert next_id((1, MAX_SEQ)) == (2, 0) and prev_id((2, 0)) == (1, MAX_SEQ)
    assert prev_id((0, 0)) is None
    with pytest.raises(ValueError):
        parse_id("x-1")


def test_split_range_covers_exactly_without_overlap():
    for first, last, n in [((10, 0), (1000, 5), 4), ((5, 0), (5, 99), 3), ((1, 0), (2, 0), 8),
                           ((7, 7), (7, 7), 3)]:
        parts = split_range(first, last, n)
        assert parts[0][0] == first and parts[-1][1] == last and len(parts) <= n
        for (a, b), (c, _d) in zip(parts, parts[1:]):
            assert a <= b and next_id(b) == c


def test_offsets_options():
    assert resolve_offsets(None, "earliest", "x") == ("earliest", {})
    assert resolve_offsets('{"a": "5-1", "b": "latest"}', "earliest", "x") == \
        ("earliest", {"a": "5-1", "b": "latest"})
    with pytest.raises(ValueError):
        resolve_offsets("sometime", "latest", "x")


def test_codec_latin1_keeps_every_byte_and_utf8_names_the_option():
    every = bytes(range(256))
    c = Codec("latin-1")
    assert c.encode(c.decode(every)) == every
    with pytest.raises(ValueError, match="valueEncoding"):
        Codec(None).decode(b"\xff")
