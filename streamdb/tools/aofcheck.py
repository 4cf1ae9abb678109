"""streamdb-check-aof: verify an AOF directory (or one segment) and repair it.

    streamdb-check-aof DATA_DIR/appendonlydir            report
    streamdb-check-aof DATA_DIR/appendonlydir --fix      cut at the last valid frame (asks first)
    streamdb-check-aof DATA_DIR/appendonlydir --fix --yes   the same, without asking (scripts)
    streamdb-check-aof SEGMENT.aof [--fix] [--yes]

Like redis-check-aof it reports the last valid offset, and --fix truncates
there after asking.  A torn tail (a last frame cut short by a crash) loses
only writes that were never acknowledged under appendfsync always.  A bad
frame in the middle of the log loses everything after it: the cut segment's
later frames, and every later segment of the manifest, because commands that
follow a hole must not be applied without the ones in it.  Before cutting,
--fix says how many bytes, frames and commands that is, copies the whole
segment to <segment>.corrupt-<time> and renames the later segments to
<name>.retired-<time>: nothing is destroyed.

A segment may end with zero bytes: the room a server running under
``appendfsync always`` preallocates after its last frame (a crashed server's
segment keeps it; a clean shutdown cuts it).  They are no error: the report
counts them apart, and a frame torn by a crash with only zeros after it is a
torn tail like one at the end of the file.

Exit status: 0 the AOF is valid (or was fixed), 1 a torn tail, 2 corruption
(or a fix declined or impossible).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from dataclasses import dataclass

from ..persistence.aof import (SEGMENT_MAGIC, AofCorruption, AofError, Manifest, SegmentScan, fsync_dir,
                               read_segment, segment_logical_size, split_commands)
from .progress import Progress


@dataclass
class SegmentCheck:
    """One segment read and judged: its good frames, and whether (and why) it must be cut."""

    path: str
    data: bytes
    scan: SegmentScan
    corruption: AofCorruption | None = None

    @property
    def torn(self) -> bool:
        return self.scan.torn_at is not None


def count_commands(frames: list[bytes]) -> int:
    """Commands in ``frames``; a frame whose body does not parse counts as none."""
    total = 0
    for body in frames:
        try:
            total += len(split_commands(body))
        except AofError:
            pass
    return total


def frames_after(data: bytes, bad_at: int) -> list[bytes]:
    """The checksummed frames found after a bad frame at ``bad_at``, resyncing on ``#F`` headers.

    A frame is only counted if its header parses and its checksum matches, so a
    ``#F`` inside some body does not count as a frame.
    """
    frames: list[bytes] = []
    pos = data.find(b"#F ", bad_at + 1)
    while pos >= 0:
        try:
            frames += read_segment(SEGMENT_MAGIC + data[pos:]).frames
            break
        except AofCorruption as e:      # good frames, then another bad one: resync after it
            frames += e.scan.frames
            pos = data.find(b"#F ", pos + e.offset - len(SEGMENT_MAGIC) + 1)
    return frames


def check_segment(path: str) -> SegmentCheck:
    """Read ``path`` and print its report line.  Raises AofError if it cannot be judged at all."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        scan = read_segment(data, path)
        corruption = None
    except AofCorruption as e:
        scan, corruption = e.scan, e
    prog = Progress(len(data), os.path.basename(path))
    commands = done = 0
    for body in scan.frames:
        commands += len(split_commands(body))
        done += len(body)
        prog.update(done)
    prog.finish()
    head = f"AOF analyzed: {path}, size={len(data)}, ok_up_to={scan.valid_end}"
    if scan.size > scan.end:
        head += f", preallocated_zeros={scan.size - scan.end}"
    if corruption is not None:
        print(f"{head}, diff={len(data) - scan.valid_end}: CORRUPT: {corruption}")
    elif scan.torn_at is not None:
        print(f"{head}, diff={len(data) - scan.valid_end}: torn tail ({scan.torn_reason} at offset "
              f"{scan.torn_at})")
    else:
        print(f"{head}, frames={len(scan.frames)}, commands={commands}: AOF is valid")
    return SegmentCheck(path, data, scan, corruption)


def confirm(question: str, yes: bool) -> bool:
    if yes:
        return True
    answer = input(f"{question} Continue? [y/N]: ")
    if answer.strip().lower() in ("y", "yes"):
        return True
    print("Aborted.")
    return False


def truncate(path: str, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)
        f.flush()
        os.fsync(f.fileno())


def _zeros_note(seg: SegmentCheck) -> str:
    zeros = seg.scan.size - seg.scan.end
    return f" ({zeros} of them preallocated zeros)" if zeros else ""


def fix_torn_tail(seg: SegmentCheck, yes: bool) -> int:
    size, keep = len(seg.data), seg.scan.valid_end
    if not confirm(f"This will shrink the AOF segment from {size} bytes, with {size - keep} bytes"
                   f"{_zeros_note(seg)}, to {keep} bytes.", yes):
        return 1
    truncate(seg.path, keep)
    print(f"Successfully truncated AOF segment {seg.path} to {keep} bytes")
    return 0


