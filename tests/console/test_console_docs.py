"""docs/CONSOLE.md's commands, run as written (ports rewritten to free ones): start a
server with the console, create its users, and see a page without a session go to
the login; then those users log in (the viewer without the actions)."""

from __future__ import annotations

import re

import redis

from console_helpers import csrf_of, login, request
from docblocks import run_block, start_block
from helpers import wait_for_port, wait_until
from streamdb.cli.procs import free_port

DOC = "docs/CONSOLE.md"
DOC_BLOCKS = {"docs/CONSOLE.md": {"start", "users", "no-session"}}


def test_the_console_guide_runs_as_written(tmp_path):
    ports = {6379: free_port(), 8080: free_port()}
    server = start_block(DOC, "start", cwd=tmp_path, ports=ports)
    try:
        wait_for_port(ports[6379], server)      # the console listens before the Redis port
        run_block(DOC, "users", cwd=tmp_path, ports=ports)
        out = run_block(DOC, "no-session", cwd=tmp_path, ports=ports)
        assert out.strip() == f"303 http://127.0.0.1:{ports[8080]}/login"
        console = ports[8080]
        ops = login(console, "ops", "choose-a-long-password")
        viewer = login(console, "viewer", "another-long-password")

        r = redis.Redis(port=ports[6379])
        r.xadd("orders", {"item": "book"})
        r.xgroup_create("orders", "billing", "0")
        r.xreadgroup("billing", "w", {"orders": ">"})
        group = "/group?key=orders&group=billing"
        assert 'id="ack"' in request(console, "GET", group, cookie=ops)[2]
        viewer_page = request(console, "GET", group, cookie=viewer)[2]
        assert 'id="ack"' not in viewer_page and csrf_of(viewer_page)
        assert re.search(r"<td>orders</td>|>orders</a>", request(console, "GET", "/streams", cookie=viewer)[2])
    finally:
        server.terminate()
        server.wait(timeout=15)
    wait_until(lambda: server.poll() is not None, what="the server to stop")
