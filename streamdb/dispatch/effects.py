"""One command's effects as every effect sink gets them: ``EffectBatch``.

``Core._emit`` (server/core.py) makes one batch for each command, EXEC or
expiry's DEL that changed data, and hands the same object to each sink: the AOF
(persistence/aof.py), the replication stream (replication/primary.py), the
snapshot's changed-key tracker (persistence/changes.py), tests' recorders.  What
several of them need is derived once, when first asked for, and kept:

* ``changes()``: the keys the effects change, from the command table (WATCH,
  blocked clients and the tracker read them);
* ``resp()``: the commands in RESP (the AOF and replication write the same bytes);
* ``final_db()``: the database selected once the commands ran (each stream tracks
  its own SELECT with it).

A sink registers with ``Core.add_effect_sink``, saying whether it records the
commands or reads only ``changes()`` (``Core.effects_wanted``).

Compiled (streamdb/compiled.py), a cclass: one is made for every write, and the
dispatch makes it with a C call (``new_batch``) and reads it in C (effects.pxd).
"""

from __future__ import annotations

import cython

from ..protocol import encode_command, encode_commands
from .registry import CommandSpec, resolve

__all__ = ["EffectBatch", "new_batch", "ALL_DATABASES"]

# In a whole-database change (see EffectBatch.changes): every database (FLUSHALL).
ALL_DATABASES = -1

@cython.cclass
class EffectBatch:
    """The effects of one command (or transaction), for the sinks.

    ``db``: the database the first effect applies to.  ``commands``: what a
    recording sink writes: the effects, wrapped in MULTI/EXEC when they are one
    command's (``atomic``) and more than one, so that a torn write never applies
    half of them.  ``data``: the effects change data (every batch but a Pub/Sub
    message's: PUBLISH reaches replicas, as Redis propagates it, and never the AOF
    or the snapshot).  A batch is read-only once made."""

    # (C fields when compiled: effects.pxd; tests/unit/test_compiled_fields.py holds them equal)
    __slots__ = ("db", "data", "commands", "effects", "_changes", "_resp", "_final_db")

    def __init__(self, db: int, effects: list, atomic: cython.bint = True,
                 data: cython.bint = True) -> None:
        _fill(self, db, effects, atomic, data)

    def __repr__(self) -> str:
        return f"EffectBatch(db={self.db}, commands={self.commands!r})"

    @cython.ccall
    def changes(self) -> list:
        """What the effects change, in their order: ``(db, key)`` for a key, and
        ``(dbs, None)`` for whole databases (FLUSHDB, SWAPDB: a tuple of their
        indexes; FLUSHALL: ``(ALL_DATABASES,)``).  SELECTs are followed; a key
        changed by several effects in a row is listed once."""
        if self._changes is None:
            self._changes = _derive_changes(self.db, self.effects)
        return self._changes

    @cython.ccall
    def resp(self) -> bytes:
        """``commands`` in RESP, as the AOF and the replication stream hold them."""
        if self._resp is None:
            self._resp = encode_commands(self.commands)
        return self._resp

    @cython.ccall
    def resp_from(self, selected: cython.Py_ssize_t) -> bytes:
        """The bytes a stream whose reader has database ``selected`` selected gets:
        a SELECT first when the batch is for another, then ``resp()``."""
        if selected != self.db:
            return encode_command([b"SELECT", b"%d" % self.db]) + self.resp()
        return self.resp()

    @cython.ccall
    def final_db(self) -> cython.Py_ssize_t:
        """The database selected once the commands ran: the last SELECT's, else ``db``."""
        i: cython.Py_ssize_t
        if self._final_db < 0:
            self._final_db = self.db
            for i in range(len(self.effects) - 1, -1, -1):
                argv = self.effects[i]
                if argv[0] == b"SELECT":
                    self._final_db = int(argv[1])
                    break
        return self._final_db


@cython.cfunc
def _fill(batch: EffectBatch, db: cython.Py_ssize_t, effects: list, atomic: cython.bint,
          data: cython.bint) -> cython.void:
    batch.db = db
    batch.data = data
    batch.effects = effects
    batch.commands = [[b"MULTI"], *effects, [b"EXEC"]] if atomic and len(effects) > 1 else effects
    batch._changes = None
    batch._resp = None
    batch._final_db = -1


@cython.ccall
def new_batch(db: cython.Py_ssize_t, effects: list, atomic: cython.bint,
              data: cython.bint = True) -> EffectBatch:
    """``EffectBatch(db, effects, atomic)`` for the dispatch: compiled, a C call that
    skips the Python call protocol and __init__'s argument parsing (as new_ctx)."""
    batch: EffectBatch = EffectBatch.__new__(EffectBatch)
    _fill(batch, db, effects, atomic, data)
    return batch


@cython.cfunc
def _derive_changes(db: cython.Py_ssize_t, effects: list) -> list:
    """EffectBatch.changes of ``effects`` (unwrapped: MULTI and EXEC name no key)."""
    out: list = []
    cur: cython.Py_ssize_t = db
    spec: CommandSpec
    last = None
    for argv in effects:
        if argv[0] == b"SELECT":
            cur = int(argv[1])
            last = None
            continue
        spec = resolve(argv)
        if spec is None:
            continue
        if spec.first_key == 0 and spec.key_finder is None:     # names no key
            whole = _whole_databases(spec.name, argv, cur)
            if whole is not None:
                out.append((whole, None))
                last = None
            continue
        if spec.first_key == spec.last_key and spec.key_finder is None:
            # One key at a fixed place (XADD and most others): spec.keys(argv)
            # without its two calls and the list they build, ~2k instructions
            # (callgrind) a write while a snapshot's tracker is fed.
            keys = (argv[spec.first_key],) if spec.first_key < len(argv) else ()
        else:
            keys = spec.keys(argv)
        for key in keys:
            if last is not None and key == last[1] and cur == last[0]:
                continue       # (an XADD run, XREADGROUP's XCLAIMs: one key, many effects)
            last = (cur, key)
            out.append(last)
    return out


@cython.cfunc
def _whole_databases(name: str, argv: list, cur: cython.Py_ssize_t) -> object:
    """The databases a command that names no key changes whole, as a tuple for
    EffectBatch.changes, or None when it changes none."""
    if name == "flushall":
        return (ALL_DATABASES,)
    if name == "flushdb":
        return (cur,)
    if name == "swapdb":
        return tuple([int(a) for a in argv[1:]])
    return None
