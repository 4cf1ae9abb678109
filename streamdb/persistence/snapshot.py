"""Snapshots: the whole state in an LMDB environment, written incrementally by a forked child.

Layout of ``<dir>/<dbfilename>`` (an LMDB environment), three named databases::

    meta    b"format"  -> b"1"
            b"covers"  -> msgpack {aof_seq, time_ms, keys} + CRC32
    keys    <db u32><key>                   -> msgpack [expire_ms|None, value doc] + CRC32
    nodes   <db u32><len u32><key><id 128>  -> sealed node blob + CRC32
    rows    <db u32><key>                   -> u64: how many ``nodes`` rows the key has

A stream's document (persistence/codec.py) refers to its sealed nodes by
first id; the nodes live in ``nodes``.  Sealed nodes never change, so a
snapshot rewrites only the documents of keys that changed since the previous
one (tracked from the effect stream) plus the nodes they gained, and deletes
the nodes they lost.  That is what makes "1% changed" cost about 1% of a full
snapshot.  Finding the nodes a stream lost would mean reading every row of the key
(100k rows for 10M entries, most of an incremental snapshot's time): ``rows`` says
how many the key has, and when as many of its nodes are located in its own rows
(the node cache's) none can have been lost, so no row is read (``_NodeWrites``).

Point in time: BGSAVE first rotates the AOF to a fresh segment, then forks
(``Aof.snapshot_point``: a segment still empty since the last rotation is fresh
already, so a save retried after failures makes no segment per try).
The child sees memory exactly as it was at that instant (copy-on-write) and
writes it in one LMDB write transaction, so the snapshot is either absent or
complete, and it covers exactly the AOF segments before the rotation.  Only
after the child succeeded does the parent retire those segments.  A crash at
any point therefore leaves either the old snapshot + all segments, or the new
snapshot + segments of which the covered ones are skipped on load.

A save that fails (the fork, or the child) gives back the changed keys it took:
the next snapshot writes them, so the segments it retires hold nothing it did not
write.  While saves fail, writes get Redis's MISCONF (``stop-writes-on-bgsave-error``
with save rules), and the save rules retry every 5 seconds, not every tick.
"""

from __future__ import annotations

import os
import shutil
import struct
import time
import zlib

import lmdb
import msgpack

from .. import log
from ..engine import Stream
from ..engine.nodecache import CACHE
from .aof import AofRotationError
from ..files import fsync_dir
from .changes import ChangedKeys
from .child import (NotStarted, describe_exit, describe_failure, fork_reporting_child,
                    read_failure_reason, reap)
from .codec import CodecError, decode_value, encode_value
from .lmdbfile import damage, reserve_lock_file
from .nodestore import LmdbNodeStore

__all__ = ["Snapshotter", "SnapshotError", "load_snapshot", "write_snapshot", "snapshot_info"]

FORMAT = b"1"
MAP_SIZE = 1 << 40          # address space only; the file grows with the data
# Seconds before a save rule tries again after a failed background save
# (Redis's CONFIG_BGSAVE_RETRY_DELAY).
BGSAVE_RETRY_DELAY = 5
# Redis's shared.bgsaveerr, word for word: what writes get while saves fail.
MISCONF_SAVE = ("MISCONF Redis is configured to save RDB snapshots, but it's currently unable to "
                "persist to disk. Commands that may modify the data set are disabled, because this "
                "instance is configured to report errors during writes if RDB snapshotting fails "
                "(stop-writes-on-bgsave-error option). Please check the Redis logs for details "
                "about the RDB error.")
DATA_FILE = "data.mdb"      # the file of an LMDB environment that holds the data
# Where the first snapshot is built, inside the environment's directory (so on its
# file system) but not the environment (write_snapshot).
FIRST_ASIDE = "first-snapshot.tmp"
DAMAGED_WAY_OUT = ("Nothing was changed. Restore the snapshot from a backup (docs/OPERATIONS.md, "
                   "\"Back up and restore\")")


class SnapshotError(Exception):
    """A snapshot that cannot be loaded; the message names the file and what is wrong."""


def _crc(data: bytes) -> bytes:
    return data + zlib.crc32(data).to_bytes(4, "big")


