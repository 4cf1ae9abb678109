"""The vocabulary every layer above the engine shares about a command: the command
table (registry.py: arity, flags, key positions, ACL categories via categories.py),
what a handler is given (context.py: Ctx, BlockRequest) and the connection state
commands see (client.py: Client).  It runs no command: server/core.py does."""
