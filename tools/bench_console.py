#!/usr/bin/env python3
"""The web console's pages: the stream list of a large keyspace, and browsing cold history.

    .venv/bin/python tools/bench_console.py [--streams N] [--entries M] [--pages P]
        [--write [--docs-root DIR]]

One StreamDB with ``console-port`` set and ``stream-cache-size 1mb`` holds N streams
(1,000) of 10 entries, each with a consumer group whose consumer holds 5 pending
entries, and one stream of M entries (10,000,000; loaded with redis-benchmark, then
snapshotted so that all but the last megabyte of it lives only on disk).  A logged-in
console client (http.client, one connection a request, as the console serves them)
then asks for pages; each time is a whole request, from sending it to its last byte.

Rows, with their targets (issue 31):

  streams    every page of the Streams page over the N streams (50 streams a page,
             followed by its "next page" link): the whole list, summed  <= 200 ms
  browse     P pages (100) of 20 entries of the M-entry stream, following the
             "newer" link from the first page (cold history read in order):
             the median page                                          <= 50 ms
  jump       P pages opened at a random time of the M-entry stream (each one most
             likely a node that is not in the cache): the median page <= 50 ms

Only StreamDB runs (Redis has no console): the rows are absolute limits.  Prints a
table; ``--write`` replaces the ``bench_console.py`` section of docs/PERFORMANCE.md
with it.  Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import html
import http.client
import random
import re
import statistics
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import PERFORMANCE_MD, Row, RunRecord, add_write_options, planned_writes, progress, results_table  # noqa: E402
from bench_cold import KEY, load, settle  # noqa: E402
from bench_metrics import build_keyspace  # noqa: E402
from bench_persistence import Proc  # noqa: E402
from streamdb.cli.procs import free_port  # noqa: E402

USER, PASSWORD = "bench", "bench-secret"
PAGE_ENTRIES = 20
CACHE = ("--stream-cache-size", "1mb")


class ConsoleClient:
    """A logged-in console session over plain HTTP."""

    def __init__(self, port: int) -> None:
        self.port = port
        status, headers, body = self._request("POST", "/login", urllib.parse.urlencode(
            {"user": USER, "password": PASSWORD}))
        if status != 303:
            raise RuntimeError(f"console login refused: {status} {body[:200]}")
        self.cookie = headers["set-cookie"].split(";", 1)[0]

    def _request(self, method: str, path: str, body: str | None = None,
                 cookie: str | None = None) -> tuple[int, dict, str]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        headers = {"Content-Type": "application/x-www-form-urlencoded"} if body else {}
        if cookie:
            headers["Cookie"] = cookie
        try:
            conn.request(method, path, body=body, headers=headers)
            resp_ = conn.getresponse()
            return resp_.status, {k.lower(): v for k, v in resp_.getheaders()}, resp_.read().decode()
        finally:
            conn.close()

    def get(self, path: str) -> tuple[float, str]:
        """(seconds, body) of one GET of ``path``, which must answer 200."""
        t0 = time.perf_counter()
        status, _, body = self._request("GET", path, cookie=self.cookie)
        took = time.perf_counter() - t0
        if status != 200:
            raise RuntimeError(f"GET {path}: {status} {body[:200]}")
        return took, body


def _link(body: str, ident: str) -> str | None:
    found = re.search(rf'<a id="{ident}" href="([^"]+)"', body)
    return html.unescape(found.group(1)) if found else None


def stream_list(client: ConsoleClient) -> tuple[float, int, int]:
    """(seconds, pages, streams listed) of the whole Streams page, page after page."""
    total, pages, listed = 0.0, 0, 0
    path: str | None = "/streams"
    while path:
        took, body = client.get(path)
        total += took
        pages += 1
        listed += body.count('<tr><td><a href="/stream?key=')
        path = _link(body, "next-page")
    return total, pages, listed


def browse(client: ConsoleClient, pages: int) -> list[float]:
    """Page times following "newer" from the stream's first page."""
    times = []
    path = f"/stream?key={KEY}&count={PAGE_ENTRIES}"
    for _ in range(pages):
        took, body = client.get(path)
        times.append(took)
        path = _link(body, "newer")
    return times


def jump(client: ConsoleClient, pages: int, first_ms: int, last_ms: int) -> list[float]:
    """Page times of pages opened at random times between the stream's first and last."""
    rng = random.Random(7)
    return [client.get(f"/stream?key={KEY}&count={PAGE_ENTRIES}&time={rng.randint(first_ms, last_ms)}")[0]
            for _ in range(pages)]


def measure(cfg) -> list[Row]:
    cport = free_port()
    srv = Proc("streamdb", cfg.workdir, "--console-port", str(cport), *CACHE).start()
    try:
        cfg.core = srv.info("server").get("streamdb_core", "?")     # compiled or Python path
        srv.call(b"ACL", b"SETUSER", USER.encode(), b"on", f">{PASSWORD}".encode(), b"~*", b"+@all")
        progress(f"building {cfg.streams:,} streams")
        build_keyspace(srv.port, cfg.streams, 1)
        load(srv, cfg.entries, "cold stream")
        settle(srv)
        first_ms, last_ms = (int(srv.call(command, KEY.encode(), start, end, b"COUNT", b"1")[0][0].split(b"-")[0])
                             for command, start, end in ((b"XRANGE", b"-", b"+"), (b"XREVRANGE", b"+", b"-")))
        client = ConsoleClient(cport)
        stream_list(client)                            # warm: first-time imports
        progress("the Streams page")
        lists = [stream_list(client) for _ in range(cfg.rounds)]
        progress("browsing the cold stream")
        browsed = browse(client, cfg.pages)
        jumped = jump(client, cfg.pages, first_ms, last_ms)
    finally:
        srv.stop()
    _, pages, listed = lists[0]
    list_ms = statistics.median(t for t, _, _ in lists) * 1000
    return [Row(f"Streams page: all {listed:,} streams ({pages} pages), median of {cfg.rounds}", "ms",
                None, list_ms, "limit<=", 200),
            Row("  (one page of the Streams page, mean, info)", "ms", None, list_ms / pages, "info", None),
            Row(f"{cfg.entries:,}-entry stream, 1 MB cache: {PAGE_ENTRIES}-entry pages read in order, "
                f"median of {cfg.pages}", "ms", None, statistics.median(browsed) * 1000, "limit<=", 50),
            Row("  (slowest page in order, info)", "ms", None, max(browsed) * 1000, "info", None),
            Row(f"  ... pages opened at a random time, median of {cfg.pages}", "ms", None,
                statistics.median(jumped) * 1000, "limit<=", 50),
            Row("  (slowest page at a random time, info)", "ms", None, max(jumped) * 1000, "info", None)]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--entries", type=int, default=10_000_000)
    ap.add_argument("--pages", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5, help="how often the Streams page is listed")
    add_write_options(ap, "the bench_console.py section of docs/PERFORMANCE.md")
    args = ap.parse_args(argv)
    writes = planned_writes(ap, args, {"bench_console.py": PERFORMANCE_MD})
    record = RunRecord("bench_console.py", argv)
    with tempfile.TemporaryDirectory(prefix="streamdb-cbench-") as tmp:
        args.workdir = Path(tmp)           # the options are the workload's settings
        rows = measure(args)
    progress("done", done=True)
    record.publish(writes, f"one server (its core: {args.core}), one console session, "
                   "one request at a time", results_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
