"""The AOF's rewrite (compaction): a new base segment holding the current state,
written by a forked child from its copy-on-write memory while the server goes on.

The rewrite rotates first (rotation.py): the parent keeps appending to the fresh
segment, and once the child's base is in place (``write_base``: aside, fsync,
rename, fsync dir) the manifest becomes [new base, the segments after the
rotation] and the files the base replaced are deleted.  A crash at any point
leaves either the old manifest (all old files intact) or the new one.
"""

from __future__ import annotations

import os
import time

from ... import log
from ...files import fsync_dir, replacing
from ...protocol import encode_command
from ..child import (NotStarted, describe_exit, describe_failure, fork_reporting_child,
                     read_failure_reason, reap)
from .format import SEGMENT_MAGIC, encode_frame, segment_seq
from .manifest import AofDirectory, Manifest, ManifestNotDurable
from .rotation import AofRotationError, Rotation
from .writer import AofWriter

__all__ = ["Rewriter", "state_commands", "value_commands", "write_base"]

# Automatic rewrites after this many failures in a row wait between tries: 1
# minute, then twice as long each time, up to an hour (Redis's aofRewriteLimited).
REWRITE_FAILURES_BEFORE_DELAY = 3
REWRITE_DELAY_FIRST = 60
REWRITE_DELAY_MAX = 3600
# An automatic rewrite rotates first, and the rotation fdatasyncs the old segment on
# the loop: after a 100 MB write that fsync held every client about 150 ms.  So while
# more than this many bytes are not durable yet, it first has the aof-fsync thread sync
# them, and starts at a later tick; for at most PRESYNC_WAIT seconds, so that a write
# load that never lets the log be this close to durable does not hold the rewrite back.
PRESYNC_MAX_UNSYNCED = 4 << 20
PRESYNC_WAIT = 2.0