def _uncrc(raw: bytes, what: str, path: str) -> bytes:
    if len(raw) < 4 or zlib.crc32(raw[:-4]).to_bytes(4, "big") != raw[-4:]:
        raise SnapshotError(f"{path}: checksum mismatch in {what}")
    return raw[:-4]


def _key_key(db: int, key: bytes) -> bytes:
    return struct.pack(">I", db) + key


def _node_prefix(db: int, key: bytes) -> bytes:
    return struct.pack(">II", db, len(key)) + key


def check_data_file(path: str) -> None:
    """Refuse (SnapshotError, naming the file and the way out) a snapshot whose data
    file LMDB would fail on or fault reading (lmdbfile.py); nothing is changed."""
    why = damage(os.path.join(path, DATA_FILE))
    if why is not None:
        raise SnapshotError(f"{why}. {DAMAGED_WAY_OUT}")


def _open(path: str, readonly: bool) -> lmdb.Environment:
    """The environment at ``path``, its data file checked first when it has one (a
    writer creates it when it has none)."""
    if os.path.exists(os.path.join(path, DATA_FILE)):
        check_data_file(path)
    if not readonly:
        reserve_lock_file(path)     # (an OSError, not a SIGBUS, on a full disk)
    try:
        return lmdb.open(path, map_size=MAP_SIZE, max_dbs=4, subdir=True, readonly=readonly,
                         lock=not readonly, sync=True, metasync=True, create=not readonly)
    except lmdb.Error as e:
        raise SnapshotError(f"{path}: cannot open the snapshot: {e}") from None


# ---------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------


def write_snapshot(path: str, keyspace, dirty: set | None, aof_seq: int | None, now_ms: int,
                   located: bool = False, stale_rows: frozenset = frozenset()) -> dict:
    """Write the state of ``keyspace`` into the environment at ``path``.

    ``dirty`` is the set of (db, key) changed since the snapshot already in
    ``path``; None writes everything afresh.  ``located``: stream nodes may point
    into this snapshot (the node cache has been bounded, engine/nodecache.py):
    the snapshot then never drops rows wholesale, takes a cold node's bytes from
    its row, and writes every resident node that has no location yet.
    ``stale_rows``: node rows an earlier snapshot copied and left (``deferred`` in
    the counters returned), deleted now unless written again.  Returns counters
    (bytes written).

    A failure at any step leaves nothing a start-up takes for a snapshot.  The
    first snapshot (``path`` has no data file yet) is built in a directory of its
    own inside ``path`` and its data file renamed into place once committed and
    fsynced: LMDB creates a file with plain writes (a full disk or a kill there
    leaves a data file without its meta pages, which every later open refuses), and
    a start-up loads whatever data file ``path`` holds.  A later snapshot is one LMDB
    write transaction into that file: pages are copied on write and the meta page
    that makes them current is written last, so a failed write (ENOSPC, a kill)
    leaves the last commit as it was.
    """
    aside = os.path.join(path, FIRST_ASIDE)
    # (One left there is a first snapshot's that was killed: only this function
    # writes there, and one snapshot runs at a time.)
    shutil.rmtree(aside, ignore_errors=True)
    # The lock file every later open of ``path`` maps (the server's node store too)
    # gets its space here, where a full disk is this snapshot's ENOSPC, not a SIGBUS
    # in the server (lmdbfile.reserve_lock_file).
    reserve_lock_file(path)
    if os.path.exists(os.path.join(path, DATA_FILE)):
        return _write_environment(path, keyspace, dirty, aof_seq, now_ms, located, stale_rows)
    fsync_dir(os.path.dirname(os.path.abspath(path)))
    try:
        stats = _write_environment(aside, keyspace, dirty, aof_seq, now_ms, located, stale_rows)
        os.rename(os.path.join(aside, DATA_FILE), os.path.join(path, DATA_FILE))
        fsync_dir(path)
    finally:
        shutil.rmtree(aside, ignore_errors=True)
    return stats


