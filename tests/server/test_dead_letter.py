"""A consumer group's dead-letter policy on real server processes: STREAMDB.GROUP
SET/GET/RESET, each delivery path that dead-letters instead of delivering again, the
dead letter as the primary, its AOF, a restart and a replica hold it (exactly once),
and the policy as part of the group's state (restart, AOF rewrite, snapshot, DUMP)."""

from __future__ import annotations

import threading

import pytest
import redis

from docblocks import run_block
from helpers import ROOT, ServerProcess, wait_until

MAX = 3      # MAXDELIVERIES in these tests
DOC_BLOCKS = {"docs/OPERATIONS.md": {"dead-letter"}}


def client(srv) -> redis.Redis:
    return redis.Redis(port=srv.port, socket_timeout=10)


def start(path, *args: str) -> ServerProcess:
    return ServerProcess(path, "--save", "", *args).start()


def policy(r, key="jobs", group="g") -> dict:
    reply = r.execute_command("STREAMDB.GROUP", "GET", key, group)
    return reply if isinstance(reply, dict) else dict(zip(reply[0::2], reply[1::2]))


def poison_setup(r, key="jobs", dlq="jobs:dlq") -> bytes:
    """A stream with one entry (the poison) and a group with the policy; returns its id."""
    sid = r.xadd(key, {"job": "poison", "n": "1"}, id="5-1")
    r.xgroup_create(key, "g", id="0")
    assert r.execute_command("STREAMDB.GROUP", "SET", key, "g", "MAXDELIVERIES", MAX,
                             "DEADLETTER", dlq) == b"OK"
    return sid


def deliver_max_times(r, key="jobs") -> None:
    """The poison entry delivered MAX times to consumer c (one new read, then history)."""
    assert r.xreadgroup("g", "c", {key: ">"})[0][1]
    for _ in range(MAX - 1):
        assert r.xreadgroup("g", "c", {key: "0"})[0][1]
    assert r.xpending(key, "g")["pending"] == 1


def dead_letters(r, dlq="jobs:dlq") -> list[dict]:
    return [fields for _, fields in r.xrange(dlq)]


def assert_dead_lettered_once(r, consumer: bytes, deliveries: int) -> None:
    (letter,) = dead_letters(r)
    assert letter == {b"dlq-source": b"jobs", b"dlq-id": b"5-1", b"dlq-group": b"g",
                      b"dlq-consumer": consumer, b"dlq-deliveries": b"%d" % deliveries,
                      b"job": b"poison", b"n": b"1"}
    assert r.xpending("jobs", "g")["pending"] == 0
    assert policy(r)[b"dead-lettered"] == 1


@pytest.fixture
def srv(tmp_path):
    """A server without AOF, and ``srv.client``, a client of it (the ``r`` fixture)."""
    s = start(tmp_path / "sdb", "--appendonly", "no")
    s.client = client(s)
    try:
        yield s
    finally:
        s.client.close()
        s.stop()


@pytest.fixture
def r(srv):
    return srv.client


# -- each path that would deliver the entry again -------------------------------------


def _history_read(r):
    assert r.xreadgroup("g", "c", {"jobs": "0"}) == [[b"jobs", []]]


def _claim_read(r):
    # The new entry 6-1 is served; the poison (idle >= 0 ms) is not.
    got = r.execute_command("XREADGROUP", "GROUP", "g", "d", "CLAIM", "0", "STREAMS", "jobs", ">")
    assert [e[0] for e in got[0][1]] == [b"6-1"]
    r.xack("jobs", "g", "6-1")


def _xclaim(r):
    assert r.xclaim("jobs", "g", "d", 0, ["5-1"]) == []


def _xclaim_justid(r):
    assert r.xclaim("jobs", "g", "d", 0, ["5-1"], justid=True) == []


def _xautoclaim(r):
    assert r.execute_command("XAUTOCLAIM", "jobs", "g", "d", 0, "0")[1] == []


def _xnack_fail(r):
    assert r.execute_command("XNACK", "jobs", "g", "FAIL", "IDS", 1, "5-1") == 1


@pytest.mark.parametrize("redeliver", [_history_read, _claim_read, _xclaim, _xclaim_justid,
                                       _xautoclaim, _xnack_fail])
def test_each_redelivery_path_dead_letters_instead(r, redeliver):
    poison_setup(r)
    deliver_max_times(r)
    if redeliver is _claim_read:
        r.xadd("jobs", {"job": "fine"}, id="6-1")
    redeliver(r)
    assert_dead_lettered_once(r, b"c", MAX)
    # Nothing left to dead-letter: the same call again changes nothing more.
    r.xclaim("jobs", "g", "d", 0, ["5-1"])
    assert len(dead_letters(r)) == 1 and policy(r)[b"dead-lettered"] == 1


