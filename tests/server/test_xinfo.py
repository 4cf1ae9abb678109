"""XINFO against a real Redis 7.0: identical where 7.0 and current Redis agree,
and an exact, documented delta where current Redis reports more.

The deltas (current Redis fields that 7.0 does not have), each pinned by a test:

* XINFO STREAM [FULL]: idmp-duration, idmp-maxsize, pids-tracked, iids-tracked,
  iids-added, iids-duplicates right after recorded-first-entry-id (Redis 8.6).
* XINFO CONSUMERS: inactive after idle (Redis 7.2).
* XINFO STREAM FULL consumers: active-time after seen-time (Redis 7.2).
* XINFO STREAM FULL groups: nacked-count after pel-count (XNACK, Redis 8.8).
"""

from __future__ import annotations

import pytest

from resp_raw import RawClient, as_pairs

IDMP_DEFAULTS = [((b"$", b"idmp-duration"), (b":", 100)), ((b"$", b"idmp-maxsize"), (b":", 100)),
                 ((b"$", b"pids-tracked"), (b":", 0)), ((b"$", b"iids-tracked"), (b":", 0)),
                 ((b"$", b"iids-added"), (b":", 0)), ((b"$", b"iids-duplicates"), (b":", 0))]
IDMP_KEYS = [k[1] for k, _ in IDMP_DEFAULTS]
TIME_FIELDS = {b"seen-time", b"active-time", b"idle", b"inactive"}


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def pair(request, server, redis_server):
    """(ours, redis 7.0) raw clients on empty servers, in RESP2 or RESP3."""
    ours = RawClient(server.port, resp3=request.param == 3)
    ref = RawClient(redis_server.port, resp3=request.param == 3)
    ours.call("FLUSHALL")
    ref.call("FLUSHALL")
    yield ours, ref
    ours.close()
    ref.close()


def run_both(pair, *cmd):
    ours, ref = pair
    return ours.call(*cmd), ref.call(*cmd)


def insert_idmp_defaults(reply70):
    """7.0's STREAM [FULL] map with the current-Redis IDMP fields added where they go."""
    t, items = reply70
    pos = next(i for i in range(0, len(items), 2) if items[i][1] == b"recorded-first-entry-id") + 2
    extra = [x for kv in IDMP_DEFAULTS for x in kv]
    return (t, items[:pos] + extra + items[pos:])


def mask_times(v, in_group_pel=False, in_consumer_pel=False):
    """Replace wall-clock values (times, idle) so two servers' replies compare."""
    t, x = v
    if not isinstance(x, list):
        return v
    if t == b"%" or _looks_like_map(x):
        out = []
        for i in range(0, len(x), 2):
            k, val = x[i], x[i + 1]
            if k[1] in TIME_FIELDS:
                val = (val[0], "T")
            elif k[1] == b"pending" and val[0] in (b"*",) and isinstance(val[1], list):
                val = (val[0], [_mask_pel(e) for e in val[1]])
            else:
                val = mask_times(val)
            out += [k, val]
        return (t, out)
    return (t, [mask_times(i) for i in x])


def _looks_like_map(x):
    return len(x) >= 2 and len(x) % 2 == 0 and x[0] == (b"$", b"name") or \
        (len(x) >= 2 and x[0] == (b"$", b"length"))


def _mask_pel(e):
    """A FULL PEL entry: [id, consumer, time, count] (group) or [id, time, count] (consumer)."""
    t, x = e
    x = list(x)
    time_pos = 2 if len(x) == 4 else 1
    x[time_pos] = (x[time_pos][0], "T")
    return (t, x)


def drop_keys(reply, keys):
    t, items = reply
    out = []
    for i in range(0, len(items), 2):
        if items[i][1] not in keys:
            out += [items[i], items[i + 1]]
    return (t, out)


# ---------------------------------------------------------------------------
# STREAM summary and FULL without groups
# ---------------------------------------------------------------------------


