"""``format("streamdb-files")``: read a stopped server's data directory (or a backup) offline.

The directory is recovered in-process exactly as the server recovers it at
start-up (``persistence.snapshot.load_snapshot``, then the AOF segments the
snapshot does not cover, replayed through a ``Core``), but read-only: a torn
AOF tail is ignored, never cut.  Partitions follow the snapshot's layout: each
stream is cut at node boundaries into groups of ``nodesPerPartition`` sealed
nodes (default 64), one partition per group.  Every Python worker recovers the
directory once and keeps it for the partitions it reads.

Options: ``path`` (the data directory), ``streams`` (comma list of names or glob
patterns, default ``*``), ``db`` (default 0), ``nodesPerPartition``,
``valueEncoding``, ``fieldsAsColumns``, ``dbfilename``/``appenddirname``/
``appendfilename`` when the server did not use the defaults.
"""

from __future__ import annotations

import fnmatch
import os

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from .common import Codec, bool_option, int_option
from .rows import DEFAULT_SCHEMA, RowBuilder

_CACHE: dict = {}


def _signature(paths: list[str]) -> tuple:
    sig = []
    for p in paths:
        if os.path.isdir(p):
            for name in sorted(os.listdir(p)):
                st = os.stat(os.path.join(p, name))
                sig.append((name, st.st_size, st.st_mtime_ns))
        elif os.path.exists(p):
            st = os.stat(p)
            sig.append((p, st.st_size, st.st_mtime_ns))
    return tuple(sig)


def recover(path: str, dbfilename: str = "snapshot.lmdb", appenddirname: str = "appendonlydir",
            appendfilename: str = "appendonly.aof"):
    """A Core holding the data set of the directory ``path`` (cached per process)."""
    from ..persistence.aof import AofError, Manifest, read_segment, segment_seq, split_commands
    from ..persistence.snapshot import load_snapshot
    from ..server.core import Core
    from .. import log

    snap = os.path.join(path, dbfilename)
    aofdir = os.path.join(path, appenddirname)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"streamdb-files: no directory {path}")
    key = (os.path.abspath(path), dbfilename, appenddirname, appendfilename, _signature([snap, aofdir]))
    core = _CACHE.get(key)
    if core is not None:
        return core
    log.configure("warning")
    core = Core()
    info = load_snapshot(snap, core.keyspace)
    covered = info.get("aof_seq") if info else None
    manifest_path = os.path.join(aofdir, appendfilename + ".manifest")
    if os.path.exists(manifest_path):
        manifest = Manifest.read(manifest_path)
        segments = [s for s in manifest.segments() if covered is None or segment_seq(s) > covered]
        client = core.replay_client("aof")
        for i, seg in enumerate(segments):
            p = os.path.join(aofdir, seg)
            with open(p, "rb") as f:
                scan = read_segment(f.read(), p)
            if scan.torn_at is not None and i != len(segments) - 1:
                raise AofError(f"{p}: {scan.torn_reason} at offset {scan.torn_at} in a segment "
                               f"that is not the last one")
            client.db = 0
            if p.endswith(".base.aof"):
                for db in core.keyspace.dbs:
                    db.clear()
            for body in scan.frames:
                for argv in split_commands(body):
                    core.execute(client, argv)
        core.remove_client(client)
    elif info is None:
        raise FileNotFoundError(f"streamdb-files: {path} holds neither a snapshot ({dbfilename}) "
                                f"nor an AOF ({appenddirname}/)")
    _CACHE.clear()          # one directory at a time per worker
    _CACHE[key] = core
    return core


class NodesPartition(InputPartition):
    """Entries of one stream with lo <= id <= hi (ids as 128-bit ints)."""

    def __init__(self, stream: bytes, lo: int, hi: int) -> None:
        super().__init__((stream, lo, hi))
        self.stream, self.lo, self.hi = stream, lo, hi


class FilesReader(DataSourceReader):
    def __init__(self, options, schema: StructType) -> None:
        self.path = options.get("path")
        if not self.path:
            raise ValueError("streamdb-files: option path (the data directory) is required")
        self.names = {k: options.get(k, d) for k, d in (("dbfilename", "snapshot.lmdb"),
                                                         ("appenddirname", "appendonlydir"),
                                                         ("appendfilename", "appendonly.aof"))}
        self.patterns = [p.strip() for p in options.get("streams", "*").split(",") if p.strip()]
        self.db = int_option(options, "db", 0, minimum=0)
        self.per = int_option(options, "nodesPerPartition", 64)
        self.codec = Codec(options.get("valueEncoding"))
        self.fields_as_columns = bool_option(options, "fieldsAsColumns", False)
        self.schema = schema

    def _db(self):
        return recover(self.path, **self.names).keyspace[self.db]

    def partitions(self):
        from ..engine.stream import Stream
        db = self._db()
        out = []
        for key in sorted(db.data):
            value = db.data[key]
            if not isinstance(value, Stream) or not value.length:
                continue
            name = self.codec.decode(key)
            if not any(fnmatch.fnmatchcase(name, p) for p in self.patterns):
                continue
            firsts = value.firsts
            for i in range(0, len(firsts), self.per):
                lo = firsts[i] if i else 0
                hi = firsts[i + self.per] - 1 if i + self.per < len(firsts) else (1 << 128) - 1
                out.append(NodesPartition(key, lo, hi))
        return out

    def read(self, partition):
        import pyarrow as pa  # noqa: F401
        if not hasattr(partition, "stream"):   # Spark's placeholder when there are no partitions
            return
        builder = RowBuilder(self.schema, self.codec, self.fields_as_columns)
        stream = self._db().data.get(partition.stream)
        if stream is None:
            return
        name = self.codec.decode(partition.stream)
        lo = partition.lo
        while lo <= partition.hi:
            entries = stream.range(lo, partition.hi, 4096)
            if not entries:
                break
            page = [(f"{sid >> 64}-{sid & ((1 << 64) - 1)}".encode(), fv) for sid, fv in entries]
            yield builder.batch(name, page)
            lo = entries[-1][0] + 1


class StreamDBFilesDataSource(DataSource):
    """``spark.read.format("streamdb-files").option("path", DATA_DIR)``."""

    @classmethod
    def name(cls) -> str:
        return "streamdb-files"

    def schema(self):
        return DEFAULT_SCHEMA

    def reader(self, schema: StructType):
        return FilesReader(self.options, schema)
