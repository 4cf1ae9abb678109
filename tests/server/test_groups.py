"""Consumer groups against a real server process, compared with a real Redis 7.0.

Every command sequence here runs on both servers over raw RESP (types kept), in
RESP2 and RESP3, and the replies must be identical; wall-clock values (idle
times) are masked.  Known, intended differences from 7.0 are tested on their own:

* XINFO CONSUMERS reports "inactive" (Redis 7.2) - covered in test_xinfo.py.
* A blocked XREADGROUP woken by a change that brings no new entry (XADD + XDEL in
  one MULTI) keeps waiting, as current Redis does; 7.0 replies with an empty list.
* XREADGROUP ... CLAIM/MAXCOUNT/MAXSIZE, XREAD MAXCOUNT/MAXSIZE, XACKDEL and XNACK
  are newer than 7.0: tested on StreamDB alone, against the Redis documentation.
* A blocked XREADGROUP whose key is deleted, changes type, loses its group or is
  flushed or swapped away answers what the command answers when run again
  (NOGROUP, WRONGTYPE), as Redis >= 7.2 does; 7.0 answers UNBLOCKED.
"""

from __future__ import annotations

import threading
import time

import pytest

from helpers import ServerProcess, wait_until
from resp_raw import RawClient, plain


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def both(request, server, redis_server):
    b = Both(server.port, redis_server.port, resp3=request.param == 3)
    yield b
    b.close()


class Both:
    """Send each command to StreamDB and to Redis 7.0; their replies must match."""

    def __init__(self, ours_port: int, ref_port: int, resp3: bool = False) -> None:
        self.resp3 = resp3
        self.ours = RawClient(ours_port, resp3)
        self.ref = RawClient(ref_port, resp3)
        self.ours.call("FLUSHALL")
        self.ref.call("FLUSHALL")

    def __call__(self, *cmd, mask=None):
        a, b = self.ours.call(*cmd), self.ref.call(*cmd)
        if mask is not None:
            a, b = mask(a), mask(b)
        assert a == b, f"{cmd}:\n  ours: {a}\n  7.0 : {b}"
        return a

    def run(self, script: str, mask=None) -> None:
        for line in script.strip().splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                self(*line.split(), mask=mask)

    def close(self) -> None:
        self.ours.close()
        self.ref.close()


def mask_idle(reply):
    """XPENDING extended form: replace each entry's idle time."""
    t, items = reply
    if t != b"*" or not items:
        return reply
    out = []
    for e in items:
        if e[0] == b"*" and len(e[1]) == 4 and e[1][2][0] == b":":
            e = (e[0], [e[1][0], e[1][1], (b":", "T"), e[1][3]])
        out.append(e)
    return (t, out)


# ---------------------------------------------------------------------------
# XGROUP
# ---------------------------------------------------------------------------


def test_xgroup_subcommands_and_errors(both):
    both.run("""
        XGROUP HELP
        XGROUP
        XGROUP foo
        XGROUP help x
        XGROUP create s
        XGROUP create s g 0
        XGROUP setid nokey g 0
        XGROUP destroy nokey g
        XGROUP CREATE s g $ MKSTREAM
        XGROUP CREATE s g $ MKSTREAM
        XGROUP create s g2 abc
        XGROUP create s g2 -
        XGROUP CrEaTe s g2 0 junk
        XGROUP create s g2 0 entriesread -3
        XGROUP create s g2 0 entriesread x
        XGROUP create s g2 0 entriesread
        XGROUP create s g2 0 mkstream mkstream mkstream mkstream
        XGROUP create s g2 0 ENTRIESREAD -1 MKSTREAM
        XGROUP setid s nog 0
        XGROUP setid s g 0 entriesread
        XGROUP setid s g 0 foo 1
        XGROUP setid s g 0 entriesread 1 x
        XGROUP setid s g 0 entriesread -2
        XGROUP setid s g -
        XGROUP setid s g +
        # (above entries-added current Redis clamps it: test_xinfo.py pins that)
        XGROUP setid s g $ ENTRIESREAD 0
        XINFO GROUPS s
        XGROUP destroy s g x
        XGROUP destroy s nog
        XGROUP createconsumer s g c1
        XGROUP createconsumer s g c1
        XGROUP createconsumer s nog c1
        XGROUP createconsumer s g
        XGROUP delconsumer s g c1
        XGROUP delconsumer s g c1
        XGROUP delconsumer s nog c1
        XGROUP destroy s g
        XGROUP destroy s g
        XINFO GROUPS s
        SET str v
        XGROUP create str g 0
        XGROUP create str g 0 MKSTREAM
        XGROUP setid str g 0
        XGROUP destroy str g
    """)


