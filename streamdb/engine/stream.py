"""The stream data type: entries in nodes, plus the metadata Redis keeps.

Layout (docs/ARCHITECTURE.md: cold nodes under "Persistence", the GC under
"Garbage collection"):

* A stream is a list of nodes ordered by ID and a parallel list of each node's
  first ID, so that finding the node holding an ID is one ``bisect``.
* The last node is *open*: plain Python lists, so XADD appends and tail reads
  cost almost nothing.  When it holds ``stream-node-max-entries`` entries
  (live plus deleted, as Redis counts) or about ``stream-node-max-bytes``
  bytes, it is *sealed* into one msgpack blob.  Entries whose field names equal
  the node's first entry's ("master" fields) are stored as values only, which
  is Redis's listpack trick.  A sealed node is one bytes object: it is cheap in
  memory, invisible to the cyclic GC, and is already its own snapshot form.
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
           "node_headers", "nodes_from_headers"]

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
    """A run of consecutive entries: open (lists) or sealed (one msgpack blob,
    resident or cold).  Only an open node keeps its master field names as a list
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
        """Pack the open node into its msgpack blob and drop the lists."""
        if self.ids is None:
            return
        self.blob = encode_node(self.first, self.master, self.ids, self.entries)
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
        return d.ids, d.entries if d.entries is not None else d.build_entries()

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
    """A sealed node unpacked (Node._decoded): its ids, its stored value rows and
    master field names, and its entries once someone needs them as lists."""

    # Its fields (C struct fields when compiled) are declared in stream.pxd.

    def __init__(self, blob: bytes) -> None:
        base_ms, self.master, id_pairs, self.rows = msgpack.unpackb(blob, raw=True,
                                                                    use_list=True)
        self.ids = list(map(or_, map(lshift, map(add, id_pairs[0::2], repeat(base_ms)),
                                     repeat(64)), id_pairs[1::2]))
        self.entries = None

    @cython.ccall
    def build_entries(self) -> list:
        """The entries as field-value lists (the rows are then dropped)."""
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


# encode_node's Packers, made once: msgpack.packb is a Python function that makes a
# Packer per call, whose 1 MiB buffer is a fresh malloc each time.  One Packer
# (autoreset: pack returns the bytes and empties the buffer, also after an error)
# is safe to share: packing lists of bytes, ints and None calls no Python code,
# so it holds the GIL from start to end.  strict_types tests each object's exact
# type, where the lenient Packer asks isinstance(o, ExtType) (a Python class) of
# every list before packing it as one; the bytes are the same.  Measured
# (callgrind, a 100-entry node): packb 143.5k, lenient Packer 140.2k, strict 110.6k
# instructions.  A node holding a subclass of bytes or int (not made by the server
# itself) is packed by the lenient one.
_node_packer = msgpack.Packer(use_bin_type=True, strict_types=True)
_lenient_node_packer = msgpack.Packer(use_bin_type=True)


def encode_node(first: int, master: list, ids: list[int], entries: list[list]) -> bytes:
    """Blob = [master_fields, [ms_delta, seq, ...], [entry, ...]].

    An entry with the master field names is stored as its values; any other
    entry as ``[None, f1, v1, ...]`` (a value is never None, so it is unambiguous).
    """
    base_ms: cython.ulonglong = first >> 64
    if cython.compiled:
        blob = _write_node(first, base_ms, master, ids, entries)
        if blob is not None:
            return blob
    # Sealing runs once per node on every XADD path, AOF replay included: the
    # loops index typed lists (C loops when compiled), the ms deltas are C math.
    n: cython.Py_ssize_t = len(ids)
    i: cython.Py_ssize_t
    ms: cython.ulonglong
    id_pairs: list = [0] * (2 * n)
    if ids[-1] - first == n - 1 and ids[-1] >> 64 == base_ms:
        # Consecutive ids of one millisecond (a pipelined producer's node): every
        # ms delta is 0 and the sequences are a range.
        # (Compiled code assigns only a list to an extended slice: hence list(...).)
        seq = first & SEQ_MASK
        id_pairs[1::2] = list(range(seq, seq + n))
    else:
        mask = SEQ_MASK
        for i in range(n):
            sid = ids[i]
            ms = sid >> 64
            id_pairs[2 * i] = ms - base_ms
            id_pairs[2 * i + 1] = sid & mask
    fv: list
    packed: list = [fv[1::2] if _has_master_fields(fv, master) else [None, *fv]
                    for fv in entries]
    doc: list = [base_ms, master, id_pairs, packed]
    try:
        return _node_packer.pack(doc)
    except TypeError:
        return _lenient_node_packer.pack(doc)


