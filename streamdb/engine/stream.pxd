# The compiled form of stream.py's Node and Stream: their attributes as C fields
# and the hot methods as C calls, so that compiled callers that cimport this
# (commands/streams.py's XADD) read a stream without look-ups.  Every attribute
# any module sets is here (a compiled Node or Stream has no __dict__); the fields
# are public because the persistence, commands and spark layers read and set them.

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.long cimport PyLong_AsUnsignedLongLongMask
from libc.stdlib cimport realloc
from libc.string cimport memcmp, memcpy


@cython.final
cdef class _Decoded:
    cdef list ids, master, rows, entries

    cpdef list build_entries(self)

@cython.final
cdef class _BlobReader:
    cdef bytes blob
    cdef unsigned char *p
    cdef Py_ssize_t pos, end

    cdef unsigned long long varint(self)
    cdef Py_ssize_t count(self, Py_ssize_t most)
    cdef bytes item(self)

@cython.final
@cython.no_gc
cdef class Node:
    cdef public object first, last, total, live, nbytes
    cdef public list master, ids, entries
    cdef public bytes blob
    cdef public set deleted
    cdef public object where

    cpdef seal(self)
    cpdef bytes sealed_blob(self)
    cpdef list master_fields(self)
    cpdef tuple contents(self)
    cdef _Decoded _decoded(self)
    cpdef bint is_deleted(self, sid)

@cython.final
cdef class Stream:
    cdef public list nodes, firsts
    cdef public object length, last_id, entries_added, max_deleted_id
    cdef public dict groups
    cdef public object idmp
    cdef public object retention

    cpdef append(self, sid, list fv, max_entries, max_bytes)
    cdef Node _open_node(self, sid, list fv)
    cdef void _drop_node(self, Py_ssize_t i)
