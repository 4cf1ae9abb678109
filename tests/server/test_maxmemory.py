"""maxmemory against what the data holds, on real servers.

used_memory counts the bytes the allocators hand out (server/limits.py), so
deleting data lowers it even while the freed pages stay resident (RSS), and
the -OOM flag is refreshed from the dispatch as the bytes read near the limit,
not only once per cron tick.
"""

from __future__ import annotations

import socket

import redis

from helpers import ServerProcess, wait_until

KEYS = 40
VALUE = b"v" * 700        # past pymalloc's 512 bytes: sealed node blobs live in malloc
OOM = "command not allowed when used memory > 'maxmemory'"


def _fill_until_oom(r: redis.Redis, limit_batches: int = 400) -> int:
    """XADD in round-robin over KEYS streams (large values and small entries, so
    that what one key holds is spread among the others' memory) until -OOM."""
    written = 0
    for batch in range(limit_batches):
        pipe = r.pipeline(transaction=False)
        for i in range(100):
            key = f"s{(batch * 100 + i) % KEYS}"
            if i % 2:
                pipe.xadd(key, {"payload": VALUE})
            else:
                pipe.xadd(key, {"sensor": str(i), "t": "19.8"})
        results = pipe.execute(raise_on_error=False)
        written += sum(1 for x in results if not isinstance(x, Exception))
        errors = [x for x in results if isinstance(x, Exception)]
        if errors:
            assert all(OOM in str(e) for e in errors), errors[:3]
            return written
    raise AssertionError(f"no -OOM after {written} entries")


def _accepts_writes(r: redis.Redis) -> bool:
    try:
        r.xadd("probe", {"f": "v"})
    except redis.ResponseError as e:
        assert OOM in str(e)
        return False
    return True


def test_deleting_data_makes_room_again_without_a_restart(tmp_path):
    """Three quarters of the data deleted (DEL, XTRIM): used memory falls and writes
    are accepted again, though the process's RSS barely moves."""
    with ServerProcess(tmp_path, "--appendonly", "no", "--save", "") as srv:
        r = redis.Redis(port=srv.port)
        base = r.info("memory")["used_memory"]
        r.config_set("maxmemory", base + 12 * 1024 * 1024)
        written = _fill_until_oom(r)
        assert written > 5000
        assert not _accepts_writes(r)
        full = r.info("memory")
        # Delete three quarters: 29 keys whole, and 1 of the 11 kept trimmed to a quarter.
        r.delete(*[f"s{k}" for k in range(KEYS) if k % 4 != 0][1:])
        r.xtrim("s1", maxlen=r.xlen("s1") // 4)
        wait_until(lambda: _accepts_writes(r), 10, "writes accepted after the deletes")
        after = r.info("memory")
        assert after["used_memory"] < full["used_memory"] - 6 * 1024 * 1024, (full, after)
        # The deleted data's pages are still resident: RSS is not what the limit sees.
        assert after["used_memory_rss"] > after["used_memory"]
        # There is room for about what was deleted.
        more = _fill_until_oom(r)
        assert more > written // 2, (written, more)


def _xadd_pipeline(n: int, value: bytes) -> bytes:
    one = b"*5\r\n$4\r\nXADD\r\n$4\r\nflow\r\n$1\r\n*\r\n$1\r\nf\r\n$%d\r\n%s\r\n" % (len(value), value)
    return one * n


def test_a_pipelining_client_overshoots_maxmemory_by_a_bounded_amount(tmp_path):
    """One sendall of 3,000 XADDs of 1 KiB (3 MiB) against a server 1 MiB under its
    limit: the flag is refreshed as the bytes come in, so the first ones are taken,
    the rest get -OOM, and the data grows past maxmemory by well under the
    pipeline's size.  hz 1: a refresh only on the cron tick (once a second) would
    let the whole pipeline in."""
    with ServerProcess(tmp_path, "--appendonly", "no", "--save", "", "--hz", "1") as srv:
        r = redis.Redis(port=srv.port)
        r.xadd("flow", {"f": "warm-up"})
        base = r.info("memory")["used_memory"]
        maxmemory = base + 1024 * 1024
        r.config_set("maxmemory", maxmemory)
        n, value = 3000, b"x" * 1024
        with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as sock:
            sock.sendall(_xadd_pipeline(n, value) + b"PING\r\n")
            replies = b""
            while not replies.endswith(b"+PONG\r\n"):
                chunk = sock.recv(1 << 20)
                assert chunk, "connection closed"
                replies += chunk
        oom = replies.count(b"-OOM ")
        accepted = n - oom
        assert accepted == r.xlen("flow") - 1
        assert accepted > 0 and oom > n // 3, (accepted, oom)
        used = r.info("memory")["used_memory"]
        assert used - maxmemory < 1024 * 1024, (used - maxmemory, accepted)


def test_info_memory_shows_used_memory_and_rss(tmp_path):
    """INFO memory has Redis's fields: used_memory (the allocators' count, that
    maxmemory compares with) beside used_memory_rss, and the ratio of the two."""
    with ServerProcess(tmp_path, "--appendonly", "no", "--save", "") as srv:
        r = redis.Redis(port=srv.port)
        for i in range(200):
            r.xadd("s", {"payload": VALUE})
        mem = r.info("memory")
        for field in ("used_memory", "used_memory_human", "used_memory_rss",
                      "used_memory_rss_human", "used_memory_peak", "used_memory_peak_human",
                      "used_memory_startup", "used_memory_dataset", "used_memory_overhead",
                      "maxmemory", "maxmemory_human", "maxmemory_policy",
                      "mem_fragmentation_ratio", "mem_fragmentation_bytes",
                      "mem_not_counted_for_evict", "mem_allocator", "total_system_memory"):
            assert field in mem, field
        assert 0 < mem["used_memory"] <= mem["used_memory_peak"]
        assert mem["used_memory_rss"] > 0
        assert mem["used_memory_rss"] != mem["used_memory"]
        assert abs(mem["mem_fragmentation_ratio"]
                   - mem["used_memory_rss"] / mem["used_memory"]) < 0.05
        assert mem["used_memory_dataset"] > 200 * len(VALUE) // 2
        stats = r.memory_stats()
        assert stats["total.allocated"] > 0 and stats["dataset.bytes"] > 0
