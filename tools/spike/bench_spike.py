#!/usr/bin/env python3
"""The compiled-core spike: how much of Redis's speed a compiled request core gets back.

    .venv/bin/pip install cython mypy      # build tools of the spike (not of the server)
    .venv/bin/python tools/spike/bench_spike.py [--rounds 3] [--instructions]

It builds three flavours of one small request core (parse RESP, look the command
up, XADD/PING/XLEN on an in-memory stream, encode the reply and the XADD effect):

  twin        core_pure_mode.py run as plain Python (the readable specification)
  cy-pure     the same file compiled by Cython (pure-Python mode)
  mypyc       the same file with plain annotations, compiled by mypyc
  cy-pyx      core_pyx.pyx: typed C buffers, compiled connection protocol too

then runs redis-benchmark (50 clients) against redis-server, each flavour's spike
server (server.py) and today's StreamDB, alternating rounds, and prints per
workload: requests/s and the ratio to Redis, the server's CPU time per request
(utime+stime from /proc, steadier than throughput on a busy machine) and p99.
``--instructions`` also counts CPU instructions per request in-process with
callgrind (valgrind), which no other load on the machine disturbs.

This is the evidence behind the choice of a Cython .pyx hot core; it goes when
the real compiled core replaces it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))
from streamdb.tools.procs import free_port, wait_until_ready  # noqa: E402

PY = sys.executable
WORKLOADS = {
    "XADD -P 1": (200_000, 1, ["XADD", "s", "*", "f", "v"]),
    "XADD -P 16": (1_000_000, 16, ["XADD", "s", "*", "f", "v"]),
    "PING -P 1": (200_000, 1, ["PING"]),
}
# Cython's annotations of core_pure_mode.py and their plain-Python spelling for mypyc.
MYPYC_SPELLING = [(r"^import cython\n", ""), (r"^\s*@cython\.(cclass|ccall)\n", ""),
                  (r"cython\.Py_ssize_t|cython\.ulonglong", "int"), (r"cython\.bint", "bool"),
                  (r"(\w+) = cython\.declare\(list, visibility=\"public\"\)", r"\1: list"),
                  (r"cython\.cast\(object, ([\w.]+)\)", r"\1")]


def build(tmp: Path) -> dict[str, tuple[str, str, list[str]]]:
    """Build the flavours into ``tmp``; returns name -> (module dir, module, server flags)."""
    flavours = {"twin": (str(HERE), "core_pure_mode", [])}
    for name, source, tool in [("cy-pure", "core_pure_mode.py", "cython"),
                               ("cy-pyx", "core_pyx.pyx", "cython"),
                               ("mypyc", "core_mypyc.py", "mypyc")]:
        d = tmp / name
        d.mkdir()
        if name == "mypyc":
            text = (HERE / "core_pure_mode.py").read_text()
            for pattern, repl in MYPYC_SPELLING:
                text = re.sub(pattern, repl, text, flags=re.M)
            (d / source).write_text(text)
            cmd = [str(Path(PY).parent / "mypyc"), source]
        else:
            shutil.copy(HERE / source, d / source)
            cmd = [PY, "-c", "from setuptools import setup; from Cython.Build import cythonize; "
                   f"setup(ext_modules=cythonize({source!r}, compiler_directives="
                   "{'language_level': 3, 'boundscheck': False, 'wraparound': False}))",
                   "build_ext", "--inplace"]
        print(f"building {name} ...", file=sys.stderr, flush=True)
        subprocess.run(cmd, cwd=d, check=True, capture_output=True)
        flags = ["--compiled-conn"] if name == "cy-pyx" else []
        flavours[name] = (str(d), Path(source).stem, flags)
    return flavours


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start(name: str, flavours: dict, tmp: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    data = tmp / f"data-{name}"
    data.mkdir()
    if name == "redis":
        cmd = ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no",
               "--dir", str(data)]
    elif name == "streamdb":
        cmd = [PY, "-m", "streamdb", "--port", str(port), "--appendonly", "no", "--save", "",
               "--dir", str(data)]
    else:
        module_dir, module, flags = flavours[name]
        cmd = [PY, str(HERE / "server.py"), str(port), module_dir, module, *flags]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until_ready(port, proc)
    return proc, port


def redis_benchmark(proc: subprocess.Popen, port: int, n: int, pipeline: int,
                    command: list[str]) -> tuple[float, float, float]:
    """(requests/s, p99 ms, server CPU us per request) of one redis-benchmark run."""
    before = cpu_seconds(proc.pid)
    out = subprocess.run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", "50",
                          "-n", str(n), "-P", str(pipeline), "--csv", *command],
                         capture_output=True, text=True, timeout=600, check=True).stdout
    lines = [ln for ln in out.splitlines() if ln.startswith('"')]
    row = dict(zip([h.strip('"') for h in lines[0].split('","')],
                   [v.strip('"') for v in lines[-1].split('","')]))
    return (float(row["rps"]), float(row["p99_latency_ms"]),
            (cpu_seconds(proc.pid) - before) / n * 1e6)


def instructions(flavours: dict) -> None:
    """Instructions per request in-process, from two callgrind runs of different lengths."""
    if not shutil.which("valgrind"):
        print("valgrind is not installed: no instruction counts")
        return
    script = ("import gc, sys; sys.path.insert(0, sys.argv[1]); m = __import__(sys.argv[2]); "
              "gc.disable(); one = bytes.fromhex(sys.argv[3]); batch = int(sys.argv[4]); "
              "core = m.Core(False); p = m.Parser(); data = one * batch\n"
              "for i in range(int(sys.argv[5]) // batch): core.run(p, data, 1000 + i)")
    requests = {"XADD": b"*5\r\n$4\r\nXADD\r\n$1\r\ns\r\n$1\r\n*\r\n$1\r\nf\r\n$1\r\nv\r\n",
                "PING": b"*1\r\n$4\r\nPING\r\n"}

    def count(flavour, req, batch, n):
        module_dir, module, _ = flavours[flavour]
        out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                              PY, "-c", script, module_dir, module, req.hex(), str(batch),
                              str(n)], capture_output=True, text=True).stderr
        return int(re.search(r"Collected : (\d+)", out).group(1))

    print(f"\n{'instructions per request':26}" + "".join(f"{f:>10}" for f in flavours))
    for label, req in requests.items():
        for batch in (1, 16):
            cells = [(count(f, req, batch, 6000) - count(f, req, batch, 2000)) // 4000
                     for f in flavours]
            print(f"{label + f' batch {batch}':26}" + "".join(f"{c:>10}" for c in cells))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--instructions", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        flavours = build(Path(tmp))
        if args.instructions:
            instructions(flavours)
        names = ["redis", *flavours, "streamdb"]
        procs = {n: start(n, flavours, Path(tmp)) for n in names}
        results: dict = {(n, w): [] for n in names for w in WORKLOADS}
        try:
            for r in range(args.rounds):
                for w, (n, pipeline, command) in WORKLOADS.items():
                    for name in names:
                        print(f"round {r + 1}/{args.rounds}: {w} on {name}", file=sys.stderr,
                              flush=True)
                        proc, port = procs[name]
                        results[(name, w)].append(redis_benchmark(proc, port, n, pipeline, command))
        finally:
            for proc, _ in procs.values():
                proc.terminate()
                proc.wait()
    med = {k: [statistics.median(x[i] for x in v) for i in range(3)] for k, v in results.items()}
    print(f"\n{'median of ' + str(args.rounds) + ' rounds':22}" + "".join(f"{n:>16}" for n in names))
    for w in WORKLOADS:
        rps0, _, cpu0 = med[("redis", w)]
        print(f"{w:22}" + "".join(f"{med[(n, w)][0] / 1000:>9.0f}k {med[(n, w)][0] / rps0:4.2f}x"
                                  for n in names))
        print(f"{'  CPU us/request':22}" + "".join(f"{med[(n, w)][2]:>9.2f} {cpu0 / med[(n, w)][2]:5.2f}x"
                                                  for n in names))
        print(f"{'  p99 ms':22}" + "".join(f"{med[(n, w)][1]:>16.3f}" for n in names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
