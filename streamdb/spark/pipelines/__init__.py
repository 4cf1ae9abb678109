"""The Spark pipelines (archive, reconcile, group-report) behind the streamdb-spark console script (cli.py)."""
