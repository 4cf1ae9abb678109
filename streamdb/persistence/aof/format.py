"""The AOF's on-disk format: its segment files, their frames, and how a segment is read.

Layout under ``<dir>/<appenddirname>/``::

    appendonly.aof.manifest          which segments make up the log, in order (manifest.py)
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
written with ``os.pwrite`` at the logical end (``AofWriter.size``), which is what
every size (INFO, auto-rewrite, backups, replication positions) means.  A
reader takes a zero byte where a frame header would start, with only zeros
after it, as the clean end; torn bytes followed by only zeros are a torn tail,
exactly as torn bytes at the end of the file are.  Nothing valid ends in a zero
byte (a header or a frame ends with ``\\r\\n``), so the zeros are found
from the end of the file (``content_end``).

A frame is the unit of both writing (writer.py) and checking (``read_segment``):

* a torn last frame (short, or a bad checksum with nothing after it) is a torn
  tail: cut off on load when ``aof-load-truncated yes`` (logged with the
  offset), a start-up error otherwise.  MULTI/EXEC never straddles frames, so a
  torn transaction is rolled back whole;
* a bad frame followed by more data is corruption in the middle: a clear error
  naming the file and offset, and nothing on disk is changed.

No state lives here: the tools (streamdb-check-aof, the crash tester, backups,
the Spark reader) read segments with these functions, without a server.
"""

from __future__ import annotations

import os
import re
import zlib

from ...protocol import ProtocolError, RequestParser

__all__ = ["AofCorruption", "AofError", "FRAME_HEADER_MAX", "SEGMENT_MAGIC", "SEGMENT_NAME",
           "SegmentScan", "content_end", "copy_segment", "encode_frame", "frame_header", "frame_size",
           "pwrite_all", "pwritev_all", "read_segment", "segment_logical_size", "segment_seq", "split_commands"]

SEGMENT_MAGIC = b"#SDBAOF 1\r\n"
# ``<appendfilename>.<seq>.<base|incr>.aof``: a segment's file name.
SEGMENT_NAME = re.compile(r"[^/]+\.(\d+)\.(base|incr)\.aof")
FRAME_HEADER_MAX = 64
_ZERO_SCAN = 1 << 20                # content_end looks at the tail this much at a time


class AofError(Exception):
    """The AOF cannot be loaded as it is; the message names the file and offset."""


class AofCorruption(AofError):
    """A bad frame with more data after it.  ``scan`` holds the good frames before ``offset``."""

    def __init__(self, message: str, scan: "SegmentScan", offset: int) -> None:
        super().__init__(message)
        self.scan = scan
        self.offset = offset


def segment_seq(name: str) -> int:
    """The sequence number in ``<base>.<seq>.<base|incr>.aof``."""
    return int(name.rsplit(".", 3)[-3])


def frame_header(body: bytes) -> bytes:
    """The header of the frame holding ``body``: its length and checksum."""
    return b"#F %d %08x\r\n" % (len(body), zlib.crc32(body))


def encode_frame(body: bytes) -> bytes:
    return frame_header(body) + body


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


def pwritev_all(fd: int, pieces: list[bytes], offset: int) -> None:
    """os.pwritev all of ``pieces``, one after the other, at ``offset`` of ``fd`` (a
    short write goes on): a frame's header and body are written without being joined
    first, which for a 100 MB body was a copy costing about as much as the write."""
    views = [memoryview(p) for p in pieces if p]
    while views:
        n = os.pwritev(fd, views, offset)
        offset += n
        while n and n >= len(views[0]):
            n -= len(views.pop(0))
        if n:
            views[0] = views[0][n:]


def pwrite_all(fd: int, data: bytes, offset: int) -> None:
    """os.pwrite all of ``data`` at ``offset`` of ``fd`` (a short write goes on)."""
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view = view[n:]
        offset += n
