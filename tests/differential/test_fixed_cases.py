"""Hand-written differential cases for the trickiest stream rules.

Each test runs a short script on both servers (nodes of 5 entries) and
asserts that the replies are identical and what we expect them to be, so a
failure reads as a statement about Redis's behaviour.
"""

from __future__ import annotations

import pytest

from .resp import Err, Null, NullArray, RawClient, Status

pytestmark = pytest.mark.differential

U64 = 2**64 - 1
MAX_ID = b"%d-%d" % (U64, U64)


@pytest.fixture(scope="module")
def servers(server, redis_server):
    clients = [RawClient(server.port), RawClient(redis_server.port)]
    saved = []
    for c in clients:
        old = c.call("CONFIG", "GET", "stream-node-max-entries")
        saved.append(old[1] if isinstance(old, list) else dict(old)[b"stream-node-max-entries"])
        c.call("CONFIG", "SET", "stream-node-max-entries", "5")
    yield clients
    for c, value in zip(clients, saved):
        c.call("CONFIG", "SET", "stream-node-max-entries", value)
        c.call("FLUSHALL")
        c.close()


def run(servers, *commands) -> list:
    """Run ``commands`` (strings, split on spaces) on both; the replies must be identical."""
    sdb, redis = servers
    out = []
    for c in (sdb, redis):
        c.call("FLUSHALL")
    for cmd in commands:
        args = cmd.split(" ") if isinstance(cmd, str) else cmd
        r = redis.call(*args)
        s = sdb.call(*args)
        assert s == r, f"{cmd}: redis {r!r}, streamdb {s!r}"
        out.append(r)
    return out


def fill(key: str, n: int, start: int = 1) -> list[str]:
    return [f"XADD {key} {i}-1 f v" for i in range(start, start + n)]


# -- approximate trimming removes whole nodes only ------------------------------


def test_approx_maxlen_removes_whole_nodes_only(servers):
    # 23 entries = nodes of 5,5,5,5,3.  MAXLEN ~ 12 may drop a node only if
    # what remains is still >= 12: two nodes go (13 left), not a third.
    replies = run(servers, *fill("s", 23), "XTRIM s MAXLEN ~ 12", "XLEN s",
                  "XTRIM s MAXLEN ~ 12", "XTRIM s MAXLEN ~ 9", "XLEN s")
    assert replies[-5:] == [10, 13, 0, 0, 13]


def test_approx_trim_counts_nodes_with_deleted_entries(servers):
    # A node keeps its size in entries when some are deleted; ~ trimming
    # removes it whole and reports only its live entries.  MAXLEN ~ 0 takes
    # every node, the tail node included.
    replies = run(servers, *fill("s", 12), "XDEL s 1-1 2-1 3-1",
                  "XTRIM s MAXLEN ~ 3", "XLEN s", "XTRIM s MAXLEN ~ 0", "XLEN s")
    assert replies[12:] == [3, 2, 7, 7, 0]


def test_approx_minid_keeps_the_node_holding_the_threshold(servers):
    replies = run(servers, *fill("s", 12), "XTRIM s MINID ~ 8", "XRANGE s - + COUNT 1",
                  "XTRIM s MINID 8", "XRANGE s - + COUNT 1", "XLEN s")
    assert replies[-5:] == [5, [[b"6-1", [b"f", b"v"]]], 2, [[b"8-1", [b"f", b"v"]]], 5]


def test_limit_caps_the_entries_removed_per_call_in_whole_nodes(servers):
    replies = run(servers, *fill("s", 20),
                  "XTRIM s MAXLEN ~ 0 LIMIT 4",    # a node is 5 entries: nothing fits
                  "XTRIM s MAXLEN ~ 0 LIMIT 5",
                  "XTRIM s MAXLEN ~ 0 LIMIT 12",
                  "XTRIM s MAXLEN ~ 0 LIMIT 0",    # 0 = no limit: the last node goes too
                  "XLEN s",
                  "XTRIM s MAXLEN 0 LIMIT 5",
                  "XTRIM s MINID 5 LIMIT 5")
    assert replies[20:] == [0, 5, 10, 5, 0,
                            Err("ERR syntax error, LIMIT cannot be used without the special ~ option"),
                            Err("ERR syntax error, LIMIT cannot be used without the special ~ option")]


