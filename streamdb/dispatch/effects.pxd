# The compiled form of effects.py: EffectBatch's fields as C fields and its
# accessors as C calls, for the compiled dispatch (server/core.py cimports this)
# and the compiled changed-key tracker (persistence/changes.py).

from streamdb.dispatch.registry cimport CommandSpec, resolve

cdef class EffectBatch:
    cdef readonly Py_ssize_t db
    cdef readonly bint data
    cdef readonly list commands, effects
    cdef list _changes
    cdef bytes _resp
    cdef Py_ssize_t _final_db

    cpdef list changes(self)
    cpdef bytes resp(self)
    cpdef bytes resp_from(self, Py_ssize_t selected)
    cpdef Py_ssize_t final_db(self)

cdef void _fill(EffectBatch batch, Py_ssize_t db, list effects, bint atomic, bint data)
cpdef EffectBatch new_batch(Py_ssize_t db, list effects, bint atomic, bint data=*)
cdef list _derive_changes(Py_ssize_t db, list effects)
cdef object _whole_databases(str name, list argv, Py_ssize_t cur)
