"""``df.write.format("streamdb")`` and ``writeStream``: pipelined XADD, exactly once per retry.

Each row becomes one ``XADD``:

* the key: option ``stream``, else the row's ``stream`` column;
* the fields: the ``fields`` map column if there is one, else every other column
  (``stream``, ``id`` and nulls left out), values as text (option ``valueEncoding``;
  binary columns are written as they are);
* the ID: the ``id`` column if there is one, else ``*``;
* trimming: options ``maxlen`` or ``minid`` (``trimApprox=true`` for ``~``).

Exactly once against task retries: with an auto ID every XADD carries
``IDMP <producer> <iid>``.  ``<iid>`` is the value of ``idempotencyColumn`` (or the
row's position in the task when the option is not set); ``<producer>`` is
``<producerId>:<partition>:<chunk>`` (streaming: ``<producerId>:<batch>:<partition>:<chunk>``)
where a chunk is ``idmpChunkSize`` consecutive rows (default: the server's
``stream-idmp-maxsize``), so no iid of a task is evicted before the task ends.
``producerId`` defaults to a fresh id per write job (retries of its tasks share it)
and, for a streaming query, to the query's id, which survives restarts from the
checkpoint.  A retried task, or the same data written again with the same
``producerId``, adds nothing twice, provided the retry comes within the stream's
IDMP duration (``stream-idmp-duration``, or option ``idmpDuration`` which sets it
with XCFGSET).  With an ``id`` column the IDs themselves make writes idempotent: an
XADD refused because that ID already exists counts as a duplicate.
"""

from __future__ import annotations

import uuid
from collections import deque
from dataclasses import dataclass, field

from pyspark.sql.datasource import (DataSourceArrowWriter, DataSourceStreamArrowWriter,
                                    WriterCommitMessage)
from pyspark.sql.types import StructType

from .common import (Codec, RespConnection, bool_option, connect, encode_command, format_id,
                     int_option, parse_id, raw)

# Arrow types whose text (Arrow's cast to string) is what Codec.encode makes of the
# Python value; other types (floating point, dates, decimals, ...) take the row
# path so that their text stays Python's.
_ARROW_TEXT_TYPES = ("string", "large_string", "binary", "large_binary", "int8", "int16",
                     "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool")


@dataclass
class WriteResult(WriterCommitMessage):
    """Per task: XADDs acknowledged (an IDMP duplicate is answered like a new entry, so it
    counts here too) and explicit-ID rows found already present."""
    partition: int
    written: int = 0
    duplicates: int = 0
    streams: list = field(default_factory=list)


def _server_idmp_maxsize(url: str) -> int:
    try:
        client = connect(url)
        try:
            r = raw(client, "CONFIG", "GET", "stream-idmp-maxsize")
            return int(r[1]) if r and len(r) > 1 else 100
        finally:
            client.close()
    except Exception:  # noqa: BLE001 - a server without the setting
        return 100


def _bulk(a: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(a), a)


class _Chunk:
    """XADDs sent and not yet answered: ``count`` of them, after ``cfg`` XCFGSETs."""

    __slots__ = ("count", "cfg", "key_of", "rids")

    def __init__(self, count, cfg, key_of, rids) -> None:
        self.count, self.cfg, self.key_of, self.rids = count, cfg, key_of, rids