def test_xadd_with_approx_trim_and_limit(servers):
    cmds = [f"XADD s MAXLEN ~ 3 LIMIT 5 {i}-1 f v" for i in range(1, 16)] + ["XLEN s"]
    replies = run(servers, *cmds)
    assert replies[-1] == 5     # trimmed node by node, never below 3


def test_exact_trim_reaches_inside_a_node(servers):
    replies = run(servers, *fill("s", 12), "XTRIM s MAXLEN = 7", "XRANGE s - + COUNT 1",
                  "XTRIM s MINID 11", "XLEN s")
    assert replies[12:] == [5, [[b"6-1", [b"f", b"v"]]], 5, 2]


# -- exclusive ranges at the ends of the ID space -------------------------------------


def test_exclusive_ranges_at_the_smallest_and_largest_ids(servers):
    replies = run(servers, "XADD s 0-1 f v", f"XADD s {U64}-{U64 - 1} f v",
                  "XRANGE s (0-0 +",
                  "XRANGE s - (0-0",
                  f"XRANGE s ({U64}-{U64} +",
                  f"XRANGE s - ({U64}-{U64}",
                  f"XREVRANGE s ({U64}-{U64} -",
                  "XREVRANGE s + (0-0",
                  "XREVRANGE s (0-0 -",
                  "XRANGE s (0-1 (0-2",
                  "XRANGE s (0 +")
    assert replies[2:] == [
        [[b"0-1", [b"f", b"v"]], [b"%d-%d" % (U64, U64 - 1), [b"f", b"v"]]],
        Err("ERR invalid end ID for the interval"),
        Err("ERR invalid start ID for the interval"),
        [[b"0-1", [b"f", b"v"]], [b"%d-%d" % (U64, U64 - 1), [b"f", b"v"]]],
        [[b"%d-%d" % (U64, U64 - 1), [b"f", b"v"]], [b"0-1", [b"f", b"v"]]],
        [[b"%d-%d" % (U64, U64 - 1), [b"f", b"v"]], [b"0-1", [b"f", b"v"]]],
        Err("ERR invalid end ID for the interval"),
        [],
        [[b"0-1", [b"f", b"v"]], [b"%d-%d" % (U64, U64 - 1), [b"f", b"v"]]],   # "(0" is "(0-0"
    ]


def test_trims_and_group_reads_of_a_stream_holding_the_maximal_id(servers):
    # The maximal id is a real entry: trimming must reach it and a group that has
    # read it has nothing new (it once served as "no bound" here).
    top = f"{U64}-{U64}"
    replies = run(servers, "XADD s 1-1 f v", f"XADD s {top} f v", "XTRIM s MAXLEN = 0", "XLEN s",
                  *fill("t", 7), f"XADD t {top} f v", "XTRIM t MAXLEN ~ 0", "XLEN t",
                  *fill("u", 3), f"XADD u {top} f v", "XTRIM u MAXLEN = 1", "XRANGE u - +",
                  "XTRIM u MINID 1", "XGROUP CREATE u g 0",
                  "XREADGROUP GROUP g c STREAMS u >", "XREADGROUP GROUP g c STREAMS u >",
                  # (c exists first: current Redis creates the consumer of a read
                  # serving nothing, 7.0 does not; test_known_mismatches.py pins that)
                  "XGROUP CREATE u h $", "XGROUP CREATECONSUMER u h c",
                  "XREADGROUP GROUP h c STREAMS u >", "XINFO GROUPS u")
    assert replies[2:4] == [2, 0]
    assert replies[12:14] == [8, 0]
    assert replies[18:21] == [3, [[top.encode(), [b"f", b"v"]]], 0]
    assert replies[22] == [[b"u", [[top.encode(), [b"f", b"v"]]]]]
    assert replies[23] == replies[26] == NullArray


def test_count_zero_and_negative(servers):
    replies = run(servers, "XADD s 1-1 f v", "XRANGE s - + COUNT 0", "XRANGE s - + COUNT -3",
                  "XREVRANGE s + - COUNT 0", "XRANGE nokey - + COUNT 0",
                  "XREAD COUNT 0 STREAMS s 0", "XREAD COUNT -1 STREAMS s 0")
    assert replies[1:5] == [NullArray, NullArray, NullArray, []]
    assert replies[5] == replies[6] == [[b"s", [[b"1-1", [b"f", b"v"]]]]]


