"""The append-only file: segments, manifest, group commit, fsync policies, loading.

Layout under ``<dir>/<appenddirname>/``::

    appendonly.aof.manifest          which segments make up the log, in order
    appendonly.aof.<seq>.base.aof    optional: the state at the start (a rewrite)
    appendonly.aof.<seq>.incr.aof    effects appended since

A segment is a version header line followed by *frames*.  A frame is all the
effects of one event-loop turn (the group commit)::

    #SDBAOF 1\\r\\n
    #F <body length> <crc32 hex>\\r\\n<body: RESP commands>  ...
    \\0\\0\\0 ...                             optional: zeros to the end of the file

The segment being written is kept physically longer than its logical end (its
header and frames) under ``appendfsync always``: the bytes after the last frame
are zeros written and fdatasync'ed ahead of time (``prealloc.py``), so that a
frame's fdatasync does not also have to commit a new file size.  Frames are
written with ``os.pwrite`` at the logical end (``Aof.size``), which is what
every size (INFO, auto-rewrite, backups, replication positions) means.  A
reader takes a zero byte where a frame header would start, with only zeros
after it, as the clean end; torn bytes followed by only zeros are a torn tail,
exactly as torn bytes at the end of the file are.  Nothing valid ends in a zero
byte (a header or a frame ends with ``\\r\\n``), so the zeros are found
from the end of the file (``content_end``).

Each frame is written with one write().  Under ``appendfsync always`` the loop
fdatasync()s it at once, before any reply of the turn leaves the server, as
Redis does in beforeSleep: one fdatasync covers every client's writes of the
turn, and the requests that arrive while it runs make the next turn's frame.
(A child process that fsynced while the loop went on was measured slower: see
docs/ARCHITECTURE.md.)  Because a frame is the unit of both writing and
checking:

* a torn last frame (short, or a bad checksum with nothing after it) is a torn
  tail: cut off on load when ``aof-load-truncated yes`` (logged with the
  offset), a start-up error otherwise.  MULTI/EXEC never straddles frames, so a
  torn transaction is rolled back whole;
* a bad frame followed by more data is corruption in the middle: a clear error
  naming the file and offset, and nothing on disk is changed;
* if a write or fsync fails, the frame stays in memory and is retried, the file
  is cut back to its last good frame, and write commands are refused (MISCONF)
  until the disk works again.  The replies of the clients whose writes the frame
  holds wait for it (``holds_replies_of``): until it is written, under 'always'
  until it is fsynced, so that no acknowledged write is only in memory (Redis
  acknowledges a write an 'everysec' AOF failed to write, and retries it).  Every
  other reply goes out.

Lifecycle (the one state machine of this module):
``load()`` (start-up: replay every segment through the core's replay client)
-> ``open_for_append()`` -> for every turn ``append_batch()`` ... ``flush()``
-> ``rotate()`` (a snapshot, rewrite or backup: a new incr segment, which the
manifest on disk names before any frame goes to it) -> ``rewrite()``
(compaction: a new base segment holding the current state) -> ``close()``
(shutdown: flush and fsync).
"""

from __future__ import annotations

import errno
import os
import re
import threading
import time
import zlib

from .. import log
from ..dispatch.effects import EffectBatch
from ..protocol import ProtocolError, RequestParser, encode_command
from .files import fsync_dir, replace_file
from .child import (NotStarted, describe_exit, describe_failure, fork_reporting_child,
                    read_failure_reason, reap)
from .prealloc import Preallocator

__all__ = ["Aof", "AofCorruption", "AofError", "AofRotationError", "Manifest", "frame_size",
           "read_segment", "FRAME_HEADER_MAX", "state_commands", "write_base",
           "content_end", "segment_logical_size", "copy_segment", "DEFAULT_PREALLOCATE"]

SEGMENT_MAGIC = b"#SDBAOF 1\r\n"
MANIFEST_MAGIC = "#SDBMANIFEST 1"
# ``<appendfilename>.<seq>.<base|incr>.aof``: a segment's file name.
SEGMENT_NAME = re.compile(r"[^/]+\.(\d+)\.(base|incr)\.aof")
FRAME_HEADER_MAX = 64
DEFAULT_PREALLOCATE = 16 << 20      # aof-preallocate's default
# Automatic rewrites after this many failures in a row wait between tries: 1
# minute, then twice as long each time, up to an hour (Redis's aofRewriteLimited).
REWRITE_FAILURES_BEFORE_DELAY = 3
REWRITE_DELAY_FIRST = 60
REWRITE_DELAY_MAX = 3600
_ZERO_SCAN = 1 << 20                # content_end looks at the tail this much at a time


class AofError(Exception):
    """The AOF cannot be loaded as it is; the message names the file and offset."""


class AofUnwritten(RuntimeError):
    """A rotation refused: frames that failed to write are still waiting for the disk."""


class AofRotationError(RuntimeError):
    """A new segment could not be started (the disk is full, ...): nothing changed,
    the AOF goes on in its current segment, and the caller (BGSAVE, BGREWRITEAOF, a
    backup) fails with this message."""


class AofCorruption(AofError):
    """A bad frame with more data after it.  ``scan`` holds the good frames before ``offset``."""

    def __init__(self, message: str, scan: "SegmentScan", offset: int) -> None:
        super().__init__(message)
        self.scan = scan
        self.offset = offset


def segment_seq(name: str) -> int:
    """The sequence number in ``<base>.<seq>.<base|incr>.aof``."""
    return int(name.rsplit(".", 3)[-3])


def encode_frame(body: bytes) -> bytes:
    return b"#F %d %08x\r\n" % (len(body), zlib.crc32(body)) + body


def frame_size(body: bytes) -> int:
    """Bytes the frame holding ``body`` takes in its segment (header included)."""
    return len(body) + len(b"#F %d %08x\r\n" % (len(body), 0))     # the checksum is 8 hex digits


# ---------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------


