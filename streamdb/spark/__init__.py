"""StreamDB's PySpark data source (Python Data Source API, PySpark 4.2+).

    from streamdb.spark import register
    register(spark)                       # formats "streamdb" and "streamdb-files"
    df = (spark.read.format("streamdb")
          .option("url", "redis://127.0.0.1:6379").option("streams", "orders:*")
          .option("partitionsPerStream", 4).load())

See source.py (batch and streaming reads), writer.py (the sink) and files.py
(offline reads of a data directory).  pyspark is imported only when these are used.
"""

from __future__ import annotations

__all__ = ["register", "StreamDBDataSource", "StreamDBFilesDataSource"]


def register(spark) -> None:
    """Register the formats "streamdb" and "streamdb-files" with a SparkSession."""
    from .files import StreamDBFilesDataSource
    from .source import StreamDBDataSource
    spark.dataSource.register(StreamDBDataSource)
    spark.dataSource.register(StreamDBFilesDataSource)


def __getattr__(name):
    if name == "StreamDBDataSource":
        from .source import StreamDBDataSource
        return StreamDBDataSource
    if name == "StreamDBFilesDataSource":
        from .files import StreamDBFilesDataSource
        return StreamDBFilesDataSource
    raise AttributeError(name)