def fix_hole(seg: SegmentCheck, later: list[str], manifest: Manifest | None, manifest_path: str | None,
             yes: bool) -> int:
    """Cut ``seg`` at its last valid frame and retire the segments ``later`` than it.

    Says first what is lost: the bytes cut, the valid frames and commands found
    after the bad spot, and the later segments.  Keeps a copy of the whole
    segment and renames (never deletes) the retired ones.
    """
    size, keep = len(seg.data), seg.scan.valid_end
    bad_at = seg.corruption.offset if seg.corruption else seg.scan.torn_at
    lost = frames_after(seg.data, bad_at)
    print(f"Cutting {seg.path} at offset {keep} loses {seg.scan.end - keep} bytes: the bad frame at offset "
          f"{bad_at} and {len(lost)} valid frames ({count_commands(lost)} commands) after it.")
    later_frames = later_commands = later_bytes = 0
    for path in later:
        later_bytes += segment_logical_size(path)
        with open(path, "rb") as f:
            data = f.read()
        try:
            frames = read_segment(data, path).frames
        except AofCorruption as e:
            frames = e.scan.frames
        except AofError:
            frames = []
        later_frames += len(frames)
        later_commands += count_commands(frames)
    if later:
        print(f"Commands after a hole must not be applied without the ones in it, so the "
              f"{len(later)} later segment(s) are retired from the manifest too: {later_bytes} bytes, "
              f"{later_frames} frames ({later_commands} commands): "
              + ", ".join(os.path.basename(p) for p in later))
    if not confirm(f"This will shrink the AOF segment from {size} bytes, with {size - keep} bytes"
                   f"{_zeros_note(seg)}, to {keep} bytes"
                   + (f", and retire {len(later)} later segment(s)." if later else "."), yes):
        return 2
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    backup = f"{seg.path}.corrupt-{stamp}"
    shutil.copy2(seg.path, backup)
    with open(backup, "rb") as f:
        os.fsync(f.fileno())
    if later:
        # The manifest first: a crash before the renames leaves files it no longer names.
        kept = len(manifest.segments()) - len(later)     # the cut segment and those before it
        manifest.incrs = manifest.incrs[:kept - (1 if manifest.base else 0)]
        manifest.save(os.path.dirname(manifest_path), os.path.basename(manifest_path))
        for path in later:
            os.replace(path, f"{path}.retired-{stamp}")
    truncate(seg.path, keep)
    fsync_dir(os.path.dirname(seg.path) or ".")
    print(f"Successfully truncated AOF segment {seg.path} to {keep} bytes; the whole segment as it was "
          f"is kept in {backup}"
          + (f"; retired segments renamed to <name>.retired-{stamp}" if later else ""))
    return 0


def check_directory(dirpath: str, fix: bool, yes: bool) -> int:
    manifests = [n for n in os.listdir(dirpath) if n.endswith(".manifest")]
    if len(manifests) != 1:
        print(f"{dirpath}: expected exactly one .manifest file, found {len(manifests)}")
        return 2
    mpath = os.path.join(dirpath, manifests[0])
    try:
        with open(mpath, encoding="utf-8") as f:
            manifest = Manifest.parse(f.read(), mpath)
    except AofError as e:
        print(f"CORRUPT manifest: {e}")
        return 2
    paths = [os.path.join(dirpath, name) for name in manifest.segments()]
    for p in paths:
        if not os.path.exists(p):
            print(f"MISSING segment named by the manifest: {p}")
            return 2
    for i, p in enumerate(paths):
        try:
            seg = check_segment(p)
        except AofError as e:
            print(f"AOF analyzed: {p}: CORRUPT: {e} (not repairable by cutting)")
            return 2
        last = i == len(paths) - 1
        if seg.corruption is None and not (seg.torn and not last):
            if seg.torn:
                if not fix:
                    print("Run again with --fix to cut the torn tail.")
                    return 1
                return fix_torn_tail(seg, yes)
            continue
        if seg.torn:
            print(f"{p}: a torn tail in a segment that is not the last one is corruption")
        if not fix:
            print(f"Run 'streamdb-check-aof --fix {dirpath}' to cut the log at offset {seg.scan.valid_end} "
                  f"of {os.path.basename(p)} (it says what that loses and asks first).")
            return 2
        return fix_hole(seg, paths[i + 1:], manifest, mpath, yes)
    return 0


def check_one_segment(path: str, fix: bool, yes: bool) -> int:
    try:
        seg = check_segment(path)
    except AofError as e:
        print(f"AOF analyzed: {path}: CORRUPT: {e} (not repairable by cutting)")
        return 2
    if seg.corruption is None:
        if not seg.torn:
            return 0
        if not fix:
            print("Run again with --fix to cut the torn tail.")
            return 1
        return fix_torn_tail(seg, yes)
    if not fix:
        print(f"Run 'streamdb-check-aof --fix {os.path.dirname(path) or '.'}' to cut the log at "
              f"offset {seg.scan.valid_end} (it says what that loses and asks first).")
        return 2
    # A segment of an AOF directory: what follows it in the manifest must go
    # too, which only the directory check can do.
    dirpath = os.path.dirname(path) or "."
    if any(n.endswith(".manifest") for n in os.listdir(dirpath)):
        print(f"{path} belongs to the AOF directory {dirpath}: run 'streamdb-check-aof --fix {dirpath}' "
              f"so that the segments after the cut are retired too")
        return 2
    return fix_hole(seg, [], None, None, yes)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="streamdb-check-aof", description=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", help="an AOF directory (with its manifest) or one segment file")
    ap.add_argument("--fix", action="store_true",
                    help="cut the log at its last valid frame: a torn tail, or a bad frame in the middle "
                         "(then later segments are retired); says what is lost and asks first")
    ap.add_argument("--yes", action="store_true", help="do not ask before fixing (for scripts)")
    args = ap.parse_args(argv)
    if os.path.isdir(args.path):
        return check_directory(args.path, args.fix, args.yes)
    return check_one_segment(args.path, args.fix, args.yes)


if __name__ == "__main__":
    sys.exit(main())
