"""The stream data type: entries in nodes, plus the metadata Redis keeps.

Layout (docs/ARCHITECTURE.md: cold nodes under "Persistence", the GC under
"Garbage collection"):

* A stream is a list of nodes ordered by ID and a parallel list of each node's
  first ID, so that finding the node holding an ID is one ``bisect``.
* The last node is *open*: plain Python lists, so XADD appends and tail reads
  cost almost nothing.  When it holds ``stream-node-max-entries`` entries
  (live plus deleted, as Redis counts) or about ``stream-node-max-bytes``
  bytes, it is *sealed* into one blob (format 2, described above ``NODE_FORMAT``:
  ids in runs, values with varint lengths, small integers as integers).  Entries
  whose field names equal the node's first entry's ("master" fields) are stored
  as values only, which is Redis's listpack trick.  A sealed node is one bytes
  object: it is cheap in memory, invisible to the cyclic GC, and is already its
  own snapshot form.  Blobs of format 1 (a msgpack document) are still read.
* Deleting an entry only marks it (the node keeps counting it towards its
  size, as in Redis, so ``~`` trimming removes the same nodes Redis would);
  a node whose entries are all deleted is dropped.
* Decoded sealed nodes are kept in a small LRU cache for readers.
* A sealed node whose blob is durable may be *cold*: ``blob`` None, ``where``
  naming its place in the node store (engine/nodecache.py).  Readers get a sealed
  node's bytes through ``Node.sealed_blob``, which fetches a cold one; a node is
  open exactly when ``ids`` is not None.

Nothing here does I/O or reads a clock.

This module is compiled in Cython's pure mode (streamdb/compiled.py): ``Node`` and
``Stream`` are extension types whose attributes are C struct fields, declared
public because the persistence, commands and spark layers read and set them.  Ids
and the counters a document sets stay Python ints (an id is 128 bits; a counter
from a hostile RESTORE payload may be any int, and must fail the RESTORE, not
overflow); the loops' indexes are C integers.
"""

from __future__ import annotations

import re
import struct
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from itertools import repeat
from operator import add, lshift, or_
from typing import Iterator

import cython
import msgpack

from .ids import MAX_ID, MIN_ID, PAST_MAX_ID, SEQ_MASK
from .nodecache import CACHE

__all__ = ["Stream", "Node", "Entry", "NODE_HEADER", "HEADER_OPEN", "HEADER_APART",
           "NODE_FORMAT", "encode_node", "decode_node", "unpack_node", "node_headers",
           "nodes_from_headers"]

Entry = tuple[int, list]  # (id, [field, value, field, value, ...])

# Per element overhead we charge when estimating a node's byte size; it keeps
# our node boundaries close to Redis's listpack boundaries.
# (C constants compiled: XADD adds them per element without a module look-up.)
_ELEMENT_OVERHEAD = cython.declare(cython.Py_ssize_t, 2)
_ENTRY_OVERHEAD = cython.declare(cython.Py_ssize_t, 6)

_DECODED_CACHE_SIZE = 64
# A COUNT above this is no limit at all (range() keeps its count in a C integer).
_NO_LIMIT = 1 << 62


# no_gc: a Node refers only to ints, bytes and lists or sets of them, never back to
# a container of nodes, so it can be in no reference cycle; leaving it out of the
# cyclic GC saves its 16-byte GC header and keeps a stream's hundreds of thousands
# of nodes out of every full collection.
@cython.final
@cython.no_gc
@cython.cclass
class Node:
    """A run of consecutive entries: open (lists) or sealed (one blob, resident or
    cold).  Only an open node keeps its master field names as a list
    (``master``); a sealed node's are in its blob (``master_fields``)."""

    # Its fields (C struct fields when compiled) are declared in stream.pxd.

    def __init__(self, first_id: int, fields: list) -> None:
        self.first = first_id
        self.last = first_id
        self.total = 0          # live + marked-deleted entries
        self.live = 0
        self.nbytes = 0
        self.master = fields[0::2]
        self.ids = []           # None once sealed
        self.entries = []       # None once sealed
        self.blob = None        # the sealed form (None when open or cold)
        self.deleted = None     # ids marked deleted
        self.where = None       # where the node store holds the blob (durable sealed nodes)

    # -- encoding ---------------------------------------------------------

    @cython.ccall
    def seal(self):
        """Pack the open node into its blob and drop the lists."""
        if self.ids is None:
            return
        self.blob = encode_node(self.master, self.ids, self.entries)
        self.ids = None
        self.entries = None
        # The blob holds the master fields: a list of them per sealed node would be
        # about 160 bytes of every cold node's ~320 (10M entries: 16 MB).
        self.master = None
        CACHE.sealed(self)

    def unseal(self) -> None:
        """Turn a sealed node back into lists (used when it must change shape): its
        stored blob no longer describes it."""
        if self.ids is not None:
            return
        d: _Decoded = _Decoded(self.sealed_blob())
        self.master = d.master
        self.ids = d.ids
        self.entries = d.build_entries()
        self.blob = None
        self.forget()

    @cython.ccall
    def master_fields(self) -> list:
        """The field names an entry stores as values only: the open node's list, a
        sealed node's from its blob (through the decoded-node cache)."""
        if self.ids is not None:
            return self.master
        d: _Decoded = self._decoded()
        return d.master

    @cython.ccall
    def sealed_blob(self) -> bytes:
        """A sealed node's blob, fetched from the node store if the node is cold."""
        blob: bytes = self.blob
        if blob is None:
            return CACHE.fetch(self)
        if self.where is not None:
            CACHE.touch(self)
        return blob

    @cython.ccall
    def contents(self) -> tuple:
        """(ids, entries) including deleted ones; sealed nodes decode through the cache."""
        if self.ids is not None:
            return self.ids, self.entries
        d: _Decoded = self._decoded()
        return d.ids, d.build_entries()

    @cython.cfunc
    def _decoded(self) -> _Decoded:
        d = _cache.get(self)
        if d is not None:
            _cache.move_to_end(self)
            if self.where is not None:
                CACHE.touch(self)
            return d
        d = _cache[self] = _Decoded(self.sealed_blob())
        if len(_cache) > _DECODED_CACHE_SIZE:
            _cache.popitem(last=False)
        return d

    def forget(self) -> None:
        """The node leaves its stream or changes shape: no cache keeps it, and a
        stored blob no longer stands for it."""
        _cache.pop(self, None)
        if self.where is not None:
            CACHE.discard(self)
            self.where = None

    def go_cold(self) -> None:
        """The node cache evicts this durable node: only its header stays in memory."""
        self.blob = None
        _cache.pop(self, None)

    @cython.ccall
    def is_deleted(self, sid) -> cython.bint:
        return self.deleted is not None and sid in self.deleted