class _Task:
    """One task's writes: pre-encoded XADDs on one connection, two chunks in flight.

    Chunk k+1 is sent before the replies of chunk k are read, so the server runs
    one chunk while this worker checks the previous replies and encodes the next
    chunk.  Replies come in order; an error reply fails the task, except an
    explicit ID that is already there (a duplicate).
    """

    WINDOW = 2

    def __init__(self, w: "_Writer", ctx) -> None:
        self.w = w
        self.prefix = w._producer_prefix(ctx)
        self.client = connect(w.url)
        self.conn = RespConnection(self.client)
        self.res = WriteResult(partition=ctx.partitionId() if ctx else 0)
        self.n = 0                      # rows of the task so far (the default iid)
        self.inflight: deque = deque()
        self.configured: set = set()
        self.streams: set = set()

    def send(self, payload, count: int, keys, key_of, rids=None) -> None:
        """Send ``count`` encoded XADDs writing to the streams ``keys``.

        ``key_of(i)`` names the stream of the i-th (for an error message);
        ``rids[i]`` is its explicit ID or None.
        """
        cfg = []
        if self.w.idmp_duration:
            for key in sorted(set(keys) - self.configured):
                self.configured.add(key)   # the same value again changes nothing
                cfg.append(key)
        if cfg:
            self.conn.send(b"".join(encode_command(b"XCFGSET", k, b"IDMP-DURATION",
                                                   self.w.idmp_duration) for k in cfg))
        self.conn.send(payload)
        self.streams.update(keys)
        self.inflight.append(_Chunk(count, cfg, key_of, rids))
        while len(self.inflight) >= self.WINDOW:
            self._settle(self.inflight.popleft())

    def _settle(self, chunk: _Chunk) -> None:
        import redis
        for key, rep in zip(chunk.cfg, self.conn.replies(len(chunk.cfg))):
            if isinstance(rep, redis.ResponseError):
                self.configured.discard(key)     # no such key yet: again with a later chunk
        replies = self.conn.replies(chunk.count)
        bad = [i for i, r in enumerate(replies) if isinstance(r, redis.ResponseError)]
        self.res.written += chunk.count - len(bad)
        for i in bad:
            rep = replies[i]
            key = chunk.key_of(i)
            rid = chunk.rids[i] if chunk.rids is not None else None
            if rid is not None and "equal or smaller" in str(rep):
                if raw(self.client, "XRANGE", key, rid, rid):
                    self.res.duplicates += 1
                    continue
            raise RuntimeError(f"XADD {key!r} failed: {rep}") from rep

    def finish(self) -> WriteResult:
        while self.inflight:
            self._settle(self.inflight.popleft())
        self.res.streams = sorted(k.decode("latin-1") for k in self.streams)
        return self.res

    def close(self, ok: bool) -> None:
        self.conn.close(ok and not self.inflight)
        self.client.close()


