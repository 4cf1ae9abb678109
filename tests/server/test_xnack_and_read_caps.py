"""XNACK (Redis 8.8), XREAD/XREADGROUP MAXCOUNT and MAXSIZE (8.10) and the shape of
an XREADGROUP ... CLAIM reply, against a real server through redis-py, in RESP2
and RESP3.

Redis 7.0 has none of these, so there is no differential test: the expectations
are the current Redis documentation's (its examples are pinned as they are).
Persistence and replication of the new state: AOF replay, snapshot reload, AOF
rewrite and a replica all end with the same DEBUG DIGEST.
"""

from __future__ import annotations

import threading
import time

import pytest
import redis

from helpers import ServerProcess, wait_until
from helpers import raw_reply as _raw
from resp_raw import RawClient, plain

LLONG_MAX = (1 << 63) - 1


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def rr(request, server):
    c = redis.Redis(port=server.port, protocol=request.param, decode_responses=False)
    c.flushall()
    yield c
    c.close()


def pending(c, key=b"s", group=b"g"):
    """XPENDING's extended form as (id, owner, idle, deliveries) tuples."""
    return [tuple(e) for e in _raw(c, "XPENDING", key, group, "-", "+", "100")]


def pel_state(c, key=b"s", group=b"g"):
    """``pending`` with the idle time of owned entries (wall clock) left out."""
    return [(sid, owner, idle if idle == -1 else None, n) for sid, owner, idle, n in pending(c)]


def entries_of(reply, key=b"s"):
    """The entries of ``key`` in an XREAD/XREADGROUP reply (RESP2 list or RESP3 map)."""
    if reply is None:
        return None
    if isinstance(reply, dict):      # redis-py's RESP3 form: {key: [entries]}
        got = reply.get(key)
        return None if got is None else got[0]
    for k, entries in reply:
        if k == key:
            return entries
    return None


def start_blocked(c, reader) -> threading.Thread:
    """Run ``reader`` (a blocking read) in a thread until the server has it blocked."""
    t = threading.Thread(target=reader)
    t.start()
    deadline = time.monotonic() + 5
    while c.info("clients")["blocked_clients"] < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    return t


def server_ms(c) -> int:
    """The server's clock in milliseconds (TIME)."""
    sec, usec = c.time()
    return sec * 1000 + usec // 1000


def read_two(c, key=b"s", group=b"g", consumer=b"c1", n=2):
    for i in range(1, n + 1):
        c.xadd(key, {"f": str(i)}, id=f"{i}-0")
    c.xgroup_create(key, group, id="0")
    c.xreadgroup(group, consumer, {key: ">"})


# ---------------------------------------------------------------------------
# XNACK
# ---------------------------------------------------------------------------


def test_xnack_documented_example_fail_releases_to_the_head_of_the_pel(rr):
    read_two(rr)
    assert _raw(rr, "XNACK", "s", "g", "FAIL", "IDS", "2", "1-0", "2-0") == 2
    # As the documentation shows: empty consumer, idle -1, count unchanged.
    assert pending(rr) == [(b"1-0", b"", -1, 1), (b"2-0", b"", -1, 1)]
    summary = _raw(rr, "XPENDING", "s", "g")
    assert summary[:3] == [2, b"1-0", b"2-0"]
    assert not summary[3]              # no consumer owns them
    # The consumer's own history no longer has them.
    assert entries_of(rr.xreadgroup("g", "c1", {"s": "0"})) == []


def test_xnack_modes_and_retrycount_set_the_delivery_count(rr):
    for i in range(1, 5):
        rr.xadd("s", {"f": str(i)}, id=f"{i}-0")
    rr.xgroup_create("s", "g", id="0")
    rr.xreadgroup("g", "c1", {"s": ">"})
    rr.xreadgroup("g", "c1", {"s": "0"})                      # every count is now 2
    assert rr.xnack("s", "g", "SILENT", "1-0") == 1           # redis-py's own method
    assert rr.xnack("s", "g", "FAIL", "2-0") == 1
    assert rr.xnack("s", "g", "FATAL", "3-0") == 1
    assert rr.xnack("s", "g", "SILENT", "4-0", retrycount=7) == 1
    assert [(p[0], p[3]) for p in pending(rr)] == [
        (b"1-0", 1), (b"2-0", 2), (b"3-0", LLONG_MAX), (b"4-0", 7)]
    # SILENT on a count of 0 stays at 0; a NACKed entry can be NACKed again.
    assert rr.xnack("s", "g", "SILENT", "1-0") == 1
    assert rr.xnack("s", "g", "SILENT", "1-0") == 1
    assert pending(rr)[0] == (b"1-0", b"", -1, 0)


