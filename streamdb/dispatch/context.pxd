# The compiled form of context.py's Ctx: its attributes as C fields, so that the
# compiled dispatch (server/core.py cimports this) makes and reads one without
# look-ups.  Every attribute any handler sets is here (a compiled Ctx has no __dict__).

from streamdb.engine.keyspace cimport Database
from streamdb.dispatch.client cimport Client

cdef class BlockRequest:
    cdef public object keys, timeout_ms, serve, timeout_reply, command, next_wake

cdef class Ctx:
    cdef public object core, client, now_ms, argv, config
    cdef public Database db
    cdef public list effects
    cdef public bint in_exec, replaying
    cdef public Py_ssize_t dirty
    cdef public long notify_flags
    cdef public object notifications

    cpdef propagate(self, list argv, Py_ssize_t dirty=*)
    cpdef notify(self, event, key, Py_ssize_t db=*)
    cpdef lookup(self, key, bint read=*)
    cpdef lookup_stream(self, key, bint read=*)

cdef void _fill(Ctx ctx, core, Client client, Database db, config, now_ms, argv,
                bint in_exec, bint replaying, long notify_flags)
cpdef Ctx new_ctx(core, Client client, Database db, config, now_ms, argv,
                  bint in_exec, bint replaying, long notify_flags)
