"""streamdb-snapshot: inspect a snapshot (an LMDB environment) without a server.

    streamdb-snapshot DATA_DIR/snapshot.lmdb            summary + per-key table
    streamdb-snapshot DATA_DIR/snapshot.lmdb --verify   also decode every key and check every checksum

Shows the AOF position the snapshot covers, and for each key: type, entries,
sealed nodes and their bytes, consumer groups with pending counts.
"""

from __future__ import annotations

import argparse
import struct
from datetime import datetime, timezone
import sys

import lmdb
import msgpack

from ..persistence.snapshot import SnapshotError, _node_prefix, _open, _uncrc, snapshot_info
from .progress import Progress


def iso_utc(unix_ms: int | None) -> str:
    """``2026-01-02T03:04:05.678Z (1767323045678 ms)``: readable, and the raw value for scripts."""
    if unix_ms is None:
        return "unknown"
    moment = datetime.fromtimestamp(unix_ms / 1000, tz=timezone.utc)
    return f"{moment.isoformat(timespec='milliseconds').replace('+00:00', 'Z')} ({unix_ms} ms)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="streamdb-snapshot", description=__doc__.split("\n")[0])
    ap.add_argument("path", help="the snapshot environment directory (e.g. data/snapshot.lmdb)")
    ap.add_argument("--verify", action="store_true", help="decode every key and check every checksum")
    ap.add_argument("--limit", type=int, default=50, help="keys to list (default 50)")
    args = ap.parse_args(argv)
    try:
        info = snapshot_info(args.path)
    except SnapshotError as e:
        print(f"ERROR: {e}")
        return 2
    if info is None:
        print(f"{args.path}: no snapshot here")
        return 2
    print(f"snapshot: {args.path}")
    print(f"  covers AOF segments up to seq: {info.get('aof_seq')}")
    print(f"  written at: {iso_utc(info.get('time_ms'))}   keys: {info.get('keys')}")
    try:
        env = _open(args.path, readonly=True)
    except SnapshotError as e:
        print(f"ERROR: {e}")
        return 2
    bad = 0
    try:
        keys_db = env.open_db(b"keys", create=False)
        nodes_db = env.open_db(b"nodes", create=False)
        with env.begin() as txn:
            total = txn.stat(keys_db)["entries"]
            print(f"  node records: {txn.stat(nodes_db)['entries']}")
            print(f"{'db':>3} {'key':<32} {'type':<7} {'entries':>10} {'nodes':>7} {'node bytes':>11} groups (pending)")
            prog = Progress(total, "verifying") if args.verify else None
            for n, (k, raw) in enumerate(txn.cursor(db=keys_db), 1):
                dbi = struct.unpack(">I", k[:4])[0]
                key = bytes(k[4:])
                try:
                    expire, doc = msgpack.unpackb(_uncrc(bytes(raw), f"key {key!r}", args.path), raw=True)
                    d = msgpack.unpackb(doc, raw=False, strict_map_key=False)
                except (SnapshotError, ValueError) as e:
                    print(f"BAD {dbi} {key!r}: {e}")
                    bad += 1
                    continue
                nodes = nbytes = 0
                prefix = _node_prefix(dbi, key)
                cur = txn.cursor(db=nodes_db)
                if cur.set_range(prefix):
                    for nk, blob in cur:
                        if not nk.startswith(prefix):
                            break
                        nodes += 1
                        nbytes += len(blob)
                        if args.verify:
                            try:
                                _uncrc(bytes(blob), f"a node of {key!r}", args.path)
                            except SnapshotError as e:
                                print(f"BAD {e}")
                                bad += 1
                if args.verify:
                    try:
                        from ..persistence.codec import decode_value

                        def fetch(first, _p=prefix):
                            return _uncrc(bytes(txn.get(_p + first.to_bytes(16, "big"), db=nodes_db)),
                                          "node", args.path)
                        decode_value(doc, fetch)
                    except Exception as e:  # noqa: BLE001 - report, keep going
                        print(f"BAD {dbi} {key!r}: {e}")
                        bad += 1
                    prog.update(n)
                if n <= args.limit:
                    if d.get("t") == "stream":
                        groups = ", ".join(f"{g[0].decode('utf-8', 'replace')} ({len(g[4])})" for g in d["groups"])
                        print(f"{dbi:>3} {key.decode('utf-8', 'replace')[:32]:<32} {'stream':<7} "
                              f"{d['length']:>10} {nodes:>7} {nbytes:>11} {groups}")
                    else:
                        print(f"{dbi:>3} {key.decode('utf-8', 'replace')[:32]:<32} {'string':<7} "
                              f"{'':>10} {'':>7} {'':>11}")
            if prog:
                prog.finish()
    except lmdb.Error as e:
        print(f"ERROR: cannot read {args.path}: {e}")
        return 2
    finally:
        env.close()
    if args.verify:
        print("verify: OK" if not bad else f"verify: {bad} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
