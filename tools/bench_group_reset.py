#!/usr/bin/env python3
"""Moving a consumer group to a time on a long stream whose history is mostly on disk.

    .venv/bin/python tools/bench_group_reset.py [--entries N] [--calls N] [--cache-size SIZE]
        [--write [--docs-root DIR]]

One StreamDB with ``stream-cache-size 16mb`` (sealed nodes past it live only in the
snapshot's LMDB file; a short run with fewer entries wants a smaller --cache-size to be
as cold), N entries (10M by default) loaded into one stream as
tools/bench_cold.py loads them (redis-benchmark ``XADD big *``, 50 clients, pipeline
64: the ids are the load's clock, many entries a millisecond).  Then, for --calls
random times between the stream's first and last entry,
``STREAMDB.GROUP SETID big g TIME <t>``, each timed at the client (one request on
loopback), with the stream nodes it read back from disk (INFO
``stream_cache_cold_reads``).  The call must find the last entry before the time and
count the entries up to it from node headers, reading at most that entry's node.

Target (issue 30): <= 10 ms on 10M entries, for the median call.  Prints a table;
``--write`` replaces the ``bench_group_reset.py`` section of docs/PERFORMANCE.md with
it.  Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import (PERFORMANCE_MD, Conn, Row, RunRecord, add_write_options,  # noqa: E402
                   planned_writes, progress, results_table)
from bench_cold import KEY, load, settle  # noqa: E402
from bench_persistence import Proc  # noqa: E402

GROUP = b"g"


def _id_ms(raw: bytes) -> int:
    return int(raw.split(b"-")[0])


def cold_reads(srv: Proc) -> int:
    return int(srv.info("memory")["stream_cache_cold_reads"])


def time_resets(srv: Proc, calls: int, seed: int) -> tuple[list[float], int]:
    """``calls`` resets to random times within the stream: (each one's ms, cold reads)."""
    c = Conn(srv.port)
    try:
        first = c.call(b"XRANGE", KEY.encode(), b"-", b"+", b"COUNT", b"1")[0][0]
        last = c.call(b"XREVRANGE", KEY.encode(), b"+", b"-", b"COUNT", b"1")[0][0]
        c.call(b"XGROUP", b"CREATE", KEY.encode(), GROUP, b"$")
        rng = random.Random(seed)
        times = [rng.randint(_id_ms(first), _id_ms(last)) for _ in range(calls)]
        reads = cold_reads(srv)
        took = []
        for t in times:
            t0 = time.perf_counter()
            reply = c.call(b"STREAMDB.GROUP", b"SETID", KEY.encode(), GROUP, b"TIME", b"%d" % t)
            took.append((time.perf_counter() - t0) * 1000)
            if reply != b"OK":
                raise RuntimeError(f"STREAMDB.GROUP SETID answered {reply!r}")
        return took, cold_reads(srv) - reads
    finally:
        c.close()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--entries", type=int, default=10_000_000, help="stream length (default 10M)")
    ap.add_argument("--calls", type=int, default=200, help="resets timed (default 200)")
    ap.add_argument("--seed", type=int, default=1, help="of the random times")
    ap.add_argument("--cache-size", default="16mb", help="stream-cache-size (default 16mb)")
    add_write_options(ap, "the bench_group_reset.py section of docs/PERFORMANCE.md")
    args = ap.parse_args(argv)
    writes = planned_writes(ap, args, {"bench_group_reset.py": PERFORMANCE_MD})
    record = RunRecord("bench_group_reset.py", argv)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="streamdb-gbench-") as tmp:
        srv = Proc("streamdb", Path(tmp), "--stream-cache-size", args.cache_size).start()
        try:
            load(srv, args.entries, f"StreamDB, {args.cache_size} cache")
            settle(srv)
            progress(f"timing {args.calls} resets")
            took, reads = time_resets(srv, args.calls, args.seed)
        finally:
            srv.stop()
    progress(f"done in {time.monotonic() - t0:.0f} s", done=True)
    n = f"{args.entries:,} entries, {args.cache_size} cache"
    rows = [Row(f"STREAMDB.GROUP SETID TIME on {n}: median", "ms", None,
                statistics.median(took), "limit<=", 10),
            Row(f"STREAMDB.GROUP SETID TIME on {n}: slowest of {args.calls}", "ms", None,
                max(took), "info", None),
            Row(f"stream nodes read from disk per reset (mean of {args.calls})", "nodes", None,
                reads / args.calls, "limit<=", 1)]
    how = f"{args.calls} resets to random times, timed at the client"
    if os.environ.get("STREAMDB_PURE"):
        how += "; the server ran the Python path (STREAMDB_PURE=1)"
    record.publish(writes, how, results_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
