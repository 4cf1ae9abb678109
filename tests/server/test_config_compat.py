"""CONFIG SET/GET of the directives Redis test harnesses and clients set, side by side with
redis-server 7.0: the same replies, the same values back, the same errors.

Redis's own test suite in external mode and redis-py's tests CONFIG SET these before
their tests; StreamDB stores them (most have no effect here, as each directive's doc in
streamdb/config.py says) so that those suites run.
"""

from __future__ import annotations

import pytest

from resp_raw import RawClient, plain

# (directive, value) as harnesses set them; old names (ziplist, lua-time-limit, slaves) too.
HARNESS_SETS = [
    ("lazyfree-lazy-user-del", "yes"), ("lazyfree-lazy-user-flush", "yes"),
    ("lazyfree-lazy-eviction", "yes"), ("lazyfree-lazy-expire", "yes"),
    ("lazyfree-lazy-server-del", "yes"), ("replica-lazy-flush", "yes"),
    ("key-load-delay", "100"), ("rdb-key-save-delay", "10"),
    ("loading-process-events-interval-bytes", "1024"),
    ("list-max-listpack-size", "4"), ("list-max-ziplist-size", "-1"), ("list-compress-depth", "1"),
    ("set-max-intset-entries", "10"), ("hash-max-listpack-entries", "1"),
    ("hash-max-ziplist-value", "16"), ("zset-max-listpack-entries", "1"),
    ("zset-max-ziplist-value", "1"), ("hll-sparse-max-bytes", "100"),
    ("activedefrag", "no"), ("active-defrag-cycle-max", "30"), ("active-expire-effort", "5"),
    ("hz", "100"), ("hz", "0"), ("hz", "1000"), ("dynamic-hz", "no"), ("activerehashing", "no"),
    ("latency-tracking", "no"), ("latency-tracking-info-percentiles", "50 99.5 100"),
    ("notify-keyspace-events", "KEA"), ("notify-keyspace-events", "gxK"),
    ("notify-keyspace-events", "Em$l"), ("notify-keyspace-events", ""),
    ("busy-reply-threshold", "100"), ("lua-time-limit", "200"),
    ("repl-diskless-sync", "no"), ("repl-diskless-sync-delay", "0"),
    ("repl-diskless-load", "swapdb"), ("min-replicas-to-write", "0"), ("min-slaves-max-lag", "20"),
    ("replica-serve-stale-data", "no"), ("replica-ignore-maxmemory", "no"),
    ("maxmemory-samples", "10"), ("maxmemory-eviction-tenacity", "50"),
    ("lfu-log-factor", "20"), ("lfu-decay-time", "2"), ("tracking-table-max-keys", "10"),
    ("stop-writes-on-bgsave-error", "no"), ("rdbcompression", "no"),
    ("aof-rewrite-incremental-fsync", "no"), ("rdb-save-incremental-fsync", "no"),
    ("aof-use-rdb-preamble", "no"), ("shutdown-timeout", "5"), ("crash-log-enabled", "no"),
    ("oom-score-adj", "no"), ("propagation-error-behavior", "panic"),
]

BAD_SETS = [
    ("lazyfree-lazy-user-del", "maybe"), ("active-expire-effort", "11"),
    ("repl-diskless-load", "bogus"), ("notify-keyspace-events", "Q"),
    ("latency-tracking-info-percentiles", "101"), ("io-threads", "2"),
    ("cluster-enabled", "yes"), ("set-proc-title", "no"), ("rdbchecksum", "no"), ("nosuch-directive", "1"),
    ("aof-use-rdb-preamble", "maybe"), ("maxmemory-samples", "x"),
]


def _get(client, name: str):
    return plain(client.call("CONFIG", "GET", name))


@pytest.fixture
def both(server, redis_server):
    """(ours, redis 7.0) raw clients; every directive this module touches is put back."""
    ours, ref = RawClient(server.port), RawClient(redis_server.port)
    names = sorted({n for n, _ in HARNESS_SETS})
    saved = [(c, _get(c, n)) for c in (ours, ref) for n in names]
    yield ours, ref
    for c, pair in saved:
        if pair:
            assert plain(c.call("CONFIG", "SET", *pair)) == b"OK", pair
    ours.close()
    ref.close()


def test_defaults_are_redis_defaults(both):
    ours, ref = both
    for name in sorted({n for n, _ in HARNESS_SETS} - {"hz", "latency-tracking"}):
        assert _get(ours, name) == _get(ref, name), name


def test_harness_directives_are_set_and_read_back_as_redis_does(both):
    ours, ref = both
    for name, value in HARNESS_SETS:
        assert ours.call("CONFIG", "SET", name, value) == ref.call("CONFIG", "SET", name, value), name
        assert _get(ours, name) == _get(ref, name), (name, value)


def test_old_names_read_and_write_the_same_directive(both):
    ours, ref = both
    for c in both:
        assert plain(c.call("CONFIG", "SET", "hash-max-ziplist-entries", "100")) == b"OK"
    assert _get(ours, "hash-max-listpack-entries") == [b"hash-max-listpack-entries", b"100"]

    def as_dict(c, pattern):
        flat = _get(c, pattern)
        return dict(zip(flat[0::2], flat[1::2]))
    for pattern in ("*ziplist*", "hash-max-*", "min-slaves-*", "slave-priority", "slave-read-only",
                    "slave-serve-stale-data", "repl-ping-slave-period", "lua-time-limit"):
        assert as_dict(ours, pattern) == as_dict(ref, pattern), pattern


def test_bad_values_and_unknown_directives_get_redis_errors(both):
    ours, ref = both
    for name, value in BAD_SETS:
        mine, theirs = ours.call("CONFIG", "SET", name, value), ref.call("CONFIG", "SET", name, value)
        assert mine[0] == b"-" and mine == theirs, (name, value)
