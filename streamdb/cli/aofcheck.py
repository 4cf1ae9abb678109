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

A segment without its header (an empty file, or zeros: its content never
reached the disk) is damage at offset 0, never a torn write, since the header
is fsynced before a manifest names the segment: --fix leaves it its header
only, as a cut at offset 0.  A directory whose manifest is missing or damaged
(the server refuses to start on it) is reported; --fix writes one naming the
segments found, the newest base and the incr segments after it in order, after
listing them and asking (a damaged manifest is kept as <name>.corrupt-<time>).

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

from ..persistence.aof import (SEGMENT_MAGIC, SEGMENT_NAME, AofCorruption, AofError, Manifest, SegmentScan,
                               read_segment, segment_logical_size, segment_seq, split_commands)
from ..files import fsync_dir
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
    """Ask before a fix changes a file (``--yes`` answers for the user).  Without an
    answer (no terminal: cron, CI, ``< /dev/null``) the answer is no."""
    if yes:
        return True
    try:
        answer = input(f"{question} Continue? [y/N]: ")
    except EOFError:
        print("\nNo answer (standard input is closed): nothing was changed. "
              "Run it again with --yes to fix without asking.")
        return False
    if answer.strip().lower() in ("y", "yes"):
        return True
    print("Aborted.")
    return False


def cut_question(seg: "SegmentCheck", keep: int) -> str:
    """What a cut does to ``seg``, in the words the prompt asks about."""
    size = len(seg.data)
    return (f"This will cut {os.path.basename(seg.path)} from {size} to {keep} bytes, dropping "
            f"its last {size - keep} bytes{_zeros_note(seg)}")


def fix_stamp() -> str:
    """The time in the names of what a fix keeps (``.corrupt-<time>``, ``.retired-<time>``)."""
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime())


def keep_copy(path: str, stamp: str) -> str:
    """Copy ``path`` to ``<path>.corrupt-<stamp>``, fsynced, before a fix changes it; the copy's path."""
    kept = f"{path}.corrupt-{stamp}"
    shutil.copy2(path, kept)
    with open(kept, "rb") as f:
        os.fsync(f.fileno())
    return kept


def kept_size(seg: SegmentCheck) -> int:
    """What --fix leaves of ``seg``: its valid frames, and at least its header (a
    segment a manifest names has one, even when nothing readable is left of it)."""
    return max(seg.scan.valid_end, len(SEGMENT_MAGIC))


def cut_segment(path: str, size: int) -> None:
    """Cut the segment at ``path`` to ``size`` bytes (see kept_size); a segment whose own
    header was damaged is left with a fresh one."""
    with open(path, "r+b") as f:
        if f.read(len(SEGMENT_MAGIC)) != SEGMENT_MAGIC:
            f.truncate(0)
            f.seek(0)
            f.write(SEGMENT_MAGIC)
        f.truncate(size)
        f.flush()
        os.fsync(f.fileno())


def _zeros_note(seg: SegmentCheck) -> str:
    zeros = seg.scan.size - seg.scan.end
    return f" ({zeros} of them preallocated zeros)" if zeros else ""


def fix_torn_tail(seg: SegmentCheck, yes: bool) -> int:
    keep = kept_size(seg)
    if not confirm(cut_question(seg, keep) + ".", yes):
        return 1
    cut_segment(seg.path, keep)
    print(f"Successfully truncated AOF segment {seg.path} to {keep} bytes")
    return 0


