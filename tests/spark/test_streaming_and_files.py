"""Streaming reads (checkpoint restarts, trimmed data), the streaming sink, the offline reader."""

import time

import pytest
import redis

from helpers import ServerProcess


def _client(server):
    c = redis.Redis(port=server.port)
    c.flushall()
    return c


def _add(r, key, start, n):
    p = r.pipeline(transaction=False)
    for i in range(start, start + n):
        p.xadd(key, {"i": str(i)}, id=f"{i}-0")
    p.execute()


def _run(spark, url, checkpoint, out, **opts):
    reader = spark.readStream.format("streamdb").option("url", url)
    for k, v in {"streams": "ev:*", "startingOffsets": "earliest", **opts}.items():
        reader = reader.option(k, v)
    q = (reader.load().selectExpr("stream", "id", "fields['i'] AS i").writeStream
         .format("parquet").option("path", out).option("checkpointLocation", checkpoint)
         .trigger(availableNow=True).start())
    try:
        q.awaitTermination(120)
    except Exception:   # noqa: BLE001 - a failed query: q.exception() tells why
        pass
    finally:
        q.stop()
    return q


def test_restart_from_checkpoint_no_duplicates_no_gaps(spark, server, url, checkpoint, tmp_path):
    r = _client(server)
    _add(r, "ev:a", 1, 40)
    _add(r, "ev:b", 1, 15)
    out = str(tmp_path / "out")
    q = _run(spark, url, checkpoint, out, maxEntriesPerTrigger="20")
    assert q.exception() is None
    assert q.lastProgress["numInputRows"] <= 20
    _add(r, "ev:a", 41, 25)
    _add(r, "ev:c", 1, 5)           # a stream that appears later is read from its start
    q = _run(spark, url, checkpoint, out, maxEntriesPerTrigger="20")
    assert q.exception() is None
    got = [(x.stream, int(x.i)) for x in spark.read.parquet(out).collect()]
    expected = [("ev:a", i) for i in range(1, 66)] + [("ev:b", i) for i in range(1, 16)] + \
        [("ev:c", i) for i in range(1, 6)]
    assert sorted(got) == sorted(expected)           # every entry exactly once


def test_trimmed_away_entries_fail_the_query_unless_told(spark, server, url, checkpoint, tmp_path):
    r = _client(server)
    _add(r, "ev:t", 1, 10)
    out = str(tmp_path / "out")
    assert _run(spark, url, checkpoint, out).exception() is None
    _add(r, "ev:t", 11, 20)
    r.xtrim("ev:t", minid="16-0", approximate=False)                 # 11..15 were never read
    q = _run(spark, url, checkpoint, out)
    assert q.exception() is not None and "failOnDataLoss" in str(q.exception())
    q = _run(spark, url, checkpoint, out, failOnDataLoss="false")
    assert q.exception() is None
    got = sorted(int(x.i) for x in spark.read.parquet(out).collect())
    assert got == list(range(1, 11)) + list(range(16, 31))


def test_streaming_sink_is_exactly_once_per_batch(spark, server, url, checkpoint):
    import os

    r = _client(server)
    _add(r, "ev:src", 1, 30)

    def run():
        q = (spark.readStream.format("streamdb").option("url", url).option("streams", "ev:src")
             .option("startingOffsets", "earliest").option("maxEntriesPerTrigger", "12").load()
             .selectExpr("fields", "id AS src_id").writeStream.format("streamdb")
             .option("url", url).option("stream", "sink").option("idempotencyColumn", "src_id")
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        q.awaitTermination(120)
        assert q.exception() is None

    run()
    assert [f[b"i"] for _, f in r.xrange("sink")] == [str(i).encode() for i in range(1, 31)]
    # A crash after the sink wrote batch 2 but before Spark committed it: the restarted
    # query runs batch 2 again (same query id and batch id), and XADD IDMP absorbs it.
    for name in ("2", ".2.crc"):
        path = os.path.join(checkpoint, "commits", name)
        if os.path.exists(path):
            os.remove(path)
    run()
    assert [f[b"i"] for _, f in r.xrange("sink")] == [str(i).encode() for i in range(1, 31)]
    assert r.xinfo_stream("sink")["iids-duplicates"] == 6     # batch 2 (25..30) came again


def test_offline_reader_reads_snapshot_plus_aof_tail(spark, tmp_path):
    data = tmp_path / "data"
    with ServerProcess(data, "--appendonly", "yes", "--stream-node-max-entries", "10") as srv:
        r = redis.Redis(port=srv.port)
        _add(r, "off:a", 1, 95)
        _add(r, "off:b", 1, 20)
        r.xadd("off:bin", {"v": bytes(range(256))}, id="1-0")
        r.set("plain", "x")
        assert r.bgsave()
        deadline = time.time() + 30
        while r.info("persistence").get("rdb_bgsave_in_progress") and time.time() < deadline:
            time.sleep(0.05)
        assert (data / "snapshot.lmdb").exists()
        _add(r, "off:a", 96, 10)          # only in the AOF tail
        _add(r, "off:c", 1, 3)
        r.xdel("off:b", "5-0")
        r.xtrim("off:b", minid="3-0", approximate=False)
    df = (spark.read.format("streamdb-files").option("path", str(data))
          .option("streams", "off:*").option("nodesPerPartition", "3")
          .option("valueEncoding", "latin-1").load())
    assert df.rdd.getNumPartitions() >= 4          # off:a alone has 11 nodes
    rows = df.collect()
    got = sorted((x.stream, x.ms) for x in rows)
    expected = [("off:a", i) for i in range(1, 106)] + \
        [("off:b", i) for i in range(3, 21) if i != 5] + [("off:bin", 1)] + [("off:c", i) for i in range(1, 4)]
    assert got == sorted(expected)
    binrow = next(x for x in rows if x.stream == "off:bin")
    assert binrow.fields["v"].encode("latin-1") == bytes(range(256))


def test_offline_reader_wants_a_data_directory(spark, tmp_path):
    with pytest.raises(Exception, match="neither a snapshot"):
        spark.read.format("streamdb-files").option("path", str(tmp_path)).load().collect()
