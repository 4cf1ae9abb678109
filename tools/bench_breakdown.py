#!/usr/bin/env python3
"""Where a request's microseconds go: StreamDB and redis-server, side by side.

    .venv/bin/python tools/bench_breakdown.py [--workload NAME[,NAME...]] [--requests N]
        [--no-python-path] [--write [--docs-root DIR]]

For each workload and server: run redis-benchmark (50 clients) against it while
``perf record -e cpu-clock`` samples the server process, and read the process's CPU
time from /proc/<pid>/stat before and after.  CPU microseconds per request (user +
system) are split by the samples into parts of the request path (the kernel's
network work, the event loop, parsing and reply encoding, command execution, the
interpreter, memory management), so the figures of the two servers can be read part
by part.  Needs ``perf`` (linux-tools); without it only the totals are printed.

Workloads: xadd-p16 (XADD s * f v, -P 16), xadd-p1 (-P 1), ping-p1 (PING, -P 1),
xrange (XRANGE COUNT 10 on a 100k-entry stream, -P 1).

``--write`` replaces the ``bench_breakdown.py`` section of docs/PERFORMANCE.md.
Timings are never asserted.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import (COLUMN, PERFORMANCE_MD, RunRecord, Server, add_write_options,  # noqa: E402
                   markdown_table, planned_writes, preload, progress, redis_benchmark)

CLIENTS = 50
# name -> (pipeline, redis-benchmark command, entries preloaded into "s")
WORKLOADS = {
    "xadd-p16": (16, ["XADD", "s", "*", "f", "v"], 0),
    "xadd-p1": (1, ["XADD", "s", "*", "f", "v"], 0),
    "ping-p1": (1, ["PING"], 0),
    "xrange": (1, ["XRANGE", "s", "-", "+", "COUNT", "10"], 100_000),
}

# The parts of the request path, in the order the table shows them, and how a
# perf sample (shared object, symbol) is assigned to one: the first rule that
# matches.  Redis's functions are named by what they do; StreamDB's compiled
# modules are shared objects of their own (perf names them by file name: core.cpython-
# 311-*.so is server/core.py's build), its interpreted code runs in libpython.
PARTS = ["kernel (network syscalls, scheduling)", "event loop", "parse + reply encoding",
         "dispatch", "command (stream code)", "interpreter (Python code)",
         "memory (allocation, GC)", "other"]
RULES = [
    ("kernel (network syscalls, scheduling)", r"\[kernel|\[vdso\]", r""),
    ("memory (allocation, GC)", r"jemalloc", r""),
    ("memory (allocation, GC)", r"", r"malloc|free|zmalloc|zfree|_dealloc$|^gc_|_PyObject_GC|"
                                     r"PyObject_Malloc|PyObject_Free|pymalloc|tupledealloc|"
                                     r"list_dealloc|_Py_Dealloc|visit_|subtract_refs|move_unreachable"),
    ("event loop", r"uvloop|loop\.cpython|libuv", r""),
    ("event loop", r"redis", r"^ae|epoll|mstime|ustime|gettimeofday|clock_gettime|beforeSleep|"
                             r"whileBlockedCron|serverCron|handleClientsWithPendingWrites"),
    ("parse + reply encoding", r"_resp\.cpython|hiredis", r""),
    ("parse + reply encoding", r"redis", r"processMultibulkBuffer|processInputBuffer|"
                                         r"readQueryFromClient|string2ll|addReply|_addReply|"
                                         r"writeToClient|_writeToClient|createStringObject|"
                                         r"sdscat|sdsnew|sdsMakeRoom|prepareClientToWrite|"
                                         r"resetClient|freeClientArgv|decrRefCount|incrRefCount|ll2string|"
                                         r"createEmbeddedStringObject|listNext|listRewind"),
    ("dispatch", r"^(core|client|context|registry|observe)\.cpython", r""),
    ("dispatch", r"redis", r"processCommand|^call$|lookupCommand|dictFind|strcasecmp|dictSdsKey|"
                           r"siphash|dictGenHash|updateCachedTime|commandCheck|"
                           r"propagate|alsoPropagate|lookupKey|dbFind|signalKeyAsReady|"
                           r"expireIfNeeded|checkType|CommandFilters|rewriteClientCommand|"
                           r"LRU_CLOCK|hdr_record|getExpire"),
    ("command (stream code)", r"^(ids|stream|streams|sortedids|groups|lag|keyspace|args)"
                              r"\.cpython", r""),
    ("command (stream code)", r"redis", r"^x|^stream|^lp|^rax|^listpack|streamID|"
                                        r"streamAppend|streamIterator"),
    ("interpreter (Python code)", r"python|libpython", r""),
]


def part_of(dso: str, symbol: str) -> str:
    for part, dso_re, sym_re in RULES:
        if dso_re and not re.search(dso_re, dso):
            continue
        if sym_re and not re.search(sym_re, symbol):
            continue
        return part
    return "other"


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of ``pid`` so far (/proc/<pid>/stat fields 14, 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def perf_parts(data: Path) -> dict[str, float]:
    """Share of the samples per part (fractions summing to 1), from ``perf report``."""
    out = subprocess.run(["perf", "report", "-i", str(data), "--no-children", "--stdio",
                          "--sort", "dso,symbol", "-F", "overhead,dso,symbol"],
                         capture_output=True, text=True, timeout=300).stdout
    shares = dict.fromkeys(PARTS, 0.0)
    for line in out.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(\S+)\s+\[.\]\s+(\S+)", line)
        if m:
            shares[part_of(m.group(2), m.group(3))] += float(m.group(1)) / 100
    total = sum(shares.values()) or 1.0
    return {k: v / total for k, v in shares.items()}


def measure(srv: Server, workload: str, requests: int, workdir: Path) -> dict:
    pipeline, command, entries = WORKLOADS[workload]
    if entries:
        preload(srv.port, b"s", entries, label=f"{COLUMN[srv.kind]} {workload}")
    pid = srv.proc.pid
    perf = None
    data = workdir / f"{srv.kind}-{workload}.perf"
    if shutil.which("perf"):
        perf = subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-F", "1999",
                                 "-p", str(pid), "-o", str(data)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)        # perf attached before the first request
    user0, sys0 = cpu_seconds(pid)
    res = redis_benchmark(srv.port, CLIENTS, requests, pipeline, *command)
    user1, sys1 = cpu_seconds(pid)
    shares = None
    if perf is not None:
        perf.send_signal(2)    # SIGINT: perf writes its data and exits
        perf.wait(60)
        shares = perf_parts(data)
    us = 1e6 / requests
    return {"rps": res["rps"], "user": (user1 - user0) * us, "sys": (sys1 - sys0) * us,
            "shares": shares}


def table(workload: str, results: dict) -> str:
    kinds = list(results)
    head = ["CPU us per request"] + [COLUMN[k] for k in kinds]
    body = [["requests/s"] + [f"{results[k]['rps']:,.0f}" for k in kinds],
            ["total (user + system)"] + [f"{results[k]['user'] + results[k]['sys']:.2f}"
                                         for k in kinds],
            ["  user / system"] + [f"{results[k]['user']:.2f} / {results[k]['sys']:.2f}"
                                   for k in kinds]]
    if all(results[k]["shares"] for k in kinds):
        for part in PARTS:
            cells = []
            for k in kinds:
                total = results[k]["user"] + results[k]["sys"]
                share = results[k]["shares"][part]
                cells.append(f"{share * total:.2f} ({share:.0%})")
            body.append([f"  {part}"] + cells)
    pipeline, command, _ = WORKLOADS[workload]
    return (f"**{workload}**: `{' '.join(command)}`, {CLIENTS} clients, -P {pipeline}\n\n"
            + markdown_table(head, body))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="xadd-p16,xadd-p1,ping-p1,xrange",
                    help="comma-separated: " + ",".join(WORKLOADS))
    ap.add_argument("--requests", type=int, default=500_000,
                    help="requests per run (default 500000; -P 1 runs use a fifth)")
    ap.add_argument("--no-python-path", action="store_true",
                    help="leave out the server with STREAMDB_PURE=1")
    add_write_options(ap, "the bench_breakdown.py section of docs/PERFORMANCE.md")
    args = ap.parse_args(argv)
    workloads = [w for w in args.workload.split(",") if w]
    for w in workloads:
        if w not in WORKLOADS:
            ap.error(f"unknown workload {w!r} (known: {', '.join(WORKLOADS)})")
    writes = planned_writes(ap, args, {"bench_breakdown.py": PERFORMANCE_MD})
    record = RunRecord("bench_breakdown.py", argv)
    kinds = ["redis", "streamdb"] + ([] if args.no_python_path else ["streamdb-py"])
    parts = []
    with tempfile.TemporaryDirectory(prefix="streamdb-breakdown-") as tmp:
        workdir = Path(tmp)
        for workload in workloads:
            n = args.requests if WORKLOADS[workload][0] > 1 else args.requests // 5
            results = {}
            for kind in kinds:
                srv = Server(kind, workdir).start()
                try:
                    progress(f"{workload}: {COLUMN[kind]}, {n:,} requests")
                    results[kind] = measure(srv, workload, n, workdir)
                finally:
                    srv.stop()
            parts.append(table(workload, results))
            progress(f"{workload}: done", done=True)
    record.publish(writes, "CPU time of the server process per request (/proc/<pid>/stat), "
                   "split by `perf record -e cpu-clock` samples of it into parts of the "
                   "request path; the benchmark client runs on the same CPUs", *parts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
