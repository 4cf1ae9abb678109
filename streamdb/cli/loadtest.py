"""Load test: many connections, blocked consumer groups, producers at full speed.

Starts a redis-server 7.0 and a StreamDB on free loopback ports (both without
persistence), runs the same workload against each and prints a side-by-side
table.  The workload, in one asyncio process with raw sockets and hiredis:

* ``--connections`` connections in all (default 1000): the consumers, the
  producers, and idle clients that PING once a second;
* ``--consumers`` consumers (default 200) spread over ``--groups`` groups
  (default 20) on ``--streams`` streams, each looping XREADGROUP ... BLOCK and
  acking most of what it gets (every tenth entry is left pending);
* ``--producers`` connections sending XADD back to back for ``--seconds``.

Afterwards the consumers drain what is left and the run is verified: every
acknowledged XADD id is in its stream (and nothing else is); no entry was
delivered to two consumers of one group (nothing claims, so any double
delivery is a bug); every delivered entry is either acked or in the group's
PEL, and the PEL holds nothing else; every group saw every entry.

The client shares the machine's cores with the server under test, so the
figures compare the two servers under the same client, not absolute limits.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import hiredis

from .procs import free_port, wait_until_ready
from ..protocol.request import encode_request as _resp

__all__ = ["Workload", "run_workload", "main"]


@dataclass
class Workload:
    connections: int = 1000
    consumers: int = 200
    groups: int = 20
    streams: int = 4
    producers: int = 50
    seconds: float = 30.0
    block_ms: int = 100
    count: int = 10
    drain_seconds: float = 30.0


@dataclass
class Result:
    xadds: int = 0
    seconds: float = 0.0
    latencies_ns: list = field(default_factory=list)
    delivered: int = 0
    acked: int = 0
    peak_rss_kb: int = 0
    problems: list = field(default_factory=list)

    @property
    def throughput(self) -> float:
        return self.xadds / self.seconds if self.seconds else 0.0

    def percentile_ms(self, p: float) -> float:
        if not self.latencies_ns:
            return 0.0
        lat = sorted(self.latencies_ns)
        return lat[min(len(lat) - 1, int(p / 100.0 * len(lat)))] / 1e6


class Conn:
    """One connection: send a command, await its reply (errors come back as values)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.parser = hiredis.Reader()

    @classmethod
    async def open(cls, port: int) -> "Conn":
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def call(self, *argv):
        self.writer.write(_resp(*argv))
        while True:
            reply = self.parser.gets()
            if reply is not False:
                return reply
            data = await self.reader.read(1 << 16)
            if not data:
                raise ConnectionError("server closed the connection")
            self.parser.feed(data)

    def close(self) -> None:
        self.writer.close()


def raise_fd_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        target = hard if hard == resource.RLIM_INFINITY else min(hard, max(needed, soft))
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        if target < needed:
            raise SystemExit(f"need {needed} file descriptors, the hard limit is {hard}")


def stream_name(i: int) -> bytes:
    return b"lt:%d" % i


def group_name(j: int) -> bytes:
    return b"g%d" % j


