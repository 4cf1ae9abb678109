# The compiled form of ids.py: format_id and parse_strict_id as C calls for the
# compiled handlers that cimport them (every reply that holds an id formats it; XACK,
# XDEL, XCLAIM parse many), and put_digits for server/columns.py's metrics values.

from cpython.long cimport PyLong_AsUnsignedLongLongMask


cpdef bytes format_id(sid)
cpdef parse_strict_id(text)
cdef Py_ssize_t put_digits(char *buf, Py_ssize_t end, unsigned long long value)