def test_stream_summary_is_70_plus_idmp_fields(pair):
    for i in range(1, 6):
        run_both(pair, "XADD", "s", f"{i}-0", "f", f"v{i}", "g", "x")
    run_both(pair, "XDEL", "s", "2-0")
    ours, ref = run_both(pair, "XINFO", "STREAM", "s")
    assert ours == insert_idmp_defaults(ref)
    # the delta is exactly the six IDMP pairs, nothing else
    assert drop_keys(ours, set(IDMP_KEYS)) == ref
    assert len(ours[1]) == len(ref[1]) + 12


def test_empty_stream_first_and_last_entry_are_nil(pair):
    run_both(pair, "XADD", "s", "1-1", "a", "b")
    run_both(pair, "XDEL", "s", "1-1")
    ours, ref = run_both(pair, "XINFO", "STREAM", "s")
    assert ours == insert_idmp_defaults(ref)
    fields = dict(as_pairs(ours))
    assert fields[b"first-entry"][1] is None and fields[b"last-entry"][1] is None
    assert fields[b"recorded-first-entry-id"] == (b"$", b"0-0")
    assert fields[b"max-deleted-entry-id"] == (b"$", b"1-1")
    ours, ref = run_both(pair, "XINFO", "STREAM", "s", "FULL")
    assert ours == insert_idmp_defaults(ref)


@pytest.mark.parametrize("count", [None, "0", "-1", "3", "10", "11"])
def test_full_count(pair, count):
    for i in range(1, 16):
        run_both(pair, "XADD", "s", f"{i}-1", "f", str(i))
    cmd = ["XINFO", "STREAM", "s", "FULL"] + (["COUNT", count] if count else [])
    ours, ref = run_both(pair, *cmd)
    assert ours == insert_idmp_defaults(ref)
    entries = dict(as_pairs(ours))[b"entries"][1]
    # negative counts mean the default (10), 0 means everything
    expected = {None: 10, "0": 15, "-1": 10, "3": 3, "10": 10, "11": 11}[count]
    assert len(entries) == expected


@pytest.mark.parametrize("cmd", [
    ["XINFO", "STREAM", "nokey"],
    ["XINFO", "STREAM", "nokey", "FULL", "bogus"],
    ["XINFO", "STREAM", "nokey", "FULL", "COUNT", "x"],
    ["XINFO", "GROUPS", "nokey"],
    ["XINFO", "CONSUMERS", "nokey", "g"],
    ["XINFO", "STREAM", "str"],
    ["XINFO", "GROUPS", "str"],
    ["XINFO", "CONSUMERS", "str", "g"],
    ["XINFO", "STREAM", "s", "FULLX"],
    ["XINFO", "STREAM", "s", "FULL", "COUNT"],
    ["XINFO", "STREAM", "s", "FULL", "COUNT", "x"],
    ["XINFO", "STREAM", "s", "FULL", "COUNT", "1", "extra"],
    ["XINFO", "STREAM", "s", "FULL", "NOTCOUNT", "1"],
    ["XINFO", "STREAM", "s", "extra", "x"],
    ["XINFO", "BOGUS"],
    ["XINFO", "BOGUS", "s"],
    ["XINFO"],
    ["XINFO", "STREAM"],
    ["XINFO", "GROUPS"],
    ["XINFO", "GROUPS", "s", "x"],
    ["XINFO", "CONSUMERS", "s"],
    ["XINFO", "HELP"],
    ["XINFO", "help"],
    ["XINFO", "HELP", "extra"],
    ["XINFO", "GROUPS", "s"],
])
def test_errors_and_help_identical(pair, cmd):
    run_both(pair, "SET", "str", "v")
    run_both(pair, "XADD", "s", "1-0", "a", "b")
    ours, ref = run_both(pair, *cmd)
    assert ours == ref


# ---------------------------------------------------------------------------
# With consumer groups (needs XGROUP/XREADGROUP on our side)
# ---------------------------------------------------------------------------


@pytest.fixture
def gpair(pair):
    ours, _ = pair
    if ours.call("XGROUP", "HELP")[0] == b"-" and b"unknown command" in ours.call("XGROUP", "HELP")[1]:
        pytest.skip("XGROUP is not implemented on this build yet")
    return pair