@cython.final
@cython.cclass
class _Decoded:
    """A sealed node unpacked (Node._decoded): its ids, master field names and
    entries; of a format-1 blob, its stored value rows until someone needs the
    entries as lists."""

    # Its fields (C struct fields when compiled) are declared in stream.pxd.

    def __init__(self, blob: bytes) -> None:
        if blob[:len(NODE_FORMAT)] == NODE_FORMAT:
            self.master, self.ids, self.entries = _unpack_v2(blob)
            self.rows = None
            return
        # Format 1 (a msgpack document): its rows become entries when asked for.
        base_ms, self.master, id_pairs, self.rows = msgpack.unpackb(blob, raw=True,
                                                                    use_list=True)
        self.ids = list(map(or_, map(lshift, map(add, id_pairs[0::2], repeat(base_ms)),
                                     repeat(64)), id_pairs[1::2]))
        self.entries = None

    @cython.ccall
    def build_entries(self) -> list:
        """The entries as field-value lists (a format-1 blob's rows are then dropped)."""
        if self.entries is not None:
            return self.entries
        master: list = self.master
        entries: list = []
        e: list
        fv: list
        for e in self.rows:
            if e and e[0] is None:
                del e[0]
                entries.append(e)
            else:
                fv = [None] * (2 * len(e))
                fv[0::2] = master
                fv[1::2] = e
                entries.append(fv)
        self.entries = entries
        self.rows = None
        return entries


# Sealed node -> its _Decoded form, least recently used first.
_cache: "OrderedDict[Node, _Decoded]" = OrderedDict()


# -- the sealed node's blob ------------------------------------------------------------
#
# Format 2, written since format 1 (one msgpack document: [base_ms, master fields,
# [ms delta, seq, ...], [values row per entry]]) cost 15.5 bytes an entry of a
# `sensor-id 1234 temperature 19.8` stream against Redis's listpack total of ~18 with
# its node; format 1 blobs (snapshots, the node store, DUMP payloads of earlier
# versions) are still read (``_Decoded``), never written.
#
#   0xC1 0x02         the marker: 0xC1 is the one byte msgpack never writes, and a
#                     format-1 blob starts with 0x94 (a 4-element fixarray)
#   first id          varint ms, varint seq
#   n                 varint: the entries, deleted ones included
#   master fields     varint count, then each name as an item
#   ids               runs of consecutive ids (a pipelined producer's node is one or
#                     two): varint (run length - 1), then, while ids remain, the gap
#                     to the next run's first id: in the same ms, 0 and varint (seq -
#                     previous seq - 2); else varint (ms - previous ms) and varint seq
#   entries apart     varint count; per entry without the master field names: varint
#                     (entries stored as values since the previous one), varint
#                     element count
#   values            each entry in order: an entry with the master field names its
#                     values (one per name), an entry apart its fields and values
#
# A varint is LEB128: 7 bits a byte, least significant first, below 2**64.  An item is
# a varint h, then (h even) h >> 1 bytes; an odd h stands for the bytes of a canonical
# decimal integer (listpack's trick: "1234" takes 2 bytes, not 5), the zigzag-coded
# integer h >> 1 (0, 1, 2, 3 ... for 0, -1, 1, -2 ...).  Canonical: no "+", no leading
# zero, no "-0", at most 18 digits, so that the bytes come back exactly.
#
# An entry is stored as values only when the master has a field name: every entry then
# takes a byte at least, so a hostile blob's entry count is bounded by its length.

NODE_FORMAT = b"\xc1\x02"
_INT_ITEM_MAX = cython.declare(cython.Py_ssize_t, 19)     # "-" and 18 digits
_CANONICAL_INT = re.compile(rb"(?:0|-?[1-9][0-9]{0,17})\Z")
# The bytes of the longest varint (a 64-bit value).
_MAX_VARINT = cython.declare(cython.Py_ssize_t, 10)


def _put_varint(out: bytearray, v) -> None:
    """``v`` (0 <= v < 2**64) as a LEB128 varint."""
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _put_item(out: bytearray, item) -> None:
    if len(item) <= _INT_ITEM_MAX and _CANONICAL_INT.match(item):
        v = int(item)
        _put_varint(out, ((v << 1 if v >= 0 else (-v << 1) - 1) << 1) | 1)
    else:
        _put_varint(out, len(item) << 1)
        out += item


@cython.cfunc
def _stored_as_values(fv: list, master: list) -> cython.bint:
    """Whether a node with master fields ``master`` stores entry ``fv`` as its values."""
    return len(master) > 0 and _has_master_fields(fv, master)