def test_below_the_limit_entries_are_delivered_as_usual(r):
    poison_setup(r)
    r.xreadgroup("g", "c", {"jobs": ">"})
    assert r.xclaim("jobs", "g", "d", 0, ["5-1"], justid=True) == [b"5-1"]
    assert r.execute_command("XNACK", "jobs", "g", "FAIL", "IDS", 1, "5-1") == 1
    got = r.execute_command("XREADGROUP", "GROUP", "g", "e", "CLAIM", "0", "STREAMS", "jobs", ">")
    assert got[0][1][0][0] == b"5-1"
    assert r.exists("jobs:dlq") == 0 and policy(r)[b"dead-lettered"] == 0


def test_xnack_fatal_dead_letters_at_once(r):
    poison_setup(r)
    r.xreadgroup("g", "c", {"jobs": ">"})          # one delivery: far below MAXDELIVERIES
    # (An id named twice is released twice, as without a policy, and dead-lettered once.)
    assert r.execute_command("XNACK", "jobs", "g", "FATAL", "IDS", 2, "5-1", "5-1") == 2
    assert_dead_lettered_once(r, b"c", (1 << 63) - 1)


def test_without_a_policy_nothing_is_dead_lettered(r):
    poison_setup(r)
    assert r.execute_command("STREAMDB.GROUP", "RESET", "jobs", "g") == b"OK"
    deliver_max_times(r)
    assert r.xreadgroup("g", "c", {"jobs": "0"})[0][1]
    r.execute_command("XNACK", "jobs", "g", "FATAL", "IDS", 1, "5-1")
    assert r.exists("jobs:dlq") == 0


def test_set_get_reset_and_their_errors(r):
    r.xadd("jobs", {"f": "v"}, id="1-1")
    r.xgroup_create("jobs", "g", id="0")
    assert policy(r) == {b"max-deliveries": None, b"dead-letter-key": None, b"dead-lettered": 0}
    r.set("str", "x")
    cmd = ("STREAMDB.GROUP", "SET", "jobs", "g", "MAXDELIVERIES")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        r.execute_command(*cmd, 2, "DEADLETTER", "str")
    with pytest.raises(redis.ResponseError, match="another key than the stream"):
        r.execute_command(*cmd, 2, "DEADLETTER", "jobs")
    with pytest.raises(redis.ResponseError, match="MAXDELIVERIES must be a positive integer"):
        r.execute_command(*cmd, 0, "DEADLETTER", "dlq")
    with pytest.raises(redis.ResponseError, match="syntax error"):
        r.execute_command("STREAMDB.GROUP", "SET", "jobs", "g", "DEADLETTER", "dlq", "MAXDELIVERIES", 2)
    with pytest.raises(redis.ResponseError, match="NOGROUP"):
        r.execute_command("STREAMDB.GROUP", "SET", "jobs", "nope", "MAXDELIVERIES", 2, "DEADLETTER", "dlq")
    with pytest.raises(redis.ResponseError, match="no such key 'missing'"):
        r.execute_command("STREAMDB.GROUP", "GET", "missing", "g")
    assert r.execute_command(*cmd, 2, "DEADLETTER", "dlq") == b"OK"
    assert policy(r) == {b"max-deliveries": 2, b"dead-letter-key": b"dlq", b"dead-lettered": 0}
    # The counter (set by the effects of a dead-lettering) outlives the policy.
    r.execute_command("STREAMDB.GROUP", "SET", "jobs", "g", "DEADLETTERED", 7)
    assert r.execute_command("STREAMDB.GROUP", "RESET", "jobs", "g") == b"OK"
    assert policy(r) == {b"max-deliveries": None, b"dead-letter-key": None, b"dead-lettered": 7}
    # Both keys are keys: for COMMAND GETKEYS, ACLs and COMMAND DOCS.
    assert r.command_getkeys(*cmd, 2, "DEADLETTER", "dlq") == ["jobs", "dlq"]
    r.set_response_callback("COMMAND", lambda reply, **options: reply)
    docs = r.execute_command("COMMAND", "DOCS", "STREAMDB.GROUP|SET")
    policy_block = docs[b"streamdb.group|set"][b"arguments"][2][b"arguments"]
    assert [(a[b"name"], a[b"type"]) for a in policy_block] == [
        (b"max-deliveries", b"integer"), (b"dead-letter-key", b"key")]