def test_xnack_ignores_ids_not_pending_unless_forced(rr):
    for i in range(1, 4):
        rr.xadd("s", {"f": str(i)}, id=f"{i}-0")
    rr.xgroup_create("s", "g", id="0")
    rr.xreadgroup("g", "c1", {"s": ">"}, count=1)
    assert _raw(rr, "XNACK", "s", "g", "FAIL", "IDS", "3", "1-0", "2-0", "9-0") == 1
    # FORCE: an unowned entry for an id the stream holds (count 0, or FATAL's max),
    # never for one it does not hold.
    assert _raw(rr, "XNACK", "s", "g", "FAIL", "IDS", "2", "2-0", "9-0", "FORCE") == 1
    assert _raw(rr, "XNACK", "s", "g", "FATAL", "IDS", "1", "3-0", "FORCE") == 1
    assert pending(rr) == [(b"1-0", b"", -1, 1), (b"2-0", b"", -1, 0),
                           (b"3-0", b"", -1, LLONG_MAX)]


def test_xnack_errors(rr):
    """Error texts and their order as Redis's xnackCommand (t_stream.c, redis
    unstable): key and group first, then the mode, then the options."""
    read_two(rr)
    rr.set("str", "x")
    cases = [
        (["s", "g", "MAYBE", "IDS", "1", "1-0"], "^mode must be SILENT, FAIL, or FATAL$"),
        (["s", "g", "FAIL", "ID", "1", "1-0"], "^Unrecognized XNACK option 'ID'$"),
        (["s", "g", "FAIL", "FORCE", "RETRYCOUNT", "1"], "^syntax error, expected IDS keyword$"),
        (["s", "g", "FAIL", "IDS", "0", "1-0"], "^numids must be a positive integer$"),
        (["s", "g", "FAIL", "IDS", "x", "1-0"], "^numids must be a positive integer$"),
        (["s", "g", "FAIL", "IDS", "2147483648", "1-0"], "^numids must be a positive integer$"),
        (["s", "g", "FAIL", "IDS", "3", "1-0"], "^number of IDs doesn't match numids$"),
        (["s", "g", "FAIL", "IDS", "1", "1-0", "BOGUS"], "^Unrecognized XNACK option 'BOGUS'$"),
        (["s", "g", "FAIL", "IDS", "1", "1-0", "RETRYCOUNT"],
         "^Unrecognized XNACK option 'RETRYCOUNT'$"),
        (["s", "g", "FAIL", "IDS", "1", "1-0", "RETRYCOUNT", "-1"],
         "^Invalid RETRYCOUNT value, must be >= 0$"),
        (["s", "g", "FAIL", "IDS", "1", "1-0", "RETRYCOUNT", "x"],
         "^value is not an integer or out of range$"),
        (["s", "g", "FAIL", "IDS", "1", "x"], "^Invalid stream ID specified as stream command argument$"),
        # The key and the group are looked at before anything else is parsed.
        (["s", "nog", "MAYBE", "IDS", "1", "1-0"], "^NOGROUP No such key 's' or consumer group 'nog'$"),
        (["nokey", "g", "FAIL", "BOGUS", "1", "1-0"], "^NOGROUP No such key 'nokey' or consumer group 'g'$"),
        (["str", "g", "MAYBE", "IDS", "1", "1-0"], "^WRONGTYPE Operation against a key holding the wrong kind"),
    ]
    for args, msg in cases:
        with pytest.raises(redis.ResponseError, match=msg):
            _raw(rr, "XNACK", *args)
    with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
        _raw(rr, "XNACK", "s", "g", "FAIL", "IDS", "1")
    assert pending(rr)[0][1] == b"c1"          # nothing changed


def test_xnack_options_come_in_any_order_and_a_later_ids_block_wins(rr):
    read_two(rr)
    assert _raw(rr, "XNACK", "s", "g", "SILENT", "RETRYCOUNT", "7", "IDS", "1", "9-9",
                "FORCE", "IDS", "1", "2-0") == 1
    assert pel_state(rr) == [(b"1-0", b"c1", None, 1), (b"2-0", b"", -1, 7)]


