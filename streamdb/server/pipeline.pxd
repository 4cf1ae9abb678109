# The compiled form of pipeline.py: a connection's RequestLoop, whose fields are C
# fields, reading the Core's, the Client's and the parser's (core.pxd, client.pxd,
# protocol/_resp.pxd) without look-ups.

from streamdb.protocol._resp cimport RequestParser, encode_reply, encode_reply_pieces
from streamdb.dispatch.client cimport Client, Outbox
from streamdb.server.core cimport Core, Stats

cdef class RequestLoop(Outbox):
    cdef Core core
    cdef Client client
    cdef RequestParser parser
    cdef readonly list out
    cdef public object transport, conn, on_output, on_resume
    cdef public dict to_flush
    cdef public bint closing
    cdef public object soft_limit_since
    cdef bint pieces_queued

    cpdef void data_received(self, data)
    cpdef int serve(self, data)
    cdef int _run_requests(self)
    cdef void _join_turn(self)
    cpdef bint write_out(self, transport)

cpdef tuple flush_connections(dict conns)
