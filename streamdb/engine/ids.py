"""Stream entry IDs.

An ID is one Python int: ``ms << 64 | seq``.  Comparisons, ``bisect`` and dict
lookups on it all run at C speed; the ``<ms>-<seq>`` text form exists only at
the protocol edge (``parse_*`` on the way in, ``format_id`` on the way out).

Two parsers, as Redis has: ``parse_id`` reads one ID argument the way the command
takes it (``strict`` refuses ``-`` and ``+``, ``allow_seq_star`` takes XADD's
``<ms>-*``), and ``parse_interval_id`` reads a range bound (XRANGE, XPENDING,
XAUTOCLAIM), where ``(`` makes it exclusive.  commands/args.py turns their
InvalidID into Redis's error text.

Compiled in Cython's pure mode (streamdb/compiled.py).  The two conversions every
reply and every XACK id goes through, ``format_id`` and parse_id's usual
``<ms>-<seq>`` form, have a C form as well (``_format_id_c``, ``_plain_id_c``:
digits in a C buffer instead of building a format tuple, a partition tuple and
three bytes objects); the interpreter runs the Python lines beside them, which
remain the specification, and tests/unit/test_compiled_engine.py holds the two equal.
"""

from __future__ import annotations

import re

import cython

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


@cython.ccall
def format_id(sid) -> bytes:
    if cython.compiled and type(sid) is int:
        text = _format_id_c(sid)
        if text is not None:
            return text
    return b"%d-%d" % (sid >> 64, sid & SEQ_MASK)


@cython.cfunc
def put_digits(buf: cython.p_char, end: cython.Py_ssize_t,
               value: cython.ulonglong) -> cython.Py_ssize_t:
    """Write ``value`` in decimal just before ``buf[end]``; returns where it starts.
    (A C function of the compiled form, ids.pxd: server/columns.py writes a metrics
    value's digits with it too.)"""
    while True:
        end -= 1
        buf[end] = 48 + value % 10          # '0' + digit
        value //= 10
        if value == 0:
            return end


@cython.cfunc
def _format_id_c(sid) -> bytes:
    """format_id formatted in a C buffer (compiled form only); None when ``sid`` is
    not an id (below 0 or from 2**128 on: the source's text then)."""
    # The range test is the conversion of the high half, which formatting needs
    # anyway: Cython's C conversion refuses a negative or too large int.  Cheaper
    # than testing first (two rich comparisons with MIN_ID and MAX_ID and the int
    # made by ``& SEQ_MASK`` measured ~400 of ~1.1k instructions per id, callgrind).
    ms: cython.ulonglong
    try:
        ms = sid >> 64
    except OverflowError:
        return None
    buf = cython.declare(cython.char[42])   # two 20-digit halves and the dash
    start: cython.Py_ssize_t = put_digits(buf, 42, PyLong_AsUnsignedLongLongMask(sid))
    start -= 1
    buf[start] = 45                         # '-'
    start = put_digits(buf, start, ms)
    return buf[start:42]


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
    if cython.compiled and type(text) is bytes:
        sid = _plain_id_c(text)
        if sid is not None:
            return sid, True
    else:
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


# C integers: a literal this large would be a Python int in the compiled code.
_U64_TENTH = cython.declare(cython.ulonglong, U64 // 10)


@cython.cfunc
def _digits_u64(text: bytes, start: cython.Py_ssize_t, end: cython.Py_ssize_t,
              out: cython.p_ulonglong) -> cython.bint:
    """Whether text[start:end] is one or more ASCII digits worth at most U64 (the
    value then in ``*out``): bytes.isdigit() and int() <= U64, in C."""
    p: cython.p_uchar = text
    value: cython.ulonglong = 0
    digit: cython.uint
    if start >= end:
        return False
    while start < end:
        digit = p[start] - 48
        if digit > 9:
            return False
        if value > _U64_TENTH or (value == _U64_TENTH and digit > 5):
            return False                    # more than U64 (18446744073709551615)
        value = value * 10 + digit
        start += 1
    out[0] = value
    return True


@cython.cfunc
def _plain_id_c(text: bytes):
    """parse_id's usual case, ``<ms>-<seq>`` in plain digits each at most U64, as
    an id; None for anything else (the general path decides).  Compiled form only."""
    n: cython.Py_ssize_t = len(text)
    if n > 127:
        return None
    p: cython.p_uchar = text
    dash: cython.Py_ssize_t = 0
    while dash < n and p[dash] != 45:       # the first '-' (bytes.find parses its arguments)
        dash += 1
    ms: cython.ulonglong
    seq: cython.ulonglong
    if dash == n or not _digits_u64(text, 0, dash, cython.address(ms)) \
            or not _digits_u64(text, dash + 1, n, cython.address(seq)):
        return None
    high: object = ms
    return (high << 64) | seq


@cython.ccall
def parse_strict_id(text) -> object:
    """``parse_id(text, 0, strict=True)``'s id: a full id, never ``-`` or ``+``, as
    XACK, XDEL and XCLAIM take many.  A C call from the compiled handlers (args.pxd):
    through parse_id's keyword arguments and its tuple, each id of an XACK of 10 cost
    about 1.2k instructions more (XREADGROUP COUNT 10 + XACK in-process, callgrind)."""
    if cython.compiled and type(text) is bytes:
        sid = _plain_id_c(text)
        if sid is not None:
            return sid
    return parse_id(text, 0, strict=True)[0]


def parse_interval_id(text: bytes, missing_seq: int) -> tuple[int, bool]:
    """Parse a range bound, which may be exclusive: ``(<id>``.  Returns (id, exclusive)."""
    if len(text) > 1 and text[0:1] == b"(":
        return parse_id(text[1:], missing_seq, strict=True)[0], True
    return parse_id(text, missing_seq)[0], False
