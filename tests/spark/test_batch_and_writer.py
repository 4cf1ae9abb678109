"""Batch reads and the sink against a real StreamDB on loopback."""

import redis

from streamdb.spark.common import parse_id


def _client(server):
    c = redis.Redis(port=server.port)
    c.flushall()
    return c


def test_batch_read_many_streams_in_parallel_partitions(spark, server, url):
    r = _client(server)
    expected = set()
    p = r.pipeline(transaction=False)
    for s in range(6):
        for i in range(120):
            sid = f"{1000 + i * 7}-{i % 3}"
            p.xadd(f"orders:{s}", {"n": str(i), "s": str(s)}, id=sid)
            expected.add((f"orders:{s}", sid))
    p.xadd("other", {"n": "1"})
    p.set("orders:not-a-stream", "x")
    p.execute()
    df = (spark.read.format("streamdb").option("url", url).option("streams", "orders:*")
          .option("partitionsPerStream", 3).option("batchSize", 25).load())
    assert df.rdd.getNumPartitions() == 18
    rows = df.collect()
    got = [(row.stream, row.id) for row in rows]
    assert len(got) == len(expected) and set(got) == expected
    row = next(x for x in rows if x.stream == "orders:2" and x.id == "1014-2")
    assert (row.ms, row.seq, row.fields) == (1014, 2, {"n": "2", "s": "2"})

    # Offsets: exclusive start, inclusive end, per stream in JSON; other streams default.
    part = (spark.read.format("streamdb").option("url", url).option("streams", "orders:0,orders:1")
            .option("startingOffsets", '{"orders:0": "1007-1"}')
            .option("endingOffsets", '{"orders:0": "1021-0", "orders:1": "1000-0"}').load())
    ids = sorted((x.stream, parse_id(x.id)) for x in part.collect())
    assert ids == [("orders:0", (1014, 2)), ("orders:0", (1021, 0)), ("orders:1", (1000, 0))]


def test_binary_values_and_typed_columns(spark, server, url):
    r = _client(server)
    every = bytes(range(256))
    r.xadd("bin", {b"k\xff": every, "qty": "3", "price": "2.5", "ok": "true"}, id="1-1")
    r.xadd("bin", {b"k\xff": b"", "qty": "4"}, id="2-1")
    df = (spark.read.format("streamdb").option("url", url).option("streams", "bin")
          .option("valueEncoding", "latin-1").load())
    first = df.orderBy("id").first()
    assert first.fields["k\xff"].encode("latin-1") == every
    # Written back with the same encoding, every byte survives.
    df.select("fields").write.format("streamdb").option("url", url).option("stream", "bin-copy") \
        .option("valueEncoding", "latin-1").mode("append").save()
    copies = r.xrange("bin-copy")
    assert sorted(c[1][b"k\xff"] for c in copies) == sorted([every, b""])

    typed = (spark.read.format("streamdb").option("url", url).option("streams", "bin")
             .option("fieldsAsColumns", "true").option("valueEncoding", "latin-1")
             .schema("id string, qty int, price double, ok boolean, missing string").load())
    assert [tuple(x) for x in typed.orderBy("id").collect()] == \
        [("1-1", 3, 2.5, True, None), ("2-1", 4, None, None, None)]


def test_writer_columns_ids_trimming_and_idempotent_rewrite(spark, server, url):
    r = _client(server)
    rows = [(f"k{i % 4}", i, f"{i * 10}") for i in range(300)]
    df = spark.createDataFrame(rows, "key string, n int, amount string").repartition(2)
    w = (df.write.format("streamdb").option("url", url).option("stream", "ledger")
         .option("producerId", "nightly-1").option("idempotencyColumn", "n").mode("append"))
    w.save()
    assert r.xlen("ledger") == 300
    w.save()                        # the same data again with the same producer: nothing new
    assert r.xlen("ledger") == 300
    entries = r.xrange("ledger")
    assert sorted(int(f[b"n"]) for _, f in entries) == list(range(300))
    assert entries[0][1].keys() == {b"key", b"n", b"amount"}

    # A stream column, explicit ids (a rewrite counts as duplicates) and MAXLEN trimming.
    ids = spark.createDataFrame([("a", f"{i}-1", str(i)) for i in range(1, 51)] +
                                [("b", f"{i}-0", str(i)) for i in range(1, 6)],
                                "stream string, id string, v string").coalesce(1)
    ids.write.format("streamdb").option("url", url).mode("append").save()
    ids.write.format("streamdb").option("url", url).mode("append").save()
    assert r.xlen("a") == 50 and r.xlen("b") == 5
    assert r.xrange("a", count=1)[0] == (b"1-1", {b"v": b"1"})
    spark.createDataFrame([(str(i),) for i in range(40)], "v string").coalesce(1).write \
        .format("streamdb").option("url", url).option("stream", "capped").option("maxlen", "10") \
        .mode("append").save()
    assert r.xlen("capped") == 10


def test_task_retry_adds_nothing_twice(server):
    """The write of one task, run again (a retry), is absorbed by XADD IDMP."""
    from pyspark.sql.types import StructType, StructField, StringType
    from streamdb.spark.writer import _Writer
    r = _client(server)
    schema = StructType([StructField("v", StringType())])
    opts = {"url": f"redis://127.0.0.1:{server.port}", "stream": "retry", "idmpChunkSize": "7",
            "batchSize": "16"}
    w = _Writer(opts, schema, False, streaming=False)     # the job: one producer id
    rows = [(str(i),) for i in range(50)]
    first = w.write_rows(iter(rows[:30]))                  # attempt 1 dies after 30 rows
    assert first.written == 30 and r.xlen("retry") == 30
    w.write_rows(iter(rows))                               # attempt 2 writes the task again
    assert r.xlen("retry") == 50
    assert [f[b"v"] for _, f in r.xrange("retry")] == [str(i).encode() for i in range(50)]