class SegmentScan:
    """Result of reading one segment: valid frames and where (if anywhere) it went bad."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []      # frame bodies, in order
        self.valid_end = 0                 # offset just past the last good frame
        self.torn_at: int | None = None    # a torn tail starts here
        self.torn_reason = ""
        self.end = 0                       # where the zeros that end the file (if any) begin
        self.size = 0                      # the file's size, zeros included


def content_end(data: bytes) -> int:
    """Where the run of zero bytes that ends ``data`` begins (``len(data)`` when it
    ends in another byte): the end of what was written into a preallocated segment.

    A header and every frame end with ``\\r\\n``, so nothing valid is taken for
    zeros; counted a MiB at a time from the end (about 0.3 ms a MiB of zeros)."""
    end = len(data)
    if not end or data[end - 1]:
        return end
    while end:
        start = max(0, end - _ZERO_SCAN)
        if data.count(0, start, end) != end - start:
            return start + len(data[start:end].rstrip(b"\0"))
        end = start
    return 0


def segment_logical_size(path: str) -> int:
    """The logical size of the segment file at ``path``: its bytes without the zeros
    that end it (a preallocated segment's room).  Reads only that tail, from the end."""
    with open(path, "rb") as f:
        end = os.fstat(f.fileno()).st_size
        step = 4096                             # (most files end in a frame: one small read)
        while end:
            start = max(0, end - step)
            block = os.pread(f.fileno(), end - start, start)
            if len(block) != end - start:       # shrank meanwhile: start again from its end
                end = os.fstat(f.fileno()).st_size
                continue
            if block.count(0) != len(block):
                return start + len(block.rstrip(b"\0"))
            end = start
            step = min(step * 16, _ZERO_SCAN)
    return 0


def copy_segment(src: str, dest: str) -> int:
    """Copy the logical part of the segment ``src`` to ``dest`` (fsynced, none of its
    preallocated zeros); returns the bytes copied."""
    size = segment_logical_size(src)
    with open(src, "rb") as f, open(dest, "wb") as out:
        left = size
        while left:
            chunk = f.read(min(left, 1 << 20))
            if not chunk:
                break
            out.write(chunk)
            left -= len(chunk)
        out.flush()
        os.fsync(out.fileno())
    return size - left


def _missing_header(data: bytes, content: int) -> str:
    """What a segment without its header holds instead (``content``: see content_end)."""
    if not data:
        return "no segment header (the file is empty)"
    if not content:
        return f"no segment header (the file's {len(data)} bytes are all zeros)"
    return f"no segment header (the file starts with zeros or a partial header; {len(data)} bytes)"


def read_segment(data: bytes, path: str = "") -> SegmentScan:
    """Split a segment's bytes into frames.  Raises AofError on corruption in the middle.

    The zeros that may end the file (a preallocated segment) are not part of it:
    the frames are read up to where they begin (``content_end``), so a zero byte
    where a frame header would start with only zeros after it is the clean end, a
    frame cut short by them is a torn tail as one cut by the end of the file, and a
    bad frame with any non-zero byte after it is corruption in the middle.

    A file without the header (empty, zeros, a part of it) is damage at offset 0
    (AofCorruption): no server leaves one that a manifest names."""
    scan = SegmentScan()
    n = scan.end = content_end(data)
    scan.size = len(data)
    if not data.startswith(SEGMENT_MAGIC):
        if SEGMENT_MAGIC.startswith(data[:n]) or data[:1] == b"\0":
            raise AofCorruption(f"{path}: {_missing_header(data, n)}: a segment's header is fsynced "
                                f"before any manifest names it, so this is damage, not a torn write "
                                f"(the server will not start on it; restore the AOF from a backup, or "
                                f"'streamdb-check-aof --fix {os.path.dirname(path) or '.'}' cuts the log "
                                f"there, keeping only this segment's header, after saying what that "
                                f"loses and asking)", scan, 0)
        raise AofError(f"{path}: bad segment header at offset 0 (not a StreamDB AOF segment "
                       f"or unsupported version)")
    pos = len(SEGMENT_MAGIC)
    scan.valid_end = pos
    while pos < n:
        eol = data.find(b"\r\n", pos, min(pos + FRAME_HEADER_MAX, n))
        bad = None
        if eol < 0:
            if n - pos < FRAME_HEADER_MAX and data.find(b"\r\n", pos, n) < 0:
                scan.torn_at, scan.torn_reason = pos, "truncated frame header"
                return scan
            bad = "unreadable frame header"
        else:
            parts = data[pos:eol].split(b" ")
            if len(parts) != 3 or parts[0] != b"#F" or not parts[1].isdigit():
                bad = "unreadable frame header"
            else:
                length = int(parts[1])
                start = eol + 2
                end = start + length
                if end > n:
                    scan.torn_at, scan.torn_reason = pos, "truncated frame"
                    return scan
                body = data[start:end]
                try:
                    crc = int(parts[2], 16)
                except ValueError:
                    crc = -1
                if zlib.crc32(body) != crc:
                    if end == n:    # the last frame: a partially persisted write
                        scan.torn_at, scan.torn_reason = pos, "checksum mismatch in the last frame"
                        return scan
                    bad = "checksum mismatch"
                else:
                    scan.frames.append(body)
                    pos = end
                    scan.valid_end = pos
                    continue
        raise AofCorruption(f"{path}: {bad} at offset {pos} of {len(data)} (corruption in the middle of "
                            f"the file: the server will not start on it; "
                            f"'streamdb-check-aof --fix {os.path.dirname(path) or '.'}' cuts the log "
                            f"at the last valid frame, after saying what that loses and asking)",
                            scan, pos)
    return scan


# split_commands' end of a body: an empty request, skipped between commands, and
# an error (or part of a bulk) inside an unfinished one.
_END_MARK = b"*0\r\n"


def split_commands(body: bytes) -> list[list[bytes]]:
    """The commands of a frame body.

    A checksum proves nothing about a hostile file, so the body is parsed by the
    request parser clients' bytes go through (compiled: about 0.15 us a command
    against hiredis's 0.5, a third of replaying an XADD): it yields only lists of
    bytes, allocates only what arrived whatever a length declares, and the frame
    must end on a command boundary.
    """
    p = RequestParser(max_bulk_len=1 << 62)
    p.feed(body)
    p.feed(_END_MARK)
    out = []
    try:
        while (argv := p.next_command()) is not None:
            out.append(argv)
    except ProtocolError as e:
        raise AofError(f"bad command inside a checksummed frame: {e}") from None
    if p.buffered():
        raise AofError("frame ends in the middle of a command")
    return out


# Replay yields to its caller (which lets clients in) after a frame once this many
# commands ran since the last time.
_LOAD_STEP = 2000

# Seconds an automatic rotation (auto-aof-rewrite) waits after a failed one, as Redis
# waits before retrying a failed background save.
_ROTATION_RETRY_DELAY = 5


# ---------------------------------------------------------------------------
# Manifest
# ---------------------------------------------------------------------------


def manifest_way_out(dirpath: str) -> str:
    """What an operator runs when the manifest of the AOF directory ``dirpath`` is missing
    or damaged (the end of the start-up error, and of streamdb-check-aof's report)."""
    return (f"restore it from a backup (docs/OPERATIONS.md, \"Repair a corrupt AOF\"), or run "
            f"'streamdb-check-aof --fix {dirpath}' on the stopped server's files to write one "
            f"naming the segments found there (it lists them and asks first)")


class ManifestNotDurable(OSError):
    """Manifest.save renamed the new manifest into place but the directory's fsync
    failed: it is what readers see now, yet a power cut may bring back the old one."""


class Manifest:
    """The ordered list of segments.  Replaced atomically: temp file, fsync, rename, fsync dir."""

    def __init__(self, base: str | None = None, incrs: list[str] | None = None, seq: int = 0) -> None:
        self.base = base
        self.incrs = incrs or []
        self.seq = seq

    def segments(self) -> list[str]:
        return ([self.base] if self.base else []) + self.incrs

    def render(self) -> str:
        lines = [MANIFEST_MAGIC, f"seq {self.seq}"]
        if self.base:
            lines.append(f"file {self.base} type b")
        for name in self.incrs:
            lines.append(f"file {name} type i")
        body = "\n".join(lines) + "\n"
        return body + f"#C {zlib.crc32(body.encode()):08x}\n"

    @classmethod
    def read(cls, path: str) -> "Manifest":
        """The manifest file at ``path``.  Raises AofError, naming the file and the way
        out, for anything but a readable, checksummed manifest (binary data, an empty
        file, a bad line): never another exception."""
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError as e:
            raise AofError(f"{path}: cannot read the AOF manifest: {e.strerror or e}") from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise cls.damaged(path, "not a StreamDB AOF manifest (binary data)") from None
        return cls.parse(text, path)

    @staticmethod
    def damaged(path: str, what: str) -> AofError:
        """The error for the manifest at ``path`` that cannot be used, and why (``what``)."""
        return AofError(f"{path}: {what}. The manifest says which segments make up the log "
                        f"and in what order; the server will not start without it: "
                        f"{manifest_way_out(os.path.dirname(path) or '.')}")

    @classmethod
    def parse(cls, text: str, path: str) -> "Manifest":
        """Raises AofError (see ``damaged``) for anything but a valid manifest."""
        if not text:
            raise cls.damaged(path, "the manifest file is empty")
        lines = text.split("\n")
        if lines[0] != MANIFEST_MAGIC:
            raise cls.damaged(path, "not a StreamDB AOF manifest (or an unsupported version)")
        try:
            crc_line = next(i for i, l in enumerate(lines) if l.startswith("#C "))
        except StopIteration:
            raise cls.damaged(path, "the manifest has no checksum line") from None
        body = "\n".join(lines[:crc_line]) + "\n"
        if f"{zlib.crc32(body.encode()):08x}" != lines[crc_line][3:].strip():
            raise cls.damaged(path, "manifest checksum mismatch")
        m = cls()
        for line in lines[1:crc_line]:
            parts = line.split()
            if parts[:1] == ["seq"] and len(parts) == 2 and parts[1].isdigit():
                m.seq = int(parts[1])
            elif parts[:1] == ["file"] and len(parts) == 4 and parts[3] in ("b", "i"):
                if "/" in parts[1] or parts[1].startswith(".") or not SEGMENT_NAME.fullmatch(parts[1]):
                    raise cls.damaged(path, f"bad segment name {parts[1]!r}")
                if parts[3] == "b":
                    m.base = parts[1]
                else:
                    m.incrs.append(parts[1])
            else:
                raise cls.damaged(path, f"unreadable manifest line {line!r}")
        return m

    def save(self, dirpath: str, name: str) -> None:
        """Make this the manifest ``name`` in ``dirpath``: written aside, fsynced, renamed
        into place, the directory fsynced.

        Raises OSError when a step fails, the file aside removed: the manifest in place
        is the old one then, except for ManifestNotDurable (only the last fsync failed)."""
        replace_file(os.path.join(dirpath, name), self.render().encode("utf-8"))
        try:
            fsync_dir(dirpath)
        except OSError as e:
            raise ManifestNotDurable(e.errno, e.strerror) from None


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view = view[n:]
        offset += n


# ---------------------------------------------------------------------------
# The AOF of a running server
# ---------------------------------------------------------------------------


class Aof:
    def __init__(self, core, dirpath: str, basename: str = "appendonly.aof",
                 fsync: str = "everysec", load_truncated: bool = True,
                 preallocate: int = DEFAULT_PREALLOCATE) -> None:
        self.core = core
        self.dir = dirpath
        self.basename = basename
        self.manifest_name = basename + ".manifest"
        self.policy = fsync
        self.load_truncated = load_truncated
        self.manifest = Manifest()
        self.fd: int | None = None
        self.cur_db = 0               # the db the segment's replayer will be in
        self.buf: list[bytes] = []    # this turn's effects
        self.pending: bytes = b""     # a frame that failed to write, retried
        self.size = 0                 # current segment's logical size (header and frames)
        self.base_size = 0
        # aof-preallocate: the most zeros kept written ahead of the current
        # segment's logical end under 'always' (0: none); the Preallocator of the
        # current segment, if it has one; the logical sizes of the segments
        # loaded or sealed (a file may be longer: zeros after a crash).
        self.preallocate = preallocate
        self.prealloc: Preallocator | None = None
        self._sizes: dict[str, int] = {}
        self.total_size = 0
        self.last_write_ok = True
        self.last_error = ""
        self.inject_failures = 0      # DEBUG AOF-INJECT-ERROR: fail the next N writes
        self.inject_fsync_failures = 0    # DEBUG AOF-INJECT-FSYNC-ERROR: fail the next N 'always' fsyncs
        self.fsync_log: int | None = None     # fd of fsync.log when aof-record-fsync is on
        self._dirty_since_fsync = False
        self._stop = False
        self._fsync_thread: threading.Thread | None = None
        # Log positions count bytes written since open_for_append, across
        # segments: a client's write is durable once ``durable_pos`` reaches the
        # end of the frame that holds it (WAITAOF, a replica's FACK).
        self.written_pos = 0
        self.durable_pos = 0
        self._sync_lock = threading.Lock()      # held during an fsync; rotation takes it
        self._wake = threading.Condition()      # wakes the everysec thread to stop
        # Bumped when a failed 'always' fsync makes the loop rewrite a frame: the
        # everysec thread's fsyncs started before that no longer mean anything.
        self._sync_epoch = 0
        # Called with each new durable position: WAITAOF's waiters, a
        # replica's FACK (replication/).
        self.durable_listeners: list = []
        self.loop = None
        self.loading = False
        self.loaded_perc = 0.0
        self.loaded_bytes = 0
        self.loading_total_bytes = 0
        self.loading_start = 0.0
        self.rewrites = 0
        self.rewrite_base_size = 0
        self.rewrite_pid: int | None = None
        self._rewrite_pending: tuple[int, str] | None = None
        self._rewrite_reason_fd: int | None = None    # where the rewrite child says why it failed
        self.last_rewrite_ok = True
        self.rotation_error = ""      # why the last rotation failed ("" once one succeeds)
        self.rotation_failed_at = 0.0     # (monotonic) automatic rewrites wait a while after it
        # Failed rewrites in a row (INFO aof_rewrites_consecutive_failures), and the
        # wait they impose on automatic ones (_auto_rewrite_held).
        self.rewrite_failures = 0
        self._auto_rewrite_delay = 0
        self._auto_rewrite_at = 0.0
        # (name, path) -> None: called before a retired segment's file is deleted (BACKUP's pins)
        self.keep_retired = None

    # -- loading ----------------------------------------------------------------

    def manifest_path(self) -> str:
        return os.path.join(self.dir, self.manifest_name)

    def load(self, covered_seq: int | None = None) -> int:
        """Replay every segment into the core in one go; returns the number of commands."""
        applied = 0
        for applied in self.load_steps(covered_seq):
            pass
        return applied

    def load_steps(self, covered_seq: int | None = None):
        """Replay every segment into the core, yielding the commands applied so far now and then.

        The server drives this from the event loop and serves INFO (and answers
        everything else with LOADING) between steps.

        Segments with a sequence number <= ``covered_seq`` are already in the
        snapshot that was loaded first, and are skipped.

        Refuses (AofError) on anything but a clean log or a torn tail allowed by
        ``aof-load-truncated``; nothing on disk is changed unless a torn tail is cut.
        """
        if not os.path.exists(self.manifest_path()):
            self._refuse_segments_without_manifest()
            return
        self.manifest = Manifest.read(self.manifest_path())
        segments = [s for s in self.manifest.segments()
                    if covered_seq is None or segment_seq(s) > covered_seq]
        paths = [os.path.join(self.dir, s) for s in segments]
        for p in paths:
            if not os.path.exists(p):
                raise AofError(f"{self.manifest_path()}: names segment {os.path.basename(p)} "
                               f"which does not exist")
        total = sum(os.path.getsize(p) for p in paths) or 1
        self.loading_total_bytes = total
        self.loading_start = time.time()
        done_bytes = 0
        applied = 0
        next_step = _LOAD_STEP
        client = self.core.replay_client("aof")
        self.loading = True
        t0 = time.monotonic()
        last_log = t0
        scans = []
        # First check every segment, so that a bad file changes nothing in memory or on disk.
        for i, p in enumerate(paths):
            with open(p, "rb") as f:
                data = f.read()
            scan = read_segment(data, p)
            if scan.torn_at is not None:
                if i != len(paths) - 1:
                    raise AofError(f"{p}: {scan.torn_reason} at offset {scan.torn_at} in a segment "
                                   f"that is not the last one (a hole in the log: "
                                   f"'streamdb-check-aof --fix {self.dir}' cuts the log there, "
                                   f"after saying what that loses and asking)")
                if not self.load_truncated:
                    raise AofError(f"{p}: {scan.torn_reason} at offset {scan.torn_at} "
                                   f"(aof-load-truncated is no; run the AOF checker with --fix)")
            scans.append((p, scan, len(data)))
        # (What the progress counts: the frames, not the zeros a segment may end with.)
        self.loading_total_bytes = total = sum(scan.end for _, scan, _ in scans) or 1
        for p, scan, size in scans:
            client.db = 0          # every segment is written starting from db 0
            if p.endswith(".base.aof"):
                for db in self.core.keyspace.dbs:   # a base segment is the whole state
                    db.clear()
            offset = len(SEGMENT_MAGIC)
            for body in scan.frames:
                commands = split_commands(body)
                failed = self.core.replay(client, commands)
                if failed is not None:
                    # Frames are checksummed, so this is not disk corruption: the
                    # log holds an effect this version cannot apply.  Refuse to
                    # start rather than come up with a state that differs from it.
                    index, error = failed
                    self.core.remove_client(client)
                    self.loading = False
                    raise AofError(f"{p}: the frame at offset {offset} holds a command that "
                                   f"fails to apply ({commands[index][0].decode('latin-1')}: "
                                   f"{error.message})")
                applied += len(commands)
                if applied >= next_step:
                    next_step = applied + _LOAD_STEP
                    self.loaded_bytes = done_bytes
                    yield applied
                offset += frame_size(body)
                done_bytes += len(body)
                self.loaded_perc = 100.0 * done_bytes / total
                now = time.monotonic()
                if now - last_log >= 1.0:
                    last_log = now
                    self.loaded_perc = 100.0 * done_bytes / total
                    log.log(log.NOTICE, f"Loading AOF: {self.loaded_perc:.1f}% "
                                        f"({applied} commands, {applied / max(now - t0, 1e-9):.0f}/s)")
            if scan.torn_at is not None:
                zeros = (f" and the {size - scan.end} bytes of preallocated zeros after it"
                         if size > scan.end else "")
                log.log(log.WARNING, f"!!! Warning: torn tail in {p} ({scan.torn_reason}) at offset "
                                     f"{scan.torn_at} of {scan.end}: cutting {scan.end - scan.torn_at} "
                                     f"bytes{zeros} (aof-load-truncated yes)")
                # Cut to the last whole frame, zeros included: what is appended next
                # goes there, and the room ahead is written afresh.
                with open(p, "r+b") as f:
                    f.truncate(scan.valid_end)
                    f.flush()
                    os.fsync(f.fileno())
            self._sizes[os.path.basename(p)] = scan.valid_end
        self.cur_db = client.db
        self.core.remove_client(client)
        self.loading = False
        self.loaded_perc = 100.0
        dt = time.monotonic() - t0
        log.log(log.NOTICE, f"DB loaded from append only file: {dt:.3f} seconds "
                            f"({applied} commands)")
        yield applied

    def _refuse_segments_without_manifest(self) -> None:
        """No manifest: a fresh directory, unless segments are there.  Those are a
        previous run's log whose manifest was lost; starting empty would write a new
        manifest and overwrite the first of them, so the start stops instead."""
        try:
            found = sorted(n for n in os.listdir(self.dir) if SEGMENT_NAME.fullmatch(n))
        except FileNotFoundError:
            return
        if found:
            raise AofError(f"{self.dir} holds AOF segments but no manifest {self.manifest_name} "
                           f"({', '.join(found)}): refusing to start empty over them; "
                           f"{manifest_way_out(self.dir)}, or move them away to start empty")

    # -- appending --------------------------------------------------------------

    def record_fsyncs(self) -> None:
        os.makedirs(self.dir, exist_ok=True)
        self.fsync_log = os.open(os.path.join(self.dir, "fsync.log"),
                                 os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def open_for_append(self) -> None:
        """Start-up, after ``load``: frames go on at the end of the last whole frame of
        the manifest's last incr segment, or into a new one when it names none (a fresh
        directory, or a base only).  An existing segment is opened as the load judged
        it: it is never created, nor given a header, here."""
        os.makedirs(self.dir, exist_ok=True)
        self._remove_stale_rewrite_files()
        if not self.manifest.incrs:
            self._new_incr_segment()
        else:
            name = self.manifest.incrs[-1]
            path = os.path.join(self.dir, name)
            known = self._sizes.get(name)
            if known is None:       # (not replayed, as the snapshot covers it: judged here)
                with open(path, "rb") as f:
                    known = read_segment(f.read(), path).valid_end
            # No O_APPEND: frames go at the logical end (os.pwrite at ``size``), which
            # the load found (the end of the last whole frame), not the file's end:
            # after a crash the zeros of its preallocation follow it.
            self.fd = os.open(path, os.O_WRONLY)
            self.size = known
            self._adopt_tail(name)
        self.base_size = self.segment_size(self.manifest.base)
        self.total_size = self.base_size + sum(self.segment_size(s) for s in self.manifest.incrs)
        self.rewrite_base_size = self.total_size
        if self._fsync_thread is None:
            # everysec's once-a-second fsync (CONFIG SET appendfsync may switch live).
            self._fsync_thread = threading.Thread(target=self._fsync_loop, name="aof-fsync", daemon=True)
            self._fsync_thread.start()

    def _remove_stale_rewrite_files(self) -> None:
        """Start-up (of the server, which alone appends): a rewrite whose server was
        killed (its child dies with it) left its base's temp file.  Nothing names
        one (a rewrite's base is renamed into place before the manifest names it):
        remove those, never a file the manifest names."""
        named = set(self.manifest.segments())
        prefix, suffix = self.basename + ".", ".base.aof.tmp"
        for name in os.listdir(self.dir):
            if name.startswith(prefix) and name.endswith(suffix) and name not in named:
                try:
                    os.unlink(os.path.join(self.dir, name))
                except OSError as e:
                    log.log(log.WARNING, f"Can't remove the temp file {name} of an interrupted "
                                         f"AOF rewrite: {describe_failure(e)}")
                    continue
                log.log(log.NOTICE, f"Removed {name}, left by an interrupted AOF rewrite")

    def _adopt_tail(self, name: str) -> None:
        """open_for_append of an existing segment: what follows its logical end.

        Zeros (a crashed server's preallocation; the load checked that only zeros
        follow) are made durable, so that frames may be written over them, and
        kept as the room ahead under 'always'; otherwise they are cut off."""
        file_end = os.fstat(self.fd).st_size
        if file_end > self.size:
            if self.policy == "always" and self.preallocate:
                os.fdatasync(self.fd)        # (a kill -9 may have left them in the page cache only)
            else:
                os.ftruncate(self.fd, self.size)
                os.fsync(self.fd)
        self._start_prealloc(name)

    def _start_prealloc(self, name: str, logical_end: int | None = None) -> None:
        """Under 'always' (with aof-preallocate), the current segment gets its
        Preallocator, whose thread writes the first room at once (the segment's
        first frames may be appended meanwhile).  Under the other policies frames
        are appended: one fdatasync a second (or none) has little to gain, and
        the zeros would double what the disk writes."""
        if self.prealloc is None and self.policy == "always" and self.preallocate:
            end = self.size if logical_end is None else logical_end
            try:
                self.prealloc = Preallocator(self.fd, name, end, os.fstat(self.fd).st_size)
            except (RuntimeError, OSError) as e:
                # No thread (a pids limit, as when forks fail) or no fd: the zeros are a
                # speed-up, not a need.  This segment's frames are appended instead.
                log.log(log.WARNING, f"Cannot preallocate the AOF segment {name} ({e}): "
                                     "its frames are appended")
                return
            self.prealloc.extend(end, self.preallocate)

    def segment_size(self, name: str | None) -> int:
        """The logical size of segment ``name`` (its header and frames, without
        preallocated zeros): what INFO, auto-rewrite and backups count."""
        if not name:
            return 0
        if self.manifest.incrs and name == self.manifest.incrs[-1] and self.fd is not None:
            return self.size
        known = self._sizes.get(name)
        if known is not None:
            return known
        try:
            return segment_logical_size(os.path.join(self.dir, name))
        except OSError:
            return 0

    def _new_incr_segment(self) -> None:
        """Move the log on to a new incr segment, in the order that leaves the
        directory loadable whichever step a crash or a full disk stops:

        1. the segment is created under a name no file has, with its header, fsynced;
        2. the old segment's frames are fsynced (they must be durable before its fd goes);
        3. the manifest naming the new segment is saved (aside, fsync, rename, fsync dir);
        4. only then does memory switch: frames go to the new segment.

        When a step fails, what the rotation created is removed, frames keep going to
        the old segment, ``manifest`` is unchanged, and AofRotationError (logged once
        while failures last) tells the caller why.
        """
        seq, name, fd = self._create_segment()
        manifest = Manifest(self.manifest.base, self.manifest.incrs + [name], seq)
        step = f"fsyncing {self._segment_name()}"
        try:
            # (Under the lock: the fsync thread must not be inside an fsync of the old fd.)
            with self._sync_lock:
                if self.fd is not None and self.written_pos > self.durable_pos:
                    os.fdatasync(self.fd)
            step = f"saving the manifest {self.manifest_name}"
            manifest.save(self.dir, self.manifest_name)
        except OSError as e:
            os.close(fd)
            self._remove_created_segment(name, isinstance(e, ManifestNotDurable))
            raise self._rotation_failed(step, e) from None
        with self._sync_lock:
            if self.fd is not None:
                self._seal_current()
                os.close(self.fd)
            self.fd = fd
            self.size = len(SEGMENT_MAGIC)
        self.manifest = manifest
        self._mark_durable(self.written_pos)
        self.cur_db = 0
        self._start_prealloc(name)
        if self.rotation_error:
            log.log(log.WARNING, "AOF segment rotation works again")
            self.rotation_error = ""

    def _create_segment(self) -> tuple[int, str, int]:
        """A new incr segment holding its header, fsynced: (seq, name, fd).

        It gets the first seq after the manifest's that no file holds (O_EXCL): a
        file left in the way (a crash or a failed rotation left it before a manifest
        named it) is not ours to overwrite."""
        seq = self.manifest.seq
        while True:
            seq += 1
            name = f"{self.basename}.{seq}.incr.aof"
            try:
                fd = os.open(os.path.join(self.dir, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                log.log(log.WARNING, f"AOF: {name} exists but the manifest does not name it; "
                                     f"leaving it as it is and skipping its sequence number")
                continue
            except OSError as e:
                raise self._rotation_failed(f"creating {name}", e) from None
            try:
                _pwrite_all(fd, SEGMENT_MAGIC, 0)
                os.fsync(fd)
            except OSError as e:
                os.close(fd)
                self._remove_created_segment(name)
                raise self._rotation_failed(f"writing the header of {name}", e) from None
            return seq, name, fd

    def _remove_created_segment(self, name: str, manifest_renamed: bool = False) -> None:
        """Undo a failed rotation: remove the segment ``name`` it created.

        ``manifest_renamed``: the manifest naming it was renamed into place but not
        made durable.  The one memory believes is put back first; if that fails too,
        the file stays, since a manifest naming a missing segment stops the next start
        while a segment holding only its header is harmless."""
        if manifest_renamed:
            try:
                self.manifest.save(self.dir, self.manifest_name)
            except OSError:
                return
        try:
            os.unlink(os.path.join(self.dir, name))
        except OSError:
            pass

    def _replace_manifest(self, manifest: Manifest, why: str) -> None:
        """Save ``manifest``, and only then make it the one memory believes.

        OSError (logged at warning) when the save failed: memory keeps the old one,
        which names only files that still exist (nothing was deleted yet)."""
        try:
            manifest.save(self.dir, self.manifest_name)
        except OSError as e:
            log.log(log.WARNING, f"Could not save the AOF manifest ({why}): {e.strerror or e}; "
                                 f"the AOF goes on with the segments it named")
            raise
        self.manifest = manifest

    def _rotation_failed(self, step: str, e: OSError) -> "AofRotationError":
        """The error for a rotation that failed at ``step``; logged at the first failure."""
        current = self._segment_name()
        message = (f"could not start a new AOF segment ({step}: {e.strerror or e}); "
                   + (f"the AOF goes on in {current}" if current else "the AOF has no segment yet"))
        if not self.rotation_error:
            log.log(log.WARNING, message)
        self.rotation_error = message
        self.rotation_failed_at = time.monotonic()
        return AofRotationError(message)

    def _seal_current(self) -> None:
        """The current segment gets no more frames: its logical size is final, and
        its zeros are cut off by its Preallocator's thread (the loop goes on)."""
        if self.manifest.incrs:
            self._sizes[self.manifest.incrs[-1]] = self.size
        if self.prealloc is not None:
            self.prealloc.retire(self.size)
            self.prealloc = None

    def append_batch(self, batch: EffectBatch) -> None:
        """Effect sink: queue one command's effects (their RESP, after a SELECT when
        the segment is in another database) for this turn's frame.

        The writing client's ``aof_woff`` becomes the mark ``fsynced`` checks:
        one past where the frame holding these effects will start (every frame
        kept back is written before it, in one write with it)."""
        writer = self.core.current_client
        if writer is not None:
            writer.aof_woff = self.written_pos + len(self.pending) + 1
        self.buf.append(batch.resp_from(self.cur_db))
        self.cur_db = batch.final_db()

    def flush(self) -> bool:
        """The server's hook at the end of each loop turn: write this turn's frame
        (after any a failed write kept back) and, under 'always', fdatasync it.

        Returns False when the frame could not be written or synced: the caller
        holds the turn's replies and the frame is retried on the next turn or tick.
        """
        if self.buf:        # this turn's effects become one frame, behind any kept back
            self.pending += encode_frame(b"".join(self.buf))
            self.buf.clear()
        return self._write_pending()

    def _write_pending(self) -> bool:
        """Write the frames queued (``pending``) in one write; under 'always',
        fsync them.  False when the write or the fsync failed (see ``flush``)."""
        if not self.pending:
            return True
        frame = self.pending
        try:
            if self.inject_failures:
                self.inject_failures -= 1
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            write_started = time.perf_counter()
            self._write_all(frame)
            self.core.observe.latency_sample(
                "aof-write", int((time.perf_counter() - write_started) * 1000))
        except OSError as e:
            self._write_failed(e)
            return False
        start = self.size
        self.size += len(frame)
        self.total_size += len(frame)
        self.written_pos += len(frame)
        self.pending = b""
        if self.policy == "always":
            return self._sync_now(start, frame)
        else:
            self._dirty_since_fsync = True
            self._clear_write_error()
        return True

    def holds_replies_of(self, client) -> bool:
        """The server's reply gate while a frame waits for the disk: whether
        ``client``'s replies must wait.  Under 'always' a write is acknowledged only
        once it is durable, so they wait while its last write (``aof_woff``) is not.
        Under the other policies a write is acknowledged once it is written (the OS
        has it, so a kill -9 loses nothing), so they wait while the frame holding it
        is not: a full disk.  (Redis acknowledges such a write anyway and retries it
        from memory, where a kill -9 meanwhile loses it.)"""
        if self.policy == "always":
            return not self.fsynced(client.aof_woff)
        return client.aof_woff > self.written_pos

    def _clear_write_error(self) -> None:
        """Writes are accepted again (under 'always': once an fsync succeeded, not just a write)."""
        if not self.last_write_ok:
            log.log(log.WARNING, "AOF write error solved: writes accepted again")
        self.last_write_ok = True
        self.last_error = ""
        self.core.write_refusal = None

    def flush_pending_retry(self) -> None:
        """Cron: retry a frame that failed to write even when no new turn comes."""
        if self.pending and not self.buf and not self.last_write_ok:
            self.flush()

    def maybe_auto_rewrite(self, cfg) -> None:
        """auto-aof-rewrite-percentage / -min-size, as Redis: growth over the size after the
        last rewrite.  After failures in a row, waits between tries (``_auto_rewrite_held``).
        Never raises (a rewrite that cannot start is logged and counted)."""
        pct = cfg["auto-aof-rewrite-percentage"]
        if not pct or self.total_size < cfg["auto-aof-rewrite-min-size"]:
            return
        base = max(self.rewrite_base_size, 1)
        if (self.total_size - base) * 100 // base >= pct and self.rewrite_pid is None \
                and not self.pending and not self._auto_rewrite_held():
            # (rotate() refuses while a write waits for the disk)
            if self.rotation_backing_off():
                return
            log.log(log.NOTICE, f"Starting automatic rewriting of AOF on {pct}% growth")
            try:
                self.bgrewrite()
            except (AofRotationError, NotStarted):
                pass            # (logged by the rotation or the fork; tried again later)

    def rotation_backing_off(self) -> bool:
        """Whether automatic work that rotates (auto-aof-rewrite, a save rule's or the
        node cache's snapshot) waits: the last rotation failed a moment ago."""
        return bool(self.rotation_error) and \
            time.monotonic() - self.rotation_failed_at < _ROTATION_RETRY_DELAY

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

    def _write_all(self, data: bytes) -> None:
        """Write ``data`` at the logical end (``size``; the caller moves it on).

        Past the zeros the preallocation thread has written (or with none), the
        frame is appended; while that thread may be writing right there, under its
        ``io_lock`` (see prealloc.py)."""
        end = self.size + len(data)
        pa = self.prealloc
        if pa is None or end <= pa.zeroed:
            _pwrite_all(self.fd, data, self.size)
        else:
            with pa.io_lock:
                _pwrite_all(self.fd, data, self.size)
                pa.logical = end
        if self.policy == "always" and self.preallocate:
            if pa is None:      # (appendfsync switched to always at run time)
                self._start_prealloc(self._segment_name(), end)
            else:
                pa.extend(end, self.preallocate)

    def _write_failed(self, e: OSError) -> None:
        # Cut back whatever part of the frame reached the file, so that the
        # retried frame does not follow a torn one (the zeros ahead go too).
        try:
            if self.prealloc is not None:
                self.prealloc.cut_back(self.fd, self.size)
            else:
                os.ftruncate(self.fd, self.size)
        except OSError:
            pass
        if self.policy == "always":
            waiting = "the replies to those writes wait for it"
        else:
            waiting = f"those writes were acknowledged (appendfsync {self.policy})"
        self._refuse_writes(f"Error writing to the AOF file: {e.strerror or e}; refusing writes "
                            f"until the disk works again (what could not be written is kept in "
                            f"memory and retried; {waiting})", e)

    def _refuse_writes(self, message: str, e: OSError) -> None:
        """A write or fsync failed: write commands get MISCONF until one works again
        (``_clear_write_error``); ``message`` is logged when that starts, not per retry."""
        if self.last_write_ok:
            log.log(log.WARNING, message)
        self.last_write_ok = False
        self.last_error = e.strerror or str(e)
        self.core.write_refusal = f"MISCONF Errors writing to the AOF file: {self.last_error}"

    def _fsync_loop(self) -> None:
        """The aof-fsync thread: once a second under 'everysec'."""
        while True:
            with self._wake:
                if not self._stop:
                    self._wake.wait(1.0)
                if self._stop:
                    return
            if self.policy == "everysec" and self._dirty_since_fsync:
                self._sync_everysec()

    def fsynced(self, mark: int) -> bool:
        """Whether the effects appended when ``aof_woff`` was ``mark`` are durable.

        Durable positions are always the ends of whole writes, so one past the
        frame's start is reached only once the whole frame is covered."""
        return mark <= self.durable_pos

    def _sync_now(self, start: int, frame: bytes) -> bool:
        """'always': fdatasync what is written, on the loop thread, before the
        turn's replies go: ``frame``, just written at ``start`` in the segment.
        False when the fsync failed: the frame is cut back to be written again,
        and the replies wait."""
        target = self.written_pos
        name, offset = self._segment_name(), self.size
        with self._sync_lock:      # the everysec thread may be syncing after a policy switch
            try:
                if self.inject_fsync_failures:
                    self.inject_fsync_failures -= 1
                    raise OSError(errno.EIO, os.strerror(errno.EIO))
                sync_started = time.perf_counter()
                os.fdatasync(self.fd)
                err = None
            except OSError as e:
                err = e
        if err is None:
            self._record_fsync_at(name, offset)
            self.core.observe.latency_sample(
                "aof-fsync-always", int((time.perf_counter() - sync_started) * 1000))
            self._mark_durable(target)
            return True
        # The kernel may have dropped the dirty pages, so the frame cannot be
        # trusted: cut the segment back to its start and write it again (its
        # replies are held meanwhile).
        with self._sync_lock:
            self._sync_epoch += 1
            self.pending = frame + self.pending
            self.written_pos = self.durable_pos
            self.total_size -= self.size - start
            self.size = start
            self._write_failed(err)
        return False

    def _sync_everysec(self) -> None:
        """The aof-fsync thread's fdatasync.  A failure refuses writes (MISCONF) and
        leaves the log dirty, so that the next second tries again: with writes
        refused nothing else would, and the refusal would outlive the failing disk."""
        with self._sync_lock:
            self._dirty_since_fsync = False
            if self.fd is None:
                return
            name, offset, target = self._segment_name(), self.size, self.written_pos
            epoch = self._sync_epoch
            try:
                if self.inject_fsync_failures:
                    self.inject_fsync_failures -= 1
                    raise OSError(errno.EIO, os.strerror(errno.EIO))
                os.fdatasync(self.fd)
            except OSError as e:
                self._dirty_since_fsync = True
                self._call_in_loop(self._everysec_failed, e)
                return
        self._record_fsync_at(name, offset)
        self._call_in_loop(self._everysec_synced, target, epoch)

    def _everysec_failed(self, e: OSError) -> None:
        """Loop thread: the everysec thread's fdatasync failed."""
        self._refuse_writes(f"Error fsyncing the AOF file: {e.strerror or e}; refusing writes "
                            f"until an fsync works again (tried every second)", e)

    def _call_in_loop(self, fn, *args) -> None:
        loop = self.loop
        if loop is None or loop.is_closed():
            fn(*args)           # no loop (tests, shutdown): the caller's thread is fine
        else:
            try:
                loop.call_soon_threadsafe(fn, *args)
            except RuntimeError:     # the loop closed meanwhile
                pass

    def _everysec_synced(self, target: int, epoch: int) -> None:
        """Loop thread: the everysec thread's fsync covered the log up to ``target``
        (unless a failed 'always' fsync has cut the segment back since it began)."""
        if epoch == self._sync_epoch:
            self._mark_durable(target)
            if not self.pending:
                # (With nothing new written since a failed fsync, _mark_durable has no
                # new position to clear the refusal on.)
                self._clear_write_error()

    def _mark_durable(self, pos: int) -> None:
        if pos <= self.durable_pos:
            return
        self.durable_pos = pos
        for listener in self.durable_listeners:
            listener()
        if not self.pending:
            self._clear_write_error()

    def _segment_name(self) -> str:
        return self.manifest.incrs[-1] if self.manifest.incrs else ""

    def _record_fsync_at(self, segment: str, offset: int) -> None:
        """aof-record-fsync (crash testing): note that ``segment`` is durable up to ``offset``.

        The note is a plain write (no fsync): it only has to survive SIGKILL,
        after which the crash tool simulates a power loss by cutting the
        segment back to a point after the last durable offset.
        """
        if self.fsync_log is None:
            return
        try:
            os.write(self.fsync_log, b"%s %d\n" % (segment.encode(), offset))
        except OSError:
            pass

    def close(self) -> None:
        """Shutdown: write what is left, fsync it, stop the everysec thread."""
        self.flush()
        with self._wake:
            self._stop = True
            self._wake.notify()
        if self._fsync_thread is not None:
            self._fsync_thread.join(timeout=5)
            self._fsync_thread = None
        self._cut_zeros()
        with self._sync_lock:
            if self.fd is not None:
                try:
                    os.fsync(self.fd)
                except OSError:
                    pass
                os.close(self.fd)
                self.fd = None
        self._mark_durable(self.written_pos)

    def _cut_zeros(self) -> None:
        """Shutdown: stop the preallocation and cut the current segment back to its
        logical size (the fsync after it makes that durable): a stopped server's
        segments hold no zeros, only a crashed one's may."""
        pa, self.prealloc = self.prealloc, None
        if pa is not None and not pa.close():
            return          # its thread is stuck in the disk: leave the zeros (a valid tail)
        if self.fd is None:
            return
        try:
            if os.fstat(self.fd).st_size > self.size:
                os.ftruncate(self.fd, self.size)
        except OSError:
            pass

    # -- snapshots ------------------------------------------------------------------

    def rotate(self) -> int:
        """Start a new incr segment; returns the seq of the last segment before it.

        A snapshot taken right after covers every segment up to that seq.
        AofRotationError when the new segment could not be started (see
        ``_new_incr_segment``): nothing changed.

        Refused (``AofUnwritten``) while a frame that failed to write waits for the
        disk: the snapshot would hold its effects and the retry would write them into
        the new segment too, which a restart would then apply a second time.
        """
        self.flush()
        if self.pending:
            raise AofUnwritten("the AOF's last writes are not on disk yet "
                               f"({self.last_error}); try again once they are")
        covered = self.manifest.seq
        self._new_incr_segment()
        return covered

    def snapshot_point(self) -> int:
        """``rotate()`` for a snapshot: the seq through which a snapshot taken now
        covers the log.  When the current segment holds no frame yet (nothing was
        written since the last rotation, e.g. by a save that failed and is tried
        again while writes get MISCONF), the segments before it already hold every
        change: no new segment is started for each try."""
        self.flush()
        if not self.pending and self.manifest.incrs and self.size == len(SEGMENT_MAGIC):
            return segment_seq(self.manifest.incrs[-1]) - 1
        return self.rotate()

    def retire_through(self, seq: int) -> None:
        """Drop segments a snapshot now covers (seq <= ``seq``) from the manifest, then the files."""
        old = [s for s in self.manifest.segments() if segment_seq(s) <= seq]
        if not old:
            return
        base = self.manifest.base if self.manifest.base and segment_seq(self.manifest.base) > seq else None
        try:
            self._replace_manifest(Manifest(base, [s for s in self.manifest.incrs if segment_seq(s) > seq],
                                            self.manifest.seq), "retiring the segments a snapshot covers")
        except OSError:
            return          # (they are retired after the next snapshot)
        for name in old:
            self._drop_segment_file(name)
        self.base_size = self.segment_size(self.manifest.base)
        self.total_size = self.base_size + sum(self.segment_size(s) for s in self.manifest.incrs)
        log.log(log.VERBOSE, f"Retired {len(old)} AOF segment(s) covered by the snapshot")

    def first_segment_after_a_gap(self, covered_seq: int | None) -> str | None:
        """The segment a load would replay first, when the segments before it are
        gone and ``covered_seq`` (the snapshot's, None without one) does not cover
        them: they were retired into a snapshot that is not this one (missing, or
        older).  None when the log continues from the snapshot (or the very start).

        A query of the manifest on disk, before ``load_steps``: nothing changes.
        Raises AofError when the manifest is unreadable."""
        if not os.path.exists(self.manifest_path()):
            return None
        manifest = Manifest.read(self.manifest_path())
        replayed = [s for s in manifest.segments()
                    if covered_seq is None or segment_seq(s) > covered_seq]
        if not replayed or replayed[0].endswith(".base.aof"):
            return None          # (a base segment is the whole state)
        # Seqs count from 1; a rotation before a snapshot starts the segment after the
        # one it covers.
        return replayed[0] if segment_seq(replayed[0]) > (covered_seq or 0) + 1 else None

    def _drop_segment_file(self, name: str) -> None:
        """Delete the file of a segment the manifest no longer names.  ``keep_retired``
        (set by an open BACKUP window, persistence/backup.py) is told first, so that it
        can pin the segment's bytes before the name goes."""
        self._sizes.pop(name, None)
        path = os.path.join(self.dir, name)
        if self.keep_retired is not None:
            self.keep_retired(name, path)
        try:
            os.unlink(path)
        except OSError:
            pass

    # -- rewrite ----------------------------------------------------------------

    def rewrite(self) -> None:
        """Compact in the foreground: the state becomes a new base segment (blocks the loop)."""
        covered = self.rotate()
        name = self._base_name(covered)
        write_base(os.path.join(self.dir, name), self.core.keyspace,
                   self.core.config["aof-use-rdb-preamble"])
        self._rewrite_done(covered, name)

    def bgrewrite(self) -> None:
        """BGREWRITEAOF: rotate, fork; the child writes the base from its copy-on-write memory.

        The parent keeps appending to the fresh segment; when the child has
        succeeded, ``poll_rewrite`` swaps the manifest to [new base, segments
        after the rotation] and deletes what the base replaced.  A crash at any
        point leaves either the old manifest (all old files intact) or the new one.

        Raises RuntimeError when a rewrite runs already or a write waits for the
        disk, and NotStarted (logged, counted as a failed rewrite) when the
        rotation or the fork failed: the old manifest stays in charge.
        """
        if self.rewrite_pid is not None:
            raise RuntimeError("Background append only file rewriting already in progress")
        try:
            covered = self.rotate()
        except OSError as e:
            raise self._rewrite_not_started(f"rotating the AOF: {describe_failure(e)}") from None
        name = self._base_name(covered)
        path = os.path.join(self.dir, name)
        snapshot_form = self.core.config["aof-use-rdb-preamble"]
        try:
            pid, self._rewrite_reason_fd = fork_reporting_child(
                lambda: write_base(path, self.core.keyspace, snapshot_form), "AOF rewrite")
        except OSError as e:
            raise self._rewrite_not_started(f"fork: {describe_failure(e)}") from None
        self.rewrite_pid = pid
        self._rewrite_pending = (covered, name)
        log.log(log.NOTICE, f"Background append only file rewriting started by pid {pid}")

    def _rewrite_not_started(self, reason: str) -> NotStarted:
        """A rewrite that could not start is a failed one: logged (Redis's words), counted."""
        message = f"Can't rewrite append only file in background: {reason}"
        log.log(log.WARNING, message)
        self._rewrite_failed()
        return NotStarted(message)

    def _rewrite_failed(self) -> None:
        self.last_rewrite_ok = False
        self.rewrite_failures += 1

    def poll_rewrite(self) -> None:
        """Cron: finish a background rewrite whose child has exited."""
        if self.rewrite_pid is None:
            return
        code = reap(self.rewrite_pid)
        if code is None:
            return
        reason = read_failure_reason(self._rewrite_reason_fd)
        self._rewrite_reason_fd = None
        self.rewrite_pid = None
        covered, name = self._rewrite_pending
        if code == 0:
            try:
                self._rewrite_done(covered, name)
            except OSError:
                self._rewrite_failed()              # (logged by _replace_manifest)
            else:
                self.last_rewrite_ok = True
                self.rewrite_failures = 0
        else:
            self._rewrite_failed()
            try:
                os.unlink(os.path.join(self.dir, name + ".tmp"))
            except OSError:
                pass
            log.log(log.WARNING, f"Background AOF rewrite terminated with error: "
                                 f"{reason or 'the child ' + describe_exit(code)}")

    def _base_name(self, covered: int) -> str:
        return f"{self.basename}.{covered}.base.aof"

    def _rewrite_done(self, covered: int, base_name: str) -> None:
        old = [s for s in self.manifest.segments() if segment_seq(s) <= covered]
        try:
            self._replace_manifest(Manifest(base_name, [s for s in self.manifest.incrs if segment_seq(s) > covered],
                                            self.manifest.seq), f"naming the rewritten base {base_name}")
        except OSError as e:
            if not isinstance(e, ManifestNotDurable):       # (else the manifest on disk may name it)
                try:
                    os.unlink(os.path.join(self.dir, base_name))
                except OSError:
                    pass
            raise
        for name in old:
            if name != base_name:
                self._drop_segment_file(name)
            else:
                self._sizes.pop(name, None)
        self.base_size = self.segment_size(base_name)
        self.total_size = self.base_size + sum(self.segment_size(s) for s in self.manifest.incrs)
        self.rewrites += 1
        self.rewrite_base_size = self.total_size
        log.log(log.NOTICE, f"AOF rewrite complete: base {base_name} ({self.base_size} bytes)")


def state_commands(keyspace, snapshot_form: bool = True):
    """The whole state as RESP commands, in chunks: SELECT, then per key either

    * ``snapshot_form`` (``aof-use-rdb-preamble yes``, and a replica's full sync):
      RESTORE ... REPLACE [ABSTTL] of the snapshot codec's payload, exact, consumer
      groups and IDMP state included; a big stream comes as several RESTOREs of
      about a MiB each (``codec.dump_pieces``), so that a reader can apply one
      while the next is made;
    * or the plain commands that rebuild it (``value_commands``).
    """
    from .codec import dump_pieces
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
    from ..engine.ids import format_id
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


def write_base(path: str, keyspace, snapshot_form: bool = True) -> None:
    """Write a base segment holding the whole state (tmp file, fsync, rename);
    ``snapshot_form`` as in ``state_commands``."""
    with open(path + ".tmp", "wb") as f:
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
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)
    fsync_dir(os.path.dirname(path) or ".")
