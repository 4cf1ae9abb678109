"""The text of a metrics column: the loops a scrape runs once per sample.

A scrape of 1,000 streams x 3 groups writes ~54,000 sample lines (server/metrics.py's
tables: a column of values per family, beside a column of the entities' labels).
Past reading the keyspace, a scrape's work is per value: which rows hold one
(``present_mask``) and each value's text (``value_texts``).  The values of a table
are ints (another number is written as Python writes it), and None where an
entity has no sample.

Compiled in Cython's pure mode (streamdb/compiled.py): in C, a value's text is its
digits written into a small buffer (~0.1 us), where the plain lines format it with
``bytes %`` through a slot wrapper; and finding the absent values compares pointers,
where ``None in values`` compares each int with None through the rich comparison.
In-process on tools/bench_metrics.py's keyspace, callgrind: see metrics.py's
``Table``.  The plain lines beside each C loop are the specification;
tests/unit/test_compiled_columns.py holds the two equal.
"""

from __future__ import annotations

import cython

__all__ = ["value_texts", "present_mask"]

_MS_SUFFIX = b"e-3"


def value_texts(values: list, milliseconds: cython.bint = False) -> list:
    """The text of each of ``values``, UTF-8: an int's %d, another number's str (a
    float's repr, which Prometheus reads); of ``milliseconds`` (whole milliseconds) the
    seconds, an int written as the milliseconds with an exponent: 1750 ms is
    ``1750e-3`` (Go's ParseFloat, which Prometheus uses, reads it as 1.75, exactly as
    it reads "1.75"; repr of value / 1000, a float's shortest digits, cost ~1.5k
    instructions a value)."""
    suffix: bytes = _MS_SUFFIX if milliseconds else b""
    if cython.compiled:
        n: cython.Py_ssize_t = len(values)
        out: list = [None] * n
        i: cython.Py_ssize_t
        for i in range(n):
            out[i] = _int_text(values[i], suffix, milliseconds)
        return out
    template = b"%d" + suffix
    return [template % value if isinstance(value, int) else _other_text(value, milliseconds)
            for value in values]


def _other_text(value, milliseconds: cython.bint) -> bytes:
    """The text of a value that is not an int."""
    return str(value / 1000 if milliseconds else value).encode()


@cython.cfunc
def _int_text(value, suffix: bytes, milliseconds: cython.bint) -> bytes:
    """An int's ``b"%d" % value + suffix`` (compiled form only): the digits of one that
    fits in 64 bits written into a buffer (engine/ids.py's put_digits, which formats
    ids); others formatted by Python."""
    overflow: cython.int = 0
    if not isinstance(value, int):
        return _other_text(value, milliseconds)
    n: cython.longlong = PyLong_AsLongLongAndOverflow(value, cython.address(overflow))
    if overflow:
        return b"%d" % value + suffix
    buf = cython.declare(cython.char[32])
    end: cython.Py_ssize_t = 32 - len(suffix)
    pos: cython.Py_ssize_t
    negative: cython.bint = n < 0
    # (as unsigned: -LLONG_MIN does not fit in a long long)
    u: cython.ulonglong = cython.cast(cython.ulonglong, n)
    if negative:
        u = ~u + 1
    pos = put_digits(buf, end, u)
    if negative:
        pos -= 1
        buf[pos] = 45                                    # "-"
    memcpy(buf + end, PyBytes_AS_STRING(suffix), len(suffix))
    return PyBytes_FromStringAndSize(buf + pos, 32 - pos)


def present_mask(values: list) -> list | None:
    """Which of ``values`` are not None (a bool each), or None when none is."""
    if cython.compiled:
        n: cython.Py_ssize_t = len(values)
        i: cython.Py_ssize_t
        for i in range(n):
            if values[i] is None:
                return [value is not None for value in values]
        return None
    if None in values:
        return [value is not None for value in values]
    return None
