#!/usr/bin/env python3
"""Replication benchmark: a StreamDB primary + replica against a redis-server 7.0
primary + replica, side by side.

    .venv/bin/python tools/bench_replication.py [--quick] [--only NAME[,NAME...]]
        [--entries N] [--rounds N] [--write [--docs-root DIR]]

Workloads (names for --only), the targets of the replication issue:

  apply     the primary at its max XADD rate (redis-benchmark -c 50 -P 16); a probe
            XADDs a timestamped entry every 10 ms and measures how long the entry
            takes to be readable on the replica (XREAD BLOCK there) after the
            primary acknowledged it: p99 of that lag; median of --rounds
            alternating rounds, a fresh pair each         p99 <= 50 ms (absolute)
  partial   a 2 s link drop under a steady write load, through a loopback relay
            that cuts the link and refuses it for 2 s: bytes the relay carried to
            the replica after the PSYNC reply, over the bytes the replica had
            missed (primary offset at the end - replica offset at the drop)
                                                            100% (only the missed bytes)
  fullsync  N entries on the primary (1M in a full run), an empty replica: time
            from REPLICAOF to master_link_status:up with equal offsets;
            also the longest PING round trip on the primary meanwhile  <= 2x Redis

Redis runs with repl-diskless-sync-delay 0 (its default 5 s wait for more
replicas would only add a constant).  ``--write`` replaces the
``bench_replication.py`` section of docs/PERFORMANCE.md with the table (see
tools/bench.py).  Timings are never asserted.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import (PERFORMANCE_MD, REDIS_SERVER, Conn, Row, RunRecord,  # noqa: E402
                   add_write_options, alternate, free_port, measured, planned_writes, preload,
                   progress, redis_benchmark, resp, results_table)
from bench_persistence import Proc, pinger  # noqa: E402

KINDS = ("redis", "streamdb")


def server_args(kind: str, primary: bool = False) -> list[str]:
    if kind != "redis":
        return ["--appendonly", "no"]
    return ["--appendonly", "no", "--enable-debug-command", "local"] + \
        (["--repl-diskless-sync-delay", "0"] if primary else [])


def repl_info(srv: Proc) -> dict:
    return srv.info("replication")


def start_pair(kind: str, cfg, primary_args=(), master_port: int | None = None):
    """A primary and a replica of it (the replica follows ``master_port`` if given, e.g.
    a relay); returns them once the replica's link is up and caught up."""
    p = Proc(kind, cfg.workdir, *server_args(kind, True), *primary_args).start()
    r = Proc(kind, cfg.workdir, *server_args(kind)).start()
    r.call(b"REPLICAOF", b"127.0.0.1", b"%d" % (master_port or p.port))
    wait_caught_up(p, r)
    return p, r


