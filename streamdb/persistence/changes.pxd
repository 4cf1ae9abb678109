# The compiled form of changes.py: the tracker's state as C fields, and the batch
# it reads as the C type of dispatch/effects.pxd (its changes() a C call).

from streamdb.dispatch.effects cimport EffectBatch

cdef class ChangedKeys:
    cdef public set dirty
    cdef public bint full
