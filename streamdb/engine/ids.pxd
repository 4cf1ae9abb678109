# The compiled form of ids.py: format_id and parse_strict_id as C calls for the
# compiled handlers that cimport them (every reply that holds an id formats it; XACK,
# XDEL, XCLAIM parse many).

from cpython.long cimport PyLong_AsUnsignedLongLongMask


cpdef bytes format_id(sid)
cpdef parse_strict_id(text)