def _group_workload(p):
    for i in range(1, 5):
        run_both(p, "XADD", "s", f"{i}-0", "f", str(i))
    run_both(p, "XGROUP", "CREATE", "s", "g", "0")
    run_both(p, "XGROUP", "CREATE", "s", "g2", "$")
    run_both(p, "XGROUP", "CREATE", "s", "a-empty", "0")
    run_both(p, "XREADGROUP", "GROUP", "g", "alice", "COUNT", "2", "STREAMS", "s", ">")
    run_both(p, "XREADGROUP", "GROUP", "g", "bob", "COUNT", "1", "STREAMS", "s", "0")


def test_groups_identical_to_70(gpair):
    _group_workload(gpair)
    ours, ref = run_both(gpair, "XINFO", "GROUPS", "s")
    assert ours == ref
    # a tombstone after the group's last id: lag becomes nil, as in 7.0
    run_both(gpair, "XDEL", "s", "3-0")
    ours, ref = run_both(gpair, "XINFO", "GROUPS", "s")
    assert ours == ref
    lags = [dict(as_pairs(g))[b"lag"] for g in ours[1]]
    assert (b"_", None) in lags or (b"$", None) in lags


def test_consumers_is_70_plus_inactive(gpair):
    _group_workload(gpair)
    ours, ref = run_both(gpair, "XINFO", "CONSUMERS", "s", "g")
    ours, ref = mask_times(ours), mask_times(ref)
    assert len(ours[1]) == len(ref[1]) == 2
    for mine, theirs in zip(ours[1], ref[1]):
        assert drop_keys(mine, {b"inactive"}) == theirs
        keys = [k for k, _ in as_pairs(mine)]
        assert keys == [b"name", b"pending", b"idle", b"inactive"]
    # bob read nothing new (history read of an empty PEL): never active -> -1
    bob = dict(as_pairs(ours[1][1]))
    assert bob[b"name"] == (b"$", b"bob")
    ours_raw, _ = run_both(gpair, "XINFO", "CONSUMERS", "s", "g")
    assert dict(as_pairs(ours_raw[1][1]))[b"inactive"] == (b":", -1)


def test_nogroup_error_identical(gpair):
    _group_workload(gpair)
    ours, ref = run_both(gpair, "XINFO", "CONSUMERS", "s", "nosuch")
    assert ours == ref


def test_full_with_groups_is_70_plus_active_time(gpair):
    _group_workload(gpair)
    for count in ([], ["COUNT", "1"], ["COUNT", "0"]):
        ours, ref = run_both(gpair, "XINFO", "STREAM", "s", "FULL", *count)
        ours, ref = mask_times(ours), mask_times(ref)
        # undo the documented deltas on our side, then it must be 7.0's reply
        ours = drop_keys(ours, set(IDMP_KEYS))
        t, items = ours
        fixed = []
        for i in range(0, len(items), 2):
            k, v = items[i], items[i + 1]
            if k[1] == b"groups":
                v = (v[0], [_drop_consumer_active_time(g) for g in v[1]])
            fixed += [k, v]
        assert (t, fixed) == ref


def _drop_consumer_active_time(group):
    """A FULL group without the fields 7.0 lacks: its nacked-count (0 here) and
    each consumer's active-time."""
    t, items = group
    keys = [k[1] for k in items[0::2]]
    assert keys[keys.index(b"pel-count") + 1] == b"nacked-count"
    out = []
    for i in range(0, len(items), 2):
        k, v = items[i], items[i + 1]
        if k[1] == b"nacked-count":
            assert v == (b":", 0)
            continue
        if k[1] == b"consumers":
            for c in v[1]:
                keys = [kk for kk, _ in as_pairs(c)]
                assert keys == [b"name", b"seen-time", b"active-time", b"pel-count", b"pending"]
            v = (v[0], [drop_keys(c, {b"active-time"}) for c in v[1]])
        out += [k, v]
    return (t, out)


# ---------------------------------------------------------------------------
# In-process (no XGROUP needed): group shapes built through the engine
# ---------------------------------------------------------------------------


