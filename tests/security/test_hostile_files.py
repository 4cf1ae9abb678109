"""Files and payloads from an untrusted source: no code execution, no unbounded allocation.

A snapshot, an AOF or a DUMP payload may come from anyone (a copied data
directory, a RESTORE over the wire).  Checksums only catch accidents: a hostile
file carries correct ones.  Each case here gets a clear error (or, for a torn
AOF tail, the documented cut), the server never crashes, and its memory stays
bounded: the peak RSS of a server that refuses to start (wait4's ru_maxrss) or
the VmRSS of one that runs stays under RSS_BOUND_KB.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zlib
from pathlib import Path

import lmdb
import msgpack
import pytest
import redis

from helpers import ROOT, ServerProcess
from streamdb.cli.procs import free_port

RSS_BOUND_KB = 200 * 1024
HUGE_ARRAY = b"\xdd\x80\x00\x00\x00"        # msgpack array32 declaring 2^31 elements
HUGE_MAP = b"\xdf\x80\x00\x00\x00"          # map32 declaring 2^31 pairs
HUGE_BIN = b"\xc6\xff\xff\xff\xff"          # bin32 declaring 4 GiB


def vm_rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


# The server is started by a small launcher that forks it and reports its wait4
# figures.  Linux gives a process the peak RSS of the memory it was forked from (a
# vfork'ed child execs from its parent's), so a server started straight from this
# test process would report pytest's own RSS (200+ MB in a full run) as its peak.
_LAUNCHER = """
import os, sys
result_path, argv = sys.argv[1], sys.argv[2:]
pid = os.fork()
if pid == 0:
    os.execv(argv[0], argv)
_, status, usage = os.wait4(pid, 0)
with open(result_path, "w") as f:
    f.write(f"{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss}")
