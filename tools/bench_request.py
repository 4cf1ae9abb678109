"""What one pipelined request costs the server's own objects, in-process: no sockets,
no event loop, no benchmark client sharing the CPUs.

    .venv/bin/python tools/bench_request.py [--instructions] [--requests N] [--reads R]
        [--pipeline P] [--appendfsync always|everysec|no] [--subscribers S [--pattern]]

The server is wired as ``python -m streamdb --appendonly no --save ''`` wires it
(__main__.serve: persistence with its changed-key tracker, replication, limits,
retention; the GC frozen and tuned after loading; with ``--appendfsync`` an AOF in a
temporary directory, fsynced as that policy says), and R connections with a fake
transport each get reads of P (16) ``XADD s * f v`` requests through
``Connection.data_received`` (the RequestLoop, Core.execute, the handler, the effect
sinks); a turn is R reads and then the loop's end of turn (``Server._end_of_turn``:
hooks, then each connection's write).  With ``--subscribers S`` (0 or more) the
requests are bench.py's PUBLISH (its CHANNEL and 32-byte PAYLOAD) instead, and S more
connections subscribe to that channel (with ``--pattern``, PSUBSCRIBE to a pattern that
matches it, as bench_fanout.py's pattern rows): each message is delivered to each of
them and written at the end of the turn.  Prints the time per request (the machine's other
load makes it noisy) and, with ``--instructions``, the instructions per request counted
by callgrind (valgrind): the difference of two runs of different lengths, so start-up
drops out.  Under callgrind the clock runs ~50x slower than the code, so a node spans
more milliseconds than under real load: the sealing of nodes whose ids are not
consecutive weighs more than it does in a server.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))
from bench import CHANNEL, PAYLOAD  # noqa: E402  (bench.py's PUBLISH rows' message)
from bench_fanout import PATTERN  # noqa: E402  (bench_fanout.py's pattern rows' pattern)


class _Handle:
    def cancel(self) -> None:
        pass


class _Loop:
    """The loop calls the server makes: call_soon queued for the end of the turn."""

    def __init__(self) -> None:
        self.soon: list = []

    def call_soon(self, callback, *args):
        self.soon.append((callback, args))

    def call_later(self, delay, callback, *args):
        return _Handle()

    def end_turn(self) -> None:
        soon, self.soon = self.soon, []
        for callback, args in soon:
            callback(*args)


class _Transport:
    """A socket that takes everything.  Its calls are C builtins, as uvloop's are: a
    Python method here would cost each delivery more than the server's own work."""

    def __init__(self) -> None:
        self.chunks = collections.deque(maxlen=1)       # (the last write: memory stays flat)
        self.write = self.chunks.append
        self.is_closing = False.__bool__
        self.get_write_buffer_size = (0).__int__

    @property
    def written(self) -> bool:
        return bool(self.chunks)

    def get_extra_info(self, name):
        return ("127.0.0.1", 6379)

    def close(self) -> None:
        pass


