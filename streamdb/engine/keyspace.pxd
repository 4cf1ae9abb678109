# The compiled form of keyspace.py: a Database's and the Keyspace's attributes as
# C fields, so that compiled callers that cimport this (dispatch/context.py's key
# look-ups, server/core.py's dispatch) read them without look-ups.  Every
# attribute any module sets is here (a compiled Database has no __dict__).

cdef class Database:
    cdef public Py_ssize_t index
    cdef public dict data, expires, watchers

    cpdef bint is_expired(self, key, now_ms)

cdef class Keyspace:
    cdef public list dbs
