"""Replication commands: REPLCONF PSYNC WAIT WAITAOF ROLE REPLICAOF SLAVEOF.

The state lives in ``core.replication`` (streamdb/replication); a core
without it (unit tests) behaves as a primary with no replicas.
"""

from __future__ import annotations

from ..protocol.reply import OK, CommandError, Status
from ..replication.primary import local_fsynced
from .args import parse_int, parse_positive
from ..dispatch.context import Ctx
from ..dispatch.registry import command

WAIT_ON_REPLICA = ("ERR WAIT cannot be used with replica instances. Please also note that since "
                   "Redis 4.0 if a replica is configured to be writable (which is not the default) "
                   "writes to replicas are just local and are not propagated.")

WAITAOF_ON_REPLICA = ("ERR WAITAOF cannot be used with replica instances. Please also note that "
                      "writes to replicas are just local and are not propagated.")


def _repl(ctx: Ctx):
    return ctx.core.replication


@command("replconf", -1, "admin noscript loading stale allow-busy", since="3.0.0")
def replconf(ctx: Ctx, argv):
    """REPLCONF <option> <value> [<option> <value> ...]"""
    repl = _repl(ctx)
    if repl is None:
        raise CommandError("ERR replication is not enabled on this server")
    return repl.replconf(ctx.client, argv)


@command("psync", -3, "admin noscript no-async-loading no-multi", since="2.8.0")
def psync(ctx: Ctx, argv):
    """PSYNC replicationid offset"""
    repl = _repl(ctx)
    if repl is None or ctx.replaying:
        raise CommandError("ERR replication is not enabled on this server")
    if ctx.client.outbox is None:
        raise CommandError("ERR PSYNC needs a connection")
    return repl.psync(ctx.client, argv[1], argv[2])


@command("sync", 1, "admin noscript no-async-loading no-multi", since="1.0.0")
def sync(ctx: Ctx, argv):
    """SYNC (old replicas): a full resynchronization without the +FULLRESYNC line is not
    supported; use PSYNC ? -1."""
    raise CommandError("ERR SYNC is not supported, use PSYNC ? -1")


@command("wait", 3, "noscript", since="3.0.0")
def wait(ctx: Ctx, argv):
    """WAIT numreplicas timeout"""
    if ctx.core.is_replica:
        raise CommandError(WAIT_ON_REPLICA)
    numreplicas = parse_int(argv[1])
    timeout = _parse_timeout(argv[2])
    repl = _repl(ctx)
    if repl is None:
        return 0
    return repl.wait(ctx, numreplicas, timeout)


def _parse_timeout(raw: bytes) -> int:
    """A timeout in milliseconds as WAIT and WAITAOF take it (0: forever)."""
    timeout = parse_int(raw, "ERR timeout is not an integer or out of range")
    if timeout < 0:
        raise CommandError("ERR timeout is negative")
    return timeout


@command("waitaof", 4, "blocking", since="7.2.0")
def waitaof(ctx: Ctx, argv):
    """WAITAOF numlocal numreplicas timeout"""
    numlocal = parse_int(argv[1])
    if not 0 <= numlocal <= 1:
        raise CommandError("ERR value is out of range, value must between 0 and 1")
    numreplicas = parse_positive(argv[2])
    timeout = _parse_timeout(argv[3])
    if ctx.core.is_replica:
        raise CommandError(WAITAOF_ON_REPLICA)
    if numlocal and not ctx.config["appendonly"]:
        raise CommandError("ERR WAITAOF cannot be used when numlocal is set but appendonly "
                           "is disabled.")
    repl = _repl(ctx)
    if repl is None:                # (a core without replication: unit tests)
        return [local_fsynced(ctx.core, ctx.client), 0]
    return repl.waitaof(ctx, numlocal, numreplicas, timeout)


@command("role", 1, "noscript loading stale fast", since="2.8.12")
def role(ctx: Ctx, argv):
    """ROLE"""
    repl = _repl(ctx)
    if repl is None:
        return [b"master", 0, []]
    return repl.role()


def _replicaof(ctx: Ctx, argv):
    from .. import replication
    repl = _repl(ctx)
    if repl is None:
        raise CommandError("ERR replication is not enabled on this server")
    if ctx.client.kind == "replica":
        raise CommandError("ERR Command is not valid when client is a replica.")
    who = f"id={ctx.client.id} addr={ctx.client.addr} laddr={ctx.client.laddr}"
    if argv[1].lower() == b"no" and argv[2].lower() == b"one":
        replication.become_primary(repl, who)
        return OK
    port = parse_int(argv[2])
    if not 0 < port < 65536:
        raise CommandError("ERR Invalid master port")
    host = argv[1].decode("utf-8", "replace")
    if replication.become_replica(repl, host, port, who) == "already":
        return Status("OK Already connected to specified master")
    return OK


@command("replicaof", 3, "admin noscript stale no-async-loading", since="5.0.0")
def replicaof(ctx: Ctx, argv):
    """REPLICAOF host port | NO ONE"""
    return _replicaof(ctx, argv)


@command("slaveof", 3, "admin noscript stale no-async-loading", since="1.0.0")
def slaveof(ctx: Ctx, argv):
    """SLAVEOF host port | NO ONE"""
    return _replicaof(ctx, argv)
