"""Archive stream history to Parquet (partitioned by date), then trim what is safe to trim.

    streamdb-spark archive --url redis://127.0.0.1:6379 --streams 'orders:*' \
        --out /data/archive [--no-trim] [--master local[2]]

Each run archives, for every stream, the entries after what the previous run
archived, up to the stream's last entry now, into ``<out>/date=YYYY-MM-DD/run=N/``
(the date of the entry ID's millisecond time, UTC).  The state file
``<out>/_streamdb_archive.json`` holds ``{stream: last archived id}``.

Resumable and exactly once: a run first writes its plan (run number and the end
ID per stream) into the state file, then deletes whatever an earlier crashed
attempt of that same run left in ``run=N`` directories, writes, and only then
records the run as done.  Re-running after a crash redoes the same range.

Safe trimming (``XTRIM key MINID = m``): ``m`` is the smallest of the last archived
ID and, for every consumer group, its oldest pending entry (or its last-delivered
ID when nothing is pending): nothing a group has not acknowledged and nothing not
archived is removed.  The boundary entry itself is kept, so a reader positioned
exactly there (a Spark streaming query, a consumer) does not see a gap.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import sys

from ..common import (Codec, connect, expand_streams, format_id, parse_id,
                                   raw)
from ..session import local_session, print_table

STATE = "_streamdb_archive.json"


def load_state(out: str) -> dict:
    p = os.path.join(out, STATE)
    if not os.path.exists(p):
        return {"archived": {}, "runs": 0, "pending": None}
    with open(p, encoding="utf-8") as f:
        return json.load(f)


def save_state(out: str, state: dict) -> None:
    os.makedirs(out, exist_ok=True)
    p = os.path.join(out, STATE)
    tmp = p + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(state, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, p)


def group_floor(client, key: bytes):
    """The smallest ID some consumer group still needs (None if the stream has no groups)."""
    groups = raw(client, "XINFO", "GROUPS", key)
    floor = None
    for g in groups:
        d = g if isinstance(g, dict) else dict(zip(g[0::2], g[1::2]))
        name = d[b"name"]
        pending = raw(client, "XPENDING", key, name)
        if pending and int(pending[0]) > 0:
            need = parse_id(pending[1])                 # the oldest unacknowledged entry
        else:
            need = parse_id(d[b"last-delivered-id"])    # keep the last delivered one
        floor = need if floor is None else min(floor, need)
    return floor


def safe_trim(client, key: bytes, archived: str | None, dry_run: bool):
    if archived is None:
        return None, 0
    m = parse_id(archived)
    g = group_floor(client, key)
    if g is not None:
        m = min(m, g)
    if dry_run:
        return m, 0
    removed = raw(client, "XTRIM", key, "MINID", "=", format_id(m))
    return m, int(removed)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="streamdb-spark archive", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("--url", default="redis://127.0.0.1:6379")
    ap.add_argument("--streams", required=True, help="comma list of stream keys or glob patterns")
    ap.add_argument("--out", required=True, help="archive directory (Parquet + state file)")
    ap.add_argument("--no-trim", action="store_true", help="archive only, trim nothing")
    ap.add_argument("--dry-run-trim", action="store_true", help="print the MINID, trim nothing")
    ap.add_argument("--partitions-per-stream", type=int, default=2)
    ap.add_argument("--master", default="local[2]")
    a = ap.parse_args(argv)

    codec = Codec("latin-1")
    client = connect(a.url)
    state = load_state(a.out)
    if state.get("pending"):
        plan = state["pending"]
        print(f"resuming run {plan['run']} left unfinished by a previous attempt")
    else:
        streams = expand_streams(client, a.streams, codec)
        ends = {}
        for s in streams:
            last = raw(client, "XREVRANGE", codec.encode(s), "+", "-", "COUNT", 1)
            if last and (s not in state["archived"] or
                         parse_id(last[0][0]) > parse_id(state["archived"][s])):
                ends[s] = last[0][0].decode()
        plan = {"run": state["runs"] + 1, "ends": ends,
                "starts": {s: state["archived"].get(s, "0-0") for s in ends}}
        state["pending"] = plan
        save_state(a.out, state)

    rows_out = []
    if plan["ends"]:
        for d in glob.glob(os.path.join(a.out, "date=*", f"run={plan['run']}")):
            shutil.rmtree(d)            # what a crashed attempt of this run left
        spark = local_session(a.master, "streamdb-archive")
        spark.conf.set("spark.sql.session.timeZone", "UTC")
        from pyspark.sql import functions as F
        starts = {s: v for s, v in plan["starts"].items() if v != "0-0"}
        df = (spark.read.format("streamdb").option("url", a.url)
              .option("streams", ",".join(plan["ends"]))
              .option("startingOffsets", json.dumps(starts) if starts else "earliest")
              .option("endingOffsets", json.dumps(plan["ends"]))
              .option("valueEncoding", "latin-1")
              .option("partitionsPerStream", a.partitions_per_stream).load())
        df = (df.withColumn("date", F.date_format(F.from_unixtime(F.col("ms") / 1000), "yyyy-MM-dd"))
                .withColumn("run", F.lit(plan["run"]))).persist()
        counts = {r["stream"]: r["count"] for r in df.groupBy("stream").count().collect()}
        df.write.mode("append").partitionBy("date", "run").parquet(a.out)
        for s, end in plan["ends"].items():
            rows_out.append([s, plan["starts"][s], end, counts.get(s, 0)])
        df.unpersist()
    state["archived"].update(plan["ends"])
    state["runs"] = plan["run"]
    state["pending"] = None
    save_state(a.out, state)

    trims = []
    if not a.no_trim:
        for s in expand_streams(client, a.streams, codec):
            m, n = safe_trim(client, codec.encode(s), state["archived"].get(s), a.dry_run_trim)
            trims.append([s, state["archived"].get(s), format_id(m) if m else "-", n])
    print(f"run {plan['run']}: archived into {a.out}")
    print_table(["stream", "after", "through", "entries"], rows_out)
    if trims:
        print()
        print_table(["stream", "archived through", "MINID", "trimmed"], trims)
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
