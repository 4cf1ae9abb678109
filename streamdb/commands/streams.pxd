# The compiled form of streams.py sees the C types of what its handlers touch
# (a Ctx, a Stream, a TrimArgs, format_id): XADD then reads their fields and calls
# their methods without look-ups.  Only cimports: the module's own classes need no
# declaration here.

from streamdb.dispatch.context cimport Ctx
from streamdb.engine.stream cimport Stream
from streamdb.engine.ids cimport format_id
from streamdb.engine.policies cimport TrimArgs
