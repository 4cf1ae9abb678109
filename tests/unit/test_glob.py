"""streamdb/glob.py is Redis's stringmatchlen: each case below is what redis-server 7.0's
KEYS answered (and tests/differential/test_pubsub.py compares PUBSUB CHANNELS on many
more); the ones fnmatch gets wrong are why it is not used."""

from __future__ import annotations

import fnmatch

import pytest

from streamdb.glob import glob_match, glob_matcher, literal_prefix

CASES = [
    (b"a*", b"a", True),
    (b"a*b", b"a", False),
    (b"*", b"", False),              # '*' never matches an empty remainder
    (b"", b"", True),
    (b"h?llo", b"hello", True),
    (b"h[^e]llo", b"hallo", True),   # ^ negates (fnmatch: !)
    (b"h[^e]llo", b"hello", False),
    (b"[!a]", b"b", False),          # ! is a plain member
    (b"[!a]", b"!", True),
    (b"h[a-b]llo", b"hbllo", True),
    (b"[z-a]", b"m", True),          # a reversed range is the same range
    (b"\\*", b"*", True),            # \ escapes
    (b"\\*", b"a", False),
    (b"[\\]]", b"]", True),          # ... inside a class too
    (b"[abc", b"a", True),           # an unclosed class runs to the end
    (b"[abc", b"d", False),
    (b"[]", b"]", False),
    (b"a\\", b"a\\", True),          # a trailing \ is itself
    (b"[a-\xff]", b"\x80", False),   # bytes compare as C's signed char: \xff is -1
    (b"[a-\xff]", b"b", False),
    (b"[a-\xff]", b"\x00", True),
    (b"*b*", b"abc", True),
    (b"**", b"x", True),
    (b"a[", b"a", False),
    (b"[a-]", b"-", False),
    (b"[-a]", b"b", False),
]


@pytest.mark.parametrize("pattern, subject, expected", CASES)
def test_matches_as_redis(pattern, subject, expected):
    assert glob_match(pattern, subject) is expected


def test_fnmatch_is_another_language():
    wrong = [(p, s) for p, s, want in CASES
             if fnmatch.fnmatchcase(s.decode("latin-1"), p.decode("latin-1")) != want]
    assert (b"h[^e]llo", b"hello") in wrong and (b"\\*", b"*") in wrong


def test_many_stars_do_not_take_exponential_time():
    # Without Redis's early stop each '*' would retry every split: 2^30 tries here.
    assert not glob_match(b"a*" * 30 + b"b", b"a" * 60)
    assert glob_match(b"a*" * 30, b"a" * 60)


def test_more_than_1000_nested_stars_do_not_match():
    """Redis >= 7.2's guard against abusive patterns (7.0 has none: there it matches)."""
    assert glob_match(b"*a" * 1000, b"a" * 1000)
    assert not glob_match(b"*a" * 1001, b"a" * 1001)
    assert glob_match(b"*a" * 1000 + b"*", b"a" * 1001)     # a trailing '*' takes the rest


SHAPES = [b"", b"*", b"**", b"a", b"a*", b"a**", b"ab*", b"\\a*", b"a?*", b"*a", b"[a]*"]
SUBJECTS = [b"", b"a", b"ab", b"abc", b"ba", b"*", b"\\a", b"a*"]


@pytest.mark.parametrize("pattern", sorted({p for p, _, _ in CASES} | set(SHAPES)))
def test_matcher_is_glob_match(pattern):
    """The comparisons glob_matcher makes of the common shapes answer as glob_match."""
    subjects = set(SUBJECTS) | {s for _, s, _ in CASES}
    matches = glob_matcher(pattern)
    assert [matches(s) for s in sorted(subjects)] == [glob_match(pattern, s) for s in sorted(subjects)]


@pytest.mark.parametrize("pattern", sorted({p for p, _, _ in CASES} | set(SHAPES)))
def test_literal_prefix_matches_as_glob_match(pattern):
    """Where literal_prefix names a prefix (PubSub.publish compares it in C), starting
    with it is matching the pattern."""
    subjects = set(SUBJECTS) | {s for _, s, _ in CASES}
    prefix = literal_prefix(pattern)
    if prefix is not None:
        assert [s.startswith(prefix) for s in sorted(subjects)] == \
            [glob_match(pattern, s) for s in sorted(subjects)]


def test_literal_prefix_is_only_for_a_literal_then_stars():
    assert [literal_prefix(p) for p in (b"a*", b"ab**", b"*", b"a", b"a?*", b"\\a*", b"[a]*")] \
        == [b"a", b"ab", None, None, None, None, None]
