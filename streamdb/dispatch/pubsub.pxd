# The compiled form of pubsub.py: PubSub's subscriptions as a C field, publish a C
# call for the compiled PUBLISH handler, and the
# delivery loop (_send) reading each subscriber's Client fields (client.pxd) as C
# fields instead of looking them up by name.

from streamdb.dispatch.client cimport Client, Outbox

cdef class PubSub:
    cdef public tuple kinds
    cdef public dict matchers

    cpdef Py_ssize_t publish(self, bytes channel, bytes message, bint shard=*)