def fix_hole(seg: SegmentCheck, later: list[str], manifest: Manifest | None, manifest_path: str | None,
             yes: bool) -> int:
    """Cut ``seg`` at its last valid frame and retire the segments ``later`` than it.

    Says first what is lost: the bytes cut, the valid frames and commands found
    after the bad spot, and the later segments.  Keeps a copy of the whole
    segment and renames (never deletes) the retired ones.
    """
    keep = kept_size(seg)
    bad_at = seg.corruption.offset if seg.corruption else seg.scan.torn_at
    lost = frames_after(seg.data, bad_at)
    what = "the bad frame" if bad_at else "the damaged segment header"
    print(f"Cutting {seg.path} at offset {keep} loses {max(seg.scan.end - keep, 0)} bytes: {what} at offset "
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
    if not confirm(cut_question(seg, keep)
                   + (f", and retire {len(later)} later segment(s)." if later else "."), yes):
        return 2
    stamp = fix_stamp()
    backup = keep_copy(seg.path, stamp)
    if later:
        # The manifest first: a crash before the renames leaves files it no longer names.
        kept = len(manifest.segments()) - len(later)     # the cut segment and those before it
        manifest.incrs = manifest.incrs[:kept - (1 if manifest.base else 0)]
        manifest.save(os.path.dirname(manifest_path), os.path.basename(manifest_path))
        for path in later:
            os.replace(path, f"{path}.retired-{stamp}")
    cut_segment(seg.path, keep)
    fsync_dir(os.path.dirname(seg.path) or ".")
    print(f"Successfully truncated AOF segment {seg.path} to {keep} bytes; the whole segment as it was "
          f"is kept in {backup}"
          + (f"; retired segments renamed to <name>.retired-{stamp}" if later else ""))
    return 0


def manifest_from_segments(names: list[str]) -> tuple[Manifest, list[str]]:
    """The manifest of the log the segment files ``names`` hold, and the files it leaves out.

    The newest base holds the state up to its seq (a base is named after the last
    segment it covers), so the log is that base and the incr segments after it, in
    order; older segments are what a crash left before they were deleted.  The seq is
    the highest found, so that no new segment takes the name of one left out."""
    ordered = sorted(names, key=segment_seq)
    bases = [n for n in ordered if n.endswith(".base.aof")]
    base = bases[-1] if bases else None
    after = segment_seq(base) if base else -1
    incrs = [n for n in ordered if n.endswith(".incr.aof") and segment_seq(n) > after]
    left_out = [n for n in ordered if n != base and n not in incrs]
    return Manifest(base, incrs, max((segment_seq(n) for n in ordered), default=0)), left_out


def rebuild_manifest(dirpath: str, mpath: str, segments: list[str], yes: bool) -> Manifest | None:
    """--fix of a missing or damaged manifest: write one naming ``segments`` (see
    manifest_from_segments) after listing them and asking.  A damaged manifest is kept
    as ``<name>.corrupt-<time>``.  None when declined."""
    manifest, left_out = manifest_from_segments(segments)
    print(f"A new manifest {mpath} would name, in this order: "
          + (", ".join(manifest.segments()) or "no segment (the server then starts empty)")
          + (f"; left out, as older than the base {manifest.base}: {', '.join(left_out)}" if left_out else ""))
    if not confirm("This will write the manifest.", yes):
        return None
    if os.path.exists(mpath):       # (copied, so that a failed save leaves it in place)
        print(f"The damaged manifest is kept in {keep_copy(mpath, fix_stamp())}")
    manifest.save(dirpath, os.path.basename(mpath))
    print(f"Wrote {mpath}; checking the segments it names")
    return manifest


def directory_manifest(dirpath: str, fix: bool, yes: bool) -> tuple[Manifest | None, str]:
    """The manifest of the AOF directory ``dirpath`` and its path; (None, "") after
    reporting that there is none, or a damaged one, that was not rebuilt (--fix)."""
    names = os.listdir(dirpath)
    manifests = [n for n in names if n.endswith(".manifest")]
    if len(manifests) > 1:
        print(f"{dirpath}: expected one .manifest file, found {len(manifests)}: {', '.join(manifests)}")
        return None, ""
    segments = [n for n in names if SEGMENT_NAME.fullmatch(n)]
    if manifests:
        mpath = os.path.join(dirpath, manifests[0])
        try:
            return Manifest.read(mpath), mpath
        except AofError as e:
            print(f"CORRUPT manifest: {e}")     # (the way out included)
            if not fix:
                return None, ""
        prefix = manifests[0][:-len(".manifest")] + "."
        segments = [n for n in segments if n.startswith(prefix)]
    else:
        logs = sorted({n.rsplit(".", 3)[0] for n in segments})
        if len(logs) != 1:
            print(f"{dirpath}: no .manifest file, and " + (f"segments of {len(logs)} logs ({', '.join(logs)})"
                                                           if logs else "no AOF segment"))
            return None, ""
        mpath = os.path.join(dirpath, logs[0] + ".manifest")
        print(f"MISSING manifest: {dirpath} holds AOF segments ({', '.join(sorted(segments, key=segment_seq))}) "
              f"but no manifest {os.path.basename(mpath)}: the server will not start on it")
        if not fix:
            print(f"Run 'streamdb-check-aof --fix {dirpath}' to write a manifest naming the segments found "
                  f"(it lists them and asks first), or restore the manifest from a backup.")
            return None, ""
    return rebuild_manifest(dirpath, mpath, segments, yes), mpath


def check_directory(dirpath: str, fix: bool, yes: bool) -> int:
    manifest, mpath = directory_manifest(dirpath, fix, yes)
    if manifest is None:
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
    try:
        if os.path.isdir(args.path):
            return check_directory(args.path, args.fix, args.yes)
        return check_one_segment(args.path, args.fix, args.yes)
    except OSError as e:
        print(f"streamdb-check-aof: {e.filename or args.path}: {e.strerror or e}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
