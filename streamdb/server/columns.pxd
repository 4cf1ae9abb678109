# The compiled form of columns.py: the C functions its C loops call.  Only cimports
# and the one C helper: columns.py has no classes.

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.long cimport PyLong_AsLongLongAndOverflow
from libc.string cimport memcpy

cdef bytes _int_text(value, bytes suffix, bint milliseconds)
