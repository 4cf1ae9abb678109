"""The read and sink fast paths give exactly what the plain per-entry / per-row code gives.

Read: pipelined XRANGE pages on a raw socket, Arrow columns built without a Python
object per entry.  Sink: XADDs encoded by Arrow kernels, two chunks in flight.
"""

import pyarrow as pa
import pytest
import redis
from pyspark.sql.types import (BinaryType, BooleanType, DoubleType, LongType, MapType,
                               StringType, StructField, StructType)

from streamdb.spark.common import Codec, RespConnection, connect, encode_command, xrange_pages
from streamdb.spark.rows import RowBuilder
from streamdb.spark.writer import _Writer

META = StructType([StructField("stream", StringType()), StructField("id", StringType()),
                   StructField("ms", LongType()), StructField("seq", LongType()),
                   StructField("fields", MapType(StringType(), StringType()))])


def _client(server):
    c = redis.Redis(port=server.port)
    c.flushall()
    return c


# ---------------------------------------------------------------------------
# Read
# ---------------------------------------------------------------------------


def test_arrow_batch_matches_the_entries_one_by_one():
    page = [[b"%d-%d" % (1700000000000 + i // 3, i % 3),
             [b"n", str(i).encode(), b"t", "é".encode()] if i % 5 else []] for i in range(50)]
    page.append([b"18446744073709551615-9223372036854775807", [b"k", b"v", b"k", b"w"]])
    got = RowBuilder(META, Codec("utf-8"), False).batch("s:1", page[:-1]).to_pylist()
    want = [{"stream": "s:1", "id": i.decode(), "ms": int(i.split(b"-")[0]),
             "seq": int(i.split(b"-")[1]),
             "fields": [(fv[k].decode(), fv[k + 1].decode()) for k in range(0, len(fv), 2)]}
            for i, fv in page[:-1]]
    assert got == want
    # ms above 2^63 does not fit a long: the row is refused, not wrapped around.
    with pytest.raises((pa.ArrowInvalid, OverflowError)):
        RowBuilder(META, Codec("utf-8"), False).batch("s", page[-1:])


def test_some_columns_only_and_latin1_values():
    schema = StructType([StructField("seq", LongType()),
                         StructField("fields", MapType(StringType(), BinaryType()))])
    page = [[b"5-7", [b"k\xff", bytes(range(256))]], [b"6-0", []]]
    got = RowBuilder(schema, Codec("latin-1"), False).batch("s", page).to_pylist()
    assert got == [{"seq": 7, "fields": [("k\xff", bytes(range(256)))]}, {"seq": 0, "fields": []}]


def test_pages_cross_exclusive_bounds_and_an_abandoned_read_leaves_no_reply_behind(server):
    r = _client(server)
    p = r.pipeline(transaction=False)
    for i in range(1, 101):
        p.xadd("pages", {"i": str(i)}, id=f"{i}-1")
    p.execute()
    client = connect(f"redis://127.0.0.1:{server.port}")
    pages = list(xrange_pages(client, b"pages", (10, 1), (95, 1), 7, exclusive_lo=True))
    assert [len(pg) for pg in pages] == [7] * 12 + [1]
    assert [int(e[1][1]) for pg in pages for e in pg] == list(range(11, 96))
    # Exactly a page's worth: the empty last page is not yielded.
    assert [len(pg) for pg in xrange_pages(client, b"pages", (1, 1), (14, 1), 7)] == [7, 7]
    # The reader stops after one page while the next request is in flight: the
    # connection is dropped, so the next command does not read a stale reply.
    gen = xrange_pages(client, b"pages", (0, 0), (100, 1), 10)
    assert len(next(gen)) == 10
    gen.close()
    for _ in range(3):
        assert client.execute_command("XLEN", "pages") == 100
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        r.set("plain", "x")
        list(xrange_pages(client, b"plain", (0, 0), (1, 1), 10))
    client.close()


def test_resp_connection_keeps_replies_in_order_and_errors_as_values(server):
    client = connect(f"redis://127.0.0.1:{server.port}")
    conn = RespConnection(client)
    conn.send(encode_command("SET", "a", "1") + encode_command("INCR", "nokey:x", "extra") +
              encode_command("GET", "a"))
    ok, err, val = conn.replies(3)
    assert ok == b"OK" and isinstance(err, redis.ResponseError) and val == b"1"
    conn.close()
    client.close()


# ---------------------------------------------------------------------------
# Sink
# ---------------------------------------------------------------------------


class _Recorder:
    """A stand-in for the task's connection: what would be sent, chunk by chunk."""

    def __init__(self) -> None:
        self.prefix, self.n, self.chunks = "job:3", 5, []

    def send(self, payload, count, keys, key_of, rids=None):
        self.chunks.append((bytes(payload), count, sorted(keys), [key_of(i) for i in range(count)]))


def _same_commands(options, schema, batch):
    w = _Writer({"url": "redis://unused", "idmpChunkSize": "7", "batchSize": "3", **options},
                schema, False, streaming=False)
    assert w._arrow_refusal(batch) is None
    by_arrow, by_rows = _Recorder(), _Recorder()
    w._send_arrow(by_arrow, batch)
    w._send_rows(by_rows, zip(*(c.to_pylist() for c in batch.columns)))
    assert by_arrow.chunks == by_rows.chunks and by_arrow.n == by_rows.n == 5 + batch.num_rows
    return b"".join(c[0] for c in by_arrow.chunks)


def test_arrow_encoded_xadds_are_the_row_path_bytes():
    fields = pa.array([[("a", "1"), ("b", "é")], [("c", "3")], [("k", "")]] * 3,
                      type=pa.map_(pa.string(), pa.string()))
    schema = StructType([StructField("fields", MapType(StringType(), StringType()))])
    batch = pa.RecordBatch.from_arrays([fields], names=["fields"])
    sent = _same_commands({"stream": "s"}, schema, batch)
    assert sent.startswith(b"*10\r\n$4\r\nXADD\r\n$1\r\ns\r\n$4\r\nIDMP\r\n$7\r\njob:3:0\r\n$1\r\n5\r\n"
                           b"$1\r\n*\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$2\r\n\xc3\xa9\r\n")
    _same_commands({"stream": "s", "maxlen": "10", "trimApprox": "true"}, schema, batch.slice(2, 5))
    _same_commands({"stream": "s", "idempotent": "false"}, schema, batch)

    schema = StructType([StructField("stream", StringType()), StructField("n", LongType()),
                         StructField("ok", BooleanType()), StructField("b", BinaryType()),
                         StructField("v", StringType())])
    cols = [pa.array(["x", "y", None, "x"]), pa.array([1, None, 3, -4], pa.int64()),
            pa.array([True, None, False, None]), pa.array([b"\x00\xff", None, b"", None]),
            pa.array(["v1", "v2", None, None])]
    batch = pa.RecordBatch.from_arrays(cols, names=[f.name for f in schema.fields])
    _same_commands({"idempotencyColumn": "n"}, schema, batch)
    _same_commands({}, schema, batch)


def test_a_row_without_fields_is_refused_by_both_paths():
    schema = StructType([StructField("fields", MapType(StringType(), StringType()))])
    batch = pa.RecordBatch.from_arrays([pa.array([[("a", "1")], None, []],
                                                 type=pa.map_(pa.string(), pa.string()))],
                                       names=["fields"])
    w = _Writer({"url": "redis://unused", "idmpChunkSize": "7", "stream": "s"}, schema, False, False)
    with pytest.raises(ValueError, match="row 6 of the task has no non-null field"):
        w._send_arrow(_Recorder(), batch)
    with pytest.raises(ValueError, match="row 6 of the task has no non-null field"):
        w._send_rows(_Recorder(), zip(*(c.to_pylist() for c in batch.columns)))


def test_types_arrow_cannot_spell_like_python_take_the_row_path():
    schema = StructType([StructField("price", DoubleType())])
    w = _Writer({"url": "redis://unused", "idmpChunkSize": "7", "stream": "s"}, schema, False, False)
    batch = pa.RecordBatch.from_arrays([pa.array([2.5])], names=["price"])
    assert w._arrow_refusal(batch) is not None
    schema = StructType([StructField("fields", MapType(StringType(), StringType()))])
    w = _Writer({"url": "redis://unused", "idmpChunkSize": "7", "stream": "s"}, schema, False, False)
    nulls = pa.RecordBatch.from_arrays([pa.array([[("a", None)]], type=pa.map_(pa.string(), pa.string()))],
                                       names=["fields"])
    assert w._arrow_refusal(nulls) is not None


def test_sink_mixes_both_paths_in_one_task_with_the_same_idempotent_ids(server, spark, url):
    r = _client(server)
    mt = pa.map_(pa.string(), pa.string())
    with_nulls = pa.RecordBatch.from_arrays(     # a null map value: the row path
        [pa.array([[("k", str(i)), ("skip", None if i % 2 else "x")] for i in range(700)], type=mt)],
        names=["fields"])
    plain = pa.RecordBatch.from_arrays(          # the Arrow path
        [pa.array([[("k", str(i))] for i in range(700, 2500)], type=mt)], names=["fields"])
    schema = StructType([StructField("fields", MapType(StringType(), StringType()))])
    opts = {"url": url, "stream": "mixed", "producerId": "mix-1", "batchSize": "64"}
    res = _Writer(opts, schema, False, streaming=False).write_arrow(iter([with_nulls, plain]))
    assert res.written == 2500 and res.streams == ["mixed"]
    got = r.xrange("mixed")
    assert [int(f[b"k"]) for _, f in got] == list(range(2500))
    assert all((b"skip" in f) == (int(f[b"k"]) % 2 == 0 and int(f[b"k"]) < 700) for _, f in got)
    # The same rows again, all through the row path: the same IDMP ids, nothing added.
    again = _Writer({**opts, "arrowEncoding": "false"}, schema, False, streaming=False)
    assert again.write_arrow(iter([with_nulls, plain])).written == 2500
    assert r.xlen("mixed") == 2500

    # Typed columns through the Arrow path, read back through the Arrow builder.
    typed = spark.createDataFrame([(i, i % 3 == 0, f"v{i}" if i % 4 else None) for i in range(300)],
                                  "n long, flag boolean, v string").repartition(2)
    typed.write.format("streamdb").option("url", url).option("stream", "typed") \
        .option("idempotencyColumn", "n").mode("append").save()
    back = (spark.read.format("streamdb").option("url", url).option("streams", "typed")
            .option("batchSize", 64).option("partitionsPerStream", 3).load())
    seen = {int(x.fields["n"]): x.fields for x in back.collect()}
    assert len(seen) == 300
    assert seen[3] == {"n": "3", "flag": "true", "v": "v3"} and seen[4] == {"n": "4", "flag": "false"}
