"""The server core: command dispatch, MULTI/EXEC, blocking, and the effect path.

This is everything about executing commands that does not touch a socket, so
the asyncio front end (server/network.py), the AOF loader and a replica's
apply loop all drive the same object:

    execute(client, argv) -> reply | BLOCKED | DROP
        1. look the command up; the checks, written once: arity, subcommand, auth,
           ACL, -OOM, read-only replica, -LOADING, MULTI queueing, MISCONF
        2. run the handler with a Ctx (dispatch/context.py)
        3. hand the effects it recorded to ``_emit``: one path that makes them
           one EffectBatch (dispatch/effects.py), invalidates WATCHed keys, marks
           keys ready for blocked clients, and passes the batch to every
           registered effect sink (AOF, replicas, the snapshot's tracker, test
           recorders)
        4. serve clients blocked on keys that became ready, FIFO per key

Rules:
* Effects are deterministic argv lists.  A command (or an EXEC) whose effects
  are several argv is given to sinks as one batch, wrapped in MULTI/EXEC so
  that a torn write never applies half of it.
* A blocked client is served in the same call that made its key ready, and
  its reply goes out through ``client.outbox``.
"""

from __future__ import annotations

import time
import traceback
from collections import defaultdict, deque
from typing import TYPE_CHECKING, Callable

import cython

# Importing the command modules fills the table execute dispatches through: a Core
# made anywhere (the server, streamdb-admin verify-backup, Spark's offline files) has it.
from .. import commands as _command_modules  # noqa: F401
from .. import log
from ..config import Config
from ..dispatch.client import Client
from ..dispatch.context import BlockRequest, Ctx, new_ctx
from ..dispatch.effects import ALL_DATABASES, EffectBatch, new_batch
from ..dispatch.pubsub import PubSub, event_enabled, publishing_flags, subscribed_mode_refusal
from ..dispatch.registry import CommandSpec, lookup, resolve
from ..engine.keyspace import Database, Keyspace
from ..protocol.reply import NULL_ARRAY, QUEUED, CommandError
from ..security.acl import Acl
from ..security.enforce import command_denied, reset_to_default
from .observer import Observer

if TYPE_CHECKING:
    from ..commands.retention import Retention
    from ..persistence.aof import Aof
    from ..persistence.recovery import Persistence
    from ..persistence.snapshot import Snapshotter
    from ..replication.primary import Replication

__all__ = ["Core", "BLOCKED", "DROP", "Stats"]


class _Blocked:
    def __repr__(self) -> str:
        return "BLOCKED"


BLOCKED = _Blocked()


class _Drop:
    def __repr__(self) -> str:
        return "DROP"


# execute's answer when the connection must be closed at once: no reply, the
# replies still queued for it dropped, nothing more of what it sent run (Redis's
# freeClientAsync).
DROP = _Drop()

# Not commands: the first words of an HTTP request ("POST / HTTP/1.1", a "Host:"
# header).  A web page can make a browser send one to a local server and have it
# run the body as commands ("cross protocol scripting"); Redis closes such a
# connection at once, checking before anything else (processCommand).  They are
# not in the command table, as in Redis 7 (COMMAND INFO post is nil), so the check
# costs nothing on the way to a real command: execute's unknown-command branch.
_CROSS_PROTOCOL_NAMES = frozenset((b"post", b"host:"))
CROSS_PROTOCOL_WARNING = (
    "Possible SECURITY ATTACK detected. It looks like somebody is sending POST or Host: "
    "commands to Redis. This is likely due to an attacker attempting to use Cross Protocol "
    "Scripting to compromise your Redis instance. Connection aborted.")
# As Redis, the warning is logged at most once a minute: a hostile page could
# otherwise fill the log.
_CROSS_PROTOCOL_LOG_INTERVAL_MS = 60_000

# The clock Core uses unless given another (tests pass fake clocks).
_system_clock = time.time


@cython.cfunc
def _wall_clock_ns() -> cython.longlong:
    """Unix time in ns.  The dispatch reads it once as a command starts (its
    ``now_ms`` and the start of its duration, as Redis's call() reads ustime()
    once for both) and once as it ends.  Compiled, clock_gettime itself (core.pxd
    cimports it): the three Python clock calls it replaced (time.time for now_ms,
    perf_counter_ns twice) and their int/float objects measured ~900 of the
    ~18k instructions of an XADD request under callgrind."""
    if cython.compiled:
        ts: timespec
        clock_gettime(CLOCK_REALTIME, cython.address(ts))
        return ts.tv_sec * 1_000_000_000 + ts.tv_nsec
    return time.time_ns()

