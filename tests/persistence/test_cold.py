"""Streams larger than the node cache: real servers with ``stream-cache-size 64kb``.

A stream of 200k entries is far bigger than 64 KiB of sealed nodes: the server
snapshots by itself (``save ""``), evicts durable nodes and reads them back from
the snapshot for every reader and writer of old entries.  What clients see must
not change: ranges equal to what was written, groups, claims, deletions and
trims on cold parts, RENAME then snapshot, a restart that reads no node bytes,
kill -9 under ``appendfsync always``, and a replica's full sync.
"""

from __future__ import annotations

import random
import subprocess
import time
import urllib.request

import pytest
import redis

from docblocks import run_block
from helpers import ROOT, ServerProcess, wait_until
from streamdb.cli.procs import free_port

CACHE = "64kb"
CACHE_BYTES = 64 * 1024
N = 200_000
DOC_BLOCKS = {"docs/OPERATIONS.md": {"stream-cache"}}


def connect(srv) -> redis.Redis:
    return redis.Redis(port=srv.port, socket_timeout=60)


def cold_server(path, *args) -> ServerProcess:
    return ServerProcess(path, "--stream-cache-size", CACHE, "--save", "", *args)


# Entries are made from their index, never held: a test keeps ranges of indexes and
# compares page by page (the test process stays small; lists of 200k entries would
# take hundreds of MB, which every later test's forked server would inherit as peak RSS).
def entry(i: int) -> tuple[bytes, dict]:
    """Entry ``i`` as XRANGE returns it (id ms = i + 1)."""
    return f"{i + 1}-0".encode(), {b"n": str(i).encode(), b"payload": b"p" * (i % 23)}


def entries(indexes) -> list:
    return [entry(i) for i in indexes]


def fill(r: redis.Redis, key: str, n: int, start: int = 0) -> range:
    """Adds entries ``start`` .. ``start + n - 1``; returns their indexes."""
    pipe = r.pipeline(transaction=False)
    for i in range(start, start + n):
        sid, fields = entry(i)
        pipe.xadd(key, fields, id=sid)
        if len(pipe) >= 2000:
            pipe.execute()
    pipe.execute()
    return range(start, start + n)


def cache_info(r: redis.Redis) -> dict:
    return {k: v for k, v in r.info("memory").items() if k.startswith("stream_cache_")}


def settled(r: redis.Redis) -> dict:
    """Waits for the automatic snapshots to make the sealed nodes durable and evicted."""
    def done():
        info = cache_info(r)
        quiet = r.info("persistence")["rdb_bgsave_in_progress"] == 0
        return info if quiet and info["stream_cache_evictions"] > 0 and \
            info["stream_cache_sealed_pending_bytes"] * 4 <= CACHE_BYTES else None
    return wait_until(done, 60, "sealed nodes made durable and evicted")


def pages(r: redis.Redis, key: str, page: int = 10_000):
    """The whole stream, XRANGE page by page."""
    start = "-"
    while True:
        got = r.xrange(key, start, "+", count=page)
        yield got
        if len(got) < page:
            return
        start = "(" + got[-1][0].decode()


def stream_ids(r: redis.Redis, key: str) -> list[bytes]:
    return [sid for got in pages(r, key) for sid, _ in got]


def assert_stream(r: redis.Redis, key: str, indexes) -> None:
    """XRANGE of all of ``key`` is exactly the entries of ``indexes``, in order."""
    want = iter(indexes)
    for got in pages(r, key):
        for e in got:
            i = next(want, None)
            assert i is not None and e == entry(i), (e[0], i)
    assert next(want, None) is None, "entries missing at the end"


