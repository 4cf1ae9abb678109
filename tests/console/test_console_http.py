"""The console over plain HTTP (http.client and raw sockets) against a real server:
the session and CSRF rules, actions through the server's ACL, and requests that
are malformed, too large or use the wrong method (each gets its 4xx; the server
keeps serving its Redis clients and the next console request).  Then the group
page's StreamDB tools: reset to a time with an exact entries-read (STREAMDB.GROUP
SETID), lag in time, the dead-letter policy, NACK and dead-letter of pending
entries, replay of dead letters; each checked on the server with redis-py, and
refused to a read-only user."""

from __future__ import annotations

import datetime
import html
import re
import socket
import time
import urllib.parse

import pytest
import redis

from console_helpers import ADMIN, READER, STREAM_ENTRIES, ConsoleServer, csrf_of, login, pending_ids, request
from helpers import wait_until

GROUP_PAGE = "/group?key=orders&group=billing"


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    with ConsoleServer(tmp_path_factory.mktemp("console-http")) as cs:
        yield cs


@pytest.fixture
def fresh(console):
    console.fill()
    return console


def _raw(port: int, data: bytes) -> bytes:
    """What the console answers to ``data`` sent as is (and then nothing more:
    the sending side is shut), until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def _still_serving(cs: ConsoleServer) -> None:
    assert cs.redis.ping()
    assert request(cs.console_port, "GET", "/login")[0] == 200


@pytest.mark.parametrize("method,path", [
    ("GET", "/"), ("GET", "/streams"), ("GET", "/stream?key=orders"), ("GET", GROUP_PAGE),
    ("GET", "/no-such-page"), ("POST", GROUP_PAGE), ("POST", "/logout")])
def test_without_a_session_every_page_redirects_to_the_login(console, method, path):
    body = "action=ack&id=0-1" if method == "POST" else None
    status, headers, _ = request(console.console_port, method, path, body)
    assert (status, headers["location"]) == (303, "/login")
    # A made-up token is no session either.
    status, headers, _ = request(console.console_port, method, path, body,
                                 cookie="streamdb_console=forged-token")
    assert (status, headers["location"]) == (303, "/login")


def test_the_login_checks_the_password_with_the_servers_users(console):
    port = console.console_port
    status, headers, body = request(port, "POST", "/login", "user=admin&password=wrong")
    assert status == 200 and "set-cookie" not in headers and "invalid username or password" in body
    # The failed login is in the server's ACL log, as a failed AUTH is.
    assert any(e["username"] in ("admin", b"admin") and e["reason"] in ("auth", b"auth")
               for e in console.redis.acl_log())
    # The default user has no password here: the console refuses it.
    status, headers, body = request(port, "POST", "/login", "user=default&password=x")
    assert status == 200 and "set-cookie" not in headers and "has no password" in body
    cookie_header = request(port, "POST", "/login",
                            urllib.parse.urlencode({"user": ADMIN[0], "password": ADMIN[1]}))[1]["set-cookie"]
    assert {"HttpOnly", "SameSite=Strict", "Path=/"} <= {p.strip() for p in cookie_header.split(";")}


def test_a_session_is_a_client_of_the_server_and_client_kill_ends_it(console):
    cookie = login(console.console_port, *ADMIN)
    assert request(console.console_port, "GET", "/", cookie=cookie)[0] == 200
    clients = console.redis.client_list()
    mine = [c for c in clients if c["name"] == "console:admin" and c["user"] == "admin"]
    assert mine
    for c in mine:
        console.redis.client_kill_filter(_id=c["id"])
    status, headers, _ = request(console.console_port, "GET", "/", cookie=cookie)
    assert (status, headers["location"]) == (303, "/login")


def test_logout_ends_the_session(console):
    port = console.console_port
    cookie = login(port, *ADMIN)
    page = request(port, "GET", "/", cookie=cookie)[2]
    status, headers, _ = request(port, "POST", "/logout", f"csrf={csrf_of(page)}", cookie=cookie)
    assert (status, headers["location"]) == (303, "/login")
    assert "Max-Age=0" in headers["set-cookie"]
    assert request(port, "GET", "/", cookie=cookie)[0] == 303
    assert not [c for c in console.redis.client_list() if c["name"] == "console:admin"]


def test_an_action_runs_as_a_command_of_the_sessions_client(fresh):
    port = fresh.console_port
    cookie = login(port, *ADMIN)
    page = request(port, "GET", GROUP_PAGE, cookie=cookie)[2]
    first = pending_ids(fresh.redis)[0]
    body = urllib.parse.urlencode({"csrf": csrf_of(page), "action": "ack", "id": first.decode()})
    status, headers, _ = request(port, "POST", GROUP_PAGE, body, cookie=cookie)
    assert status == 303
    assert first not in pending_ids(fresh.redis)
    assert "Acknowledged 1 entries." in request(port, "GET", headers["location"], cookie=cookie)[2]
    # It went through the request path: counted, and written to the AOF (a restart keeps it).
    assert fresh.redis.info("commandstats")["cmdstat_xack"]["calls"] >= 1
    fresh.srv.kill9()
    fresh.srv.start()
    wait_until(lambda: fresh.redis.ping(), what="the restarted server")
    assert first not in pending_ids(fresh.redis)
    assert len(pending_ids(fresh.redis)) == 7


def test_a_post_without_the_csrf_token_is_refused(fresh):
    port = fresh.console_port
    cookie = login(port, *ADMIN)
    before = pending_ids(fresh.redis)
    for body in (f"action=ack&id={before[0].decode()}",
                 f"action=ack&id={before[0].decode()}&csrf=not-the-token"):
        status, _, page = request(port, "POST", GROUP_PAGE, body, cookie=cookie)
        assert status == 403 and "CSRF" in page
    assert pending_ids(fresh.redis) == before


def test_a_read_only_user_sees_no_action_and_the_server_refuses_a_forged_one(fresh):
    port = fresh.console_port
    cookie = login(port, *READER)
    page = request(port, "GET", GROUP_PAGE, cookie=cookie)[2]
    assert "pending-form" not in page and "setid-form" not in page and "delconsumer" not in page
    assert 'id="pending"' in page          # it still sees the pending entries
    before = pending_ids(fresh.redis)
    # A POST with the reader's own valid session and token: the ACL refuses the XACK.
    body = urllib.parse.urlencode({"csrf": csrf_of(page), "action": "ack", "id": before[0].decode()})
    status, headers, _ = request(port, "POST", GROUP_PAGE, body, cookie=cookie)
    shown = request(port, "GET", headers["location"], cookie=cookie)[2]
    assert "NOPERM" in shown and "xack" in shown
    assert pending_ids(fresh.redis) == before


@pytest.mark.parametrize("data,status", [
    (b"GARBAGE\r\n\r\n", 400),
    (b"GET / HTTP/9.9\r\n\r\n", 400),
    (b"GET http://evil/ HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nno colon here\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n", 431),
    (b"GET / HTTP/1.1\r\n" + b"X-A: 1\r\n" * 100 + b"\r\n", 431),
    (b"PUT / HTTP/1.1\r\n\r\n", 405),
    (b"DELETE /streams HTTP/1.1\r\n\r\n", 405),
    (b"POST /login HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 501),
    (b"POST /login HTTP/1.1\r\n\r\n", 411),
    (b"POST /login HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n", 413),
    (b"POST /login HTTP/1.1\r\nContent-Length: 10\r\n\r\nuser", 400),
    (b"POST /login HTTP/1.1\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nuser=", 400),
])
def test_a_bad_request_gets_its_4xx_and_everyone_else_is_served(console, data, status):
    reply = _raw(console.console_port, data)
    assert reply.startswith(f"HTTP/1.1 {status} ".encode()), reply[:200]
    _still_serving(console)


def test_a_connection_that_sends_nothing_and_closes_is_no_error(console):
    assert _raw(console.console_port, b"") == b""
    _still_serving(console)


def test_the_console_directives_are_start_up_only(console):
    """CONFIG SET refuses them (the listener stays where it started); streamdb.conf lists
    both with their defaults: off, on loopback."""
    from helpers import ROOT
    for name, value in (("console-port", "1"), ("console-bind", "0.0.0.0")):
        with pytest.raises(redis.ResponseError, match="can't set immutable config"):
            console.redis.config_set(name, value)
    assert console.redis.config_get("console-port") == {"console-port": str(console.console_port)}
    _still_serving(console)
    conf = (ROOT / "streamdb.conf").read_text()
    assert "\nconsole-port 0\n" in conf and "\nconsole-bind 127.0.0.1\n" in conf


def _entry_ids(page: str) -> list[str]:
    return re.findall(r'<td class="entry-id">([^<]+)</td>', page)


def test_a_stream_is_browsed_from_a_time_backwards_and_as_json(fresh):
    port, r = fresh.console_port, fresh.redis
    cookie = login(port, *ADMIN)
    ids = [i.decode() for i, _ in r.xrange("orders")]
    tenth_ms = int(ids[10].split("-")[0])
    from_time = datetime.datetime.fromtimestamp(tenth_ms / 1000, datetime.timezone.utc) \
        .isoformat(timespec="milliseconds").replace("+00:00", "Z")
    page = request(port, "GET", f"/stream?key=orders&count=5&time={urllib.parse.quote(from_time)}",
                   cookie=cookie)[2]
    first_at_that_ms = next(i for i in ids if int(i.split("-")[0]) == tenth_ms)
    assert _entry_ids(page)[0] == first_at_that_ms and len(_entry_ids(page)) == 5
    back = request(port, "GET", f"/stream?key=orders&count=5&dir=back&start={urllib.parse.quote('(' + ids[10])}",
                   cookie=cookie)[2]
    assert _entry_ids(back) == list(reversed(ids[5:10]))
    as_json = request(port, "GET", "/stream?key=orders&count=1&fmt=json", cookie=cookie)[2]
    assert "{\n  &quot;n&quot;: 0\n}" in as_json
    bad = request(port, "GET", "/stream?key=orders&time=yesterday", cookie=cookie)[2]
    assert "neither ISO-8601" in bad


def _map(reply) -> dict:
    """A map reply as redis-py gives it: a dict, or RESP2's flat array."""
    return reply if isinstance(reply, dict) else dict(zip(reply[0::2], reply[1::2]))


