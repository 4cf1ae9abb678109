#!/usr/bin/env python3
"""History larger than memory: StreamDB with a bounded stream cache, side by side.

    .venv/bin/python tools/bench_cold.py [--quick] [--only NAME[,NAME...]]
        [--rounds N] [--write [--docs-root DIR]]

Every StreamDB here runs with ``stream-cache-size 16mb`` (sealed nodes past it live
only in the snapshot's LMDB file) unless a row says "all resident"
(``stream-cache-size 0``).  Entries are ``sensor-id 1234 temperature 19.8``, loaded
with redis-benchmark (50 clients, pipeline 64) into one stream on every server.

Workloads (names for --only), with their targets:

  memory    N entries (10M; --quick 1M): StreamDB's RSS against Redis's
            used_memory for the same data                          <= 0.5x
  xadd      XADD, 50 clients, pipeline 16, onto an N-entry stream far larger
            than the cache, against the same with everything resident  >= 0.95x
  xrange    XRANGE COUNT 100 paging from the start of the N-entry stream (cold
            history; the LMDB file is in the page cache), against the same
            with everything resident                                >= 0.5x
  restart   N entries plus a 100k-command AOF tail, kill -9, time to the first
            PING answered, against Redis (RDB-preamble AOF)         <= 0.5x
  huge      5N entries (50M; --quick 5M): RSS under 256 MB, then every entry
            read back by paging; and the restart time of 5N entries against
            that of N/10 entries (both StreamDB, both with the cache)   <= 1.3x
            (issue 32's target; the history-larger-than-memory work held it
            under 2x)

Uses the building blocks of tools/bench.py and tools/bench_persistence.py.  Prints
a table; ``--write`` replaces the ``bench_cold.py`` section of docs/PERFORMANCE.md
with it.  Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import (ENTRY, PERFORMANCE_MD, Conn, Row, RunRecord, add_write_options,  # noqa: E402
                   alternate, planned_writes, process_rss, progress, redis_benchmark,
                   results_table)
from bench_persistence import Proc, ready  # noqa: E402

CACHE = ("--stream-cache-size", "16mb")
RESIDENT = ("--stream-cache-size", "0")
DURABLE = ("--appendonly", "yes", "--appendfsync", "everysec")
KEY = "big"
TAIL = 100_000


def load(srv: Proc, n: int, label: str) -> None:
    """``n`` entries into KEY: redis-benchmark, 50 clients, pipeline 64 (the same loader
    for every server; far faster than a Python client)."""
    progress(f"{label}: loading {n:,} entries")
    left = n
    while left:                                   # in steps, to show progress
        step = min(left, 5_000_000)
        redis_benchmark(srv.port, 50, step, 64, "XADD", KEY, "*", *(x.decode() for x in ENTRY))
        left -= step
        progress(f"{label}: loaded {n - left:,}/{n:,} entries ({100 * (n - left) // n}%)")


def used_memory(srv: Proc) -> int:
    return int(srv.info("memory")["used_memory"])


def settle(srv: Proc) -> None:
    """A snapshot written and its nodes made durable, so that the cache can hold only
    what it is sized for (the server snapshots by itself too; this waits for it)."""
    srv.wait_child()
    srv.call(b"BGSAVE")
    srv.wait_child()
    time.sleep(0.5)


def page_through(port: int, count: int = 100, limit: int | None = None) -> tuple[int, float]:
    """XRANGE KEY (last COUNT count from the start, until the end or ``limit`` entries;
    returns (entries read, seconds))."""
    c = Conn(port)
    start = b"-"
    seen = 0
    t0 = time.perf_counter()
    try:
        while limit is None or seen < limit:
            page = c.call(b"XRANGE", KEY.encode(), start, b"+", b"COUNT", str(count).encode())
            if not page:
                break
            seen += len(page)
            start = b"(" + page[-1][0]
            if seen % 1_000_000 < count:
                progress(f"reading back: {seen:,} entries")
    finally:
        c.close()
    return seen, time.perf_counter() - t0


def w_memory(cfg) -> list[Row]:
    red = Proc("redis", cfg.workdir).start()
    sdb = Proc("streamdb", cfg.workdir, *CACHE).start()
    try:
        um0 = used_memory(red)
        load(red, cfg.n, "memory (redis)")
        redis_bytes = used_memory(red) - um0
        load(sdb, cfg.n, "memory (streamdb)")
        settle(sdb)
        sdb_bytes = process_rss(sdb.proc.pid)
    finally:
        red.stop()
        sdb.stop()
    return [Row(f"{cfg.n:,} entries: Redis used_memory vs StreamDB RSS (16 MB cache)", "MB",
                redis_bytes / 2**20, sdb_bytes / 2**20, "<=", 0.5)]


def _two_streamdbs(cfg) -> dict:
    """All-resident and cached StreamDBs (the 'Redis 7.0' column is the resident one),
    each loaded with N entries."""
    servers = {"redis": Proc("streamdb", cfg.workdir, *RESIDENT).start(),
               "streamdb": Proc("streamdb", cfg.workdir, *CACHE).start()}
    for kind, srv in servers.items():
        load(srv, cfg.n, f"{'resident' if kind == 'redis' else 'cached'} StreamDB")
    settle(servers["streamdb"])
    return servers


def w_xadd_and_xrange(cfg) -> list[Row]:
    servers = _two_streamdbs(cfg)
    try:
        xadd = alternate(servers, cfg.rounds, "xadd -P 16", lambda s: redis_benchmark(
            s.port, 50, cfg.n_bench, 16, "XADD", KEY, "*", *(x.decode() for x in ENTRY)))
        for srv in servers.values():     # the LMDB file in the page cache, as the target says
            page_through(srv.port, limit=cfg.n_page)
        pages = alternate(servers, cfg.rounds, "xrange paging",
                          lambda s: page_through(s.port, limit=cfg.n_page))
    finally:
        for srv in servers.values():
            srv.stop()
    note = "'Redis 7.0' column = StreamDB with everything resident"
    rate = {k: statistics.median(n / t for n, t in v) for k, v in pages.items()}
    return [Row(f"XADD -P 16 onto {cfg.n:,} entries, 16 MB cache", "req/s",
                statistics.median(r["rps"] for r in xadd["redis"]),
                statistics.median(r["rps"] for r in xadd["streamdb"]), ">=", 0.95, note),
            Row(f"XRANGE COUNT 100 paging, first {cfg.n_page:,} entries (cold)", "entries/s",
                rate["redis"], rate["streamdb"], ">=", 0.5, note)]


def loaded(kind: str, n: int, cfg, *args: str) -> Proc:
    """A durable (AOF everysec) server of ``kind`` with ``n`` entries in KEY."""
    srv = Proc(kind, cfg.workdir, *DURABLE, *args).start()
    load(srv, n, f"{kind}, {n:,} entries")
    return srv


def kill_with_tail(srv: Proc) -> Proc:
    """Snapshot what ``srv`` holds (Redis: an RDB-preamble AOF), add a TAIL-command AOF
    tail, kill -9; returns it, stopped, ready to be restarted from its files."""
    srv.wait_child()       # (Redis rewrites a large AOF by itself: one rewrite at a time)
    srv.call(b"BGSAVE" if srv.kind == "streamdb" else b"BGREWRITEAOF")
    srv.wait_child()
    load(srv, TAIL, f"{srv.kind}: AOF tail")
    time.sleep(1.5)                    # everysec: the tail on disk
    # (redis-benchmark rounds its count up to whole pipelines per client: count, don't assume)
    srv.expected = srv.call(b"XLEN", KEY.encode())
    srv.kill9()
    return srv


def _restart_ms(srv: Proc) -> float:
    srv.start(wait=False)
    try:
        ready(srv.port, srv.proc)
    except RuntimeError as e:          # the server's own words, before the workdir goes
        tail = (srv.dir / "server.log").read_text(errors="replace").splitlines()[-15:]
        raise RuntimeError(f"{e}; the end of its log:\n" + "\n".join(tail)) from None
    took = (time.perf_counter() - srv.t_start) * 1000
    got = srv.call(b"XLEN", KEY.encode())
    srv.kill9()                        # the next round restarts from the same files
    if got != srv.expected:
        raise RuntimeError(f"{srv.kind} restarted with {got} entries, not {srv.expected}")
    return took


def w_restart(cfg) -> list[Row]:
    servers = {"redis": kill_with_tail(loaded("redis", cfg.n, cfg)),
               "streamdb": kill_with_tail(loaded("streamdb", cfg.n, cfg, *CACHE))}
    res = alternate(servers, cfg.rounds, "restart", _restart_ms)
    return [Row(f"restart: {cfg.n:,} entries + {TAIL:,}-command AOF tail", "ms",
                statistics.median(res["redis"]), statistics.median(res["streamdb"]), "<=", 0.5)]


def w_huge(cfg) -> list[Row]:
    big_n, small_n = 5 * cfg.n, cfg.n // 10
    big = loaded("streamdb", big_n, cfg, *CACHE)
    try:
        settle(big)
        rss = process_rss(big.proc.pid)
        seen, took = page_through(big.port, count=1000)
        progress(f"huge: read back {seen:,} entries in {took:.0f} s")
        kill_with_tail(big)
    finally:
        big.stop()
    servers = {"redis": kill_with_tail(loaded("streamdb", small_n, cfg, *CACHE)),
               "streamdb": big}
    res = alternate(servers, cfg.rounds, "restart growth", _restart_ms)
    return [Row(f"{big_n:,} entries, 16 MB cache: RSS", "MB", None, rss / 2**20, "limit<=", 256),
            Row(f"{big_n:,} entries: entries read back by paging", "entries", big_n, seen,
                ">=", 1.0),
            Row(f"restart with {big_n:,} entries against {small_n:,} (+ tail each)", "ms",
                statistics.median(res["redis"]), statistics.median(res["streamdb"]), "<=", 1.3,
                f"'Redis 7.0' column = StreamDB with {small_n:,} entries")]


WORKLOADS = {"memory": w_memory, "xadd": w_xadd_and_xrange, "restart": w_restart,
             "huge": w_huge}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="N = 1M instead of 10M")
    ap.add_argument("--only", default="", help="comma-separated: " + ",".join(WORKLOADS)
                    + " (xadd runs the xrange rows too)")
    ap.add_argument("--rounds", type=int, default=0)
    add_write_options(ap, "the bench_cold.py section of docs/PERFORMANCE.md")
    args = ap.parse_args(argv)
    writes = planned_writes(ap, args, {"bench_cold.py": PERFORMANCE_MD})
    record = RunRecord("bench_cold.py", argv)
    cfg = argparse.Namespace()
    cfg.rounds = args.rounds or (1 if args.quick else 3)
    cfg.n = 1_000_000 if args.quick else 10_000_000
    cfg.n_bench = 200_000 if args.quick else 1_000_000
    cfg.n_page = cfg.n // 2
    names = [x.strip() for x in args.only.split(",") if x.strip()] or list(WORKLOADS)
    rows: list[Row] = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="streamdb-cbench-") as tmp:
        cfg.workdir = Path(tmp)
        for i, name in enumerate(names):
            progress(f"[{i + 1}/{len(names)}] {name}")
            rows.extend(WORKLOADS[name](cfg))
    progress(f"done in {time.monotonic() - t0:.0f} s", done=True)
    record.publish(writes, f"N = {cfg.n:,} entries, median of {cfg.rounds} alternating "
                           "round(s)", results_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
