"""A real server with the console on, the users and data the console tests share,
and plain-HTTP helpers (http.client) for what a browser would send."""

from __future__ import annotations

import http.client
import re
import ssl
import urllib.parse
from pathlib import Path

import redis

from helpers import ServerProcess
from streamdb.cli.procs import free_port

ADMIN = ("admin", "admin-secret")
READER = ("reader", "reader-secret")
# What a monitoring user has: every read command and INFO, no write.
READER_RULES = ["on", f">{READER[1]}", "~*", "+@read", "+info"]
STREAM_ENTRIES = 45


class ConsoleServer:
    """A StreamDB process with ``console-port`` set, the AOF on, an admin and a
    read-only user, and streams with groups and pending entries."""

    def __init__(self, data_dir: Path, *args: str, with_data: bool = True) -> None:
        """``with_data=False``: only the users (a replica, whose data comes from its primary)."""
        self.with_data = with_data
        self.console_port = free_port()
        self.srv = ServerProcess(data_dir, "--appendonly", "yes",
                                 "--console-port", str(self.console_port), *args)

    def __enter__(self) -> "ConsoleServer":
        self.srv.start()
        self.redis = redis.Redis(port=self.srv.port)
        if self.with_data:
            self.fill()
        else:
            self.add_users()
        return self

    def __exit__(self, *exc) -> None:
        self.redis.close()
        self.srv.stop()

    def add_users(self) -> None:
        self.redis.execute_command("ACL", "SETUSER", ADMIN[0], "on", f">{ADMIN[1]}", "~*", "+@all")
        self.redis.execute_command("ACL", "SETUSER", READER[0], *READER_RULES)

    def fill(self) -> None:
        """The users (again: ACL SETUSER is not kept over a restart); database 0
        emptied, then orders:
        STREAM_ENTRIES entries (JSON and binary fields), group billing with 5 entries
        pending for worker-1 and 3 for worker-2; audit: 3 entries, no group."""
        self.add_users()
        r = self.redis
        r.flushdb()         # and whatever else a test made
        for i in range(STREAM_ENTRIES):
            r.xadd("orders", {"item": f"book-{i}", "doc": f'{{"n": {i}}}', "raw": b"\x00\xff"})
        r.xgroup_create("orders", "billing", "0")
        r.xreadgroup("billing", "worker-1", {"orders": ">"}, count=5)
        r.xreadgroup("billing", "worker-2", {"orders": ">"}, count=3)
        for i in range(3):
            r.xadd("audit", {"event": f"e{i}"})


def request(port: int, method: str, path: str, body: bytes | str | None = None,
            cookie: str | None = None, headers: dict | None = None,
            tls: ssl.SSLContext | None = None) -> tuple[int, dict, str]:
    """(status, headers with lower-case names, body text) of one HTTP request
    (HTTPS with ``tls``)."""
    if tls is None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    else:
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=tls)
    sent = dict(headers or {})
    if body is not None:
        sent.setdefault("Content-Type", "application/x-www-form-urlencoded")
    if cookie:
        sent["Cookie"] = cookie
    try:
        conn.request(method, path, body=body, headers=sent)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read().decode()
    finally:
        conn.close()


def login(port: int, user: str, password: str) -> str:
    """The session cookie (``name=token``) of a successful login."""
    status, headers, body = request(port, "POST", "/login",
                                    urllib.parse.urlencode({"user": user, "password": password}))
    assert status == 303, body
    return headers["set-cookie"].split(";", 1)[0]


def csrf_of(page: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', page).group(1)


def pending_ids(r: redis.Redis, key: str = "orders", group: str = "billing") -> list[bytes]:
    return [p["message_id"] for p in r.xpending_range(key, group, "-", "+", 100)]
