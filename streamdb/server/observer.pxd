# The compiled form of observer.py's Observer: its state as C fields and the
# per-command hook as a C call from the compiled dispatch (server/core.py
# cimports this).  Every attribute any module sets is here (no __dict__).

from streamdb.dispatch.registry cimport CommandSpec

cdef class Observer:
    cdef public object core, slowlog, latency, monitors, startup_memory, rate_samples
    cdef public dict settings, histograms
    cdef public object last_name
    cdef public list last_counts
    cdef public long long slowlog_next_id
    # command_done's settings (settings_changed copies them from ``settings``)
    cdef public bint latency_tracking
    cdef public long long slowlog_slower_than, latency_threshold_ms

    cpdef command_done(self, CommandSpec spec, client, argv, long long elapsed_ns)
