#!/usr/bin/env python3
"""Benchmark of the Spark data source against a plain redis-py loop.

    .venv/bin/python tools/bench_spark.py [--entries N] [--master local[2]] [--partitions P]
        [--url redis://HOST:PORT]   (default: start a fresh StreamDB on a free loopback port)

Measures, on the same data (N entries of ``sensor <id> temperature <t> site <s>``):

  export (redis-py)   one XRANGE paging loop (COUNT --batch) decoding the entries
                      and writing them to Parquet with pyarrow
  export (Spark)      spark.read.format("streamdb") with --partitions ID ranges,
                      written to Parquet by Spark
  read (Spark)        the same read, counted (no output)
  sink (Spark)        df.write.format("streamdb") of N rows: pipelined XADD with
                      IDMP (exactly once), and with option idempotent=false

Prints one table (entries/s, and the Spark/redis-py ratio).  Session start-up
and Python worker start are warmed up and not timed.  Timings are printed,
never asserted; they depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from streamdb.spark.common import connect, xrange_pages  # noqa: E402
from streamdb.spark.session import local_session, print_table  # noqa: E402


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


def load(client, key: str, n: int) -> None:
    client.delete(key)
    p = client.pipeline(transaction=False)
    for i in range(n):
        p.execute_command("XADD", key, "*", "sensor", str(i % 1000), "temperature",
                          f"{15 + (i % 200) / 10:.1f}", "site", f"site-{i % 7}")
        if len(p) >= 2000:
            p.execute()
    p.execute()


def plain_export(url: str, key: str, batch: int, out: str, fast: bool = False) -> int:
    """What one would write without Spark: page through XRANGE, decode, write Parquet.

    ``fast``: build the Arrow batches with the data source's own RowBuilder (the
    same conversion the Spark tasks do), so the comparison is about parallelism.
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
    n = 0
    with pq.ParquetWriter(out, schema) as w:
        for page in xrange_pages(client, key.encode(), (0, 0), ((1 << 64) - 1, (1 << 64) - 1), batch):
            if fast:
                w.write_batch(builder.batch(key, page))
                n += len(page)
                continue
            ids = [e[0] for e in page]
            cols = [[key] * len(page), [i.decode() for i in ids],
                    [int(i.partition(b"-")[0]) for i in ids], [int(i.partition(b"-")[2]) for i in ids],
                    [list(zip((f.decode() for f in fv[0::2]), (v.decode() for v in fv[1::2])))
                     for _, fv in page]]
            w.write_batch(pa.RecordBatch.from_arrays([pa.array(c, type=f.type) for c, f in zip(cols, schema)],
                                                     schema=schema))
            n += len(page)
    client.close()
    return n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--entries", type=int, default=200_000)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--partitions", type=int, default=4, help="partitionsPerStream")
    ap.add_argument("--batch", type=int, default=2000, help="XRANGE COUNT per page")
    ap.add_argument("--url", help="an existing server (its key bench:spark is overwritten)")
    a = ap.parse_args(argv)

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
        load(client, key, a.entries)
        print(f"loaded {a.entries} entries in {time.perf_counter() - t0:.1f}s", file=sys.stderr)

        spark = local_session(a.master, "streamdb-bench")
        def reader():   # a DataFrameReader keeps its options: a fresh one each time
            return (spark.read.format("streamdb").option("url", url).option("streams", key)
                    .option("batchSize", a.batch).option("partitionsPerStream", a.partitions))
        # Warm up: Python workers, the Parquet writer, the sink (none of it timed).
        few = reader().option("endingOffsets", '{"%s": "1"}' % key).load()
        few.write.mode("overwrite").parquet(os.path.join(tmp, "warm.parquet"))
        few.select("fields").write.format("streamdb").option("url", url) \
            .option("stream", "bench:warm").mode("append").save()
        client.delete("bench:warm")
        rows = []

        t0 = time.perf_counter()
        n = plain_export(url, key, a.batch, os.path.join(tmp, "plain.parquet"))
        plain = time.perf_counter() - t0
        rows.append(["export to Parquet, redis-py XRANGE loop", n, f"{plain:.2f}", f"{n / plain:,.0f}", "1.00"])
        t0 = time.perf_counter()
        n = plain_export(url, key, a.batch, os.path.join(tmp, "plain2.parquet"), fast=True)
        dt = time.perf_counter() - t0
        rows.append(["same loop, with the source's Arrow builder", n, f"{dt:.2f}", f"{n / dt:,.0f}",
                     f"{plain / dt:.2f}"])

        t0 = time.perf_counter()
        reader().load().write.mode("overwrite").parquet(os.path.join(tmp, "spark.parquet"))
        dt = time.perf_counter() - t0
        n2 = spark.read.parquet(os.path.join(tmp, "spark.parquet")).count()
        rows.append([f"export to Parquet, Spark {a.master}, {a.partitions} partitions", n2, f"{dt:.2f}",
                     f"{n2 / dt:,.0f}", f"{plain / dt:.2f}"])

        t0 = time.perf_counter()
        n3 = reader().load().count()
        dt = time.perf_counter() - t0
        rows.append([f"read + count, Spark {a.master}", n3, f"{dt:.2f}", f"{n3 / dt:,.0f}", f"{plain / dt:.2f}"])

        src = spark.read.parquet(os.path.join(tmp, "spark.parquet")).select("fields").cache()
        src.count()
        for label, opts in (("sink, XADD IDMP (exactly once)", {}),
                            ("sink, plain XADD (idempotent=false)", {"idempotent": "false"})):
            client.delete("bench:sink")
            w = src.write.format("streamdb").option("url", url).option("stream", "bench:sink") \
                .option("batchSize", 1000).mode("append")
            for k, v in opts.items():
                w = w.option(k, v)
            t0 = time.perf_counter()
            w.save()
            dt = time.perf_counter() - t0
            written = client.xlen("bench:sink")
            rows.append([f"{label}, Spark {a.master}", written, f"{dt:.2f}", f"{written / dt:,.0f}", ""])
        client.delete("bench:sink")
        print(f"StreamDB Spark data source, {a.entries} entries, {os.cpu_count()} CPUs")
        print_table(["measure", "entries", "seconds", "entries/s", "vs redis-py loop"], rows)
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
