# The compiled form of pipeline.py: serve reads the Core's and the Client's
# C fields (core.pxd, client.pxd) without look-ups.

from streamdb.server.client cimport Client
from streamdb.server.core cimport Core, Stats

cpdef int serve(Core core, Client client, parser, list out, data)
cdef int _run_requests(Core core, Client client, parser, list out)
