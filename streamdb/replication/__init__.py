"""Replication: a primary's effect stream, its backlog and links (primary.py), and
following a primary (replica.py).  ``install`` wires both into a server; the
REPLICAOF / SLAVEOF command and the ``replicaof`` directive go through
``become_replica`` / ``become_primary``.
"""

from __future__ import annotations

from .. import log
from ..protocol.reply import CommandError
from . import state
from .primary import WAIT_KEY, Replication
from .replica import ReplicaSide

__all__ = ["install", "Replication", "become_replica", "become_primary", "parse_replicaof"]


def parse_replicaof(text: str) -> tuple[str, int] | None:
    parts = text.split()
    if not parts or [p.lower() for p in parts] == ["no", "one"]:
        return None
    if len(parts) != 2 or not parts[1].isdigit() or not 0 < int(parts[1]) < 65536:
        raise ValueError(f"replicaof wants '<host> <port>', got {text!r}")
    return parts[0], int(parts[1])


def install(core, server) -> Replication:
    """Attach replication to a core + network server (before the data is loaded).

    With the ``replicaof`` directive the server is a replica from the start (writes
    are refused while it loads its own data); ``start`` then connects.
    """
    repl = Replication(core, server)
    core.replication = repl
    server.before_reply_hooks.append(repl.flush)
    server.cron_hooks.append(repl.cron)
    core.config_listeners.append(repl.refresh_good_replicas)
    try:
        target = parse_replicaof(core.config["replicaof"])
    except ValueError as e:
        log.log(log.WARNING, f"Fatal config error: {e}")
        raise SystemExit(1) from None
    # Checked against the AOF once it is loaded (start).
    repl.cached_state = state.load(core.config) if core.config["appendonly"] else None
    if target is not None:
        core.is_replica = True
        log.set_role("S")
        repl.replica = ReplicaSide(repl, target[0], target[1])
    repl.refresh_good_replicas()      # min-replicas-to-write from the first write on
    return repl


def start(repl: Replication) -> None:
    """After the data set is loaded: adopt the saved replication state if the AOF
    proves it (state.py), then start following the primary, if configured."""
    st, repl.cached_state = repl.cached_state, None
    aof = repl.core.aof
    if aof is not None:
        aof.durable_listeners.append(repl.aof_durable)
    side = repl.replica
    if st is not None:
        now = state.aof_position(repl.core)
        if now != st.aof_pos:
            # Usual after a kill -9 (the state is saved by the cron, the AOF per turn).
            # It costs something only where another server could have continued the
            # stream: our replicas, or our primary when we are a replica.
            if st.followed or side is not None:
                log.log(log.NOTICE, f"Replication state does not match the AOF (state written "
                                    f"at {st.aof_pos}, AOF ends at {now}): new replication ID, "
                                    f"replicas will need a full resync")
            repl.forget_state()
            st = None
    if side is None:
        if st is not None:
            repl.restore(st)
        return
    if st is not None:
        repl.followed = st.followed
        # Our data is the stream at st.offset: our primary's, or our own from when we
        # were a primary (psync2: the new primary may have been our replica).
        repl.replid, repl.offset = st.replid, st.offset
        repl.replid2, repl.second_offset = st.replid2, st.second_offset
        repl.backlog_start = repl.offset
        repl.saved = st
        side.client.db = max(st.db, 0)
        side.read_offset = repl.offset
        side.has_cache = True
        log.log(log.NOTICE, f"Replication state found: replid {st.replid} offset {st.offset}: "
                            f"will try a partial resynchronization")
    if side.task is None:
        side.start()


def shutdown(repl: Replication) -> None:
    """After the AOF was flushed on shutdown: the state file matches it."""
    if repl.replica is not None:
        repl.replica.save_state(final=True)
        repl.replica.stop()
    elif repl.core.config["appendonly"]:
        repl.save_state(repl.cur_db, final=True)


def _unblock_writers(core) -> None:
    """Clients blocked in write commands (XREADGROUP) or WAIT lose their reason to wait."""
    err = CommandError("UNBLOCKED force unblock from blocking operation, instance state changed "
                       "(master -> replica?)")
    for c in list(core.clients.values()):
        req = c.blocked
        if req is not None and (req.command in ("xreadgroup", "wait") or WAIT_KEY in req.keys):
            core.unblock(c, err)


def _follow_in_config(core, target: str) -> None:
    """The replicaof directive follows REPLICAOF, as Redis's does: CONFIG GET shows whom
    the server follows, and CONFIG REWRITE (in Sentinel's failover transaction) writes
    it, so a restart keeps the role Sentinel gave (a promoted replica does not come back
    following the dead primary)."""
    core.config.values["replicaof"] = target


def become_replica(repl: Replication, host: str, port: int, who: str = ""):
    core = repl.core
    side = repl.replica
    if core.is_replica and side is not None and side.host == host and side.port == port:
        return "already"
    if side is not None:
        side.stop()
        has_cache = side.has_cache
        db = side.client.db
    else:
        # A primary turning into a replica: its own id and offset describe its data,
        # so a primary promoted from one of its replicas can continue it (psync2).
        repl.flush()
        log.log(log.NOTICE, "Before turning into a replica, using my own master parameters to "
                            "synthesize a cached master: I may be able to synchronize with the "
                            "new master with just a partial transfer.")
        has_cache = True
        db = max(repl.cur_db, 0)
    _unblock_writers(core)
    repl.drop_links("this instance is turning into a replica")
    core.is_replica = True
    _follow_in_config(core, f"{host} {port}")
    repl.refresh_good_replicas()
    log.set_role("S")
    new = ReplicaSide(repl, host, port, has_cache=has_cache)
    new.client.db = db
    repl.replica = new
    log.log(log.NOTICE, f"REPLICAOF {host}:{port} enabled")
    new.start()
    return "ok"


def become_primary(repl: Replication, who: str = "") -> None:
    core = repl.core
    side = repl.replica
    if not core.is_replica:
        return
    if side is not None:
        side.stop()
        core.remove_client(side.client)
    repl.replica = None
    core.is_replica = False
    _follow_in_config(core, "")
    repl.refresh_good_replicas()
    log.set_role("M")
    repl.shift_replid()
    if not repl.backlog_active:
        repl.create_backlog()
    # Chained replicas reconnect and learn the new id (+CONTINUE <new id>).
    repl.drop_links("this instance was promoted")
    repl.forget_state()          # the next cron saves the new id
    log.log(log.NOTICE, f"MASTER MODE enabled (user request from '{who}')")