# -- XADD <ms>-* ----------------------------------------------------------------------


def test_xadd_ms_star_continues_or_starts_a_sequence(servers):
    replies = run(servers, "XADD s 5-* f v", "XADD s 5-* f v", "XADD s 7-* f v", "XADD s 6-* f v",
                  "XADD s 0-* f v", "XADD t 0-* f v")
    assert replies[:3] == [b"5-0", b"5-1", b"7-0"]
    assert replies[3] == replies[4] == Err(
        "ERR The ID specified in XADD is equal or smaller than the target stream top item")
    assert replies[5] == b"0-1"      # 0-0 is never a valid entry ID


def test_xadd_ms_star_at_the_largest_sequence(servers):
    sdb, redis = servers
    run(servers, f"XADD s 5-{U64} f v")
    # Redis 7.0 answers from a stale errno here: "equal or smaller" or
    # "Elements are too large to be stored".  StreamDB always gives the first,
    # which is what later Redis versions send.
    r = redis.call("XADD", "s", "5-*", "f", "v")
    s = sdb.call("XADD", "s", "5-*", "f", "v")
    assert s == Err("ERR The ID specified in XADD is equal or smaller than the target stream top item")
    assert r in (s, Err("ERR Elements are too large to be stored"))
    assert run(servers, f"XADD s 5-{U64} f v", "XADD s 6-* f v",
               f"XADD m {U64}-{U64} f v", "XADD m * f v", f"XADD m {U64}-* f v") == [
        b"5-%d" % U64, b"6-0", MAX_ID,
        Err("ERR The stream has exhausted the last possible ID, unable to add more items"),
        Err("ERR The stream has exhausted the last possible ID, unable to add more items")]


def test_xsetid_then_ms_star(servers):
    replies = run(servers, "XADD s 1-1 f v", "XDEL s 1-1", "XSETID s 5-5", "XADD s 5-* f v",
                  "XSETID s 1-1", "XSETID s 9 ENTRIESADDED 0", "XSETID s 9-0 ENTRIESADDED 1 MAXDELETEDID 10")
    assert replies[2:] == [
        "OK", b"5-6", Err("ERR The ID specified in XSETID is smaller than the target stream top item"),
        Err("ERR The entries_added specified in XSETID is smaller than the target stream length"),
        Err("ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id")]


# -- RESP3 ----------------------------------------------------------------------------


def test_resp3_null_shapes(servers):
    sdb, redis = servers
    for c in (sdb, redis):
        c.call("HELLO", "3")
    try:
        replies = run(servers, "XADD s 1-1 f v", "XRANGE s - + COUNT 0", "XREAD STREAMS s 1-1",
                      "XREAD STREAMS s 0", "GET nokey", "XADD nokey NOMKSTREAM * f v")
        assert replies[1:3] == [Null, Null]
        assert replies[4:] == [Null, Null]
    finally:
        for c in (sdb, redis):
            c.call("HELLO", "2")


# -- string and key commands (the WRONGTYPE companions) ----------------------------------


def test_set_expire_overflow_and_decrby_limits(servers):
    replies = run(servers,
                  "SET k v EX 9223372036854775807",      # seconds whose ms overflow
                  "SET k v EX 9223372036854775",         # ms fit, now + ms does not
                  "SET k v PX 9223372036854775807",
                  "SET k v EX 0", "SET k v PX -1", "GET k",
                  "SET n 0", "DECRBY n -9223372036854775808", "INCRBY n 9223372036854775807",
                  "INCR n", "DECRBY n x", "GET n")
    assert replies == [Err("ERR invalid expire time in 'set' command")] * 5 + [
        Null, "OK", Err("ERR decrement would overflow"), 9223372036854775807,
        Err("ERR increment or decrement would overflow"),
        Err("ERR value is not an integer or out of range"), b"9223372036854775807"]


