"""Keyspace notifications of what Redis 7.0 cannot show side by side (the differential
test, tests/differential/test_keyspace_events.py, covers the rest): the events of the
Redis 8.x commands and of StreamDB's own (retention), an AOF replay that publishes
nothing, and the README's "Watching for new streams" block."""

from __future__ import annotations

import time

import pytest
import redis

from docblocks import run_block
from helpers import ServerProcess, wait_until

DOC_BLOCKS = {"README.md": {"keyspace-events"}}

_END = "ksn:end"


class Listener:
    """A subscriber to every keyspace event channel (and the end marker)."""

    def __init__(self, port: int) -> None:
        self.r = redis.Redis(port=port, socket_timeout=10)
        self.ps = self.r.pubsub(ignore_subscribe_messages=True)
        self.ps.psubscribe("__key*@*__:*")
        self.ps.subscribe(_END)
        wait_until(lambda: self.r.pubsub_numsub(_END)[0][1] == 1, what="subscribed")

    def events(self) -> list[tuple[bytes, bytes]]:
        """(channel, message) of each event up to the end marker, published now."""
        self.r.publish(_END, "x")
        got = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            # (None also for a subscribe confirmation redis-py leaves out)
            m = self.ps.get_message(timeout=1)
            if m is None:
                continue
            if m["channel"] == _END.encode():
                return got
            got.append((m["channel"], m["data"]))
        raise AssertionError(f"no end marker after {got}")

    def close(self) -> None:
        self.ps.close()
        self.r.close()


@pytest.fixture
def srv(tmp_path):
    with ServerProcess(tmp_path / "sdb", "--save", "", "--hz", "50",
                       "--stream-node-max-entries", "10",
                       "--notify-keyspace-events", "KEA") as s:
        yield s


@pytest.fixture
def rc(srv):
    c = redis.Redis(port=srv.port, socket_timeout=10)
    yield c
    c.close()


@pytest.fixture
def listener(srv):
    lst = Listener(srv.port)
    yield lst
    lst.close()


def _stream_events(got) -> list[tuple[bytes, bytes]]:
    """The keyspace (K) half: (key, event)."""
    return [(ch.split(b":", 1)[1], ev) for ch, ev in got if ch.startswith(b"__keyspace@")]


def test_redis_8_stream_commands_publish_their_pinned_events(rc, listener):
    """XDELEX and XACKDEL publish xdel when an entry goes (Redis 8.2's xdelexCommand),
    XCFGSET xcfgset; XNACK, like XACK and XCLAIM, changes only a PEL and publishes
    nothing; a duplicate XADD IDMP adds nothing and publishes nothing."""
    for i in range(1, 6):
        rc.xadd("s", {"f": "v"}, id=f"{i}-1")
    rc.xgroup_create("s", "g", id="0")
    rc.xreadgroup("g", "c", {"s": ">"})
    listener.events()
    rc.execute_command("XDELEX", "s", "IDS", "1", "1-1")
    rc.execute_command("XDELEX", "s", "IDS", "1", "9-9")                  # missing: none
    rc.execute_command("XDELEX", "s", "ACKED", "IDS", "1", "2-1")        # referenced: none
    rc.execute_command("XACKDEL", "s", "g", "IDS", "1", "2-1")
    rc.execute_command("XACKDEL", "s", "g", "IDS", "1", "2-1")           # not pending: none
    rc.execute_command("XNACK", "s", "g", "SILENT", "IDS", "1", "3-1")
    rc.execute_command("XCFGSET", "s", "IDMP-DURATION", "100")
    rc.execute_command("XADD", "s", "IDMP", "p", "i1", "*", "f", "v")
    rc.execute_command("XADD", "s", "IDMP", "p", "i1", "*", "f", "v")    # duplicate: none
    assert _stream_events(listener.events()) == [
        (b"s", b"xdel"), (b"s", b"xdel"), (b"s", b"xcfgset"), (b"s", b"xadd")]


