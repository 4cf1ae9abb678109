# The compiled form of policies.py's TrimArgs: a C struct that the compiled XADD and
# XTRIM (commands/streams.py, which cimports it) fill and read without look-ups.  Its
# fields are public: a handler module that runs from its source beside this build
# (its own build stale, streamdb/compiled.py) sets and reads them as attributes.

from streamdb.engine.stream cimport Stream


cdef class TrimArgs:
    cdef public object strategy         # MAXLEN, MINID, or None (no trim asked for)
    cdef public object maxlen
    cdef public object minid
    cdef public bint approx
    cdef public object limit            # 0: none (None while a parser has seen no LIMIT)
    cdef public bytes policy            # KEEPREF, DELREF or ACKED (None while parsing)