async def run_workload(port: int, w: Workload, pid: int | None = None) -> Result:
    """Run ``w`` against the server on ``port``; ``pid`` lets us read its peak RSS."""
    assert w.consumers + w.producers <= w.connections
    raise_fd_limit(w.connections + 64)
    res = Result()
    admin = await Conn.open(port)
    for i in range(w.streams):
        await admin.call(b"DEL", stream_name(i))
    for j in range(w.groups):
        await admin.call(b"XGROUP", b"CREATE", stream_name(j % w.streams), group_name(j), b"$", b"MKSTREAM")

    conns = []
    for _ in range(w.connections):
        conns.append(await Conn.open(port))
    consumers = conns[:w.consumers]
    producers = conns[w.consumers:w.consumers + w.producers]
    idle = conns[w.consumers + w.producers:]

    acked_ids: dict[bytes, list] = collections.defaultdict(list)      # stream -> XADD ids
    # (stream, group) -> [(id, consumer)], and the ids each group acked
    delivered: dict[tuple, list] = collections.defaultdict(list)
    acks: dict[tuple, set] = collections.defaultdict(set)
    producing = True
    consuming = True

    async def producer(n: int, c: Conn) -> None:
        stream = stream_name(n % w.streams)
        i = 0
        lat = res.latencies_ns
        ids = acked_ids[stream]
        while producing:
            t0 = time.perf_counter_ns()
            reply = await c.call(b"XADD", stream, b"*", b"producer", b"%d" % n, b"seq", b"%d" % i)
            lat.append(time.perf_counter_ns() - t0)
            if isinstance(reply, hiredis.ReplyError):
                res.problems.append(f"XADD failed: {reply}")
                return
            ids.append(reply)
            i += 1

    async def consumer(k: int, c: Conn) -> None:
        j = k % w.groups
        stream, group, name = stream_name(j % w.streams), group_name(j), b"c%d" % k
        got, mine = delivered[(stream, group)], acks[(stream, group)]
        while consuming:
            reply = await c.call(b"XREADGROUP", b"GROUP", group, name, b"COUNT", w.count,
                                 b"BLOCK", w.block_ms, b"STREAMS", stream, b">")
            if isinstance(reply, hiredis.ReplyError):
                res.problems.append(f"XREADGROUP failed: {reply}")
                return
            if not reply:
                continue
            entries = reply[0][1]
            to_ack = []
            for entry_id, _fields in entries:
                got.append((entry_id, name))
                if len(got) % 10:       # every tenth delivery of the group stays pending
                    to_ack.append(entry_id)
            if to_ack:
                n = await c.call(b"XACK", stream, group, *to_ack)
                if n != len(to_ack):
                    res.problems.append(f"XACK of {len(to_ack)} fresh entries returned {n}")
                mine.update(to_ack)

    async def idler(c: Conn) -> None:
        while consuming:
            if await c.call(b"PING") != b"PONG":
                res.problems.append("PING did not get PONG")
            await asyncio.sleep(1.0)

    consumer_tasks = [asyncio.create_task(consumer(k, c)) for k, c in enumerate(consumers)]
    idle_tasks = [asyncio.create_task(idler(c)) for c in idle]
    t0 = time.monotonic()
    producer_tasks = [asyncio.create_task(producer(n, c)) for n, c in enumerate(producers)]
    await asyncio.sleep(w.seconds)
    producing = False
    await asyncio.gather(*producer_tasks)
    res.seconds = time.monotonic() - t0
    res.xadds = sum(len(v) for v in acked_ids.values())

    # Drain: until every group has been handed every entry of its stream.
    totals = {s: len(v) for s, v in acked_ids.items()}
    deadline = time.monotonic() + w.drain_seconds
    while time.monotonic() < deadline:
        if all(len(delivered[(stream_name(j % w.streams), group_name(j))])
               >= totals.get(stream_name(j % w.streams), 0) for j in range(w.groups)):
            break
        await asyncio.sleep(0.05)
    consuming = False
    await asyncio.gather(*consumer_tasks, *idle_tasks)
    if pid is not None:
        res.peak_rss_kb = _vm_hwm_kb(pid)
    await verify(admin, w, acked_ids, delivered, acks, res)
    for c in conns:
        c.close()
    admin.close()
    return res


async def verify(admin: Conn, w: Workload, acked_ids, delivered, acks, res: Result) -> None:
    problems = res.problems
    for i in range(w.streams):
        stream = stream_name(i)
        present = []
        start = b"-"
        while True:
            page = await admin.call(b"XRANGE", stream, start, b"+", b"COUNT", 10000)
            present += [entry_id for entry_id, _ in page]
            if len(page) < 10000:
                break
            start = b"(" + page[-1][0]
        wanted = acked_ids.get(stream, [])
        missing = set(wanted) - set(present)
        if missing:
            problems.append(f"{stream.decode()}: {len(missing)} acknowledged XADD ids are missing")
        if len(present) != len(wanted):
            problems.append(f"{stream.decode()}: {len(present)} entries, {len(wanted)} acknowledged XADDs")
        for j in range(w.groups):
            if j % w.streams != i:
                continue
            group = group_name(j)
            got = delivered[(stream, group)]
            res.delivered += len(got)
            counts = collections.Counter(entry_id for entry_id, _ in got)
            twice = [entry_id for entry_id, n in counts.items() if n > 1]
            if twice:
                problems.append(f"{stream.decode()}/{group.decode()}: {len(twice)} entries delivered "
                                f"more than once (e.g. {twice[0].decode()})")
            if set(counts) != set(present):
                problems.append(f"{stream.decode()}/{group.decode()}: {len(set(present) - set(counts))} "
                                f"entries never delivered")
            pel = await admin.call(b"XPENDING", stream, group, b"-", b"+", max(1, len(got)))
            pel_ids = {row[0] for row in pel}
            acked = acks[(stream, group)]
            res.acked += len(acked)
            if pel_ids & acked:
                problems.append(f"{stream.decode()}/{group.decode()}: acked entries still pending")
            if pel_ids | acked != set(counts):
                problems.append(f"{stream.decode()}/{group.decode()}: delivered entries neither acked "
                                f"nor pending, or pending entries never delivered")


