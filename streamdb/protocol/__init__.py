"""The Redis wire protocol, free of I/O: request parsing and reply encoding.

The one place that chooses between the compiled core (``_resp.pyx``, built by
``pip install``) and its plain twins (``request.py``, ``reply.py``: the readable
specification, with the same behaviour).  Everything else imports
``RequestParser``, ``encode_reply`` (``encode_reply_pieces``) and ``encode_commands`` from here.  The compiled core is used
unless ``STREAMDB_PURE=1`` is set or it is not built; ``CORE`` says which runs
("compiled" or "python") and ``CORE_REASON`` why (start-up log, ``INFO server``).
"""
import importlib

from .. import compiled
from . import reply, request
from .reply import (CommandError, Double, Map, NULL_ARRAY, Push, RSet, Status, Verbatim,
                    OK, QUEUED, PONG)
from .request import ProtocolError

__all__ = ["ProtocolError", "RequestParser", "CommandError", "Double", "Map", "NULL_ARRAY",
           "Push", "RSet", "Status", "Verbatim", "encode_reply", "encode_reply_pieces", "encode_commands", "OK", "QUEUED", "PONG",
           "CORE", "CORE_REASON", "select_core", "encode_command"]

COMPILED_MODULE = "streamdb.protocol._resp"


def select_core(pure: bool, module: str = COMPILED_MODULE):
    """``(core, reason, RequestParser, encode_reply, encode_reply_pieces, encode_commands)``:
    the compiled module's unless ``pure`` or it cannot be imported, else the plain twins'."""
    plain = (request.RequestParser, reply.encode_reply, reply.encode_reply_pieces,
             reply.encode_commands)
    if pure:
        return ("python", "STREAMDB_PURE is set", *plain)
    try:
        core_module = importlib.import_module(module)
    except ImportError as e:
        return ("python", f"the compiled core is not built ({e})", *plain)
    return ("compiled", module, core_module.RequestParser, core_module.encode_reply,
            core_module.encode_reply_pieces, core_module.encode_commands)


CORE, CORE_REASON, RequestParser, encode_reply, encode_reply_pieces, encode_commands = \
    select_core(compiled.PURE)


# Effects as commands: what the AOF writes and a primary sends its replicas.

def encode_command(argv: list[bytes]) -> bytes:
    """One command in RESP, an array of bulk strings: exactly what the reply encoder
    makes of a list of bytes, so effects are encoded by this encoder (the
    compiled one when it runs: every write's effects pass here)."""
    return encode_reply(argv, False)

