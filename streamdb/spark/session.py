"""A SparkSession for the pipelines (streamdb-spark) and benchmarks: local by default, our formats registered."""

from __future__ import annotations

import os
import sys


def local_session(master: str = "local[2]", app: str = "streamdb", quiet: bool = True, **conf):
    """Build (or reuse) a SparkSession whose Python workers run this interpreter.

    Exits with a one-line message (not a traceback) when pyspark is missing: it
    is an optional dependency.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Spark's driver binds to the host's first non-loopback address unless told;
    # a local session has no business on the network.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise SystemExit("pyspark is not installed: pip install -e '.[spark]'") from None
    from . import register
    b = (SparkSession.builder.master(master).appName(app)
         .config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "4")
         .config("spark.ui.showConsoleProgress", "false"))
    for k, v in conf.items():
        b = b.config(k.replace("_", "."), v)
    spark = b.getOrCreate()
    if quiet:
        spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def print_table(headers: list[str], rows: list[list], out=None) -> None:
    out = out or sys.stdout
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for n, r in enumerate(cells):
        print("  ".join(c.rjust(w) if n and c.replace(".", "", 1).lstrip("-").isdigit() else c.ljust(w)
                        for c, w in zip(r, widths)).rstrip(), file=out)
        if n == 0:
            print("  ".join("-" * w for w in widths), file=out)