def test_wrongtype_and_string_commands(servers):
    replies = run(servers, "SET str x", "XADD s 1-1 f v", "XADD str 2-1 f v", "XLEN str",
                  "XRANGE str - +", "XREAD STREAMS s str 0 0", "XTRIM str MAXLEN 0",
                  "XDEL str 1-1", "XSETID str 5-5", "GET s", "INCR s", "SET s 1", "TYPE s",
                  "INCR s", "TYPE str", "EXISTS s str nokey s", "DEL s str nokey")
    wrongtype = Err("WRONGTYPE Operation against a key holding the wrong kind of value")
    assert replies[2:11] == [wrongtype] * 9
    assert replies[11:] == ["OK", "string", 2, "string", 3, 2]


def test_command_subcommand_arity_and_getkeys_errors(servers):
    replies = run(servers, "COMMAND COUNT x", "COMMAND GETKEYS", "COMMAND GETKEYS ping",
                  "COMMAND GETKEYS xadd s", "COMMAND GETKEYS nosuch a", "COMMAND LIST x",
                  "COMMAND HELP x", "COMMAND GETKEYS xread STREAMS a b 0 0")
    assert replies == [
        Err("ERR wrong number of arguments for 'command|count' command"),
        Err("ERR wrong number of arguments for 'command|getkeys' command"),
        Err("ERR wrong number of arguments for 'command|getkeys' command"),
        Err("ERR Invalid number of arguments specified for command"),
        Err("ERR Invalid command specified"),
        Err("ERR syntax error"),
        Err("ERR wrong number of arguments for 'command|help' command"),
        [b"a", b"b"]]


# -- SWAPDB --------------------------------------------------------------------


def test_swapdb_errors(servers):
    replies = run(servers, "SWAPDB a 1", "SWAPDB 1 b", "SWAPDB 01 1", "SWAPDB +1 1",
                  "SWAPDB 2147483648 1", "SWAPDB 1 -2147483649", "SWAPDB 0 16",
                  "SWAPDB -1 0", "SWAPDB 3 3", "SWAPDB 1", "SWAPDB 1 2 3")
    assert replies[0] == Err("ERR invalid first DB index")
    assert replies[1] == Err("ERR invalid second DB index")
    assert replies[6] == replies[7] == Err("ERR DB index is out of range")
    assert replies[8] == Status("OK")
    # Flags come back as a set (in no order); the ACL categories in Redis's order.
    sdb_info, redis_info = (c.call("COMMAND", "INFO", "swapdb")[0] for c in servers)
    assert sdb_info[:2] == redis_info[:2] and sdb_info[3:] == redis_info[3:]
    assert sorted(sdb_info[2]) == sorted(redis_info[2])


def test_swapdb_exchanges_keys_and_expiry_times(servers):
    # An absolute expiry time, so that both servers answer the same whatever the clock did.
    replies = run(servers, "XADD s 1-1 f zero", "SET only0 x", "PEXPIREAT only0 99999999999999",
                  "SELECT 2", "XADD s 5-1 f two", "XGROUP CREATE s g 0", "SWAPDB 2 0",
                  "XRANGE s - +", "EXISTS only0", "PEXPIRETIME only0", "XINFO GROUPS s", "SELECT 0",
                  "XRANGE s - +", "XINFO GROUPS s", "DBSIZE", "TYPE only0", "SWAPDB 0 2",
                  "XRANGE s - +", "SELECT 0")
    assert replies[7] == [[b"1-1", [b"f", b"zero"]]]
    assert replies[8] == 1 and replies[9] == 99999999999999
    assert replies[12] == [[b"5-1", [b"f", b"two"]]]
    assert replies[14] == 1
    assert replies[17] == [[b"1-1", [b"f", b"zero"]]]


@pytest.mark.parametrize("watched, dirty", [("here", True), ("there", True), ("nowhere", False)])
def test_swapdb_invalidates_watches_on_keys_existing_on_either_side(servers, watched, dirty):
    replies = run(servers, "SET here 1", "SELECT 1", "SET there 1", "SELECT 0",
                  f"WATCH {watched}", "SWAPDB 0 1", "MULTI", "PING", "EXEC")
    assert replies[-1] == (NullArray if dirty else [Status("PONG")])


@pytest.mark.parametrize("command", ["xgroup create s g $", "xgroup nosuch s", "xinfo stream s",
                                     "xgroup create s", "command getkeys", "object encoding k",
                                     "ping a", "xgroup createconsumer s g c"])