def run(requests: int, reads: int, pipeline: int = 16, appendfsync: str = "",
        subscribers: int = -1, pattern: bool = False) -> float:
    """Serve ``requests`` XADDs (PUBLISHes, to ``subscribers`` subscribers, when that is
    not negative); the seconds per request."""
    from streamdb import commands, replication  # noqa: F401  (fills the command table)
    from streamdb.__main__ import GC_THRESHOLDS
    from streamdb.commands import persistence, retention
    from streamdb.config import Config
    from streamdb.persistence.recovery import open_persistence
    from streamdb.protocol.request import encode_request
    from streamdb.server import limits
    from streamdb.server.core import Core
    from streamdb.server.network import Server

    cfg = Config()
    aof = ["--appendonly", "yes", "--appendfsync", appendfsync] if appendfsync else ["--appendonly", "no"]
    cfg.load_args([*aof, "--save", "", "--dir", tempfile.mkdtemp(), "--port", "0"])
    core = Core(cfg)
    server = Server(core)
    persistence.install(core)
    store = open_persistence(core, server, cfg)
    replication.install(core, server)
    limits.install(core, server)
    retention.install(core, server)
    asyncio.run(store.load(server))
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    loop = server.loop = _Loop()
    conns = []
    for _ in range(reads):
        conn = server._new_connection()
        conn.connection_made(_Transport())
        conns.append(conn)
    listeners = []
    for _ in range(max(subscribers, 0)):
        conn = server._new_connection()
        conn.connection_made(_Transport())
        conn.data_received(encode_request(b"PSUBSCRIBE", PATTERN) if pattern
                           else encode_request(b"SUBSCRIBE", CHANNEL))
        listeners.append(conn)
    loop.end_turn()
    if subscribers >= 0:
        data = encode_request(b"PUBLISH", CHANNEL, PAYLOAD) * pipeline
    else:
        data = encode_request(b"XADD", b"s", b"*", b"f", b"v") * pipeline
    turns = max(1, requests // (pipeline * reads))
    start = time.perf_counter()
    for _ in range(turns):
        for conn in conns:
            conn.data_received(data)
        loop.end_turn()
    elapsed = time.perf_counter() - start
    if not all(conn.transport.written for conn in conns + listeners):
        raise SystemExit("no replies (or messages) were written")
    return elapsed / (turns * pipeline * reads)


def instructions(reads: int, pipeline: int, appendfsync: str, subscribers: int,
                 pattern: bool) -> int:
    def count(n: int) -> int:
        out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                              sys.executable, __file__, "--run", str(n), "--reads", str(reads),
                              "--pipeline", str(pipeline), "--subscribers", str(subscribers),
                              *(["--pattern"] if pattern else []),
                              *(["--appendfsync", appendfsync] if appendfsync else [])],
                             capture_output=True, text=True,
                             # (a fixed hash seed: set and dict probe counts otherwise
                             # change from run to run by ~1% of a request's count)
                             env={**os.environ, "PYTHONHASHSEED": "0"}).stderr
        return int(re.search(r"Collected : (\d+)", out).group(1))
    return (count(192_000) - count(64_000)) // 128_000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--instructions", action="store_true", help="count with callgrind too")
    ap.add_argument("--requests", type=int, default=400_000, help="requests per timed run")
    ap.add_argument("--reads", type=int, default=4, help="reads (connections) per turn")
    ap.add_argument("--pipeline", type=int, default=16, help="requests per read")
    ap.add_argument("--appendfsync", choices=("always", "everysec", "no"), default="",
                    help="with an AOF fsynced so (default: no AOF)")
    ap.add_argument("--subscribers", type=int, default=-1,
                    help="PUBLISH to a channel with this many subscribers (0: none) instead of XADD")
    ap.add_argument("--pattern", action="store_true",
                    help="the subscribers PSUBSCRIBE to a pattern that matches the channel")
    ap.add_argument("--run", type=int, default=0, help=argparse.SUPPRESS)   # one counted run
    args = ap.parse_args()
    if args.run:
        run(args.run, args.reads, args.pipeline, args.appendfsync, args.subscribers, args.pattern)
        return 0
    from streamdb import compiled, protocol
    print(f"core: {' '.join(compiled.status(protocol.CORE, protocol.CORE_REASON))}")
    request = (f"PUBLISH to {args.subscribers} {'pattern ' if args.pattern else ''}subscribers"
               if args.subscribers >= 0 else "XADD")
    what = f"{request} -P{args.pipeline}, {args.reads} reads a turn" + \
        (f", appendfsync {args.appendfsync}" if args.appendfsync else "")
    best = min(run(args.requests, args.reads, args.pipeline, args.appendfsync, args.subscribers,
                   args.pattern) for _ in range(3))
    print(f"{what}, in-process: {best * 1e9:.0f} ns per request (best of 3)")
    if args.instructions:
        if shutil.which("valgrind") is None:
            print("valgrind is not installed: no instruction counts")
        else:
            print(f"{what}, in-process: "
                  f"{instructions(args.reads, args.pipeline, args.appendfsync, args.subscribers, args.pattern)} "
                  "instructions per request (callgrind)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
