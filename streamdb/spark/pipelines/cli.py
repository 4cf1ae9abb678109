"""streamdb-spark: the Spark pipelines over StreamDB streams, one subcommand each.

    streamdb-spark archive        archive stream history to Parquet, then trim what is safe to trim
    streamdb-spark reconcile      recompute per-key totals from a stream, compare with a table
    streamdb-spark group-report   lag and pending entries of every consumer group

pyspark is an optional dependency (pip install -e '.[spark]'); Spark runs
locally (--master local[2]) and binds to 127.0.0.1 unless SPARK_LOCAL_IP says
otherwise.  `streamdb-spark <pipeline> --help` describes each pipeline.
"""

from __future__ import annotations

import argparse
import importlib
import sys

__all__ = ["main"]

# Subcommand -> module of this package (each has its own main(argv)).
PIPELINES = {"archive": "archive", "reconcile": "reconcile", "group-report": "group_report"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="streamdb-spark", description=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pipeline", choices=PIPELINES)
    ap.add_argument("args", nargs=argparse.REMAINDER, help="the pipeline's own options (see its --help)")
    args = ap.parse_args(argv)
    module = importlib.import_module(f".{PIPELINES[args.pipeline]}", __package__)
    return module.main(args.args)


if __name__ == "__main__":
    sys.exit(main())