def _vm_hwm_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


# -- the servers -----------------------------------------------------------------------

def start_streamdb(data_dir: str, extra: list[str] | None = None) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "streamdb", "--port", str(port), "--dir", data_dir,
                             "--appendonly", "no", "--save", "", "--maxclients", "100000",
                             *(extra or [])],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until_ready(port, proc)
    return proc, port


def start_redis(data_dir: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", data_dir, "--maxclients", "100000"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until_ready(port, proc)
    return proc, port


def run_against(kind: str, w: Workload) -> Result:
    with tempfile.TemporaryDirectory(prefix=f"loadtest-{kind}-") as d:
        proc, port = (start_redis if kind == "redis" else start_streamdb)(d)
        try:
            return asyncio.run(run_workload(port, w, proc.pid))
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def table(results: dict[str, Result]) -> str:
    rows = [
        ("XADD throughput", "req/s", lambda r: r.throughput, "{:,.0f}"),
        ("XADD p50 latency", "ms", lambda r: r.percentile_ms(50), "{:.2f}"),
        ("XADD p99 latency", "ms", lambda r: r.percentile_ms(99), "{:.2f}"),
        ("XADD p99.9 latency", "ms", lambda r: r.percentile_ms(99.9), "{:.2f}"),
        ("server peak RSS", "MB", lambda r: r.peak_rss_kb / 1024, "{:.1f}"),
        ("entries delivered to groups", "", lambda r: r.delivered, "{:,}"),
        ("verification problems", "", lambda r: len(r.problems), "{}"),
    ]
    names = list(results)
    head = ["measure", "unit"] + [("Redis 7.0" if n == "redis" else "StreamDB") for n in names]
    if len(names) == 2:
        head.append("ratio")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, unit, get, fmt in rows:
        vals = [get(results[n]) for n in names]
        cells = [label, unit] + [fmt.format(v) for v in vals]
        if len(names) == 2:
            cells.append(f"{vals[1] / vals[0]:.2f}x" if vals[0] and unit else "")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="streamdb-loadtest", description=__doc__.split("\n\n")[0])
    d = Workload()
    ap.add_argument("--connections", type=int, default=d.connections)
    ap.add_argument("--consumers", type=int, default=d.consumers)
    ap.add_argument("--groups", type=int, default=d.groups)
    ap.add_argument("--streams", type=int, default=d.streams)
    ap.add_argument("--producers", type=int, default=d.producers)
    ap.add_argument("--seconds", type=float, default=d.seconds, help="producing time per server")
    ap.add_argument("--quick", action="store_true", help="about 20 s in all: 7 s of producing per server")
    ap.add_argument("--only", choices=["redis", "streamdb"], help="run against one server only")
    args = ap.parse_args(argv)
    w = Workload(connections=args.connections, consumers=args.consumers, groups=args.groups,
                 streams=args.streams, producers=args.producers,
                 seconds=7.0 if args.quick else args.seconds)
    kinds = [args.only] if args.only else ["redis", "streamdb"]
    print(f"workload: {w.connections} connections, {w.consumers} consumers in {w.groups} groups on "
          f"{w.streams} streams, {w.producers} producers for {w.seconds:g} s per server", flush=True)
    results = {}
    for kind in kinds:
        results[kind] = r = run_against(kind, w)
        print(f"{kind}: {r.xadds:,} XADDs in {r.seconds:.1f} s, {r.delivered:,} deliveries, "
              f"{len(r.problems)} problems", flush=True)
        for p in r.problems[:20]:
            print(f"  {kind}: {p}")
    print(table(results))
    return 1 if any(r.problems for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