def _stream_rows(page: str) -> dict[str, list[str]]:
    """The stream list's cells after the name, by stream."""
    return {re.search(r">([^<]+)</a>", row).group(1): re.findall(r"<td[^>]*>([^<]*)</td>", row)
            for row in re.findall(r"<tr><td><a.*?</tr>", page)}


def test_the_stream_list_shows_size_residence_retention_groups_and_worst_lag(fresh):
    r = fresh.redis
    r.execute_command("STREAMDB.RETENTION", "SET", "audit", "MAXAGE", "3600000")
    try:
        cookie = login(fresh.console_port, *ADMIN)
        page = request(fresh.console_port, "GET", "/streams", cookie=cookie)[2]
        rows = _stream_rows(page)
        policy = {name: _map(r.execute_command("STREAMDB.RETENTION", "GET", name))
                  for name in ("orders", "audit")}
    finally:
        r.execute_command("STREAMDB.RETENTION", "RESET", "audit")
    # entries, bytes, resident, retention, groups, worst lag, worst time lag, last id, entries added
    orders = rows["orders"]
    assert orders[:6] == [str(STREAM_ENTRIES), str(policy["orders"][b"bytes"]), "100%", "none (default; trimmed 0)",
                          "1", str(STREAM_ENTRIES - 8)]
    # The oldest entry billing was not given is the 9th: its age, in a person's unit.
    assert re.fullmatch(r"\d+ (ms|s)|\d+ min \d+ s", orders[6]) and orders[6] != "0 ms"
    assert orders[8] == str(STREAM_ENTRIES)
    audit = rows["audit"]
    assert audit[:7] == ["3", str(policy["audit"][b"bytes"]), "100%", "age 1 h 0 min (own; trimmed 0)",
                         "0", "-", "-"]