# Commands allowed before AUTH when a password is set.
_NO_AUTH_OK = {"auth", "hello", "quit", "reset"}
# Clients that apply effects (AOF load, a replica's link to its primary).
_REPLAY_KINDS = frozenset(("aof", "master"))
# Commands executed immediately even inside MULTI.
_MULTI_IMMEDIATE = {"exec", "discard", "multi", "watch", "quit", "reset", "unwatch"}


@cython.cclass
class CommandStats:
    __slots__ = ("calls", "usec", "rejected", "failed")

    def __init__(self) -> None:
        self.calls = 0
        self.usec = 0
        self.rejected = 0
        self.failed = 0


# A cclass when compiled: the dispatch counts into its C fields (core.pxd).
@cython.cclass
class Stats:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.commands_processed = 0
        self.connections_received = 0
        self.rejected_connections = 0
        self.output_buffer_limit_disconnections = 0
        self.query_buffer_limit_disconnections = 0
        self.expired_keys = 0
        self.error_replies = 0
        self.errors: dict[str, int] = defaultdict(int)
        self.commands: dict[str, CommandStats] = defaultdict(CommandStats)
        self.net_input_bytes = 0
        self.net_output_bytes = 0
        self.keyspace_hits = 0
        self.keyspace_misses = 0
        # Redis's total_reads_processed / total_writes_processed: reads from client
        # sockets that returned data, writes of replies to them.
        self.reads_processed = 0
        self.writes_processed = 0