class Rewriter:
    """BGREWRITEAOF, its automatic trigger (auto-aof-rewrite-*) and the foreground
    rewrite, of the log ``writer`` appends to in ``directory``."""

    def __init__(self, core, directory: AofDirectory, writer: AofWriter, rotation: Rotation) -> None:
        self.core = core
        self.directory = directory
        self.writer = writer
        self.rotation = rotation
        self.rewrites = 0
        self.rewrite_base_size = 0    # the log's size after the last rewrite (or at start-up)
        self.rewrite_pid: int | None = None
        self._child_base: tuple[int, str] | None = None     # (covered seq, base name) the child writes
        self._child_reason_fd: int | None = None    # where the rewrite child says why it failed
        self.last_rewrite_ok = True
        # Failed rewrites in a row (INFO aof_rewrites_consecutive_failures), and the
        # wait they impose on automatic ones (_auto_rewrite_held).
        self.rewrite_failures = 0
        self._auto_rewrite_delay = 0
        self._auto_rewrite_at = 0.0
        self._presync_since: float | None = None   # when an automatic rewrite asked for it

    def rewrite(self) -> None:
        """Compact in the foreground: the state becomes a new base segment (blocks the loop)."""
        covered = self.rotation.rotate()
        name = self._base_name(covered)
        write_base(os.path.join(self.directory.dir, name), self.core.keyspace,
                   self.core.config["aof-use-rdb-preamble"])
        self._done(covered, name)

    def bgrewrite(self) -> None:
        """BGREWRITEAOF: rotate, fork; the child writes the base from its copy-on-write memory.

        The parent keeps appending to the fresh segment; when the child has
        succeeded, ``poll`` swaps the manifest to [new base, segments
        after the rotation] and deletes what the base replaced.  A crash at any
        point leaves either the old manifest (all old files intact) or the new one.

        Raises RuntimeError when a rewrite runs already or a write waits for the
        disk, and NotStarted (logged, counted as a failed rewrite) when the
        rotation or the fork failed: the old manifest stays in charge.
        """
        if self.rewrite_pid is not None:
            raise RuntimeError("Background append only file rewriting already in progress")
        try:
            covered = self.rotation.rotate()
        except OSError as e:
            raise self._not_started(f"rotating the AOF: {describe_failure(e)}") from None
        name = self._base_name(covered)
        path = os.path.join(self.directory.dir, name)
        snapshot_form = self.core.config["aof-use-rdb-preamble"]
        try:
            pid, self._child_reason_fd = fork_reporting_child(
                lambda: write_base(path, self.core.keyspace, snapshot_form), "AOF rewrite")
        except OSError as e:
            raise self._not_started(f"fork: {describe_failure(e)}") from None
        self.rewrite_pid = pid
        self._child_base = (covered, name)
        log.log(log.NOTICE, f"Background append only file rewriting started by pid {pid}")

    def _not_started(self, reason: str) -> NotStarted:
        """A rewrite that could not start is a failed one: logged (Redis's words), counted."""
        message = f"Can't rewrite append only file in background: {reason}"
        log.log(log.WARNING, message)
        self._failed()
        return NotStarted(message)

    def _failed(self) -> None:
        self.last_rewrite_ok = False
        self.rewrite_failures += 1

    def poll(self) -> None:
        """Cron: finish a background rewrite whose child has exited."""
        if self.rewrite_pid is None:
            return
        code = reap(self.rewrite_pid)
        if code is None:
            return
        reason = read_failure_reason(self._child_reason_fd)
        self._child_reason_fd = None
        self.rewrite_pid = None
        covered, name = self._child_base
        if code == 0:
            try:
                self._done(covered, name)
            except OSError:
                self._failed()              # (logged by replace_manifest)
            else:
                self.last_rewrite_ok = True
                self.rewrite_failures = 0
        else:
            self._failed()
            try:
                os.unlink(os.path.join(self.directory.dir, name + ".tmp"))
            except OSError:
                pass
            log.log(log.WARNING, f"Background AOF rewrite terminated with error: "
                                 f"{reason or 'the child ' + describe_exit(code)}")

    def _base_name(self, covered: int) -> str:
        return f"{self.directory.basename}.{covered}.base.aof"

    def _done(self, covered: int, base_name: str) -> None:
        d = self.directory
        old = [s for s in d.manifest.segments() if segment_seq(s) <= covered]
        try:
            d.replace_manifest(Manifest(base_name, [s for s in d.manifest.incrs if segment_seq(s) > covered],
                                        d.manifest.seq), f"naming the rewritten base {base_name}")
        except OSError as e:
            if not isinstance(e, ManifestNotDurable):       # (else the manifest on disk may name it)
                try:
                    os.unlink(os.path.join(d.dir, base_name))
                except OSError:
                    pass
            raise
        for name in old:
            if name != base_name:
                d.drop_segment_file(name)
            else:
                d.sizes.pop(name, None)
        self.writer.recount_sizes()
        self.rewrites += 1
        self.rewrite_base_size = self.writer.total_size
        log.log(log.NOTICE, f"AOF rewrite complete: base {base_name} ({self.writer.base_size} bytes)")


    def maybe_auto_rewrite(self, cfg) -> None:
        """auto-aof-rewrite-percentage / -min-size, as Redis: growth over the size after the
        last rewrite.  After failures in a row, waits between tries (``_auto_rewrite_held``).
        Never raises (a rewrite that cannot start is logged and counted)."""
        pct = cfg["auto-aof-rewrite-percentage"]
        if not pct or self.writer.total_size < cfg["auto-aof-rewrite-min-size"]:
            return
        base = max(self.rewrite_base_size, 1)
        if (self.writer.total_size - base) * 100 // base >= pct and self.rewrite_pid is None \
                and not self.writer.pending and not self._auto_rewrite_held():
            # (rotate() refuses while a write waits for the disk)
            if self.rotation.backing_off() or self._waits_for_presync():
                return
            log.log(log.NOTICE, f"Starting automatic rewriting of AOF on {pct}% growth")
            try:
                self.bgrewrite()
            except (AofRotationError, NotStarted):
                pass            # (logged by the rotation or the fork; tried again later)

    def _waits_for_presync(self) -> bool:
        """Whether an automatic rewrite waits for the aof-fsync thread to make the log
        nearly durable (PRESYNC_MAX_UNSYNCED), asking it to; only under 'everysec' ('always'
        leaves nothing unsynced, and 'no' has the thread sync nothing)."""
        writer = self.writer
        now = time.monotonic()
        if writer.policy != "everysec" or writer.unsynced() <= PRESYNC_MAX_UNSYNCED:
            self._presync_since = None
            return False
        if self._presync_since is None:
            self._presync_since = now
        elif now - self._presync_since >= PRESYNC_WAIT:
            self._presync_since = None
            return False
        writer.sync_soon()
        return True

    def _auto_rewrite_held(self) -> bool:
        """Whether automatic rewrites wait: after REWRITE_FAILURES_BEFORE_DELAY failures
        in a row, one try per delay (1 minute, doubling up to an hour), each delay said
        once in the log (Redis's aofRewriteLimited; BGREWRITEAOF is never held)."""
        if self.rewrite_failures < REWRITE_FAILURES_BEFORE_DELAY:
            self._auto_rewrite_delay, self._auto_rewrite_at = 0, 0.0
            return False
        now = time.monotonic()
        if self._auto_rewrite_at:
            if now < self._auto_rewrite_at:
                return True
            self._auto_rewrite_at = 0.0         # the delay is over: one more try
            return False
        self._auto_rewrite_delay = min(self._auto_rewrite_delay * 2 or REWRITE_DELAY_FIRST,
                                       REWRITE_DELAY_MAX)
        self._auto_rewrite_at = now + self._auto_rewrite_delay
        log.log(log.WARNING, f"Background AOF rewrite has repeatedly failed ({self.rewrite_failures} "
                             f"times in a row) and triggered the limit, will retry in "
                             f"{self._auto_rewrite_delay // 60} minutes")
        return True

    def remove_stale_files(self) -> None:
        """Start-up (of the server, which alone appends): a rewrite whose server was
        killed (its child dies with it) left its base's temp file.  Nothing names
        one (a rewrite's base is renamed into place before the manifest names it):
        remove those, never a file the manifest names."""
        named = set(self.directory.manifest.segments())
        prefix, suffix = self.directory.basename + ".", ".base.aof.tmp"
        for name in os.listdir(self.directory.dir):
            if name.startswith(prefix) and name.endswith(suffix) and name not in named:
                try:
                    os.unlink(os.path.join(self.directory.dir, name))
                except OSError as e:
                    log.log(log.WARNING, f"Can't remove the temp file {name} of an interrupted "
                                         f"AOF rewrite: {describe_failure(e)}")
                    continue
                log.log(log.NOTICE, f"Removed {name}, left by an interrupted AOF rewrite")


