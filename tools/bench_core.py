"""What parsing a request and encoding a reply cost in-process, plain Python core
against compiled core (streamdb/protocol: request.py/reply.py against _resp.pyx).

    .venv/bin/python tools/bench_core.py [--instructions] [--requests N]

Prints, per workload, the time per operation (best of five rounds; the machine's
other load makes it noisy) and with ``--instructions`` the CPU instructions per
operation counted by callgrind (valgrind), which no other load disturbs: the
difference of two runs of different lengths, so start-up cost drops out.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from streamdb.protocol.request import encode_request  # noqa: E402 (after the path)

XADD = encode_request(b"XADD", b"s", b"*", b"f", b"v")
XADD_5_FIELDS = encode_request(b"XADD", b"stream", b"*",
                               *[b"field%d" % (i // 2) if i % 2 == 0 else b"value-%02d" % i
                                 for i in range(10)])
PING = b"*1\r\n$4\r\nPING\r\n"

# name -> (kind, what): "parse" feeds a batch of requests (one read), "encode" one reply.
WORKLOADS = {
    "parse PING": ("parse", (PING, 1)),
    "parse XADD": ("parse", (XADD, 1)),
    "parse XADD x16": ("parse", (XADD, 16)),
    "parse XADD 5 fields x16": ("parse", (XADD_5_FIELDS, 16)),
    "encode id (bulk)": ("encode", "b'1700000000000-0'"),
    "encode int": ("encode", "12345"),
    "encode OK": ("encode", "reply.OK"),
    "encode 10 entries": ("encode",
                          "[[b'1700000000000-%d' % i, [b'field', b'value', b'n', b'%d' % i]]"
                          " for i in range(10)]"),
    "encode map (RESP3)": ("encode", "reply.Map([(b'name', b'g'), (b'pending', 3),"
                                     " (b'last-delivered-id', b'1-1'), (b'lag', None)])"),
}

# One workload, ``n`` operations, run in a process of its own (so callgrind counts it).
SCRIPT = """
import gc, sys, time
from streamdb.protocol import reply, request
core, kind, what, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
if core == "compiled":
    from streamdb.protocol import _resp as impl
    Parser, encode = impl.RequestParser, impl.encode_reply
else:
    Parser, encode = request.RequestParser, reply.encode_reply
gc.disable()
start = time.perf_counter()
if kind == "parse":
    one, batch = eval(what)
    data, p = one * batch, Parser()
    for _ in range(n // batch):
        p.feed(data)
        while p.next_command() is not None:
            pass
else:
    value = eval(what)
    resp3 = "RESP3" in sys.argv[5]
    for _ in range(n):
        encode(value, resp3)
print(time.perf_counter() - start)
"""


def _args(core: str, name: str, n: int) -> list[str]:
    kind, what = WORKLOADS[name]
    return [sys.executable, "-c", SCRIPT, core, kind, repr(what) if kind == "parse" else what,
            str(n), name]


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def instructions(core: str, name: str) -> int:
    def count(n: int) -> int:
        out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                              *_args(core, name, n)], capture_output=True, text=True,
                             env=_env()).stderr
        return int(re.search(r"Collected : (\d+)", out).group(1))
    return (count(48000) - count(16000)) // 32000


def nanoseconds(core: str, name: str, n: int) -> float:
    """Best of five timed loops (each in a process of its own)."""
    runs = [float(subprocess.run(_args(core, name, n), check=True, env=_env(),
                                 capture_output=True, text=True).stdout) for _ in range(5)]
    return min(runs) / n * 1e9


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--instructions", action="store_true", help="count with callgrind too")
    ap.add_argument("--requests", type=int, default=400_000, help="operations per timed run")
    args = ap.parse_args()
    try:
        import streamdb.protocol._resp  # noqa: F401
    except ImportError as e:
        print(f"the compiled core is not built ({e}): pip install -e . builds it")
        return 1
    counting = args.instructions and shutil.which("valgrind") is not None
    if args.instructions and not counting:
        print("valgrind is not installed: no instruction counts")
    head = f"{'per operation':24}{'python ns':>11}{'compiled ns':>13}{'ratio':>7}"
    if counting:
        head += f"{'python instr':>14}{'compiled instr':>16}{'ratio':>7}"
    print(head)
    for name in WORKLOADS:
        py, cc = (nanoseconds(core, name, args.requests) for core in ("python", "compiled"))
        line = f"{name:24}{py:>11.0f}{cc:>13.0f}{py / cc if cc else 0:>7.1f}"
        if counting:
            ipy, icc = (instructions(core, name) for core in ("python", "compiled"))
            line += f"{ipy:>14}{icc:>16}{ipy / icc if icc else 0:>7.1f}"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
