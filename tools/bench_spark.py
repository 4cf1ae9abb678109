#!/usr/bin/env python3
"""Benchmark of the Spark data source against a plain redis-py loop.

    .venv/bin/python tools/bench_spark.py [--entries 2000000] [--repeat 3] [--quick]
        [--master local[2]] [--partitions P] [--batch B] [--rate 100000] [--stream-seconds 300]
        [--no-streaming] [--url redis://HOST:PORT]   (default: a fresh StreamDB on a free port)
        [--write [--docs-root DIR]]

Measures, on the same data (N entries of ``sensor <id> temperature <t> site <s>``):

  export (redis-py)   one XRANGE paging loop (COUNT --batch, redis-py's connection)
                      decoding the entries and writing them to Parquet with pyarrow
  export (Spark)      spark.read.format("streamdb") with --partitions ID ranges,
                      written to Parquet by Spark
  read (Spark)        the same read, counted (no output)
  sink (Spark)        df.write.format("streamdb") of N rows: pipelined XADD with
                      IDMP (exactly once), and with option idempotent=false
  streaming           a producer process adds --rate entries/s (paced every 10 ms,
                      XADD MAXLEN ~ N) for --stream-seconds while a streaming query
                      (readStream streamdb -> noop sink) follows; once a second the
                      micro-batch lag = newest entry's time - newest entry time the
                      query has committed.  First vs last minute: does it grow?

Every batch measure runs --repeat times; the table shows the median and the
range.  A second table splits the CPU of the median run per entry: the server,
Spark's JVM, the Python workers, this driver.  A last table holds the targets:
the sink with IDMP (exactly once) >= 100k entries/s, the Spark read >= 2x the
loop and >= 200k entries/s, the streaming lag bounded.  Session start-up and
Python worker start are warmed up and not timed.  Timings are printed, never
asserted; they depend on the machine and its load (the load average is printed).
``--quick``: 200k entries, one run, 45 s of streaming.  ``--write`` replaces the
``bench_spark.py`` section of docs/PERFORMANCE.md with the tables (see
tools/bench.py).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from bench import (PERFORMANCE_MD, RunRecord, add_write_options, markdown_table,  # noqa: E402
                   planned_writes)
from streamdb.spark.common import (RespConnection, connect, encode_command,  # noqa: E402
                                   parse_id, stream_state)
from streamdb.spark.session import local_session  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(tmp: str):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "streamdb", "--port", str(port), "--dir", tmp,
                             "--appendonly", "no", "--save", ""], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("StreamDB did not start")


def entry_command(key: bytes, i: int, trim: tuple = ()) -> bytes:
    return encode_command(b"XADD", key, *trim, b"*", b"sensor", b"%d" % (i % 1000), b"temperature",
                          b"%.1f" % (15 + (i % 200) / 10), b"site", b"site-%d" % (i % 7))


def load(client, key: str, n: int) -> None:
    client.delete(key)
    conn = RespConnection(client)
    step = 2000
    for a in range(0, n, step):
        b = min(a + step, n)
        conn.send(b"".join(entry_command(key.encode(), i) for i in range(a, b)))
        conn.replies(b - a)
    conn.close()


# ---------------------------------------------------------------------------
# CPU accounting (Linux /proc): who spent the CPU of one measure
# ---------------------------------------------------------------------------

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int):
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return int(rest[1]), (int(rest[11]) + int(rest[12])) / TICK   # ppid, utime+stime
    except OSError:
        return None


def _descendants(root: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = _stat(int(d))
            if st:
                kids.setdefault(st[0], []).append(int(d))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        for c in kids.get(p, []):
            out.append(c)
            todo.append(c)
    return out


class CpuMeter:
    """CPU seconds of the server, the JVM, its Python workers and this driver."""

    def __init__(self, server_pid, jvm_pid) -> None:
        self.server_pid, self.jvm_pid = server_pid, jvm_pid

    def sample(self) -> dict:
        out = {"driver": time.process_time()}
        if self.server_pid:
            out["server"] = (_stat(self.server_pid) or (0, 0.0))[1]
        if self.jvm_pid and os.path.isdir("/proc"):
            out["jvm"] = (_stat(self.jvm_pid) or (0, 0.0))[1]
            # Workers are forked per task set and may come and go; the ones alive
            # at both samples are counted (the daemon reuses them across tasks).
            out["workers"] = {p: (_stat(p) or (0, 0.0))[1] for p in _descendants(self.jvm_pid)}
        return out

    @staticmethod
    def diff(a: dict, b: dict) -> dict:
        d = {k: b[k] - a[k] for k in ("driver", "server", "jvm") if k in a and k in b}
        if "workers" in a:
            d["workers"] = sum(v - a["workers"].get(p, 0.0) for p, v in b["workers"].items())
        return d


def _jvm_pid(spark):
    try:
        return spark.sparkContext._gateway.proc.pid
    except AttributeError:
        return None


# ---------------------------------------------------------------------------
# The plain loop and the streaming producer
# ---------------------------------------------------------------------------


def plain_export(url: str, key: str, batch: int, out: str, fast: bool = False) -> int:
    """What one would write without Spark: page through XRANGE, decode, write Parquet.

    redis-py's own connection and reply parser (hiredis), one page at a time.
    ``fast``: build the Arrow batches with the data source's RowBuilder (the
    conversion the Spark tasks do), so the comparison is about parallelism.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql.types import LongType, MapType, StringType, StructField, StructType
    from streamdb.spark.common import Codec
    from streamdb.spark.rows import RowBuilder
    schema = pa.schema([("stream", pa.string()), ("id", pa.string()), ("ms", pa.int64()),
                        ("seq", pa.int64()), ("fields", pa.map_(pa.string(), pa.string()))])
    builder = RowBuilder(StructType([StructField("stream", StringType()), StructField("id", StringType()),
                                     StructField("ms", LongType()), StructField("seq", LongType()),
                                     StructField("fields", MapType(StringType(), StringType()))]),
                         Codec("utf-8"), False)
    client = connect(url)
    conn = client.connection_pool.get_connection()
    n = 0
    start = b"-"
    with pq.ParquetWriter(out, schema) as w:
        while True:
            conn.send_command("XRANGE", key, start, "+", "COUNT", batch)
            page = conn.read_response()
            if not page:
                break
            if fast:
                w.write_batch(builder.batch(key, page))
            else:
                ids = [e[0] for e in page]
                cols = [[key] * len(page), [i.decode() for i in ids],
                        [int(i.partition(b"-")[0]) for i in ids], [int(i.partition(b"-")[2]) for i in ids],
                        [list(zip((f.decode() for f in fv[0::2]), (v.decode() for v in fv[1::2])))
                         for _, fv in page]]
                w.write_batch(pa.RecordBatch.from_arrays(
                    [pa.array(c, type=f.type) for c, f in zip(cols, schema)], schema=schema))
            n += len(page)
            if len(page) < batch:
                break
            start = b"(" + page[-1][0]
    client.connection_pool.release(conn)
    client.close()
    return n