def state_commands(keyspace, snapshot_form: bool = True):
    """The whole state as RESP commands, in chunks: SELECT, then per key either

    * ``snapshot_form`` (``aof-use-rdb-preamble yes``, and a replica's full sync):
      RESTORE ... REPLACE [ABSTTL] of the snapshot codec's payload, exact, consumer
      groups and IDMP state included; a big stream comes as several RESTOREs of
      about a MiB each (``codec.dump_pieces``), so that a reader can apply one
      while the next is made;
    * or the plain commands that rebuild it (``value_commands``).
    """
    from ..codec import dump_pieces
    for db in keyspace.dbs:
        if not db.data:
            continue
        yield encode_command([b"SELECT", b"%d" % db.index])
        for key, value in db.data.items():
            when = db.expires.get(key)
            if not snapshot_form:
                for argv in value_commands(key, value, when):
                    yield encode_command(argv)
                continue
            ttl, opts = (b"%d" % when, [b"REPLACE", b"ABSTTL"]) if when is not None else (b"0", [b"REPLACE"])
            for payload in dump_pieces(value):
                yield encode_command([b"RESTORE", key, ttl, payload, *opts])
                ttl, opts = b"0", []       # a further piece only appends to the key


def value_commands(key: bytes, value, expire_at_ms: int | None):
    """The commands a client could send to build ``value`` at ``key``, as Redis's
    command-form AOF rewrite (rewriteStreamObject) writes them: XADD of each live
    entry with its id (an empty stream: an entry trimmed away at once), XSETID with
    entries-added and max-deleted-entry-id, each group with its entries-read, its
    consumers, and its PEL as XCLAIM ... TIME RETRYCOUNT FORCE JUSTID; then the IDMP
    settings and the iids whose entries still exist.

    Like Redis's, this form cannot carry what no command sets: PEL entries whose
    stream entry was deleted (XCLAIM drops them), iids of removed entries, the
    iids-added/duplicates counters, consumers' seen/active times.
    """
    from ...engine.ids import format_id
    if type(value) is bytes:
        yield [b"SET", key, value]
    else:
        s = value
        if s.length:
            for sid, fv in s:
                yield [b"XADD", key, format_id(sid), *fv]
        else:
            yield [b"XADD", key, b"MAXLEN", b"0", b"0-1", b"x", b"y"]
        yield [b"XSETID", key, format_id(s.last_id), b"ENTRIESADDED", b"%d" % s.entries_added,
               b"MAXDELETEDID", format_id(s.max_deleted_id)]
        for name, g in (s.groups or {}).items():
            yield [b"XGROUP", b"CREATE", key, name, format_id(g.last_id),
                   b"ENTRIESREAD", b"%d" % g.entries_read]
            for consumer in g.consumers:
                yield [b"XGROUP", b"CREATECONSUMER", key, name, consumer]
            for sid, pe in g.pel.items():
                if pe.consumer is not None:
                    yield [b"XCLAIM", key, name, pe.consumer.name, b"0", format_id(sid),
                           b"TIME", b"%d" % pe.delivery_time,
                           b"RETRYCOUNT", b"%d" % pe.delivery_count, b"FORCE", b"JUSTID"]
            # NACKed entries (no owner) in their release order: XNACK FORCE makes each
            # an unowned entry again, last in that order.
            for sid in g.nacked:
                yield [b"XNACK", key, name, b"FAIL", b"IDS", b"1", format_id(sid),
                       b"RETRYCOUNT", b"%d" % g.pel[sid].delivery_count, b"FORCE"]
            yield from _dead_letter_commands(key, g)
        st = s.idmp
        if st is not None:
            settings = []
            if st.duration is not None:
                settings += [b"IDMP-DURATION", b"%d" % st.duration]
            if st.maxsize is not None:
                settings += [b"IDMP-MAXSIZE", b"%d" % st.maxsize]
            if settings:
                yield [b"XCFGSET", key, *settings]
            for pid, iid, sid, _ in st.items():
                if s.get(sid) is not None:
                    yield [b"XIDMPRECORD", key, pid, iid, format_id(sid)]
        if s.retention is not None and s.retention.has_settings():
            yield [b"STREAMDB.RETENTION", b"SET", key, *s.retention.arguments()]
    if expire_at_ms is not None:
        yield [b"PEXPIREAT", key, b"%d" % expire_at_ms]


