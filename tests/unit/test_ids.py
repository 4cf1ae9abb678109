"""Stream IDs: the int form, the text forms, and Redis's number-parsing quirks.

Redis parses each half of an ID with string2ull(): a strict string2ll() first
(no '+', no spaces, no leading zeros; a negative result is rejected), then
strtoull() as a fallback, which accepts leading white space, a sign and
leading zeros, and wraps negative numbers modulo 2**64.  The model below
restates those rules independently of engine/ids.py, and Hypothesis compares
the two on strings built from the characters that matter.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdb.engine.ids import (MAX_ID, MIN_ID, U64, InvalidID, format_id,
                                 id_ms, id_seq, make_id, parse_id, parse_interval_id,
                                 parse_u64)

LLONG_MIN, LLONG_MAX = -(2**63), 2**63 - 1
C_SPACE = b" \t\n\v\f\r"


def model_string2ll(s: bytes):
    """Redis's string2ll(): exact decimal, optional '-', no leading zero, in range."""
    if not s:
        return None
    if s == b"0":
        return 0
    neg = s[:1] == b"-"
    body = s[1:] if neg else s
    if not body or not body[:1].isdigit() or body[:1] == b"0" or not all(48 <= c <= 57 for c in body):
        return None
    v = -int(body) if neg else int(body)
    return v if LLONG_MIN <= v <= LLONG_MAX else None


def model_strtoull(s: bytes):
    """glibc strtoull(s, &end, 10) that must consume the whole (non-empty) string."""
    if not s:
        return None
    i = 0
    while i < len(s) and s[i] in C_SPACE:
        i += 1
    neg = False
    if i < len(s) and s[i] in b"+-":
        neg = s[i] == ord("-")
        i += 1
    j = i
    while j < len(s) and 48 <= s[j] <= 57:
        j += 1
    if j == i or j != len(s):
        return None
    v = int(s[i:j])
    if v > U64:
        return None          # ERANGE
    return (-v) % 2**64 if neg else v


def model_string2ull(s: bytes):
    s = s.split(b"\0", 1)[0]
    ll = model_string2ll(s)
    if ll is not None:
        return None if ll < 0 else ll
    return model_strtoull(s)


number_text = st.lists(st.sampled_from([b"0", b"1", b"9", b"5", b"-", b"+", b" ", b"\t", b"x",
                                        b"18446744073709551615", b"18446744073709551616",
                                        b"9223372036854775808", b"9223372036854775807", b"\0"]),
                       max_size=5).map(b"".join)


@settings(max_examples=2000, deadline=None)
@given(number_text)
def test_parse_u64_matches_redis_string2ull(text):
    assert parse_u64(text) == model_string2ull(text)


@pytest.mark.parametrize("text, value", [
    (b"0", 0), (b"00", 0), (b"007", 7), (b"+5", 5), (b" 5", 5), (b"\t\n5", 5),
    (b"-0", 0), (b"-00", 0),
    (b"-1", None),                                  # strict parse: negative, rejected
    (b"-01", U64),                                  # strtoull wraps it
    (b"-9223372036854775808", None),                # LLONG_MIN: strict parse, negative
    (b"-9223372036854775809", 2**64 - 9223372036854775809),
    (b"18446744073709551615", U64), (b"18446744073709551616", None),
    (b"5 ", None), (b"", None), (b" ", None), (b"+", None), (b"1x", None), (b"0x10", None),
    (b"5\x00junk", 5),
])
def test_string2ull_quirks(text, value):
    assert parse_u64(text) == value


@given(st.integers(0, U64), st.integers(0, U64))
def test_format_and_parse_round_trip(ms, seq):
    sid = make_id(ms, seq)
    assert id_ms(sid) == ms and id_seq(sid) == seq
    text = format_id(sid)
    assert text == b"%d-%d" % (ms, seq)
    assert parse_id(text) == (sid, True)
    assert parse_id(text, strict=True) == (sid, True)
    assert parse_interval_id(text, 0) == (sid, False)
    if sid < MAX_ID:
        assert parse_interval_id(b"(" + text, 0) == (sid, True)


@given(st.integers(0, U64), st.integers(0, U64), st.integers(0, U64), st.integers(0, U64))
def test_int_order_is_id_order(ms1, seq1, ms2, seq2):
    a, b = make_id(ms1, seq1), make_id(ms2, seq2)
    assert (a < b) == ((ms1, seq1) < (ms2, seq2))


def test_special_ids():
    assert parse_id(b"-") == (MIN_ID, True)
    assert parse_id(b"+") == (MAX_ID, True)
    for strict_only in (b"-", b"+"):
        with pytest.raises(InvalidID):
            parse_id(strict_only, strict=True)
    assert format_id(MAX_ID) == b"18446744073709551615-18446744073709551615"


@pytest.mark.parametrize("text, missing, expected", [
    (b"5", 0, make_id(5, 0)),
    (b"5", U64, make_id(5, U64)),
    (b"5-3", U64, make_id(5, 3)),
    (b"05-03", 0, make_id(5, 3)),
    (b"-0-1", 0, make_id(0, 1)),       # "" before the first '-': no, see below
])
def test_missing_sequence(text, missing, expected):
    if text == b"-0-1":
        # The first '-' splits: ms is "" which is invalid.
        with pytest.raises(InvalidID):
            parse_id(text, missing)
        return
    assert parse_id(text, missing)[0] == expected


def test_ms_star_form_only_when_allowed():
    assert parse_id(b"7-*", allow_seq_star=True) == (make_id(7, 0), False)
    with pytest.raises(InvalidID):
        parse_id(b"7-*")
    with pytest.raises(InvalidID):
        parse_id(b"*-1", allow_seq_star=True)


@pytest.mark.parametrize("text", [b"", b"-1", b"1-", b"1-2-3", b"abc", b"1-x", b"1 -2", b"(1",
                                  b"1" * 128, b"\x00", b"9-\x00"])
def test_invalid_ids(text):
    with pytest.raises(InvalidID):
        parse_id(text)


def test_nul_ends_the_id_before_it_is_split():
    # Redis copies the argument into a C string: "1\0-5" is "1".
    assert parse_id(b"1\x00-5") == (make_id(1, 0), True)
    assert parse_id(b"2-*\x00x", allow_seq_star=True) == (make_id(2, 0), False)
    assert parse_id(b"-\x00zz") == (MIN_ID, True)
    assert parse_interval_id(b"(1\x00-7", 0) == (make_id(1, 0), True)


def test_length_limit_is_127_bytes():
    text = b"0" * 125 + b"-1"                      # 127 bytes: leading zeros are fine
    assert parse_id(text) == (make_id(0, 1), True)
    with pytest.raises(InvalidID):
        parse_id(b"0" + text)


@pytest.mark.parametrize("text", [b"(", b"((1", b"(-", b"(+", b"(bad"])
def test_invalid_interval_bounds(text):
    if text == b"(":
        # A lone "(" is not exclusive (length 1): it is parsed as an ID and fails.
        with pytest.raises(InvalidID):
            parse_interval_id(text, 0)
        return
    with pytest.raises(InvalidID):
        parse_interval_id(text, 0)
