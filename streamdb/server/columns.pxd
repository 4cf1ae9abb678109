# The compiled form of columns.py: the C functions its C loops call (ids.py's
# put_digits among them).  Only cimports and the one C helper: no classes.

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.long cimport PyLong_AsLongLongAndOverflow
from libc.string cimport memcpy

from streamdb.engine.ids cimport put_digits

cdef bytes _int_text(value, bytes suffix, bint milliseconds)