def test_a_stream_far_bigger_than_the_cache(tmp_path):
    with cold_server(tmp_path, "--appendonly", "yes") as srv:
        r = connect(srv)
        written = fill(r, "s", N)
        info = settled(r)
        assert info["stream_cache_resident_bytes"] <= CACHE_BYTES
        # MEMORY USAGE counts resident bytes: far less than the stream's data.
        usage = r.memory_usage("s", samples=0)
        assert usage < 2_500_000, usage       # the data alone is ~4 MB of sealed nodes

        assert_stream(r, "s", written)
        cold_reads = cache_info(r)["stream_cache_cold_reads"]
        assert cold_reads > 0
        assert cache_info(r)["stream_cache_resident_bytes"] <= CACHE_BYTES
        assert r.xrevrange("s", "+", "-", count=5) == entries(written[::-1][:5])
        assert r.xrevrange("s", "1000", "-", count=3) == entries(written[999::-1][:3])
        assert r.xrange("s", "123456", "123460") == entries(written[123455:123460])

        # A group reads the cold history from the start, acks it, claims some.
        r.xgroup_create("s", "g", id="0")
        got = r.xreadgroup("g", "c1", {"s": ">"}, count=5000)[0][1]
        assert got == entries(written[:5000])
        assert r.xack("s", "g", *[sid for sid, _ in got[:4000]]) == 4000
        claimed = r.xclaim("s", "g", "c2", 0, [sid for sid, _ in got[4000:4010]])
        assert claimed == entries(written[4000:4010])
        auto = r.xautoclaim("s", "g", "c3", 0, "4011-0", count=5)
        assert auto[1] == entries(written[4010:4015])
        full = r.xinfo_stream("s", full=True)
        assert full["length"] == N

        # Writes on cold parts: XDEL marks, trims at node granularity and exact.
        assert r.xdel("s", "50000-0", "50001-0", "150000-0") == 3
        assert r.xrange("s", "49999", "50002") == entries([49998, 50001])
        removed = r.xtrim("s", maxlen=N - 1000, approximate=True)
        assert 0 < removed <= 1000
        assert r.xtrim("s", minid="2000-0", approximate=False) >= 0
        assert r.xrange("s", "-", "+", count=1)[0][0] == b"2000-0"
        after_writes = [i for i in written[1999:] if i not in (49999, 50000, 149999)]
        assert_stream(r, "s", after_writes)

        # RENAME then a snapshot: the nodes are copied to the new key's rows.
        r.rename("s", "t")
        r.bgsave()
        wait_until(lambda: r.info("persistence")["rdb_bgsave_in_progress"] == 0
                   and r.lastsave(), what="BGSAVE")
        assert r.info("persistence")["rdb_last_bgsave_status"] == "ok"
        more = fill(r, "t", 20_000, start=N)       # evicts what the reads brought in
        settled(r)
        assert_stream(r, "t", [*after_writes, *more])
        # An AOF rewrite's child reads the cold nodes through an environment of its own.
        r.bgrewriteaof()
        wait_until(lambda: r.info("persistence")["aof_rewrite_in_progress"] == 0
                   and r.info("persistence")["aof_rewrite_scheduled"] == 0, 60, "BGREWRITEAOF")
        assert r.info("persistence")["aof_last_bgrewrite_status"] == "ok"
        digest = r.execute_command("DEBUG", "DIGEST")
        srv.stop()
        srv.start()
        r = connect(srv)
        wait_until(lambda: r.ping(), what="restart")
        assert cache_info(r)["stream_cache_cold_reads"] == 0      # start-up read no nodes
        assert r.execute_command("DEBUG", "DIGEST") == digest
        assert_stream(r, "t", [*after_writes, *more])
        assert r.xpending("t", "g")["pending"] == 1000


def test_restart_leaves_nodes_on_disk_and_a_corrupt_row_fails_only_its_read(tmp_path):
    with cold_server(tmp_path, "--appendonly", "no") as srv:
        r = connect(srv)
        written = fill(r, "s", 50_000)
        settled(r)
        r.save()
        srv.stop()
    # Damage one node row in the snapshot (its CRC then no longer matches).
    import lmdb
    env = lmdb.open(str(tmp_path / "snapshot.lmdb"), max_dbs=4, subdir=True, create=False)
    nodes = env.open_db(b"nodes")
    with env.begin(write=True, db=nodes) as txn:
        key, raw = next(iter(txn.cursor()))
        txn.put(key, raw[:-5] + bytes([raw[-5] ^ 0xFF]) + raw[-4:])
    env.close()
    with cold_server(tmp_path, "--appendonly", "no") as srv:
        r = connect(srv)
        assert r.xlen("s") == 50_000
        assert r.xrange("s", "40000", "40002") == entries(written[39999:40002])
        with pytest.raises(redis.ResponseError, match="checksum mismatch"):
            r.xrange("s", "-", "+", count=1)
        assert r.xrevrange("s", "+", "-", count=1) == entries(written[-1:])     # still serving


def test_kill9_under_always_with_a_tiny_cache_loses_nothing_acknowledged(tmp_path):
    rng = random.Random(20)
    acked: list[bytes] = []
    srv = cold_server(tmp_path, "--appendonly", "yes", "--appendfsync", "always")
    for round_ in range(3):
        srv.start()
        r = connect(srv)
        assert r.xlen("s") >= len(acked)
        got = set(stream_ids(r, "s"))
        assert set(acked) <= got, f"round {round_}: lost {len(set(acked) - got)} entries"
        r.xtrim("s", minid=f"{rng.randint(1, 5000)}-0", approximate=True)
        acked = stream_ids(r, "s")
        pipe = r.pipeline(transaction=False)
        for i in range(rng.randint(20_000, 40_000)):
            pipe.xadd("s", {"n": str(i), "p": "x" * (i % 31)})
            if len(pipe) >= 500:
                acked += pipe.execute()
        acked += pipe.execute()
        assert cache_info(r)["stream_cache_resident_bytes"] <= CACHE_BYTES
        srv.kill9()
    srv.start()
    r = connect(srv)
    assert stream_ids(r, "s") == acked
    srv.stop()


