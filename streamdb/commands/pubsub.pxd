# The compiled form of pubsub.py sees the C types its PUBLISH handler touches (a Ctx,
# the server's PubSub): a message is published with a C call, not a look-up by name.

from streamdb.dispatch.context cimport Ctx
from streamdb.dispatch.pubsub cimport PubSub