def encode_node(master: list, ids: list, entries: list) -> bytes:
    """The format-2 blob of a node: entries ``ids`` (strictly increasing), ``entries``
    their field-value lists, ``master`` its master field names.  ValueError for ids
    out of order or range (a node made by the engine never has them)."""
    if cython.compiled:
        blob = _write_node(master, ids, entries)
        if blob is not None:
            return blob
    n: cython.Py_ssize_t = len(ids)
    if n == 0 or len(entries) != n:
        raise ValueError("a stream node needs ids and one field list per id")
    first = ids[0]
    if not 0 <= first <= MAX_ID:
        raise ValueError("stream node id out of range")
    out = bytearray(NODE_FORMAT)
    _put_varint(out, first >> 64)
    _put_varint(out, first & SEQ_MASK)
    _put_varint(out, n)
    _put_varint(out, len(master))
    for name in master:
        _put_item(out, name)
    _put_id_runs(out, ids)
    as_values: list = [_stored_as_values(fv, master) for fv in entries]
    _put_varint(out, as_values.count(False))
    after: cython.Py_ssize_t = 0
    i: cython.Py_ssize_t
    for i in range(n):
        if not as_values[i]:
            _put_varint(out, i - after)
            _put_varint(out, len(entries[i]))
            after = i + 1
    for i in range(n):
        fv = entries[i]
        for x in (fv[1::2] if as_values[i] else fv):
            _put_item(out, x)
    return bytes(out)


def _put_id_runs(out: bytearray, ids: list) -> None:
    n: cython.Py_ssize_t = len(ids)
    i: cython.Py_ssize_t
    run: cython.Py_ssize_t = 0
    prev = ids[0]
    if ids[n - 1] - prev == n - 1 and ids[n - 1] <= MAX_ID:
        _put_varint(out, n - 1)     # one run (the ids strictly increase)
        return
    for i in range(1, n):
        sid = ids[i]
        if sid == prev + 1:
            run += 1
        else:
            if not prev < sid <= MAX_ID:
                raise ValueError("stream node ids out of order or range")
            _put_varint(out, run)
            if sid >> 64 == prev >> 64:
                _put_varint(out, 0)
                _put_varint(out, sid - prev - 2)
            else:
                _put_varint(out, (sid >> 64) - (prev >> 64))
                _put_varint(out, sid & SEQ_MASK)
            run = 0
        prev = sid
    if prev > MAX_ID:
        raise ValueError("stream node id out of range")
    _put_varint(out, run)


@cython.final
@cython.cclass
class _BlobReader:
    """A cursor over a format-2 blob: every read past its end, or of a varint past 64
    bits, raises ValueError (a hostile RESTORE payload fails, it does not crash)."""

    # Its fields (C struct fields when compiled) are declared in stream.pxd.

    def __init__(self, blob: bytes, pos: cython.Py_ssize_t) -> None:
        self.blob = blob
        self.pos = pos
        self.end = len(blob)
        if cython.compiled:
            self.p = blob

    @cython.cfunc
    def varint(self) -> cython.ulonglong:
        v: cython.ulonglong = 0
        shift: cython.int = 0
        b: cython.ulonglong     # (64 bits: it is shifted up to 63 places)
        while True:
            if self.pos >= self.end:
                raise ValueError("stream node blob cut short")
            if cython.compiled:
                b = self.p[self.pos]
            else:
                b = self.blob[self.pos]
            self.pos += 1
            if shift == 63 and b > 1:
                raise ValueError("stream node varint past 64 bits")
            v |= (b & 0x7F) << shift
            if b < 0x80:
                return v
            shift += 7

    @cython.cfunc
    def count(self, most: cython.Py_ssize_t) -> cython.Py_ssize_t:
        """A varint that counts something of which the blob can hold ``most``."""
        v: cython.ulonglong = self.varint()
        limit: cython.ulonglong = most      # (typed, not cast: cast is slow interpreted)
        if v > limit:
            raise ValueError("stream node count out of range")
        return v

    @cython.cfunc
    def item(self) -> bytes:
        h: cython.ulonglong = self.varint()
        room: cython.ulonglong = self.end - self.pos
        n: cython.Py_ssize_t
        if h & 1:
            return _int_item(h >> 1)
        if h >> 1 > room:
            raise ValueError("stream node blob cut short")
        n = h >> 1
        self.pos += n
        if cython.compiled:
            # (A slice of the bytes object made a slice object and two ints: ~750
            # instructions an item against ~90, and a node decode is ~2 items an entry;
            # XREADGROUP COUNT 10 + XACK in-process, callgrind)
            return PyBytes_FromStringAndSize(cython.cast(cython.p_char, self.p + self.pos - n), n)
        return self.blob[self.pos - n:self.pos]


@cython.cfunc
def _int_item(z: cython.ulonglong) -> bytes:
    """The decimal bytes of the integer whose zigzag code is ``z`` (< 2**63)."""
    negative: cython.bint = z & 1
    magnitude: cython.ulonglong = (z + 1) >> 1 if negative else z >> 1
    if not cython.compiled:
        return b"%d" % (-magnitude if negative else magnitude)
    # Compiled: the digits written backwards into a C buffer, with no Python int and
    # no formatting call.
    digits: cython.uchar[24]
    i: cython.int = 24
    while True:
        i -= 1
        digits[i] = 0x30 + magnitude % 10
        magnitude //= 10
        if magnitude == 0:
            break
    if negative:
        i -= 1
        digits[i] = 0x2D
    return PyBytes_FromStringAndSize(cython.cast(cython.p_char, digits + i), 24 - i)


@cython.cfunc
def _extend_run(ids: list, first, run: cython.Py_ssize_t) -> cython.void:
    """Append ``first`` and the ``run`` ids after it (consecutive integers) to ``ids``.

    Compiled, each id is the run's millisecond part plus a C sequence number: a range of
    128-bit ints makes each with three big-int operations (~740 instructions an id
    against ~200; a node decode, XREADGROUP COUNT 10 + XACK in-process, callgrind).  A
    run whose sequence numbers would pass 64 bits crosses a millisecond: the range."""
    seq: cython.ulonglong
    i: cython.Py_ssize_t
    if cython.compiled:
        seq = PyLong_AsUnsignedLongLongMask(first)
        if seq + cython.cast(cython.ulonglong, run) >= seq:     # (no wrap past 64 bits)
            high = first - seq
            for i in range(run + 1):
                ids.append(high + (seq + cython.cast(cython.ulonglong, i)))
            return
    ids.extend(range(first, first + run + 1))