"""


def start_expecting_failure(data_dir: Path, *args: str, timeout: float = 30.0) -> tuple[int, int, str]:
    """Run the server on ``data_dir``; returns (exit status, peak RSS in KB, log text)."""
    log_path = data_dir / "refused.log"
    result_path = data_dir / "refused.result"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen([sys.executable, "-c", _LAUNCHER, str(result_path),
                                 sys.executable, "-m", "streamdb", "--port", str(free_port()),
                                 "--dir", str(data_dir), *args],
                                cwd=ROOT, stdout=log_file, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            pytest.fail("the server neither started nor refused within the time limit")
    status, peak_kb = map(int, result_path.read_text().split())
    return status, peak_kb, log_path.read_text(errors="replace")


# -- no code can run from data ------------------------------------------------------

def test_no_loader_can_execute_code():
    """No pickle/marshal/eval/exec in the server, and msgpack is never given object hooks."""
    src = Path(ROOT, "streamdb")
    for path in src.rglob("*.py"):
        code = "\n".join(line.split("#", 1)[0] for line in path.read_text().splitlines())
        assert not re.search(r"\b(pickle|cPickle|marshal|shelve|dill)\b", code), path
        assert not re.search(r"(?<![\w.])(eval|exec)\(", code), path
        assert not re.search(r"yaml\.load\(|__import__\(", code), path
        # ext_hook/object_hook/object_pairs_hook/list_hook could build arbitrary objects.
        assert not re.search(r"(ext_hook|object_hook|object_pairs_hook|list_hook)\s*=", code), path
    # msgpack >= 1.0 caps every max_*_len at the input's own length in unpackb, so a
    # declared count larger than the bytes present is refused before any allocation.
    assert msgpack.version >= (1, 0, 0)
    for header in (HUGE_ARRAY, HUGE_MAP, HUGE_BIN):
        with pytest.raises(ValueError):
            msgpack.unpackb(header + b"\x00" * 16, raw=True)


# -- snapshots ----------------------------------------------------------------------

def crc(data: bytes) -> bytes:
    return data + zlib.crc32(data).to_bytes(4, "big")


def make_snapshot(data_dir: Path) -> None:
    """A real snapshot of a stream ``s`` with a group (and no AOF), written by the server."""
    with ServerProcess(data_dir, "--appendonly", "no", "--save", "",
                       "--stream-node-max-entries", "10") as srv:
        r = redis.Redis(port=srv.port)
        for i in range(50):
            r.xadd("s", {"f": i})
        r.xgroup_create("s", "g", "0")
        r.xreadgroup("g", "c", {"s": ">"}, count=5)
        assert r.save()


def replace_key_record(data_dir: Path, record: bytes) -> None:
    env = lmdb.open(str(data_dir / "snapshot.lmdb"), max_dbs=4, subdir=True)
    try:
        keys = env.open_db(b"keys", create=False)
        with env.begin(write=True) as txn:
            (k, _), = list(txn.cursor(db=keys))
            txn.put(k, crc(record), db=keys)
    finally:
        env.close()


@pytest.mark.parametrize("case", ["record-huge-array", "document-huge-map", "document-huge-bin",
                                  "node-count-2^31", "group-of-wrong-shape"])
def test_hostile_snapshot_is_refused_with_bounded_memory(tmp_path, case):
    make_snapshot(tmp_path)
    if case == "record-huge-array":
        record = HUGE_ARRAY + b"\x00" * 8
    else:
        if case == "document-huge-map":
            doc = HUGE_MAP + b"\x00" * 8
        elif case == "document-huge-bin":
            doc = HUGE_BIN + b"\x00" * 8
        elif case == "node-count-2^31":
            doc = msgpack.packb({"t": "stream", "length": 1, "last_id": bytes(16),
                                 "entries_added": 1, "max_deleted_id": bytes(16),
                                 "nodes": [[bytes(16), bytes(16), 1, 1, 1, [],
                                            HUGE_ARRAY + b"\x00" * 4, True]],
                                 "groups": [], "idmp": None}, use_bin_type=True)
        else:
            doc = msgpack.packb({"t": "stream", "length": 0, "last_id": bytes(16),
                                 "entries_added": 0, "max_deleted_id": bytes(16), "nodes": [],
                                 "groups": [[b"g", bytes(16)]], "idmp": None}, use_bin_type=True)
        record = msgpack.packb([None, doc], use_bin_type=True)
    replace_key_record(tmp_path, record)
    status, peak_kb, log_text = start_expecting_failure(tmp_path, "--appendonly", "no", "--save", "")
    assert status != 0
    assert "unreadable" in log_text, log_text
    assert "Traceback" not in log_text, log_text
    assert peak_kb < RSS_BOUND_KB


# -- AOF ----------------------------------------------------------------------------

def aof_segments(data_dir: Path) -> list[Path]:
    return sorted((data_dir / "appendonlydir").glob("*.incr.aof"))


def make_aof(data_dir: Path) -> None:
    with ServerProcess(data_dir, "--appendonly", "yes", "--save", "") as srv:
        r = redis.Redis(port=srv.port)
        for i in range(10):
            r.xadd("s", {"f": i})


def frame(body: bytes) -> bytes:
    return b"#F %d %08x\r\n" % (len(body), zlib.crc32(body)) + body


def test_aof_frame_declaring_2_to_the_40_bytes_is_a_torn_tail_not_an_allocation(tmp_path):
    make_aof(tmp_path)
    seg = aof_segments(tmp_path)[-1]
    with open(seg, "ab") as f:
        f.write(b"#F 1099511627776 00000000\r\n" + b"*1\r\n$4\r\nPING\r\n")
    # With aof-load-truncated no: a clear refusal.
    status, peak_kb, log_text = start_expecting_failure(tmp_path, "--appendonly", "yes",
                                                        "--aof-load-truncated", "no")
    assert status != 0 and "truncated frame" in log_text, log_text
    assert peak_kb < RSS_BOUND_KB
    # With the default (yes): the tail is cut, the ten entries before it are served.
    with ServerProcess(tmp_path, "--appendonly", "yes", "--save", "") as srv:
        assert redis.Redis(port=srv.port).xlen("s") == 10
        assert vm_rss_kb(srv.proc.pid) < RSS_BOUND_KB
        assert "truncated frame" in srv.log_text()


@pytest.mark.parametrize("body", [
    b"*1\r\n$1099511627776\r\n",                 # a bulk of 1 TiB, in a checksummed frame
    b"*2147483647\r\n$4\r\nPING\r\n",            # an array declaring 2^31-1 arguments
    b"*4294967295\r\n",                          # ... 2^32-1
    b"*2\r\n*2147483647\r\n",                    # nested and huge
], ids=["bulk-1TiB", "array-2^31", "array-2^32", "nested-array"])
def test_checksummed_aof_frame_with_huge_declared_counts_is_refused(tmp_path, body):
    make_aof(tmp_path)
    # Not the last frame: a frame after it makes it "the middle of the file".
    with open(aof_segments(tmp_path)[-1], "ab") as f:
        f.write(frame(body) + frame(b"*1\r\n$4\r\nPING\r\n"))
    status, peak_kb, log_text = start_expecting_failure(tmp_path, "--appendonly", "yes")
    assert status != 0, log_text
    assert "bad command inside a checksummed frame" in log_text or \
        "frame ends in the middle of a command" in log_text, log_text
    assert "Traceback" not in log_text, log_text
    assert peak_kb < RSS_BOUND_KB


# -- DUMP/RESTORE over the wire -------------------------------------------------------

PAYLOAD_MAGIC = b"SDB1"


def payload(doc: bytes) -> bytes:
    return crc(PAYLOAD_MAGIC + doc)


def stream_doc(**changes) -> bytes:
    doc = {"t": "stream", "length": 1, "last_id": (1 << 64 | 0).to_bytes(16, "big"),
           "entries_added": 1, "max_deleted_id": bytes(16),
           "nodes": [[(1 << 64).to_bytes(16, "big"), (1 << 64).to_bytes(16, "big"), 1, 1, 10, [],
                      msgpack.packb([1, [b"f"], [0, 0], [[b"v"]]], use_bin_type=True), True]],
           "groups": [], "idmp": None}
    doc.update(changes)
    return msgpack.packb(doc, use_bin_type=True)


def sealed_node(blob: bytes) -> list:
    return [(1 << 64).to_bytes(16, "big"), (1 << 64).to_bytes(16, "big"), 1, 1, 10, [], blob, False]


# One node header of the columnar layout: first and last id 1-0, 1 entry, 1 live,
# 10 bytes, flags 1 (open).
NODE_HEADER = (1).to_bytes(8, "big") + bytes(8) + (1).to_bytes(8, "big") + bytes(8) + \
    (1).to_bytes(4, "big") + (1).to_bytes(4, "big") + (10).to_bytes(4, "big") + b"\x01"
OPEN_BLOB = msgpack.packb([1, [b"f"], [0, 0], [[b"v"]]], use_bin_type=True)

HOSTILE_PAYLOADS = {
    "document-huge-array": payload(HUGE_ARRAY + b"\x00" * 8),
    "document-huge-map": payload(HUGE_MAP + b"\x00" * 8),
    "string-huge-bin": payload(b"\x82\xa1t\xa6string\xa1v" + HUGE_BIN + b"\x00" * 8),
    "open-node-2^31-entries": payload(stream_doc(nodes=[
        [(1 << 64).to_bytes(16, "big"), (1 << 64).to_bytes(16, "big"), 1, 1, 10, [],
         HUGE_ARRAY + b"\x00" * 4, True]])),
    "sealed-node-2^31-entries": payload(stream_doc(nodes=[sealed_node(HUGE_ARRAY + b"\x00" * 4),
                                                          stream_doc and [(2 << 64).to_bytes(16, "big"),
                                                          (2 << 64).to_bytes(16, "big"), 1, 1, 10, [],
                                                          msgpack.packb([2, [b"f"], [0, 0], [[b"v"]]]),
                                                          True]])),
    "group-of-wrong-shape": payload(stream_doc(groups=[[b"g", bytes(16)]])),
    "pel-owner-not-bytes": payload(stream_doc(groups=[[b"g", bytes(16), 0, [[b"c", 0, 0]],
                                                       [[(1 << 64).to_bytes(16, "big"), [1], 0, 1]]]])),
    "idmp-huge-declared": payload(stream_doc(idmp=[1, 1, 0, 0, HUGE_ARRAY.hex()])),
    "ids-not-16-bytes": payload(stream_doc(last_id=b"\x01" * 17)),
    # The columnar node layout: headers of the wrong size or count, a huge claimed count.
    "node-headers-torn": payload(stream_doc(nh=b"\x00" * 44, nb=[b"x"], nd={})),
    "node-headers-without-blobs": payload(stream_doc(nh=NODE_HEADER, nb=[], nd={})),
    "node-header-huge-counts": payload(stream_doc(
        nh=NODE_HEADER[:32] + b"\xff" * 12 + b"\x01", nb=[OPEN_BLOB], nd={})),
    # A further piece of a stream with no stream to continue.
    "stream-nodes-without-a-stream": payload(msgpack.packb(
        {"t": "stream-nodes", "nh": NODE_HEADER, "nb": [OPEN_BLOB], "nd": {}}, use_bin_type=True)),
}


@pytest.fixture(scope="module")
def restore_server(tmp_path_factory):
    with ServerProcess(tmp_path_factory.mktemp("restore"), "--appendonly", "no", "--save", "") as srv:
        yield srv


@pytest.mark.parametrize("name", sorted(HOSTILE_PAYLOADS))
def test_restore_of_a_hostile_payload_is_an_error_and_memory_stays_bounded(restore_server, name):
    r = redis.Redis(port=restore_server.port, socket_timeout=10)
    internal_errors_before = restore_server.log_text().count("Internal error")
    with pytest.raises(redis.ResponseError) as err:
        r.restore(f"hostile:{name}", 0, HOSTILE_PAYLOADS[name], replace=True)
        # Accepted: then reading all of it must work (no error deferred to a read).
        r.xrange(f"hostile:{name}")
        r.xinfo_stream(f"hostile:{name}", full=True)
        r.execute_command("DEBUG", "DIGEST")
    assert str(err.value) == "Bad data format", str(err.value)
    assert r.exists(f"hostile:{name}") == 0
    assert r.ping() is True
    assert vm_rss_kb(restore_server.proc.pid) < RSS_BOUND_KB
    assert restore_server.log_text().count("Internal error") == internal_errors_before


def test_restore_still_round_trips_a_real_dump(restore_server):
    r = redis.Redis(port=restore_server.port)
    for i in range(30):
        r.xadd("real", {"f": i})
    r.xgroup_create("real", "g", "0")
    r.xreadgroup("g", "c", {"real": ">"}, count=3)
    dumped = r.dump("real")
    r.restore("copy", 0, dumped)
    assert r.xrange("copy") == r.xrange("real")
    assert r.xpending("copy", "g")["pending"] == 3


# -- RESTORE of Redis's payload form (persistence/rdb.py) ---------------------------------

def redis_payload(body: bytes, rdb_type: int = 19) -> bytes:
    """A Redis DUMP payload with a right footer (RDB version 10, CRC64) around ``body``."""
    from streamdb.persistence.rdb import payload_for
    return payload_for(rdb_type, body, 10)


def lp(*elements: bytes) -> bytes:
    """A listpack of small encoded elements (each given with its back-length)."""
    body = b"".join(elements)
    return (6 + len(body) + 1).to_bytes(4, "little") + len(elements).to_bytes(2, "little") + body + b"\xff"


def lp_int(n: int) -> bytes:        # 7-bit unsigned element + back-length 1
    return bytes((n, 1))


def lp_str(s: bytes) -> bytes:      # 6-bit string element + back-length
    return bytes((0x80 | len(s),)) + s + bytes((len(s) + 1,))


# A node 1-0 with one entry f=v: master (1 live, 0 deleted, 1 field "f", 0), then the
# entry (flags SAME_FIELDS, ms and seq differences 0, value "v", element count 4).
ONE_ENTRY_NODE = lp(lp_int(1), lp_int(0), lp_int(1), lp_str(b"f"), lp_int(0),
                    lp_int(2), lp_int(0), lp_int(0), lp_str(b"v"), lp_int(4))
NODE_KEY = b"\x10" + (1 << 64).to_bytes(16, "big")


def rdb_str(s: bytes) -> bytes:
    return bytes((len(s),)) + s     # (under 64 bytes)


def stream_body(node: bytes = ONE_ENTRY_NODE, groups: bytes = b"\x00", length: int = 1) -> bytes:
    """One node, then length, last id 1-0, first id 1-0, max-deleted 0-0, entries-added 1."""
    nodes = b"\x01" + NODE_KEY + b"\x80" + len(node).to_bytes(4, "big") + node
    return nodes + bytes((length, 1, 0, 1, 0, 0, 0, 1)) + groups


HUGE_LENGTH = b"\x81" + b"\xff" * 8          # a 64-bit length of 2^64-1

REDIS_HOSTILE_PAYLOADS = {
    "lzf-string-claiming-4GiB": redis_payload(b"\xc3\x02\x80\xff\xff\xff\xff\x00a", 0),
    "lzf-reference-before-start": redis_payload(b"\xc3\x02\x05\x20\x05", 0),
    "string-2^64-bytes": redis_payload(HUGE_LENGTH, 0),
    "stream-2^64-nodes": redis_payload(HUGE_LENGTH),
    "node-key-not-an-id": redis_payload(b"\x01\x03abc" + b"\x00" * 20),
    "listpack-total-bytes-wrong": redis_payload(stream_body(node=b"\xff\xff\x00\x00" + ONE_ENTRY_NODE[4:])),
    "listpack-huge-master-fields": redis_payload(stream_body(node=lp(
        lp_int(1), lp_int(0), b"\xf3\xff\xff\xff\x7f\x05", lp_str(b"f"), lp_int(0)))),
    "node-counts-lie": redis_payload(stream_body(node=lp(
        lp_int(5), lp_int(0), lp_int(1), lp_str(b"f"), lp_int(0),
        lp_int(2), lp_int(0), lp_int(0), lp_str(b"v"), lp_int(4)))),
    "stream-length-lies": redis_payload(stream_body(length=7)),
    "group-2^64-pel-entries": redis_payload(stream_body(groups=b"\x01" + rdb_str(b"g") + b"\x01\x00\x01" + HUGE_LENGTH)),
    "consumer-pending-not-in-pel": redis_payload(stream_body(
        groups=b"\x01" + rdb_str(b"g") + b"\x01\x00\x01" + b"\x00" +
        b"\x01" + rdb_str(b"c") + bytes(8) + b"\x01" + (1 << 64).to_bytes(16, "big"))),
    "pel-entry-without-consumer": redis_payload(stream_body(
        groups=b"\x01" + rdb_str(b"g") + b"\x01\x00\x01" +
        b"\x01" + (1 << 64).to_bytes(16, "big") + bytes(8) + b"\x01" + b"\x00")),
    "bytes-after-the-value": redis_payload(stream_body() + b"\x00"),
}


@pytest.mark.parametrize("name", sorted(REDIS_HOSTILE_PAYLOADS))
def test_restore_of_a_hostile_redis_payload_is_an_error(restore_server, name):
    r = redis.Redis(port=restore_server.port, socket_timeout=10)
    internal_errors_before = restore_server.log_text().count("Internal error")
    with pytest.raises(redis.ResponseError) as err:
        r.restore(f"hostile:{name}", 0, REDIS_HOSTILE_PAYLOADS[name], replace=True)
    assert str(err.value) == "Bad data format", str(err.value)
    assert r.exists(f"hostile:{name}") == 0
    assert r.ping() is True
    assert vm_rss_kb(restore_server.proc.pid) < RSS_BOUND_KB
    assert restore_server.log_text().count("Internal error") == internal_errors_before


def test_restore_of_a_well_formed_hand_made_redis_payload(restore_server):
    """The cases above fail for what they break, not for their frame: unbroken, it loads."""
    r = redis.Redis(port=restore_server.port)
    good = redis_payload(stream_body(groups=b"\x01" + rdb_str(b"g") + b"\x01\x00\x01" +
                                     b"\x01" + (1 << 64).to_bytes(16, "big") + bytes(8) + b"\x02" +
                                     b"\x01" + rdb_str(b"c") + bytes(8) + b"\x01" +
                                     (1 << 64).to_bytes(16, "big")))
    assert r.restore("hand-made", 0, good, replace=True)
    assert r.xrange("hand-made") == [(b"1-0", {b"f": b"v"})]
    assert r.xpending_range("hand-made", "g", "-", "+", 10)[0]["times_delivered"] == 2


def test_fuzzed_redis_payloads_parse_or_fail_cleanly(restore_server):
    """Random byte changes (with the CRC64 made right again) of a real Redis-form payload:
    each RESTORE is OK or a clear error, an accepted value reads back whole, and the
    server keeps serving."""
    import random

    from streamdb.persistence import rdb
    r = redis.Redis(port=restore_server.port, socket_timeout=10)
    for i in range(40):
        r.xadd("fuzz-src", {"f": i, "text": "some words " * (i % 4)})
    r.xgroup_create("fuzz-src", "g", "0")
    r.xreadgroup("g", "c1", {"fuzz-src": ">"}, count=7)
    r.xreadgroup("g", "c2", {"fuzz-src": ">"}, count=3)
    r.config_set("dump-payload-format", "redis")
    try:
        body = r.dump("fuzz-src")[:-10]
    finally:
        r.config_set("dump-payload-format", "streamdb")
    rng = random.Random(1027)
    accepted = refused = 0
    for n in range(400):
        mutated = bytearray(body)
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(1, len(mutated))
            choice = rng.random()
            if choice < 0.6:
                mutated[at] = rng.randrange(256)
            elif choice < 0.8:
                del mutated[at:at + rng.randint(1, 8)]
            else:
                mutated[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        fuzzed = rdb.payload_for(mutated[0], bytes(mutated[1:]), 10)
        try:
            rdb.load_dump_payload(fuzzed)       # in-process: a value or RdbError, nothing else
        except rdb.RdbError:
            pass
        if n % 4:
            continue                            # every fourth one also over the wire
        try:
            r.restore("fuzzed", 0, fuzzed, replace=True)
        except redis.ResponseError as e:
            assert str(e).startswith("Bad data format"), str(e)
            refused += 1
            continue
        accepted += 1
        if r.type("fuzzed") == b"stream":
            r.xrange("fuzzed")
            r.xinfo_stream("fuzzed", full=True)
            for g in r.xinfo_groups("fuzzed"):
                r.xpending_range("fuzzed", g["name"], "-", "+", 100)
    assert refused > 0
    assert r.ping() is True
    assert "Internal error" not in restore_server.log_text()


def test_fuzzed_rdb_files_are_read_or_refused_cleanly():
    """streamdb-admin import-rdb's reader on random changes of an RDB file (its CRC64
    zeroed, as redis-server writes with rdbchecksum no): records or RdbError, nothing else."""
    import random

    from streamdb.engine import ConsumerGroup, Stream
    from streamdb.persistence import rdb
    stream = Stream()
    for i in range(30):
        stream.append(((1 + i) << 64) | i, [b"f", b"%d" % i, b"text", b"words " * (i % 5)], 8, 0)
    g = ConsumerGroup(b"g", (10 << 64) | 9, 10)
    stream.groups = {b"g": g}
    g.add_pending((3 << 64) | 2, g.create_consumer(b"c", 5), 7, 2)
    body = rdb.dump_payload(stream)[1:-10]
    records = (b"\xfa\x09redis-ver\x067.0.15\xfe\x00\xfb\x02\x00" + b"\x00\x01a\x05hello" +
               b"\xfc" + (1 << 41).to_bytes(8, "little") + b"\x13\x01s" + body +
               b"\x04\x01h\x01\x01f\x01v")
    original = b"REDIS0010" + records + b"\xff" + bytes(8)
    assert [r.key for r in rdb.rdb_file_records(original, [])] == [b"a", b"s", b"h"]
    rng = random.Random(2611)
    for _ in range(500):
        data = bytearray(original)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(9, len(data) - 9)
            if rng.random() < 0.7:
                data[at] = rng.randrange(256)
            else:
                del data[at:at + rng.randint(1, 6)]
        try:
            for record in rdb.rdb_file_records(bytes(data), []):
                if record.rdb_type in rdb.STREAM_TYPES:
                    try:        # what the server does with each record: decode or refuse
                        rdb.read_object(rdb.Reader(record.body), record.rdb_type)
                    except rdb.RdbError:
                        pass
        except rdb.RdbError:
            pass
