"""What a command handler sees: the ``Ctx`` of one command execution.

A handler ``f(ctx, argv)`` reads and changes engine objects through the ctx,
returns a reply value (protocol/reply.py) or raises CommandError, and states
what it did as *effects*: deterministic argv lists that, executed against the
same prior state, produce the same new state (``XADD key * ..`` is recorded as
``XADD key <id> ..``).  The server routes effects to the AOF, to replicas and
to the WATCH/blocked-client machinery; handlers never do I/O.

A handler also notes the keyspace events it causes (``notify``, Redis's
notifyKeyspaceEvent); the server publishes them when the command completes.
They are not effects: a replica applying the effects notes its own.
"""

from __future__ import annotations

from typing import Callable

import cython

from ..engine import Stream
from ..engine.keyspace import Database
from ..protocol.reply import CommandError
from .client import Client
from .pubsub import EVENT_CLASS

__all__ = ["Ctx", "BlockRequest", "WRONGTYPE", "syntax_error"]

WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"


def syntax_error() -> CommandError:
    return CommandError("ERR syntax error")


# A cclass when compiled: the dispatch asks isinstance(reply, BlockRequest) of
# every reply, a C type check then.
@cython.cclass
class BlockRequest:
    """Returned by a handler that must wait for ``keys`` (XREAD/XREADGROUP BLOCK).

    ``serve(ctx)`` is called when one of the keys may have changed; it returns
    the reply, or None to keep waiting, and may raise CommandError.
    ``timeout_ms`` 0 waits forever; on timeout the client gets ``timeout_reply``.
    ``next_wake(db, now_ms)``, if given, says when (ms) the read may have something
    to serve although none of its keys changed (a CLAIM read: a pending entry
    reaching min-idle-time), or None; the server runs ``serve`` again then.
    """

    __slots__ = ("keys", "timeout_ms", "serve", "timeout_reply", "command", "next_wake")

    def __init__(self, keys: list[bytes], timeout_ms: int, serve: Callable,
                 timeout_reply, command: str, next_wake: Callable | None = None) -> None:
        self.keys = keys
        self.timeout_ms = timeout_ms
        self.serve = serve
        self.timeout_reply = timeout_reply
        self.command = command
        self.next_wake = next_wake