def unpack_node(blob: bytes) -> tuple:
    """(master field names, ids, entries) of a sealed node's blob, either format;
    ValueError (or msgpack's errors, format 1) for a malformed one."""
    d: _Decoded = _Decoded(blob)
    return d.master, d.ids, d.build_entries()


def decode_node(blob: bytes) -> tuple[list[int], list[list]]:
    """(ids, entries) of a sealed node's blob, either format."""
    _, ids, entries = unpack_node(blob)
    return ids, entries


@cython.cfunc
def _unpack_v2(blob: bytes) -> tuple:
    """(master field names, ids, entries) of a format-2 blob."""
    r: _BlobReader = _BlobReader(blob, len(NODE_FORMAT))
    most: cython.Py_ssize_t = len(blob)
    # (Python ints: a hostile blob's sums must not wrap around as C integers would.)
    ms: object = r.varint()
    gap: object
    sid = (ms << 64) | r.varint()
    n: cython.Py_ssize_t = r.count(most)
    m: cython.Py_ssize_t = r.count(most)
    i: cython.Py_ssize_t
    j: cython.Py_ssize_t
    if n == 0:
        raise ValueError("stream node without entries")
    master: list = [r.item() for i in range(m)]
    ids: list = []
    run: cython.Py_ssize_t
    while True:
        run = r.count(n - len(ids) - 1)
        _extend_run(ids, sid, run)
        if len(ids) == n:
            break
        sid = ids[-1]
        ms = r.varint()
        gap = r.varint()
        if ms == 0:
            sid += gap + 2
        else:
            sid = (((sid >> 64) + ms) << 64) | gap
    if ids[-1] > MAX_ID:
        raise ValueError("stream node id out of range")
    apart: cython.Py_ssize_t = r.count(n)
    records: _BlobReader = _BlobReader(blob, r.pos)
    for i in range(2 * apart):
        r.varint()              # the values follow the records
    next_apart: cython.Py_ssize_t = records.count(n) if apart else n
    entries: list = [None] * n
    fv: list
    for i in range(n):
        if i == next_apart:
            entries[i] = [r.item() for j in range(records.count(most))]
            apart -= 1
            next_apart = i + 1 + records.count(n) if apart else n
        else:
            fv = [None] * (2 * m)
            for j in range(m):
                fv[2 * j] = master[j]
                fv[2 * j + 1] = r.item()
            entries[i] = fv
    if apart or r.pos != r.end:
        raise ValueError("stream node blob does not match its counts")
    return master, ids, entries


# -- encode_node compiled: the blob written in C ---------------------------------------
#
# encode_node runs once per node on every XADD path (AOF replay included).  Compiled, it
# writes the bytes straight from the node's lists: an upper bound of the size, one pass
# into a scratch buffer, one copy into the blob.  The scratch buffer is the module's and
# only grows: a malloc and free of the bound per node (about twice the blob) left holes
# that later blobs fit badly, about 1 byte of RSS per entry (1M entries, tools/bench.py
# memory).  Anything unusual (a bytes subclass, an id out of range or order) returns
# None and takes the source's path; the property tests
# (tests/unit/test_compiled_engine.py) hold the bytes equal to the source's.

# _write_node's scratch buffer and its size (compiled form only; the GIL is held
# throughout a write, and a forked child gets its own copy).
_scratch = cython.declare(cython.p_uchar, cython.NULL)
_scratch_size = cython.declare(cython.Py_ssize_t, 0)


@cython.cfunc
@cython.inline
def _put_be(p: cython.p_uchar, value: cython.ulonglong, size: cython.int) -> cython.void:
    """``value`` as ``size`` big-endian bytes at ``p``."""
    while size > 0:
        size -= 1
        p[size] = value & 0xFF
        value >>= 8


@cython.cfunc
@cython.inline
def _put_varint_c(out: cython.p_uchar, pos: cython.Py_ssize_t,
                  v: cython.ulonglong) -> cython.Py_ssize_t:
    """_put_varint at ``out[pos]``; the new pos (compiled form only)."""
    while v >= 0x80:
        out[pos] = (v & 0x7F) | 0x80
        v >>= 7
        pos += 1
    out[pos] = v
    return pos + 1


@cython.cfunc
@cython.inline
def _int_item_code(p: cython.p_uchar, n: cython.Py_ssize_t) -> cython.longlong:
    """The zigzag code of the canonical decimal integer of ``n`` bytes at ``p``, or -1
    when they are not one (_CANONICAL_INT, compiled form only)."""
    i: cython.Py_ssize_t = 0
    v: cython.longlong = 0
    if n == 0 or n > _INT_ITEM_MAX:
        return -1
    if p[0] == 0x2D:        # "-"
        i = 1
    if n - i == 0 or n - i > 18 or (p[i] == 0x30 and (i or n > 1)):
        return -1           # no digits, too many, or a leading zero ("0" itself is fine)
    while i < n:
        if p[i] < 0x30 or p[i] > 0x39:
            return -1
        v = v * 10 + (p[i] - 0x30)
        i += 1
    return 2 * v - 1 if p[0] == 0x2D else 2 * v


@cython.cfunc
@cython.inline
def _put_item_c(out: cython.p_uchar, pos: cython.Py_ssize_t, b: bytes) -> cython.Py_ssize_t:
    """_put_item at ``out[pos]``; the new pos (compiled form only)."""
    n: cython.Py_ssize_t = len(b)
    p: cython.p_uchar = cython.cast(cython.p_uchar, PyBytes_AS_STRING(b))
    code: cython.longlong = _int_item_code(p, n)
    if code >= 0:
        return _put_varint_c(out, pos, (code << 1) | 1)
    pos = _put_varint_c(out, pos, n << 1)
    memcpy(out + pos, p, n)
    return pos + n


@cython.cfunc
@cython.boundscheck(False)
@cython.wraparound(False)
def _items_bound(items: list) -> cython.Py_ssize_t:
    """The bytes ``items`` take as items at most; -1 if one is not exactly bytes."""
    total: cython.Py_ssize_t = 0
    i: cython.Py_ssize_t
    for i in range(len(items)):
        x = items[i]
        if type(x) is not bytes:
            return -1
        total += _MAX_VARINT + len(x)
    return total