def _write_environment(path: str, keyspace, dirty: set | None, aof_seq: int | None, now_ms: int,
                       located: bool, stale_rows: frozenset) -> dict:
    """write_snapshot into the environment at ``path`` (made if it has none), in one
    write transaction, fsynced."""
    os.makedirs(path, exist_ok=True)
    env = _open(path, readonly=False)
    stats = {"keys": 0, "nodes_written": 0, "bytes_written": 0, "nodes_deleted": 0,
             "rows_read": 0}
    try:
        meta = env.open_db(b"meta")
        keys_db = env.open_db(b"keys")
        nodes_db = env.open_db(b"nodes")
        rows_db = env.open_db(b"rows")
        with env.begin(write=True) as txn:
            fresh = txn.get(b"format", db=meta) != FORMAT
            rewrite = dirty is None or fresh
            if rewrite and not (located and not fresh):
                txn.drop(keys_db, delete=False)
                txn.drop(nodes_db, delete=False)
                txn.drop(rows_db, delete=False)
                targets = [(db.index, key) for db in keyspace.dbs for key in db.data]
            elif rewrite:
                # Cold nodes read their rows from here: every key is rewritten in
                # place, and the keys gone are deleted one by one.
                targets = sorted({(db.index, key) for db in keyspace.dbs for key in db.data} |
                                 {(struct.unpack(">I", k[:4])[0], bytes(k[4:]))
                                  for k in txn.cursor(db=keys_db).iternext(values=False)})
            else:
                targets = sorted(dirty)
            writes = _NodeWrites(txn, nodes_db, rows_db, rewrite or located, stats)
            writes.deletes.extend(stale_rows)
            for dbi, key in targets:
                _write_key(txn, keys_db, writes, keyspace, dbi, key, stats)
            writes.finish()
            stats["keys"] = txn.stat(keys_db)["entries"]
            covers = msgpack.packb({"aof_seq": aof_seq, "time_ms": now_ms, "keys": stats["keys"]})
            txn.put(b"format", FORMAT, db=meta)
            txn.put(b"covers", _crc(covers), db=meta)
        env.sync(True)
    finally:
        env.close()
    return stats


class _NodeWrites:
    """The node rows one snapshot transaction writes, copies and deletes.

    The rows a key has (``rows``) are counted: after a snapshot they are exactly the
    rows of the stream's sealed nodes at its fork.  Between snapshots a node located
    in its key's own rows (``where`` == the prefix) only loses that location (it
    leaves the stream or changes shape: ``Node.forget``), and a node gains it only
    from the snapshot that wrote its row.  So when as many nodes are located there
    as the key has rows, those rows are all there is, nothing was lost, and only the
    nodes not located there need rows (``key_nodes`` with ``known``).  Otherwise (a
    key deleted and made again, renamed, restored, loaded without a node cache,
    written before the count existed) the key's rows are read and the difference
    deleted.

    A cold node of a key that moved (RENAME, MOVE, SWAPDB, ...) is copied from the
    row its location names, which this same transaction may delete (the old key
    is gone) or overwrite (SWAPDB of two keys with nodes of the same first id):
    so the rows copied are read first, then every row is written, and only then
    are rows deleted.  A row copied from is not deleted here but reported
    (``deferred``): until the parent has pointed the moved nodes at their new rows,
    a child it forks meanwhile (AOF rewrite, replication payload), which reads the
    newest snapshot, may still look for them there.  The next snapshot deletes them.
    """

    def __init__(self, txn, nodes_db, rows_db, rewrite_resident: bool, stats: dict) -> None:
        self.txn = txn
        self.nodes_db = nodes_db
        self.rows_db = rows_db
        # Resident nodes without a location are written even when their row
        # exists: the row may hold an older node of the same first id (the key was
        # deleted and made again), and the node will be given that row.
        self.rewrite_resident = rewrite_resident
        self.stats = stats
        self.puts: list = []          # (row, raw value) or (row, source row)
        self.deletes: list = []

    def key_nodes(self, key_key: bytes, prefix: bytes, nodes: list) -> None:
        """Rows for the sealed ``nodes`` of the key (``prefix``: its rows' prefix);
        the key's rows that none of them wants are deleted."""
        raw = self.txn.get(key_key, db=self.rows_db)
        if raw is not None and self._known_rows(key_key, prefix, nodes,
                                                   int.from_bytes(raw, "big")):
            return
        existing: set[bytes] = set()
        cur = self.txn.cursor(db=self.nodes_db)
        if cur.set_range(prefix):
            for k in cur.iternext(keys=True, values=False):
                if not k.startswith(prefix):
                    break
                existing.add(k)
        self.stats["rows_read"] += len(existing)
        wanted = set()
        for node in nodes:
            nk = prefix + node.first.to_bytes(16, "big")
            wanted.add(nk)
            where = node.where
            if where == prefix:
                continue                  # durable in its own row already
            if where is None and node.blob is not None and nk in existing and \
                    not self.rewrite_resident:
                continue
            self._put(nk, node)
        self.deletes.extend(existing - wanted)
        self._count_rows(key_key, len(wanted))

    def _known_rows(self, key_key: bytes, prefix: bytes, nodes: list, known: int) -> bool:
        """The key had ``known`` rows: when as many of ``nodes`` are located in them,
        write rows for the others only and return True (see the class's doc)."""
        located = 0
        fresh = []
        for node in nodes:
            if node.where == prefix:
                located += 1
            else:
                fresh.append(node)
        if located != known:
            return False
        for node in fresh:
            self._put(prefix + node.first.to_bytes(16, "big"), node)
        self._count_rows(key_key, known + len(fresh))
        return True

    def _put(self, nk: bytes, node) -> None:
        """Row ``nk`` for ``node``: its blob, or a copy of the row it is located in."""
        blob = node.blob
        if blob is not None:
            self.puts.append((nk, _crc(blob), None))
            self.stats["bytes_written"] += len(blob) + 4
        else:
            self.puts.append((nk, None, node.where + node.first.to_bytes(16, "big")))
        self.stats["nodes_written"] += 1

    def _count_rows(self, key_key: bytes, rows: int) -> None:
        if rows:
            self.txn.put(key_key, rows.to_bytes(8, "big"), db=self.rows_db)
        else:
            self.txn.delete(key_key, db=self.rows_db)

    def finish(self) -> None:
        txn, db = self.txn, self.nodes_db
        # Only a row that is also written here is read ahead (a moved stream's
        # rows are otherwise copied one at a time, not all held at once).
        written = {nk for nk, _, _ in self.puts}
        ahead = {src: txn.get(src, db=db) for _, _, src in self.puts if src in written}
        for nk, raw, src in self.puts:
            if src is not None:
                raw = ahead[src] if src in ahead else txn.get(src, db=db)
                if raw is None:
                    raise SnapshotError(f"stream node row {src!r} to copy is missing")
                self.stats["bytes_written"] += len(raw)
            txn.put(nk, raw, db=db)
        sources = {src for _, _, src in self.puts if src is not None}
        deletes = set(self.deletes) - written
        self.stats["deferred"] = sorted(deletes & sources)
        for k in deletes - sources:
            txn.delete(k, db=db)
        self.stats["nodes_deleted"] += len(deletes - sources)


