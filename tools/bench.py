#!/usr/bin/env python3
"""Side-by-side benchmark: a real redis-server 7.0 against StreamDB.

    .venv/bin/python tools/bench.py [--quick] [--only NAME[,NAME...]] [--rounds N]

Starts ``redis-server --save '' --appendonly no`` and ``python -m streamdb
--appendonly no --save ''`` on free loopback ports, runs the same workload
against each, alternating (A B A B ...), takes the median over rounds and
prints one table: workload, Redis figure, StreamDB figure, ratio
(StreamDB/Redis, or Redis/StreamDB where lower is better), target, PASS/FAIL.

Workloads (names for --only):

  xadd      XADD, 50 clients, no pipelining (redis-benchmark)         req/s
  xaddp16   XADD, 50 clients, pipeline 16 (redis-benchmark)           req/s, p99
  xrange    XRANGE key - + COUNT 10 on a preloaded stream, 50 clients req/s
  xgroup    XREADGROUP COUNT 10 + XACK loop, 10 consumers (threads)   entries/s
  memory    1M entries ``sensor-id 1234 temperature 19.8``            bytes/entry
  latency   producer at 10k entries/s, 10 consumers blocked in a group:
            produce -> receive latency p50/p99/p99.9

Everything runs on 127.0.0.1; every server started is stopped on exit.
Timings are printed, never asserted (tests only check that this completes).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import hiredis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from streamdb.tools.procs import free_port, wait_until_ready  # noqa: E402
from streamdb.protocol.request import encode_request as resp  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
REDIS_BENCHMARK = shutil.which("redis-benchmark") or "/usr/bin/redis-benchmark"

ENTRY = [b"sensor-id", b"1234", b"temperature", b"19.8"]


# ---------------------------------------------------------------------------
# Output helpers
# ---------------------------------------------------------------------------

_TTY = sys.stderr.isatty()


def progress(msg: str, done: bool = False) -> None:
    """One progress line on stderr, rewritten in place on a terminal."""
    if _TTY:
        sys.stderr.write("\r\x1b[K" + msg + ("\n" if done else ""))
    else:
        sys.stderr.write(msg + "\n")
    sys.stderr.flush()


class Conn:
    """A minimal blocking RESP client (raw socket + hiredis), cheap per call."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = hiredis.Reader()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read(self):
        r = self.reader
        while True:
            got = r.gets()
            if got is not False:
                if isinstance(got, hiredis.ReplyError):
                    raise got
                return got
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionError("server closed the connection")
            r.feed(data)

    def call(self, *args):
        self.send(resp(*args))
        return self.read()

    def close(self) -> None:
        self.sock.close()


# ---------------------------------------------------------------------------
# Servers
# ---------------------------------------------------------------------------


wait_for_ping = wait_until_ready


