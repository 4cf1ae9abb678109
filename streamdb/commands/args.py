"""Argument parsing shared by commands, with Redis's exact error texts."""

from __future__ import annotations

from ..engine.ids import InvalidID, parse_id, parse_interval_id, parse_strict_id
from ..protocol.reply import CommandError

__all__ = ["parse_int", "parse_positive", "parse_stream_id", "parse_strict_stream_id",
           "parse_strict_stream_ids",
           "parse_range_bound", "invalid_id_error", "NOT_INTEGER", "eq"]

NOT_INTEGER = "ERR value is not an integer or out of range"
INVALID_ID = "ERR Invalid stream ID specified as stream command argument"


def eq(arg: bytes, word: bytes) -> bool:
    """Case-insensitive keyword match (``word`` given in lower case)."""
    return len(arg) == len(word) and arg.lower() == word


def parse_int(raw: bytes, error: str = NOT_INTEGER) -> int:
    """A signed 64-bit integer as Redis's string2ll() accepts it."""
    if raw and len(raw) <= 20:
        body = raw[1:] if raw[:1] == b"-" else raw
        if body.isdigit() and body.isascii() and (body[:1] != b"0" or raw == b"0"):
            v = int(raw)
            if -(1 << 63) <= v < (1 << 63):
                return v
    raise CommandError(error)


def parse_positive(raw: bytes, what: str = "") -> int:
    v = parse_int(raw)
    if v < 0:
        raise CommandError("ERR value is out of range, must be positive")
    return v


def invalid_id_error() -> CommandError:
    return CommandError(INVALID_ID)


def parse_stream_id(raw: bytes, missing_seq: int = 0) -> int:
    try:
        return parse_id(raw, missing_seq)[0]
    except InvalidID:
        raise CommandError(INVALID_ID) from None


def parse_strict_stream_id(raw: bytes, missing_seq: int = 0) -> int:
    try:
        if not missing_seq:
            return parse_strict_id(raw)
        return parse_id(raw, missing_seq, strict=True)[0]
    except InvalidID:
        raise CommandError(INVALID_ID) from None


def parse_strict_stream_ids(raws: list[bytes]) -> list[int]:
    """``parse_strict_stream_id`` of each of ``raws`` (XACK, XDEL, ... take many):
    one frame and one ``try`` for the whole list instead of one per id."""
    try:
        return [parse_strict_id(raw) for raw in raws]
    except InvalidID:
        raise CommandError(INVALID_ID) from None


def parse_range_bound(raw: bytes, missing_seq: int) -> tuple[int, bool]:
    try:
        return parse_interval_id(raw, missing_seq)
    except InvalidID:
        raise CommandError(INVALID_ID) from None
