"""The snapshot's changed-key tracker: the effect sink that notes which keys the
effects since the last snapshot changed, so that the next one rewrites only those.

``Snapshotter`` (persistence/snapshot.py) owns one and hands it to ``Core.effect_sinks``
(persistence/recovery.py).  It is a sink like the AOF and replication: it sees every
batch ``Core._emit`` passes on, and reads only the keys (``records_commands = False``:
``Core.effects_wanted``).

Compiled (streamdb/compiled.py), a cclass: every write command of a server passes
through it.  As a Python object with ``__call__`` on the Snapshotter the call alone
(the type's call slot looking ``__call__`` up, a bound method, an interpreted frame)
cost ~900 of the ~13.5k instructions of an XADD request, although with no snapshot
yet (``full``) the body returns at once (callgrind, XADD -P16 through the server's
objects).
"""

from __future__ import annotations

import cython

from ..dispatch import registry

__all__ = ["ChangedKeys"]


@cython.cclass
class ChangedKeys:
    """The keys changed since the last snapshot: ``dirty`` (db, key) pairs, or ``full``
    when the next snapshot writes every key anyway."""

    dirty = cython.declare(set, visibility="public")
    full = cython.declare(cython.bint, visibility="public")

    # Only the keys the effects name matter here (Core.effects_wanted).
    records_commands = False

    def __init__(self, full: bool) -> None:
        self.dirty = set()
        self.full = full

    def __call__(self, db: int, effects: list) -> None:
        if self.full:
            return        # the next snapshot writes every key anyway: nothing to track
        dirty: set = self.dirty
        cur = db
        last = None
        for argv in effects:
            if argv[0] == b"XADD":     # most effects, in runs on one key: skip the table lookup
                if argv[1] != last:
                    last = argv[1]
                    dirty.add((cur, last))
                continue
            last = None
            name = argv[0].lower()
            if name == b"select":
                cur = int(argv[1])
                continue
            if name in (b"multi", b"exec"):
                continue
            if name in (b"flushall", b"flushdb", b"swapdb"):
                self.full = True     # cheaper to rewrite everything than to list the keys
                continue
            spec = registry.lookup(argv)
            if spec is None:
                continue
            if spec.subcommands and len(argv) > 1:
                spec = spec.subcommands.get(argv[1].decode("latin-1").lower(), spec)
            for key in spec.keys(argv):
                dirty.add((cur, key))
