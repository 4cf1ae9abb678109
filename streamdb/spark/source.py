"""``format("streamdb")``: batch and streaming reads of StreamDB streams, and the sink.

Batch read: the driver expands ``streams`` (glob patterns through SCAN ... TYPE
stream), fixes each stream's range from ``startingOffsets`` (exclusive: the last
ID already seen, as XREAD takes it; ``earliest`` = from the first entry) to
``endingOffsets`` (inclusive; ``latest`` = the last entry at planning time), and
cuts each range by time into ``partitionsPerStream`` partitions that executors
read with paged XRANGE (``batchSize`` entries a page).

Streaming read: an offset is ``{stream: last ID read}``.  A micro-batch reads
``(start, end]`` of every stream, so a query restarted from its checkpoint goes
on exactly after the last committed batch.  See ``StreamReader``.
"""

from __future__ import annotations

import logging
from pyspark.sql.datasource import (DataSource, DataSourceReader, DataSourceStreamReader,
                                    InputPartition)
from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadMaxRows,
                                              SupportsTriggerAvailableNow)
from pyspark.sql.types import StructType

from .common import (Codec, bool_option, connect, expand_streams, format_id, int_option,
                     next_id, parse_id, prev_id, raw, resolve_offsets, split_range,
                     stream_state, xrange_pages)
from .rows import DEFAULT_SCHEMA, RowBuilder

log = logging.getLogger("streamdb.spark")

ZERO = (0, 0)


class DataLossError(RuntimeError):
    pass


class RangePartition(InputPartition):
    """Entries of one stream with lo <= id <= hi (lo < id when exclusive_lo)."""

    def __init__(self, stream, lo, hi, exclusive_lo=True):
        super().__init__((stream, lo, hi, exclusive_lo))
        self.stream, self.lo, self.hi, self.exclusive_lo = stream, lo, hi, exclusive_lo


class _Options:
    def __init__(self, options) -> None:
        self.options = options
        self.url = options.get("url", "redis://127.0.0.1:6379")
        self.codec = Codec(options.get("valueEncoding"))
        self.batch = int_option(options, "batchSize", 2000)
        self.parts = int_option(options, "partitionsPerStream", 1)
        self.fields_as_columns = bool_option(options, "fieldsAsColumns", False)


def _read_range(opts: _Options, schema, part: RangePartition):
    if not hasattr(part, "stream"):   # Spark's placeholder partition when there are none
        return
    builder = RowBuilder(schema, opts.codec, opts.fields_as_columns)
    client = connect(opts.url)
    try:
        key = opts.codec.encode(part.stream)
        lo = part.lo if part.lo is not None else ZERO
        exclusive = part.exclusive_lo and part.lo is not None
        for page in xrange_pages(client, key, lo, part.hi, opts.batch, exclusive_lo=exclusive):
            yield builder.batch(part.stream, page)
    finally:
        client.close()


def _split(client, key: bytes, lo, hi, exclusive_lo: bool, n: int):
    """Cut (lo, hi] (or [lo, hi]) into ``n`` ranges by time, using the real first/last entries."""
    start = ("(" if exclusive_lo else "") + format_id(lo)
    first = raw(client, "XRANGE", key, start, format_id(hi), "COUNT", 1)
    if not first:
        return []
    last = raw(client, "XREVRANGE", key, format_id(hi), start, "COUNT", 1)
    f, l_ = parse_id(first[0][0]), parse_id(last[0][0])
    return split_range(f, l_, n)


# ---------------------------------------------------------------------------
# Batch
# ---------------------------------------------------------------------------


class BatchReader(DataSourceReader):
    def __init__(self, options, schema: StructType) -> None:
        self.opts = _Options(options)
        self.schema = schema

    def partitions(self):
        o = self.opts
        client = connect(o.url)
        try:
            streams = expand_streams(client, o.options.get("streams"), o.codec)
            sdef, starts = resolve_offsets(o.options.get("startingOffsets"), "earliest",
                                           "startingOffsets")
            edef, ends = resolve_offsets(o.options.get("endingOffsets"), "latest", "endingOffsets")
            out = []
            for s in streams:
                key = o.codec.encode(s)
                st = starts.get(s, sdef)
                en = ends.get(s, edef)
                if st == "latest":
                    continue
                if en == "earliest":
                    continue
                if en == "latest":
                    last = raw(client, "XREVRANGE", key, "+", "-", "COUNT", 1)
                    if not last:
                        continue
                    hi = parse_id(last[0][0])
                else:
                    hi = parse_id(en)
                lo = ZERO if st == "earliest" else parse_id(st)
                for a, b in _split(client, key, lo, hi, st != "earliest", o.parts):
                    out.append(RangePartition(s, a, b, exclusive_lo=False))
            return out
        finally:
            client.close()

    def read(self, partition):
        return _read_range(self.opts, self.schema, partition)