@cython.cfunc
@cython.boundscheck(False)
@cython.wraparound(False)
def _write_node(master: list, ids: list, entries: list) -> object:
    """encode_node's blob written in C (compiled form only), or None when the node
    holds something the source's path must see (see above)."""
    n: cython.Py_ssize_t = len(ids)
    i: cython.Py_ssize_t
    j: cython.Py_ssize_t
    k: cython.Py_ssize_t
    pos: cython.Py_ssize_t
    run: cython.Py_ssize_t = 0
    after: cython.Py_ssize_t = 0
    ms: cython.ulonglong
    seq: cython.ulonglong
    prev_ms: cython.ulonglong
    prev_seq: cython.ulonglong
    if n == 0 or len(entries) != n:
        return None
    first = ids[0]
    last = ids[n - 1]
    if type(first) is not int or type(last) is not int or first < 0 or last > MAX_ID:
        return None
    # The marker, the first id, n, the master and apart counts; per entry its id's run
    # and gap (3 varints) and its record apart (2).
    bound: cython.Py_ssize_t = 2 + 5 * _MAX_VARINT
    k = _items_bound(master)
    if k < 0:
        return None
    bound += k
    fv: list
    for i in range(n):
        e = entries[i]
        if type(e) is not list:
            return None
        k = _items_bound(e)
        if k < 0:
            return None
        bound += k + 5 * _MAX_VARINT
    one_run: cython.bint = last - first == n - 1
    if not one_run:
        for i in range(n):
            sid = ids[i]
            if type(sid) is not int or sid < 0 or sid > MAX_ID:
                return None
    global _scratch, _scratch_size
    grown: cython.p_uchar
    if bound > _scratch_size:
        grown = cython.cast(cython.p_uchar, realloc(_scratch, max(bound, 2 * _scratch_size)))
        if grown == cython.NULL:
            raise MemoryError()
        _scratch = grown
        _scratch_size = max(bound, 2 * _scratch_size)
    out: cython.p_uchar = _scratch
    out[0] = NODE_FORMAT[0]
    out[1] = NODE_FORMAT[1]
    prev_ms = PyLong_AsUnsignedLongLongMask(first >> 64)
    prev_seq = PyLong_AsUnsignedLongLongMask(first)
    pos = _put_varint_c(out, 2, prev_ms)
    pos = _put_varint_c(out, pos, prev_seq)
    pos = _put_varint_c(out, pos, n)
    pos = _put_varint_c(out, pos, len(master))
    for i in range(len(master)):
        pos = _put_item_c(out, pos, master[i])
    if not one_run:
        for i in range(1, n):
            sid = ids[i]
            ms = PyLong_AsUnsignedLongLongMask(sid >> 64)
            seq = PyLong_AsUnsignedLongLongMask(sid)
            if (seq == prev_seq + 1 and ms == prev_ms) or \
                    (seq == 0 and prev_seq + 1 == 0 and ms == prev_ms + 1):
                run += 1    # (the next id: the next seq, or past the last one, the next ms)
            elif ms < prev_ms or (ms == prev_ms and seq <= prev_seq):
                return None     # out of order: the source's path raises
            else:
                pos = _put_varint_c(out, pos, run)
                if ms == prev_ms:
                    pos = _put_varint_c(out, pos, 0)
                    pos = _put_varint_c(out, pos, seq - prev_seq - 2)
                else:
                    pos = _put_varint_c(out, pos, ms - prev_ms)
                    pos = _put_varint_c(out, pos, seq)
                run = 0
            prev_ms = ms
            prev_seq = seq
    pos = _put_varint_c(out, pos, n - 1 if one_run else run)
    k = 0
    for i in range(n):
        if not _stored_as_values(entries[i], master):
            k += 1
    pos = _put_varint_c(out, pos, k)
    if k:
        for i in range(n):
            fv = entries[i]
            if not _stored_as_values(fv, master):
                pos = _put_varint_c(out, pos, i - after)
                pos = _put_varint_c(out, pos, len(fv))
                after = i + 1
    for i in range(n):
        fv = entries[i]
        if not k or _stored_as_values(fv, master):    # (no entry apart: no compare again)
            j = 1
            while j < len(fv):
                pos = _put_item_c(out, pos, fv[j])
                j += 2
        else:
            for j in range(len(fv)):
                pos = _put_item_c(out, pos, fv[j])
    return PyBytes_FromStringAndSize(cython.cast(cython.p_char, out), pos)


# A stream's node headers as snapshots and DUMP payloads store them
# (persistence/codec.py): one fixed-size big-endian record per node, all of a
# stream's in one bytes value: first id (ms, seq), last id (ms, seq), total, live,
# nbytes, flags.  The record's first 16 bytes are the first id as one 128-bit
# big-endian number, and the next 16 the last id.
NODE_HEADER = struct.Struct(">QQQQIIIB")
HEADER_OPEN = 1     # flags: the open node (its blob was packed for the document)
HEADER_APART = 2    # flags: the blob is stored apart (incremental snapshots), fetched by first id


def node_headers(nodes: list, sealed_flags: cython.int) -> tuple:
    """(the header records of ``nodes`` as one bytes value, the indexes of the open
    nodes, the indexes of the nodes with deletion marks).  An open node's flags are
    HEADER_OPEN, a sealed one's ``sealed_flags``.

    A snapshot of a stream packs every node's header (100k nodes for 10M entries):
    compiled, into one buffer with no object per node (struct.pack per node took
    about 90 ms of an incremental snapshot's 120 there)."""
    if cython.compiled:
        packed = _node_headers_c(nodes, sealed_flags)
        if packed is not None:
            return packed
    # (The compiled form takes this way too for nodes of another class: the plain
    # Node of this module's source, which tests run beside the compiled one.)
    pack = NODE_HEADER.pack
    return (b"".join([pack(node.first >> 64, node.first & SEQ_MASK, node.last >> 64,
                           node.last & SEQ_MASK, node.total, node.live, node.nbytes,
                           HEADER_OPEN if node.ids is not None else sealed_flags)
                      for node in nodes]),
            [i for i, node in enumerate(nodes) if node.ids is not None],
            [i for i, node in enumerate(nodes) if node.deleted])