def produce(url: str, key: str, rate: float, seconds: float, retain: int, sent) -> None:
    """Add ``rate`` entries/s for ``seconds`` (paced every 10 ms, pre-encoded XADD pipelines).

    ``sent`` (a shared counter) is the number of XADDs acknowledged so far.
    """
    client = connect(url)
    conn = RespConnection(client)
    trim = (b"MAXLEN", b"~", b"%d" % retain)
    cmds = [entry_command(key.encode(), i, trim) for i in range(1000)]
    blob = b"".join(cmds) * 2
    offs = [0]
    for c in cmds * 2:
        offs.append(offs[-1] + len(c))
    view = memoryview(blob)
    t0 = time.monotonic()
    done = queued = 0
    outstanding = 0
    while True:
        now = time.monotonic() - t0
        if now >= seconds:
            break
        due = min(int(rate * now) - queued, 1000)
        if due <= 0:
            if outstanding:
                conn.replies(outstanding)
                done += outstanding
                outstanding = 0
                sent.value = done
            time.sleep(0.01 - (now % 0.01))
            continue
        s = queued % 1000
        conn.send(view[offs[s]:offs[s + due]])
        queued += due
        if outstanding:                 # one pipeline in flight while the next is sent
            conn.replies(outstanding)
            done += outstanding
            sent.value = done
        outstanding = due
    if outstanding:
        conn.replies(outstanding)
        done += outstanding
    sent.value = done
    conn.close()
    client.close()


def _committed_ms(query, key: str):
    p = query.lastProgress
    if not p or not p.get("sources"):
        return None
    end = p["sources"][0].get("endOffset")
    if isinstance(end, str):
        end = json.loads(end)
    if not end or key not in end:
        return None
    return parse_id(end[key])[0]