# -- encode_node compiled: the blob written in C -------------------------------------
#
# The msgpack Packer walks the document encode_node builds (two lists of 2n ids and n
# entries made first) with a type dispatch per object: ~2.6k of the ~15.3k instructions
# of an XADD request (callgrind, XADD -P16 through the server's objects: one node
# sealed per 100 XADDs, ~264k instructions each).  The document's shape is fixed
# (non-negative ints, bytes, lists, None), so the compiled form writes the same bytes
# straight from the node's lists: an upper bound of the size, one pass into a scratch
# buffer, one copy into the blob.  The scratch buffer is the module's and only grows: a
# malloc and free of the bound per node (about twice the blob) left holes that later
# blobs fit badly, about 1 byte of RSS per entry (1M entries, tools/bench.py memory).
# The encoding is msgpack's (use_bin_type): the smallest uint form, bin 8/16/32,
# fixarray/array 16/32.  Anything else (a bytes subclass, an id out of
# range, ids out of order) returns None and takes the Packer path; the property
# tests (tests/unit/test_compiled_engine.py) hold the bytes equal to the source's.

# bin 32's limit (the Packer refuses longer bytes); a C constant compiled.
_MAX_BIN = cython.declare(cython.Py_ssize_t, 0xFFFFFFFF)
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
def _put_uint(out: cython.p_uchar, pos: cython.Py_ssize_t,
              v: cython.ulonglong) -> cython.Py_ssize_t:
    """Write ``v`` as msgpack's smallest unsigned form at ``out[pos]``; the new pos."""
    n: cython.int
    if v < 0x80:
        out[pos] = v
        return pos + 1
    if v < 0x100:
        out[pos] = 0xCC
        out[pos + 1] = v
        return pos + 2
    if v < 0x10000:
        out[pos] = 0xCD
        n = 2
    elif v < 0x100000000:
        out[pos] = 0xCE
        n = 4
    else:
        out[pos] = 0xCF
        n = 8
    _put_be(out + pos + 1, v, n)
    return pos + 1 + n


@cython.cfunc
@cython.inline
def _put_header(out: cython.p_uchar, pos: cython.Py_ssize_t, n: cython.size_t,
                small: cython.uchar, small_limit: cython.size_t,
                code16: cython.uchar) -> cython.Py_ssize_t:
    """An array or bin header: ``small`` (fixarray's 0x90|n, or bin 8's 0xC4 + n) below
    ``small_limit``, else the 16-bit form ``code16`` or the 32-bit one (code16 + 1)."""
    if n < small_limit:
        if small == 0x90:
            out[pos] = 0x90 | n
            return pos + 1
        out[pos] = small
        out[pos + 1] = n
        return pos + 2
    if n < 0x10000:
        out[pos] = code16
        _put_be(out + pos + 1, n, 2)
        return pos + 3
    out[pos] = code16 + 1
    _put_be(out + pos + 1, n, 4)
    return pos + 5


@cython.cfunc
@cython.inline
def _put_array(out: cython.p_uchar, pos: cython.Py_ssize_t,
               n: cython.size_t) -> cython.Py_ssize_t:
    return _put_header(out, pos, n, 0x90, 16, 0xDC)