def test_acl_needs_write_access_to_the_dead_letter_key(r):
    r.xadd("jobs", {"f": "v"}, id="1-1")
    r.xgroup_create("jobs", "g", id="0")
    r.acl_setuser("worker", enabled=True, passwords=["+pw"], keys=["jobs"], commands=["+@all"])
    w = redis.Redis(port=r.connection_pool.connection_kwargs["port"], username="worker",
                    password="pw")
    with pytest.raises(redis.exceptions.NoPermissionError):
        w.execute_command("STREAMDB.GROUP", "SET", "jobs", "g", "MAXDELIVERIES", 2, "DEADLETTER", "dlq")
    assert policy(r)[b"max-deliveries"] is None
    w.close()


def test_a_dead_letter_key_of_another_type_delivers_as_usual_and_says_so(srv, r):
    poison_setup(r)
    deliver_max_times(r)
    r.set("jobs:dlq", "not a stream")           # after SET accepted the key
    assert r.xreadgroup("g", "c", {"jobs": "0"})[0][1][0][0] == b"5-1"
    assert r.xpending("jobs", "g")["pending"] == 1
    wait_until(lambda: "Not dead-lettering entry 5-1 of group 'g' on 'jobs'" in srv.log_text(),
               what="the warning")


def test_a_stream_renamed_onto_its_dead_letter_key_delivers_as_usual(srv, r):
    poison_setup(r)
    deliver_max_times(r)
    r.rename("jobs", "jobs:dlq")                # the policy moves with the stream
    assert r.xreadgroup("g", "c", {"jobs:dlq": "0"})[0][1][0][0] == b"5-1"
    assert r.xlen("jobs:dlq") == 1
    wait_until(lambda: "dead-letter key 'jobs:dlq' is the stream itself" in srv.log_text(),
               what="the warning")


def test_blocked_reader_and_watch_of_the_dead_letter_stream_see_it(srv, r):
    poison_setup(r)
    r.xadd("jobs:dlq", {"first": "entry"}, id="1-1")
    deliver_max_times(r)
    got = {}

    def blocked_read():
        with client(srv) as b:
            got["reply"] = b.xread({"jobs:dlq": "$"}, block=20_000)
    reader = threading.Thread(target=blocked_read)
    reader.start()
    wait_until(lambda: r.info("clients")["blocked_clients"] == 1, what="the blocked reader")
    watcher = client(srv)
    pipe = watcher.pipeline(transaction=True)
    pipe.watch("jobs:dlq")
    r.xreadgroup("g", "c", {"jobs": "0"})       # dead-letters the poison entry
    pipe.multi()
    pipe.set("after", "watch")
    with pytest.raises(redis.WatchError):
        pipe.execute()
    reader.join(30)
    assert got["reply"][0][1][0][1][b"dlq-id"] == b"5-1"
    watcher.close()


# -- exactly once: the primary, its AOF, a restart, a replica ---------------------------


def test_poison_entry_dead_lettered_exactly_once_everywhere(tmp_path):
    p = start(tmp_path / "p", "--appendonly", "yes", "--appendfsync", "always")
    rep = start(tmp_path / "r", "--replicaof", "127.0.0.1", str(p.port))
    try:
        r = client(p)
        poison_setup(r)
        deliver_max_times(r)
        for _ in range(3):                       # further reads find nothing to deliver
            _history_read(r)
        assert_dead_lettered_once(r, b"c", MAX)
        digest = r.execute_command("DEBUG", "DIGEST")
        rr = client(rep)
        wait_until(lambda: rr.execute_command("DEBUG", "DIGEST") == digest, what="replica digest")
        assert_dead_lettered_once(rr, b"c", MAX)
        assert rr.xrange("jobs:dlq") == r.xrange("jobs:dlq")     # the primary's id
        # A replica that joins now gets it all by a full sync (the codec's payload).
        with ServerProcess(tmp_path / "r2", "--save", "", "--replicaof", "127.0.0.1",
                           str(p.port)) as late:
            rl = client(late)
            wait_until(lambda: rl.execute_command("DEBUG", "DIGEST") == digest,
                       what="full-synced replica digest")
            assert policy(rl) == policy(r)
        p.kill9()
        p.start()                                # replays the AOF
        r = client(p)
        assert r.execute_command("DEBUG", "DIGEST") == digest
        assert_dead_lettered_once(r, b"c", MAX)
        assert policy(r)[b"max-deliveries"] == MAX
    finally:
        rep.stop()
        p.stop()


# -- the policy as state ----------------------------------------------------------------


def _state(r) -> tuple:
    return policy(r), r.execute_command("DEBUG", "DIGEST")