def producer_alone(url: str, client, seconds: float, retain: int) -> float:
    """Entries/s the producer reaches unpaced with nothing else running (the machine's
    ceiling for the streaming row)."""
    key = "bench:stream"
    client.delete(key)
    ctx = multiprocessing.get_context("spawn")
    sent = ctx.Value("q", 0)
    p = ctx.Process(target=produce, args=(url, key, 1e9, seconds, retain, sent), daemon=True)
    t0 = time.perf_counter()
    p.start()
    p.join()
    rate = sent.value / (time.perf_counter() - t0 - 0.5)   # about 0.5 s to spawn and connect
    client.delete(key)
    return rate


def streaming_lag(spark, url: str, client, rate: float, seconds: float, retain: int, window: float,
                  tmp: str, partitions: int, meter: "CpuMeter") -> dict:
    """Run the producer against a streaming query; sample the micro-batch lag once a second."""
    key = "bench:stream"
    client.delete(key)
    client.execute_command("XADD", key, "*", "start", "1")
    query = (spark.readStream.format("streamdb").option("url", url).option("streams", key)
             .option("startingOffsets", "latest").option("failOnDataLoss", "false")
             .option("partitionsPerStream", partitions).load()
             .writeStream.format("noop").option("checkpointLocation", os.path.join(tmp, "ckpt"))
             .trigger(processingTime="0 seconds").start())
    deadline = time.time() + 120
    while query.lastProgress is None and time.time() < deadline:
        time.sleep(0.2)
    ctx = multiprocessing.get_context("spawn")
    sent = ctx.Value("q", 0)
    producer = ctx.Process(target=produce, args=(url, key, rate, seconds, retain, sent), daemon=True)
    added0 = stream_state(client, key.encode())["entries_added"]
    t0 = time.time()
    cpu0 = meter.sample()
    producer.start()
    prod_cpu = 0.0
    samples = []      # (seconds since start, lag ms, entries produced so far, rows read so far)
    seen_batches: dict = {}
    try:
        while producer.is_alive() or not samples:
            time.sleep(1.0 - (time.time() - t0) % 1.0)
            st = stream_state(client, key.encode())
            last_ms = st["last_generated"][0]
            committed = _committed_ms(query, key)
            for p in query.recentProgress:
                seen_batches[p["batchId"]] = p["numInputRows"]
            if query.exception() is not None:
                raise RuntimeError(f"the streaming query failed: {query.exception()}")
            if committed is not None:
                samples.append((time.time() - t0, max(last_ms - committed, 0),
                                st["entries_added"] - added0, sum(seen_batches.values())))
            prod_cpu = (_stat(producer.pid) or (0, prod_cpu))[1] if producer.pid else 0.0
    finally:
        cpu = CpuMeter.diff(cpu0, meter.sample())
        cpu["producer"] = prod_cpu
        producer.join(30)
        query.stop()
    elapsed = samples[-1][0]

    def win(lo, hi):
        s = [x for x in samples if lo <= x[0] < hi]
        if len(s) < 2:
            return None
        lags = [x[1] for x in s]
        dt = s[-1][0] - s[0][0]
        return {"median": statistics.median(lags), "max": max(lags),
                "produced": (s[-1][2] - s[0][2]) / dt if dt else 0.0,
                "read": (s[-1][3] - s[0][3]) / dt if dt else 0.0}

    first, last = win(0, window), win(elapsed - window, elapsed + 1)
    # Least-squares slope of the lag over the whole run (ms of lag per minute).
    xs, ys = [x[0] for x in samples], [x[1] for x in samples]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs) or 1.0
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den * 60
    grows = last["median"] > 2 * first["median"] + 250 or slope > 250
    client.delete(key)
    n = samples[-1][2] or 1
    return {"first": first, "last": last, "slope": slope, "grows": grows, "elapsed": elapsed,
            "batches": len(seen_batches), "cpu_us": {k: v / n * 1e6 for k, v in cpu.items()},
            "cores": {k: v / elapsed for k, v in cpu.items()}}


# ---------------------------------------------------------------------------