def _dead_letter_commands(key: bytes, g):
    """STREAMDB.GROUP SET of the group's dead-letter policy and counter, if it has
    either.  (Written after the PEL: replayed effects never dead-letter, and a
    dead-letter key of another type is refused only to clients.)"""
    policy = g.dead_letter
    if policy is not None:
        yield [b"STREAMDB.GROUP", b"SET", key, g.name, b"MAXDELIVERIES",
               b"%d" % policy.max_deliveries, b"DEADLETTER", policy.key,
               b"DEADLETTERED", b"%d" % g.dead_lettered]
    elif g.dead_lettered:
        yield [b"STREAMDB.GROUP", b"SET", key, g.name, b"DEADLETTERED", b"%d" % g.dead_lettered]


def write_base(path: str, keyspace, snapshot_form: bool = True) -> None:
    """Write a base segment holding the whole state (aside, fsync, rename, fsync dir);
    ``snapshot_form`` as in ``state_commands``."""
    with replacing(path) as f:
        f.write(SEGMENT_MAGIC)
        body: list[bytes] = []
        size = 0
        for cmd in state_commands(keyspace, snapshot_form):
            body.append(cmd)
            size += len(cmd)
            if size > 1 << 20:
                f.write(encode_frame(b"".join(body)))
                body, size = [], 0
        if body:
            f.write(encode_frame(b"".join(body)))
    fsync_dir(os.path.dirname(path) or ".")
