"""Compare a primary and a replica: DEBUG DIGEST, per-stream detail when they differ, lag.

    streamdb-compare-replica --primary 127.0.0.1:6379 --replica 127.0.0.1:6380

Lag in bytes is the primary's master_repl_offset minus the replica's
slave_repl_offset.  Lag in seconds is measured: the time until the replica's
offset reaches the primary's offset as read at the start (bounded by --timeout).
The digests are compared once the replica caught up; under continuous writes the
data may still move between the two DEBUG DIGEST calls, so a mismatch is
retried (--retries) before the per-stream detail is printed.

Per stream: length, last id, entries-added, max-deleted id, DEBUG DIGEST-VALUE,
and per group: last-delivered id, entries-read, lag, the PEL (id, owner, delivery
count) and the consumers with their pending counts.

Exit status: 0 equal, 1 different, 2 could not compare (connection, timeout).
"""

from __future__ import annotations

import argparse
import sys
import time

import redis


def _conn(addr: str, password: str | None) -> redis.Redis:
    host, _, port = addr.rpartition(":")
    return redis.Redis(host=host or "127.0.0.1", port=int(port), password=password,
                       decode_responses=False, socket_timeout=10)


def _offset(r: redis.Redis, field: str) -> int:
    return int(r.info("replication").get(field, 0))


def _fields(reply) -> dict:
    """An XINFO reply as {str field: value}, whether redis-py parsed it or not."""
    if not isinstance(reply, dict):
        reply = dict(zip(reply[::2], reply[1::2]))
    return {(k.decode() if isinstance(k, bytes) else k): v for k, v in reply.items()}


def stream_detail(r: redis.Redis, db: int, key: bytes) -> dict:
    r.execute_command("SELECT", db)
    out: dict = {"type": r.type(key)}
    if out["type"] != b"stream":
        out["digest"] = r.execute_command("DEBUG", "DIGEST-VALUE", key)
        return out
    info = _fields(r.execute_command("XINFO", "STREAM", key))
    out.update({"length": info.get("length"), "last_id": info.get("last-generated-id"),
                "entries_added": info.get("entries-added"),
                "max_deleted_id": info.get("max-deleted-entry-id"),
                "digest": r.execute_command("DEBUG", "DIGEST-VALUE", key)})
    out["groups"] = group_detail(r, key)
    return out


def group_detail(r: redis.Redis, key: bytes) -> dict:
    """Per group of a stream (in the connection's current db): last-delivered id,
    entries-read, lag, the whole PEL (id, owner, delivery count) and the consumers
    with their pending counts.  Idle times are left out: they are clock readings."""
    groups = {}
    for g in r.execute_command("XINFO", "GROUPS", key):
        g = _fields(g)
        name = g["name"]
        pel = r.xpending_range(key, name, "-", "+", max(int(g["pending"]), 1))
        consumers = [_fields(c) for c in r.execute_command("XINFO", "CONSUMERS", key, name)]
        groups[name] = {"last_delivered_id": g.get("last-delivered-id"),
                        "entries_read": g.get("entries-read"), "lag": g.get("lag"),
                        "pel": [(e["message_id"], e["consumer"], e["times_delivered"])
                                for e in pel],
                        "consumers": sorted((c["name"], c["pending"]) for c in consumers)}
    return groups


def all_group_detail(r: redis.Redis) -> dict:
    """{(db, stream key): group_detail} for every stream with groups, in every db."""
    out = {}
    for name in r.info("keyspace"):
        db = int(str(name)[2:])
        r.execute_command("SELECT", db)
        for key in r.scan_iter(count=1000, _type="stream"):
            detail = group_detail(r, key)
            if detail:
                out[(db, key)] = detail
    r.execute_command("SELECT", 0)
    return out


def _keys(r: redis.Redis, db: int) -> set[bytes]:
    r.execute_command("SELECT", db)
    return set(r.scan_iter(count=1000))


def compare_detail(p: redis.Redis, rep: redis.Redis) -> list[str]:
    """Human-readable differences, key by key."""
    dbs = set()
    for r in (p, rep):
        for name in r.info("keyspace"):
            dbs.add(int(str(name)[2:]))
    diffs = []
    for db in sorted(dbs):
        pk, rk = _keys(p, db), _keys(rep, db)
        for key in sorted(pk - rk):
            diffs.append(f"db{db} {key!r}: missing on the replica")
        for key in sorted(rk - pk):
            diffs.append(f"db{db} {key!r}: only on the replica")
        for key in sorted(pk & rk):
            a, b = stream_detail(p, db, key), stream_detail(rep, db, key)
            if a == b:
                continue
            for field in sorted(set(a) | set(b)):
                if field == "groups":
                    ga, gb = a.get("groups", {}), b.get("groups", {})
                    for g in sorted(set(ga) | set(gb)):
                        if ga.get(g) != gb.get(g):
                            diffs.append(f"db{db} {key!r} group {g!r}: primary {ga.get(g)} "
                                         f"replica {gb.get(g)}")
                elif a.get(field) != b.get(field):
                    diffs.append(f"db{db} {key!r} {field}: primary {a.get(field)!r} "
                                 f"replica {b.get(field)!r}")
    return diffs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="streamdb-compare-replica", description=__doc__.split("\n\n")[0])
    ap.add_argument("--primary", required=True, help="host:port")
    ap.add_argument("--replica", required=True, help="host:port")
    ap.add_argument("--password", default=None)
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the replica")
    ap.add_argument("--retries", type=int, default=3)
    args = ap.parse_args(argv)
    try:
        p, rep = _conn(args.primary, args.password), _conn(args.replica, args.password)
        # Waiting for a server that follows nobody (say, one just promoted) to catch up
        # would only time out: say what it is at once.
        role = rep.info("replication").get("role")
        if role != "slave":
            print(f"error: {args.replica} is not a replica (role: {role}); nothing to compare "
                  "it with", file=sys.stderr)
            return 2
        t0 = time.monotonic()
        target = _offset(p, "master_repl_offset")
        roff = _offset(rep, "slave_repl_offset")
        print(f"lag_bytes: {target - roff} (primary offset {target}, replica offset {roff})")
        deadline = t0 + args.timeout
        while roff < target and time.monotonic() < deadline:
            time.sleep(0.005)
            roff = _offset(rep, "slave_repl_offset")
        if roff < target:
            print(f"lag_seconds: >{args.timeout:.3f} (replica did not catch up)")
            return 2
        print(f"lag_seconds: {time.monotonic() - t0:.3f}")
        for attempt in range(max(args.retries, 1)):
            target = _offset(p, "master_repl_offset")
            while _offset(rep, "slave_repl_offset") < target and time.monotonic() < deadline:
                time.sleep(0.005)
            dp = p.execute_command("DEBUG", "DIGEST")
            dr = rep.execute_command("DEBUG", "DIGEST")
            if dp == dr:
                print(f"digest: equal {dp.decode()}")
                return 0
            time.sleep(0.1)
        print(f"digest: DIFFERENT primary {dp.decode()} replica {dr.decode()}")
        for line in compare_detail(p, rep):
            print("  " + line)
        return 1
    except (redis.RedisError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