def test_nacked_entries_are_claimable_at_once_by_every_claim(rr):
    read_two(rr, n=3)
    rr.xnack("s", "g", "FAIL", "2-0")
    # XCLAIM with a min-idle-time nothing reaches: only the NACKed entry moves.
    got = _raw(rr, "XCLAIM", "s", "g", "c2", "3600000", "1-0", "2-0", "JUSTID")
    assert got == [b"2-0"]
    assert pending(rr)[1][:2] == (b"2-0", b"c2")
    rr.xnack("s", "g", "FAIL", "3-0")
    got = _raw(rr, "XAUTOCLAIM", "s", "g", "c3", "3600000", "0", "JUSTID")
    assert got[1] == [b"3-0"]
    assert pending(rr)[2][:2] == (b"3-0", b"c3")


def test_xnack_wakes_a_blocked_claim_read(server):
    c = redis.Redis(port=server.port)
    c.flushall()
    read_two(c, n=1)
    out = {}

    def reader():
        r2 = redis.Redis(port=server.port)
        out["reply"] = r2.xreadgroup("g", "c2", {"s": ">"}, block=5000,
                                     claim_min_idle_time=3600000)
        r2.close()

    t = start_blocked(c, reader)
    before_ms = server_ms(c)
    assert c.xnack("s", "g", "FAIL", "1-0") == 1
    t.join(5)
    got = entries_of(out["reply"])
    assert [(e[0], e[3]) for e in got] == [(b"1-0", 1)]
    assert got[0][2] >= before_ms           # NACKed: idle counted from delivery time 0
    assert pending(c)[0][1:2] == (b"c2",) and pending(c)[0][3] == 2
    c.close()


def test_nacked_entries_are_claimed_in_release_order(tmp_path):
    # Redis 8.8 keeps NACKed entries in a FIFO zone at the head of its PEL: a CLAIM
    # read takes them in the order they were released (an entry NACKed again goes
    # to the back), not in id order; the order survives a restart and the AOF.
    with ServerProcess(tmp_path, "--appendonly", "yes", "--save", "") as srv:
        c = redis.Redis(port=srv.port)
        read_two(c, n=4)
        for sid in ("3-0", "1-0", "4-0", "2-0", "3-0"):
            c.xnack("s", "g", "FAIL", sid)
        digest = c.execute_command("DEBUG", "DIGEST")
        c.execute_command("DEBUG", "LOADAOF")
        assert c.execute_command("DEBUG", "DIGEST") == digest
        c.execute_command("DEBUG", "RELOAD")              # snapshot written and loaded
        assert c.execute_command("DEBUG", "DIGEST") == digest
        got = entries_of(c.xreadgroup("g", "c2", {"s": ">"}, count=3, claim_min_idle_time=0))
        assert [e[0] for e in got] == [b"1-0", b"4-0", b"2-0"]
        got = entries_of(c.xreadgroup("g", "c2", {"s": ">"}, claim_min_idle_time=3600000))
        assert [e[0] for e in got] == [b"3-0"]
        c.close()


def test_claim_option_errors_as_redis_8(rr):
    # stream-cgroups.tcl, "XREADGROUP CLAIM with not integer / negative integer for
    # min-idle-time" and "XREAD with CLAIM option".
    read_two(rr)
    cases = [("test", "^min-idle-time is not an integer$"),
             ("-0", "^min-idle-time is not an integer$"),
             ("+10", "^min-idle-time is not an integer$"),
             ("5.5", "^min-idle-time is not an integer$"),
             ("-10", "^min-idle-time must be a positive integer$")]
    for value, msg in cases:
        with pytest.raises(redis.ResponseError, match=msg):
            _raw(rr, "XREADGROUP", "GROUP", "g", "c1", "CLAIM", value, "STREAMS", "s", ">")
    with pytest.raises(redis.ResponseError, match="^min-idle-time is not an integer$"):
        _raw(rr, "XREADGROUP", "CLAIM", "GROUP", "g", "c1", "STREAMS", "s", ">")
    with pytest.raises(redis.ResponseError,
                       match=r"^The CLAIM option is only supported by XREADGROUP\. "
                             r"You called XREAD instead\.$"):
        _raw(rr, "XREAD", "COUNT", "2", "CLAIM", "10", "STREAMS", "s", "0-0")