def test_a_binary_key_is_listed_and_opened(fresh):
    port, r = fresh.console_port, fresh.redis
    key = b"bin\xff key&x"
    r.xadd(key, {"f": "v"})
    try:
        cookie = login(port, *ADMIN)
        listing = request(port, "GET", "/streams", cookie=cookie)[2]
        link = re.search(r'href="(/stream\?key=bin%FF[^"]*)"', listing).group(1)
        page = request(port, "GET", html.unescape(link), cookie=cookie)[2]
        assert len(_entry_ids(page)) == 1
    finally:
        r.delete(key)


def test_claim_and_delete_consumer_run_on_the_server(fresh):
    port, r = fresh.console_port, fresh.redis
    cookie = login(port, *ADMIN)
    csrf = csrf_of(request(port, "GET", GROUP_PAGE, cookie=cookie)[2])
    worker1 = [p["message_id"] for p in r.xpending_range("orders", "billing", "-", "+", 100, "worker-1")]
    body = urllib.parse.urlencode([("csrf", csrf), ("action", "claim"), ("consumer", "worker-3"),
                                   *[("id", i.decode()) for i in worker1[:2]]])
    status, headers, _ = request(port, "POST", GROUP_PAGE, body, cookie=cookie)
    assert "Claimed 2 entries for worker-3." in request(port, "GET", headers["location"], cookie=cookie)[2]
    claimed = r.xpending_range("orders", "billing", "-", "+", 100, "worker-3")
    assert [p["message_id"] for p in claimed] == worker1[:2]
    body = urllib.parse.urlencode({"csrf": csrf, "action": "delconsumer", "consumer": "worker-2"})
    request(port, "POST", GROUP_PAGE, body, cookie=cookie)
    assert {c["name"] for c in r.xinfo_consumers("orders", "billing")} == {b"worker-1", b"worker-3"}



