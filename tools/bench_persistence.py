#!/usr/bin/env python3
"""Durability benchmark: StreamDB against a real redis-server 7.0, side by side.

    .venv/bin/python tools/bench_persistence.py [--quick] [--only NAME[,NAME...]]
        [--rounds N] [--write [--docs-root DIR]]

Workloads (names for --only), with their targets:

  always     XADD, 50 clients, appendfsync always, vs redis-server appendonly yes +
             appendfsync always                                        >= 1.0x req/s
  everysec   XADD, 50 clients: StreamDB appendfsync everysec vs StreamDB
             appendonly no (both columns are StreamDB)                 >= 0.95x req/s
  snapshot   bytes a snapshot writes after 1% of an N-entry stream changed,
             over a full snapshot (StreamDB only)                      <= 5%
  stall      longest PING round trip while a snapshot of N entries is written
             (BGSAVE; Redis's column is its own BGSAVE)                <= 50 ms
  restart    restart time with N entries (snapshot / RDB-preamble AOF) plus an
             N/10-command AOF tail, after kill -9                      <= 2x Redis
             (StreamDB from compiled bytecode; --source: without it)

Uses the building blocks of tools/bench.py (same loader, same redis-benchmark
runs, median of 3 alternating rounds by default).  Prints a table; ``--write``
replaces the ``bench_persistence.py`` section of docs/PERFORMANCE.md with it (see
tools/bench.py).  Timings are never asserted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import (PERFORMANCE_MD, REDIS_SERVER, ROOT, Conn, Row, RunRecord,  # noqa: E402
                   add_write_options, alternate, delete, free_port, median_of, planned_writes,
                   preload, progress, redis_benchmark, resp, results_table, run_workloads,
                   wait_for_ping)


class Proc:
    """A server process with the persistence options of a workload.

    ``conf``: start StreamDB from this configuration file (Redis from its own defaults)
    and keep its save rules; without it both run with ``--save ""``."""

    def __init__(self, kind: str, workdir: Path, *args: str, port: int | None = None,
                 data: Path | None = None, conf: Path | None = None) -> None:
        self.kind = kind
        self.conf = conf
        self.port = port or free_port()
        self.dir = data or workdir / f"{kind}-{self.port}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.args = list(args)
        self.proc: subprocess.Popen | None = None

    def start(self, wait: bool = True) -> "Proc":
        log = open(self.dir / "server.log", "ab")
        saves = [] if self.conf else ["--save", ""]
        if self.kind == "redis":
            cmd = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--dir",
                   str(self.dir), "--daemonize", "no", *saves, *self.args]
        else:
            conf = [str(self.conf)] if self.conf else []
            cmd = [sys.executable, "-m", "streamdb", *conf, "--port", str(self.port), "--bind",
                   "127.0.0.1", "--dir", str(self.dir), *saves, *self.args]
        self.t_start = time.perf_counter()
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        if wait:
            wait_for_ping(self.port, self.proc, timeout=600)
        return self

    def call(self, *args):
        c = Conn(self.port)
        try:
            return c.call(*args)
        finally:
            c.close()

    def info(self, section: str) -> dict:
        raw = self.call(b"INFO", section.encode())
        out = {}
        for line in raw.decode().splitlines():
            if ":" in line and not line.startswith("#"):
                k, v = line.split(":", 1)
                out[k] = v
        return out

    def wait_child(self) -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            p = self.info("persistence")
            if p.get("rdb_bgsave_in_progress") == "0" and p.get("aof_rewrite_in_progress", "0") == "0":
                return
            time.sleep(0.05)
        raise TimeoutError("background save did not finish")

    def kill9(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.kill9()


def ready(port: int, proc: subprocess.Popen, timeout: float = 600) -> None:
    """Until PING answers +PONG (not -LOADING), trying every 2 ms: this times restarts."""
    wait_for_ping(port, proc, timeout, poll=0.002)


def _xadd_side_by_side(cfg, label: str, servers: dict) -> dict:
    """redis-benchmark XADD, 50 clients, on both servers, alternating; stops them after."""
    try:
        def run(srv):
            delete(srv.port, b"bench")
            return redis_benchmark(srv.port, 50, cfg.n_xadd, 1, "XADD", "bench", "*", "f", "v")
        res = alternate({k: s.start() for k, s in servers.items()}, cfg.rounds, label, run)
    finally:
        for s in servers.values():
            s.stop()
    return {k: median_of(v, "rps") for k, v in res.items()}


def w_always(cfg) -> list[Row]:
    rps = _xadd_side_by_side(cfg, "always", {
        "redis": Proc("redis", cfg.workdir, "--appendonly", "yes", "--appendfsync", "always"),
        "streamdb": Proc("streamdb", cfg.workdir, "--appendonly", "yes", "--appendfsync", "always")})
    return [Row("XADD, 50 clients, appendfsync always", "req/s", rps["redis"], rps["streamdb"],
                ">=", 1.0)]


def w_everysec(cfg) -> list[Row]:
    rps = _xadd_side_by_side(cfg, "everysec", {
        "redis": Proc("streamdb", cfg.workdir, "--appendonly", "no"),
        "streamdb": Proc("streamdb", cfg.workdir, "--appendonly", "yes", "--appendfsync", "everysec")})
    return [Row("XADD, everysec vs appendonly no (both StreamDB)", "req/s", rps["redis"],
                rps["streamdb"], ">=", 0.95, note="'Redis 7.0' column = StreamDB appendonly no")]


def pinger(port: int, stop: threading.Event, out: list) -> None:
    """PING every millisecond until stopped; append the worst round trip in ms to out."""
    c = Conn(port)
    worst = 0.0
    ping = resp(b"PING")
    while not stop.is_set():
        t0 = time.perf_counter()
        c.send(ping)
        c.read()
        worst = max(worst, time.perf_counter() - t0)
        time.sleep(0.001)
    c.close()
    out.append(worst * 1000)


def _bgsave_stall(srv: Proc) -> float:
    stop = threading.Event()
    out: list = []
    t = threading.Thread(target=pinger, args=(srv.port, stop, out))
    t.start()
    time.sleep(0.2)
    srv.call(b"BGSAVE")
    srv.wait_child()
    time.sleep(0.1)
    stop.set()
    t.join()
    return out[0]


def w_snapshot_and_stall(cfg) -> list[Row]:
    rows = []
    sdb = Proc("streamdb", cfg.workdir, "--appendonly", "yes").start()
    red = Proc("redis", cfg.workdir, "--appendonly", "no").start()
    try:
        preload(sdb.port, b"big", cfg.n_entries, label="streamdb")
        preload(red.port, b"big", cfg.n_entries, label="redis")
        progress("stall: BGSAVE on both")
        stall_sdb = _bgsave_stall(sdb)
        stall_red = _bgsave_stall(red)
        full = int(sdb.info("persistence")["rdb_last_save_bytes_written"])
        preload(sdb.port, b"big", cfg.n_entries // 100, label="streamdb 1%")
        sdb.call(b"BGSAVE")
        sdb.wait_child()
        incr = int(sdb.info("persistence")["rdb_last_save_bytes_written"])
        rows.append(Row(f"snapshot after 1% of {cfg.n_entries:,} entries changed", "bytes",
                        full, incr, "<=", 0.05, note="'Redis 7.0' column = full snapshot"))
        rows.append(Row(f"longest PING during BGSAVE of {cfg.n_entries:,} entries", "ms",
                        stall_red, stall_sdb, "abs<=", (50.0, float("inf"))))
    finally:
        sdb.stop()
        red.stop()
    return rows


_RESTART_ARGS = ("--appendonly", "yes", "--appendfsync", "everysec")


def _restart_files(kind: str, cfg) -> tuple[Path, Path, int]:
    """Write N entries, snapshot them (Redis: BGREWRITEAOF, an RDB-preamble AOF), add an
    N/10-command tail, kill -9; returns (data dir, pristine copy of it, port)."""
    data = cfg.workdir / f"restart-{kind}"
    srv = Proc(kind, cfg.workdir, *_RESTART_ARGS, data=data).start()
    preload(srv.port, b"big", cfg.n_entries, label=f"{kind} restart")
    srv.call(b"BGSAVE" if kind == "streamdb" else b"BGREWRITEAOF")
    srv.wait_child()
    preload(srv.port, b"big", cfg.n_entries // 10, label=f"{kind} tail")
    time.sleep(1.5)                 # let everysec fsync the tail
    srv.kill9()
    pristine = cfg.workdir / f"restart-{kind}.pristine"
    shutil.copytree(data, pristine)
    return data, pristine, srv.port


def _restart_once(kind: str, files: tuple[Path, Path, int], cfg) -> float:
    """ms from exec to the first PING answered, on a fresh copy of the killed server's files."""
    data, pristine, port = files
    shutil.rmtree(data)
    shutil.copytree(pristine, data)
    again = Proc(kind, cfg.workdir, *_RESTART_ARGS, port=port, data=data)
    again.start(wait=False)
    ready(again.port, again.proc)
    took = time.perf_counter() - again.t_start
    n = again.call(b"XLEN", b"big")
    again.stop()
    if n != cfg.n_entries + cfg.n_entries // 10:
        raise RuntimeError(f"{kind} restarted with {n} entries")
    return took * 1000