def run_batch_measures(measure, reader, url, key, tmp, client, spark, a) -> None:
    measure("export to Parquet, redis-py XRANGE loop",
            lambda: plain_export(url, key, a.batch, os.path.join(tmp, "plain.parquet")))
    measure("same loop, with the source's Arrow builder",
            lambda: plain_export(url, key, a.batch, os.path.join(tmp, "plain2.parquet"), fast=True))
    out = os.path.join(tmp, "spark.parquet")
    measure(f"export to Parquet, Spark {a.master}, {a.partitions} partitions",
            lambda: reader().load().write.mode("overwrite").parquet(out),
            count=lambda: spark.read.parquet(out).count())
    measure(f"read + count, Spark {a.master}", lambda: reader().load().count())

    src = spark.read.parquet(out).select("fields").cache()
    src.count()
    for label, opts in (("sink, XADD IDMP (exactly once)", {}),
                        ("sink, plain XADD (idempotent=false)", {"idempotent": "false"})):
        def sink(opts=opts):
            client.delete("bench:sink")
            w = src.write.format("streamdb").option("url", url).option("stream", "bench:sink") \
                .option("batchSize", a.sink_batch).mode("append")
            for k, v in opts.items():
                w = w.option(k, v)
            w.save()
        measure(f"{label}, Spark {a.master}", sink, count=lambda: client.xlen("bench:sink"))
    client.delete("bench:sink")
    src.unpersist()