def _write_key(txn, keys_db, writes: _NodeWrites, keyspace, dbi: int, key: bytes,
               stats: dict) -> None:
    db = keyspace[dbi] if dbi < len(keyspace) else None
    value = db.data.get(key) if db is not None else None
    prefix = _node_prefix(dbi, key)
    key_key = _key_key(dbi, key)
    if value is None:
        txn.delete(key_key, db=keys_db)
        writes.key_nodes(key_key, prefix, [])
        return
    external: list = []
    doc = encode_value(value, external)
    record = _crc(msgpack.packb([db.expires.get(key), doc], use_bin_type=True))
    txn.put(key_key, record, db=keys_db)
    stats["bytes_written"] += len(record)
    writes.key_nodes(key_key, prefix, external)


# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------


def snapshot_info(path: str) -> dict | None:
    """The ``covers`` record of the snapshot at ``path`` (None if there is none)."""
    if not os.path.exists(os.path.join(path, DATA_FILE)):
        return None
    env = _open(path, readonly=True)
    try:
        with env.begin() as txn:
            meta = _named_db(env, txn, b"meta")
            fmt = None if meta is None else txn.get(b"format", db=meta)
            if fmt is None and not any(_rows(env, txn, name) for name in (b"keys", b"nodes")):
                # A first snapshot killed while writing, by versions that wrote it in
                # place: write_snapshot's open_db calls commit its empty databases
                # (some or all), its one write transaction nothing.  The AOF was not
                # retired (no snapshot covers any of it): it holds everything.
                return None
            if fmt != FORMAT:
                raise SnapshotError(f"{path}: unsupported snapshot format {fmt!r}")
            raw = txn.get(b"covers", db=meta)
            if raw is None:
                raise SnapshotError(f"{path}: snapshot has no 'covers' record")
            return msgpack.unpackb(_uncrc(raw, "the covers record", path))
    except lmdb.Error as e:
        raise SnapshotError(f"{path}: cannot read the snapshot: {e}") from None
    finally:
        env.close()