def _bytecode(compiled: bool) -> None:
    """Compile the package's bytecode into its __pycache__ folders, or remove them
    (and keep the servers from writing them again)."""
    pkg = ROOT / "streamdb"
    if compiled:
        import compileall
        compileall.compile_dir(str(pkg), quiet=1)
    else:
        os.environ["PYTHONDONTWRITEBYTECODE"] = "1"      # inherited by the servers
        for d in pkg.rglob("__pycache__"):
            shutil.rmtree(d, ignore_errors=True)


def w_restart(cfg) -> list[Row]:
    """Median of cfg.rounds restarts per server, Redis and StreamDB in turn (so that a
    change in the machine's load hits both); the note gives each one's range.

    StreamDB restarts run on compiled bytecode, as an installed package does (pip
    compiles it): from a source tree under PYTHONDONTWRITEBYTECODE=1 every start
    would first compile every module (about 90 ms here), which no deployment
    pays.  ``--source`` measures that case instead."""
    _bytecode(compiled=not cfg.source)
    files = {kind: _restart_files(kind, cfg) for kind in ("redis", "streamdb")}
    res = alternate({kind: kind for kind in files}, cfg.rounds, "restart",
                    lambda kind: _restart_once(kind, files[kind], cfg))
    red, sdb = statistics.median(res["redis"]), statistics.median(res["streamdb"])
    spread = (f"rounds: Redis {min(res['redis']):.0f}-{max(res['redis']):.0f}, StreamDB "
              f"{min(res['streamdb']):.0f}-{max(res['streamdb']):.0f} ms"
              + (", StreamDB from source" if cfg.source else ""))
    return [Row(f"restart: {cfg.n_entries:,} entries + {cfg.n_entries // 10:,}-command AOF tail", "ms",
                red, sdb, "<=", 2.0, spread)]


