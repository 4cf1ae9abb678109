"""Stream entry IDs.

An ID is one Python int: ``ms << 64 | seq``.  Comparisons, ``bisect`` and dict
lookups on it all run at C speed; the ``<ms>-<seq>`` text form exists only at
the protocol edge (``parse_*`` on the way in, ``format_id`` on the way out).
"""

from __future__ import annotations

import re

U64 = (1 << 64) - 1
SEQ_MASK = U64
MIN_ID = 0
MAX_ID = (U64 << 64) | U64
# One past the largest id: an exclusive upper bound that no id reaches.  MAX_ID itself
# is a real id (a stream may hold 18446744073709551615-18446744073709551615), so it
# cannot stand for "no bound".
PAST_MAX_ID = MAX_ID + 1

__all__ = [
    "U64", "MIN_ID", "MAX_ID", "PAST_MAX_ID", "InvalidID", "make_id", "id_ms", "id_seq",
    "format_id", "parse_u64", "parse_id", "parse_strict_id", "parse_interval_id",
]


class InvalidID(ValueError):
    """The text is not a stream ID.  Commands turn it into Redis's error."""


def make_id(ms: int, seq: int) -> int:
    return (ms << 64) | seq


def id_ms(sid: int) -> int:
    return sid >> 64


def id_seq(sid: int) -> int:
    return sid & SEQ_MASK


def format_id(sid: int) -> bytes:
    return b"%d-%d" % (sid >> 64, sid & SEQ_MASK)


# Redis parses each half of an ID with string2ull(): a strict signed parse
# first, then strtoull() as a fallback.  The fallback is what makes leading
# zeros, leading white space, a '+' sign and even "-0" valid, while "-5" is
# rejected by the strict parse.  We reproduce that so that odd client input
# gets the same answer from us as from Redis.
_STRTOULL = re.compile(rb"([ \t\n\v\f\r]*)([+-]?)([0-9]+)\Z")


def parse_u64(text: bytes) -> int | None:
    """Parse an unsigned 64-bit decimal as Redis's string2ull() does; None if invalid."""
    if text.isdigit():   # the usual form, plain ASCII digits: what the regex path gives
        value = int(text)
        return value if value <= U64 else None
    text = text.split(b"\0", 1)[0]  # Redis copies the ID into a C string
    m = _STRTOULL.match(text)
    if m is None:
        return None
    space, sign, digits = m.groups()
    value = int(digits)
    if value > U64:
        return None
    if sign == b"-":
        strict_negative = not space and (digits[0:1] != b"0") and value <= (1 << 63)
        if strict_negative:
            return None
        return (-value) & U64
    return value


def parse_id(text: bytes, missing_seq: int = 0, *, strict: bool = False,
             allow_seq_star: bool = False) -> tuple[int, bool]:
    """Parse ``-``, ``+``, ``<ms>`` or ``<ms>-<seq>``.

    Returns ``(id, seq_given)``; ``seq_given`` is False only for the ``<ms>-*``
    form, which is accepted when ``allow_seq_star`` (XADD).  ``missing_seq`` fills
    in the sequence of a bare ``<ms>``.  ``strict`` rejects ``-`` and ``+``.
    Raises InvalidID.
    """
    ms_part, dash, seq_part = text.partition(b"-")
    if seq_part.isdigit() and ms_part.isdigit() and len(text) <= 127:
        # The usual "<ms>-<seq>" in plain digits: what the general path below gives.
        ms, seq = int(ms_part), int(seq_part)
        if ms <= U64 and seq <= U64:
            return (ms << 64) | seq, True
    if len(text) > 127:
        raise InvalidID(text)
    if b"\0" in text:
        # Redis copies the argument into a C string first: a NUL ends the ID
        # there, before "-" splits it ("1\0-5" is 1, "2-*\0x" is 2-*).
        text = text.split(b"\0", 1)[0]
    if text == b"-" or text == b"+":
        if strict:
            raise InvalidID(text)
        return (MIN_ID if text == b"-" else MAX_ID), True
    ms_part, dash, seq_part = text.partition(b"-")
    ms = parse_u64(ms_part)
    if ms is None:
        raise InvalidID(text)
    if not dash:
        return (ms << 64) | missing_seq, True
    if allow_seq_star and seq_part == b"*":
        return ms << 64, False
    seq = parse_u64(seq_part)
    if seq is None:
        raise InvalidID(text)
    return (ms << 64) | seq, True


def parse_strict_id(text: bytes, missing_seq: int = 0) -> int:
    return parse_id(text, missing_seq, strict=True)[0]


def parse_interval_id(text: bytes, missing_seq: int) -> tuple[int, bool]:
    """Parse a range bound, which may be exclusive: ``(<id>``.  Returns (id, exclusive)."""
    if len(text) > 1 and text[0:1] == b"(":
        return parse_id(text[1:], missing_seq, strict=True)[0], True
    return parse_id(text, missing_seq)[0], False