def raw_blocked_read(port: int, *cmd) -> tuple[threading.Thread, list]:
    """Send a blocking read on its own raw connection, in a thread; its reply lands in
    the list.  (Not redis-py: it resends a command whose reply is late, and the new
    run would be served at once, hiding a read that never wakes.)"""
    out: list = []

    def go():
        c = RawClient(port)
        c.sock.settimeout(30)
        try:
            out.append(plain(c.call(*cmd)))
        finally:
            c.close()
    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t, out


def claim_read(consumer: str, block_ms: int, min_idle: int) -> tuple:
    return ("XREADGROUP", "GROUP", "g", consumer, "BLOCK", str(block_ms), "CLAIM",
            str(min_idle), "STREAMS", "s", ">")


def test_two_blocked_claim_reads_are_both_served(server):
    # stream-cgroups.tcl, "XREADGROUP CLAIM with two blocked clients": one XADD wakes
    # both; the first takes the new entry, the second takes it over once it has been
    # pending for min-idle-time (Redis wakes blocked CLAIM reads when an entry
    # becomes claimable), instead of waiting for a change to the key.
    c = redis.Redis(port=server.port)
    c.flushall()
    c.xgroup_create("s", "g", id="0", mkstream=True)
    t1, out1 = raw_blocked_read(server.port, *claim_read("c1", 0, 100))
    wait_until(lambda: c.info("clients")["blocked_clients"] == 1, what="the first reader")
    t2, out2 = raw_blocked_read(server.port, *claim_read("c2", 0, 100))
    wait_until(lambda: c.info("clients")["blocked_clients"] == 2, what="the second reader")
    c.xadd("s", {"f": "v"}, id="2-0")
    t1.join(20)
    t2.join(20)
    assert out1 and out2, "a blocked CLAIM read was never served"
    # First blocked, first served: the new entry (idle 0, no earlier delivery), then
    # the same entry claimed by the second reader.
    assert out1[0] == [[b"s", [[b"2-0", [b"f", b"v"], 0, 0]]]]
    (key, [(sid, fields, idle, count)]), = out2[0]
    assert (key, sid, fields, count) == (b"s", b"2-0", [b"f", b"v"], 1) and idle >= 100
    assert pending(c)[0][1] == b"c2"
    c.close()


def test_blocked_claim_read_wakes_when_a_pending_entry_becomes_claimable(server):
    # stream-cgroups.tcl, "XREADGROUP CLAIM messages become claimable during block":
    # nothing changes the key, yet the read answers once the entry is idle enough.
    c = redis.Redis(port=server.port)
    c.flushall()
    read_two(c, n=1)
    t, out = raw_blocked_read(server.port, *claim_read("c2", 20000, 200))
    t.join(25)
    assert out, "no reply"
    assert out[0] is not None, "the read timed out instead of claiming the entry"
    (key, [(sid, _fields, idle, count)]), = out[0]
    assert (key, sid, count) == (b"s", b"1-0", 1) and idle >= 200
    assert pending(c)[0][1] == b"c2"
    c.close()


def test_xinfo_stream_full_counts_nacked_entries_per_group(rr):
    read_two(rr)
    rr.xgroup_create("s", "other", id="0")
    rr.xnack("s", "g", "FAIL", "1-0")
    info = rr.xinfo_stream("s", full=True)
    groups = {g["name"]: g for g in info["groups"]}
    assert groups[b"g"]["nacked-count"] == 1 and groups[b"g"]["pel-count"] == 2
    assert groups[b"other"]["nacked-count"] == 0
    owners = [p[1] for p in groups[b"g"]["pending"]]
    assert owners == [b"", b"c1"]


# ---------------------------------------------------------------------------
# XREADGROUP ... CLAIM: reply shape and order
# ---------------------------------------------------------------------------


