# The compiled parser's fields and C-callable methods, and the encoder: the compiled
# request loop (server/pipeline.pxd) cimports RequestParser and encode_reply.

cdef class RequestParser:
    cdef unsigned char* buf
    cdef Py_ssize_t n           # bytes in buf
    cdef Py_ssize_t cap
    cdef Py_ssize_t pos         # first unconsumed byte
    cdef public long long max_bulk_len
    # When False (requirepass set, not yet authenticated) Redis caps the request size.
    cdef public bint authenticated
    cdef list argv              # the multibulk in progress (its bulks so far), or None
    cdef Py_ssize_t argc        # bulks it still needs
    cdef Py_ssize_t filled      # bulks it has (argv's slots filled, when preallocated)
    # A big bulk received in place (see _resp.pyx): its object, or None; bytes in it,
    # CRLF bytes still to skip, and the size of its header (for buffered()).
    cdef bytes big
    cdef Py_ssize_t big_filled
    cdef Py_ssize_t big_skip
    cdef Py_ssize_t big_head

    cpdef feed(self, data)
    cpdef Py_ssize_t buffered(self)
    cpdef next_command(self)
    cdef bint start_multibulk(self) except -1
    cdef bint start_big(self, Py_ssize_t head, const unsigned char* got, Py_ssize_t k, long long size) except -1
    cdef Py_ssize_t fill_big(self, const char* data, Py_ssize_t k)
    cdef list bulks(self)
    cdef list inline(self)

cpdef encode_reply(value, bint resp3)
cpdef encode_reply_pieces(value, bint resp3)
cpdef bytes encode_commands(list commands)