@cython.cfunc
@cython.exceptval(-1, check=True)
def _u32(x) -> cython.longlong:
    """A header count as struct's 'I' takes it, with struct's error otherwise."""
    if not (type(x) is int and 0 <= x <= 0xFFFFFFFF):
        NODE_HEADER.pack(0, 0, 0, 0, x, 0, 0, 0)    # struct's error, as the plain form's
    v: cython.longlong = x
    return v


@cython.cfunc
def _node_headers_c(nodes: list, sealed_flags: cython.int) -> tuple:
    """node_headers into a C buffer (compiled form only); None when a node is not
    of this Node class."""
    n: cython.Py_ssize_t = len(nodes)
    size: cython.Py_ssize_t = NODE_HEADER.size
    out: bytes = PyBytes_FromStringAndSize(cython.NULL, n * size)
    p: cython.p_uchar = cython.cast(cython.p_uchar, PyBytes_AS_STRING(out))
    open_at: list = []
    deleted_at: list = []
    i: cython.Py_ssize_t
    node: Node
    for i in range(n):
        if type(nodes[i]) is not Node:
            return None
        node = nodes[i]
        _put_be(p, PyLong_AsUnsignedLongLongMask(node.first >> 64), 8)
        _put_be(p + 8, PyLong_AsUnsignedLongLongMask(node.first), 8)
        _put_be(p + 16, PyLong_AsUnsignedLongLongMask(node.last >> 64), 8)
        _put_be(p + 24, PyLong_AsUnsignedLongLongMask(node.last), 8)
        _put_be(p + 32, _u32(node.total), 4)
        _put_be(p + 36, _u32(node.live), 4)
        _put_be(p + 40, _u32(node.nbytes), 4)
        if node.ids is not None:
            p[44] = HEADER_OPEN
            open_at.append(i)
        else:
            p[44] = sealed_flags
        if node.deleted:
            deleted_at.append(i)
        p += size
    return out, open_at, deleted_at


def nodes_from_headers(raw: bytes, where) -> tuple:
    """Sealed Nodes from a column of NODE_HEADER records (its length a multiple of
    the record size: the caller checks).  Returns ``(nodes, firsts, rest)``.

    ``where`` (the node store's location of the stream's rows) or None: nodes
    stored apart (flags exactly HEADER_APART), but the last, are left cold there,
    complete.  ``rest``: the indexes of every other node (open, blob in the document,
    the last, or all of them when ``where`` is None), whose blob or lists the caller
    still sets.

    A restart makes one Node per sealed node (500k for 50M entries), so this is
    restart time: compiled, it reads the records in C (each id one 128-bit int made
    from its 16 bytes) and makes a Node without calling its __init__ (measured 1.1 to
    0.2 us a node)."""
    size: cython.Py_ssize_t = NODE_HEADER.size
    count: cython.Py_ssize_t = len(raw) // size
    last_n: cython.Py_ssize_t = count - 1
    i: cython.Py_ssize_t
    nodes: list = [None] * count
    firsts: list = [None] * count
    rest: list = []
    node: Node
    if cython.compiled:
        p: cython.p_uchar = raw
        rec: cython.p_uchar
        for i in range(count):
            rec = p + i * size
            node = _sealed_node(_id_at(rec), _id_at(rec + 16),
                                _be32(rec + 32), _be32(rec + 36), _be32(rec + 40))
            _place_node(node, i, rec[44] == HEADER_APART and i != last_n, where,
                        nodes, firsts, rest)
        return nodes, firsts, rest
    for i, (fm, fs, lm, ls, total, live, nbytes, flags) in enumerate(NODE_HEADER.iter_unpack(raw)):
        node = _sealed_node((fm << 64) | fs, (lm << 64) | ls, total, live, nbytes)
        _place_node(node, i, flags == HEADER_APART and i != last_n, where, nodes, firsts, rest)
    return nodes, firsts, rest


@cython.cfunc
@cython.inline
def _place_node(node: Node, i: cython.Py_ssize_t, apart: cython.bint, where,
                nodes: list, firsts: list, rest: list) -> cython.void:
    """nodes_from_headers' node ``i``: left cold at ``where`` when stored apart there,
    else in ``rest`` for the caller."""
    if apart and where is not None:
        node.where = where
    else:
        rest.append(i)
    nodes[i] = node
    firsts[i] = node.first


@cython.cfunc
@cython.inline
def _be32(p: cython.p_uchar) -> cython.uint:
    """A big-endian 32-bit number at ``p`` (compiled form only)."""
    return (cython.cast(cython.uint, p[0]) << 24) | (cython.cast(cython.uint, p[1]) << 16) \
        | (cython.cast(cython.uint, p[2]) << 8) | p[3]


@cython.cfunc
def _id_at(p: cython.p_uchar):
    """The id stored as 16 big-endian bytes at ``p`` (compiled form only)."""
    ms: cython.ulonglong = 0
    seq: cython.ulonglong = 0
    i: cython.int
    for i in range(8):
        ms = (ms << 8) | p[i]
        seq = (seq << 8) | p[8 + i]
    high: object = ms
    return (high << 64) | seq


@cython.cfunc
def _sealed_node(first, last, total, live, nbytes) -> Node:
    """A sealed node with no blob yet (Node.__new__: no __init__, whose lists a
    sealed node does not keep)."""
    node: Node = Node.__new__(Node)
    node.first, node.last = first, last
    node.total, node.live, node.nbytes = total, live, nbytes
    node.master = node.ids = node.entries = None
    node.blob = None
    node.deleted = None
    node.where = None
    return node