def test_an_action_reaches_a_replica_and_a_replicas_console_cannot_write(fresh, tmp_path):
    port, r = fresh.console_port, fresh.redis
    with ConsoleServer(tmp_path / "replica", "--replicaof", "127.0.0.1", str(fresh.srv.port),
                       with_data=False) as rep:
        wait_until(lambda: rep.redis.info("replication")["master_link_status"] == "up",
                   what="the replica's link")
        # (The replica's users are its own: ConsoleServer made them; ACLs are not replicated.)
        wait_until(lambda: pending_ids(rep.redis) == pending_ids(r), what="the replica's copy")
        cookie = login(port, *ADMIN)
        first = pending_ids(r)[0]
        csrf = csrf_of(request(port, "GET", GROUP_PAGE, cookie=cookie)[2])
        request(port, "POST", GROUP_PAGE, f"csrf={csrf}&action=ack&id={first.decode()}", cookie=cookie)
        wait_until(lambda: first not in pending_ids(rep.redis), what="the ack on the replica")
        # On the replica the same action is refused by the server: READONLY.
        rep_cookie = login(rep.console_port, *ADMIN)
        rep_csrf = csrf_of(request(rep.console_port, "GET", GROUP_PAGE, cookie=rep_cookie)[2])
        second = pending_ids(rep.redis)[0]
        _, headers, _ = request(rep.console_port, "POST", GROUP_PAGE,
                                f"csrf={rep_csrf}&action=ack&id={second.decode()}", cookie=rep_cookie)
        assert "READONLY" in request(rep.console_port, "GET", headers["location"], cookie=rep_cookie)[2]
        assert second in pending_ids(rep.redis)


# The group page's StreamDB tools

TIMED_PAGE = "/group?key=timed&group=g"
DLQ = "orders-dlq"


def _post(cs: ConsoleServer, page: str, cookie: str, fields: list[tuple[str, str]]) -> str:
    """Post ``fields`` from ``page`` with its CSRF token; the page shown after it
    (HTML entities replaced)."""
    csrf = csrf_of(request(cs.console_port, "GET", page, cookie=cookie)[2])
    status, headers, _ = request(cs.console_port, "POST", page,
                                 urllib.parse.urlencode([("csrf", csrf), *fields]), cookie=cookie)
    assert status == 303
    return html.unescape(request(cs.console_port, "GET", headers["location"], cookie=cookie)[2])


def _group(r, key: str, name: str) -> dict:
    return next(g for g in r.xinfo_groups(key) if g["name"] == name.encode())


def _timed_stream(r) -> list[tuple[int, int]]:
    """Stream ``timed``: 30 entries 10 ms apart from a minute ago, two entries in
    each of the even milliseconds (seq 0 and 1); group g made at 0.  Their (ms, seq)."""
    base = int(time.time() * 1000) - 60_000
    ids = []
    for i in range(30):
        ms = base + 10 * i
        for seq in ((0, 1) if i % 2 == 0 else (0,)):
            ids.append((ms, seq))
            r.xadd("timed", {"n": str(i)}, id=f"{ms}-{seq}")
    r.xgroup_create("timed", "g", "0")
    return ids


def _iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc) \
        .isoformat(timespec="milliseconds").replace("+00:00", "Z")