WORKLOADS = {"always": w_always, "everysec": w_everysec, "snapshot": w_snapshot_and_stall,
             "restart": w_restart}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small N, a couple of minutes")
    ap.add_argument("--only", default="", help="comma-separated: " + ",".join(WORKLOADS))
    ap.add_argument("--rounds", type=int, default=0)
    ap.add_argument("--source", action="store_true",
                    help="restart: StreamDB without compiled bytecode (compiles every module at start)")
    add_write_options(ap, "the bench_persistence.py section of docs/PERFORMANCE.md")
    args = ap.parse_args(argv)
    writes = planned_writes(ap, args, {"bench_persistence.py": PERFORMANCE_MD})
    record = RunRecord("bench_persistence.py", argv)
    cfg = argparse.Namespace()
    cfg.rounds = args.rounds or (1 if args.quick else 3)
    cfg.source = args.source
    cfg.n_xadd = 20_000 if args.quick else 200_000
    cfg.n_entries = 100_000 if args.quick else 1_000_000
    names = [x.strip() for x in args.only.split(",") if x.strip()] or list(WORKLOADS)
    rows = run_workloads(WORKLOADS, names, cfg, "streamdb-pbench-")
    record.publish(writes, f"N = {cfg.n_entries:,} entries, median of {cfg.rounds} "
                           "alternating round(s) per server", results_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