class Server:
    def __init__(self, kind: str, workdir: Path) -> None:
        self.kind = kind
        self.port = free_port()
        self.dir = workdir / f"{kind}-{self.port}"
        self.dir.mkdir(parents=True)
        self.proc: subprocess.Popen | None = None
        self.log = None

    def start(self) -> "Server":
        self.log = open(self.dir / "server.log", "ab")
        if self.kind == "redis":
            cmd = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1",
                   "--save", "", "--appendonly", "no", "--dir", str(self.dir),
                   "--daemonize", "no"]
        else:
            cmd = [sys.executable, "-m", "streamdb", "--port", str(self.port),
                   "--bind", "127.0.0.1", "--appendonly", "no", "--save", "",
                   "--dir", str(self.dir)]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT)
        wait_for_ping(self.port, self.proc)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.log:
            self.log.close()

    def rss(self) -> int:
        """Resident set size in bytes (VmRSS of /proc/<pid>/status)."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def call(self, *args):
        c = Conn(self.port)
        try:
            return c.call(*args)
        finally:
            c.close()


# ---------------------------------------------------------------------------
# Workload building blocks
# ---------------------------------------------------------------------------


def redis_benchmark(port: int, clients: int, n: int, pipeline: int, *command: str,
                    rand: int = 0) -> dict:
    """Run redis-benchmark --csv; returns rps and latency percentiles (ms)."""
    cmd = [REDIS_BENCHMARK, "-h", "127.0.0.1", "-p", str(port), "-c", str(clients),
           "-n", str(n), "-P", str(pipeline), "--csv"]
    if rand:
        cmd += ["-r", str(rand)]
    cmd += list(command)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"redis-benchmark failed: {out.stderr.strip() or out.stdout.strip()}")
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith('"')]
    header = [h.strip('"') for h in lines[0].split('","')]
    values = [v.strip('"') for v in lines[-1].split('","')]
    row = dict(zip(header, values))
    return {"rps": float(row["rps"]), "p50": float(row["p50_latency_ms"]),
            "p99": float(row["p99_latency_ms"]), "max": float(row["max_latency_ms"])}


def preload(port: int, key: bytes, n: int, label: str = "", batch: int = 1000) -> None:
    """XADD ``n`` entries to ``key``, pipelined in batches (same loader for both servers)."""
    c = Conn(port)
    one = resp(b"XADD", key, b"*", *ENTRY)
    sent = 0
    last_report = 0.0
    try:
        while sent < n:
            k = min(batch, n - sent)
            c.send(one * k)
            for _ in range(k):
                c.read()
            sent += k
            now = time.monotonic()
            if label and now - last_report > 0.5:
                last_report = now
                progress(f"{label}: loading {sent:,}/{n:,} entries ({100 * sent // n}%)")
    finally:
        c.close()


def delete(port: int, *keys: bytes) -> None:
    c = Conn(port)
    try:
        c.call(b"DEL", *keys)
    finally:
        c.close()


# -- XREADGROUP + XACK loop ----------------------------------------------------


def group_consume(port: int, key: bytes, group: bytes, consumers: int, expected: int) -> float:
    """``consumers`` threads loop XREADGROUP COUNT 10 > then XACK; returns entries/s."""
    conns = [Conn(port) for _ in range(consumers)]
    counts = [0] * consumers
    start_evt = threading.Event()
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        c = conns[i]
        name = b"c%d" % i
        read = resp(b"XREADGROUP", b"GROUP", group, name, b"COUNT", b"10",
                    b"STREAMS", key, b">")
        start_evt.wait()
        try:
            while True:
                c.send(read)
                reply = c.read()
                if not reply:
                    return
                entries = reply[0][1]
                if not entries:
                    return
                ids = [e[0] for e in entries]
                c.send(resp(b"XACK", key, group, *ids))
                c.read()
                counts[i] += len(ids)
        except BaseException as e:   # surfaced after join
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(consumers)]
    for t in threads:
        t.start()
    t0 = time.perf_counter()
    start_evt.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    for c in conns:
        c.close()
    if errors:
        raise errors[0]
    total = sum(counts)
    if total != expected:
        raise RuntimeError(f"consumed {total} entries, expected {expected}")
    return total / elapsed


# -- end-to-end latency ------------------------------------------------------------


def _latency_consumers(port: int, key: bytes, group: bytes, n: int, expected: int,
                       ready, out_q) -> None:
    """Child process: ``n`` threads blocked in XREADGROUP; records now - produced_at."""
    lat: list[int] = []
    lock = threading.Lock()
    got = [0]
    stop = threading.Event()
    conns = [Conn(port) for _ in range(n)]

    def worker(i: int) -> None:
        c = conns[i]
        read = resp(b"XREADGROUP", b"GROUP", group, b"c%d" % i, b"COUNT", b"100",
                    b"BLOCK", b"200", b"NOACK", b"STREAMS", key, b">")
        mine: list[int] = []
        while not stop.is_set():
            c.send(read)
            reply = c.read()
            now = time.perf_counter_ns()
            if not reply:
                continue
            for _sid, fv in reply[0][1]:
                # fields: ts <perf_counter_ns> sensor-id ... ; fv is a flat list
                mine.append(now - int(fv[1]))
            with lock:
                got[0] += len(reply[0][1])
                if got[0] >= expected:
                    stop.set()
        with lock:
            lat.extend(mine)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    time.sleep(0.3)   # let every consumer block
    ready.set()
    for t in threads:
        t.join(timeout=60)
    out_q.put(lat)


def e2e_latency(port: int, rate: int, seconds: float, consumers: int = 10) -> dict:
    key, group = b"lat", b"g"
    c = Conn(port)
    c.call(b"DEL", key)
    c.call(b"XGROUP", b"CREATE", key, group, b"$", b"MKSTREAM")
    total = int(rate * seconds)
    ctx = mp.get_context("fork")
    ready = ctx.Event()
    q = ctx.Queue()
    p = ctx.Process(target=_latency_consumers,
                    args=(port, key, group, consumers, total, ready, q), daemon=True)
    p.start()
    ready.wait(10)
    interval = 1e9 / rate
    t0 = time.perf_counter_ns()
    try:
        for i in range(total):
            due = t0 + int(i * interval)
            while True:
                now = time.perf_counter_ns()
                if now >= due:
                    break
                if due - now > 200_000:
                    time.sleep((due - now - 100_000) / 1e9)
            ts = b"%d" % time.perf_counter_ns()
            c.send(_xadd_ts(key, ts))
            c.read()
        lat = q.get(timeout=60)
    finally:
        p.join(5)
        if p.is_alive():
            p.kill()
        c.call(b"DEL", key)
        c.close()
    if len(lat) < total * 0.99:
        raise RuntimeError(f"received {len(lat)} of {total} entries")
    lat.sort()

    def pct(p: float) -> float:
        return lat[min(len(lat) - 1, int(p * len(lat)))] / 1e6

    return {"p50": pct(0.50), "p99": pct(0.99), "p999": pct(0.999), "max": lat[-1] / 1e6}


def _xadd_ts(key: bytes, ts: bytes) -> bytes:
    return resp(b"XADD", key, b"*", b"ts", ts, *ENTRY)


# ---------------------------------------------------------------------------
# The workloads: each returns rows for the table
# ---------------------------------------------------------------------------


class Row:
    def __init__(self, name, unit, redis, sdb, ratio_kind, target, note="") -> None:
        self.name, self.unit, self.redis, self.sdb = name, unit, redis, sdb
        self.ratio_kind, self.target, self.note = ratio_kind, target, note

    @property
    def ratio(self) -> float | None:
        if self.redis is None or self.sdb is None or not self.redis:
            return None
        return self.sdb / self.redis

    def verdict(self) -> str:
        r = self.ratio
        if r is None:
            return "n/a"
        kind, t = self.ratio_kind, self.target
        if kind == ">=":
            return "PASS" if r >= t else "FAIL"
        if kind == "<=":
            return "PASS" if r <= t else "FAIL"
        if kind == "abs<=":   # absolute StreamDB limit plus relative limit
            limit_abs, limit_rel = t
            return "PASS" if self.sdb <= limit_abs and r <= limit_rel else "FAIL"
        return "info"

    def target_text(self) -> str:
        kind, t = self.ratio_kind, self.target
        if kind == ">=":
            return f">= {t:g}x"
        if kind == "<=":
            return f"<= {t:g}x"
        if kind == "abs<=":
            return f"<= {t[0]:g} ms and <= {t[1]:g}x"
        return "-"


def alternate(servers: dict, rounds: int, label: str, fn) -> dict:
    """Run ``fn(server)`` A B A B ... ``rounds`` times each; returns the list per kind."""
    results = {k: [] for k in servers}
    for r in range(rounds):
        for kind, srv in servers.items():
            progress(f"{label}: round {r + 1}/{rounds} on {kind}")
            results[kind].append(fn(srv))
    return results


def median_of(values: list[dict], field: str) -> float:
    return statistics.median(v[field] for v in values)


def w_xadd(servers, cfg) -> list[Row]:
    def run(srv):
        delete(srv.port, b"bench")
        return redis_benchmark(srv.port, 50, cfg.xadd_n, 1, "XADD", "bench", "*", "f", "v")
    res = alternate(servers, cfg.rounds, "xadd", run)
    return [Row("XADD, 50 clients, -P 1", "req/s", median_of(res["redis"], "rps"),
                median_of(res["streamdb"], "rps"), ">=", 0.9),
            Row("  (p99 latency, info)", "ms", median_of(res["redis"], "p99"),
                median_of(res["streamdb"], "p99"), "info", None)]


def w_xaddp16(servers, cfg) -> list[Row]:
    def run(srv):
        delete(srv.port, b"bench")
        return redis_benchmark(srv.port, 50, cfg.xaddp_n, 16, "XADD", "bench", "*", "f", "v")
    res = alternate(servers, cfg.rounds, "xadd -P 16", run)
    return [Row("XADD, 50 clients, -P 16", "req/s", median_of(res["redis"], "rps"),
                median_of(res["streamdb"], "rps"), ">=", 0.6),
            Row("XADD -P 16 p99 latency", "ms", median_of(res["redis"], "p99"),
                median_of(res["streamdb"], "p99"), "<=", 2.0)]


def w_xrange(servers, cfg) -> list[Row]:
    for kind, srv in servers.items():
        delete(srv.port, b"xr")
        preload(srv.port, b"xr", cfg.xrange_preload, label=f"xrange preload ({kind})")
    res = alternate(servers, cfg.rounds, "xrange", lambda srv: redis_benchmark(
        srv.port, 50, cfg.xrange_n, 1, "XRANGE", "xr", "-", "+", "COUNT", "10"))
    for srv in servers.values():
        delete(srv.port, b"xr")
    return [Row(f"XRANGE - + COUNT 10 ({cfg.xrange_preload // 1000}k-entry stream)", "req/s",
                median_of(res["redis"], "rps"), median_of(res["streamdb"], "rps"), ">=", 0.7)]


def _supports_groups(srv) -> bool:
    try:
        srv.call(b"DEL", b"__probe")
        srv.call(b"XGROUP", b"CREATE", b"__probe", b"g", b"$", b"MKSTREAM")
        srv.call(b"XREADGROUP", b"GROUP", b"g", b"c", b"COUNT", b"1", b"STREAMS", b"__probe", b">")
        srv.call(b"DEL", b"__probe")
        return True
    except hiredis.ReplyError:
        return False


def w_xgroup(servers, cfg) -> list[Row]:
    if not _supports_groups(servers["streamdb"]):
        return [Row("XREADGROUP COUNT 10 + XACK, 10 consumers", "entries/s", None, None,
                    ">=", 0.5, "StreamDB lacks XGROUP/XREADGROUP")]

    def run(srv):
        srv.call(b"DEL", b"grp")
        preload(srv.port, b"grp", cfg.group_n)
        srv.call(b"XGROUP", b"CREATE", b"grp", b"g", b"0")
        rate = group_consume(srv.port, b"grp", b"g", 10, cfg.group_n)
        srv.call(b"DEL", b"grp")
        return {"eps": rate}
    res = alternate(servers, cfg.rounds, "xreadgroup+xack", run)
    return [Row("XREADGROUP COUNT 10 + XACK, 10 consumers", "entries/s",
                median_of(res["redis"], "eps"), median_of(res["streamdb"], "eps"), ">=", 0.5)]


def w_memory(servers, cfg) -> list[Row]:
    """Fresh servers (RSS deltas must not include earlier workloads)."""
    n = cfg.memory_n
    out = {}
    for kind in ("redis", "streamdb"):
        srv = Server(kind, cfg.workdir).start()
        try:
            if kind == "redis":
                um0 = int(srv.call(b"INFO", b"memory").split(b"used_memory:")[1].split(b"\r\n")[0])
            rss0 = srv.rss()
            preload(srv.port, b"mem", n, label=f"memory ({kind})")
            time.sleep(0.5)
            rss1 = srv.rss()
            out[kind] = {"rss": (rss1 - rss0) / n}
            if kind == "redis":
                um1 = int(srv.call(b"INFO", b"memory").split(b"used_memory:")[1].split(b"\r\n")[0])
                out[kind]["used"] = (um1 - um0) / n
        finally:
            srv.stop()
    label = f"memory/entry, {n // 1000}k x `sensor-id 1234 temperature 19.8`"
    return [Row(label + " (Redis used_memory vs StreamDB RSS)", "bytes",
                out["redis"]["used"], out["streamdb"]["rss"], "<=", 1.5),
            Row("  (Redis RSS vs StreamDB RSS, like-for-like)", "bytes",
                out["redis"]["rss"], out["streamdb"]["rss"], "info", None)]


def w_latency(servers, cfg) -> list[Row]:
    if not _supports_groups(servers["streamdb"]):
        return [Row("e2e latency p99.9, 10k/s, 10 blocked consumers", "ms", None, None,
                    "abs<=", (2.0, 1.5), "StreamDB lacks XGROUP/XREADGROUP")]
    res = alternate(servers, cfg.rounds, "e2e latency",
                    lambda srv: e2e_latency(srv.port, 10_000, cfg.latency_s))
    rows = []
    for field, label in (("p50", "p50"), ("p99", "p99")):
        rows.append(Row(f"  (e2e latency {label}, info)", "ms", median_of(res["redis"], field),
                        median_of(res["streamdb"], field), "info", None))
    rows.append(Row("e2e latency p99.9, 10k/s, 10 blocked consumers", "ms",
                    median_of(res["redis"], "p999"), median_of(res["streamdb"], "p999"),
                    "abs<=", (2.0, 1.5)))
    return rows


WORKLOADS = {
    "xadd": w_xadd,
    "xaddp16": w_xaddp16,
    "xrange": w_xrange,
    "xgroup": w_xgroup,
    "memory": w_memory,
    "latency": w_latency,
}


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------


def fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "ms":
        return f"{v:.3f}"
    if unit == "bytes":
        return f"{v:.1f}"
    return f"{v:,.0f}"


def print_table(rows: list[Row], out=sys.stdout) -> None:
    head = ["workload", "unit", "Redis 7.0", "StreamDB", "ratio", "target", "result"]
    body = []
    for r in rows:
        ratio = f"{r.ratio:.2f}x" if r.ratio is not None else "-"
        verdict = r.verdict() + (f" ({r.note})" if r.note else "")
        body.append([r.name, r.unit, fmt(r.redis, r.unit), fmt(r.sdb, r.unit), ratio,
                     r.target_text(), verdict])
    widths = [max(len(x[i]) for x in [head] + body) for i in range(len(head))]
    line = "| " + " | ".join(h.ljust(w) for h, w in zip(head, widths)) + " |"
    print(line, file=out)
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|", file=out)
    for b in body:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(b, widths)) + " |", file=out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small N, about 1-2 minutes")
    ap.add_argument("--only", default="", help="comma-separated workloads: " + ",".join(WORKLOADS))
    ap.add_argument("--rounds", type=int, default=0, help="rounds per server (median taken)")
    ap.add_argument("--n", type=int, default=0, help="override request counts (smoke tests)")
    args = ap.parse_args(argv)

    for tool in (REDIS_SERVER, REDIS_BENCHMARK):
        if not os.path.exists(tool):
            print(f"bench: {tool} not found", file=sys.stderr)
            return 2

    cfg = argparse.Namespace()
    if args.quick:
        cfg.rounds, cfg.xadd_n, cfg.xaddp_n = 2, 30_000, 100_000
        cfg.xrange_preload, cfg.xrange_n = 100_000, 30_000
        cfg.group_n, cfg.memory_n, cfg.latency_s = 20_000, 200_000, 2.0
    else:
        cfg.rounds, cfg.xadd_n, cfg.xaddp_n = 3, 200_000, 1_000_000
        cfg.xrange_preload, cfg.xrange_n = 1_000_000, 200_000
        cfg.group_n, cfg.memory_n, cfg.latency_s = 200_000, 1_000_000, 10.0
    if args.rounds:
        cfg.rounds = args.rounds
    if args.n:
        cfg.xadd_n = cfg.xaddp_n = cfg.xrange_n = cfg.group_n = args.n
        cfg.xrange_preload = cfg.memory_n = max(args.n, 1000)
        cfg.latency_s = max(0.2, args.n / 10_000)
    names = [x.strip() for x in args.only.split(",") if x.strip()] or list(WORKLOADS)
    for n in names:
        if n not in WORKLOADS:
            ap.error(f"unknown workload {n!r}; choose from {', '.join(WORKLOADS)}")

    t_start = time.monotonic()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="streamdb-bench-") as tmp:
        cfg.workdir = Path(tmp)
        servers = {}
        try:
            servers["redis"] = Server("redis", cfg.workdir).start()
            servers["streamdb"] = Server("streamdb", cfg.workdir).start()
            for i, name in enumerate(names):
                progress(f"[{i + 1}/{len(names)}] {name}")
                rows.extend(WORKLOADS[name](servers, cfg))
        finally:
            for srv in servers.values():
                srv.stop()
    progress(f"done in {time.monotonic() - t_start:.0f} s", done=True)
    mode = "--quick" if args.quick else "full"
    print(f"StreamDB vs redis-server 7.0, {mode} run, {os.cpu_count()} CPUs, "
          f"median of {cfg.rounds} alternating round(s)")
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
