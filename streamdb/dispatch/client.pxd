# The compiled form of client.py's Client: its attributes as C fields, so that the
# compiled dispatch (server/core.py cimports this) reads them without a look-up; and
# of its Outbox, whose deliver the compiled dispatch calls in C.
# Every attribute any module sets is here (a compiled Client has no __dict__).

cdef class Outbox:
    cpdef void deliver(self, reply)
    cpdef void deliver_encoded(self, data)

cdef class Client:
    cdef public object id, name, user, addr, laddr, created_ms
    cdef public Py_ssize_t db
    cdef public int resp
    cdef public bint authenticated, in_multi, multi_error, dirty_cas, close_after_reply
    cdef public long long last_ms
    cdef public str last_cmd, kind
    cdef public list multi_queue, watched
    cdef public object blocked, block_timer, wake_timer, close, lib_name, lib_ver, flags
    cdef public Outbox outbox
    cdef public object query_buffer, output_size, woff, aof_woff, acl_check, pubsub
