# The compiled form of pipeline.py: a connection's RequestLoop, whose fields are C
# fields, reading the Core's and the Client's (core.pxd, client.pxd) without look-ups.

from streamdb.server.client cimport Client
from streamdb.server.core cimport Core, Stats

cdef class RequestLoop:
    cdef Core core
    cdef Client client
    cdef object parser, next_command, execute
    cdef list out

    cpdef int serve(self, data)
    cdef int _run_requests(self)
    cpdef bint write_out(self, transport)