@cython.cfunc
@cython.inline
def _put_bin(out: cython.p_uchar, pos: cython.Py_ssize_t, b: bytes) -> cython.Py_ssize_t:
    n: cython.Py_ssize_t = len(b)
    pos = _put_header(out, pos, n, 0xC4, 0x100, 0xC5)
    memcpy(out + pos, PyBytes_AS_STRING(b), n)
    return pos + n


@cython.cfunc
@cython.boundscheck(False)
@cython.wraparound(False)
def _bins_bound(items: list) -> cython.Py_ssize_t:
    """The bytes ``items`` take as bin objects at most; -1 if one is not exactly bytes
    or is too long for bin 32."""
    total: cython.Py_ssize_t = 0
    i: cython.Py_ssize_t
    n: cython.Py_ssize_t
    for i in range(len(items)):
        x = items[i]
        if type(x) is not bytes:
            return -1
        n = len(x)
        if n > _MAX_BIN:
            return -1
        total += 5 + n
    return total


@cython.cfunc
@cython.boundscheck(False)
@cython.wraparound(False)
def _write_node(first, base_ms: cython.ulonglong, master: list, ids: list,
                entries: list) -> object:
    """encode_node's blob written in C (compiled form only), or None when the node
    holds something the Packer path must see (see above)."""
    n: cython.Py_ssize_t = len(ids)
    i: cython.Py_ssize_t
    j: cython.Py_ssize_t
    k: cython.Py_ssize_t
    pos: cython.Py_ssize_t
    ms: cython.ulonglong
    seq: cython.ulonglong
    if n == 0 or len(entries) != n or type(first) is not int:
        return None
    # Upper bound: array headers 5 bytes, uints 9, bins 5 + length.
    bound: cython.Py_ssize_t = 1 + 9 + 5 + 5 + 18 * n + 5
    k = _bins_bound(master)
    if k < 0:
        return None
    bound += k
    fv: list
    for i in range(n):
        e = entries[i]
        if type(e) is not list:
            return None
        fv = e
        # All its elements, whether or not it has the master fields (values only):
        # a bound without comparing its field names twice.
        k = _bins_bound(fv)
        if k < 0:
            return None
        bound += 6 + k             # its array header, a None when not
    last = ids[n - 1]
    consecutive: cython.bint = last - first == n - 1 and last >> 64 == base_ms
    if not consecutive:
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
    out[0] = 0x94
    pos = _put_uint(out, 1, base_ms)
    pos = _put_array(out, pos, len(master))
    for i in range(len(master)):
        pos = _put_bin(out, pos, master[i])
    pos = _put_array(out, pos, 2 * n)
    if consecutive:
        seq = PyLong_AsUnsignedLongLongMask(first)
        for i in range(n):
            out[pos] = 0           # ms delta 0
            pos = _put_uint(out, pos + 1, seq + i)
    else:
        for i in range(n):
            sid = ids[i]
            ms = sid >> 64
            if ms < base_ms:
                return None        # out of order: the Packer writes a negative delta
            pos = _put_uint(out, pos, ms - base_ms)
            pos = _put_uint(out, pos, PyLong_AsUnsignedLongLongMask(sid))
    pos = _put_array(out, pos, n)
    for i in range(n):
        fv = entries[i]
        if _has_master_fields(fv, master):
            pos = _put_array(out, pos, len(fv) // 2)
            j = 1
            while j < len(fv):
                pos = _put_bin(out, pos, fv[j])
                j += 2
        else:
            pos = _put_array(out, pos, len(fv) + 1)
            out[pos] = 0xC0        # None
            pos += 1
            for j in range(len(fv)):
                pos = _put_bin(out, pos, fv[j])
    return PyBytes_FromStringAndSize(cython.cast(cython.p_char, out), pos)


def decode_node(blob: bytes) -> tuple[list[int], list[list]]:
    d: _Decoded = _Decoded(blob)
    return d.ids, d.build_entries()


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
