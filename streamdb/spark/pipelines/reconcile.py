"""Reconciliation: recompute per-key totals from the full stream and compare with the consumers' table.

    streamdb-spark reconcile --url redis://127.0.0.1:6379 --streams 'payments:*' \
        --key-field account --amount-field cents --table-prefix balance: [--out report.csv]

The nightly job of a unified-log design: the stream is the source of truth, the
online consumers keep a derived table (here: StreamDB string keys
``<table-prefix><key>`` holding integer totals, as ``INCRBY`` leaves them, or a CSV
file ``key,total`` with ``--table-csv``).  Spark sums ``--amount-field`` per
``--key-field`` over every entry, joins with the table and prints the keys that
differ (missing on either side counts as 0).  Exit status 0 when everything
matches, 1 when some key differs.

With ``--upto-group GROUP`` only entries the consumer group has acknowledged are
counted (entries up to its last-delivered ID, minus its pending entries), which
is what a consumer that applies on acknowledgement holds.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from decimal import Decimal

from ..common import Codec, connect, expand_streams, raw
from ..session import local_session, print_table


def table_from_server(client, prefix: str) -> dict[str, Decimal]:
    keys, cursor = [], b"0"
    pat = prefix.replace("\\", "\\\\").replace("*", "\\*").replace("?", "\\?").replace("[", "\\[") + "*"
    while True:
        cursor, batch = raw(client, "SCAN", cursor, "MATCH", pat, "COUNT", 1000, "TYPE", "string")
        keys += batch
        if cursor in (b"0", 0):
            break
    out = {}
    for i in range(0, len(keys), 500):
        chunk = keys[i:i + 500]
        for k, v in zip(chunk, raw(client, "MGET", *chunk)):
            if v is not None:
                out[k.decode("utf-8", "replace")[len(prefix):]] = Decimal(v.decode())
    return out


def table_from_csv(path: str) -> dict[str, Decimal]:
    with open(path, newline="", encoding="utf-8") as f:
        return {row[0]: Decimal(row[1]) for row in csv.reader(f) if row and row[0] != "key"}


def acked_ranges(client, codec, streams, group):
    """{stream: last-delivered id} and the pending ids to leave out, for --upto-group."""
    ends, pending = {}, set()
    for s in streams:
        key = codec.encode(s)
        for g in raw(client, "XINFO", "GROUPS", key):
            d = g if isinstance(g, dict) else dict(zip(g[0::2], g[1::2]))
            if d[b"name"].decode() == group:
                ends[s] = d[b"last-delivered-id"].decode()
                start = "-"
                while True:
                    page = raw(client, "XPENDING", key, group, start, "+", 1000)
                    pending.update((s, p[0].decode()) for p in page)
                    if len(page) < 1000:
                        break
                    start = "(" + page[-1][0].decode()
    return ends, pending


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="streamdb-spark reconcile", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("--url", default="redis://127.0.0.1:6379")
    ap.add_argument("--streams", required=True)
    ap.add_argument("--key-field", required=True)
    ap.add_argument("--amount-field", required=True)
    t = ap.add_mutually_exclusive_group(required=True)
    t.add_argument("--table-prefix", help="consumer table: string keys <prefix><key>")
    t.add_argument("--table-csv", help="consumer table: CSV file key,total")
    ap.add_argument("--upto-group", help="count only what this consumer group acknowledged")
    ap.add_argument("--out", help="write every key's comparison to this CSV file")
    ap.add_argument("--partitions-per-stream", type=int, default=2)
    ap.add_argument("--master", default="local[2]")
    a = ap.parse_args(argv)

    client = connect(a.url)
    codec = Codec("utf-8")
    streams = expand_streams(client, a.streams, codec)
    ends, pending = ({}, set())
    if a.upto_group:
        ends, pending = acked_ranges(client, codec, streams, a.upto_group)
        streams = [s for s in streams if s in ends]
    table = table_from_server(client, a.table_prefix) if a.table_prefix else table_from_csv(a.table_csv)

    totals: dict[str, Decimal] = {}
    if streams:
        spark = local_session(a.master, "streamdb-reconcile")
        from pyspark.sql import functions as F
        reader = (spark.read.format("streamdb").option("url", a.url).option("streams", ",".join(streams))
                  .option("partitionsPerStream", a.partitions_per_stream))
        if ends:
            reader = reader.option("endingOffsets", json.dumps(ends))
        df = reader.load()
        if pending:
            skip = spark.createDataFrame(sorted(pending), "stream string, id string")
            df = df.join(skip, ["stream", "id"], "left_anti")
        agg = (df.select(F.col("fields")[a.key_field].alias("key"),
                         F.col("fields")[a.amount_field].cast("decimal(38,6)").alias("amount"))
               .where(F.col("key").isNotNull())
               .groupBy("key").agg(F.sum("amount").alias("total")))
        totals = {r["key"]: Decimal(r["total"] or 0) for r in agg.collect()}
    rows, bad = [], []
    for k in sorted(set(totals) | set(table)):
        exp, got = totals.get(k, Decimal(0)), table.get(k, Decimal(0))
        row = [k, exp.normalize(), got.normalize(), (got - exp).normalize()]
        rows.append(row)
        if exp != got:
            bad.append(row)
    if a.out:
        with open(a.out, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["key", "from_stream", "in_table", "difference"])
            w.writerows(rows)
    print(f"{len(rows)} keys, {len(rows) - len(bad)} match, {len(bad)} differ")
    if bad:
        print_table(["key", "from stream", "in table", "difference"], bad)
    client.close()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