def test_a_replica_full_sync_of_a_mostly_cold_stream(tmp_path):
    with cold_server(tmp_path / "p", "--appendonly", "yes") as p:
        rp = connect(p)
        fill(rp, "s", 100_000)
        rp.xgroup_create("s", "g", id="0")
        rp.xreadgroup("g", "c", {"s": ">"}, count=100)
        settled(rp)
        assert cache_info(rp)["stream_cache_resident_bytes"] <= CACHE_BYTES
        with cold_server(tmp_path / "r", "--replicaof", "127.0.0.1", str(p.port)) as rep:
            rr = connect(rep)

            def same():
                off = rp.info("replication")["master_repl_offset"]
                if rr.info("replication").get("slave_repl_offset", -1) < off:
                    return False
                d1 = rp.execute_command("DEBUG", "DIGEST")
                return d1 if d1 == rr.execute_command("DEBUG", "DIGEST") else False

            wait_until(same, 60, "replica with an equal digest")
            assert rr.xlen("s") == 100_000
            settled(rr)        # the replica snapshots and evicts too
            assert rr.execute_command("DEBUG", "DIGEST") == rp.execute_command("DEBUG", "DIGEST")


def test_config_set_bounds_a_loaded_server_and_debug_reload_keeps_it_cold(tmp_path):
    with ServerProcess(tmp_path, "--save", "", "--appendonly", "yes",
                       "--stream-cache-size", "0") as srv:
        r = connect(srv)
        written = fill(r, "s", 50_000)
        assert cache_info(r)["stream_cache_evictions"] == 0
        r.config_set("stream-cache-size", CACHE)       # a snapshot follows by itself
        info = settled(r)
        assert info["stream_cache_resident_bytes"] <= CACHE_BYTES
        assert_stream(r, "s", written)
        digest = r.execute_command("DEBUG", "DIGEST")
        assert r.execute_command("DEBUG", "RELOAD") == b"OK"
        assert r.execute_command("DEBUG", "DIGEST") == digest
        assert_stream(r, "s", written)
        r.config_set("stream-cache-size", "0")         # unbounded: nothing more evicted
        evictions = cache_info(r)["stream_cache_evictions"]
        assert_stream(r, "s", written)
        assert cache_info(r)["stream_cache_evictions"] == evictions


def test_the_operations_guide_stream_cache_block(tmp_path):
    with ServerProcess(tmp_path, "--save", "", "--stream-cache-size", "0") as srv:
        r = connect(srv)
        written = fill(r, "sensor:0", 20_000)
        out = run_block("docs/OPERATIONS.md", "stream-cache", cwd=ROOT, PORT=srv.port)
        lines = out.splitlines()
        assert lines[0] == "OK"
        assert "stream_cache_size:16777216" in lines
        assert [line.split(":")[0] for line in lines[1:5]] == [
            "stream_cache_size", "stream_cache_resident_bytes", "stream_cache_cold_reads",
            "stream_cache_hit_rate"]
        assert int(lines[5]) > 0                       # MEMORY USAGE of the stream
        assert_stream(r, "sensor:0", written)


def test_the_metrics_endpoint_shows_the_cache(tmp_path):
    metrics_port = free_port()
    with cold_server(tmp_path, "--metrics-port", str(metrics_port)) as srv:
        r = connect(srv)
        written = fill(r, "s", 20_000)
        settled(r)
        assert_stream(r, "s", written)          # reads the evicted nodes back
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        info = cache_info(r)
        assert info["stream_cache_cold_reads"] > 0
        for metric, field in [("size_bytes", "size"), ("resident_bytes", "resident_bytes"),
                              ("cold_reads_total", "cold_reads"), ("hits_total", "hits"),
                              ("evictions_total", "evictions")]:
            assert f"\nstreamdb_stream_cache_{metric} {info['stream_cache_' + field]}\n" in text



def test_a_cold_node_costs_a_few_hundred_bytes_of_memory(tmp_path):
    """What stays in memory of a stream far bigger than a 1 MiB cache: 2M small
    entries are 20k sealed nodes (about 24 MB of blobs, all but 1 MiB evicted once
    durable).  The server grows by less than 450 bytes per node over its memory before
    the load, cache included: a node's header (~250 bytes), and evicted blobs' pages
    returned to the OS (measured: ~340 bytes; ~500 without returning the pages, ~590
    with a list of master field names per sealed node as well)."""
    n = 2_000_000
    with ServerProcess(tmp_path, "--stream-cache-size", "1mb", "--save", "") as srv:
        r = connect(srv)
        before = r.info("memory")["used_memory"]
        subprocess.run(["redis-benchmark", "-p", str(srv.port), "-c", "20", "-P", "64",
                        "-n", str(n), "-q", "XADD", "big", "*", "sensor-id", "1234",
                        "temperature", "19.8"], check=True, capture_output=True, timeout=300)
        assert r.xlen("big") == n
        wait_until(lambda: r.info("persistence")["rdb_bgsave_in_progress"] == 0, 60,
                   "the automatic snapshots done")
        r.bgsave()
        wait_until(lambda: r.info("persistence")["rdb_bgsave_in_progress"] == 0, 60,
                   "the snapshot done")
        time.sleep(0.5)                      # a cron tick after the last evictions
        after = r.info("memory")["used_memory"]
        nodes = r.xinfo_stream("big")["length"] // 100
        assert cache_info(r)["stream_cache_evictions"] > 0.9 * nodes
    per_node = (after - before) / nodes
    print(f"{before / 2**20:.1f} -> {after / 2**20:.1f} MB: {per_node:.0f} bytes per node")
    assert per_node < 450, per_node