def targets_table(rates: dict, lag: dict | None) -> str:
    """The targets, PASS/FAIL: the sink with IDMP, the Spark read against the loop, the
    streaming lag."""
    def rate(prefix: str) -> float | None:
        return next((r for label, r in rates.items() if label.startswith(prefix)), None)

    def verdict(ok: bool | None) -> str:
        return "n/a" if ok is None else "PASS" if ok else "FAIL"
    sink, read, loop = rate("sink, XADD IDMP"), rate("read + count"), rate("export to Parquet, redis-py")
    body = [["sink, XADD IDMP (exactly once)", "-" if sink is None else f"{sink:,.0f} entries/s",
             ">= 100,000 entries/s", verdict(None if sink is None else sink >= 100_000)]]
    read_ok = None if read is None or loop is None else read >= 2 * loop and read >= 200_000
    body.append(["read + count, Spark", "-" if read_ok is None else
                 f"{read:,.0f} entries/s, {read / loop:.2f}x the loop",
                 ">= 2x the redis-py loop and >= 200,000 entries/s", verdict(read_ok)])
    if lag:
        body.append(["streaming lag", f"{lag['slope']:+.0f} ms/min", "bounded",
                     verdict(not lag["grows"])])
    return markdown_table(["measure", "measured", "target", "result"], body)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--entries", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each batch measure (median shown)")
    ap.add_argument("--quick", action="store_true", help="200k entries, 1 run, 45 s of streaming")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--partitions", type=int, default=4, help="partitionsPerStream")
    ap.add_argument("--batch", type=int, default=2000, help="XRANGE COUNT per page (both readers)")
    ap.add_argument("--sink-batch", type=int, default=1000, help="the sink's batchSize")
    ap.add_argument("--rate", type=float, default=100_000, help="streaming: entries/s produced")
    ap.add_argument("--stream-seconds", type=float, default=300)
    ap.add_argument("--no-streaming", action="store_true")
    ap.add_argument("--no-batch", action="store_true", help="the streaming row only")
    ap.add_argument("--url", help="an existing server (its keys bench:* are overwritten)")
    add_write_options(ap, "the bench_spark.py section of docs/PERFORMANCE.md")
    a = ap.parse_args(argv)
    writes = planned_writes(ap, a, {"bench_spark.py": PERFORMANCE_MD})
    record = RunRecord("bench_spark.py", argv)
    if a.quick:
        a.entries = min(a.entries, 200_000)
        a.repeat = 1
        a.stream_seconds = min(a.stream_seconds, 45)
    window = min(60.0, a.stream_seconds / 3)

    tmp = tempfile.mkdtemp(prefix="bench-spark-")
    proc = None
    try:
        if a.url:
            url = a.url
        else:
            proc, port = start_server(os.path.join(tmp, "data"))
            url = f"redis://127.0.0.1:{port}"
        key = "bench:spark"
        client = connect(url)
        t0 = time.perf_counter()
        load(client, key, 1 if a.no_batch else a.entries)
        print(f"loaded {1 if a.no_batch else a.entries} entries in {time.perf_counter() - t0:.1f}s",
              file=sys.stderr)

        spark = local_session(a.master, "streamdb-bench")
        meter = CpuMeter(proc.pid if proc else None, _jvm_pid(spark))

        def reader():   # a DataFrameReader keeps its options: a fresh one each time
            return (spark.read.format("streamdb").option("url", url).option("streams", key)
                    .option("batchSize", a.batch).option("partitionsPerStream", a.partitions))
        # Warm up: Python workers, the Parquet writer, the sink (none of it timed).
        few = reader().option("endingOffsets", '{"%s": "1"}' % key).load()
        few.write.mode("overwrite").parquet(os.path.join(tmp, "warm.parquet"))
        few.select("fields").write.format("streamdb").option("url", url) \
            .option("stream", "bench:warm").mode("append").save()
        client.delete("bench:warm")
        rows, cpu_rows = [], []
        rates = {}          # label -> entries/s of the median run
        plain = None

        def measure(label, run, count=None):
            """Run ``run`` --repeat times; a table row with the median (and the CPU split)."""
            nonlocal plain
            runs = []
            for _ in range(a.repeat):
                before = meter.sample()
                t = time.perf_counter()
                n = run()
                dt = time.perf_counter() - t
                cpu = CpuMeter.diff(before, meter.sample())
                runs.append((dt, n if count is None else count(), cpu))
            runs.sort(key=lambda r: r[0])
            dt, n, cpu = runs[len(runs) // 2]
            if plain is None:
                plain = dt
            spread = f"{runs[0][0]:.2f}-{runs[-1][0]:.2f}" if len(runs) > 1 else ""
            rates[label] = n / dt
            rows.append([label, n, f"{dt:.2f}", spread, f"{n / dt:,.0f}",
                         f"{plain / dt:.2f}" if "sink" not in label else ""])
            us = lambda k: f"{cpu[k] / n * 1e6:.2f}" if k in cpu else "-"  # noqa: E731
            cpu_rows.append([label, us("server"), us("jvm"), us("workers"), us("driver"),
                             f"{sum(v for v in cpu.values()) / dt:.2f}"])

        if not a.no_batch:
            run_batch_measures(measure, reader, url, key, tmp, client, spark, a)
        load_after = os.getloadavg()

        lag = None
        if not a.no_streaming:
            # Retention: the batch data set's size, and at least 30 s of production.
            retain = max(a.entries, int(a.rate * 30))
            ceiling = producer_alone(url, client, min(10.0, a.stream_seconds / 3), retain)
            lag = streaming_lag(spark, url, client, min(a.rate, ceiling), a.stream_seconds, retain,
                                window, tmp, max(1, a.partitions // 2), meter)
        parts = []
        if rows:
            parts += [markdown_table(["measure", "entries", "seconds", "range", "entries/s",
                                      "vs redis-py loop"], [[str(c) for c in r] for r in rows]),
                      "CPU per entry (microseconds) in the median run; 'cores' = CPU seconds / "
                      "wall seconds:",
                      markdown_table(["measure", "server", "Spark JVM", "Python workers", "driver",
                                      "cores"], cpu_rows)]
        if lag:
            f, l_ = lag["first"], lag["last"]
            paced = min(a.rate, ceiling)
            parts += [f"Streaming: the producer alone (unpaced, nothing else running) reaches "
                      f"{ceiling:,.0f} entries/s; paced at {paced:,.0f}/s (asked: {a.rate:,.0f}/s) for "
                      f"{lag['elapsed']:.0f} s (XADD MAXLEN ~ {retain}), readStream -> noop, "
                      f"{lag['batches']} micro-batches:",
                      markdown_table(["window", "produced/s", "read/s", "lag median ms", "lag max ms"],
                                     [[f"first {window:.0f} s", f"{f['produced']:,.0f}",
                                       f"{f['read']:,.0f}", f"{f['median']:.0f}", f"{f['max']:.0f}"],
                                      [f"last {window:.0f} s", f"{l_['produced']:,.0f}",
                                       f"{l_['read']:,.0f}", f"{l_['median']:.0f}",
                                       f"{l_['max']:.0f}"]]),
                      f"lag trend {lag['slope']:+.0f} ms/min: "
                      f"{'GROWS' if lag['grows'] else 'bounded'}; CPU per entry produced (us) / cores: "
                      + ", ".join(f"{k} {lag['cpu_us'][k]:.2f} / {lag['cores'][k]:.2f}"
                                  for k in ("server", "jvm", "workers", "producer", "driver")
                                  if k in lag["cpu_us"])]
            if f["produced"] < 0.95 * paced:
                parts.append(f"Note: with the query running the producer reached "
                             f"{f['produced']:,.0f}/s, below the {paced:,.0f}/s it was paced at.")
        parts.append(targets_table(rates, lag))
        record.publish(writes, f"{a.entries:,} entries, {a.master}, {a.partitions} partitions "
                               f"per stream, median of {a.repeat} run(s); load average "
                               f"{load_after[0]:.2f} after the batch measures", *parts)
        spark.stop()
        client.close()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
