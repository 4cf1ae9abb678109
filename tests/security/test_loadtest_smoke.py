"""A short run of streamdb-loadtest's workload: it asserts the verification, never the speed."""

from __future__ import annotations

import asyncio
import collections

from streamdb.cli.loadtest import Conn, Result, Workload, run_workload, verify


def test_short_load_run_verifies(fresh_server):
    w = Workload(connections=200, consumers=20, groups=5, streams=4, producers=20, seconds=5.0)
    res = asyncio.run(run_workload(fresh_server.port, w, fresh_server.proc.pid))
    assert res.problems == []
    assert res.xadds > 0
    # Each group saw each entry of its stream once (groups 0 and 4 share stream 0).
    assert res.delivered >= res.xadds
    assert 0 < res.acked < res.delivered        # every tenth delivery was left pending
    assert res.peak_rss_kb > 0
    assert fresh_server.proc.poll() is None


def test_the_verification_catches_a_double_delivery_and_a_lost_ack(fresh_server):
    """The checker itself: a planted double delivery and a forgotten entry are reported."""
    async def scenario() -> Result:
        admin = await Conn.open(fresh_server.port)
        await admin.call(b"XGROUP", b"CREATE", b"lt:0", b"g0", b"$", b"MKSTREAM")
        ids = [await admin.call(b"XADD", b"lt:0", b"*", b"f", b"v") for _ in range(3)]
        reply = await admin.call(b"XREADGROUP", b"GROUP", b"g0", b"c0", b"STREAMS", b"lt:0", b">")
        got = [(entry_id, b"c0") for entry_id, _ in reply[0][1]]
        delivered = collections.defaultdict(list, {(b"lt:0", b"g0"): got + [(ids[0], b"c1")]})
        acks = collections.defaultdict(set, {(b"lt:0", b"g0"): {ids[1]}})
        await admin.call(b"XACK", b"lt:0", b"g0", ids[1])
        res = Result()
        acked_ids = {b"lt:0": ids + [b"1-1"]}     # an "acknowledged" id the stream lacks
        await verify(admin, Workload(groups=1, streams=1), acked_ids, delivered, acks, res)
        admin.close()
        return res

    problems = " | ".join(asyncio.run(scenario()).problems)
    assert "delivered more than once" in problems
    assert "acknowledged XADD ids are missing" in problems