# Compiled, a cclass: the attributes the dispatch reads per request are C fields
# (core.pxd), the rest live in its __dict__.
@cython.cclass
class Core:
    def __init__(self, config: Config | None = None, clock: Callable[[], float] = time.time) -> None:
        self.config = config or Config()
        self.keyspace = Keyspace(self.config["databases"])
        self.clock = clock
        self.clients: dict[int, Client] = {}
        self._next_client_id = 1
        self.stats = Stats()
        self.start_time = clock()
        self.is_replica = False
        # Recovery or a replica's full sync is applying data: clients get -LOADING
        # for everything but the commands flagged ``loading`` (execute).
        self.loading = False
        self.dirty = 0                       # changes since the last snapshot
        # (db, key) -> deque of blocked clients, FIFO
        self.blocking_keys: dict[tuple[int, bytes], deque] = {}
        self.ready_keys: dict[tuple[int, bytes], None] = {}   # ordered set
        # Where effects go (_emit), each called with the EffectBatch of every change:
        # the AOF, replication, the snapshot's changed-key tracker (add_effect_sink);
        # of them, those that read only the keys changed.
        self.effect_sinks: list[Callable[[EffectBatch], None]] = []
        self._key_only_sinks: list[Callable[[EffectBatch], None]] = []
        # How many keys clients WATCH, in all databases: _emit derives the keys of
        # effects only when one is watched or blocked on.
        self.watched_keys = 0
        self.on_client_blocked: Callable[[Client], None] | None = None
        self.on_client_unblocked: Callable[[Client], None] | None = None
        # (client, ms or None): run a blocked client's command again at that time
        # (BlockRequest.next_wake), None: no such time; set by the network layer.
        self.on_client_wake_at: Callable[[Client, int | None], None] | None = None
        self.shutdown_requested: Callable | None = None
        # The subsystems __main__ attaches (None in a bare core, as in unit tests).
        self.persistence: Persistence | None = None      # persistence/recovery.open_persistence
        self.snapshotter: Snapshotter | None = None      # persistence/recovery.open_persistence
        self.aof: Aof | None = None                      # Persistence.load, once the snapshot is in
        self.replication: Replication | None = None      # replication.install
        self.retention: Retention | None = None          # commands/retention.install
        # Who subscribes to which Pub/Sub channel (commands/pubsub.py; no persistence).
        self.pubsub = PubSub()
        # notify-keyspace-events as handlers note events (dispatch/pubsub.py
        # publishing_flags: 0 = none), kept up to date through CONFIG SET.
        self.refresh_notify_flags()
        # Hooks of commands/persistence.py for commands defined elsewhere (set by its install).
        self.info_persistence: Callable[[], list[tuple[str, object]]] | None = None  # INFO persistence
        self.debug_subcommands: dict[str, Callable] = {}   # DEBUG RELOAD, LOADAOF, AOF-INJECT-*
        # Called with the directive names CONFIG SET changed (__main__, limits.install).
        self.config_listeners: list[Callable[[list[str]], None]] = [self._notify_config_changed]
        self.run_id = "0" * 40               # INFO run_id; __main__ draws a random one
        self.last_save_time = self.start_time   # LASTSAVE; the Snapshotter's last save (seconds)
        self.peak_memory = 0                 # INFO / MEMORY STATS: highest used_memory seen
        # The MISCONF error writes get while the AOF cannot write (set and cleared by aof/writer.py),
        # and while background saves fail (snapshot.py: stop-writes-on-bgsave-error).
        self.write_refusal: str | None = None
        self.save_refusal: str | None = None
        # NOREPLICAS while a primary has fewer good replicas than min-replicas-to-write
        # (kept by replication/primary.py refresh_good_replicas).
        self.replicas_refusal: str | None = None
        # SHUTDOWN SAVE (True) / NOSAVE (False); None: as configured (read by __main__).
        self.shutdown_save: bool | None = None
        self.active_expire_disabled = False  # DEBUG SET-ACTIVE-EXPIRE 0: the cron deletes no expired key
        # Used memory is above maxmemory: commands that grow data get -OOM (limits.py).
        self.out_of_memory = False
        # execute calls memory_recheck (limits.py: refresh out_of_memory) once
        # stats.net_input_bytes reaches memory_recheck_input; never in a bare core.
        self.memory_recheck_input = 1 << 62
        self.memory_recheck: Callable[[], None] | None = None
        # The client whose command's effects are being emitted (None for the server's
        # own, e.g. expiry): the replication sink records its offset for WAIT.
        self.current_client: Client | None = None
        # Users and the ACL LOG; the default user's password is requirepass.
        self.acl = Acl(self.config["requirepass"], self.config["acl-pubsub-default"])
        # SLOWLOG, LATENCY, MONITOR and latencystats, fed once per command by _call.
        self.observe = Observer(self)
        # _call's last command, its counters and the table they are in.
        self._last_spec = None
        self._last_table = None
        self._last_stats = None
        # When CROSS_PROTOCOL_WARNING was last logged (None: never).
        self._cross_protocol_logged_ms: int | None = None

    # -- clock ----------------------------------------------------------------

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    # -- clients --------------------------------------------------------------

    def new_client(self, outbox=None, addr: str = "", laddr: str = "", kind: str = "normal") -> Client:
        c = Client(self._next_client_id, self.now_ms(), outbox, addr, laddr)
        c.kind = kind
        self._next_client_id += 1
        if kind == "normal":
            reset_to_default(self, c)
            self.clients[c.id] = c
            self.stats.connections_received += 1
        return c

    def remove_client(self, client: Client) -> None:
        if client.blocked is not None:
            self.unblock(client, None)
        self.unwatch_all(client)
        self.pubsub.drop_client(client)
        self.clients.pop(client.id, None)

    # -- dispatch -------------------------------------------------------------

    # A ccall (core.pxd): the compiled RequestLoop (server/pipeline.py) calls it in C
    # rather than through a bound method, ~150 instructions of an XADD request less.
    @cython.ccall
    def execute(self, client: Client, argv):
        """Run one request.  Returns the reply, BLOCKED (reply comes via client.outbox),
        or DROP (close the connection now, without a reply).  The checks run in
        Redis's order (processCommand); a command they refuse gets its error from
        ``_refuse``, an EXEC refused as a whole from ``_abort_exec``."""
        spec: CommandSpec = lookup(argv)
        leaf: CommandSpec
        started_ns: cython.longlong = _wall_clock_ns()
        now: cython.longlong = self._now_ms_at(started_ns)
        client.last_ms = now
        if spec is None:
            if argv[0].lower() in _CROSS_PROTOCOL_NAMES and client.kind not in _REPLAY_KINDS:
                return self._cross_protocol_attack(now)
            return self._refuse(client, _unknown_command(argv), None)
        name = spec.name       # the command's own (spec becomes its subcommand's below)
        if _wrong_arity(spec, len(argv)):
            return self._refuse(client, _arity_error(name), name)
        if spec.subcommands:
            leaf = resolve(argv)
            if leaf is spec:
                return self._refuse(client, _unknown_subcommand(name, argv[1]), name)
            if _wrong_arity(leaf, len(argv)):
                return self._refuse(client, _arity_error(leaf.name), leaf.name)
            spec = leaf
        if not client.authenticated and name not in _NO_AUTH_OK:
            return self._refuse(client, CommandError(_NOAUTH), spec.name)
        # ACLs: acl_check is None when the client's user may run anything (the hot path).
        if client.acl_check is not None:
            denied = command_denied(self, client, client.acl_check, spec, argv,
                                    "multi" if client.in_multi else "toplevel")
            if denied is not None:
                return self._refuse(client, denied, spec.name)
        # maxmemory: server/limits.py sets out_of_memory on each cron tick and here,
        # once the bytes read could have used up half the headroom it measured.
        if self.stats.net_input_bytes >= self.memory_recheck_input:
            self.memory_recheck()
        if self.out_of_memory and client.kind == "normal" and _refused_for_memory(spec, client):
            if name == "exec":
                return self._abort_exec(client, _OOM)
            return self._refuse(client, CommandError(_OOM), spec.name)
        # NOREPLICAS (a primary short of good replicas under min-replicas-to-write) or
        # READONLY (a replica; never both), in Redis's order and before MULTI queueing:
        # a write refused while queued flags the transaction, and an EXEC whose queued
        # writes a refusal began to cover after they were queued is aborted whole, as
        # Redis counts that EXEC as a write (processCommand's is_write_command).
        if client.kind == "normal":
            refusal = self.replicas_refusal
            if refusal is None and self.is_replica and self.config["replica-read-only"]:
                refusal = _READONLY
            if refusal is not None and _is_write_command(spec, client):
                if name == "exec":
                    return self._abort_exec(client, refusal)
                return self._refuse(client, CommandError(refusal), spec.name)
        # RESP2's subscribed mode: Redis checks it here, after READONLY, before LOADING.
        if client.pubsub is not None:
            refusal = subscribed_mode_refusal(client, spec)
            if refusal is not None:
                return self._refuse(client, refusal, spec.name)
        # Redis checks loading here too: after the client's own errors, before queueing.
        if self.loading and client.kind not in _REPLAY_KINDS and not _allowed_while_loading(spec):
            return self._refuse(client, CommandError(_LOADING), spec.name)
        if client.in_multi and name not in _MULTI_IMMEDIATE:
            if "no-multi" in spec.flags:
                return self._refuse(client, CommandError(_NOT_IN_MULTI), spec.name)
            client.multi_queue.append(argv)
            return QUEUED
        refusal = self.save_refusal or self.write_refusal     # MISCONF (in Redis's order)
        if refusal and client.kind == "normal" and _is_write_command(spec, client):
            if name == "exec":
                return self._abort_exec(client, refusal)
            return self._refuse(client, CommandError(refusal), spec.name)
        client.last_cmd = spec.name
        self.current_client = client
        ctx: Ctx = self._ctx_for(client, now, argv, False)
        reply = self._call(ctx, spec, argv, started_ns)
        if ctx.notifications is not None:
            self.publish_notifications(ctx.notifications)
        if ctx.effects:
            self._emit(ctx.db.index, ctx.effects)
        if isinstance(reply, BlockRequest):
            return self._block(client, reply)
        if self.ready_keys:
            self.serve_ready_keys()
        return reply

    @cython.cfunc
    def _now_ms_at(self, wall_ns: cython.longlong) -> cython.longlong:
        """now_ms() as a command starts: from its one clock read ``wall_ns``, unless a
        test gave the core another clock."""
        if self.clock is _system_clock:
            return wall_ns // 1_000_000
        return int(self.clock() * 1000)

    @cython.cfunc
    def _refuse(self, client: Client, err: CommandError, name):
        """``err`` for a command refused before it ran, counted as rejected under
        ``name`` (None: no such command, counted only as an error reply).  Inside
        MULTI the transaction is flagged: its EXEC answers EXECABORT."""
        if client.in_multi:
            client.multi_error = True
        return self._error(err, name, True)

    @cython.cfunc
    def _abort_exec(self, client: Client, reason: str):
        """An EXEC refused as a whole (OOM, NOREPLICAS, READONLY, MISCONF): Redis's EXECABORT with the
        reason; its transaction is discarded, as an EXEC that ran would have ended it."""
        client.in_multi = False
        client.multi_queue = []
        self.unwatch_all(client)
        return self._error(CommandError(_EXECABORT + reason), "exec", True)

    def _cross_protocol_attack(self, now: int) -> _Drop:
        """An HTTP request line or header arrived as a command: log it (at most once a
        minute) and drop the connection; nothing is counted, as in Redis."""
        last = self._cross_protocol_logged_ms
        if last is None or abs(now - last) > _CROSS_PROTOCOL_LOG_INTERVAL_MS:
            log.log(log.WARNING, CROSS_PROTOCOL_WARNING)
            self._cross_protocol_logged_ms = now
        return DROP

    @cython.cfunc
    def _ctx_for(self, client: Client, now, argv, in_exec: cython.bint) -> Ctx:
        """The Ctx of one command of ``client``.  An AOF being replayed notes no keyspace
        events (it re-applies what was published when it was written); a replica's link
        does, as a Redis replica publishes what it applies."""
        notify_flags: cython.long = self.notify_flags
        if notify_flags and client.kind == "aof":
            notify_flags = 0
        return new_ctx(self, client, self.keyspace.dbs[client.db], self.config, now, argv,
                       in_exec, client.kind in _REPLAY_KINDS, notify_flags)

    def _call(self, ctx: Ctx, spec: CommandSpec, argv, started_ns: cython.longlong):
        """Run a handler; returns its reply (errors become replies).  Its effects and
        the db they apply to are left in ``ctx`` (the caller's: no result tuple).

        ``started_ns``: the _wall_clock_ns() read as the command started; its
        duration runs from there to the end of the handler."""
        client: Client = ctx.client
        # The last command's counters, kept by the identity of its spec and of the
        # table (CONFIG RESETSTAT makes a new one): a pipeline's runs of one command
        # skip the defaultdict look-up by name (~130 instructions, callgrind).
        stats: CommandStats
        table = self.stats.commands
        if spec is self._last_spec and table is self._last_table:
            stats = self._last_stats
        else:
            stats = table[spec.name]
            self._last_spec, self._last_table, self._last_stats = spec, table, stats
        try:
            reply = spec.handler(ctx, argv)
            if isinstance(reply, BlockRequest) and (ctx.in_exec or ctx.replaying):
                reply = reply.timeout_reply
        except CommandError as e:
            reply = e
            stats.failed += 1
            self.count_error(e)
        except Exception as e:  # a bug must cost one reply, never the connection or the server
            log.log(log.WARNING, f"Internal error in '{spec.name}': {e!r}\n" +
                    "".join(traceback.format_exc()).replace("\n", " | "))
            reply = CommandError(f"ERR internal error in '{spec.name}': {type(e).__name__}")
            stats.failed += 1
            self.count_error(reply)
        elapsed_ns: cython.longlong = _wall_clock_ns() - started_ns
        if elapsed_ns < 0:
            elapsed_ns = 0          # the wall clock was set back during the command
        stats.calls += 1
        stats.usec += elapsed_ns // 1000
        self.stats.commands_processed += 1
        self.dirty += ctx.dirty
        self.observe.command_done(spec, client, argv, elapsed_ns)
        return reply

    def _error(self, err: CommandError, name: str | None, rejected: bool = False) -> CommandError:
        if name is not None and rejected:
            self.stats.commands[name].rejected += 1
        self.count_error(err)
        return err

    def count_error(self, err: CommandError) -> None:
        """Counts one error reply (INFO errorstats, total_error_replies): every one a client
        gets, the network layer's protocol errors included, as Redis counts them."""
        self.stats.error_replies += 1
        self.stats.errors[err.code] += 1

    # -- MULTI/EXEC -----------------------------------------------------------

    def exec_transaction(self, client: Client):
        """Run the queued commands of ``client``; called by the EXEC handler."""
        queue = client.multi_queue
        client.multi_queue = []
        client.in_multi = False
        if client.multi_error:
            client.multi_error = False
            self.unwatch_all(client)
            raise CommandError("EXECABORT Transaction discarded because of previous errors.")
        if client.dirty_cas:
            self.unwatch_all(client)
            return NULL_ARRAY
        self.unwatch_all(client)
        replies = []
        effects: list[list[bytes]] = []    # the transaction's, one batch for the sinks
        db_at_start = cur_db = client.db
        now = self.now_ms()
        for argv in queue:
            spec = resolve(argv)
            # The user's rules may have changed since the command was queued (Redis checks again).
            if client.acl_check is not None:
                denied = command_denied(self, client, client.acl_check, spec, argv, "multi")
                if denied is not None:
                    replies.append(self._error(denied, spec.name, rejected=True))
                    continue
            ctx: Ctx = self._ctx_for(client, now, argv, True)
            reply = self._call(ctx, spec, argv, _wall_clock_ns())
            if ctx.notifications is not None:
                self.publish_notifications(ctx.notifications)
            if ctx.effects:
                db = ctx.db.index
                if db != cur_db:   # a SELECT inside the transaction
                    effects.append([b"SELECT", b"%d" % db])
                    cur_db = db
                effects.extend(ctx.effects)
            replies.append(reply)
        if effects:
            self._emit(db_at_start, effects)
        if self.ready_keys:
            self.serve_ready_keys()
        return replies

    def watch(self, client: Client, keys: list[bytes]) -> None:
        db = self.keyspace[client.db]
        for key in keys:
            if (client.db, key) in client.watched:
                continue
            client.watched.append((client.db, key))
            self.watched_keys += 1
            db.watchers.setdefault(key, set()).add(client)

    def unwatch_all(self, client: Client) -> None:
        for dbi, key in client.watched:
            w = self.keyspace[dbi].watchers.get(key)
            if w is not None:
                w.discard(client)
                if not w:
                    del self.keyspace[dbi].watchers[key]
        self.watched_keys -= len(client.watched)
        client.watched = []
        client.dirty_cas = False

    # -- effects ------------------------------------------------------------------

    def add_effect_sink(self, sink: Callable[[EffectBatch], None],
                        wants_commands: bool = True) -> None:
        """Hand ``sink`` every EffectBatch from now on (after the sinks added before).
        ``wants_commands``: it records the commands (the AOF, replicas, a test's
        recorder); False: it reads only the batch's changes() (the snapshot's
        tracker), see ``effects_wanted``."""
        self.effect_sinks.append(sink)
        if not wants_commands:
            self._key_only_sinks.append(sink)

    def remove_effect_sink(self, sink) -> None:
        """Stop handing ``sink`` batches (DEBUG LOADAOF: the AOF while it reloads itself)."""
        self.effect_sinks.remove(sink)
        if sink in self._key_only_sinks:
            self._key_only_sinks.remove(sink)

    def effects_wanted(self) -> bool:
        """Whether a sink records effects as commands, rather than only reading the
        keys they change.  A handler may leave out effects that only such sinks
        would read (and count the changes they stand for in ``ctx.dirty`` itself)."""
        return len(self.effect_sinks) > len(self._key_only_sinks)

    def _emit(self, db_index: cython.Py_ssize_t, effects: list, atomic: cython.bint = True) -> None:
        """The one path every change takes: WATCH, blocked clients, then the sinks,
        all reading one EffectBatch.

        ``atomic``: the effects are one command's, so a batch of several is
        wrapped in MULTI/EXEC for the sinks."""
        batch: EffectBatch = new_batch(db_index, effects, atomic)
        # Nobody watches or waits (the hot path): no need for the keys.
        if self.blocking_keys or self.watched_keys:
            for dbi, key in batch.changes():
                if key is None:
                    # Whole databases: their handlers invalidate watches themselves;
                    # every key blocked on in them is ready, so that each waiting
                    # command runs again (Redis >= 7.2: a blocked XREADGROUP whose key
                    # went answers NOGROUP or WRONGTYPE, an XREAD keeps waiting).
                    self._dbs_changed(dbi)
                else:
                    self._key_changed(dbi, key)
        for sink in self.effect_sinks:
            sink(batch)

    def propagate_message(self, db_index: int, argv: list) -> None:
        """A Pub/Sub message (PUBLISH, SPUBLISH) for the replicas, as Redis propagates
        it: a batch with ``data`` False, which the replication stream carries and the
        AOF and the snapshot's tracker skip.  It changes no key, so WATCH and blocked
        clients never hear of it.  Sent at once, so a PUBLISH inside EXEC reaches the
        replicas before the transaction's writes (Redis sends it inside them)."""
        batch: EffectBatch = new_batch(db_index, [argv], True, False)
        for sink in self.effect_sinks:
            sink(batch)

    # -- keyspace notifications -------------------------------------------------------

    def _notify_config_changed(self, names: list[str]) -> None:
        if "notify-keyspace-events" in names:
            self.refresh_notify_flags()

    def refresh_notify_flags(self) -> None:
        """notify_flags from the configuration again (after CONFIG SET, or after a
        replica's full sync, which loads with them at 0: as Redis's RDB load, a data
        set loaded whole publishes nothing)."""
        self.notify_flags = publishing_flags(self.config["notify-keyspace-events"])

    def publish_notifications(self, notes: list) -> None:
        """Publish a command's keyspace events (Ctx.notify's notes: (db, event, key)),
        in the order it noted them."""
        for db, event, key in notes:
            self.pubsub.publish_keyspace_event(self.notify_flags, db, event, key)

    def notify(self, db_index: int, event: bytes, key: bytes) -> None:
        """Publish a keyspace event of the server's own (active expiry, retention), now."""
        if self.notify_flags and event_enabled(self.notify_flags, event):
            self.pubsub.publish_keyspace_event(self.notify_flags, db_index, event, key)

    def _key_changed(self, db_index: int, key: bytes) -> None:
        """An effect changed ``key``: its WATCHers are dirty, its blocked readers ready."""
        db: Database = self.keyspace.dbs[db_index]
        if db.watchers:
            db.touch(key)
        if (db_index, key) in self.blocking_keys:
            self.ready_keys[(db_index, key)] = None

    def _dbs_changed(self, db_indexes: tuple) -> None:
        """Whole databases changed (FLUSHDB, FLUSHALL: ALL_DATABASES, SWAPDB): every key
        blocked on in them is ready."""
        every = ALL_DATABASES in db_indexes
        for dbi, key in self.blocking_keys:
            if every or dbi in db_indexes:
                self.ready_keys[(dbi, key)] = None

    def signal_key(self, db_index: int, key: bytes) -> None:
        """Wake clients blocked on a key without an effect (e.g. a lazily deleted key)."""
        if (db_index, key) in self.blocking_keys:
            self.ready_keys[(db_index, key)] = None

    # -- blocking -------------------------------------------------------------------

    def _block(self, client: Client, req: BlockRequest):
        client.blocked = req
        for key in req.keys:
            self.blocking_keys.setdefault((client.db, key), deque()).append(client)
        if self.on_client_blocked is not None:
            self.on_client_blocked(client)
        self._arm_wake(client, self.now_ms())
        if self.ready_keys:
            self.serve_ready_keys()
        return BLOCKED

    def _arm_wake(self, client: Client, now: int) -> None:
        """Ask the network layer to run a blocked client's command again when its
        BlockRequest.next_wake says (it changes with the data: asked again after
        each serving that found nothing)."""
        req = client.blocked
        if req is None or req.next_wake is None or self.on_client_wake_at is None:
            return
        self.on_client_wake_at(client, req.next_wake(self.keyspace.dbs[client.db], now))

    def wake_blocked(self, client: Client) -> None:
        """A blocked client's wake-up time came (a CLAIM read: a pending entry reached
        min-idle-time): its keys are ready, as Redis signals the stream's key, so
        its command (and any other waiting on them) runs again."""
        if client.blocked is None:
            return
        for key in client.blocked.keys:
            self.signal_key(client.db, key)
        self.serve_ready_keys()

    def unblock(self, client: Client, reply) -> None:
        """Stop blocking ``client``; deliver ``reply`` unless it is None."""
        req = client.blocked
        if req is None:
            return
        client.blocked = None
        for key in req.keys:
            q = self.blocking_keys.get((client.db, key))
            if q is not None:
                try:
                    q.remove(client)
                except ValueError:
                    pass
                if not q:
                    del self.blocking_keys[(client.db, key)]
        if self.on_client_unblocked is not None:
            self.on_client_unblocked(client)
        if reply is not None and client.outbox is not None:
            client.outbox.deliver(reply)

    def unblock_on_timeout(self, client: Client) -> None:
        if client.blocked is not None:
            self.unblock(client, client.blocked.timeout_reply)

    def serve_ready_keys(self) -> None:
        """Serve blocked clients whose keys changed, FIFO per key, until nothing is ready."""
        while self.ready_keys:
            ready = list(self.ready_keys)
            self.ready_keys.clear()
            for dbi, key in ready:
                q = self.blocking_keys.get((dbi, key))
                if not q:
                    continue
                for client in list(q):
                    req = client.blocked
                    if req is None or client.db != dbi:
                        continue
                    now = self.now_ms()
                    ctx = Ctx(self, client, now, [req.command.encode()])
                    self.current_client = client
                    try:
                        reply = req.serve(ctx)
                    except CommandError as e:
                        self.count_error(e)
                        self.stats.commands[req.command].failed += 1
                        reply = e
                    if ctx.notifications is not None:
                        self.publish_notifications(ctx.notifications)
                    if ctx.effects:
                        self._emit(dbi, ctx.effects)
                    self.dirty += ctx.dirty
                    if reply is not None:
                        self.unblock(client, reply)
                    else:
                        self._arm_wake(client, now)

    def blocked_count(self) -> int:
        return sum(1 for c in self.clients.values() if c.blocked is not None)

    # -- expiry ---------------------------------------------------------------------

    def active_expire_cycle(self, budget: int = 200) -> int:
        """Delete up to ``budget`` expired keys (Redis's active expiry), propagating DELs."""
        if self.is_replica or self.active_expire_disabled:
            return 0
        self.current_client = None
        now = self.now_ms()
        started = time.perf_counter()
        removed = 0
        for db in self.keyspace.dbs:
            if not db.expires:
                continue
            expired = [k for k, when in db.expires.items() if when <= now][:budget - removed]
            for key in expired:
                db.delete(key)
                self.stats.expired_keys += 1
                self.notify(db.index, b"expired", key)
                self._emit(db.index, [[b"DEL", key]])
                removed += 1
            if removed >= budget:
                break
        if removed:
            self.observe.latency_sample("expire-cycle", int((time.perf_counter() - started) * 1000))
        if self.ready_keys:
            self.serve_ready_keys()
        return removed

    # -- replay ---------------------------------------------------------------------

    def replay_client(self, kind: str = "aof") -> Client:
        """A client that applies effects (AOF load, a replica's link): no auth, no blocking."""
        return self.new_client(kind=kind)

    def replay(self, client: Client, commands: list):
        """``execute`` each of ``commands`` (a replay client's: an AOF frame's) in order,
        up to the first that fails: returns None, or (its index, its CommandError; for
        EXEC the first of its replies that is one).  The loop is here, compiled, rather
        than in the AOF's Python: at a restart's 100k-command tail its interpreted
        call and test cost ~5 ms."""
        i: cython.Py_ssize_t
        for i in range(len(commands)):
            argv = commands[i]
            reply = self.execute(client, argv)
            if type(reply) is bytes:            # XADD's id: most replies
                continue
            if isinstance(reply, CommandError):
                return i, reply
            if type(reply) is list and argv[0].upper() == b"EXEC":
                for r in reply:
                    if isinstance(r, CommandError):
                        return i, r
        return None


