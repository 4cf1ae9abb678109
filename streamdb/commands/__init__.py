"""Command families.  Importing this package fills the registry."""
from . import acl, admin, backup, groups, info, keys, observe, persistence, replication, server, streams  # noqa: F401  (registration)
from . import groupadmin, pubsub, retention  # noqa: F401  (registration)
from ..dispatch.registry import COMMANDS, CommandSpec, lookup

__all__ = ["COMMANDS", "CommandSpec", "lookup"]