def test_streamdb_group_commands_publish_what_their_effects_would(rc, listener):
    """A dead letter is the server's XADD to the dead-letter stream (its XACK, like any
    XACK, publishes nothing); STREAMDB.GROUP SETID is an XGROUP SETID; setting a policy
    changes no key's data and publishes nothing, as XNACK."""
    rc.xadd("jobs", {"f": "v"}, id="1-1")
    rc.xgroup_create("jobs", "g", id="0")
    rc.execute_command("STREAMDB.GROUP", "SET", "jobs", "g", "MAXDELIVERIES", 1,
                       "DEADLETTER", "jobs:dlq")
    rc.xreadgroup("g", "c", {"jobs": ">"})
    listener.events()
    rc.xreadgroup("g", "c", {"jobs": "0"})                 # dead-letters 1-1
    rc.execute_command("STREAMDB.GROUP", "SETID", "jobs", "g", "EARLIEST")
    rc.execute_command("STREAMDB.GROUP", "RESET", "jobs", "g")
    assert _stream_events(listener.events()) == [(b"jobs:dlq", b"xadd"), (b"jobs", b"xgroup-setid")]


def test_retention_trims_publish_xtrim(rc, listener):
    """A retention trim is the server's XTRIM: it publishes what that XTRIM would."""
    pipe = rc.pipeline(transaction=False)
    for i in range(30):
        pipe.xadd("old", {"f": "v"}, id=f"{1000 + i}-0")
    pipe.execute()
    listener.events()
    rc.execute_command("STREAMDB.RETENTION", "SET", "old", "MAXAGE", 60_000)
    wait_until(lambda: rc.xlen("old") == 10, what="retention")
    got = _stream_events(listener.events())
    assert got and set(got) == {(b"old", b"xtrim")}


def test_an_aof_replay_publishes_nothing(rc, listener):
    """DEBUG LOADAOF replays every write while clients listen: what it re-applies was
    published when it was written."""
    rc.xadd("s", {"f": "v"}, id="1-1")
    rc.set("k", "v")
    rc.execute_command("BGREWRITEAOF")
    wait_until(lambda: rc.info("persistence")["aof_rewrite_in_progress"] == 0, what="rewrite")
    rc.xadd("s", {"f": "v"}, id="2-1")
    listener.events()
    rc.execute_command("DEBUG", "LOADAOF")
    assert rc.xlen("s") == 2
    rc.xadd("s", {"f": "v"}, id="3-1")          # while a client's writes still publish
    assert _stream_events(listener.events()) == [(b"s", b"xadd")]


def test_the_readme_keyspace_events_block(srv, tmp_path):
    out = run_block("README.md", "keyspace-events", cwd=tmp_path, ports={6379: srv.port})
    lines = out.splitlines()
    assert lines[0] == "OK"
    assert lines[-7:] == ["psubscribe", "__keyevent@*__:new", "1",
                          "pmessage", "__keyevent@*__:new", "__keyevent@0__:new", "orders:eu"]


def test_a_replica_publishes_what_it_applies_from_its_primary(tmp_path):
    """As a Redis replica: the full sync's data set loads with no event (Redis loads an
    RDB), then its subscribers hear the events of the writes it applies (its own
    setting; the primary's is off), in the effects' terms: an XREADGROUP arrives as
    CREATECONSUMER, XCLAIM and SETID, so it publishes xgroup-createconsumer and
    xgroup-setid; an expired key arrives as the primary's DEL."""
    with ServerProcess(tmp_path / "p", "--save", "") as p, \
            ServerProcess(tmp_path / "r", "--save", "", "--notify-keyspace-events", "KEA") as rep:
        rp, rr = redis.Redis(port=p.port), redis.Redis(port=rep.port)
        listener = Listener(rep.port)
        try:
            rp.xadd("before", {"f": "v"}, id="1-1")
            rp.set("plain", "v")
            rr.replicaof("127.0.0.1", p.port)
            wait_until(lambda: rr.info("replication")["master_link_status"] == "up", what="link")
            rp.xadd("rs", {"f": "v"}, id="1-1")
            rp.xgroup_create("rs", "g", id="0")
            rp.xreadgroup("g", "alice", {"rs": ">"})
            rp.set("short", "v", px=50)
            # (The primary expires it, lazily here or by its cron, and sends the DEL
            # before the next write's effects.)
            wait_until(lambda: rp.exists("short") == 0, what="short expired on the primary")
            rp.delete("rs")
            wait_until(lambda: rr.exists("rs") == 0, what="DEL applied")
            assert rr.exists("before", "plain") == 2
            assert _stream_events(listener.events()) == [
                (b"rs", b"xadd"), (b"rs", b"xgroup-create"),
                (b"rs", b"xgroup-createconsumer"), (b"rs", b"xgroup-setid"),
                (b"short", b"set"), (b"short", b"expire"), (b"short", b"del"), (b"rs", b"del")]
        finally:
            listener.close()
            rp.close()
            rr.close()
