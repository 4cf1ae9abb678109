"""streamdb-check-aof: verify an AOF directory (or one segment) and optionally fix a torn tail.

    streamdb-check-aof DATA_DIR/appendonlydir            report
    streamdb-check-aof DATA_DIR/appendonlydir --fix      cut a torn tail (asks first)
    streamdb-check-aof SEGMENT.aof [--fix] [--yes]

Like redis-check-aof it reports the last valid offset.  Only a torn *tail* is
ever fixed: corruption in the middle is reported with its offset and left for
a human, because cutting there would silently drop acknowledged writes.
"""

from __future__ import annotations

import argparse
import os
import sys

from ..persistence.aof import AofError, Manifest, read_segment, split_commands
from .progress import Progress


def check_segment(path: str, fix: bool, yes: bool) -> int:
    with open(path, "rb") as f:
        data = f.read()
    prog = Progress(len(data), os.path.basename(path))
    try:
        scan = read_segment(data, path)
    except AofError as e:
        print(f"AOF analyzed: {path}, size={len(data)}, CORRUPT: {e}")
        return 2
    commands = 0
    done = 0
    for body in scan.frames:
        commands += len(split_commands(body))
        done += len(body)
        prog.update(done)
    prog.finish()
    if scan.torn_at is None:
        print(f"AOF analyzed: {path}, size={len(data)}, ok_up_to={scan.valid_end}, "
              f"frames={len(scan.frames)}, commands={commands}: AOF is valid")
        return 0
    print(f"AOF analyzed: {path}, size={len(data)}, ok_up_to={scan.valid_end}, "
          f"diff={len(data) - scan.valid_end}: torn tail ({scan.torn_reason} at offset {scan.torn_at})")
    if not fix:
        print("Run again with --fix to cut the torn tail.")
        return 1
    if not yes:
        answer = input(f"This will shrink the AOF segment from {len(data)} bytes to "
                       f"{scan.valid_end} bytes. Continue? [y/N]: ")
        if answer.strip().lower() not in ("y", "yes"):
            print("Aborted.")
            return 1
    with open(path, "r+b") as f:
        f.truncate(scan.valid_end)
        f.flush()
        os.fsync(f.fileno())
    print(f"Successfully truncated AOF segment {path} to {scan.valid_end} bytes")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="streamdb-check-aof", description=__doc__.split("\n")[0])
    ap.add_argument("path", help="an AOF directory (with its manifest) or one segment file")
    ap.add_argument("--fix", action="store_true", help="cut a torn tail off the last segment")
    ap.add_argument("--yes", action="store_true", help="do not ask before fixing")
    args = ap.parse_args(argv)
    if os.path.isdir(args.path):
        manifests = [n for n in os.listdir(args.path) if n.endswith(".manifest")]
        if len(manifests) != 1:
            print(f"{args.path}: expected exactly one .manifest file, found {len(manifests)}")
            return 2
        mpath = os.path.join(args.path, manifests[0])
        try:
            with open(mpath, encoding="utf-8") as f:
                manifest = Manifest.parse(f.read(), mpath)
        except AofError as e:
            print(f"CORRUPT manifest: {e}")
            return 2
        worst = 0
        segs = manifest.segments()
        for i, name in enumerate(segs):
            p = os.path.join(args.path, name)
            if not os.path.exists(p):
                print(f"MISSING segment named by the manifest: {p}")
                return 2
            rc = check_segment(p, args.fix and i == len(segs) - 1, args.yes)
            if rc == 1 and i != len(segs) - 1:
                print(f"{p}: a torn tail in a segment that is not the last one is corruption")
                rc = 2
            worst = max(worst, rc)
        return worst
    return check_segment(args.path, args.fix, args.yes)


if __name__ == "__main__":
    sys.exit(main())
