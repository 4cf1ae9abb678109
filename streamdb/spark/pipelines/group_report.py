"""Consumer-group report: lag, pending entries and the oldest pending entry's age, per group.

    streamdb-spark group-report --url redis://127.0.0.1:6379 --streams '*' \
        [--out report.parquet] [--master local[2]]

Spark spreads the streams over its tasks (each task asks XINFO GROUPS and
XPENDING for its streams), so a keyspace with many thousands of streams is
reported in parallel; the result is printed as a table, worst lag first, and
optionally written to Parquet.  Columns: stream, group, consumers, pending,
lag (entries not yet delivered, as XINFO GROUPS reports it; empty when the
server cannot tell), last-delivered ID, oldest pending ID, its age (now minus the
ID's time) and idle time (since it was last delivered), in seconds.
"""

from __future__ import annotations

import argparse
import sys

from ..common import Codec, connect, expand_streams
from ..session import local_session, print_table

SCHEMA = ("stream string, group string, consumers long, pending long, lag long, "
          "last_delivered string, oldest_pending string, oldest_age_s double, oldest_idle_s double")


def report_rows(url: str, streams):
    """Rows of SCHEMA for some streams (runs inside a Spark task)."""
    from ..common import raw
    client = connect(url)
    try:
        sec, usec = raw(client, "TIME")
        now_ms = int(sec) * 1000 + int(usec) // 1000
        for s in streams:
            key = s.encode("utf-8")
            try:
                groups = raw(client, "XINFO", "GROUPS", key)
            except Exception:  # noqa: BLE001 - the stream went away meanwhile
                continue
            for g in groups:
                d = g if isinstance(g, dict) else dict(zip(g[0::2], g[1::2]))
                name = d[b"name"]
                oldest = raw(client, "XPENDING", key, name, "-", "+", 1)
                oid = age = idle = None
                if oldest:
                    oid = oldest[0][0].decode()
                    age = max(now_ms - int(oid.split("-")[0]), 0) / 1000.0
                    idle = int(oldest[0][2]) / 1000.0
                lag = d.get(b"lag")
                yield (s, name.decode("utf-8", "replace"), int(d.get(b"consumers", 0)),
                       int(d.get(b"pending", 0)), None if lag is None else int(lag),
                       d[b"last-delivered-id"].decode(), oid, age, idle)
    finally:
        client.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="streamdb-spark group-report", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("--url", default="redis://127.0.0.1:6379")
    ap.add_argument("--streams", default="*", help="comma list of stream keys or glob patterns")
    ap.add_argument("--out", help="also write the report as Parquet here")
    ap.add_argument("--master", default="local[2]")
    a = ap.parse_args(argv)
    client = connect(a.url)
    streams = expand_streams(client, a.streams, Codec("utf-8"))
    client.close()
    spark = local_session(a.master, "streamdb-group-report")
    url = a.url
    n = max(min(len(streams) // 200 + 1, spark.sparkContext.defaultParallelism * 4), 1)
    rdd = spark.sparkContext.parallelize(streams, n).mapPartitions(lambda it: report_rows(url, list(it)))
    df = spark.createDataFrame(rdd, SCHEMA)
    rows = df.orderBy(df.lag.desc_nulls_first(), df.pending.desc(), "stream", "group").collect()
    if a.out:
        df.write.mode("overwrite").parquet(a.out)
    print_table(["stream", "group", "consumers", "pending", "lag", "last delivered",
                 "oldest pending", "age s", "idle s"],
                [[r.stream, r.group, r.consumers, r.pending, r.lag, r.last_delivered,
                  r.oldest_pending, None if r.oldest_age_s is None else f"{r.oldest_age_s:.1f}",
                  None if r.oldest_idle_s is None else f"{r.oldest_idle_s:.1f}"] for r in rows])
    return 0


if __name__ == "__main__":
    sys.exit(main())