# ---------------------------------------------------------------------------
# Streaming
# ---------------------------------------------------------------------------


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader; offsets are ``{stream: last id read}`` (ID text).

    * ``startingOffsets``: ``latest`` (default: entries added after the query
      started), ``earliest`` (everything live), or JSON ``{stream: id}``.
      Streams matching a pattern that appear later are read from their start.
    * ``maxEntriesPerTrigger``: at most this many entries per micro-batch, shared
      fairly between the streams that have new entries.
    * ``failOnDataLoss`` (default true): when entries after a query's offset were
      trimmed away before it read them, the query fails; with false it logs a
      warning and goes on with what is left.
    """

    def __init__(self, options, schema: StructType) -> None:
        self.opts = _Options(options)
        self.schema = schema
        self.max_entries = int_option(options, "maxEntriesPerTrigger", 0, minimum=0)
        self.fail_on_loss = bool_option(options, "failOnDataLoss", True)
        self.target: dict | None = None     # Trigger.AvailableNow: do not go past this
        self._client = None

    # -- helpers ----------------------------------------------------------------

    def _conn(self):
        if self._client is None:
            self._client = connect(self.opts.url)
        return self._client

    def _streams(self) -> list[str]:
        return expand_streams(self._conn(), self.opts.options.get("streams"), self.opts.codec)

    def _last_ids(self, streams) -> dict[str, tuple]:
        p = self._conn().pipeline(transaction=False)
        for s in streams:
            p.execute_command("XREVRANGE", self.opts.codec.encode(s), "+", "-", "COUNT", 1)
        out = {}
        for s, r in zip(streams, p.execute()):
            if r:
                out[s] = parse_id(r[0][0])
        return out

    # -- the offsets ------------------------------------------------------------

    def initialOffset(self) -> dict:
        client = self._conn()
        sdef, starts = resolve_offsets(self.opts.options.get("startingOffsets"), "latest",
                                       "startingOffsets")
        out = {}
        for s in self._streams():
            how = starts.get(s, sdef)
            st = stream_state(client, self.opts.codec.encode(s))
            if how not in ("earliest", "latest"):
                out[s] = how
            elif st is None:
                out[s] = format_id(ZERO)
            elif how == "latest" or st["first"] is None:
                out[s] = format_id(st["last_generated"])
            else:
                # Just before the first live entry: a trim after this point is noticed.
                out[s] = format_id(prev_id(st["first"]) or ZERO)
        return out

    def getDefaultReadLimit(self):
        return ReadMaxRows(self.max_entries) if self.max_entries else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        streams = self._streams()
        self.target = {s: format_id(i) for s, i in self._last_ids(streams).items()}

    def latestOffset(self, start: dict, limit) -> dict:
        streams = self._streams()
        if self.target is not None:
            caps = {s: parse_id(v) for s, v in self.target.items()}
        else:
            caps = self._last_ids(streams)
        end = dict(start)
        pending = []
        for s in streams:
            cur = parse_id(start[s]) if s in start else ZERO
            cap = caps.get(s)
            if cap is not None and cap > cur:
                pending.append((s, cur, cap))
            elif s not in end:
                end[s] = format_id(cur)
        if not isinstance(limit, ReadMaxRows):
            for s, _cur, cap in pending:
                end[s] = format_id(cap)
            return end
        budget = limit.max_rows
        # Fair share: every stream with new entries gets budget // n, then the
        # left-over goes round again to the streams that had more.
        while pending and budget > 0:
            share = max(budget // len(pending), 1)
            still = []
            for s, cur, cap in pending:
                if budget <= 0:
                    break
                take = min(share, budget)
                page = raw(self._conn(), "XRANGE", self.opts.codec.encode(s), "(" + format_id(cur),
                           format_id(cap), "COUNT", take)
                if page:
                    cur = parse_id(page[-1][0])
                    budget -= len(page)
                    end[s] = format_id(cur)
                if len(page) == take and cur < cap:
                    still.append((s, cur, cap))
            pending = still
        return end

    def reportLatestOffset(self):
        try:
            return {s: format_id(i) for s, i in self._last_ids(self._streams()).items()}
        except Exception:  # noqa: BLE001 - a progress report only
            return None

    # -- micro-batches ----------------------------------------------------------

    def _check_loss(self, s: str, start: tuple, end: tuple) -> None:
        """Entries after ``start`` that were removed before this batch could read them."""
        st = stream_state(self._conn(), self.opts.codec.encode(s))
        if st is None:
            lost = True
            what = "the stream no longer exists"
        else:
            removed = st["entries_added"] - st["length"]
            first = st["first"]
            if first is None:
                lost = removed > 0 and st["last_generated"] > start
                what = "the stream is empty"
            else:
                nxt = next_id(start)
                lost = removed > 0 and nxt is not None and first > nxt
                what = f"its first entry is now {format_id(first)}"
        if not lost:
            return
        msg = (f"stream {s!r}: entries after offset {format_id(start)} were trimmed or deleted "
               f"before they were read ({what}). Some data may have been lost. If this is "
               f"expected, set the option failOnDataLoss to false.")
        if self.fail_on_loss:
            raise DataLossError(msg)
        log.warning(msg)

    def partitions(self, start: dict, end: dict):
        out = []
        for s, e in end.items():
            hi = parse_id(e)
            lo = parse_id(start[s]) if s in start else ZERO
            if hi <= lo:
                continue
            if s in start:
                self._check_loss(s, lo, hi)
            for a, b in _split(self._conn(), self.opts.codec.encode(s), lo, hi, True,
                               self.opts.parts):
                out.append(RangePartition(s, a, b, exclusive_lo=False))
        return out

    def read(self, partition):
        return _read_range(self.opts, self.schema, partition)

    def commit(self, end: dict) -> None:
        pass

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def __getstate__(self):
        d = dict(self.__dict__)
        d["_client"] = None
        return d


# ---------------------------------------------------------------------------
# The data source
# ---------------------------------------------------------------------------


class StreamDBDataSource(DataSource):
    """``spark.read/readStream/write/writeStream.format("streamdb")``."""

    @classmethod
    def name(cls) -> str:
        return "streamdb"

    def schema(self):
        return DEFAULT_SCHEMA

    def reader(self, schema: StructType):
        return BatchReader(self.options, schema)

    def streamReader(self, schema: StructType):
        return StreamReader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool):
        from .writer import BatchWriter
        return BatchWriter(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool):
        from .writer import StreamWriter
        return StreamWriter(self.options, schema, overwrite)