OOM_MESSAGE = "command not allowed when used memory > 'maxmemory'."
# The errors of execute's checks (their order is Redis's processCommand's).
_OOM = "OOM " + OOM_MESSAGE
_EXECABORT = "EXECABORT Transaction discarded because of: "
_NOAUTH = "NOAUTH Authentication required."
_READONLY = "READONLY You can't write against a read only replica."
_LOADING = "LOADING Redis is loading the dataset in memory"
_NOT_IN_MULTI = "ERR Command not allowed inside a transaction"
# Inside MULTI every command is refused when out of memory (queueing costs memory)
# except these, as in Redis.
_OOM_ALLOWED_IN_MULTI = frozenset(("exec", "discard", "quit", "reset"))


def _allowed_while_loading(spec) -> bool:
    """Redis serves only commands flagged ``loading`` (INFO, CONFIG GET, ...) while loading."""
    return "loading" in spec.flags or spec.name in ("auth", "hello")


def _refused_for_memory(spec, client: Client) -> bool:
    if "denyoom" in spec.flags:
        return True
    if spec.name == "exec":
        return any(_is_denyoom(argv) for argv in client.multi_queue)
    return client.in_multi and spec.name not in _OOM_ALLOWED_IN_MULTI


def _is_denyoom(argv: list[bytes]) -> bool:
    spec = resolve(argv)
    return spec is not None and "denyoom" in spec.flags


