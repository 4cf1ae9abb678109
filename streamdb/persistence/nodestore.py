"""The node store of a running server: cold stream nodes read back from the snapshot.

A sealed node the snapshot holds lives in its ``nodes`` database under
``<db u32><len u32><key><first id 128>`` (persistence/snapshot.py).  A node the
node cache (engine/nodecache.py) has made cold keeps as its location (``where``)
the row prefix of the key it was written under; the store reads the row back
and checks its CRC.

Readers only.  The process that serves opens the environment as a reader of its
own (``lock=True``, so that a writer never reuses the pages it reads) and keeps
one read transaction pinned: a snapshot child may commit the deletion of rows
that cold nodes still point at (a RENAMEd key's old rows), and the pinned
transaction keeps them readable until the parent has pointed the nodes at their
new rows and renews it (``Snapshotter`` on reaping the child).

LMDB is never shared across a fork: a forked child (snapshot, AOF rewrite,
replication payload) drops its copy of the parent's handles at once, without
closing them (py-lmdb does not close an environment in a process other than the
one that opened it; closing would release the parent's reader slot in the shared
lock file), so that it may open the environment itself: the snapshot child as
the writer, a child reading cold nodes as a reader of its own on its first read.
"""

from __future__ import annotations

import os
import weakref
import zlib

import lmdb

from .. import log
from ..engine.nodecache import ColdReadError
from ..protocol.reply import CommandError
from .lmdbfile import damage, reserve_lock_file

__all__ = ["LmdbNodeStore", "NodeReadError"]


class NodeReadError(ColdReadError, CommandError):
    """A cold node that cannot be read: the command that needed it fails with this
    error reply (the server goes on serving everything else)."""

    def __init__(self, why: str) -> None:
        super().__init__(f"ERR cannot read a stream node from disk: {why}")
        log.log(log.WARNING, f"Cannot read a stream node from disk: {why}")


class LmdbNodeStore:
    """``fetch(where, first)`` over the snapshot environment at ``path``."""

    def __init__(self, path: str, map_size: int) -> None:
        self.path = path
        self.map_size = map_size
        self._pid: int | None = None
        self._env = None
        self._nodes = None
        self._txn = None
        _STORES.add(self)

    def _forsake(self) -> None:
        """In a forked child: forget the parent's handles (py-lmdb leaves them open)."""
        if self._pid != os.getpid():
            self._env = self._nodes = self._txn = None
            self._pid = os.getpid()

    def _reader(self):
        self._forsake()
        if self._txn is None:
            if self._env is None and not self._open():
                raise NodeReadError(f"{self.path}: no snapshot to read stream nodes from")
            self._txn = self._env.begin(db=self._nodes)
        return self._txn

    def _open(self) -> bool:
        """Open the environment; False if it holds no snapshot (yet)."""
        if not self._snapshot_exists():
            return False
        why = damage(os.path.join(self.path, "data.mdb"))
        if why is not None:
            # (Mapped, the pages the file lacks would be a SIGBUS on the first read.)
            raise NodeReadError(why)
        try:
            reserve_lock_file(self.path)        # (the reader slot is written through a map)
        except OSError as e:
            raise NodeReadError(f"{self.path}: cannot reserve the lock file's space: "
                                f"{e.strerror or e}") from None
        env = lmdb.open(self.path, map_size=self.map_size, max_dbs=4, subdir=True,
                        readonly=True, lock=True, create=False)
        try:
            self._nodes = env.open_db(b"nodes", create=False)
        except lmdb.NotFoundError:
            # A first snapshot killed before it made its databases.
            env.close()
            return False
        self._env = env
        return True

    def fetch(self, where: bytes, first: int) -> bytes:
        try:
            raw = self._reader().get(where + first.to_bytes(16, "big"))
        except lmdb.Error as e:
            raise NodeReadError(f"{self.path}: {e}") from None
        name = f"node {first >> 64}-{first & (2**64 - 1)} of key {where[8:]!r}"
        if raw is None:
            raise NodeReadError(f"{self.path}: {name} is missing from the snapshot")
        if len(raw) < 4 or zlib.crc32(raw[:-4]).to_bytes(4, "big") != raw[-4:]:
            raise NodeReadError(f"{self.path}: checksum mismatch in {name}")
        return raw[:-4]

    def pin(self) -> None:
        """Read from the newest committed snapshot from now on (pointers updated)."""
        self._forsake()
        if self._txn is not None:
            self._txn.abort()
            self._txn = None
        # (None yet: the first read after one opens it.)
        if self._env is not None or self._open():
            self._reader()

    def _snapshot_exists(self) -> bool:
        return os.path.exists(os.path.join(self.path, "data.mdb"))

    def close(self) -> None:
        """Let go of the environment (this process writes the snapshot itself: SAVE).

        Two handles on one environment in one process break LMDB's file locks."""
        self._forsake()
        if self._env is not None:
            if self._txn is not None:
                self._txn.abort()
            self._env.close()
            self._env = self._nodes = self._txn = None


_STORES: "weakref.WeakSet[LmdbNodeStore]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for store in list(_STORES):
        store._forsake()


os.register_at_fork(after_in_child=_after_fork_in_child)
