"""aof-use-rdb-preamble: the two forms of an AOF rewrite's base segment, each loaded by a
restarted server into the same state (DEBUG DIGEST) as the one that wrote it."""

from __future__ import annotations

import time

import pytest
import redis

from helpers import ServerProcess
from streamdb.persistence.aof import read_segment, split_commands


def _workload(r: redis.Redis) -> None:
    r.set("str", "hello")
    r.set("ttl", "v", px=3_600_000)
    for i in range(1, 11):
        r.xadd("s", {"a": i, "b": "x"}, id=f"1-{i}")
    r.xgroup_create("s", "g", id="0")
    r.xreadgroup("g", "alice", {"s": ">"}, count=4)
    r.xreadgroup("g", "bob", {"s": ">"}, count=2)
    r.xack("s", "g", "1-1")
    r.xdel("s", "1-1")                                   # read and acked: no PEL entry left
    r.xclaim("s", "g", "bob", 0, ["1-2"])
    r.xnack("s", "g", "FAIL", "1-4")                     # released, not in id order
    r.xnack("s", "g", "SILENT", "1-3")
    r.xgroup_createconsumer("s", "g", "carol")
    r.execute_command("XGROUP", "CREATE", "s", "h", "$", "ENTRIESREAD", "9")
    for i in range(20):
        r.xadd("t", {"f": i}, maxlen=5, approximate=False)
    r.xgroup_create("e", "g", id="$", mkstream=True)     # an empty stream with a group
    r.execute_command("XSETID", "e", "5-5", "ENTRIESADDED", "3", "MAXDELETEDID", "4-0")
    r.xadd("i", {"f": "v"}, id="1-1")
    r.execute_command("XCFGSET", "i", "IDMP-DURATION", "300", "IDMP-MAXSIZE", "50")
    for pid, iid in ((b"p1", b"a"), (b"p1", b"b"), (b"p2", b"a")):
        r.execute_command("XADD", "i", "IDMP", pid, iid, "*", "f", iid)


def _rewrite(r: redis.Redis) -> None:
    assert r.bgrewriteaof()
    deadline = time.monotonic() + 30
    while r.info("persistence")["aof_rewrite_in_progress"] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert r.info("persistence")["aof_last_bgrewrite_status"] == "ok"


@pytest.mark.parametrize("preamble", ["yes", "no"])
def test_both_base_forms_restore_the_same_state(tmp_path, preamble):
    d = tmp_path / "data"
    args = ("--appendonly", "yes", "--save", "", "--stream-node-max-entries", "3")
    srv = ServerProcess(d, *args).start()
    try:
        r = redis.Redis(port=srv.port)
        _workload(r)
        # Set at run time: the directive is read when a rewrite starts.
        assert r.config_set("aof-use-rdb-preamble", preamble)
        _rewrite(r)
        r.xadd("s", {"after": "rewrite"}, id="2-1")
        digest = r.execute_command("DEBUG", "DIGEST")
        bases = list((d / "appendonlydir").glob("*.base.aof"))
        assert len(bases) == 1
        commands = [argv[0] for frame in read_segment(bases[0].read_bytes()).frames
                    for argv in split_commands(frame)]
        if preamble == "yes":
            assert set(commands) == {b"SELECT", b"RESTORE"}
        else:
            assert b"RESTORE" not in commands
            assert {b"XADD", b"XSETID", b"XGROUP", b"XCLAIM", b"XNACK", b"XCFGSET",
                    b"XIDMPRECORD", b"SET", b"PEXPIREAT"} <= set(commands)
        srv.kill9()
        srv.stop()
        srv = ServerProcess(d, *args).start()
        r = redis.Redis(port=srv.port)
        assert r.execute_command("DEBUG", "DIGEST") == digest
        # the restored IDMP map still answers a retried producer with its entry
        first = r.execute_command("XRANGE", "i", "-", "+")[1][0]
        assert r.execute_command("XADD", "i", "IDMP", "p1", "a", "*", "f", "again") == first
        assert r.xpending("s", "g")["pending"] == 5
        # the NACKed entries come back unowned, in their release order
        got = r.xreadgroup("g", "dave", {"s": ">"}, count=2, claim_min_idle_time=3_600_000)
        assert [e[0] for e in got[0][1]] == [b"1-4", b"1-3"]
    finally:
        srv.stop()
