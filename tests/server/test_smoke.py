"""The basics through redis-py against a real server process."""

import redis


def test_xadd_xrange_roundtrip(r):
    i1 = r.xadd("s", {"a": "1"})
    i2 = r.xadd("s", {"b": "2", "c": "3"})
    assert i1 < i2 or len(i1) < len(i2)
    assert r.xrange("s") == [(i1, {b"a": b"1"}), (i2, {b"b": b"2", b"c": b"3"})]
    assert r.xlen("s") == 2


def test_wrongtype_is_reported(r):
    r.set("str", "v")
    try:
        r.xadd("str", {"a": 1})
    except redis.ResponseError as e:
        assert str(e).startswith("WRONGTYPE")
    else:
        raise AssertionError("expected WRONGTYPE")
