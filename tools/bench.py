#!/usr/bin/env python3
"""Side-by-side benchmark: a real redis-server 7.0 against StreamDB.

    .venv/bin/python tools/bench.py [--quick] [--only NAME[,NAME...]] [--rounds N]
        [--no-python-path] [--write [--docs-root DIR]]

Starts ``redis-server --save '' --appendonly no`` and ``python -m streamdb
--appendonly no --save ''`` on free loopback ports, and a second StreamDB with
``STREAMDB_PURE=1`` in its environment (the Python path of the core, shown
beside the others without a target; ``--no-python-path`` leaves it out).  Runs
the same workload against each, alternating (Redis, StreamDB, Python path,
Redis, ...), takes the median over rounds (3 by default) and prints one table:
workload, Redis figure, StreamDB figure, ratio (StreamDB/Redis), target,
PASS/FAIL, the Python path's figure and ratio.  Progress goes to stderr.

Workloads (names for --only), targets as the table states them.  The throughput rows
are held to at least Redis's rate (issue 32: XADD -P 16 with its p99 within 1.2x, and
XREADGROUP + XACK, at least 1.0x, and every other row staying there), but for the
PUBLISH rows without pipelining (issue 29: at least 0.9x) and the dead-letter row
(issue 30: a policy costs at most 3%); the latency rows keep their own limits.

  xadd      XADD, 50 clients, no pipelining (redis-benchmark)         req/s
  xaddp16   XADD, 50 clients, pipeline 16 (redis-benchmark)           req/s, p99
  xrange    XRANGE key - + COUNT 10 on a 1M-entry stream, 50 clients  req/s
  xgroup    XREADGROUP COUNT 10 + XACK loop, 10 consumers (threads)   entries/s
  xgroupdlq the same with a dead-letter policy on the group (STREAMDB.GROUP SET)
            against without, both on StreamDB (no Redis run)          entries/s
  ping      PING, 50 clients (redis-benchmark)                        req/s
  xlen      XLEN on a 1000-entry stream, 50 clients (redis-benchmark) req/s
  publish   PUBLISH, 50 clients, with 0 and with 10 subscribers reading
            (redis-benchmark; each subscriber must get every message)  req/s
  publishp16  the same, pipeline 16                                   req/s
  memory    1M entries ``sensor-id 1234 temperature 19.8``            bytes/entry
  latency   producer at 10k entries/s, 10 consumers blocked in a group:
            produce -> receive latency p50/p99/p99.9
  loadtest  streamdb-loadtest's workload (1000 connections, 200 consumers
            blocked in XREADGROUP, 50 producers) on fresh servers: XADD
            throughput and latency percentiles, then its verification

``--write`` replaces this tool's section of docs/PERFORMANCE.md (between
``<!-- bench.py:begin -->`` and ``<!-- bench.py:end -->``) with the machine,
the date, the command line and the table; ``--docs-root`` names another copy of the project's documents.

Everything runs on 127.0.0.1; every server started is stopped on exit.
Timings are printed, never asserted (tests only check that this completes).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import multiprocessing as mp
import os
import platform
import shlex
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
from streamdb.cli import loadtest  # noqa: E402
from streamdb.cli.procs import free_port, wait_until_ready  # noqa: E402
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


# The servers a run compares, in the order each round visits them.  "streamdb" runs
# the core as built (compiled when the extension is there); "streamdb-py" the same
# server with STREAMDB_PURE=1, the Python path, shown without a target.
KINDS = ("redis", "streamdb", "streamdb-py")
COLUMN = {"redis": "Redis 7.0", "streamdb": "StreamDB", "streamdb-py": "StreamDB (Python path)"}


def server_env(kind: str) -> dict:
    """The environment a server of ``kind`` runs in: only the Python path gets
    STREAMDB_PURE (an inherited one must not turn the default column into it)."""
    env = dict(os.environ)
    env.pop("STREAMDB_PURE", None)
    if kind == "streamdb-py":
        env["STREAMDB_PURE"] = "1"
    return env


class Server:
    def __init__(self, kind: str, workdir: Path, *extra: str) -> None:
        self.kind = kind
        self.port = free_port()
        self.dir = workdir / f"{kind}-{self.port}"
        self.dir.mkdir(parents=True)
        self.extra = list(extra)
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
        self.proc = subprocess.Popen(cmd + self.extra, cwd=ROOT, env=server_env(self.kind),
                                     stdout=self.log, stderr=subprocess.STDOUT)
        wait_for_ping(self.port, self.proc)
        return self

    def core(self) -> str:
        """The core this StreamDB says it runs (INFO server's streamdb_core field)."""
        for line in self.call(b"INFO", b"server").decode().splitlines():
            if line.startswith("streamdb_core:"):
                return line.partition(":")[2].strip()
        return "not reported"

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
        return process_rss(self.proc.pid)

    def call(self, *args):
        c = Conn(self.port)
        try:
            return c.call(*args)
        finally:
            c.close()


# ---------------------------------------------------------------------------
# Workload building blocks
# ---------------------------------------------------------------------------


def process_rss(pid: int) -> int:
    """Resident set size in bytes (VmRSS of /proc/<pid>/status)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


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


# -- Pub/Sub subscribers ------------------------------------------------------------


def message_frame(channel: bytes, payload: bytes, pattern: bytes | None = None) -> bytes:
    """One message push as a RESP2 subscriber of ``channel`` (or of ``pattern``) gets it:
    an array of bulk strings, the same bytes a request has."""
    if pattern is None:
        return resp(b"message", channel, payload)
    return resp(b"pmessage", pattern, channel, payload)


class Subscribers:
    """``count`` connections subscribed to ``channel`` (to ``pattern`` with PSUBSCRIBE if
    given), read by a child process of their own as fast as the sockets give bytes, so
    that neither server's output buffers grow and the publishers' process is not slowed.

    Every publish of ``payload`` to ``channel`` reaches each connection as the same frame
    (message_frame), so the reader does not parse: it compares each read with the frame
    repeated (one memcmp) and counts bytes.  ``wait(expected)`` waits until every
    connection got ``expected`` messages (or ``timeout`` passed) and returns what was
    read: {"messages", "first", "last", "cpu"} (time.perf_counter() of the first and last
    read, the clock the parent reads too; the reader's CPU seconds), or raises if a byte differed, a connection closed or
    messages are missing.  A context manager; ``count`` 0 starts no process."""

    def __init__(self, port: int, count: int, channel: bytes, payload: bytes,
                 pattern: bytes | None = None) -> None:
        self.count = count
        self.frame = message_frame(channel, payload, pattern)
        self.process = None
        if not count:
            return
        ctx = mp.get_context("fork")
        self.control, child_end = ctx.Pipe()
        subscribe = resp(b"PSUBSCRIBE", pattern) if pattern else resp(b"SUBSCRIBE", channel)
        self.process = ctx.Process(target=_read_subscribers, daemon=True,
                                   args=(port, count, subscribe, self.frame, child_end))
        self.process.start()
        if not self.control.poll(30):
            raise RuntimeError("the subscribers did not subscribe within 30 s")
        ready = self.control.recv()
        if ready != "subscribed":
            raise RuntimeError(f"subscribers: {ready}")

    def wait(self, expected: int, timeout: float = 60.0) -> dict:
        if not self.count:
            return {"messages": 0, "first": 0.0, "last": 0.0, "cpu": 0.0}
        self.control.send((expected, timeout))
        if not self.control.poll(timeout + 30):
            raise RuntimeError("the subscribers' reader did not answer")
        got = self.control.recv()
        if isinstance(got, str):
            raise RuntimeError(f"subscribers: {got}")
        return got

    def close(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.join()
            self.process = None

    def __enter__(self) -> "Subscribers":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _read_subscribers(port: int, count: int, subscribe: bytes, frame: bytes, control) -> None:
    """The child process of Subscribers: subscribe, say so, then read every connection
    until the parent's expected count has arrived on each (see Subscribers)."""
    import select
    try:
        conns = [Conn(port) for _ in range(count)]
        for c in conns:
            c.send(subscribe)
            c.read()                      # the confirmation; nothing is published yet
            c.sock.setblocking(False)
    except (OSError, hiredis.ReplyError) as e:
        control.send(f"could not subscribe: {e}")
        return
    control.send("subscribed")
    cpu_at_start = time.process_time()
    chunk = 1 << 18
    repeated = frame * (chunk // len(frame) + 2)
    by_fd = {c.sock.fileno(): c.sock for c in conns}
    received = dict.fromkeys(by_fd, 0)          # bytes per connection
    first = last = 0.0
    poller = select.epoll()
    for fd in by_fd:
        poller.register(fd, select.EPOLLIN)
    poller.register(control.fileno(), select.EPOLLIN)
    want = deadline = None                      # bytes per connection; when to give up
    problem = None
    while problem is None:
        if want is not None and (min(received.values()) >= want or time.perf_counter() > deadline):
            break
        for fd, _ in poller.poll(0.05):
            if fd == control.fileno():
                expected, timeout = control.recv()
                want, deadline = expected * len(frame), time.perf_counter() + timeout
                poller.unregister(fd)
                continue
            data = by_fd[fd].recv(chunk)
            now = time.perf_counter()
            if not data:
                problem = "the server closed a subscriber's connection"
                break
            first = first or now
            last = now
            offset = received[fd] % len(frame)
            if data != repeated[offset:offset + len(data)]:
                problem = f"unexpected bytes after {received[fd]} bytes: {data[:80]!r}"
                break
            received[fd] += len(data)
    if problem is None and min(received.values()) < want:
        problem = (f"a subscriber got {min(received.values()) // len(frame)} of "
                   f"{want // len(frame)} messages")
    if problem is None and max(received.values()) > want:
        problem = f"a subscriber got {max(received.values()) // len(frame)} messages, more than sent"
    control.send(problem or {"messages": sum(received.values()) // len(frame), "first": first,
                             "last": last, "cpu": time.process_time() - cpu_at_start})


# ---------------------------------------------------------------------------
# The workloads: each returns rows for the table
# ---------------------------------------------------------------------------


class Row:
    """One line of a table: each server's figure and StreamDB's target against Redis's.

    ``py`` is the Python path's figure (shown, no target)."""

    def __init__(self, name, unit, redis, sdb, ratio_kind, target, note="", py=None) -> None:
        self.name, self.unit, self.redis, self.sdb = name, unit, redis, sdb
        self.ratio_kind, self.target, self.note = ratio_kind, target, note
        self.py = py

    def ratio_of(self, value: float | None) -> float | None:
        if self.redis is None or value is None or not self.redis:
            return None
        return value / self.redis

    @property
    def ratio(self) -> float | None:
        return self.ratio_of(self.sdb)

    def verdict(self) -> str:
        kind, t = self.ratio_kind, self.target
        if kind == "limit<=":   # an absolute limit on StreamDB's figure, no Redis column
            return "PASS" if self.sdb <= self.target else "FAIL"
        if kind == "none":      # a count that must be zero (verification problems)
            return "n/a" if self.sdb is None else "PASS" if self.sdb == 0 else "FAIL"
        r = self.ratio
        if r is None:
            return "n/a"
        if kind == ">=":
            return "PASS" if r >= t else "FAIL"
        if kind == "<=":
            return "PASS" if r <= t else "FAIL"
        if kind == "abs<=":   # absolute StreamDB limit plus relative limit
            limit_abs, limit_rel = t
            return "PASS" if self.sdb <= limit_abs and r <= limit_rel else "FAIL"
        if kind == "max<=":   # within the larger of an absolute and a relative limit
            limit_abs, limit_rel = t
            return "PASS" if self.sdb <= max(limit_abs, limit_rel * self.redis) else "FAIL"
        return "info"

    def target_text(self) -> str:
        kind, t = self.ratio_kind, self.target
        if kind == ">=":
            return f">= {t:g}x"
        if kind == "<=":
            return f"<= {t:g}x"
        if kind == "abs<=":
            return f"<= {t[0]:g} ms" + (f" and <= {t[1]:g}x" if t[1] != float("inf") else "")
        if kind == "max<=":
            return f"<= max({t[0]:g} ms, {t[1]:g}x)"
        if kind == "limit<=":
            return f"<= {t:g} {self.unit}"
        if kind == "none":
            return "0"
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


def measured(name: str, unit: str, res: dict, field: str, ratio_kind: str, target,
             note: str = "") -> Row:
    """The row of ``field``'s median over each server's rounds in ``res`` (from alternate)."""
    med = {kind: median_of(values, field) for kind, values in res.items()}
    return Row(name, unit, med["redis"], med["streamdb"], ratio_kind, target, note,
               py=med.get("streamdb-py"))


def _xadd_bench(srv, n: int, pipeline: int) -> dict:
    delete(srv.port, b"bench")
    return redis_benchmark(srv.port, 50, n, pipeline, "XADD", "bench", "*", "f", "v")


def w_xadd(servers, cfg) -> list[Row]:
    res = alternate(servers, cfg.rounds, "xadd", lambda srv: _xadd_bench(srv, cfg.xadd_n, 1))
    return [measured("XADD, 50 clients, -P 1", "req/s", res, "rps", ">=", 1.0),
            measured("  (p99 latency, info)", "ms", res, "p99", "info", None)]


def w_xaddp16(servers, cfg) -> list[Row]:
    res = alternate(servers, cfg.rounds, "xadd -P 16",
                    lambda srv: _xadd_bench(srv, cfg.xaddp_n, 16))
    return [measured("XADD, 50 clients, -P 16", "req/s", res, "rps", ">=", 1.0),
            measured("XADD -P 16 p99 latency", "ms", res, "p99", "<=", 1.2)]


# The channel and message of the PUBLISH rows (and bench_fanout.py's default).
CHANNEL, PAYLOAD = b"bench-channel", b"a message of 32 bytes, say JSON."


def _publish_bench(srv, subscribers: int, n: int, pipeline: int) -> dict:
    """redis-benchmark PUBLISH to a channel with ``subscribers`` reading connections,
    each of which must then have got every one of the ``n`` messages."""
    with Subscribers(srv.port, subscribers, CHANNEL, PAYLOAD) as subs:
        res = redis_benchmark(srv.port, 50, n, pipeline, "PUBLISH", CHANNEL.decode(),
                              PAYLOAD.decode())
        subs.wait(n)
    return res


def _publish_rows(servers, cfg, n: int, pipeline: int) -> list[Row]:
    rows = []
    for subscribers in (0, 10):
        res = alternate(servers, cfg.rounds, f"publish, {subscribers} subscribers, -P {pipeline}",
                        lambda srv: _publish_bench(srv, subscribers, n, pipeline))
        rows.append(measured(f"PUBLISH, {subscribers} subscribers, 50 clients, -P {pipeline}",
                             "req/s", res, "rps", ">=", 0.9 if pipeline == 1 else 1.0))
    return rows


def w_publish(servers, cfg) -> list[Row]:
    """PUBLISH alone (no subscriber: the request path and a look-up) and delivered to 10
    subscribers (the message encoded and written to each)."""
    return _publish_rows(servers, cfg, cfg.ping_n, 1)


def w_publishp16(servers, cfg) -> list[Row]:
    return _publish_rows(servers, cfg, cfg.xaddp_n, 16)


def w_xrange(servers, cfg) -> list[Row]:
    for kind, srv in servers.items():
        delete(srv.port, b"xr")
        preload(srv.port, b"xr", cfg.xrange_preload, label=f"xrange preload ({kind})")
    res = alternate(servers, cfg.rounds, "xrange", lambda srv: redis_benchmark(
        srv.port, 50, cfg.xrange_n, 1, "XRANGE", "xr", "-", "+", "COUNT", "10"))
    for srv in servers.values():
        delete(srv.port, b"xr")
    return [measured(f"XRANGE - + COUNT 10 ({cfg.xrange_preload // 1000}k-entry stream)",
                     "req/s", res, "rps", ">=", 1.0)]


def _group_rate(srv, n: int, dead_letter_policy: bool = False) -> dict:
    """group_consume of ``n`` fresh entries by 10 consumers; with ``dead_letter_policy``
    the group has one (StreamDB only), which ">" reads never apply."""
    srv.call(b"DEL", b"grp", b"grp:dlq")
    preload(srv.port, b"grp", n)
    srv.call(b"XGROUP", b"CREATE", b"grp", b"g", b"0")
    if dead_letter_policy:
        srv.call(b"STREAMDB.GROUP", b"SET", b"grp", b"g", b"MAXDELIVERIES", b"3",
                 b"DEADLETTER", b"grp:dlq")
    rate = group_consume(srv.port, b"grp", b"g", 10, n)
    srv.call(b"DEL", b"grp")
    return {"eps": rate}


def w_xgroup(servers, cfg) -> list[Row]:
    res = alternate(servers, cfg.rounds, "xreadgroup+xack",
                    lambda srv: _group_rate(srv, cfg.group_n))
    return [measured("XREADGROUP COUNT 10 + XACK, 10 consumers", "entries/s", res, "eps",
                     ">=", 1.0)]


def w_xgroupdlq(servers, cfg) -> list[Row]:
    """Issue 30's target: a dead-letter policy costs the delivery of new entries nothing
    (>= 0.97x).  StreamDB without a policy and with one, alternating on one server."""
    srv = servers["streamdb"]
    res = alternate({"without a policy": False, "with a policy": True}, cfg.rounds,
                    "xreadgroup+xack", lambda policy: _group_rate(srv, cfg.group_n, policy))
    return [Row("XREADGROUP + XACK with a dead-letter policy (StreamDB both)", "entries/s",
                median_of(res["without a policy"], "eps"), median_of(res["with a policy"], "eps"),
                ">=", 0.97, note="'Redis 7.0' column = StreamDB without a policy")]


def w_ping(servers, cfg) -> list[Row]:
    """What every request costs before any command runs: parse, dispatch, reply."""
    res = alternate(servers, cfg.rounds, "ping",
                    lambda srv: redis_benchmark(srv.port, 50, cfg.ping_n, 1, "PING"))
    return [measured("PING, 50 clients", "req/s", res, "rps", ">=", 1.0)]


def w_xlen(servers, cfg) -> list[Row]:
    """The cheapest stream command: the request path plus one key look-up."""
    for srv in servers.values():
        delete(srv.port, b"xl")
        preload(srv.port, b"xl", 1000)
    res = alternate(servers, cfg.rounds, "xlen",
                    lambda srv: redis_benchmark(srv.port, 50, cfg.ping_n, 1, "XLEN", "xl"))
    for srv in servers.values():
        delete(srv.port, b"xl")
    return [measured("XLEN, 50 clients", "req/s", res, "rps", ">=", 1.0)]


def w_memory(servers, cfg) -> list[Row]:
    """Fresh servers (RSS deltas must not include earlier workloads)."""
    n = cfg.memory_n
    out = {}
    for kind in servers:
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
    py = out.get("streamdb-py", {}).get("rss")
    label = f"memory/entry, {n // 1000}k x `sensor-id 1234 temperature 19.8`"
    return [Row(label + " (Redis used_memory vs StreamDB RSS)", "bytes",
                out["redis"]["used"], out["streamdb"]["rss"], "<=", 0.8, py=py),
            Row("  (Redis RSS vs StreamDB RSS, like-for-like)", "bytes",
                out["redis"]["rss"], out["streamdb"]["rss"], "info", None, py=py)]


def w_latency(servers, cfg) -> list[Row]:
    res = alternate(servers, cfg.rounds, "e2e latency",
                    lambda srv: e2e_latency(srv.port, 10_000, cfg.latency_s))
    return [measured("  (e2e latency p50, info)", "ms", res, "p50", "info", None),
            measured("  (e2e latency p99, info)", "ms", res, "p99", "info", None),
            measured("e2e latency p99.9, 10k/s, 10 blocked consumers", "ms", res, "p999",
                     "max<=", (2.0, 1.2))]


def w_loadtest(servers, cfg) -> list[Row]:
    """streamdb-loadtest's workload and verification, on fresh servers: its 1000
    connections need a high maxclients, and its peak RSS must not include earlier
    workloads."""
    w = cfg.loadtest
    fresh = {kind: Server(kind, cfg.workdir, "--maxclients", "100000") for kind in servers}

    def run(srv):
        r = asyncio.run(loadtest.run_workload(srv.port, w, srv.proc.pid))
        for problem in r.problems[:20]:
            progress(f"loadtest on {srv.kind}: {problem}", done=True)
        return {"rps": r.throughput, "p50": r.percentile_ms(50), "p99": r.percentile_ms(99),
                "p999": r.percentile_ms(99.9), "rss": r.peak_rss_kb / 1024,
                "problems": len(r.problems)}
    try:
        res = alternate({kind: srv.start() for kind, srv in fresh.items()}, cfg.rounds,
                        "loadtest", run)
    finally:
        for srv in fresh.values():
            srv.stop()
    what = (f"{w.connections} connections, {w.consumers} blocked consumers, "
            f"{w.producers} producers, {w.seconds:g} s")
    problems = {kind: sum(x["problems"] for x in values) for kind, values in res.items()}
    return [measured(f"loadtest XADD throughput ({what})", "req/s", res, "rps", ">=", 1.0),
            measured("  (loadtest XADD p50, info)", "ms", res, "p50", "info", None),
            measured("  (loadtest XADD p99, info)", "ms", res, "p99", "info", None),
            measured("loadtest XADD p99.9", "ms", res, "p999", "<=", 1.5),
            measured("  (loadtest server peak RSS, info)", "MB", res, "rss", "info", None),
            Row("loadtest verification problems, all rounds", "", problems["redis"],
                problems["streamdb"], "none", None, py=problems.get("streamdb-py"))]


WORKLOADS = {
    "xadd": w_xadd,
    "xaddp16": w_xaddp16,
    "xrange": w_xrange,
    "xgroup": w_xgroup,
    "xgroupdlq": w_xgroupdlq,
    "ping": w_ping,
    "xlen": w_xlen,
    "publish": w_publish,
    "publishp16": w_publishp16,
    "memory": w_memory,
    "latency": w_latency,
    "loadtest": w_loadtest,
}


# ---------------------------------------------------------------------------
# Tables, and writing them into the documents
# ---------------------------------------------------------------------------


def fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "ms":
        return f"{v:.3f}"
    if unit in ("bytes", "MB"):
        return f"{v:.1f}"
    return f"{v:,.0f}"


def markdown_table(head: list[str], body: list[list[str]]) -> str:
    """A Markdown table, its columns padded so that it reads as well in a terminal."""
    widths = [max(len(str(x[i])) for x in [head] + body) for i in range(len(head))]
    lines = ["| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths)) + " |"
             for row in [head] + body]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def results_table(rows: list[Row], python_path: bool | None = None) -> str:
    """Each server's figure, ratio, target and verdict; then the Python path's figure and
    ratio when any row has one (or as ``python_path`` says)."""
    if python_path is None:
        python_path = any(r.py is not None for r in rows)
    head = ["workload", "unit", COLUMN["redis"], COLUMN["streamdb"], "ratio", "target", "result"]
    if python_path:
        head += [COLUMN["streamdb-py"], "ratio (Python path)"]
    body = []
    for r in rows:
        ratio = r.ratio
        verdict = r.verdict() + (f" ({r.note})" if r.note else "")
        cells = [r.name, r.unit, fmt(r.redis, r.unit), fmt(r.sdb, r.unit),
                 "-" if ratio is None else f"{ratio:.2f}x", r.target_text(), verdict]
        if python_path:
            py_ratio = r.ratio_of(r.py)
            cells += [fmt(r.py, r.unit), "-" if py_ratio is None else f"{py_ratio:.2f}x"]
        body.append(cells)
    return markdown_table(head, body)


PERFORMANCE_MD = Path("docs") / "PERFORMANCE.md"


def markers(section: str) -> tuple[str, str]:
    return f"<!-- {section}:begin -->", f"<!-- {section}:end -->"


def replace_section(text: str, section: str, body: str) -> str:
    """``text`` with what lies between ``section``'s markers replaced by ``body``: the
    markers and everything outside them stay byte for byte.  Raises ValueError unless
    each marker is there exactly once, the begin before the end."""
    begin, end = markers(section)
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ValueError(f"expected one {begin} ... {end} pair")
    head, rest = text.split(begin)
    tail = rest.split(end)[1]
    return f"{head}{begin}\n{body.strip()}\n{end}{tail}"


def write_section(path: Path, section: str, body: str) -> None:
    """Replace ``section`` of the document at ``path`` (replace_section), atomically."""
    new = replace_section(path.read_bytes().decode("utf-8"), section, body)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(new.encode("utf-8"))
    os.replace(tmp, path)
    progress(f"wrote the {section} section of {path}", done=True)


def add_write_options(ap: argparse.ArgumentParser, what: str) -> None:
    ap.add_argument("--write", action="store_true",
                    help=f"replace {what} with this run's machine, date, command and table")
    ap.add_argument("--docs-root", type=Path, default=ROOT, metavar="DIR",
                    help="the project copy whose documents --write replaces (default: this one)")


def run_workloads(workloads: dict, names: list[str], cfg, prefix: str) -> list[Row]:
    """The rows of ``workloads[name](cfg)`` for each of ``names`` in turn, with
    ``cfg.workdir`` a temporary directory (named ``prefix``...) removed after."""
    rows: list[Row] = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        cfg.workdir = Path(tmp)
        for i, name in enumerate(names):
            progress(f"[{i + 1}/{len(names)}] {name}")
            rows.extend(workloads[name](cfg))
    progress(f"done in {time.monotonic() - t0:.0f} s", done=True)
    return rows


def planned_writes(ap: argparse.ArgumentParser, args, sections: dict[str, Path]) -> dict:
    """{section: path under --docs-root} if --write, after checking each document has the
    section's markers (an error before the run, not after an hour of it); {} otherwise."""
    if not args.write:
        return {}
    out = {}
    for section, rel in sections.items():
        path = args.docs_root / rel
        try:
            replace_section(path.read_bytes().decode("utf-8"), section, "")
        except (OSError, ValueError) as e:
            ap.error(f"--write: {path}: {e}")
        out[section] = path
    return out


def _first(path: str, prefix: str) -> str:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(prefix):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def machine() -> str:
    """The machine in one line: CPUs and their model, memory, kernel, Python, uvloop,
    hiredis, redis-server, and the load average now."""
    mem_kb = _first("/proc/meminfo", "MemTotal:").split()[0]
    mem = f"{int(mem_kb) / 2**20:.1f} GiB RAM" if mem_kb.isdigit() else "? RAM"
    try:
        redis = subprocess.run([REDIS_SERVER, "--version"], capture_output=True, text=True,
                               timeout=10).stdout.split()[2].removeprefix("v=")
    except (OSError, IndexError, subprocess.SubprocessError):
        redis = "?"
    return (f"{os.cpu_count()} CPUs ({_first('/proc/cpuinfo', 'model name')}), {mem}, "
            f"{platform.system()} {platform.release()}, {platform.python_implementation()} "
            f"{platform.python_version()}, uvloop {_version('uvloop')}, hiredis "
            f"{_version('hiredis')}, redis-server {redis}; load average "
            f"{os.getloadavg()[0]:.2f} at the start")


class RunRecord:
    """What a section says about its run: the date, the exact command, the machine (taken
    when the run starts, so the load average is the one the run met)."""

    def __init__(self, tool: str, argv: list[str]) -> None:
        self.tool = tool
        self.date = time.strftime("%Y-%m-%d %H:%M %Z")
        self.command = " ".join(["python", f"tools/{tool}"] + [shlex.quote(a) for a in argv])
        self.machine = machine()

    def section(self, how: str, *parts: str) -> str:
        """The text of the tool's section: a line on the run, the machine, then ``parts``."""
        return "\n\n".join([f"Measured {self.date} by `{self.command}`: {how}.",
                            f"Machine: {self.machine}.", *parts])

    def publish(self, writes: dict, how: str, *parts: str) -> str:
        """Print the section; also write it into the tool's own section of the document
        if --write planned it (planned_writes).  Returns the text."""
        text = self.section(how, *parts)
        print(text)
        if self.tool in writes:
            write_section(writes[self.tool], self.tool, text)
        return text


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------


def redis_tools_missing(prog: str) -> bool:
    """Whether redis-server or redis-benchmark is not installed (said on stderr, as
    ``prog``): the tools that compare with Redis then run nothing."""
    missing = [tool for tool in (REDIS_SERVER, REDIS_BENCHMARK) if not os.path.exists(tool)]
    for tool in missing:
        print(f"{prog}: {tool} not found", file=sys.stderr)
    return bool(missing)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small N, a few minutes")
    ap.add_argument("--only", default="", help="comma-separated workloads: " + ",".join(WORKLOADS))
    ap.add_argument("--rounds", type=int, default=0, help="rounds per server (median taken)")
    ap.add_argument("--n", type=int, default=0, help="override request counts (smoke tests)")
    ap.add_argument("--no-python-path", action="store_true",
                    help="leave out the StreamDB (Python path) column: a quicker run")
    add_write_options(ap, "the bench.py section of docs/PERFORMANCE.md")
    args = ap.parse_args(argv)

    if redis_tools_missing("bench"):
        return 2
    names = [x.strip() for x in args.only.split(",") if x.strip()] or list(WORKLOADS)
    for n in names:
        if n not in WORKLOADS:
            ap.error(f"unknown workload {n!r}; choose from {', '.join(WORKLOADS)}")
    writes = planned_writes(ap, args, {"bench.py": PERFORMANCE_MD})

    cfg = argparse.Namespace()
    if args.quick:
        cfg.rounds, cfg.xadd_n, cfg.xaddp_n, cfg.ping_n = 2, 30_000, 100_000, 30_000
        cfg.xrange_preload, cfg.xrange_n = 100_000, 30_000
        cfg.group_n, cfg.memory_n, cfg.latency_s = 20_000, 200_000, 2.0
        cfg.loadtest = loadtest.Workload(seconds=5.0, drain_seconds=10.0)
    else:
        cfg.rounds, cfg.xadd_n, cfg.xaddp_n, cfg.ping_n = 3, 200_000, 1_000_000, 200_000
        cfg.xrange_preload, cfg.xrange_n = 1_000_000, 200_000
        cfg.group_n, cfg.memory_n, cfg.latency_s = 200_000, 1_000_000, 10.0
        cfg.loadtest = loadtest.Workload()
    if args.rounds:
        cfg.rounds = args.rounds
    if args.n:
        cfg.xadd_n = cfg.xaddp_n = cfg.xrange_n = cfg.group_n = cfg.ping_n = args.n
        cfg.xrange_preload = cfg.memory_n = max(args.n, 1000)
        cfg.latency_s = max(0.2, args.n / 10_000)
        cfg.loadtest = loadtest.Workload(connections=100, consumers=20, groups=4, producers=10,
                                         seconds=max(0.5, args.n / 10_000), drain_seconds=10.0)

    record = RunRecord("bench.py", argv)
    kinds = KINDS[:2] if args.no_python_path else KINDS
    t_start = time.monotonic()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="streamdb-bench-") as tmp:
        cfg.workdir = Path(tmp)
        servers = {}
        try:
            for kind in kinds:
                servers[kind] = Server(kind, cfg.workdir).start()
            cores = "StreamDB's core: " + ", ".join(
                f"{COLUMN[kind]} reports `streamdb_core:{srv.core()}`"
                for kind, srv in servers.items() if kind != "redis") + "."
            for i, name in enumerate(names):
                progress(f"[{i + 1}/{len(names)}] {name}")
                rows.extend(WORKLOADS[name](servers, cfg))
        finally:
            for srv in servers.values():
                srv.stop()
    progress(f"done in {time.monotonic() - t_start:.0f} s", done=True)
    record.publish(writes, f"median of {cfg.rounds} alternating round(s) per server", cores,
                   results_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
