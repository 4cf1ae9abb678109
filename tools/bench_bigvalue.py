#!/usr/bin/env python3
"""Big values: how long one client's huge request stalls everyone else, and the rate of
1 MB XADDs; StreamDB against a real redis-server 7.0, side by side.

    .venv/bin/python tools/bench_bigvalue.py [--only NAME[,NAME...]] [--rounds N]
        [--big-mb M] [--value-kb K] [--clients C] [--requests R]
        [--write [--docs-root DIR]]

Workloads (names for --only), with their targets (issue 32):

  aof        the longest PING round trip of a second connection (pinging in a tight
             loop, in a process of its own) that overlaps one client's XADD of one
             M-MB value (100), then one that overlaps its XRANGE reading the entry
             back; both servers appendonly yes, appendfsync everysec, automatic AOF
             rewrites off (auto-aof-rewrite-percentage 0)         <= 1.0x Redis's ms
  shipped    the same two, StreamDB started from the shipped streamdb.conf (``make
             run``'s configuration), Redis from its defaults + appendonly yes: the
             XADD may start an automatic AOF rewrite on either, so its window runs
             until the rewrite it started has finished             <= 1.0x Redis's ms
  xadd1mb    XADD of K-KB values (1024) from C clients (10), R requests in all (300),
             AOF as in ``aof``                                     >= 0.9x req/s

A window starts when the big request is sent and ends when its reply has arrived
(and, for the XADDs, once no AOF rewrite or save is in progress).  Each round
deletes the key afterwards, so every round starts from an empty keyspace.  Servers
alternate within each round; the figure is the median over rounds (3 by default).
Prints a table; ``--write`` replaces the ``bench_bigvalue.py`` section of
docs/PERFORMANCE.md with it (see tools/bench.py).  Timings are never asserted.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import (PERFORMANCE_MD, ROOT, Conn, Row, RunRecord, add_write_options,  # noqa: E402
                   alternate, delete, planned_writes, progress, resp, results_table, run_workloads)
from bench_metrics import longest_trips, ping_loop  # noqa: E402
from bench_persistence import Proc  # noqa: E402
from streamdb.cli.procs import free_port  # noqa: E402

KEY = b"big"
# Both servers: the AOF on, fsynced every second, and no automatic rewrite (the
# ``shipped`` rows measure that): what one big request costs by itself.
AOF = ("--appendonly", "yes", "--appendfsync", "everysec", "--auto-aof-rewrite-percentage", "0")
SHIPPED_CONF = ROOT / "streamdb.conf"


def read_reply(conn: Conn, recv_size: int = 1 << 20):
    """``conn.read()`` with big receives: a 100 MB reply in 64 KiB reads would time
    the client's Python loop more than the server."""
    r = conn.reader
    while True:
        got = r.gets()
        if got is not False:
            return got
        data = conn.sock.recv(recv_size)
        if not data:
            raise ConnectionError("server closed the connection")
        r.feed(data)


def big_request_windows(srv: Proc, xadd: bytes, size: int) -> tuple[tuple, tuple]:
    """One XADD of the big value, then an XRANGE reading it back; each one's
    (start, end) in perf_counter time.  The XADD's window lasts until no rewrite or
    save it may have started is in progress (0.3 s after its reply, time for the
    server's cron to start one, then Proc.wait_child)."""
    conn = Conn(srv.port)
    try:
        t0 = time.perf_counter()
        conn.send(xadd)
        entry_id = read_reply(conn)
        time.sleep(0.3)
        srv.wait_child()
        xadd_window = (t0, time.perf_counter())
        time.sleep(0.2)
        t0 = time.perf_counter()
        conn.send(resp(b"XRANGE", KEY, entry_id, entry_id))
        entries = read_reply(conn)
        xrange_window = (t0, time.perf_counter())
        if len(entries) != 1 or len(entries[0][1][1]) != size:
            raise RuntimeError(f"{srv.kind}: XRANGE did not give the {size}-byte value back")
        return xadd_window, xrange_window
    finally:
        conn.close()


def stalls(srv: Proc, xadd: bytes, size: int) -> dict:
    """The longest PING round trip overlapping the XADD's and the XRANGE's windows, in
    ms, with a pinger process running beside them (in a thread it would share the GIL
    with this process's 100 MB reads and time those)."""
    stop = mp.Event()
    trips_in, trips_out = mp.Pipe(duplex=False)
    pinger = mp.Process(target=ping_loop, args=(srv.port, stop, trips_out), daemon=True)
    pinger.start()
    try:
        time.sleep(0.3)                      # connected and pinging
        xadd_window, xrange_window = big_request_windows(srv, xadd, size)
        time.sleep(0.1)
    finally:
        stop.set()
    trips = trips_in.recv()
    pinger.join(10)
    delete(srv.port, KEY)
    srv.wait_child()
    return {"xadd": longest_trips(trips, [xadd_window])[0] * 1000,
            "xrange": longest_trips(trips, [xrange_window])[0] * 1000}


def started(cfg, servers: dict) -> dict:
    """``servers`` started; notes the core StreamDB runs (compiled or the Python path)."""
    for srv in servers.values():
        srv.start()
    cfg.core = servers["streamdb"].info("server").get("streamdb_core", "?")
    return servers


