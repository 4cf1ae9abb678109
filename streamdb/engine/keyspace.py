"""The keyspace: numbered databases mapping keys to values, with expiry times.

Values are ``Stream`` objects or ``bytes`` (the string type, used for consumer
checkpoints and to make WRONGTYPE real).  Expiry *decisions* need the current
time, which callers pass in; deleting an expired key is the caller's job too,
because it must also be propagated as a DEL (see dispatch/context.py).
"""

from __future__ import annotations

import cython

from .stream import Stream

__all__ = ["Database", "Keyspace", "type_name"]


def type_name(value) -> bytes:
    if isinstance(value, Stream):
        return b"stream"
    return b"string"


# Compiled, a cclass whose attributes are C fields (keyspace.pxd): every key
# look-up of a command (dispatch/context.py's Ctx.lookup) and every effect
# (server/core.py's _emit) reads them, and the generic attribute look-ups into
# the plain class measured ~500 instructions of an XADD request (callgrind).
@cython.cclass
class Database:
    __slots__ = ("index", "data", "expires", "watchers")

    def __init__(self, index: int) -> None:
        self.index = index
        self.data: dict[bytes, object] = {}
        self.expires: dict[bytes, int] = {}      # key -> unix ms
        # key -> set of watcher objects (clients in WATCH); each has .dirty_cas
        self.watchers: dict[bytes, set] = {}

    def __len__(self) -> int:
        return len(self.data)

    @cython.ccall
    def is_expired(self, key, now_ms) -> cython.bint:
        when = self.expires.get(key)
        return when is not None and when <= now_ms

    def set(self, key: bytes, value, keep_ttl: bool = False) -> None:
        self.data[key] = value
        if not keep_ttl:
            self.expires.pop(key, None)

    def delete(self, key: bytes) -> bool:
        if key in self.data:
            del self.data[key]
            self.expires.pop(key, None)
            return True
        return False

    def touch(self, key: bytes) -> None:
        """A key changed: invalidate the transactions watching it."""
        w = self.watchers.get(key)
        if w:
            for client in w:
                client.dirty_cas = True

    def touch_all(self, replaced_with: "Database | None" = None) -> None:
        """Every watched key that exists here, or in ``replaced_with`` (the data
        this database is about to hold), changes: its transactions are dirty."""
        for key, w in self.watchers.items():
            if key in self.data or (replaced_with is not None and key in replaced_with.data):
                for client in w:
                    client.dirty_cas = True

    def clear(self) -> None:
        self.touch_all()
        self.data.clear()
        self.expires.clear()


@cython.cclass
class Keyspace:
    """All databases of one server (``databases`` directive)."""

    __slots__ = ("dbs",)

    def __init__(self, count: int = 16) -> None:
        self.dbs = [Database(i) for i in range(count)]

    def __getitem__(self, index: int) -> Database:
        return self.dbs[index]

    def __len__(self) -> int:
        return len(self.dbs)

    def swap(self, i: int, j: int) -> None:
        """SWAPDB: databases ``i`` and ``j`` exchange their keys and expiry times.

        WATCHes stay with the numbers, as clients do (SELECT, blocked readers),
        so a transaction watching a key that exists on either side is dirty."""
        a, b = self.dbs[i], self.dbs[j]
        a.touch_all(replaced_with=b)
        b.touch_all(replaced_with=a)
        a.data, b.data = b.data, a.data
        a.expires, b.expires = b.expires, a.expires