def wait_caught_up(p: Proc, r: Proc, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ri = repl_info(r)
        if ri.get("master_link_status") == "up" and \
                int(ri.get("slave_repl_offset", -1)) >= int(repl_info(p)["master_repl_offset"]):
            return
        time.sleep(0.005)
    raise TimeoutError("replica did not catch up")


def stop_all(*procs: Proc) -> None:
    for s in procs:
        s.stop()


# -- apply: lag under the primary's max XADD rate ---------------------------------------


def _probe_lag(p: Proc, r: Proc, stop: threading.Event, lags: list) -> None:
    """Every 10 ms: XADD on the primary, then wait until the replica serves it."""
    wc, rc = Conn(p.port), Conn(r.port)
    prev = b"0-0"                 # the probe's previous entry (XREAD returns newer ones)
    try:
        while not stop.is_set():
            eid = wc.call(b"XADD", b"probe", b"*", b"t", b"1")
            t_ack = time.perf_counter()
            got = rc.call(b"XREAD", b"BLOCK", b"10000", b"STREAMS", b"probe", prev)
            if got is not None:
                lags.append((time.perf_counter() - t_ack) * 1000)
            prev = eid
            time.sleep(0.01)
    finally:
        wc.close()
        rc.close()


def _apply_once(kind: str, cfg) -> dict:
    """A fresh primary + replica; the primary's top XADD rate and the replica's lag meanwhile."""
    p, r = start_pair(kind, cfg)
    try:
        stop, lags = threading.Event(), []
        t = threading.Thread(target=_probe_lag, args=(p, r, stop, lags))
        t.start()
        bench = redis_benchmark(p.port, 50, cfg.n_apply, 16, "XADD", "bench", "*", "f", "v")
        stop.set()
        t.join(30)
        wait_caught_up(p, r)
        lags.sort()
        return {"rps": bench["rps"], "p99": lags[int(len(lags) * 0.99)] if lags else float("nan"),
                "samples": len(lags),
                "same": p.call(b"DEBUG", b"DIGEST") == r.call(b"DEBUG", b"DIGEST")}
    finally:
        stop_all(r, p)


def w_apply(cfg) -> list[Row]:
    res = alternate({kind: kind for kind in KINDS}, cfg.rounds, "apply",
                    lambda kind: _apply_once(kind, cfg))
    sdb = res["streamdb"]
    note = (f"{sum(x['samples'] for x in sdb)} samples; digests equal: "
            f"{all(x['same'] for x in sdb)}")
    return [measured("primary XADD rate (P16)", "req/s", res, "rps", "info", None),
            measured("replica lag p99 at that rate", "ms", res, "p99", "abs<=",
                     (50, float("inf")), note)]


# -- partial: a 2 s link drop -----------------------------------------------------------


class DropRelay:
    """Relays 127.0.0.1:<port> to a primary; ``drop(seconds)`` closes the link and
    refuses a new one for that long; counts the bytes sent to the replica after the
    PSYNC reply line of each connection."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.blocked_until = 0.0
        self.after_psync: list[int] = []        # per connection
        self.replies: list[bytes] = []          # the PSYNC reply line per connection
        self.conns: list[tuple[socket.socket, socket.socket]] = []
        self.lsock = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def drop(self, seconds: float) -> None:
        self.blocked_until = time.monotonic() + seconds
        for a, b in self.conns:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self.lsock.accept()
            except OSError:
                return
            if time.monotonic() < self.blocked_until:
                down.close()
                continue
            up = socket.create_connection(("127.0.0.1", self.target_port))
            self.conns.append((down, up))
            self.after_psync.append(0)
            self.replies.append(b"")
            i = len(self.after_psync) - 1
            threading.Thread(target=self._pump, args=(down, up, None), daemon=True).start()
            threading.Thread(target=self._pump, args=(up, down, i), daemon=True).start()

    def _pump(self, src, dst, index) -> None:
        head = b""
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                if index is not None:
                    if not self.replies[index]:
                        head += data
                        for marker in (b"+CONTINUE", b"+FULLRESYNC"):
                            at = head.find(marker)
                            end = head.find(b"\r\n", at) if at >= 0 else -1
                            if end >= 0:
                                self.replies[index] = head[at:end]
                                self.after_psync[index] += len(head) - end - 2
                    else:
                        self.after_psync[index] += len(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def _steady_writer(port: int, stop: threading.Event) -> None:
    c = Conn(port)
    cmd = resp(b"XADD", b"steady", b"*", b"f", b"v" * 32) * 20
    while not stop.is_set():
        c.send(cmd)
        for _ in range(20):
            c.read()
        time.sleep(0.01)
    c.close()


def w_partial(cfg) -> list[Row]:
    res = {}
    for kind in KINDS:
        progress(f"partial: {kind}")
        p = Proc(kind, cfg.workdir, *server_args(kind, True), "--repl-backlog-size",
                 "64mb").start()
        relay = DropRelay(p.port)
        r = Proc(kind, cfg.workdir, *server_args(kind)).start()
        try:
            r.call(b"REPLICAOF", b"127.0.0.1", b"%d" % relay.port)
            stop = threading.Event()
            t = threading.Thread(target=_steady_writer, args=(p.port, stop))
            t.start()
            wait_caught_up(p, r)
            time.sleep(0.5)
            relay.drop(2.0)
            time.sleep(0.2)
            at_drop = int(repl_info(r)["slave_repl_offset"])
            while len(relay.after_psync) < 2:
                time.sleep(0.01)
            time.sleep(0.5)
            stop.set()
            t.join(10)
            wait_caught_up(p, r)
            time.sleep(0.2)
            end = int(repl_info(p)["master_repl_offset"])
            res[kind] = {"sent": relay.after_psync[-1], "missed": end - at_drop,
                         "reply": relay.replies[-1].split(b" ")[0].decode()}
        finally:
            stop_all(r, p)
            relay.lsock.close()
    pct = {k: 100.0 * x["sent"] / x["missed"] for k, x in res.items()}
    x = res["streamdb"]
    return [Row("bytes sent / bytes missed, 2 s link drop", "%", pct["redis"], pct["streamdb"],
                "info", None, f"{x['reply']}: {x['sent']:,} B sent for {x['missed']:,} B missed; "
                              f"Redis {res['redis']['reply']}")]


# -- fullsync: N entries ---------------------------------------------------------------


def w_fullsync(cfg) -> list[Row]:
    """REPLICAOF to link up with equal offsets, median of ``cfg.rounds`` syncs of the
    same primary, each to a fresh (empty) replica process."""
    res = {}
    for kind in KINDS:
        progress(f"fullsync: {kind}: loading {cfg.n_entries:,} entries")
        p = Proc(kind, cfg.workdir, *server_args(kind, True)).start()
        times, stalls, same = [], [], True
        try:
            preload(p.port, b"big", cfg.n_entries, f"fullsync {kind}")
            for rnd in range(cfg.rounds):
                progress(f"fullsync: {kind}: sync {rnd + 1}/{cfg.rounds}")
                r = Proc(kind, cfg.workdir, *server_args(kind)).start()
                stop, worst = threading.Event(), []
                t = threading.Thread(target=pinger, args=(p.port, stop, worst))
                t.start()
                try:
                    t0 = time.perf_counter()
                    r.call(b"REPLICAOF", b"127.0.0.1", b"%d" % p.port)
                    wait_caught_up(p, r)
                    times.append((time.perf_counter() - t0) * 1000)
                finally:
                    stop.set()          # before DEBUG DIGEST, which blocks the primary
                    t.join(10)
                stalls.append(worst[0])
                try:
                    same = same and p.call(b"DEBUG", b"DIGEST") == r.call(b"DEBUG", b"DIGEST")
                finally:
                    stop_all(r)
        finally:
            stop_all(p)
        res[kind] = {"ms": statistics.median(times), "stall": max(stalls), "same": same,
                     "all": times, "stalls": stalls}
    spread = ", ".join(f"{k}: " + "/".join(f"{x:.0f}" for x in res[k]["all"]) for k in KINDS)
    stalls = ", ".join(f"{k}: " + "/".join(f"{x:.1f}" for x in res[k]["stalls"]) for k in KINDS)
    return [Row(f"full sync of {cfg.n_entries:,} entries (median of {cfg.rounds})", "ms",
                res["redis"]["ms"], res["streamdb"]["ms"], "<=", 2.0,
                f"digests equal: {res['streamdb']['same']}; runs (ms) {spread}"),
            Row("longest PING on the primary meanwhile", "ms", res["redis"]["stall"],
                res["streamdb"]["stall"], "info", None, f"per sync (ms) {stalls}")]


WORKLOADS = {"apply": w_apply, "partial": w_partial, "fullsync": w_fullsync}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small N, about a minute")
    ap.add_argument("--only", default="", help="comma-separated: " + ",".join(WORKLOADS))
    ap.add_argument("--entries", type=int, default=0, help="fullsync entries (default 1M)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="apply: runs per server, fullsync: syncs per server (median)")
    add_write_options(ap, "the bench_replication.py section of docs/PERFORMANCE.md")
    args = ap.parse_args(argv)
    writes = planned_writes(ap, args, {"bench_replication.py": PERFORMANCE_MD})
    record = RunRecord("bench_replication.py", argv)
    if not os.path.exists(REDIS_SERVER):
        print(f"needs {REDIS_SERVER}", file=sys.stderr)
        return 2
    cfg = argparse.Namespace()
    cfg.n_apply = 300_000 if args.quick else 2_000_000
    cfg.n_entries = args.entries or (100_000 if args.quick else 1_000_000)
    cfg.rounds = args.rounds
    names = [x.strip() for x in args.only.split(",") if x.strip()] or list(WORKLOADS)
    rows: list[Row] = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="streamdb-rbench-") as tmp:
        cfg.workdir = Path(tmp)
        for name in names:
            rows.extend(WORKLOADS[name](cfg))
    progress(f"done in {time.monotonic() - t0:.0f} s", done=True)
    record.publish(writes, f"median of {cfg.rounds} round(s) per server", results_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
