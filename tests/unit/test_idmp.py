"""engine/idmp.py: per-producer iid maps, eviction by size and age, determinism."""

from streamdb.engine.idmp import IdmpState, auto_iid
from streamdb.engine.ids import make_id


def sid(ms, seq=0):
    return make_id(ms, seq)


def test_lookup_record_and_counters():
    st = IdmpState()
    assert st.lookup(b"p", b"i", 1000, 100) is None
    st.record(b"p", b"i", sid(1000), 100, 100)
    assert st.lookup(b"p", b"i", 1000, 100) == sid(1000)
    assert st.lookup(b"q", b"i", 1000, 100) is None          # producers are separate
    st.record(b"q", b"i", sid(1001), 100, 100)
    assert (st.pids_tracked(), st.iids_tracked(), st.added) == (2, 2, 2)


def test_expiry_is_by_age_and_lookup_is_pure():
    st = IdmpState()
    st.record(b"p", b"a", sid(1000), 2, 100)
    st.record(b"p", b"b", sid(2500), 2, 100)
    assert st.lookup(b"p", b"a", 2999, 2) == sid(1000)
    assert st.lookup(b"p", b"a", 3000, 2) is None             # 2 s old: forgotten
    assert st.iids_tracked() == 2                             # ... but lookup changed nothing
    st.record(b"p", b"c", sid(3000), 2, 100)                  # a record evicts by its id's time
    assert [i for _, i, _, _ in st.items()] == [b"b", b"c"]


def test_maxsize_evicts_oldest_per_producer():
    st = IdmpState()
    for n in range(5):
        st.record(b"p", b"i%d" % n, sid(1000 + n), 100, 3)
    st.record(b"q", b"x", sid(2000), 100, 3)
    assert [i for p, i, _, _ in st.items() if p == b"p"] == [b"i2", b"i3", b"i4"]
    assert st.iids_tracked() == 4 and st.added == 6


def test_reusing_an_expired_iid_moves_it_to_the_end():
    st = IdmpState()
    st.record(b"p", b"a", sid(1000), 1, 10)
    st.record(b"p", b"b", sid(1500), 1, 10)
    st.record(b"p", b"a", sid(1900), 1, 10)     # a (1000) expired at 1900 -> replaced
    assert list(st.items()) == [(b"p", b"b", sid(1500), 1500), (b"p", b"a", sid(1900), 1900)]
    assert st.mapped(b"p", b"a") == (sid(1900), 1900)


def test_configure_clears_only_on_change():
    st = IdmpState()
    st.record(b"p", b"a", sid(1000), 100, 100)
    assert st.configure(100, None, 100, 100) is False        # same as the default in force
    assert st.iids_tracked() == 1
    assert st.configure(None, 50, 100, 100) is True
    assert st.iids_tracked() == 0 and st.pids_tracked() == 0 and st.added == 1
    assert st.effective(100, 100) == (100, 50)
    assert st.effective(7, 9) == (100, 50)                    # both pinned by XCFGSET now
    assert IdmpState().effective(7, 9) == (7, 9)             # unset: the server config applies


def test_same_operations_give_same_state():
    def build(times):
        st = IdmpState()
        for n, t in enumerate(times):
            st.record(b"p%d" % (n % 2), b"i%d" % (n % 5), sid(t, n), 3, 4)
        return list(st.items()), st.added
    times = [1000, 1200, 2500, 4000, 4001, 9000, 9001, 9002, 20000]
    assert build(times) == build(times)


def test_auto_iid_is_order_independent_and_unambiguous():
    assert auto_iid([b"a", b"1", b"b", b"2"]) == auto_iid([b"b", b"2", b"a", b"1"])
    assert auto_iid([b"a", b"1", b"b", b"2"]) != auto_iid([b"a", b"2", b"b", b"1"])
    assert auto_iid([b"ab", b"c"]) != auto_iid([b"a", b"bc"])
    assert auto_iid([b"f", b""]) != auto_iid([b"f", b"x"])


def test_dump_load_roundtrip():
    st = IdmpState()
    st.configure(30, None, 100, 100)
    st.record(b"p", b"\x00\xff", sid(5, 7), 30, 100)
    st.duplicates = 3
    back = IdmpState.load(st.dump())
    assert list(back.items()) == list(st.items())
    assert (back.duration, back.maxsize, back.added, back.duplicates) == (30, None, 1, 3)