def _dead_letter_and_reset_another(r) -> None:
    poison_setup(r)
    deliver_max_times(r)
    _history_read(r)                             # the counter is 1
    r.xgroup_create("jobs", "h", id="0")
    r.execute_command("STREAMDB.GROUP", "SET", "jobs", "h", "MAXDELIVERIES", 1, "DEADLETTER", "x")
    r.execute_command("STREAMDB.GROUP", "SET", "jobs", "h", "DEADLETTERED", 4)
    r.execute_command("STREAMDB.GROUP", "RESET", "jobs", "h")


def _wait_rewrite(r) -> None:
    wait_until(lambda: r.info("persistence")["aof_rewrite_in_progress"] == 0, 30, "the rewrite")
    assert r.info("persistence")["aof_last_bgrewrite_status"] == "ok"


def _backup(r, into) -> None:
    """STREAMDB.BACKUP into ``into``, waited for."""
    r.execute_command("STREAMDB.BACKUP", str(into))

    def done():
        reply = r.execute_command("STREAMDB.BACKUP", "STATUS")
        st = dict(reply.items() if isinstance(reply, dict) else zip(reply[::2], reply[1::2]))
        return st[b"in_progress"] == 0 and st
    assert wait_until(done, 60, "the backup")[b"last_status"] == b"ok"


@pytest.mark.parametrize("how", ["aof", "rewrite-preamble", "rewrite-commands", "snapshot",
                                 "backup"])
def test_policy_and_counter_survive_restart(tmp_path, how):
    args = ("--appendonly", "yes") if how.startswith(("aof", "rewrite")) else ("--appendonly", "no")
    srv = start(tmp_path / "d", *args)
    try:
        r = client(srv)
        _dead_letter_and_reset_another(r)
        before = _state(r)
        before_h = policy(r, group="h")
        assert before[0] == {b"max-deliveries": MAX, b"dead-letter-key": b"jobs:dlq",
                             b"dead-lettered": 1}
        if how == "snapshot":
            assert r.save()
        elif how == "backup":                    # the server started on the backup instead
            _backup(r, tmp_path / "backup")
            srv.kill9()
            srv = ServerProcess(tmp_path / "backup", "--save", "", "--appendonly", "no")
        elif how.startswith("rewrite"):
            r.config_set("aof-use-rdb-preamble", "yes" if how == "rewrite-preamble" else "no")
            r.bgrewriteaof()
            _wait_rewrite(r)
        srv.kill9()
        srv.start()
        r = client(srv)
        assert _state(r) == before
        assert policy(r, group="h") == before_h == {
            b"max-deliveries": None, b"dead-letter-key": None, b"dead-lettered": 4}
        # Still applied after the restart.
        r.xadd("jobs", {"job": "poison2"}, id="7-1")
        r.xreadgroup("g", "c", {"jobs": ">"})
        r.xclaim("jobs", "g", "c", 0, ["7-1"], retrycount=MAX)
        r.xclaim("jobs", "g", "c", 0, ["7-1"])
        assert len(dead_letters(r)) == 2 and policy(r)[b"dead-lettered"] == 2
    finally:
        srv.stop()


def test_dump_restore_keeps_the_policy(r):
    _dead_letter_and_reset_another(r)
    before = policy(r), policy(r, group="h")
    payload = r.dump("jobs")
    r.restore("copy", 0, payload)
    assert (policy(r, "copy"), policy(r, "copy", "h")) == before


# -- docs/OPERATIONS.md, "Dead letters", as written -------------------------------------


def test_the_operations_guide_dead_letter_block(srv, r):
    r.xadd("orders", {"item": "book"}, id="1-1")
    r.xgroup_create("orders", "billing", id="0")
    r.execute_command("STREAMDB.GROUP", "SET", "orders", "billing", "MAXDELIVERIES", 1,
                      "DEADLETTER", "orders:dlq")
    r.xreadgroup("billing", "w", {"orders": ">"})
    r.xreadgroup("billing", "w", {"orders": "0"})          # dead-letters 1-1
    assert r.xlen("orders:dlq") == 1
    out = run_block("docs/OPERATIONS.md", "dead-letter", cwd=ROOT, PORT=srv.port)
    assert out.splitlines()[0] == "OK"
    assert "dead-lettered" in out and "orders:dlq" in out
    assert "item=book" in out and "1 replayed" in out
    assert r.xlen("orders:dlq") == 0
    assert [fields for _, fields in r.xrange("orders")] == [{b"item": b"book"}] * 2
    assert policy(r, "orders", "billing")[b"max-deliveries"] == 5