def _holds_snapshot(path: str) -> bool:
    """Whether ``path`` holds a snapshot; a damaged one counts as none here (the start
    loads it first and refuses, saying what is wrong: recovery.py)."""
    try:
        return snapshot_info(path) is not None
    except SnapshotError:
        return False


def _named_db(env, txn, name: bytes):
    """The environment's database ``name``, None if it has none."""
    try:
        return env.open_db(name, txn=txn, create=False)
    except lmdb.NotFoundError:
        return None


def _rows(env, txn, name: bytes) -> int:
    db = _named_db(env, txn, name)
    return 0 if db is None else txn.stat(db)["entries"]


def load_snapshot(path: str, keyspace, cold: bool = False) -> dict | None:
    """Load the snapshot at ``path`` into ``keyspace``; returns its covers record.

    Verifies every checksum before changing anything: a bad snapshot raises
    SnapshotError and leaves the keyspace empty as it was.  ``cold``: leave the
    sealed nodes of streams (but each stream's last) unread in the snapshot, located
    at their rows (the node cache fetches them, checking their CRC then).
    """
    info = snapshot_info(path)
    if info is None:
        return None
    env = _open(path, readonly=True)
    loaded: list[tuple[int, bytes, object, int | None]] = []
    t0 = time.monotonic()
    last = t0
    try:
        keys_db = env.open_db(b"keys", create=False)
        nodes_db = env.open_db(b"nodes", create=False)
        with env.begin() as txn:
            get = txn.get
            total = txn.stat(keys_db)["entries"] or 1
            for n, (k, raw) in enumerate(txn.cursor(db=keys_db), 1):
                dbi = struct.unpack(">I", k[:4])[0]
                key = bytes(k[4:])
                if dbi >= len(keyspace):
                    raise SnapshotError(f"{path}: key in database {dbi} but 'databases' is "
                                        f"{len(keyspace)}")
                what = f"the record of key {key!r} (db {dbi})"
                try:
                    expire, doc = msgpack.unpackb(_uncrc(bytes(raw), what, path), raw=True)
                    prefix = _node_prefix(dbi, key)

                    # Called once per sealed node (10,000 for a million entries):
                    # the error text is made once per key, not per node.
                    def fetch(first: int, _prefix=prefix, _key=key,
                              _what=f"a node of key {key!r}") -> bytes:
                        raw = get(_prefix + first.to_bytes(16, "big"), db=nodes_db)
                        if raw is None:
                            raise SnapshotError(f"{path}: node {first >> 64}-{first & (2**64 - 1)} of "
                                                f"key {_key!r} is missing")
                        return _uncrc(raw, _what, path)

                    value = decode_value(doc, fetch, prefix if cold else None)
                except (CodecError, ValueError, TypeError) as e:
                    raise SnapshotError(f"{path}: {what} is unreadable: {e}") from None
                loaded.append((dbi, key, value, expire))
                now = time.monotonic()
                if now - last >= 1.0:
                    last = now
                    log.log(log.NOTICE, f"Loading snapshot: {100.0 * n / total:.1f}% ({n} keys)")
    except lmdb.Error as e:
        raise SnapshotError(f"{path}: cannot read the snapshot: {e}") from None
    finally:
        env.close()
    for dbi, key, value, expire in loaded:
        keyspace[dbi].data[key] = value
        if expire is not None:
            keyspace[dbi].expires[key] = expire
    log.log(log.NOTICE, f"Snapshot loaded: {len(loaded)} keys in {time.monotonic() - t0:.3f} seconds "
                        f"(covers AOF segments up to seq {info.get('aof_seq')})")
    return info


# ---------------------------------------------------------------------------
# The snapshotter of a running server
# ---------------------------------------------------------------------------


