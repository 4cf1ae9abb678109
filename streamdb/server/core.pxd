# The compiled form of core.py: the dispatch's per-request state as C fields and
# its helpers as C calls.  Core keeps a __dict__ for the many attributes only the
# subsystems read (persistence, replication, hooks): only the hot ones are here.

from streamdb.commands.context cimport Ctx
from streamdb.commands.registry cimport CommandSpec
from streamdb.server.client cimport Client

cdef class CommandStats:
    cdef public long long calls, usec, rejected, failed

cdef class Core:
    cdef dict __dict__
    cdef public object config, keyspace, clock, stats, observe, write_refusal, current_client
    cdef public bint is_replica, loading, out_of_memory
    cdef public Py_ssize_t dirty
    cdef public dict ready_keys, blocking_keys
    cdef public list effect_sinks

    cpdef tuple _call(self, Client client, CommandSpec spec, argv, now, bint in_exec=*)
