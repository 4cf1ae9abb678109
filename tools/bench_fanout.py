#!/usr/bin/env python3
"""Pub/Sub fan-out: messages delivered per second, StreamDB against redis-server 7.0.

    .venv/bin/python tools/bench_fanout.py [--quick] [--subscribers N[,N...]]
        [--kinds plain,pattern] [--publishers P] [--pipeline N] [--payload BYTES]
        [--deliveries N] [--rounds N] [--write [--docs-root DIR]]

For each number of subscribers S (1, 10 and 100 by default) and each kind of
subscription (``plain``: SUBSCRIBE to the channel; ``pattern``: PSUBSCRIBE to a
pattern that matches it), on each server: S connections subscribe, then
redis-benchmark's P publishers (50 by default, no pipelining) PUBLISH messages of
the payload size to the channel, enough for about ``--deliveries`` deliveries in
all.  The subscribers are read by a process of their own that compares bytes and
counts them (tools/bench.py's Subscribers: no parsing, so that it outruns either
server); each must get every message.  Rows per case: messages delivered per second
at the subscribers (from the first byte read to the last), target >= 0.9x Redis,
and publishes per second (redis-benchmark's figure).

Both servers run with ``client-output-buffer-limit pubsub 0 0 0``, so that a
subscriber that falls behind for a moment is not dropped (the figures are then
the slower rate, not an error).  Uses tools/bench.py's servers and tables, median
of 3 alternating rounds by default; ``--write`` replaces the ``bench_fanout.py``
section of docs/PERFORMANCE.md.  Timings are never asserted.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import (CHANNEL, COLUMN, PAYLOAD, PERFORMANCE_MD, RunRecord, Server,  # noqa: E402
                   Subscribers, add_write_options, alternate, measured, planned_writes, progress,
                   redis_benchmark, redis_tools_missing, results_table)

KINDS = ("plain", "pattern")
# What the pattern subscribers subscribe to: it matches CHANNEL, as a glob must work to.
PATTERN = CHANNEL[:6] + b"*"
# Every server runs with this: a subscriber behind for a moment is not dropped.
UNLIMITED_PUBSUB_OUTPUT = ("--client-output-buffer-limit", "pubsub 0 0 0")


def fan_out(srv, subscribers: int, kind: str, publishers: int, pipeline: int,
            payload: bytes, messages: int) -> dict:
    """One run: ``messages`` publishes to ``subscribers`` connections of ``kind``.
    Returns {"delivered": messages/s at the subscribers, "published": publishes/s,
    "reader": the share of a CPU the subscribers' reader used}."""
    pattern = PATTERN if kind == "pattern" else None
    with Subscribers(srv.port, subscribers, CHANNEL, payload, pattern) as subs:
        published = redis_benchmark(srv.port, publishers, messages, pipeline, "PUBLISH",
                                    CHANNEL.decode(), payload.decode())["rps"]
        got = subs.wait(messages)
    seconds = max(got["last"] - got["first"], 1e-9)
    return {"delivered": got["messages"] / seconds, "published": published,
            "reader": got["cpu"] / seconds}


def rows_for(servers: dict, cfg, subscribers: int, kind: str) -> list:
    messages = max(cfg.deliveries // subscribers, 1000)
    messages -= messages % cfg.pipeline        # whole pipelines: an exact count
    what = (f"{subscribers} {kind} subscriber{'s' if subscribers > 1 else ''}, "
            f"{cfg.publishers} publishers, -P {cfg.pipeline}, {len(cfg.payload)}-byte messages")
    res = alternate(servers, cfg.rounds, what, lambda srv: fan_out(
        srv, subscribers, kind, cfg.publishers, cfg.pipeline, cfg.payload, messages))
    busiest = max(r["reader"] for runs in res.values() for r in runs)
    progress(f"{what}: the subscribers' reader used at most {busiest:.0%} of a CPU", done=True)
    return [measured(f"delivered, {what}", "msg/s", res, "delivered", ">=", 0.9),
            measured("  (publishes, info)", "req/s", res, "published", "info", None)]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer deliveries and rounds")
    ap.add_argument("--subscribers", default="1,10,100",
                    help="comma-separated numbers of subscribers (default 1,10,100)")
    ap.add_argument("--kinds", default=",".join(KINDS),
                    help="comma-separated kinds of subscription: " + ", ".join(KINDS))
    ap.add_argument("--publishers", type=int, default=50, help="publishing connections")
    ap.add_argument("--pipeline", type=int, default=1, help="redis-benchmark's -P")
    ap.add_argument("--payload", type=int, default=len(PAYLOAD), help="message size, bytes")
    ap.add_argument("--deliveries", type=int, default=0,
                    help="messages delivered per run, over all subscribers (default 2M, "
                         "--quick 200k)")
    ap.add_argument("--rounds", type=int, default=0, help="rounds per server (median taken)")
    add_write_options(ap, "the bench_fanout.py section of docs/PERFORMANCE.md")
    args = ap.parse_args(argv)

    if redis_tools_missing("bench_fanout"):
        return 2
    try:
        counts = [int(x) for x in args.subscribers.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--subscribers: not a list of numbers: {args.subscribers!r}")
    kinds = [x.strip() for x in args.kinds.split(",") if x.strip()]
    if not counts or min(counts) < 1:
        ap.error("--subscribers: give numbers of at least 1")
    if not kinds or any(k not in KINDS for k in kinds):
        ap.error(f"--kinds: choose from {', '.join(KINDS)}")
    if min(args.publishers, args.pipeline, args.payload) < 1:
        ap.error("--publishers, --pipeline and --payload must be at least 1")
    writes = planned_writes(ap, args, {"bench_fanout.py": PERFORMANCE_MD})

    cfg = argparse.Namespace(publishers=args.publishers, pipeline=args.pipeline,
                             payload=(PAYLOAD * (args.payload // len(PAYLOAD) + 1))[:args.payload])
    cfg.rounds = args.rounds or (2 if args.quick else 3)
    cfg.deliveries = args.deliveries or (200_000 if args.quick else 2_000_000)

    record = RunRecord("bench_fanout.py", argv)
    t_start = time.monotonic()
    rows = []
    with tempfile.TemporaryDirectory(prefix="streamdb-fanout-") as tmp:
        servers = {}
        try:
            for kind in ("redis", "streamdb"):
                servers[kind] = Server(kind, Path(tmp), *UNLIMITED_PUBSUB_OUTPUT).start()
            core = (f"StreamDB's core: {COLUMN['streamdb']} reports "
                    f"`streamdb_core:{servers['streamdb'].core()}`.")
            for subscribers in counts:
                for kind in kinds:
                    rows.extend(rows_for(servers, cfg, subscribers, kind))
        finally:
            for srv in servers.values():
                srv.stop()
    progress(f"done in {time.monotonic() - t_start:.0f} s", done=True)
    record.publish(writes, f"median of {cfg.rounds} alternating round(s) per server; "
                           "both servers with `client-output-buffer-limit pubsub 0 0 0`",
                   core, results_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