class Snapshotter:
    """Tracks changed keys from the effect stream and runs SAVE/BGSAVE."""

    def __init__(self, core, path: str, aof=None) -> None:
        self.core = core
        self.path = path
        self.aof = aof
        # The effect sink that notes the changed keys (recovery.py registers it); the
        # first snapshot writes everything.
        self.changes = ChangedKeys(not _holds_snapshot(path))
        self.child_pid: int | None = None
        self._reason_fd: int | None = None       # where the child says why it failed
        self._pending = None
        self.last_ok = True
        self.last_error = ""         # why the last save failed ("" after a good one)
        self.last_try_time = 0       # when a background save was last tried (seconds)
        self.last_stats: dict = {}
        self.in_progress = False
        self.last_save_time = int(core.clock())
        core.last_save_time = self.last_save_time
        # Cold stream nodes are read back from this snapshot (engine/nodecache.py).
        self.store = LmdbNodeStore(path, MAP_SIZE)
        self.located = False         # stream nodes may point into the snapshot
        self.stale_rows: frozenset = frozenset()   # rows a snapshot copied and left (write_snapshot)
        self.cache_trigger = 4       # a snapshot once 1/4 of the cache budget is sealed, not durable

    def configure_cache(self) -> None:
        """Hand the engine the node store and ``stream-cache-size`` (start-up, CONFIG SET)."""
        budget = self.core.config["stream-cache-size"]
        if budget and not CACHE.bounded and not self.located:
            # Nodes loaded so far have no location: the next snapshot (which the
            # budget soon asks for) records every key's.
            self.full = True
        CACHE.configure(self.store, budget)

    # -- the changed keys (its ChangedKeys is the effect sink) -------------------------

    @property
    def dirty(self) -> set[tuple[int, bytes]]:
        """(db, key) of every key changed since the last snapshot."""
        return self.changes.dirty

    @dirty.setter
    def dirty(self, keys: set) -> None:
        self.changes.dirty = keys

    @property
    def full(self) -> bool:
        """The next snapshot writes every key (none yet, a FLUSHALL, ...)."""
        return self.changes.full

    @full.setter
    def full(self, value: bool) -> None:
        self.changes.full = value

    def __call__(self, batch) -> None:
        """The Snapshotter as a sink (tests register it, ``wants_commands=False``):
        its tracker's work."""
        self.changes(batch)

    # -- saving ---------------------------------------------------------------------

    def _begin(self):
        """Take what a snapshot writes (the AOF's point, the changed keys, the nodes to
        make durable); ``_succeeded`` or ``_failed`` settles it.  Raises (and takes
        nothing) when the AOF cannot give its point (AofRotationError: its new segment
        could not be started)."""
        covered = self.aof.snapshot_point() if self.aof is not None else None
        dirty = None if self.full else self.dirty
        self.located = self.located or CACHE.bounded
        state = (self.dirty, self.full, covered, self.core.dirty, self._node_rows(dirty),
                 CACHE.take_pending(), self.stale_rows)
        self.dirty = set()
        self.full = False
        return dirty, covered, state

    def _node_rows(self, dirty: set | None) -> list | None:
        """With a bounded node cache, the sealed nodes the snapshot is about to write
        into a row of their key (``dirty`` None: every key), as (node, its blob now,
        the key's row prefix): once the snapshot succeeded they may go cold."""
        if not CACHE.bounded:
            return None
        keyspace = self.core.keyspace
        if dirty is None:
            dirty = [(db.index, key) for db in keyspace.dbs for key in db.data]
        rows = []
        for dbi, key in dirty:
            value = keyspace[dbi].data.get(key) if dbi < len(keyspace) else None
            if type(value) is not Stream:
                continue
            prefix = _node_prefix(dbi, key)
            # From the tail back to the first node already durable in this key's
            # rows: before it all are (nodes are sealed and made durable in order;
            # only the tail reopens), so a long stream costs only its new nodes.
            for node in reversed(value.nodes):
                if node.where == prefix:
                    break
                if node.ids is None:
                    rows.append((node, node.blob, prefix))
        return rows

    def _succeeded(self, state, stats: dict) -> None:
        _, _, covered, dirty_before, rows, _, _ = state
        self.stale_rows = frozenset(stats.get("deferred", ()))
        if rows:
            # A node still sealed as it was (its blob the same object, or evicted
            # since, which only a located node can be) is what the snapshot wrote.
            for node, blob, prefix in rows:
                if node.ids is None and (node.blob is blob or node.where is not None):
                    CACHE.made_durable(node, prefix)
        # Rows the snapshot deleted were readable through the pinned transaction
        # until the nodes pointed elsewhere; from now on read the new snapshot.
        self.pin_store()
        self._settled(True)
        self.last_stats = stats
        self.core.dirty = max(self.core.dirty - dirty_before, 0)
        self.last_save_time = int(self.core.clock())
        self.core.last_save_time = self.last_save_time
        if self.aof is not None and covered is not None:
            self.aof.retire_through(covered)

    def _failed(self, state, reason: str) -> None:
        """Give back what ``_begin`` took (the next snapshot writes those keys: the
        segments it retires then hold nothing it did not write); the save failed."""
        dirty, full, _, _, _, pending, _ = state
        self.dirty |= dirty
        self.full = self.full or full
        CACHE.sealed_pending += pending
        self.pin_store()
        self._settled(False, reason)

    def _settled(self, ok: bool, reason: str = "") -> None:
        """Record how the last save ended, and refuse or accept writes accordingly."""
        self.last_ok = ok
        self.last_error = reason
        self.update_write_refusal()

    def update_write_refusal(self) -> None:
        """Writes get MISCONF while the last save failed, if ``save`` rules exist and
        ``stop-writes-on-bgsave-error`` is yes (Redis's writeCommandsDeniedByDiskError;
        also called when either directive changes).  Said once each way in the log."""
        cfg = self.core.config
        refuse = not self.last_ok and cfg["stop-writes-on-bgsave-error"] and bool(cfg["save"].split())
        refusal = MISCONF_SAVE if refuse else None
        if refusal == self.core.save_refusal:
            return
        self.core.save_refusal = refusal
        if refuse:
            log.log(log.WARNING, "Background saving failed: write commands are refused (MISCONF) until "
                                 "a save succeeds (stop-writes-on-bgsave-error yes)")
        else:
            log.log(log.WARNING, "Write commands are accepted again (no failed background save stops them)")

    def pin_store(self) -> None:
        """Keep a read transaction of the snapshot for cold nodes, if any may exist (a
        server whose cache was never bounded keeps no handle open, as before)."""
        if self.located:
            self.store.pin()
        else:
            self.store.close()

    def save(self) -> dict:
        """SAVE: write the snapshot in the foreground (blocks the loop)."""
        if self.child_pid is not None:
            raise RuntimeError("Background save already in progress")
        dirty, covered, state = self._begin()
        # This process writes the environment: its reader handle must be closed
        # meanwhile (two handles in one process break LMDB's locks).
        self.store.close()
        try:
            stats = write_snapshot(self.path, self.core.keyspace, dirty, covered, self.core.now_ms(),
                                   self.located, self.stale_rows)
        except Exception as e:
            self._failed(state, describe_failure(e))
            log.log(log.WARNING, f"Snapshot failed: {e}")
            raise
        self._succeeded(state, stats)
        log.log(log.NOTICE, f"DB saved on disk ({stats['bytes_written']} bytes written, "
                            f"{stats['keys']} keys)")
        return stats

    def bgsave(self) -> None:
        """BGSAVE: fork; the child writes the snapshot from its copy-on-write memory.

        Raises RuntimeError when a child runs already or the AOF cannot give its point
        yet (a write waits for the disk), and NotStarted when the fork failed: that
        save failed (logged as Redis does, what it took given back)."""
        if self.child_pid is not None:
            raise RuntimeError("Background save already in progress")
        if self.aof is not None and self.aof.rewrite_pid is not None:
            raise RuntimeError("Background append only file rewriting in progress")
        self.last_try_time = int(self.core.clock())
        try:
            dirty, covered, state = self._begin()
        except AofRotationError as e:   # (logged by the AOF, once while rotations fail)
            self._settled(False, str(e))
            raise
        except OSError as e:
            reason = f"rotating the AOF: {describe_failure(e)}"
            log.log(log.WARNING, f"Can't save in background: {reason}")
            self._settled(False, reason)
            raise NotStarted(f"Can't save in background: {reason}") from None
        now = self.core.now_ms()
        located, stale_rows = self.located, self.stale_rows

        def work() -> None:
            stats = write_snapshot(self.path, self.core.keyspace, dirty, covered, now, located,
                                   stale_rows)
            with open(os.path.join(self.path, "last-save.stats"), "wb") as f:
                f.write(msgpack.packb(stats))

        try:
            pid, self._reason_fd = fork_reporting_child(work, "snapshot")
        except OSError as e:
            reason = f"fork: {describe_failure(e)}"
            log.log(log.WARNING, f"Can't save in background: {reason}")
            self._failed(state, reason)
            raise NotStarted(f"Can't save in background: {reason}") from None
        self.child_pid = pid
        self._pending = state
        self.in_progress = True
        log.log(log.NOTICE, f"Background saving started by pid {pid}")

    def poll(self) -> None:
        """Cron: reap a finished child; start a BGSAVE when a ``save`` rule says so
        (after a failed save, not before BGSAVE_RETRY_DELAY seconds).  Never raises."""
        if self.child_pid is not None:
            code = reap(self.child_pid)
            if code is None:
                return
            self._reaped(code)
            return
        rules = self.core.config["save"].split()
        now = int(self.core.clock())
        for i in range(0, len(rules), 2):
            seconds, changes = int(rules[i]), int(rules[i + 1])
            if self._aof_busy():
                return        # the rule fires again once the AOF is ready
            if self.core.dirty >= changes and now - self.last_save_time >= seconds and \
                    self._may_retry(now):
                self._bgsave_from_cron(f"{changes} changes in {seconds} seconds. Saving...")
                return
        self._maybe_make_nodes_durable(now)

    def _reaped(self, code: int) -> None:
        """The child exited with ``code`` (``reap``): settle the save."""
        reason = read_failure_reason(self._reason_fd)
        self._reason_fd = None
        self.child_pid = None
        self.in_progress = False
        state, self._pending = self._pending, None
        if code == 0:
            stats = {}
            try:
                with open(os.path.join(self.path, "last-save.stats"), "rb") as f:
                    stats = msgpack.unpackb(f.read())
            except OSError:
                pass
            self._succeeded(state, stats)
            log.log(log.NOTICE, f"Background saving terminated with success "
                                f"({stats.get('bytes_written', '?')} bytes written)")
            return
        reason = reason or f"the child {describe_exit(code)}"
        self._failed(state, reason)
        # (Redis's words; the reason the child gave, too.)
        if code < 0:
            log.log(log.WARNING, f"Background saving terminated by signal {-code}")
        else:
            log.log(log.WARNING, f"Background saving error: {reason}")

    def _may_retry(self, now: int) -> bool:
        """An automatic save may start: the last one succeeded, or failed more than
        BGSAVE_RETRY_DELAY seconds ago (Redis's lastbgsave_try)."""
        return self.last_ok or now - self.last_try_time > BGSAVE_RETRY_DELAY

    def _bgsave_from_cron(self, why: str, level: int = log.NOTICE) -> None:
        """A save the server starts by itself: logged (at ``level``), and no failure
        leaves the cron (``bgsave`` logs and records a failed start; the next try waits)."""
        log.log(level, why)
        try:
            self.bgsave()
        except (NotStarted, AofRotationError):
            pass                # (logged where it failed; the next try waits)
        except Exception as e:  # noqa: BLE001 - e.g. the AOF's rotation failed; tried again later
            log.log(log.WARNING, f"Can't save in background: {describe_failure(e)}")

    def _aof_busy(self) -> bool:
        """Whether an automatic snapshot must wait for the AOF: one child at a time (a
        rewrite runs), or a frame that failed to write waits for the disk (the
        rotation a snapshot starts with refuses then: Aof.rotate), or the last rotation
        failed a moment ago (a full disk: Aof.rotation_backing_off)."""
        return self.aof is not None and (self.aof.rewrite_pid is not None or bool(self.aof.pending)
                                         or self.aof.rotation_backing_off())

    def _maybe_make_nodes_durable(self, now: int) -> None:
        """With a bounded node cache, snapshot once enough sealed bytes wait to become
        durable (and evictable), whatever the save rules (even ``save ""``)."""
        budget = CACHE.budget
        if not budget or self._aof_busy():
            return
        if not self._may_retry(now):
            return
        if self.full or CACHE.sealed_pending * self.cache_trigger > budget:
            self._bgsave_from_cron(f"{CACHE.sealed_pending} bytes of stream nodes not yet on "
                                   "disk (stream-cache-size). Saving...", log.VERBOSE)

    def wait(self, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while self.child_pid is not None and time.monotonic() < deadline:
            self.poll()
            time.sleep(0.01)