def _core_with_groups():
    import streamdb.commands  # noqa: F401  (registers commands)
    from streamdb.engine import ConsumerGroup
    from streamdb.server.core import Core

    now = [1_000_000.0]
    core = Core(clock=lambda: now[0])
    c = core.new_client()
    x = lambda *a: core.execute(c, [v.encode() if isinstance(v, str) else v for v in a])  # noqa: E731
    for i in range(1, 16):
        x("XADD", "s", f"{i}-0", "f", str(i))
    s = core.keyspace[0].data[b"s"]
    g = ConsumerGroup(b"g", last_id=12 << 64, entries_read=12)
    g2 = ConsumerGroup(b"a2")                     # entries-read unknown (nil)
    s.groups = {b"g": g, b"a2": g2}
    t0 = 999_000_000
    alice = g.create_consumer(b"alice", t0)
    bob = g.create_consumer(b"bob", t0 + 5)       # never active
    alice.active_time = t0 + 1
    for i in range(1, 13):
        g.add_pending(i << 64, alice, t0 + i)
    return core, c, x


def test_inprocess_full_group_shape_and_count():
    core, c, x = _core_with_groups()
    full = x("XINFO", "STREAM", "s", "FULL")
    d = dict(full)
    assert [k for k, _ in full][-2:] == [b"entries", b"groups"]
    assert len(d[b"entries"]) == 10
    groups = d[b"groups"]
    assert [dict(gr)[b"name"] for gr in groups] == [b"a2", b"g"]       # byte order
    a2, g = (dict(gr) for gr in groups)
    assert [k for k, _ in groups[1]] == [b"name", b"last-delivered-id", b"entries-read", b"lag",
                                         b"pel-count", b"nacked-count", b"pending", b"consumers"]
    assert a2[b"entries-read"] is None and a2[b"lag"] == 15            # at 0-0, no tombstones
    assert g[b"entries-read"] == 12 and g[b"lag"] == 3
    assert g[b"pel-count"] == 12 and len(g[b"pending"]) == 10         # COUNT default 10
    assert g[b"pending"][0] == [b"1-0", b"alice", 999_000_001, 1]
    alice, bob = (dict(cc) for cc in g[b"consumers"])
    assert alice[b"active-time"] == 999_000_001 and bob[b"active-time"] == -1
    assert alice[b"pel-count"] == 12 and len(alice[b"pending"]) == 10
    assert alice[b"pending"][0] == [b"1-0", 999_000_001, 1]
    g_all = dict(dict(x("XINFO", "STREAM", "s", "FULL", "COUNT", "0"))[b"groups"][1])
    assert len(g_all[b"pending"]) == 12
    g_one = dict(dict(x("XINFO", "STREAM", "s", "FULL", "COUNT", "1"))[b"groups"][1])
    assert len(g_one[b"pending"]) == 1 and len(dict(g_one[b"consumers"][0])[b"pending"]) == 1


def test_inprocess_groups_and_consumers():
    core, c, x = _core_with_groups()
    groups = x("XINFO", "GROUPS", "s")
    assert [[k for k, _ in gr] for gr in groups] == \
        [[b"name", b"consumers", b"pending", b"last-delivered-id", b"entries-read", b"lag"]] * 2
    assert dict(groups[1]) == {b"name": b"g", b"consumers": 2, b"pending": 12,
                               b"last-delivered-id": b"12-0", b"entries-read": 12, b"lag": 3}
    cons = x("XINFO", "CONSUMERS", "s", "g")
    assert [dict(cc) for cc in cons] == [
        {b"name": b"alice", b"pending": 12, b"idle": 1_000_000, b"inactive": 999_999},
        {b"name": b"bob", b"pending": 0, b"idle": 999_995, b"inactive": -1}]
    x("XDEL", "s", "14-0")                                            # tombstone past g's last id
    assert dict(x("XINFO", "GROUPS", "s")[1])[b"lag"] is None
    err = x("XINFO", "CONSUMERS", "s", "nosuch")
    assert err.message == "NOGROUP No such consumer group 'nosuch' for key name 's'"