def test_claim_read_orders_nacked_then_idlest_then_new_with_four_elements(rr):
    for i in range(1, 6):
        rr.xadd("s", {"f": str(i)}, id=f"{i}-0")
    rr.xgroup_create("s", "g", id="0")
    rr.xreadgroup("g", "a", {"s": ">"}, count=1)        # 1-0: the idlest
    time.sleep(0.03)
    rr.xreadgroup("g", "a", {"s": ">"}, count=2)        # 2-0, 3-0
    rr.xnack("s", "g", "FAIL", "3-0")                   # NACKed: first of all
    time.sleep(0.03)
    before_ms = server_ms(rr)
    got = entries_of(rr.xreadgroup("g", "b", {"s": ">"}, claim_min_idle_time=20))
    assert [e[0] for e in got] == [b"3-0", b"1-0", b"2-0", b"4-0", b"5-0"]
    assert all(len(e) == 4 for e in got)
    # NACKed: Redis's streamReplyWithRange reports now - delivery time, and XNACK set
    # that time to 0, so the idle time is the server's clock (XPENDING shows -1).
    assert got[0][2] >= before_ms and got[0][3] == 1
    assert got[1][2] >= got[2][2] >= 20 and got[1][3] == 1
    assert list(got[3][2:]) == [0, 0] and list(got[4][2:]) == [0, 0]
    assert got[3][1] == {b"f": b"4"} or got[3][1] == [b"f", b"4"]
    # COUNT covers claimed and new entries together.
    rr.xadd("s", {"f": "6"}, id="6-0")
    got = entries_of(rr.xreadgroup("g", "c", {"s": ">"}, count=2, claim_min_idle_time=0))
    assert [len(e) for e in got] == [4, 4] and got[0][3] >= 1


# ---------------------------------------------------------------------------
# MAXCOUNT / MAXSIZE
# ---------------------------------------------------------------------------


def fill(c, key, n, value=b"v"):
    for i in range(1, n + 1):
        c.xadd(key, {"f": value}, id=f"{i}-0")


def test_maxcount_caps_the_whole_reply_across_streams(rr):
    fill(rr, "a", 3)
    fill(rr, "b", 3)
    got = rr.xread({"a": "0", "b": "0"}, max_count=4)
    assert len(entries_of(got, b"a")) == 3 and len(entries_of(got, b"b")) == 1
    got = rr.xread({"a": "0", "b": "0"}, count=2, max_count=3)
    assert len(entries_of(got, b"a")) == 2 and len(entries_of(got, b"b")) == 1
    got = rr.xread({"a": "0", "b": "0"}, max_count=2)
    assert len(entries_of(got, b"a")) == 2 and entries_of(got, b"b") is None
    for g in ("a", "b"):
        rr.xgroup_create(g, "g", id="0")
    got = rr.xreadgroup("g", "c", {"a": ">", "b": ">"}, max_count=4)
    assert len(entries_of(got, b"a")) == 3 and len(entries_of(got, b"b")) == 1
    # What was not delivered is neither pending nor read: the next read gets it.
    assert rr.xpending("b", "g")["pending"] == 1
    got = rr.xreadgroup("g", "c", {"a": ">", "b": ">"})
    assert entries_of(got, b"a") is None and len(entries_of(got, b"b")) == 2
    # History (PEL) reads honour it too.
    got = rr.xreadgroup("g", "c", {"a": "0", "b": "0"}, max_count=4)
    assert len(entries_of(got, b"a")) == 3 and len(entries_of(got, b"b")) == 1


def stream_head(c, key=b"s") -> int:
    """The bytes Redis has written for a served stream before its first entry:
    its name (in RESP2 inside a two-element array); the entry list's length is
    written only when the stream is done."""
    resp3 = c.get_connection_kwargs().get("protocol") == 3
    return (0 if resp3 else 4) + len(b"$%d\r\n%s\r\n" % (len(key), key))


def test_maxsize_stops_once_the_reply_reaches_it_and_leaves_the_rest_untouched(rr):
    """MAXSIZE as Redis's xreadCommand keeps it (t_stream.c, streamReplyMaxsizeReached):
    before each entry but the first, stop if the reply written so far (stream
    name and framing included) has reached MAXSIZE; the entry that crosses it
    is sent."""
    fill(rr, "s", 4, value=b"x" * 100)
    entry = len(b"*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\nf\r\n$100\r\n" + b"x" * 100 + b"\r\n")
    head = stream_head(rr)
    for maxsize, n in ((1, 1),                      # the first entry, however big
                       (head + entry, 1),           # reached after the first
                       (head + entry + 1, 2),       # the second crosses it: sent
                       (head + 2 * entry, 2),
                       (head + 2 * entry + 1, 3)):
        got = rr.xread({"s": "0"}, max_size=maxsize)
        assert len(entries_of(got)) == n, maxsize
    rr.xgroup_create("s", "g", id="0")
    got = rr.xreadgroup("g", "c", {"s": ">"}, max_size=head + entry)
    assert [e[0] for e in entries_of(got)] == [b"1-0"]
    info = rr.xinfo_groups("s")[0]
    assert info["pending"] == 1 and info["last-delivered-id"] == b"1-0"
    assert info["entries-read"] == 1
    # History reads stop the same way.
    rr.xreadgroup("g", "c", {"s": ">"})
    got = rr.xreadgroup("g", "c", {"s": "0"}, max_size=head + entry + 1)
    assert [e[0] for e in entries_of(got)] == [b"1-0", b"2-0"]


