"""Redis's glob-style matching (util.c's stringmatchlen), byte for byte.

Pub/Sub patterns (PSUBSCRIBE, PUBSUB CHANNELS) and ACL channel rules (``&pattern``)
match with it.  Python's fnmatch is not the same language: Redis reads ``\\`` as an
escape everywhere (inside ``[...]`` too), takes ``[^...]`` (not ``[!...]``) as a
negated class, accepts a reversed range ``[z-a]``, compares bytes as C's signed
``char`` (so ``[a-\\xff]`` is the range from -1 to 'a'), lets an unclosed ``[``
run to the end of the pattern, and never matches ``*`` against an empty
remainder of the subject (``a*`` matches ``a``, but ``*`` does not match ``""``).

Redis's recursion on ``*`` stops early once the rest of the pattern matched
nowhere in the rest of the subject (``skipLongerMatches``): an earlier ``*``
taking more bytes cannot help then.  That makes the recursion the classic loop
below, which returns to the latest ``*`` only; and as Redis >= 7.2 does against
abusive patterns, a match that needs the subject past more than 1000 nested
``*`` fails.
"""

from __future__ import annotations

from functools import partial
from operator import methodcaller

__all__ = ["glob_match", "glob_matcher", "literal_prefix"]

# Redis's stringmatchlen_impl: "if (nesting > 1000) return 0".
_MAX_NESTING = 1000


def _signed(byte: int) -> int:
    """A byte as C's (signed) char compares it."""
    return byte - 256 if byte > 127 else byte


def glob_match(pattern: bytes, subject: bytes) -> bool:
    """Whether ``subject`` matches ``pattern`` as Redis's stringmatchlen (case-sensitive)."""
    plen, slen = len(pattern), len(subject)
    # Past its end a C string reads as NUL (sds strings are NUL-terminated).
    at = lambda i: pattern[i] if i < plen else 0   # noqa: E731
    p = s = 0
    star_p = star_s = -1       # the latest '*': where its rest begins, where it was tried
    stars = 0
    while True:
        matched = True
        while p < plen and s < slen:
            c = pattern[p]
            if c == 42:                                   # '*'
                while p < plen and at(p + 1) == 42:
                    p += 1
                if plen - p == 1:
                    return True                           # a trailing '*' takes the rest
                stars += 1
                if stars > _MAX_NESTING:
                    return False
                star_p, star_s = p + 1, s
                p += 1
                continue                                  # the rest, tried from s first
            if c == 63:                                   # '?'
                s += 1
            elif c == 91:                                 # '['
                p += 1
                negate = at(p) == 94                      # '^'
                if negate:
                    p += 1
                hit = False
                sc = subject[s]
                while True:
                    if at(p) == 92 and plen - p >= 2:     # '\': the next byte, literally
                        p += 1
                        if pattern[p] == sc:
                            hit = True
                    elif at(p) == 93:                     # ']'
                        break
                    elif p >= plen:                       # unclosed: ends with the pattern
                        p -= 1
                        break
                    elif plen - p >= 3 and pattern[p + 1] == 45:    # 'a-z'
                        lo, hi = _signed(pattern[p]), _signed(pattern[p + 2])
                        if lo > hi:
                            lo, hi = hi, lo
                        p += 2
                        if lo <= _signed(sc) <= hi:
                            hit = True
                    elif pattern[p] == sc:
                        hit = True
                    p += 1
                if hit == negate:
                    matched = False
                    break
                s += 1
            else:
                if c == 92 and plen - p >= 2:             # '\x': x literally
                    p += 1
                    c = pattern[p]
                if c != subject[s]:
                    matched = False
                    break
                s += 1
            p += 1
            if s == slen:
                while at(p) == 42:                        # (reads Redis's NUL past the end)
                    p += 1
                break
        if matched and p >= plen and s == slen:
            return True
        # Failed before reaching another '*': the latest '*' takes one byte more,
        # unless no subject is left for its rest to start in.
        if star_p < 0 or star_s + 1 >= slen:
            return False
        star_s += 1
        p, s = star_p, star_s


# glob_matcher's matchers, per pattern.  Bounded: patterns come from clients.
_MATCHERS: dict[bytes, object] = {}
_MAX_MATCHERS = 4096


def literal_prefix(pattern: bytes) -> bytes | None:
    """The text of a ``prefix*`` pattern before its trailing stars (a literal, not
    empty), which matches exactly the subjects that start with it; None for any other
    shape.  (A caller that tests bytes in C does it with a compare: PubSub.publish.)"""
    head = pattern.rstrip(b"*")
    if not head or head == pattern or any(c in head for c in b"*?[\\"):
        return None
    return head


def glob_matcher(pattern: bytes):
    """A one-argument test equal to ``glob_match(pattern, subject)``, for a pattern
    tried against many subjects (KEYS, SCAN MATCH, ACL key patterns).

    The shapes people write, ``name`` and ``prefix*``, become a comparison;
    every other pattern runs through glob_match.  A regular expression is not the
    way: Python's backtracking takes exponential time on ``a*a*a*...b``, which
    Redis's loop (and glob_match) does not.  The matchers are C callables (no
    Python frame per test): a PUBLISH tries every subscribed pattern."""
    m = _MATCHERS.get(pattern)
    if m is not None:
        return m
    prefix = literal_prefix(pattern)
    head = pattern.rstrip(b"*")
    if prefix is not None:
        m = methodcaller("startswith", prefix)              # ("a*" takes "a")
    elif any(c in head for c in b"*?[\\"):
        m = partial(glob_match, pattern)
    elif head == pattern:
        m = pattern.__eq__
    else:
        m = bool                                           # "*" takes all but b""
    if len(_MATCHERS) < _MAX_MATCHERS:
        _MATCHERS[pattern] = m
    return m
