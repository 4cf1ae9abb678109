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
from dataclasses import dataclass, field

from pyspark.sql.datasource import (DataSourceArrowWriter, DataSourceStreamArrowWriter,
                                    WriterCommitMessage)
from pyspark.sql.types import StructType

from .common import Codec, bool_option, connect, format_id, int_option, parse_id, raw


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


def _pipeline(client, commands: list) -> list:
    """Send every command in one write, read every reply (errors as exception objects)."""
    import redis
    pool = client.connection_pool
    conn = pool.get_connection()
    try:
        conn.send_packed_command(conn.pack_commands(commands))
        replies = []
        for _ in commands:
            try:
                replies.append(conn.read_response())
            except redis.ResponseError as e:
                replies.append(e)
        return replies
    except BaseException:
        conn.disconnect()
        raise
    finally:
        pool.release(conn)


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

    def _producer_prefix(self, ctx) -> str:
        base = self.producer
        if self.streaming:
            qid = ctx.getLocalProperty("sql.streaming.queryId") if ctx else None
            batch = ctx.getLocalProperty("streaming.sql.batchId") if ctx else None
            base = base or ("spark-query-" + (qid or uuid.uuid4().hex))
            return f"{base}:{batch if batch is not None else '-'}:{ctx.partitionId() if ctx else 0}"
        return f"{base}:{ctx.partitionId() if ctx else 0}"

    def write_rows(self, iterator) -> WriteResult:
        from pyspark import TaskContext
        ctx = TaskContext.get()
        prefix = self._producer_prefix(ctx)
        enc = self.codec.encode
        fixed_key = enc(self.stream) if self.stream is not None else None
        client = connect(self.url)
        res = WriteResult(partition=ctx.partitionId() if ctx else 0)
        seen_streams: set = set()
        configured: set = set()
        pipe_rows: list = []

        def flush():
            if not pipe_rows:
                return
            if self.idmp_duration:
                for key in {r[0] for r in pipe_rows} - configured:
                    configured.add(key)
                    try:   # same value again changes nothing; a missing key is set up later
                        raw(client, "XCFGSET", key, "IDMP-DURATION", self.idmp_duration)
                    except Exception:  # noqa: BLE001
                        configured.discard(key)
            replies = _pipeline(client, [argv for _, argv, _ in pipe_rows])
            for (key, argv, rid), rep in zip(pipe_rows, replies):
                if isinstance(rep, Exception):
                    if rid is not None and "equal or smaller" in str(rep):
                        if raw(client, "XRANGE", key, rid, rid):
                            res.duplicates += 1
                            continue
                    raise RuntimeError(f"XADD {key!r} failed: {rep}") from rep
                res.written += 1
            seen_streams.update(r[0] for r in pipe_rows)
            pipe_rows.clear()

        pos = {name: i for i, name in enumerate(self.names)}
        stream_i = pos.get("stream")
        id_i = pos.get("id") if self.has_id else None
        idem_i = pos.get(self.idem_col) if self.idem_col else None
        fields_i = pos.get(self.fields_col) if self.fields_col is not None else None
        value_cols = [(enc(c), pos[c]) for c in self.value_cols]
        try:
            for n, row in enumerate(iterator):
                key = fixed_key if fixed_key is not None else enc(row[stream_i])
                fv = []
                if fields_i is not None:
                    m = row[fields_i] or ()
                    for k, v in (m.items() if isinstance(m, dict) else m):
                        if v is not None:
                            fv += [enc(k), enc(v)]
                else:
                    for c, i in value_cols:
                        v = row[i]
                        if v is not None:
                            fv += [c, enc(v)]
                if not fv:
                    raise ValueError(f"row {n} of the task has no non-null field to write")
                argv = ["XADD", key]
                rid = None
                if id_i is not None and row[id_i] is not None:
                    rid = format_id(parse_id(str(row[id_i])))
                elif self.idempotent:
                    iid = enc(row[idem_i]) if idem_i is not None else str(n).encode()
                    argv += ["IDMP", f"{prefix}:{n // self.chunk}", iid]
                argv += self.trim
                argv.append(rid or "*")
                argv += fv
                pipe_rows.append((key, argv, rid))
                if len(pipe_rows) >= self.batch:
                    flush()
            flush()
        finally:
            client.close()
        res.streams = sorted(k.decode("latin-1") for k in seen_streams)
        return res


def _rows(batches):
    """Row tuples out of Arrow record batches (maps come as lists of pairs)."""
    for b in batches:
        yield from zip(*(col.to_pylist() for col in b.columns))


class BatchWriter(DataSourceArrowWriter):
    def __init__(self, options, schema, overwrite) -> None:
        self.w = _Writer(options, schema, overwrite, streaming=False)

    def write(self, iterator):
        return self.w.write_rows(_rows(iterator))

    def commit(self, messages) -> None:
        pass

    def abort(self, messages) -> None:
        pass


class StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options, schema, overwrite) -> None:
        self.w = _Writer(options, schema, overwrite, streaming=True)

    def write(self, iterator):
        return self.w.write_rows(_rows(iterator))

    def commit(self, messages, batchId) -> None:
        pass

    def abort(self, messages, batchId) -> None:
        pass