def test_maxsize_counts_every_stream_served_so_far(rr):
    fill(rr, "a", 1, value=b"x" * 100)
    fill(rr, "b", 1, value=b"x" * 100)
    fill(rr, "c", 1, value=b"x" * 100)
    entry = len(b"*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\nf\r\n$100\r\n" + b"x" * 100 + b"\r\n")
    head = stream_head(rr, b"a")
    done = head + entry + len(b"*1\r\n")          # a finished stream, list length included
    # Reached after "a": no further stream is looked at.
    got = rr.xread({"a": "0", "b": "0", "c": "0"}, max_size=done)
    assert entries_of(got, b"a") and entries_of(got, b"b") is None
    # Not reached after "a", but reached once "b"'s name is written: Redis still
    # sends "b", with an empty entry list, and stops there.
    got = rr.xread({"a": "0", "b": "0", "c": "0"}, max_size=done + 1)
    assert len(entries_of(got, b"a")) == 1 and entries_of(got, b"b") == []
    assert entries_of(got, b"c") is None
    got = rr.xread({"a": "0", "b": "0", "c": "0"}, max_size=done + head + 1)
    assert len(entries_of(got, b"b")) == 1 and entries_of(got, b"c") is None


def test_maxsize_counts_the_claim_shape(rr):
    fill(rr, "s", 3, value=b"y" * 50)
    rr.xgroup_create("s", "g", id="0")
    plain = len(b"*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\nf\r\n$50\r\n" + b"y" * 50 + b"\r\n")
    claimed = plain + len(b":0\r\n:0\r\n")
    head = stream_head(rr)
    # A budget a plain entry does not reach, a CLAIM-shaped one does.
    assert len(entries_of(rr.xread({"s": "0"}, max_size=head + plain + 1))) == 2
    got = rr.xreadgroup("g", "c", {"s": ">"}, max_size=head + plain + 1,
                        claim_min_idle_time=1000)
    assert len(entries_of(got)) == 1
    got = rr.xreadgroup("g", "c", {"s": ">"}, max_size=head + claimed + 1,
                        claim_min_idle_time=1000)
    assert len(entries_of(got)) == 2


def test_maxcount_and_maxsize_errors(rr):
    fill(rr, "s", 1)
    for opt in ("MAXCOUNT", "MAXSIZE"):
        for bad, msg in (("0", f"{opt} must be a positive integer"),
                         ("-3", f"{opt} must be a positive integer"),
                         ("x", "value is not an integer or out of range")):
            with pytest.raises(redis.ResponseError, match=msg):
                _raw(rr, "XREAD", opt, bad, "STREAMS", "s", "0")
            with pytest.raises(redis.ResponseError, match=msg):
                _raw(rr, "XREADGROUP", "GROUP", "g", "c", opt, bad, "STREAMS", "s", ">")
    # MAXCOUNT caps the whole reply, so Redis (xreadCommand, t_stream.c) refuses
    # one below the per-stream COUNT, before it looks at any key or group.
    msg = "^MAXCOUNT must be greater than or equal to COUNT$"
    with pytest.raises(redis.ResponseError, match=msg):
        _raw(rr, "XREAD", "COUNT", "3", "MAXCOUNT", "2", "STREAMS", "s", "0")
    with pytest.raises(redis.ResponseError, match=msg):
        _raw(rr, "XREADGROUP", "GROUP", "nog", "c", "MAXCOUNT", "2", "COUNT", "3",
             "STREAMS", "nokey", ">")
    assert len(entries_of(rr.xread({"s": "0"}, count=2, max_count=2), b"s")) == 1
    # COUNT 0 means no per-stream cap: any MAXCOUNT goes with it.
    got = rr.execute_command("XREAD", "COUNT", "0", "MAXCOUNT", "1", "STREAMS", "s", "0")
    assert len(entries_of(got, b"s")) == 1