@cython.cfunc
def _wrong_arity(spec: CommandSpec, argc: cython.Py_ssize_t) -> cython.bint:
    """Arity as Redis reads it: positive, exactly that many words (the name
    included); negative, at least -arity."""
    return (spec.arity > 0 and argc != spec.arity) or argc < -spec.arity


def _arity_error(name: str) -> CommandError:
    return CommandError(f"ERR wrong number of arguments for '{name}' command")


def _unknown_subcommand(name: str, sub: bytes) -> CommandError:
    return CommandError(f"ERR unknown subcommand '{_trunc(sub)}'. Try {name.upper()} HELP.")


def _is_write(argv: list[bytes]) -> bool:
    spec = resolve(argv)        # XGROUP CREATE's own flags, not XGROUP's
    return spec is not None and spec.is_write


def _is_write_command(spec, client: Client) -> bool:
    """Redis's is_write_command: a write, or an EXEC whose transaction queued one (out
    of execute: a ccall holds no generator expression)."""
    if spec.is_write:
        return True
    return spec.name == "exec" and any(_is_write(argv) for argv in client.multi_queue)


def _trunc(raw: bytes, n: int = 128) -> str:
    """Redis's '%.128s' of an argument: up to the first NUL, at most n bytes.

    Decoded with surrogateescape so that the error reply carries the client's
    bytes unchanged (protocol/reply.py encodes errors the same way back).
    """
    return raw.split(b"\0", 1)[0][:n].decode("utf-8", "surrogateescape")


def _unknown_command(argv: list[bytes]) -> CommandError:
    # Redis quotes arguments while the quoted text is under 128 bytes, the
    # last one cut to what fits (processCommand in server.c).
    args = b""
    for a in argv[1:]:
        if len(args) >= 128:
            break
        args += b"'%s' " % a.split(b"\0", 1)[0][:128 - len(args)]
    return CommandError(f"ERR unknown command '{_trunc(argv[0])}', with args beginning with: "
                        + args.decode("utf-8", "surrogateescape"))

