# The compiled form of pubsub.py: PubSub's subscriptions as a C field, and the
# delivery loop (_send) reading each subscriber's Client fields (client.pxd) as C
# fields instead of looking them up by name.

from streamdb.dispatch.client cimport Client

cdef class PubSub:
    cdef public tuple kinds