@cython.cfunc
@cython.locals(n=cython.Py_ssize_t, i=cython.Py_ssize_t, step=cython.Py_ssize_t)
def _entry_bytes(fv: list, same_fields: cython.bint) -> cython.Py_ssize_t:
    """The bytes entry ``fv`` adds to a node: its values only when its field names
    are the node's master fields, else all its elements."""
    n = _ENTRY_OVERHEAD
    # An index loop, not a slice: no list is made (XADD computes this per entry).
    # (Two assignments, not a tuple: compiled, a tuple's ints would be made per call.)
    if same_fields:
        i = 1
        step = 2
    else:
        i = 0
        step = 1
    while i < len(fv):
        n += len(fv[i]) + _ELEMENT_OVERHEAD
        i += step
    return n


@cython.cfunc
@cython.locals(j=cython.Py_ssize_t)
def _has_master_fields(fv: list, master: list) -> cython.bint:
    """``fv[0::2] == master``, without making the list."""
    if len(fv) != 2 * len(master):
        return False
    for j in range(len(master)):
        a = fv[2 * j]
        b = master[j]
        if a is b:
            continue        # (as list equality: the same object is equal)
        # Compiled, two exact bytes compare in C (length, memcmp) rather than through
        # the rich comparison and its bool: XADD compares its field names with the
        # tail node's, sealing each entry's (~1.5% of an XADD -P16 server's CPU, perf).
        if cython.compiled and type(a) is bytes and type(b) is bytes:
            if not _same_bytes(a, b):
                return False
        elif a != b:
            return False
    return True


@cython.cfunc
@cython.inline
def _same_bytes(a: bytes, b: bytes) -> cython.bint:
    """a == b for two exact bytes objects, in C (compiled form only)."""
    n: cython.Py_ssize_t = len(a)
    return n == len(b) and memcmp(PyBytes_AS_STRING(a), PyBytes_AS_STRING(b), n) == 0


def _node_referenced(node: Node, referenced) -> bool:
    """Whether a live entry of ``node`` is one that ``referenced`` keeps (Stream.trim)."""
    ids, _ = node.contents()
    return any(referenced(x) for x in ids if not node.is_deleted(x))


