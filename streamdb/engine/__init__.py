"""The pure engine: stream data structures with no sockets, no files and no clock."""
from .groups import ENTRIES_READ_INVALID, Consumer, ConsumerGroup, PendingEntry
from .ids import MAX_ID, MIN_ID, InvalidID, format_id, make_id, parse_id
from .keyspace import Database, Keyspace, type_name
from .stream import Stream

__all__ = ["Stream", "ConsumerGroup", "Consumer", "PendingEntry", "ENTRIES_READ_INVALID",
           "MIN_ID", "MAX_ID", "InvalidID", "format_id", "make_id", "parse_id",
           "Database", "Keyspace", "type_name"]