def test_xgroup_create_positions_and_lag(both):
    both.run("""
        XADD s 1-1 a 1
        XADD s 1-2 b 2
        XADD s 1-3 c 3
        XADD s 1-4 d 4
        XGROUP CREATE s g0 0
        XGROUP CREATE s g1 $
        XGROUP CREATE s g2 1-2
        XGROUP CREATE s g3 $ ENTRIESREAD 0
        XGROUP CREATE s g4 1-1 ENTRIESREAD 1
        XINFO GROUPS s
        XDEL s 1-2
        XINFO GROUPS s
        XREADGROUP GROUP g0 c COUNT 1 STREAMS s >
        XINFO GROUPS s
        XREADGROUP GROUP g4 c STREAMS s >
        XINFO GROUPS s
        XGROUP SETID s g4 1-1 ENTRIESREAD 1
        XINFO GROUPS s
    """)


# ---------------------------------------------------------------------------
# XREADGROUP
# ---------------------------------------------------------------------------


def test_xreadgroup_errors(both):
    both.run("""
        XGROUP CREATE s g $ MKSTREAM
        SET str v
        XREADGROUP group g c streams s $
        XREADGROUP group g c streams nokey >
        XREADGROUP group nog c streams s >
        XREADGROUP group g c streams s str > >
        XREADGROUP group g c streams str s > >
        XREADGROUP streams s >
        XREADGROUP group g streams s >
        XREADGROUP group g c streams s abc
        XREADGROUP group g c count x streams s >
        XREADGROUP group g c block x streams s >
        XREADGROUP group g c block -1 streams s >
        XREADGROUP group g c foo streams s >
        XREADGROUP group g c count 1 block 1 noack streams
    """)