def test_a_reset_to_a_time_sets_the_exact_entries_read_and_the_lag_stays_known(fresh):
    r = fresh.redis
    ids = _timed_stream(r)
    cookie = login(fresh.console_port, *ADMIN)
    for when_ms in (ids[7][0], ids[20][0] + 3, ids[0][0], ids[-1][0] + 1):
        shown = _post(fresh, TIMED_PAGE, cookie, [("action", "setid"), ("target", "time"), ("to", _iso(when_ms))])
        before = [i for i in ids if i[0] < when_ms]
        group = _group(r, "timed", "g")
        expected_last = f"{before[-1][0]}-{before[-1][1]}" if before else "0-0"
        assert group["last-delivered-id"] == expected_last.encode()
        assert group["entries-read"] == len(before)
        assert group["lag"] == len(ids) - len(before)
        assert f"last delivered id is now {expected_last}, entries read {len(before)}." in shown
    # Earliest and latest count exactly too.
    _post(fresh, TIMED_PAGE, cookie, [("action", "setid"), ("target", "0")])
    assert (_group(r, "timed", "g")["entries-read"], _group(r, "timed", "g")["lag"]) == (0, len(ids))
    _post(fresh, TIMED_PAGE, cookie, [("action", "setid"), ("target", "$")])
    assert (_group(r, "timed", "g")["entries-read"], _group(r, "timed", "g")["lag"]) == (len(ids), 0)
    # An id is XGROUP SETID's: entries-read unknown, as in Redis.
    shown = _post(fresh, TIMED_PAGE, cookie, [("action", "setid"), ("target", "id"), ("to", f"{ids[3][0]}-{ids[3][1]}")])
    assert "entries read unknown" in shown
    shown = _post(fresh, TIMED_PAGE, cookie, [("action", "setid"), ("target", "time"), ("to", "yesterday")])
    assert "Give an id, or a time" in shown


def test_the_group_page_shows_the_lag_in_time_and_its_chart(fresh):
    r = fresh.redis
    _timed_stream(r)
    r.xreadgroup("g", "c", {"timed": ">"}, count=2)
    cookie = login(fresh.console_port, *ADMIN)
    page = request(fresh.console_port, "GET", TIMED_PAGE, cookie=cookie)[2]
    cells = re.findall(r'<td class="num">([^<]*)</td>', re.search(r'<table id="time-lag">.*?</table>', page).group(0))
    # Entries lag, then the oldest undelivered and oldest pending entries are about a minute old.
    assert cells[0] == str(r.xlen("timed") - 2)
    assert re.fullmatch(r"1 min \d+ s|\d+ s", cells[1]) and re.fullmatch(r"1 min \d+ s|\d+ s", cells[2])
    assert cells[3:] == ["0", "0"]
    # The console follows the group's time lag from now on: a first sample is drawn.
    assert 'aria-label="Time lag"' in page and 'class="series"' in page.split('aria-label="Time lag"')[1]