@cython.final
@cython.cclass
class Stream:
    """A Redis stream: entries, its counters, and its consumer groups."""

    # Its fields (C struct fields when compiled) are declared in stream.pxd.

    def __init__(self) -> None:
        self.nodes = []         # of Node
        self.firsts = []        # each node's first id
        self.length = 0
        self.last_id = MIN_ID
        self.entries_added = 0
        self.max_deleted_id = MIN_ID
        # name -> ConsumerGroup; created on demand (most streams have none).
        self.groups = None
        self.idmp = None   # idempotent-producer state (engine.idmp), on demand
        self.retention = None   # retention settings and counters (engine.retention), on demand

    # -- appending ------------------------------------------------------------

    @cython.ccall
    def append(self, sid, fv: list, max_entries, max_bytes):
        """Add an entry whose ID is already known to be > last_id."""
        tail: Node = self.nodes[-1] if self.nodes else None
        size: cython.Py_ssize_t
        if tail is not None:
            size = _entry_bytes(fv, _has_master_fields(fv, tail.master_fields()))
            # The node's byte count with this entry: computed once (an int made), kept below.
            nbytes = tail.nbytes + size
            if (max_bytes and nbytes >= max_bytes) or \
                    (max_entries and tail.total >= max_entries):
                tail.seal()
                tail = None
        if tail is None:
            tail = self._open_node(sid, fv)
            nbytes = tail.nbytes + _entry_bytes(fv, True)
        elif tail.ids is None:
            tail.unseal()
        tail.ids.append(sid)
        tail.entries.append(fv)
        tail.last = sid
        tail.total += 1
        tail.live += 1
        tail.nbytes = nbytes
        self.length += 1
        self.last_id = sid
        self.entries_added += 1

    @cython.cfunc
    def _open_node(self, sid, fv: list) -> Node:
        """A new tail node for entry (sid, fv), whose field names become its master
        fields; its byte count holds the header only: the entry is the caller's to add."""
        node: Node = Node(sid, fv)
        node.nbytes = sum(len(f) + _ELEMENT_OVERHEAD for f in node.master) + 8
        self.nodes.append(node)
        self.firsts.append(sid)
        return node

    # -- reading --------------------------------------------------------------

    def first_id(self) -> int:
        """ID of the first live entry, 0-0 when empty (Redis's s->first_id)."""
        if not self.length:
            return MIN_ID
        node: Node = self.nodes[0]
        if node.deleted is None:
            return node.first
        ids, _ = node.contents()
        for sid in ids:
            if sid not in node.deleted:
                return sid
        raise AssertionError("node without live entries")

    def get(self, sid: int) -> list | None:
        """The fields of entry ``sid``, or None if it does not exist (or was deleted)."""
        i: cython.Py_ssize_t = bisect_right(self.firsts, sid) - 1
        if i < 0:
            return None
        node: Node = self.nodes[i]
        if sid > node.last or node.is_deleted(sid):
            return None
        ids, entries = node.contents()
        j = bisect_left(ids, sid)
        if j < len(ids) and ids[j] == sid:
            return entries[j]
        return None

    def range(self, start: int, end: int, count: int = 0, rev: bool = False) -> list[Entry]:
        """Live entries with start <= id <= end, ascending (or descending if rev).

        ``count`` 0 means no limit.
        """
        out: list = []
        if start > end or not self.length:
            return out
        want: cython.Py_ssize_t = count if count < _NO_LIMIT else _NO_LIMIT
        nodes: list = self.nodes
        i: cython.Py_ssize_t
        j: cython.Py_ssize_t
        n: cython.Py_ssize_t
        node: Node
        ids: list
        entries: list
        deleted: set
        if not rev:
            i = max(bisect_right(self.firsts, start) - 1, 0)
            while i < len(nodes):
                node = nodes[i]
                if node.first > end:
                    break
                if node.last >= start:
                    ids, entries = node.contents()
                    j = bisect_left(ids, start) if ids[0] < start else 0
                    deleted = node.deleted
                    n = len(ids)
                    while j < n:
                        sid = ids[j]
                        if sid > end:
                            return out
                        if deleted is None or sid not in deleted:
                            out.append((sid, entries[j]))
                            if want and len(out) >= want:
                                return out
                        j += 1
                i += 1
        else:
            i = bisect_right(self.firsts, end) - 1
            while i >= 0:
                node = nodes[i]
                if node.last < start:
                    break
                ids, entries = node.contents()
                j = bisect_right(ids, end) - 1
                deleted = node.deleted
                while j >= 0:
                    sid = ids[j]
                    if sid < start:
                        return out
                    if deleted is None or sid not in deleted:
                        out.append((sid, entries[j]))
                        if want and len(out) >= want:
                            return out
                    j -= 1
                i -= 1
        return out

    def last_entry(self) -> Entry | None:
        got = self.range(MIN_ID, MAX_ID, 1, rev=True)
        return got[0] if got else None

    def first_entry(self) -> Entry | None:
        got = self.range(MIN_ID, MAX_ID, 1)
        return got[0] if got else None

    def __iter__(self) -> Iterator[Entry]:
        for node in self.nodes:
            ids, entries = node.contents()
            deleted = node.deleted
            for sid, fv in zip(ids, entries):
                if deleted is None or sid not in deleted:
                    yield sid, fv

    # -- deleting -------------------------------------------------------------

    def delete(self, sid: int) -> bool:
        """Mark entry ``sid`` deleted (XDEL).  Returns whether it existed.

        Updates length and max-deleted-entry-id; drops a node left empty.
        """
        i: cython.Py_ssize_t = bisect_right(self.firsts, sid) - 1
        if i < 0:
            return False
        node: Node = self.nodes[i]
        if sid > node.last or node.is_deleted(sid):
            return False
        ids, _ = node.contents()
        j = bisect_left(ids, sid)
        if j == len(ids) or ids[j] != sid:
            return False
        if node.deleted is None:
            node.deleted = set()
        node.deleted.add(sid)
        node.live -= 1
        self.length -= 1
        if sid > self.max_deleted_id:
            self.max_deleted_id = sid
        if node.live == 0:
            self._drop_node(i)
        return True

    @cython.cfunc
    def _drop_node(self, i: cython.Py_ssize_t) -> cython.void:
        node: Node = self.nodes.pop(i)
        self.firsts.pop(i)
        node.forget()

    # -- trimming -------------------------------------------------------------

    def trim(self, *, maxlen: int | None = None, minid: int | None = None,
             approx: bool = False, limit: int = 0, stop_id: int = PAST_MAX_ID,
             referenced=None, removed: list | None = None) -> int:
        """Trim from the head as Redis's streamTrim() does; returns entries removed.

        Exactly one of ``maxlen``/``minid``.  With ``approx`` only whole nodes go.
        ``limit`` (0 = none) caps the work in entries, counted per whole node as
        Redis does.  ``stop_id``: no node or entry from that id on is removed (a
        retention bound).  ``referenced(sid)``, if given (the ACKED policy:
        engine/policies.py's apply_trim), says
        which entries a consumer group still needs: they stay, each one, as in
        Redis 8.2+; a node the strategy lets go whole but that holds one of them
        loses its other entries one by one, approximate trim or not, and trimming
        goes on to the next node.  ``removed``, if given, collects the removed ids.
        """
        deleted_total = 0
        node: Node
        nodes: list = self.nodes
        # Removed nodes are dropped from the lists at the end, in one slice when they
        # are a leading run (always, but for ACKED): a pop(0) per node is a memmove
        # of the whole index each, seconds for thousands of nodes of a long stream.
        dropped: list = []
        i: cython.Py_ssize_t = 0
        while i < len(nodes):
            if maxlen is not None and self.length <= maxlen:
                break
            node = nodes[i]
            entries = node.live
            if limit and deleted_total + entries > limit:
                break
            if maxlen is not None:
                remove_node = self.length - entries >= maxlen
            else:
                remove_node = node.last < minid
            remove_node = remove_node and node.last < stop_id
            if remove_node and (referenced is None or not _node_referenced(node, referenced)):
                if removed is not None:
                    ids, _ = node.contents()
                    removed.extend(x for x in ids if not node.is_deleted(x))
                node.forget()
                dropped.append(i)
                i += 1
                self.length -= entries
                deleted_total += entries
                continue
            # Either the strategy stops inside this node, or (ACKED) the node holds
            # entries still referenced: its entries go one by one, from its head.
            if approx and not remove_node:
                break
            ids, _ = node.contents()
            for sid in ids:
                if maxlen is not None:
                    if self.length <= maxlen:
                        break
                elif sid >= minid:
                    break
                if sid >= stop_id:
                    break
                if node.is_deleted(sid) or (referenced is not None and referenced(sid)):
                    continue
                if node.deleted is None:
                    node.deleted = set()
                node.deleted.add(sid)
                node.live -= 1
                self.length -= 1
                deleted_total += 1
                if removed is not None:
                    removed.append(sid)
            if node.live == 0:   # only possible when its last entry was already deleted
                node.forget()
                dropped.append(i)
            if not remove_node:
                break
            i += 1
        if dropped:
            n = len(dropped)
            if dropped[-1] == n - 1:
                del nodes[:n]
                del self.firsts[:n]
            else:
                gone = set(dropped)
                nodes[:] = [x for j, x in enumerate(nodes) if j not in gone]
                self.firsts[:] = [x for j, x in enumerate(self.firsts) if j not in gone]
        return deleted_total

    # -- introspection --------------------------------------------------------

    def node_count(self) -> int:
        return len(self.nodes)

    def memory_estimate(self) -> int:
        """Bytes held in memory (a cold node counts its header only)."""
        total = 200
        for node in self.nodes:
            if node.blob is not None:
                total += len(node.blob) + 120
            elif node.ids is None:
                total += 120
            else:
                total += node.nbytes + 120 + 16 * node.total
            if node.deleted:
                total += 40 * len(node.deleted)
        return total