# Compiled, a cclass whose attributes are the C fields declared in context.pxd
# (one is made per request); interpreted, a plain class.  The freelist keeps the
# memory of a few dead Ctx objects for the next requests' (one is alive per request
# at a time, more with MULTI/EXEC or blocked clients served).
@cython.freelist(8)
@cython.cclass
class Ctx:
    __slots__ = ("core", "client", "db", "now_ms", "effects", "argv", "config",
                 "in_exec", "replaying", "dirty", "notify_flags", "notifications")

    def __init__(self, core, client: Client, now_ms: int, argv: list[bytes],
                 in_exec: bool = False, replaying: bool = False) -> None:
        _fill(self, core, client, core.keyspace.dbs[client.db], core.config, now_ms, argv,
              in_exec, replaying, core.notify_flags)

    @property
    def resp3(self) -> bool:
        return self.client.resp == 3

    # -- effects --------------------------------------------------------------

    @cython.ccall
    def propagate(self, argv: list, dirty: cython.Py_ssize_t = 1):
        """Record one deterministic effect of this command."""
        self.effects.append(argv)
        self.dirty += dirty

    def propagate_as_is(self, dirty: int = 1) -> None:
        self.propagate(list(self.argv), dirty)

    # -- keyspace notifications -------------------------------------------------

    @cython.ccall
    def notify(self, event, key, db: cython.Py_ssize_t = -1):
        """Note keyspace event ``event`` (a name in dispatch/pubsub.py KEYSPACE_EVENTS)
        of ``key``, in database ``db`` (default: the command's), at the point Redis
        calls notifyKeyspaceEvent.  The server publishes the notes in order once the
        command completes.  With notifications off one test, nothing allocated."""
        if self.notify_flags == 0 or not self.notify_flags & EVENT_CLASS[event]:
            return
        if self.notifications is None:
            self.notifications = []
        self.notifications.append((self.db.index if db < 0 else db, event, key))

    # -- key access -----------------------------------------------------------

    @cython.ccall
    def lookup(self, key, read: cython.bint = False):
        """The value at ``key``, or None.  An expired key is deleted (and a DEL propagated).

        ``read``: the command reads the key (Redis's lookupKeyRead, as opposed to
        lookupKeyWrite): the lookup counts as a hit or a miss in INFO's
        keyspace_hits / keyspace_misses.
        """
        db = self.db
        value = db.data.get(key)
        if value is not None and db.expires and db.is_expired(key, self.now_ms):
            value = self._expired(key, value)
        if read:
            stats = self.core.stats
            if value is None:
                stats.keyspace_misses += 1
                if self.notify_flags:
                    self.notify(b"keymiss", key)
            else:
                stats.keyspace_hits += 1
        return value

    def _expired(self, key: bytes, value):
        """lookup() of a key past its expiry time: what the command sees (None: gone)."""
        if self.core.is_replica and not self.replaying:
            # Replicas never expire keys themselves; the primary's DEL will
            # arrive.  Reads still treat the key as gone, as Redis does.
            return None
        if self.replaying:
            return value
        self.db.delete(key)
        self.core.stats.expired_keys += 1
        self.propagate([b"DEL", key], dirty=0)
        self.notify(b"expired", key)
        return None

    def count_lookups_again(self, keys: list, values: list) -> None:
        """Count read lookups of ``keys`` again for their ``values`` already in hand (a
        hit each, a miss and its keymiss event for each None): where Redis looks a
        command's keys up twice (XREAD)."""
        stats = self.core.stats
        misses = values.count(None)
        stats.keyspace_misses += misses
        stats.keyspace_hits += len(values) - misses
        if misses and self.notify_flags:
            for key, value in zip(keys, values):
                if value is None:
                    self.notify(b"keymiss", key)

    @cython.ccall
    def lookup_stream(self, key, read: cython.bint = False):
        """lookup() (``read`` as there), WRONGTYPE unless the value is a stream."""
        value = self.lookup(key, read)
        if value is None or type(value) is Stream:
            return value
        raise CommandError(WRONGTYPE)

    def stream_or_create(self, key: bytes) -> Stream:
        s = self.lookup_stream(key)
        if s is None:
            s = Stream()
            self.add_key(key, s)
        return s

    def add_key(self, key: bytes, value, keep_ttl: bool = False) -> None:
        """Store a key that does not exist (Redis's dbAdd): its ``new`` event."""
        self.db.set(key, value, keep_ttl)
        self.notify(b"new", key)


@cython.cfunc
def _fill(ctx: Ctx, core, client: Client, db: Database, config, now_ms, argv,
          in_exec: cython.bint, replaying: cython.bint,
          notify_flags: cython.long) -> cython.void:
    ctx.core = core
    ctx.client = client
    ctx.db = db
    ctx.now_ms = now_ms
    ctx.effects = []
    ctx.argv = argv
    ctx.config = config
    ctx.in_exec = in_exec          # inside MULTI/EXEC: never block
    ctx.replaying = replaying      # applying effects from the AOF or a primary
    ctx.dirty = 0
    ctx.notify_flags = notify_flags     # core.notify_flags; 0: nothing to note
    ctx.notifications = None            # [(db, event, key)] once one is noted


@cython.ccall
def new_ctx(core, client: Client, db: Database, config, now_ms, argv,
            in_exec: cython.bint, replaying: cython.bint, notify_flags: cython.long) -> Ctx:
    """``Ctx(core, client, ...)`` for the dispatch, which has ``db`` and ``config`` at
    hand: compiled, a C call that allocates the Ctx without the Python call
    protocol and __init__'s argument parsing (~1.2k instructions of an XADD
    request under callgrind, with the look-ups of db and config through ``core``)."""
    ctx: Ctx = Ctx.__new__(Ctx)
    _fill(ctx, core, client, db, config, now_ms, argv, in_exec, replaying, notify_flags)
    return ctx