def test_dead_letter_policy_nack_dead_letter_and_replay(fresh):
    r = fresh.redis
    cookie = login(fresh.console_port, *ADMIN)
    page = request(fresh.console_port, "GET", GROUP_PAGE, cookie=cookie)[2]
    assert "No dead-letter policy" in page and 'id="dead-letter"' not in page
    shown = _post(fresh, GROUP_PAGE, cookie, [("action", "setpolicy"), ("max", "3"), ("dlq", DLQ)])
    assert f"Entries delivered 3 times now go to {DLQ}." in shown
    policy = _map(r.execute_command("STREAMDB.GROUP", "GET", "orders", "billing"))
    assert (policy[b"max-deliveries"], policy[b"dead-letter-key"]) == (3, DLQ.encode())
    assert 'id="dead-letter"' in shown

    first, second = pending_ids(r)[:2]
    original = r.xrange("orders", first, first)[0][1]
    shown = _post(fresh, GROUP_PAGE, cookie, [("action", "deadletter"), ("id", first.decode())])
    assert "Dead-lettered 1 entries." in shown
    assert first not in pending_ids(r)
    [(dead_id, dead)] = r.xrange(DLQ)
    assert (dead[b"dlq-source"], dead[b"dlq-id"], dead[b"dlq-group"]) == (b"orders", first, b"billing")
    assert f'value="{dead_id.decode()}" form="dead-letter-form"' in shown

    shown = _post(fresh, GROUP_PAGE, cookie, [("action", "nack"), ("id", second.decode())])
    assert "NACKed 1 entries." in shown
    info = _map(r.execute_command("STREAMDB.GROUP", "INFO", "orders", "billing"))
    assert (info[b"nacked"], info[b"dead-lettered"]) == (1, 1)

    # Replay: the original fields appended to orders again, gone from the dead letters.
    last_before = r.xinfo_stream("orders")["last-generated-id"]
    shown = _post(fresh, GROUP_PAGE, cookie, [("action", "replay"), ("dlq", DLQ), ("id", dead_id.decode())])
    assert f"{dead_id.decode()} -> orders" in shown and 'class="msg error"' not in shown
    assert r.xlen(DLQ) == 0
    [(new_id, fields)] = r.xrange("orders", f"({last_before.decode()}", "+")
    assert fields == original
    # Replaying it again finds nothing, and says so.
    shown = _post(fresh, GROUP_PAGE, cookie, [("action", "replay"), ("dlq", DLQ), ("id", dead_id.decode())])
    assert f"{dead_id.decode()} not found" in shown

    shown = _post(fresh, GROUP_PAGE, cookie, [("action", "resetpolicy")])
    assert "The dead-letter policy is removed." in shown and "No dead-letter policy" in shown
    policy = _map(r.execute_command("STREAMDB.GROUP", "GET", "orders", "billing"))
    assert (policy[b"max-deliveries"], policy[b"dead-letter-key"]) == (None, None)


def test_a_read_only_user_sees_no_group_tool_and_the_server_refuses_them(fresh):
    r = fresh.redis
    r.execute_command("STREAMDB.GROUP", "SET", "orders", "billing", "MAXDELIVERIES", "2", "DEADLETTER", DLQ)
    first = pending_ids(r)[0]
    r.execute_command("XNACK", "orders", "billing", "FATAL", "IDS", "1", first)
    [(dead_id, _)] = r.xrange(DLQ)
    cookie = login(fresh.console_port, *READER)
    page = request(fresh.console_port, "GET", GROUP_PAGE, cookie=cookie)[2]
    assert 'id="time-lag"' in page and 'id="dead-letters"' in page      # it sees them
    for action in ('id="nack"', 'id="dead-letter"', 'id="policy-form"', 'id="replay"', 'id="setid"',
                   'type="checkbox"'):
        assert action not in page
    before = (pending_ids(r), r.xlen(DLQ), r.xlen("orders"))
    forged = ([("action", "deadletter"), ("id", pending_ids(r)[0].decode())],
              [("action", "nack"), ("id", pending_ids(r)[0].decode())],
              [("action", "replay"), ("dlq", DLQ), ("id", dead_id.decode())],
              [("action", "setpolicy"), ("max", "1"), ("dlq", "x")],
              [("action", "resetpolicy")],
              [("action", "setid"), ("target", "0")])
    for fields in forged:
        shown = _post(fresh, GROUP_PAGE, cookie, fields)
        assert "NOPERM" in shown, fields
    assert (pending_ids(r), r.xlen(DLQ), r.xlen("orders")) == before


def _time_lag_points(page: str) -> int:
    """How many samples the group page's time lag chart draws."""
    chart = page.split('aria-label="Time lag"', 1)[1].split("</svg>", 1)[0]
    found = re.search(r'<polyline points="([^"]*)"', chart)
    return len(found.group(1).split()) if found else 0


def test_the_time_lag_chart_follows_at_most_100_groups_the_one_shown_longest_ago_dropped(fresh):
    r = fresh.redis
    port = fresh.console_port
    cookie = login(port, *ADMIN)
    wait_until(lambda: _time_lag_points(request(port, "GET", GROUP_PAGE, cookie=cookie)[2]) >= 6,
               what="six samples of billing's time lag")
    # 100 other groups shown: billing, shown longest ago, is no longer followed ...
    for i in range(100):
        r.xgroup_create("orders", f"g{i}", "0")
        request(port, "GET", f"/group?key=orders&group=g{i}", cookie=cookie)
    # ... so its chart starts again: the sample taken now, and the few ticks since
    # it was dropped (one page request ago).
    assert _time_lag_points(request(port, "GET", GROUP_PAGE, cookie=cookie)[2]) <= 3
