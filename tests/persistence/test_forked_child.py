"""A forked child (snapshot, AOF rewrite, backup copy, replication payload) of a server
killed with -9 must not outlive it: it would keep the listening port (the restarted
server could not bind it) and go on writing the data directory the new server reads."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

from helpers import ROOT, wait_until
from streamdb.cli.procs import free_port

PARENT = textwrap.dedent("""
    import socket, sys, time
    from streamdb.persistence.child import fork_child
    from streamdb.server.lifecycle import close_in_forked_children
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", int(sys.argv[1])))
    listener.listen()
    close_in_forked_children(listener.fileno())
    print(fork_child(lambda: time.sleep(60), "test"), flush=True)
    time.sleep(60)
""")


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _bindable(port: int) -> bool:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", port))
        s.listen()
        return True
    except OSError:
        return False
    finally:
        s.close()


def test_a_forked_child_ends_with_its_killed_parent_and_holds_no_listener():
    port = free_port()
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(port)], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    child = None
    try:
        child = int(parent.stdout.readline())
        assert not _gone(child) and not _bindable(port)
        parent.kill()
        parent.wait()
        wait_until(lambda: _gone(child), 5, "the child to end with its parent")
        assert _bindable(port)
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()
        if child is not None and not _gone(child):
            os.kill(child, 9)
