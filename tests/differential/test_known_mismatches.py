"""Differences from Redis 7.0 found by the state machine in code owned elsewhere.

Each is a strict xfail: when the owner fixes it the test passes, xfail(strict)
turns that into a failure, and the entry (here and in
machine.KNOWN_MISMATCHES) should be removed so the machine covers the command
again.
"""

from __future__ import annotations

import pytest

from .machine import KNOWN_MISMATCHES
from .resp import RawClient

pytestmark = pytest.mark.differential


@pytest.fixture
def both(server, redis_server):
    clients = [RawClient(server.port), RawClient(redis_server.port)]
    for c in clients:
        c.call("FLUSHALL")
    yield clients
    for c in clients:
        c.close()


def _drop_times(reply):
    """Consumer idle/inactive values differ by the clock only: compare field names and the rest."""
    if isinstance(reply, list):
        out = []
        for i, x in enumerate(reply):
            if i % 2 and reply[i - 1] in (b"idle", b"inactive", b"seen-time", b"active-time"):
                out.append("<time>")
            else:
                out.append(_drop_times(x))
        return out
    return reply


def _script(clients, commands):
    sdb, redis = clients
    for args in commands:
        r, s = redis.call(*args), sdb.call(*args)
    return r, s


@pytest.mark.xfail(strict=True, reason=KNOWN_MISMATCHES["xinfo|stream"])
def test_xinfo_stream_fields_match_redis_70(both):
    r, s = _script(both, [("XADD", "s", "1-1", "f", "v"), ("XINFO", "STREAM", "s")])
    assert s == r


@pytest.mark.xfail(strict=True, reason=KNOWN_MISMATCHES["xinfo|consumers"])
def test_xinfo_consumers_fields_match_redis_70(both):
    r, s = _script(both, [("XADD", "s", "1-1", "f", "v"), ("XGROUP", "CREATE", "s", "g", "0"),
                          ("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"),
                          ("XINFO", "CONSUMERS", "s", "g")])
    assert _drop_times(s) == _drop_times(r)


@pytest.mark.xfail(strict=True, reason=KNOWN_MISMATCHES["xreadgroup-lazy-consumer"])
def test_xreadgroup_serving_nothing_creates_no_consumer(both):
    r, s = _script(both, [("XGROUP", "CREATE", "s", "g", "0", "MKSTREAM"),
                          ("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", ">"),
                          ("XINFO", "GROUPS", "s")])
    assert r[0][3] == 0                # Redis: 'consumers', 0
    assert s == r
