"""The snapshot's changed-key tracker: the effect sink that notes which keys the
effects since the last snapshot changed, so that the next one rewrites only those.

``Snapshotter`` (persistence/snapshot.py) owns one and registers it with
``Core.add_effect_sink`` (persistence/recovery.py).  It is a sink like the AOF and
replication: it sees every EffectBatch ``Core._emit`` passes on, and reads only the
changes it names (``wants_commands=False``: ``Core.effects_wanted``).

Compiled (streamdb/compiled.py), a cclass: every write command of a server passes
through it.  As a Python object with ``__call__`` on the Snapshotter the call alone
(the type's call slot looking ``__call__`` up, a bound method, an interpreted frame)
cost ~900 of the ~13.5k instructions of an XADD request, although with no snapshot
yet (``full``) the body returns at once (callgrind, XADD -P16 through the server's
objects).
"""

from __future__ import annotations

import cython

from ..dispatch.effects import EffectBatch

__all__ = ["ChangedKeys"]


@cython.cclass
class ChangedKeys:
    """The keys changed since the last snapshot: ``dirty`` (db, key) pairs, or ``full``
    when the next snapshot writes every key anyway."""

    # (C fields when compiled: changes.pxd)

    def __init__(self, full: bool) -> None:
        self.dirty = set()
        self.full = full

    def __call__(self, batch: EffectBatch) -> None:
        if self.full:
            return        # the next snapshot writes every key anyway: nothing to track
        dirty: set = self.dirty
        for change in batch.changes():
            if change[1] is None:
                self.full = True     # a whole database: cheaper to rewrite everything
            else:
                dirty.add(change)    # (db, key)