def _stall_rows(cfg, servers: dict, what: str) -> list[Row]:
    size = cfg.big_mb * 1024 * 1024
    progress(f"{what}: building the {cfg.big_mb} MB XADD")
    xadd = resp(b"XADD", KEY, b"*", b"f", b"x" * size)
    try:
        res = alternate(started(cfg, servers), cfg.rounds, what,
                        lambda srv: stalls(srv, xadd, size))
    finally:
        for s in servers.values():
            s.stop()
    rows = []
    for field, name in (("xadd", f"XADD of one {cfg.big_mb} MB value"),
                        ("xrange", f"XRANGE reading the {cfg.big_mb} MB entry back")):
        red = [r[field] for r in res["redis"]]
        sdb = [r[field] for r in res["streamdb"]]
        spread = (f"rounds: Redis {min(red):.0f}-{max(red):.0f}, "
                  f"StreamDB {min(sdb):.0f}-{max(sdb):.0f} ms")
        rows.append(Row(f"longest PING stall, {name}, {what}", "ms", statistics.median(red),
                        statistics.median(sdb), "<=", 1.0, spread))
    return rows


def w_aof(cfg) -> list[Row]:
    return _stall_rows(cfg, {"redis": Proc("redis", cfg.workdir, *AOF),
                             "streamdb": Proc("streamdb", cfg.workdir, *AOF)},
                       "AOF everysec")


def w_shipped(cfg) -> list[Row]:
    # The shipped file turns the metrics endpoint on at 9121: a free port instead, so
    # that the run never meets another server there.
    return _stall_rows(cfg, {
        "redis": Proc("redis", cfg.workdir, "--appendonly", "yes", conf=SHIPPED_CONF),
        "streamdb": Proc("streamdb", cfg.workdir, "--metrics-port", str(free_port()),
                         conf=SHIPPED_CONF)},
        "make run's streamdb.conf")


def xadd_rate(srv: Proc, xadd: bytes, clients: int, requests: int) -> float:
    """XADDs per second: ``clients`` connections (threads: the sockets' sends and
    receives let go of the GIL) sending ``requests`` XADDs in all, one at a time each."""
    per_client = [requests // clients + (i < requests % clients) for i in range(clients)]
    conns = [Conn(srv.port) for _ in range(clients)]

    def client(conn: Conn, n: int) -> None:
        for _ in range(n):
            conn.send(xadd)
            conn.read()

    try:
        with ThreadPoolExecutor(clients) as pool:
            t0 = time.perf_counter()
            for done in [pool.submit(client, c, n) for c, n in zip(conns, per_client)]:
                done.result()               # (raises what a client met)
            took = time.perf_counter() - t0
    finally:
        for c in conns:
            c.close()
    if srv.call(b"XLEN", KEY) != requests:
        raise RuntimeError(f"{srv.kind}: the stream does not hold {requests} entries")
    delete(srv.port, KEY)
    return requests / took


def w_xadd1mb(cfg) -> list[Row]:
    xadd = resp(b"XADD", KEY, b"*", b"f", b"x" * (cfg.value_kb * 1024))
    servers = {"redis": Proc("redis", cfg.workdir, *AOF),
               "streamdb": Proc("streamdb", cfg.workdir, *AOF)}
    try:
        started(cfg, servers)
        res = alternate(servers, cfg.rounds, "xadd1mb",
                        lambda srv: xadd_rate(srv, xadd, cfg.clients, cfg.requests))
    finally:
        for s in servers.values():
            s.stop()
    return [Row(f"XADD of {cfg.value_kb} KB values, {cfg.clients} clients, AOF everysec",
                "req/s", statistics.median(res["redis"]), statistics.median(res["streamdb"]),
                ">=", 0.9)]


WORKLOADS = {"aof": w_aof, "shipped": w_shipped, "xadd1mb": w_xadd1mb}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="comma-separated: " + ",".join(WORKLOADS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--big-mb", type=int, default=100, help="the big value's size in MB")
    ap.add_argument("--value-kb", type=int, default=1024, help="xadd1mb: each value's size")
    ap.add_argument("--clients", type=int, default=10, help="xadd1mb: connections")
    ap.add_argument("--requests", type=int, default=300, help="xadd1mb: XADDs in all")
    add_write_options(ap, "the bench_bigvalue.py section of docs/PERFORMANCE.md")
    args = ap.parse_args(argv)
    writes = planned_writes(ap, args, {"bench_bigvalue.py": PERFORMANCE_MD})
    record = RunRecord("bench_bigvalue.py", argv)
    names = [x.strip() for x in args.only.split(",") if x.strip()] or list(WORKLOADS)
    unknown = set(names) - set(WORKLOADS)
    if unknown:
        ap.error(f"--only: unknown workload(s) {', '.join(sorted(unknown))}")
    cfg = argparse.Namespace(core="?", rounds=args.rounds, big_mb=args.big_mb, value_kb=args.value_kb,
                             clients=args.clients, requests=args.requests)
    rows = run_workloads(WORKLOADS, names, cfg, "streamdb-bvbench-")
    record.publish(writes, f"StreamDB's core: {cfg.core}; median of {cfg.rounds} alternating "
                           "round(s) per server, a PING loop in a process of its own beside "
                           "the big requests",
                   results_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