def test_maxcount_is_honoured_when_a_blocked_read_is_served(server):
    c = redis.Redis(port=server.port)
    c.flushall()
    c.xgroup_create("s", "g", id="$", mkstream=True)
    out = {}

    def reader():
        r2 = redis.Redis(port=server.port)
        out["reply"] = r2.xreadgroup("g", "c", {"s": ">"}, block=5000, max_count=2)
        r2.close()

    t = start_blocked(c, reader)
    with c.pipeline(transaction=True) as p:
        for i in range(1, 6):
            p.xadd("s", {"f": str(i)}, id=f"{i}-0")
        p.execute()
    t.join(5)
    assert [e[0] for e in entries_of(out["reply"])] == [b"1-0", b"2-0"]
    assert c.xpending("s", "g")["pending"] == 2
    c.close()


# ---------------------------------------------------------------------------
# Persistence and replication of the new state
# ---------------------------------------------------------------------------


def nack_workload(c: redis.Redis) -> None:
    for i in range(1, 9):
        c.xadd("s", {"f": str(i)}, id=f"{i}-0")
    c.xgroup_create("s", "g", id="0")
    c.xreadgroup("g", "a", {"s": ">"}, count=5)
    c.xnack("s", "g", "SILENT", "1-0", "2-0")
    c.xnack("s", "g", "FATAL", "3-0")
    _raw(c, "XNACK", "s", "g", "FAIL", "IDS", "1", "7-0", "RETRYCOUNT", "4", "FORCE")
    c.xreadgroup("g", "b", {"s": ">"}, count=1, claim_min_idle_time=60000)   # takes 1-0
    c.xreadgroup("g", "b", {"s": ">"}, max_count=1, max_size=1)              # 6-0
    c.xreadgroup("g", "b", {"s": "0"}, max_count=1)


def test_aof_replay_snapshot_and_rewrite_reproduce_nacked_state(tmp_path):
    with ServerProcess(tmp_path, "--appendonly", "yes", "--save", "") as srv:
        c = redis.Redis(port=srv.port)
        nack_workload(c)
        digest = c.execute_command("DEBUG", "DIGEST")
        before = pel_state(c)
        assert (b"3-0", b"", -1, LLONG_MAX) in before and (b"7-0", b"", -1, 4) in before
        c.execute_command("DEBUG", "LOADAOF")
        assert c.execute_command("DEBUG", "DIGEST") == digest
        c.execute_command("DEBUG", "RELOAD")              # snapshot written and loaded
        assert c.execute_command("DEBUG", "DIGEST") == digest
        assert pel_state(c) == before
        c.bgrewriteaof()
        deadline = time.monotonic() + 10
        while c.info("persistence")["aof_rewrite_in_progress"] and time.monotonic() < deadline:
            time.sleep(0.05)
        c.close()
        srv.kill9()
        srv.start()
        c = redis.Redis(port=srv.port)
        assert c.execute_command("DEBUG", "DIGEST") == digest
        assert pel_state(c) == before
        c.close()


def test_replica_applies_xnack_and_capped_reads(tmp_path):
    with ServerProcess(tmp_path / "p", "--save", "") as p:
        with ServerProcess(tmp_path / "r", "--save", "", "--replicaof", "127.0.0.1",
                           str(p.port)) as rep:
            cp, cr = redis.Redis(port=p.port), redis.Redis(port=rep.port)
            deadline = time.monotonic() + 10
            while cr.info("replication").get("master_link_status") != "up":
                assert time.monotonic() < deadline, "replica link did not come up"
                time.sleep(0.02)
            nack_workload(cp)
            deadline = time.monotonic() + 10
            while True:
                off = cp.info("replication")["master_repl_offset"]
                if (cr.info("replication").get("slave_repl_offset", -1) >= off
                        and cp.execute_command("DEBUG", "DIGEST")
                        == cr.execute_command("DEBUG", "DIGEST")):
                    break
                assert time.monotonic() < deadline, "replica did not reach the primary's digest"
                time.sleep(0.02)
            assert pel_state(cr) == pel_state(cp)
            cp.close()
            cr.close()
