"""WAITAOF numlocal numreplicas timeout (Redis 7.2) with real processes: a primary
under everysec and two replicas that report their fsynced offset with
REPLCONF ACK <offset> FACK <aofoffset>, one of them stopped (SIGSTOP)."""

from __future__ import annotations

import os
import signal
import time

import pytest
import redis

from helpers import ServerProcess

from test_replication import client, link_up, replica_of, wait_until


def waitaof(r: redis.Redis, numlocal: int, numreplicas: int, timeout_ms: int):
    return r.execute_command("WAITAOF", numlocal, numreplicas, timeout_ms)


def test_waitaof_counts_the_local_aof_and_replicas_that_fsynced(tmp_path):
    everysec = ("--appendonly", "yes", "--appendfsync", "everysec")
    with ServerProcess(tmp_path / "p", "--save", "", *everysec) as p, \
            replica_of(tmp_path / "r1", p, *everysec) as r1, \
            replica_of(tmp_path / "r2", p, *everysec) as r2:
        cp = client(p)
        for r in (r1, r2):
            wait_until(lambda: link_up(client(r)), what="link up")
        assert waitaof(client(p), 0, 0, 0) == [1, 2]          # wrote nothing: covered
        cp.xadd("s", {"a": 1})
        assert waitaof(cp, 1, 2, 10000) == [1, 2]
        assert waitaof(cp, 0, 0, 0) == [1, 2]
        # Inside MULTI it answers at once, whatever it asks for.
        tx = cp.pipeline(transaction=True)
        tx.execute_command("WAITAOF", 1, 3, 0)
        assert tx.execute() == [[1, 2]]
        with pytest.raises(redis.ResponseError,
                           match="^WAITAOF cannot be used with replica instances. Please also "
                                 "note that writes to replicas are just local and are not "
                                 "propagated.$"):
            waitaof(client(r1), 0, 0, 0)

        os.kill(r2.proc.pid, signal.SIGSTOP)
        try:
            cp.xadd("s", {"a": 2})
            t0 = time.monotonic()
            assert waitaof(cp, 1, 2, 1500) == [1, 1]        # the stopped one cannot ack
            assert time.monotonic() - t0 >= 1.4
        finally:
            os.kill(r2.proc.pid, signal.SIGCONT)
        assert waitaof(cp, 1, 2, 10000) == [1, 2]           # it catches up once resumed


def test_a_replica_without_an_aof_never_counts_for_waitaof(tmp_path):
    """It sends the old ACK without FACK, as Redis's do: WAIT counts it, WAITAOF not."""
    with ServerProcess(tmp_path / "p", "--save", "") as p, \
            replica_of(tmp_path / "r", p, "--appendonly", "no") as r:
        cp = client(p)
        wait_until(lambda: link_up(client(r)), what="link up")
        cp.xadd("s", {"a": 1})
        assert cp.execute_command("WAIT", 1, 10000) == 1
        assert waitaof(cp, 0, 1, 300)[1] == 0


@pytest.mark.parametrize("policy, local", [("always", 1), ("everysec", 1), ("no", 0)])
def test_waitaof_local_under_each_fsync_policy(tmp_path, policy, local):
    """'no' never fsyncs, so the local count stays 0 until the timeout (as in Redis)."""
    with ServerProcess(tmp_path / "d", "--save", "", "--appendfsync", policy) as srv:
        r = client(srv)
        r.xadd("s", {"a": 1})
        assert waitaof(r, 1, 0, 3000 if local else 300) == [local, 0]


def test_waitaof_arguments_and_appendonly_no(tmp_path):
    with ServerProcess(tmp_path / "d", "--save", "", "--appendonly", "no") as srv:
        r = client(srv)
        r.xadd("s", {"a": 1})
        assert waitaof(r, 0, 0, 0) == [0, 0]
        for args, error in [
                ((1, 0, 0), "WAITAOF cannot be used when numlocal is set but appendonly is "
                            "disabled."),
                ((2, 0, 0), "value is out of range, value must between 0 and 1"),
                (("x", 0, 0), "value is not an integer or out of range"),
                ((0, -1, 0), "value is out of range, must be positive"),
                ((0, 0, -1), "timeout is negative"),
                ((0, 0, "x"), "timeout is not an integer or out of range")]:
            with pytest.raises(redis.ResponseError) as e:
                waitaof(r, *args)
            assert str(e.value) == error
        with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
            r.execute_command("WAITAOF", 0, 0)
        info = r.execute_command("COMMAND", "INFO", "waitaof")["waitaof"]
        assert info["arity"] == 4
        assert info["acl_categories"] == ["@slow", "@blocking", "@connection"]
