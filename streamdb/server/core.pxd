# The compiled form of core.py: the dispatch's per-request state as C fields and
# its helpers as C calls.  Core keeps a __dict__ for the many attributes only the
# subsystems read (persistence, replication, hooks): only the hot ones are here.

from posix.time cimport CLOCK_REALTIME, clock_gettime, timespec

from streamdb.dispatch.context cimport BlockRequest, Ctx, new_ctx
from streamdb.server.observer cimport Observer
from streamdb.dispatch.effects cimport EffectBatch, new_batch
from streamdb.dispatch.registry cimport CommandSpec, lookup, resolve
from streamdb.engine.keyspace cimport Database, Keyspace
from streamdb.dispatch.client cimport Client

cdef class CommandStats:
    cdef public long long calls, usec, rejected, failed

cdef class Stats:
    cdef public long long commands_processed, connections_received, rejected_connections
    cdef public long long output_buffer_limit_disconnections, query_buffer_limit_disconnections
    cdef public long long expired_keys, error_replies, net_input_bytes, net_output_bytes
    cdef public long long keyspace_hits, keyspace_misses, reads_processed, writes_processed
    cdef public object errors, commands

cdef class Core:
    cdef dict __dict__
    cdef public object config, clock, write_refusal, save_refusal, replicas_refusal, current_client
    cdef public Keyspace keyspace
    cdef public Observer observe
    cdef public Stats stats
    cdef public bint is_replica, loading, out_of_memory
    cdef public Py_ssize_t dirty
    cdef public long notify_flags
    cdef public long long memory_recheck_input
    cdef public Py_ssize_t watched_keys
    cdef public dict ready_keys, blocking_keys
    cdef public list effect_sinks
    cdef object _last_spec, _last_table
    cdef CommandStats _last_stats

    cpdef execute(self, Client client, argv)
    cdef long long _now_ms_at(self, long long wall_ns)
    cdef _refuse(self, Client client, err, name)
    cdef _abort_exec(self, Client client, str reason)
    cdef Ctx _ctx_for(self, Client client, now, argv, bint in_exec)
    cpdef _call(self, Ctx ctx, CommandSpec spec, argv, long long started_ns)
    cpdef _emit(self, Py_ssize_t db_index, list effects, bint atomic=*)

cdef long long _wall_clock_ns()
cdef bint _wrong_arity(CommandSpec spec, Py_ssize_t argc)