def test_entriesread_past_entries_added_is_clamped_unlike_70(pair):
    # Deliberate difference: current Redis clamps XGROUP CREATE/SETID ENTRIESREAD to the
    # stream's entries-added (redis/redis#14257); 7.0 stores it and reports a negative lag.
    run_both(pair, "XADD", "s", "1-0", "f", "v")
    run_both(pair, "XADD", "s", "2-0", "f", "v")
    run_both(pair, "XGROUP", "CREATE", "s", "g", "$", "ENTRIESREAD", "100")
    run_both(pair, "XGROUP", "CREATE", "s", "h", "0", "ENTRIESREAD", "1")
    run_both(pair, "XGROUP", "CREATE", "e", "g", "$", "MKSTREAM", "ENTRIESREAD", "5")
    ours, ref = run_both(pair, "XINFO", "GROUPS", "s")
    g70, g = dict(as_pairs(ref[1][0])), dict(as_pairs(ours[1][0]))
    assert (g70[b"entries-read"], g70[b"lag"]) == ((b":", 100), (b":", -98))
    assert (g[b"entries-read"], g[b"lag"]) == ((b":", 2), (b":", 0))
    # Within range, but h's last id (0-0) is behind the stream's first entry: current
    # Redis (redis/redis#13473, #13958) then counts the lag from the stream itself (both
    # entries are ahead of h), where 7.0 trusts the given counter (2 - 1).
    h70, h = dict(as_pairs(ref[1][1])), dict(as_pairs(ours[1][1]))
    assert (h70[b"entries-read"], h70[b"lag"]) == ((b":", 1), (b":", 1))
    assert (h[b"entries-read"], h[b"lag"]) == ((b":", 1), (b":", 2))
    ours, _ = run_both(pair, "XGROUP", "SETID", "s", "h", "1-0", "ENTRIESREAD", "7")
    h = dict(as_pairs(run_both(pair, "XINFO", "GROUPS", "s")[0][1][1]))
    assert (h[b"entries-read"], h[b"lag"]) == ((b":", 2), (b":", 0))
    e = dict(as_pairs(run_both(pair, "XINFO", "GROUPS", "e")[0][1][0]))
    assert (e[b"entries-read"], e[b"lag"]) == ((b":", 0), (b":", 0))
    # the clamped value is what the group goes on from
    run_both(pair, "XADD", "s", "3-0", "f", "v")
    g = dict(as_pairs(run_both(pair, "XINFO", "GROUPS", "s")[0][1][0]))
    assert (g[b"entries-read"], g[b"lag"]) == ((b":", 2), (b":", 1))


def test_lag_of_an_emptied_stream_is_zero_unlike_70(pair):
    # Deliberate difference (stream-cgroups.tcl, "Consumer group lag with XTRIM": "When
    # all the entries were deleted, the lag is always 0"): after XTRIM MAXLEN 0 the
    # group has nothing left to read; 7.0 still counts the entry added since its read.
    for i in range(1, 6):
        run_both(pair, "XADD", "x", f"{i}-0", "data", "v")
    run_both(pair, "XGROUP", "CREATE", "x", "g", "0")
    run_both(pair, "XREADGROUP", "GROUP", "g", "alice", "STREAMS", "x", ">")
    run_both(pair, "XADD", "x", "6-0", "data", "f")
    ours, ref = run_both(pair, "XINFO", "GROUPS", "x")
    assert dict(as_pairs(ours[1][0]))[b"lag"] == dict(as_pairs(ref[1][0]))[b"lag"] == (b":", 1)
    run_both(pair, "XTRIM", "x", "MAXLEN", "0")
    ours, ref = run_both(pair, "XINFO", "GROUPS", "x")
    g70, g = dict(as_pairs(ref[1][0])), dict(as_pairs(ours[1][0]))
    assert (g70[b"entries-read"], g70[b"lag"]) == ((b":", 5), (b":", 1))
    assert (g[b"entries-read"], g[b"lag"]) == ((b":", 5), (b":", 0))
