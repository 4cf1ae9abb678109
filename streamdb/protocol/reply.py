"""Reply values and their RESP2/RESP3 encoding.

Handlers return plain Python values; the connection encodes them for the
client's protocol version:

=====================  ==================  =====================
value                  RESP2               RESP3
=====================  ==================  =====================
bytes / str            ``$`` bulk          ``$`` bulk
int                    ``:``               ``:``
None                   ``$-1``             ``_``
NULL_ARRAY             ``*-1``             ``_``
list / tuple           ``*`` array         ``*`` array
Status                 ``+``               ``+``
CommandError           ``-``               ``-``
Map                    flat ``*`` array    ``%`` map
RSet                   ``*`` array         ``~`` set
Push                   ``*`` array         ``>`` push
Double                 ``$`` bulk          ``,`` double
Verbatim               ``$`` bulk          ``=`` verbatim (txt)
Raw                    as is               as is
=====================  ==================  =====================

``Raw`` is bytes that are already RESP and go out as they are: the replication
stream a primary sends down a replica's link, PSYNC's answers, and ``b""`` for a
command that answers nothing.
"""

from __future__ import annotations

import math

__all__ = ["CommandError", "Status", "Map", "RSet", "Push", "Double", "Verbatim", "Raw", "NULL_ARRAY",
           "OK", "QUEUED", "PONG", "BIG_PIECE", "encode_reply", "encode_reply_pieces", "encode_commands"]


class CommandError(Exception):
    """An error reply.  ``message`` is the full text after ``-``, e.g. ``ERR syntax error``.

    Raised by handlers; also a value inside EXEC's reply array.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def code(self) -> str:
        return self.message.split(" ", 1)[0]


class Status(str):
    """A simple string reply: ``+OK``."""
    __slots__ = ()


class Map(list):
    """A RESP3 map given as a list of (key, value) pairs, in order."""
    __slots__ = ()


class RSet(list):
    """A RESP3 set (an array under RESP2)."""
    __slots__ = ()


class Push(list):
    """A RESP3 push (``>``): what a server sends unasked, Pub/Sub's messages and
    (un)subscribe confirmations; an array under RESP2."""
    __slots__ = ()


class Double(float):
    """A RESP3 double (a bulk string under RESP2)."""
    __slots__ = ()


class Verbatim(bytes):
    """A RESP3 verbatim text string (``=``, format ``txt``); bulk under RESP2."""
    __slots__ = ()


class Raw(bytes):
    """A reply already encoded as RESP, identical under RESP2 and RESP3; sent as is."""
    __slots__ = ()


class _NullArray:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NULL_ARRAY"


NULL_ARRAY = _NullArray()
OK = Status("OK")
QUEUED = Status("QUEUED")
PONG = Status("PONG")

_OK_BYTES = b"+OK\r\n"


def _format_double(value: float) -> bytes:
    if math.isinf(value):
        return b"inf" if value > 0 else b"-inf"
    if math.isnan(value):
        return b"nan"
    if value == int(value) and abs(value) < 1e17:
        return b"%d" % int(value)
    return repr(value).encode()


def encode_reply(value, resp3: bool) -> bytes:
    """Encode one reply value as RESP bytes."""
    # Fast paths for the replies a stream server sends most.
    if value is OK:
        return _OK_BYTES
    t = type(value)
    if t is bytes:
        return b"$%d\r\n%s\r\n" % (len(value), value)
    if t is int:
        return b":%d\r\n" % value
    if t is Raw:
        return value
    out: list[bytes] = []
    _encode(value, resp3, out)
    return b"".join(out)


# A bulk of this many bytes or more inside an array reply is a piece of its own in
# encode_reply_pieces: the value object itself, never copied.
BIG_PIECE = 1 << 20


def encode_reply_pieces(value, resp3: bool):
    """``encode_reply``'s bytes; or, for an array reply holding bulks of BIG_PIECE bytes
    or more, a list of bytes that are those bytes when joined: each big bulk's payload
    is a piece of its own, the value object itself, between the encoded bytes before
    and after it.  The request loop writes the pieces one after the other (a 100 MB
    XRANGE reply was copied whole, about 90 ms of the loop here)."""
    if type(value) is not list:
        return encode_reply(value, resp3)
    out: list = []
    _encode(value, resp3, out)
    if memoryview not in map(type, out):        # (no big payload: _encode_big_bulk)
        return b"".join(out)
    pieces, start = [], 0
    for i, item in enumerate(out):
        if type(item) is memoryview:
            pieces += [b"".join(out[start:i]), item.obj]
            start = i + 1
    pieces.append(b"".join(out[start:]))
    return pieces


def _encode_big_bulk(value: bytes, out: list) -> None:
    # The payload as a memoryview of it: joined as its bytes by encode_reply, and told
    # apart by encode_reply_pieces, which makes it a piece of its own.
    out += (b"$%d\r\n" % len(value), memoryview(value), b"\r\n")


def encode_commands(commands: list) -> bytes:
    """Commands (lists of bytes) as RESP arrays, concatenated: a batch of effects
    for the AOF or the replication stream."""
    return b"".join([encode_reply(argv, False) for argv in commands])


def _encode(value, resp3: bool, out: list) -> None:
    t = type(value)
    if t is bytes:
        if len(value) >= BIG_PIECE:
            _encode_big_bulk(value, out)
        else:
            out.append(b"$%d\r\n%s\r\n" % (len(value), value))
    elif t is list or t is tuple:
        out.append(b"*%d\r\n" % len(value))
        for item in value:
            if type(item) is bytes and len(item) < BIG_PIECE:
                out.append(b"$%d\r\n%s\r\n" % (len(item), item))
            else:
                _encode(item, resp3, out)
    elif t is int:
        out.append(b":%d\r\n" % value)
    elif t is Raw:
        out.append(value)
    elif value is None:
        out.append(b"_\r\n" if resp3 else b"$-1\r\n")
    elif t is Status:
        out.append(b"+%s\r\n" % value.encode())
    elif t is str:
        raw = value.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(raw), raw))
    elif t is Map:
        if resp3:
            out.append(b"%%%d\r\n" % len(value))
        else:
            out.append(b"*%d\r\n" % (2 * len(value)))
        for k, v in value:
            _encode(k, resp3, out)
            _encode(v, resp3, out)
    elif isinstance(value, CommandError):
        msg = value.message.replace("\r", " ").replace("\n", " ")
        # surrogateescape: an error may quote client bytes that are not UTF-8
        out.append(b"-%s\r\n" % msg.encode("utf-8", "surrogateescape"))
    elif value is NULL_ARRAY:
        out.append(b"_\r\n" if resp3 else b"*-1\r\n")
    elif t is RSet:
        out.append((b"~%d\r\n" if resp3 else b"*%d\r\n") % len(value))
        for item in value:
            _encode(item, resp3, out)
    elif t is Push:
        out.append((b">%d\r\n" if resp3 else b"*%d\r\n") % len(value))
        for item in value:
            _encode(item, resp3, out)
    elif t is Double:
        raw = _format_double(value)
        if resp3:
            out.append(b",%s\r\n" % raw)
        else:
            out.append(b"$%d\r\n%s\r\n" % (len(raw), raw))
    elif t is Verbatim:
        if resp3:
            out.append(b"=%d\r\ntxt:%s\r\n" % (len(value) + 4, value))
        else:
            out.append(b"$%d\r\n%s\r\n" % (len(value), value))
    elif t is bool:
        out.append(b":%d\r\n" % int(value))
    elif t is float:
        _encode(Double(value), resp3, out)
    else:
        raise TypeError(f"cannot encode reply of type {t.__name__}")