def test_command_getkeys_resolves_subcommands_as_redis(servers, command):
    run(servers, "COMMAND GETKEYS " + command)


# -- glob patterns: KEYS, SCAN MATCH, COMMAND LIST FILTERBY PATTERN -------------------


GLOB_KEYS = ["a", "ab", "abc", "hello", "hallo", "h-llo", "*", "!", "]", "a\\", "-", "b"]
GLOB_PATTERNS = ["*", "a*", "a*b", "h?llo", "h[^e]llo", "[!a]", "[z-a]", "\\*", "[\\]]", "[abc",
                 "a\\", "*b*", "a[", "[a-]", "[-a]", "ab*", "a**", "*a"]


@pytest.mark.parametrize("pattern", GLOB_PATTERNS)
def test_keys_and_scan_match_glob_as_redis(servers, pattern):
    sdb, redis = servers
    for c in servers:
        c.call("FLUSHALL")
        for key in GLOB_KEYS:
            c.call("SET", key, "1")
    keys = [sorted(c.call("KEYS", pattern)) for c in servers]
    scanned = [sorted(c.call("SCAN", "0", "MATCH", pattern, "COUNT", "1000")[1]) for c in servers]
    assert keys[0] == keys[1] and scanned[0] == scanned[1] == keys[1]


@pytest.mark.parametrize("pattern", ["x*", "X*", "xa[d-e]*", "*group|*", "[^a-w]*"])
def test_command_list_filterby_pattern_ignores_case_as_redis(servers, pattern):
    # Compared on the commands both servers have (StreamDB has 8.x's and its own too).
    common = set.intersection(*(set(c.call("COMMAND", "LIST")) for c in servers))
    wanted = [sorted(set(c.call("COMMAND", "LIST", "FILTERBY", "PATTERN", pattern)) & common)
              for c in servers]
    assert wanted[0] and wanted[0] == wanted[1]


# -- error counting ------------------------------------------------------------------


def _errors(client: RawClient) -> tuple[bytes, bytes]:
    info = client.call("INFO", "errorstats") + client.call("INFO", "stats")
    lines = [line for line in info.split(b"\r\n") if line.startswith((b"errorstat_", b"total_error_replies"))]
    return tuple(sorted(lines))


def test_protocol_errors_and_refused_connections_count_as_redis_counts_them(server, redis_server):
    """Every error reply counts in INFO errorstats and total_error_replies, the protocol
    errors the connection answers before any command runs included; a connection refused
    at maxclients is counted in rejected_connections only (Redis writes that error
    straight to the socket, outside its reply path)."""
    import socket
    import time
    malformed = [b"*1\r\n$x\r\n", b"*abc\r\n", b'"unbalanced\r\n', b"*1\r\n$-5\r\n",
                 b"PING\r\n*1\r\n$4\r\nPANG\r\n", b"*2\r\n$3\r\nGET\r\n:1\r\n"]
    results = []
    for port in (server.port, redis_server.port):
        admin = RawClient(port)
        admin.call("CONFIG", "RESETSTAT")
        for data in malformed:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(data)
                reply = b""
                while not reply.endswith(b"\r\n") or reply.count(b"\r\n") < data.count(b"PING") + 1:
                    chunk = s.recv(1000)
                    if not chunk:
                        break
                    reply += chunk
        def connected() -> int:
            return int(admin.call("INFO", "clients").split(b"connected_clients:")[1].split(b"\r\n")[0])
        clients, settled = connected(), False
        for _ in range(50):         # the closed connections above leave the server's list
            time.sleep(0.05)
            settled, clients = clients == connected(), connected()
            if settled:
                break
        old_max = admin.call("CONFIG", "GET", "maxclients")
        old_max = old_max[1] if isinstance(old_max, list) else dict(old_max)[b"maxclients"]
        admin.call("CONFIG", "SET", "maxclients", str(clients))
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                assert s.recv(100) == b"-ERR max number of clients reached\r\n"
            time.sleep(0.05)
        finally:
            admin.call("CONFIG", "SET", "maxclients", old_max)
        stats = admin.call("INFO", "stats")
        results.append((_errors(admin), b"rejected_connections:1\r\n" in stats))
        admin.close()
    assert results[0] == results[1]
    assert results[1][1] and b"errorstat_ERR:count=6" in results[1][0]
