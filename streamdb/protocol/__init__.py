"""The Redis wire protocol, free of I/O: request parsing and reply encoding."""
from .request import ProtocolError, RequestParser
from .reply import (CommandError, Double, Map, NULL_ARRAY, RSet, Status, Verbatim,
                    encode_reply, OK, QUEUED, PONG)

__all__ = ["ProtocolError", "RequestParser", "CommandError", "Double", "Map", "NULL_ARRAY",
           "RSet", "Status", "Verbatim", "encode_reply", "OK", "QUEUED", "PONG"]
