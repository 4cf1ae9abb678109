# The compiled form of groups.py sees the C types of what XREADGROUP and XACK touch
# (a Ctx, a Stream, format_id): its handlers then read their fields and call their
# C methods without look-ups (XREADGROUP COUNT 10 + XACK: 244.7k -> 239.6k instructions
# a pair, callgrind, in-process driver).  Only cimports: the module has no classes.

from streamdb.dispatch.context cimport Ctx
from streamdb.engine.stream cimport Stream
from streamdb.engine.ids cimport format_id
