# The compiled form of ids.py: format_id as a C call for the compiled handlers
# that cimport it (every reply that holds an id formats it).

from cpython.long cimport PyLong_AsUnsignedLongLongMask


cpdef bytes format_id(sid)
