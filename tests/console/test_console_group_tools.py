"""The group page's StreamDB tools over plain HTTP against a real server: reset to a
time with an exact entries-read (STREAMDB.GROUP SETID), lag in time, the dead-letter
policy, NACK and dead-letter of pending entries, replay of dead letters; each
checked on the server with redis-py, and refused to a read-only user."""

from __future__ import annotations

import datetime
import html
import re
import time
import urllib.parse

import pytest

from console_helpers import ADMIN, READER, ConsoleServer, csrf_of, login, pending_ids, request

GROUP_PAGE = "/group?key=orders&group=billing"
TIMED_PAGE = "/group?key=timed&group=g"
DLQ = "orders-dlq"


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    with ConsoleServer(tmp_path_factory.mktemp("console-group-tools")) as cs:
        yield cs


@pytest.fixture
def fresh(console):
    console.redis.delete(DLQ, "timed")
    console.fill()
    return console


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
    policy = r.execute_command("STREAMDB.GROUP", "GET", "orders", "billing")
    policy = policy if isinstance(policy, dict) else dict(zip(policy[0::2], policy[1::2]))
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
    info = r.execute_command("STREAMDB.GROUP", "INFO", "orders", "billing")
    info = info if isinstance(info, dict) else dict(zip(info[0::2], info[1::2]))
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
    policy = r.execute_command("STREAMDB.GROUP", "GET", "orders", "billing")
    assert None in (policy.values() if isinstance(policy, dict) else policy)


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