def test_read_argument_errors_name_the_command_unlike_70(server, redis_server):
    """Deliberate difference from Redis 7.0, pinned: since 7.4 an unbalanced STREAMS
    list names the command and the special ids it takes (t_stream.c: "Unbalanced
    '%s' list of streams: for each stream key an %s must be specified."), and "+"
    (XREAD's last entry) is refused by XREADGROUP with the text "$" gets."""
    ours, ref = RawClient(server.port), RawClient(redis_server.port)
    try:
        for c in (ours, ref):
            c.call("FLUSHALL")
            c.call("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
        cases = [
            (("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">", ">"),
             b"ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must "
             b"be specified.",
             b"ERR Unbalanced 'xreadgroup' list of streams: for each stream key an ID or '>' "
             b"must be specified."),
            (("XREAD", "STREAMS", "s", "t", "0"),
             b"ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must "
             b"be specified.",
             b"ERR Unbalanced 'xread' list of streams: for each stream key an ID, '+', or '$' "
             b"must be specified."),
            (("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "+"),
             b"ERR Invalid stream ID specified as stream command argument",
             b"ERR The + ID is meaningless in the context of XREADGROUP: you want to read the "
             b"history of this consumer by specifying a proper ID, or use the > ID to get new "
             b"messages. The + ID would just return an empty result set."),
        ]
        for cmd, text_70, text_now in cases:
            assert ref.call(*cmd) == (b"-", text_70), cmd
            assert ours.call(*cmd) == (b"-", text_now), cmd
    finally:
        ours.close()
        ref.close()


def test_xreadgroup_dirty_count_as_current_redis(server, redis_server):
    """INFO rdb_changes_since_last_save, as stream-cgroups.tcl pins it: a read of new
    entries counts once however many it serves (7.0 too); a read of the consumer's
    own pending entries counts nothing (7.0: once), and a read that creates its
    consumer counts that once (7.0 created none for a '>' read serving nothing)."""
    def deltas_on(port: int) -> list[int]:
        c = RawClient(port)
        c.call("FLUSHALL")
        for i in range(1, 5):
            c.call("XADD", "x", f"{i}-0", "data", str(i))
        c.call("XGROUP", "CREATE", "x", "g1", "0")
        c.call("XGROUP", "CREATECONSUMER", "x", "g1", "Alice")

        def dirty():
            info = plain(c.call("INFO", "persistence")).decode()
            return int(info.split("rdb_changes_since_last_save:")[1].split()[0])
        got = []
        for cmd in (("XREADGROUP", "GROUP", "g1", "Alice", "COUNT", "2", "STREAMS", "x", ">"),
                    ("XREADGROUP", "GROUP", "g1", "Alice", "NOACK", "COUNT", "2",
                     "STREAMS", "x", ">"),
                    ("XREADGROUP", "GROUP", "g1", "Alice", "COUNT", "2", "STREAMS", "x", "0"),
                    ("XREADGROUP", "GROUP", "g1", "Bob", "STREAMS", "x", ">")):
            before = dirty()
            c.call(*cmd)
            got.append(dirty() - before)
        c.close()
        return got

    deltas = []
    for port in (server.port, redis_server.port):
        # A snapshot taken meanwhile sets the count back to 0 (a server with a small
        # stream cache snapshots on its own to make nodes cold), which shows as a
        # negative difference: measured again then.
        for _ in range(5):
            got = deltas_on(port)
            if min(got) >= 0:
                break
        deltas.append(got)
    ours, redis_70 = deltas
    assert redis_70 == [1, 1, 1, 0]
    assert ours == [1, 1, 0, 1]


def test_xreadgroup_new_history_deleted_and_redelivery(both):
    both.run("""
        XGROUP CREATE s g 0 MKSTREAM
        XREADGROUP group g c count -1 streams s 0
        XREADGROUP group g c streams s 0
        XREADGROUP group g c streams s >
        XREADGROUP group g c block 10 streams s >
        XADD s 1-0 a 1
        XADD s 2-0 b 2
        XADD s 3-0 c 3
        XADD s 4-0 d 4
        XREADGROUP group g c count 2 streams s >
        XPENDING s g
        XREADGROUP group g c streams s 0
        XREADGROUP group g c2 noack noack streams s >
        XPENDING s g
        XDEL s 2-0
        XREADGROUP group g c streams s 0
        XREADGROUP group g c streams s 1
        XREADGROUP group g c count 1 streams s 0-0
        XREADGROUP group g c streams s 18446744073709551615-18446744073709551615
        XREADGROUP group g c streams s 2-0
        XREADGROUP group g nobody streams s 0
        XINFO GROUPS s
        XGROUP SETID s g 0
        XREADGROUP group g c3 count 10 streams s >
        XPENDING s g
        XINFO GROUPS s
        XGROUP SETID s g 0
        XREADGROUP group g c3 noack streams s >
        XPENDING s g
        XINFO GROUPS s
        XGROUP DELCONSUMER s g c3
        XPENDING s g
    """)
    both("XPENDING", "s", "g", "-", "+", "10", mask=mask_idle)


def test_xreadgroup_multiple_keys(both):
    both.run("""
        XADD a 1-0 f 1
        XADD b 1-0 f 2
        XADD b 2-0 f 3
        XGROUP CREATE a g 0
        XGROUP CREATE b g 0
        XGROUP CREATE c g 0 MKSTREAM
        XREADGROUP GROUP g x COUNT 1 STREAMS a b c > > >
        XREADGROUP GROUP g x STREAMS a b c > > >
        XREADGROUP GROUP g x STREAMS a b c 0 > 0
        XREADGROUP GROUP g x STREAMS a b c > > >
        XPENDING a g
        XPENDING b g
    """)


# ---------------------------------------------------------------------------
# XACK, XPENDING
# ---------------------------------------------------------------------------


def test_xack_and_xpending(both):
    both.run("""
        XADD s 1-0 a 1
        XADD s 2-0 b 2
        XADD s 3-0 c 3
        XADD s 4-0 d 4
        XGROUP CREATE s g 0
        XREADGROUP GROUP g alice COUNT 2 STREAMS s >
        XREADGROUP GROUP g bob STREAMS s >
        SET str v
        XACK s g 1-0 abc
        XACK s nog abc
        XACK nokey g abc
        XACK str g 1
        XPENDING s g
        XPENDING s nog
        XPENDING nokey g
        XPENDING str g
        XPENDING s g - +
        XPENDING s g - + abc
        XPENDING s g idle abc - + 10
        XPENDING s g idle 10 - +
        XPENDING s g ( + 10
        XPENDING s g (18446744073709551615-18446744073709551615 + 10
        XPENDING s g - (0-0 10
        XPENDING s g - + 10 nobody
        XPENDING s g - + 10 nobody x y
        XPENDING s nog - + 10
        XPENDING s g - + 0
        XPENDING s g - + -5
        XPENDING s g 5 1 10
        XPENDING s g IDLE 100000 - + 10
        XPENDING s g IDLE 100000 - + 10 alice
        XACK s g 1-0 1-0 9-9
        XPENDING s g
        XACK s g 2-0 3-0 4-0
        XPENDING s g
    """)
    for cmd in (["XPENDING", "s", "g", "-", "+", "10"],
                ["XPENDING", "s", "g", "(1-0", "(4", "10"],
                ["XPENDING", "s", "g", "-", "+", "1", "bob"],
                ["XPENDING", "s", "g", "IdLe", "0", "-", "+", "10", "bob"]):
        both(*cmd, mask=mask_idle)


# ---------------------------------------------------------------------------
# XCLAIM, XAUTOCLAIM
# ---------------------------------------------------------------------------


def test_xclaim(both):
    both.run("""
        XADD s 1-0 a 1
        XADD s 2-0 b 2
        XADD s 3-0 c 3
        XADD s 4-0 d 4
        XADD s 5-0 e 5
        XGROUP CREATE s g 0
        SET str v
        XCLAIM s g c abc 1-0
        XCLAIM s nog c abc 1-0
        XCLAIM nokey g c 0 1-0
        XCLAIM str g c 0 1-0
        XCLAIM s g c 0 1-0 foo
        XCLAIM s g c 0 1-0 idle x
        XCLAIM s g c 0 1-0 time x
        XCLAIM s g c 0 1-0 retrycount x
        XCLAIM s g c 0 1-0 lastid x
        XCLAIM s g c 0 1-0 idle
        XCLAIM s g c 0 foo 1-0
        XCLAIM s g c 0 1-0 JUSTID 2-0
        XCLAIM s g c 0 1-0
        XINFO GROUPS s
        XCLAIM s g c 0 1-0 FORCE
        XCLAIM s g d 0 2-0 FORCE JUSTID
        XCLAIM s g d 0 3-0 FORCE RETRYCOUNT 7 JUSTID
        XCLAIM s g e 0 1-0 2-0 JUSTID
        XCLAIM s g e 0 1-0 2-0
        XCLAIM s g e 0 1-0 RETRYCOUNT -5
        XCLAIM s g f 1000000 1-0 2-0 3-0
        XCLAIM s g f 0 1-0 IDLE 5000 JUSTID
        XCLAIM s g f 0 2-0 TIME 1 JUSTID
        XPENDING s g IDLE 100000000 - + 10
        XCLAIM s g f 0 3-0 LASTID 3-0 JUSTID
        XINFO GROUPS s
        XCLAIM s g f 0 9-0 LASTID 4-0
        XINFO GROUPS s
        XCLAIM s g f 0 9-0 LASTID 1-0
        XINFO GROUPS s
        XDEL s 2-0
        XCLAIM s g f 0 2-0 3-0 JUSTID
        XPENDING s g
    """, mask=mask_idle)
    both("XPENDING", "s", "g", "-", "+", "10", mask=mask_idle)
    both("XPENDING", "s", "g", "IDLE", "4000", "-", "+", "10", mask=mask_idle)


def test_xautoclaim(both):
    both.run("""
        XADD s 1-0 a 1
        XADD s 2-0 b 2
        XADD s 3-0 c 3
        XADD s 4-0 d 4
        XADD s 5-0 e 5
        XGROUP CREATE s g 0
        SET str v
        XAUTOCLAIM s g c abc 0
        XAUTOCLAIM s g c 0 abc
        XAUTOCLAIM s g c 0 0 count 0
        XAUTOCLAIM s g c 0 0 count x
        XAUTOCLAIM s g c 0 0 count 576460752303423488
        XAUTOCLAIM s g c 0 0 count 576460752303423487
        XAUTOCLAIM s g c 0 0 foo
        XAUTOCLAIM s nog c 0 0
        XAUTOCLAIM s nog c 0 0 foo
        XAUTOCLAIM nokey g c 0 0
        XAUTOCLAIM str g c 0 0
        XAUTOCLAIM s g c 0 (18446744073709551615-18446744073709551615
        XAUTOCLAIM s g c 0 0 count
        XAUTOCLAIM s g c 0 0
        XREADGROUP GROUP g z STREAMS s >
        XPENDING s g
        XDEL s 2-0 4-0
        XAUTOCLAIM s g h 0 0 COUNT 1
        XAUTOCLAIM s g h 0 0 COUNT 1
        XAUTOCLAIM s g h 0 0 COUNT 1 JUSTID
        XAUTOCLAIM s g h 0 0 COUNT 1
        XAUTOCLAIM s g h 0 0
        XAUTOCLAIM s g i 100000 0 COUNT 1
        XAUTOCLAIM s g i 100000 (1-0 COUNT 1 JUSTID
        XAUTOCLAIM s g i 0 - JUSTID
        XAUTOCLAIM s g i 0 3-0
        XAUTOCLAIM s g i 0 9-0
        XPENDING s g
        XINFO GROUPS s
    """)
    both("XPENDING", "s", "g", "-", "+", "10", mask=mask_idle)


def test_xautoclaim_scan_limit_and_cursor(both):
    """COUNT*10 PEL entries at most are scanned; the cursor is the next unvisited one."""
    for i in range(1, 31):
        both("XADD", "s", f"{i}-0", "f", str(i))
    both("XGROUP", "CREATE", "s", "g", "0")
    both("XREADGROUP", "GROUP", "g", "a", "STREAMS", "s", ">")
    both.run("""
        XAUTOCLAIM s g b 3600000 0 COUNT 1
        XAUTOCLAIM s g b 3600000 10-0 COUNT 2
        XAUTOCLAIM s g b 3600000 (10-0 COUNT 3
        XAUTOCLAIM s g b 0 0 COUNT 2 JUSTID
        XAUTOCLAIM s g b 0 29-0 COUNT 5 JUSTID
    """)


def test_pipelined_group_sequence_in_multi(both):
    both.run("""
        XADD s 1-0 a 1
        XGROUP CREATE s g 0
        MULTI
        XREADGROUP GROUP g c BLOCK 1000 STREAMS s >
        XREADGROUP GROUP g c BLOCK 1000 STREAMS s >
        XACK s g 1-0
        XPENDING s g
        EXEC
    """)


# ---------------------------------------------------------------------------
# Blocking
# ---------------------------------------------------------------------------


def _in_thread(port: int, *cmd, resp3: bool = False):
    """Run a (blocking) command on its own connection; returns (thread, result list)."""
    out: list = []

    def go():
        c = RawClient(port, resp3)
        try:
            out.append(c.call(*cmd))
        finally:
            c.close()
    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t, out


def _wait_blocked(client: RawClient, n: int = 1, timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = client.call("INFO", "clients")[1]
        if b"blocked_clients:%d" % n in info:
            return
        time.sleep(0.01)
    raise AssertionError("client did not block")


def test_xreadgroup_creates_its_consumer_when_serving_nothing(tmp_path):
    """Redis >= 7.2 creates the consumer of every XREADGROUP, also one that serves
    nothing or blocks, and propagates XGROUP CREATECONSUMER (stream-cgroups.tcl,
    "Consumer without PEL is present in AOF after AOFRW", "XREADGROUP propagates new
    consumer to replica"): the AOF and a replica have the consumers too."""
    with ServerProcess(tmp_path / "p", "--appendonly", "yes", "--save", "") as p, \
            ServerProcess(tmp_path / "r", "--save", "", "--replicaof", "127.0.0.1",
                          str(p.port)) as rep:
        c, cr = RawClient(p.port), RawClient(rep.port)
        wait_until(lambda: b"master_link_status:up" in cr.call("INFO", "replication")[1],
                   what="the replica link")
        c.call("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
        c.call("XADD", "s", "1-0", "f", "v")
        c.call("XREADGROUP", "GROUP", "g", "Alice", "NOACK", "STREAMS", "s", ">")
        assert c.call("XREADGROUP", "GROUP", "g", "Bob", "STREAMS", "s", ">") == (b"*", None)
        t, out = _in_thread(p.port, "XREADGROUP", "GROUP", "g", "Carol", "BLOCK", "0",
                            "NOACK", "STREAMS", "s", ">")
        _wait_blocked(c)

        def consumers(client):
            return [plain(info)[1] for info in client.call("XINFO", "CONSUMERS", "s", "g")[1]]
        assert consumers(c) == [b"Alice", b"Bob", b"Carol"]
        digest = c.call("DEBUG", "DIGEST")
        wait_until(lambda: cr.call("DEBUG", "DIGEST") == digest, what="the replica's digest")
        assert consumers(cr) == [b"Alice", b"Bob", b"Carol"]
        c.call("XADD", "s", "2-0", "f", "v")         # serves Carol
        t.join(5)
        digest = c.call("DEBUG", "DIGEST")
        c.call("DEBUG", "LOADAOF")
        assert c.call("DEBUG", "DIGEST") == digest
        assert consumers(c) == [b"Alice", b"Bob", b"Carol"]
        c.close()
        cr.close()


@pytest.mark.parametrize("resp3", [False, True], ids=["resp2", "resp3"])
def test_blocked_xreadgroup_served_by_xadd_like_redis(server, redis_server, resp3):
    replies = []
    for port in (server.port, redis_server.port):
        c = RawClient(port)
        c.call("FLUSHALL")
        c.call("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
        t, out = _in_thread(port, "XREADGROUP", "GROUP", "g", "w", "BLOCK", "5000",
            "STREAMS", "s", ">", resp3=resp3)
        _wait_blocked(c)
        c.call("XADD", "s", "5-0", "k", "v")
        t.join(5)
        replies.append((out[0], c.call("XPENDING", "s", "g"), c.call("XINFO", "GROUPS", "s")))
        c.close()
    assert replies[0] == replies[1]


def test_blocked_readers_share_entries_fifo(server):
    c = RawClient(server.port)
    c.call("FLUSHALL")
    c.call("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    t1, out1 = _in_thread(server.port, "XREADGROUP", "GROUP", "g", "a", "BLOCK", "5000",
                          "STREAMS", "s", ">")
    _wait_blocked(c, 1)
    t2, out2 = _in_thread(server.port, "XREADGROUP", "GROUP", "g", "b", "COUNT", "1",
                          "BLOCK", "5000", "STREAMS", "s", ">")
    _wait_blocked(c, 2)
    c.call("MULTI")
    c.call("XADD", "s", "1-0", "f", "1")
    c.call("XADD", "s", "2-0", "f", "2")
    c.call("EXEC")
    # the first blocked reader takes everything there is; the second waits on
    t1.join(5)
    assert out1[0] == (b"*", [(b"*", [(b"$", b"s"), (b"*", [
        (b"*", [(b"$", b"1-0"), (b"*", [(b"$", b"f"), (b"$", b"1")])]),
        (b"*", [(b"$", b"2-0"), (b"*", [(b"$", b"f"), (b"$", b"2")])])])])])
    assert not out2
    c.call("XADD", "s", "3-0", "f", "3")
    t2.join(5)
    assert out2[0][1][0][1][1][1][0][1][0] == (b"$", b"3-0")
    assert c.call("XPENDING", "s", "g")[1][0] == (b":", 3)
    c.close()


def test_blocked_xreadgroup_timeout_and_no_new_entry(server):
    c = RawClient(server.port)
    c.call("FLUSHALL")
    c.call("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    t, out = _in_thread(server.port, "XREADGROUP", "GROUP", "g", "a", "BLOCK", "300",
                        "STREAMS", "s", ">")
    _wait_blocked(c)
    # A change without anything new for the group does not answer the reader
    # (current Redis; 7.0 would reply with an empty list here).
    c.call("MULTI")
    c.call("XADD", "s", "1-0", "f", "1")
    c.call("XDEL", "s", "1-0")
    c.call("EXEC")
    c.call("XGROUP", "CREATECONSUMER", "s", "g", "zed")
    t.join(5)
    assert out == [(b"*", None)]


_NOGROUP_NOW = (b"-", b"NOGROUP No such key 's' or consumer group 'g' in XREADGROUP with GROUP option")
_WRONGTYPE = (b"-", b"WRONGTYPE Operation against a key holding the wrong kind of value")
_UNBLOCKED_70 = (b"-", b"UNBLOCKED the stream key no longer exists")

# how -> (Redis 7.0's reply, StreamDB's = Redis >= 7.2's: the command run again).
_KEY_CHANGES = {
    "del": (_UNBLOCKED_70, _NOGROUP_NOW),
    "destroy": ((b"-", b"NOGROUP the consumer group this client was blocked on no longer exists"),
                _NOGROUP_NOW),
    "type": (_UNBLOCKED_70, _WRONGTYPE),
    "flushall": (_UNBLOCKED_70, _NOGROUP_NOW),
    "flushdb": (_UNBLOCKED_70, _NOGROUP_NOW),
    "swapdb": (_UNBLOCKED_70, _NOGROUP_NOW),
}


@pytest.mark.parametrize("how", list(_KEY_CHANGES))
def test_blocked_xreadgroup_runs_again_when_its_key_changes(server, redis_server, how):
    """Deliberate difference from Redis 7.0, pinned: a blocked XREADGROUP whose key is
    deleted, changes type, loses its group or whose database is flushed or swapped
    away answers what the command answers now (Redis >= 7.2 re-executes it)."""
    got = []
    for port in (server.port, redis_server.port):
        c = RawClient(port)
        c.call("FLUSHALL")
        c.call("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
        t, out = _in_thread(port, "XREADGROUP", "GROUP", "g", "a", "BLOCK", "1000",
                            "STREAMS", "s", ">")
        _wait_blocked(c)
        if how == "del":
            c.call("DEL", "s")
        elif how == "destroy":
            c.call("XGROUP", "DESTROY", "s", "g")
        elif how == "type":
            c.call("MULTI")
            c.call("DEL", "s")
            c.call("SET", "s", "x")
            c.call("EXEC")
        elif how == "swapdb":
            assert c.call("SWAPDB", "0", "5") == (b"+", b"OK")
        else:
            c.call(how.upper())
        t.join(5)
        got.append(out[0])
        c.close()
    ours, redis_70 = got
    assert (redis_70, ours) == _KEY_CHANGES[how]


def test_blocked_noack_reader(server):
    c = RawClient(server.port)
    c.call("FLUSHALL")
    c.call("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    t, out = _in_thread(server.port, "XREADGROUP", "GROUP", "g", "a", "NOACK", "BLOCK", "3000",
                        "STREAMS", "s", ">")
    _wait_blocked(c)
    c.call("XADD", "s", "1-0", "f", "1")
    t.join(5)
    assert out[0][1][0][1][0] == (b"$", b"s")
    assert c.call("XPENDING", "s", "g")[1][0] == (b":", 0)
    c.close()


# ---------------------------------------------------------------------------
# Newer than Redis 7.0: XREADGROUP ... CLAIM, XACKDEL
# ---------------------------------------------------------------------------


@pytest.fixture
def x(server):
    """Call StreamDB over raw RESP; plain values, errors raise."""
    c = RawClient(server.port)
    c.call("FLUSHALL")

    def call(*cmd):
        reply = c.call(*cmd)
        if reply[0] == b"-":
            raise CommandFailed(reply[1].decode())
        return plain(reply)
    yield call
    c.close()


class CommandFailed(Exception):
    pass


def test_xackdel_of_entries_already_deleted_but_pending(x):
    # stream-cgroups.tcl, "XACKDEL with KEEPREF": entries deleted from the stream by a
    # KEEPREF delete are still pending in the other group; acknowledging them there
    # is 1 ("acknowledged and deleted"), not -1 ("no such id in the PEL").
    x("XADD", "s", "1-0", "f", "v")
    x("XADD", "s", "2-0", "f", "v")
    for g, c in (("group1", "consumer1"), ("group2", "consumer2")):
        x("XGROUP", "CREATE", "s", g, "0")
        x("XREADGROUP", "GROUP", g, c, "STREAMS", "s", ">")
    assert x("XACKDEL", "s", "group1", "KEEPREF", "IDS", "2", "1-0", "2-0") == [1, 1]
    assert x("XLEN", "s") == 0
    assert x("XPENDING", "s", "group2")[0] == 2
    assert x("XACKDEL", "s", "group2", "KEEPREF", "IDS", "2", "1-0", "2-0") == [1, 1]
    assert x("XPENDING", "s", "group2")[0] == 0
    assert x("XACKDEL", "s", "group2", "KEEPREF", "IDS", "1", "1-0") == [-1]


def test_xreadgroup_claim(x):
    for i in range(1, 5):
        x("XADD", "s", f"{i}-0", "f", str(i))
    x("XGROUP", "CREATE", "s", "g", "0")
    x("XREADGROUP", "GROUP", "g", "a", "COUNT", "2", "STREAMS", "s", ">")
    time.sleep(0.05)
    # Nothing idle long enough: only new entries, yet in the four-element shape
    # every entry of a CLAIM read has: idle 0, delivered 0 times before.
    got = x("XREADGROUP", "GROUP", "g", "b", "COUNT", "1", "CLAIM", "100000",
            "STREAMS", "s", ">")
    assert got == [[b"s", [[b"3-0", [b"f", b"3"], 0, 0]]]]
    time.sleep(0.05)
    # Idle entries first (4 elements: id, fields, idle ms, previous deliveries), then new.
    got = x("XREADGROUP", "GROUP", "g", "c", "CLAIM", "20", "STREAMS", "s", ">")
    entries = got[0][1]
    assert [e[0] for e in entries] == [b"1-0", b"2-0", b"3-0", b"4-0"]
    assert [len(e) for e in entries] == [4, 4, 4, 4]
    assert entries[0][2] >= 20 and entries[0][3] == 1
    assert entries[3][2:] == [0, 0]
    pending = x("XPENDING", "s", "g", "-", "+", "10")
    assert [(p[1], p[3]) for p in pending] == [(b"c", 2), (b"c", 2), (b"c", 2), (b"c", 1)]
    # COUNT covers claimed and new entries together; CLAIM is ignored for history reads.
    x("XADD", "s", "5-0", "f", "5")
    got = x("XREADGROUP", "GROUP", "g", "d", "COUNT", "2", "CLAIM", "0",
            "STREAMS", "s", ">")
    assert [len(e) for e in got[0][1]] == [4, 4]
    got = x("XREADGROUP", "GROUP", "g", "d", "CLAIM", "0", "STREAMS", "s", "0")
    assert [len(e) for e in got[0][1]] == [2, 2]
    with pytest.raises(CommandFailed, match="min-idle-time must be a positive integer"):
        x("XREADGROUP", "GROUP", "g", "d", "CLAIM", "-1", "STREAMS", "s", ">")


def test_xreadgroup_claim_noack_keeps_claimed_pending(x):
    x("XADD", "s", "1-0", "f", "1")
    x("XGROUP", "CREATE", "s", "g", "0")
    x("XREADGROUP", "GROUP", "g", "a", "STREAMS", "s", ">")
    x("XADD", "s", "2-0", "f", "2")
    got = x("XREADGROUP", "GROUP", "g", "b", "NOACK", "CLAIM", "0",
            "STREAMS", "s", ">")
    assert [e[0] for e in got[0][1]] == [b"1-0", b"2-0"]
    assert x("XPENDING", "s", "g")[:2] == [1, b"1-0"]


def test_blocked_xreadgroup_claim_wakes_for_new_entry(server):
    c = RawClient(server.port)
    c.call("FLUSHALL")
    c.call("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    t, out = _in_thread(server.port, "XREADGROUP", "GROUP", "g", "a", "CLAIM", "60000",
                        "BLOCK", "3000", "STREAMS", "s", ">")
    _wait_blocked(c)
    c.call("XADD", "s", "1-0", "f", "1")
    t.join(5)
    assert out[0][1][0][1][1] == (b"*", [(b"*", [(b"$", b"1-0"), (b"*", [(b"$", b"f"), (b"$", b"1")]),
                                                 (b":", 0), (b":", 0)])])
    c.close()


def test_xackdel(x):
    for i in range(1, 5):
        x("XADD", "s", f"{i}-0", "f", str(i))
    x("XGROUP", "CREATE", "s", "g1", "0")
    x("XGROUP", "CREATE", "s", "g2", "0")
    x("XREADGROUP", "GROUP", "g1", "a", "STREAMS", "s", ">")
    x("XREADGROUP", "GROUP", "g2", "b", "COUNT", "2", "STREAMS", "s", ">")
        # KEEPREF (default): acked in g1 and deleted; g2 keeps its reference.
    assert x("XACKDEL", "s", "g1", "IDS", "2", "1-0", "9-0") == [1, -1]
    assert x("XPENDING", "s", "g2")[0] == 2
    # ACKED: 2-0 is still pending in g2, 3-0 not yet read by g2: both kept.
    assert x("XACKDEL", "s", "g1", "ACKED", "IDS", "2", "2-0", "3-0") == [2, 2]
    assert x("XLEN", "s") == 3
    # DELREF: deleted and removed from every PEL.
    assert x("XACKDEL", "s", "g1", "DELREF", "IDS", "1", "4-0") == [1]
    assert x("XPENDING", "s", "g1")[0] == 0
    # 1-0 left the stream above (KEEPREF) but is still pending in g2: acknowledged
    # is 1, never -1 (stream-cgroups.tcl, "XACKDEL with KEEPREF").
    assert x("XACKDEL", "s", "g2", "DELREF", "IDS", "2", "1-0", "2-0") == [1, 1]
    assert x("XPENDING", "s", "g2")[0] == 0
    # No key or no group: -1 for every id.
    assert x("XACKDEL", "nokey", "g1", "IDS", "2", "1-0", "2-0") == [-1, -1]
    assert x("XACKDEL", "s", "nog", "IDS", "1", "3-0") == [-1]
    for args, msg in ((["IDS", "0", "1-0"], "positive integer"),
                      (["IDS", "2", "1-0"], "must match"),
                      (["BOGUS", "IDS", "1", "1-0"], "syntax error"),
                      (["IDS", "1", "x"], "Invalid stream ID")):
        with pytest.raises(CommandFailed, match=msg):
            x("XACKDEL", "s", "g1", *args)
