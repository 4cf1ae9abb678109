# The compiled form of ids.py: format_id as a C call for the compiled handlers
# that cimport it (every reply that holds an id formats it).

from cpython.long cimport PyLong_AsUnsignedLongLongMask


cdef extern from "Python.h":
    # Sign and bit count of an int, read from the int itself (format_id's range test).
    int _PyLong_Sign(object v)
    size_t _PyLong_NumBits(object v) except? <size_t>-1

cpdef bytes format_id(sid)