class _Writer:
    def __init__(self, options, schema: StructType, overwrite: bool, streaming: bool) -> None:
        self.url = options.get("url", "redis://127.0.0.1:6379")
        self.codec = Codec(options.get("valueEncoding"))
        self.stream = options.get("stream")
        names = [f.name for f in schema.fields]
        if self.stream is None and "stream" not in names:
            raise ValueError("set the option stream or give the DataFrame a 'stream' column")
        self.names = names
        self.has_id = "id" in names
        self.fields_col = "fields" if "fields" in names and \
            schema["fields"].dataType.simpleString().startswith("map<") else None
        self.value_cols = [n for n in names if n not in ("stream", "id") and
                           (self.fields_col is None or n == self.fields_col)]
        self.batch = int_option(options, "batchSize", 1000)
        self.idem_col = options.get("idempotencyColumn")
        if self.idem_col and self.idem_col not in names:
            raise ValueError(f"idempotencyColumn {self.idem_col!r} is not a column")
        self.idempotent = bool_option(options, "idempotent", True) and not self.has_id
        self.producer = options.get("producerId")
        if not self.producer and not streaming:
            self.producer = "spark-" + uuid.uuid4().hex[:16]
        self.chunk = int_option(options, "idmpChunkSize", 0, minimum=0) or \
            (_server_idmp_maxsize(self.url) if self.idempotent else 100)
        self.idmp_duration = int_option(options, "idmpDuration", 0, minimum=0)
        trim = []
        approx = ["~"] if bool_option(options, "trimApprox", False) else []
        if options.get("maxlen") is not None:
            trim = ["MAXLEN", *approx, str(int_option(options, "maxlen", 0, minimum=0))]
        elif options.get("minid") is not None:
            trim = ["MINID", *approx, format_id(parse_id(options["minid"]))]
        self.trim = trim
        self.streaming = streaming
        # Record batches are encoded by Arrow kernels (no Python object per row) when
        # the text is UTF-8 and there is no id column; see _arrow_refusal for the rest.
        self.arrow_encoding = bool_option(options, "arrowEncoding", True) and not self.has_id \
            and self.codec.encoding.lower().replace("_", "-") in ("utf-8", "utf8")

    def _producer_prefix(self, ctx) -> str:
        base = self.producer
        if self.streaming:
            qid = ctx.getLocalProperty("sql.streaming.queryId") if ctx else None
            batch = ctx.getLocalProperty("streaming.sql.batchId") if ctx else None
            base = base or ("spark-query-" + (qid or uuid.uuid4().hex))
            return f"{base}:{batch if batch is not None else '-'}:{ctx.partitionId() if ctx else 0}"
        return f"{base}:{ctx.partitionId() if ctx else 0}"

    # -- the task ------------------------------------------------------------------

    def _run(self, fill) -> WriteResult:
        from pyspark import TaskContext
        task = _Task(self, TaskContext.get())
        ok = False
        try:
            fill(task)
            res = task.finish()
            ok = True
            return res
        finally:
            task.close(ok)

    def write_rows(self, iterator) -> WriteResult:
        """Write row tuples (the columns in schema order) as one task."""
        return self._run(lambda task: self._send_rows(task, iterator))

    def write_arrow(self, batches) -> WriteResult:
        """Write Arrow record batches (the sink's input) as one task."""
        def fill(task):
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                if self.arrow_encoding and self._arrow_refusal(batch) is None:
                    self._send_arrow(task, batch)
                else:
                    self._send_rows(task, zip(*(col.to_pylist() for col in batch.columns)))
        return self._run(fill)

    # -- rows, one Python value at a time ----------------------------------------------

    def _send_rows(self, task: _Task, rows) -> None:
        """Any column type, explicit IDs, any valueEncoding."""
        enc = self.codec.encode
        fixed_key = enc(self.stream) if self.stream is not None else None
        pos = {name: i for i, name in enumerate(self.names)}
        stream_i = pos.get("stream")
        id_i = pos.get("id") if self.has_id else None
        idem_i = pos.get(self.idem_col) if self.idem_col else None
        fields_i = pos.get(self.fields_col) if self.fields_col is not None else None
        value_cols = [(_bulk(enc(c)), pos[c]) for c in self.value_cols]
        tail = b"".join(_bulk(t.encode()) for t in self.trim)
        out: list = []
        keys: list = []
        rids: list = []

        def flush():
            if keys:
                task.send(b"".join(out), len(keys), set(keys), list(keys).__getitem__, list(rids))
            out.clear()
            keys.clear()
            rids.clear()

        for row in rows:
            n = task.n
            key = fixed_key if fixed_key is not None else enc(row[stream_i])
            fv = []
            if fields_i is not None:
                m = row[fields_i] or ()
                for k, v in (m.items() if isinstance(m, dict) else m):
                    if v is not None:
                        fv += [_bulk(enc(k)), _bulk(enc(v))]
            else:
                for c, i in value_cols:
                    v = row[i]
                    if v is not None:
                        fv += [c, _bulk(enc(v))]
            if not fv:
                raise ValueError(f"row {n} of the task has no non-null field to write")
            argv = [b"$4\r\nXADD\r\n", _bulk(key)]
            argc = 3 + len(self.trim) + len(fv)
            rid = None
            if id_i is not None and row[id_i] is not None:
                rid = format_id(parse_id(str(row[id_i])))
            elif self.idempotent:
                iid = enc(row[idem_i]) if idem_i is not None else str(n).encode()
                argv += [b"$4\r\nIDMP\r\n", _bulk(f"{task.prefix}:{n // self.chunk}".encode()),
                         _bulk(iid)]
                argc += 3
            if tail:
                argv.append(tail)
            argv.append(_bulk(rid.encode()) if rid else b"$1\r\n*\r\n")
            out.append(b"*%d\r\n" % argc)
            out += argv
            out += fv
            keys.append(key)
            rids.append(rid)
            task.n += 1
            if len(keys) >= self.batch:
                flush()
        flush()

    # -- record batches, encoded by Arrow kernels ------------------------------------

    def _arrow_refusal(self, batch) -> str | None:
        """Why this batch must take the row path (None when Arrow can encode it)."""
        import pyarrow as pa
        sch = batch.schema
        if self.fields_col is not None:
            t = sch.field(self.fields_col).type
            if not (pa.types.is_map(t) and str(t.key_type) in ("string", "binary")
                    and str(t.item_type) in ("string", "binary")):
                return f"map type {t}"
            if batch.column(self.fields_col).items.null_count:
                return "null values in the map"
        else:
            for c in self.value_cols:
                if str(sch.field(c).type) not in _ARROW_TEXT_TYPES:
                    return f"column {c} is {sch.field(c).type}"
        for c in (self.idem_col, None if self.stream is not None else "stream"):
            if c is not None and str(sch.field(c).type) not in _ARROW_TEXT_TYPES:
                return f"column {c} is {sch.field(c).type}"
        return None

    def _send_arrow(self, task: _Task, batch) -> None:
        """One record batch: every row's XADD built column-wise into one binary array,
        whose data buffer is then sent ``batchSize`` commands a write."""
        import pyarrow as pa
        import pyarrow.compute as pc
        B = pa.binary()
        join = pc.binary_join_element_wise      # the last argument is the separator
        n = batch.num_rows

        def text(arr):      # -> binary; a null is "" as Codec.encode(None) is
            if not (pa.types.is_binary(arr.type) or pa.types.is_string(arr.type)):
                arr = arr.cast(pa.string())
            return pc.fill_null(arr.cast(B), b"")

        def bulks(arr):     # -> "$<len>\r\n<bytes>\r\n" a row
            return join(b"$", pc.binary_length(arr).cast(pa.string()).cast(B), b"\r\n", arr,
                        b"\r\n", b"")

        # The fields: a blob of "$len field $len value ..." a row, and the pair count.
        if self.fields_col is not None:
            m = batch.column(self.fields_col)
            offsets = m.offsets                 # of this slice, into the whole key/item arrays
            pairs = join(bulks(m.keys.cast(B)), bulks(m.items.cast(B)), b"")
            fields = pc.binary_join(pa.ListArray.from_arrays(offsets, pairs), b"")
            npairs = pc.pairwise_diff(offsets).slice(1)
            if m.null_count:
                npairs = pc.if_else(m.is_valid(), npairs, 0)
        else:
            pieces, npairs = [], None
            for c in self.value_cols:
                col = batch.column(c)
                valid = col.is_valid()
                pieces.append(pc.if_else(valid, join(_bulk(c.encode()), bulks(text(col)), b""), b""))
                count = valid.cast(pa.int32())
                npairs = count if npairs is None else pc.add(npairs, count)
            fields = join(*pieces, b"")
        empty = pc.equal(npairs, 0)
        if pc.any(empty).as_py():
            first = pc.index(empty, True).as_py()
            raise ValueError(f"row {task.n + first} of the task has no non-null field to write")

        fixed = 2 + (3 if self.idempotent else 0) + len(self.trim) + 1
        argc = pc.add(pc.multiply(npairs.cast(pa.int64()), 2), fixed)
        parts = [b"*", argc.cast(pa.string()).cast(B), b"\r\n$4\r\nXADD\r\n"]
        if self.stream is not None:
            key = self.codec.encode(self.stream)
            parts[2] += _bulk(key)
            keys = {key}
            key_of = (lambda i: key)
        else:
            scol = text(batch.column("stream"))
            parts.append(bulks(scol))
            keys = set(pc.unique(scol).to_pylist())
            key_of = (lambda i: scol[i].as_py())
        if self.idempotent:
            rows = pa.array(range(task.n, task.n + n), type=pa.int64())
            producer = join(f"{task.prefix}:".encode(),
                            pc.divide(rows, self.chunk).cast(pa.string()).cast(B), b"")
            iid = text(batch.column(self.idem_col)) if self.idem_col else \
                rows.cast(pa.string()).cast(B)
            parts += [b"$4\r\nIDMP\r\n", bulks(producer), bulks(iid)]
        parts.append(b"".join(_bulk(t.encode()) for t in self.trim) + b"$1\r\n*\r\n")
        cmds = join(*parts, fields, b"")

        offs = memoryview(cmds.buffers()[1]).cast("i")
        data = memoryview(cmds.buffers()[2])
        base = cmds.offset
        for a in range(0, n, self.batch):
            b = min(a + self.batch, n)
            chunk_keys = keys if self.stream is not None or b - a == n else \
                set(pc.unique(scol.slice(a, b - a)).to_pylist())
            task.send(data[offs[base + a]:offs[base + b]], b - a, chunk_keys,
                      (lambda i, a=a: key_of(a + i)))
        task.n += n


class BatchWriter(DataSourceArrowWriter):
    def __init__(self, options, schema, overwrite) -> None:
        self.w = _Writer(options, schema, overwrite, streaming=False)

    def write(self, iterator):
        return self.w.write_arrow(iterator)

    def commit(self, messages) -> None:
        pass

    def abort(self, messages) -> None:
        pass


class StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options, schema, overwrite) -> None:
        self.w = _Writer(options, schema, overwrite, streaming=True)

    def write(self, iterator):
        return self.w.write_arrow(iterator)

    def commit(self, messages, batchId) -> None:
        pass

    def abort(self, messages, batchId) -> None:
        pass
