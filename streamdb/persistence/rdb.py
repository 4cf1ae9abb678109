"""Redis's serialized values: DUMP payloads and the objects of an RDB file.

This is how streams move between Redis and StreamDB: RESTORE accepts a payload
that Redis's DUMP made (and so MIGRATE from a Redis server), ``dump-payload-format
redis`` makes DUMP produce one (and so MIGRATE to a Redis server), and
``streamdb-admin import-rdb`` sends each key of a Redis ``dump.rdb`` as RESTORE.

The format, as Redis 5 to 8.4 write it (written here from its description, not from
Redis's code):

* A DUMP payload is ``<type byte> <object> <RDB version: 2 bytes LE> <CRC64: 8
  bytes LE>``; the CRC64 (Jones polynomial, reflected, initial 0) covers all that
  precedes it.  An RDB file is ``REDIS<4 digits>``, then opcodes and ``<type>
  <key> <object>`` records, then 0xFF and the same CRC64 of the whole file.
* Lengths are 1, 2, 5 or 9 bytes (the top two bits of the first byte say which);
  the form ``11xxxxxx`` marks a specially encoded string instead: an 8/16/32-bit
  little-endian integer, or LZF-compressed bytes.
* A stream (type 15 in Redis 5-6, 19 in 7.0, 21 from 7.2 to 8.4) is its listpack nodes
  (each keyed by its master entry id, 16 bytes big-endian), its length and last
  id, from type 19 its first id, max-deleted id and entries-added counter, then
  its consumer groups: name, last-delivered id, entries-read (from 19), the group's
  pending entries (id, delivery time, delivery count) and its consumers (name,
  seen time, active time from 21, and the ids of their pending entries).
* A stream node's listpack starts with a master entry (live count, deleted count,
  the master field names, a 0), then per entry: flags (1 deleted, 2 same fields
  as the master), the id as differences from the master id, the values alone or
  the field count and the pairs, and the entry's element count.

Every read is bounded by the bytes given: a crafted payload fails with RdbError,
never with an exception from deep inside, a huge allocation or an endless loop.
DUMP produces type 19 and RDB version 10: what Redis 7.0 and every later Redis
(which accept older versions) RESTORE.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from ..engine import ConsumerGroup, Stream
from ..engine.groups import ENTRIES_READ_INVALID, MAX_DELIVERY_COUNT
from ..engine.lag import estimate_entries_read

__all__ = ["RdbError", "UnsupportedType", "crc64", "lzf_decompress", "load_dump_payload",
           "dump_payload", "Reader", "read_object", "skip_object", "TYPE_NAMES", "payload_for",
           "RdbRecord", "rdb_file_records", "rdb_file_version", "SUPPORTED_TYPES"]

# The RDB version of the payloads DUMP produces (Redis 7.0's), and the newest read
# (Redis 8.8's: its payloads and files are read as far as they hold the forms below;
# its newer stream forms are named and refused, see TYPE_NAMES).
DUMP_RDB_VERSION = 10
MAX_RDB_VERSION = 14

TYPE_STRING = 0
TYPE_STREAM_LISTPACKS = 15      # Redis 5-6
TYPE_STREAM_LISTPACKS_2 = 19    # Redis 7.0-7.2: first id, max-deleted id, entries-added, entries-read
TYPE_STREAM_LISTPACKS_3 = 21    # Redis 7.2-8.4: consumers' active time
STREAM_TYPES = (TYPE_STREAM_LISTPACKS, TYPE_STREAM_LISTPACKS_2, TYPE_STREAM_LISTPACKS_3)
SUPPORTED_TYPES = (TYPE_STRING, *STREAM_TYPES)      # what RESTORE of a Redis payload accepts

# Redis's value types by number, for messages about the ones StreamDB does not hold.
TYPE_NAMES = {
    0: "string", 1: "list", 2: "set", 3: "sorted set", 4: "hash", 5: "sorted set",
    6: "module value", 7: "module value", 9: "hash", 10: "list", 11: "set", 12: "sorted set",
    13: "hash", 14: "list", 15: "stream", 16: "hash", 17: "sorted set", 18: "list",
    19: "stream", 20: "set", 21: "stream", 22: "hash", 23: "hash", 24: "hash", 25: "hash",
    # Redis 8.6's and 8.8's stream forms (with IDMP state; with XNACK's released entries):
    # not read yet.
    26: "stream in Redis 8.6's form", 27: "stream in Redis 8.8's form", 28: "array",
}

_U64 = (1 << 64) - 1
_I64_MAX = (1 << 63) - 1


class RdbError(ValueError):
    """Bytes that are not a well-formed Redis value."""


class UnsupportedType(RdbError):
    """A well-framed Redis value of a type StreamDB does not hold."""

    def __init__(self, rdb_type: int) -> None:
        self.rdb_type = rdb_type
        name = TYPE_NAMES.get(rdb_type, "unknown type")
        if rdb_type in TYPE_NAMES and "stream" in name:
            why = "StreamDB reads Redis's stream forms up to 8.4's (RDB types 15, 19, 21)"
        else:
            why = "StreamDB holds only strings and streams"
        super().__init__(f"a Redis {name} (RDB type {rdb_type}): {why}")


# -- CRC64 (Jones, reflected) ------------------------------------------------------------

_CRC64_POLY_REFLECTED = 0x95AC9329AC4BC9B5


def _crc64_tables() -> list[list[int]]:
    """Slicing-by-8 tables: [0] is the byte-at-a-time table; [k][b] is byte b's effect
    on the CRC after k more zero bytes, so eight bytes are folded in one step."""
    first = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ _CRC64_POLY_REFLECTED if crc & 1 else crc >> 1
        first.append(crc)
    tables = [first]
    for _ in range(7):
        prev = tables[-1]
        tables.append([(prev[b] >> 8) ^ first[prev[b] & 0xFF] for b in range(256)])
    return tables


_CRC64_TABLES = _crc64_tables()


def crc64(data, crc: int = 0) -> int:
    """Redis's CRC64 of ``data`` continuing from ``crc`` (crc64(b"123456789") is
    0xe9c6d914c4b8d9ca).  Eight bytes a step (about 0.1 s a MB), the rest one by one."""
    t0, t1, t2, t3, t4, t5, t6, t7 = _CRC64_TABLES
    data = memoryview(data).cast("B")
    whole = len(data) // 8 * 8
    for (word,) in struct.iter_unpack("<Q", data[:whole]):
        c = crc ^ word
        crc = (t7[c & 0xFF] ^ t6[(c >> 8) & 0xFF] ^ t5[(c >> 16) & 0xFF] ^
               t4[(c >> 24) & 0xFF] ^ t3[(c >> 32) & 0xFF] ^ t2[(c >> 40) & 0xFF] ^
               t1[(c >> 48) & 0xFF] ^ t0[c >> 56])
    for b in data[whole:]:
        crc = t0[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc


# -- LZF --------------------------------------------------------------------------------

# The most an LZF byte can expand to: a 3-byte back-reference copies at most 264 bytes.
_LZF_MAX_RATIO = 88


def lzf_decompress(data: bytes, out_len: int) -> bytes:
    """The ``out_len`` bytes LZF-compressed in ``data``; RdbError if they are not."""
    if out_len > len(data) * _LZF_MAX_RATIO + 1:
        raise RdbError("LZF string claims more bytes than it can hold")
    out = bytearray()
    i, n = 0, len(data)
    while i < n:
        ctrl = data[i]
        i += 1
        if ctrl < 32:                       # a run of ctrl + 1 literal bytes
            run = ctrl + 1
            if i + run > n:
                raise RdbError("LZF literal run past the end")
            out += data[i:i + run]
            i += run
        else:                               # a back-reference
            length = ctrl >> 5
            if length == 7:
                if i >= n:
                    raise RdbError("LZF reference past the end")
                length += data[i]
                i += 1
            if i >= n:
                raise RdbError("LZF reference past the end")
            distance = ((ctrl & 0x1F) << 8) + 1 + data[i]
            i += 1
            if distance > len(out):
                raise RdbError("LZF reference before the start")
            count = length + 2
            start = len(out) - distance
            if distance >= count:
                out += out[start:start + count]
            else:       # it overlaps what it writes: the last `distance` bytes, repeated
                out += (out[start:] * (count // distance + 1))[:count]
        if len(out) > out_len:
            raise RdbError("LZF string longer than stated")
    if len(out) != out_len:
        raise RdbError("LZF string shorter than stated")
    return bytes(out)


# -- reading -----------------------------------------------------------------------------

_ENC_INT8, _ENC_INT16, _ENC_INT32, _ENC_LZF = range(4)


class Reader:
    """A position in bytes holding RDB data; every read checks it stays inside them."""

    __slots__ = ("data", "pos", "end")

    def __init__(self, data: bytes, pos: int = 0, end: int | None = None) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else end

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > self.end:
            raise RdbError("value ends early")
        start = self.pos
        self.pos += n
        return self.data[start:self.pos]

    def byte(self) -> int:
        return self.take(1)[0]

    def _length_or_encoding(self) -> tuple[int, bool]:
        """(length, False), or (special encoding, True) for the ``11xxxxxx`` form."""
        first = self.byte()
        kind = first >> 6
        if kind == 0:
            return first & 0x3F, False
        if kind == 1:
            return ((first & 0x3F) << 8) | self.byte(), False
        if kind == 3:
            return first & 0x3F, True
        if first == 0x80:
            return struct.unpack(">I", self.take(4))[0], False
        if first == 0x81:
            return struct.unpack(">Q", self.take(8))[0], False
        raise RdbError(f"bad length prefix 0x{first:02x}")

    def length(self) -> int:
        value, encoded = self._length_or_encoding()
        if encoded:
            raise RdbError("encoded string where a length belongs")
        return value

    def signed(self) -> int:
        """A length that Redis wrote from a signed 64-bit value (entries-read: -1 unknown)."""
        value = self.length()
        return value - (1 << 64) if value >= 1 << 63 else value

    def string(self) -> bytes:
        value, encoded = self._length_or_encoding()
        if not encoded:
            return self.take(value)
        if value == _ENC_INT8:
            return b"%d" % struct.unpack("<b", self.take(1))[0]
        if value == _ENC_INT16:
            return b"%d" % struct.unpack("<h", self.take(2))[0]
        if value == _ENC_INT32:
            return b"%d" % struct.unpack("<i", self.take(4))[0]
        if value == _ENC_LZF:
            compressed_len = self.length()
            out_len = self.length()
            return lzf_decompress(self.take(compressed_len), out_len)
        raise RdbError(f"unknown string encoding {value}")

    def millis(self) -> int:
        return struct.unpack("<q", self.take(8))[0]

    def stream_id(self) -> int:
        """A raw 16-byte big-endian id (the PEL's form)."""
        return int.from_bytes(self.take(16), "big")

    def at_end(self) -> bool:
        return self.pos == self.end


# -- listpacks ---------------------------------------------------------------------------

def _lp_signed(value: int, bits: int) -> int:
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def _backlen_size(entry_len: int) -> int:
    if entry_len <= 127:
        return 1
    if entry_len < 16383:
        return 2
    if entry_len < 2097151:
        return 3
    if entry_len < 268435455:
        return 4
    return 5


def listpack_elements(lp: bytes) -> list:
    """The elements of a listpack: ints for its integer encodings, bytes for strings."""
    if len(lp) < 7 or int.from_bytes(lp[:4], "little") != len(lp) or lp[-1] != 0xFF:
        raise RdbError("bad listpack header or end")
    out: list = []
    i, end = 6, len(lp) - 1
    while i < end:
        start = i
        enc = lp[i]
        if enc < 0x80:                      # 0xxxxxxx: 7-bit unsigned
            value, i = enc, i + 1
        elif enc < 0xC0:                    # 10xxxxxx: string up to 63 bytes
            n = enc & 0x3F
            value, i = lp[i + 1:i + 1 + n], i + 1 + n
        elif enc < 0xE0:                    # 110xxxxx: 13-bit signed
            if i + 2 > end:
                raise RdbError("listpack entry past the end")
            value, i = _lp_signed(((enc & 0x1F) << 8) | lp[i + 1], 13), i + 2
        elif enc < 0xF0:                    # 1110xxxx: string up to 4095 bytes
            if i + 2 > end:
                raise RdbError("listpack entry past the end")
            n = ((enc & 0x0F) << 8) | lp[i + 1]
            value, i = lp[i + 2:i + 2 + n], i + 2 + n
        elif enc == 0xF0:                   # 32-bit string length
            n = int.from_bytes(lp[i + 1:i + 5], "little")
            value, i = lp[i + 5:i + 5 + n], i + 5 + n
        elif enc in _LP_INT_SIZES:
            size = _LP_INT_SIZES[enc]
            if i + 1 + size > end:
                raise RdbError("listpack entry past the end")
            value = _lp_signed(int.from_bytes(lp[i + 1:i + 1 + size], "little"), size * 8)
            i += 1 + size
        else:
            raise RdbError(f"bad listpack encoding 0x{enc:02x}")
        i += _backlen_size(i - start)
        if i > end:
            raise RdbError("listpack entry past the end")
        out.append(value)
    return out


_LP_INT_SIZES = {0xF1: 2, 0xF2: 3, 0xF3: 4, 0xF4: 8}


def _int64_of(s: bytes) -> int | None:
    """The integer ``s`` spells in canonical decimal within int64 (a listpack stores it
    as one), else None."""
    if not 0 < len(s) <= 20 or not (s[0] == 0x2D or 0x30 <= s[0] <= 0x39):
        return None
    try:
        value = int(s)
    except ValueError:
        return None
    if b"%d" % value != s or not -(1 << 63) <= value < 1 << 63:
        return None
    return value


def _lp_element(value) -> bytes:
    """One listpack element (encoding, data, back-length) of an int or a bytes value."""
    if type(value) is bytes:
        as_int = _int64_of(value)
        if as_int is None:
            n = len(value)
            if n < 64:
                head = bytes((0x80 | n,))
            elif n < 4096:
                head = bytes((0xE0 | (n >> 8), n & 0xFF))
            else:
                head = b"\xf0" + n.to_bytes(4, "little")
            return _with_backlen(head + value)
        value = as_int
    if 0 <= value < 128:
        body = bytes((value,))
    elif -4096 <= value < 4096:
        v = value & 0x1FFF
        body = bytes((0xC0 | (v >> 8), v & 0xFF))
    else:
        for enc, size in _LP_INT_SIZES.items():
            if -(1 << (size * 8 - 1)) <= value < 1 << (size * 8 - 1):
                body = bytes((enc,)) + (value & ((1 << (size * 8)) - 1)).to_bytes(size, "little")
                break
    return _with_backlen(body)


_SMALL_BACKLEN = [bytes((n,)) for n in range(128)]


def _with_backlen(body: bytes) -> bytes:
    n = len(body)
    if n <= 127:                    # (nearly every element: one byte, the length)
        return body + _SMALL_BACKLEN[n]
    size = _backlen_size(n)
    out = [n >> (7 * (size - 1))]
    for k in range(size - 2, -1, -1):
        out.append(((n >> (7 * k)) & 127) | 128)
    return body + bytes(out)


def listpack(elements: list) -> bytes:
    """A listpack of ``elements`` (ints and bytes)."""
    body = b"".join(map(_lp_element, elements))
    total = 6 + len(body) + 1
    if total >= 1 << 32:
        raise RdbError("stream node too large for a listpack")
    return total.to_bytes(4, "little") + min(len(elements), 65535).to_bytes(2, "little") + \
        body + b"\xff"


# -- stream nodes ------------------------------------------------------------------------

_FLAG_DELETED = 1
_FLAG_SAME_FIELDS = 2


def _node_entries(master_id: int, lp: bytes) -> list[tuple[int, list, bool]]:
    """(id, [field, value, ...], deleted) of every entry of a stream node's listpack."""
    elements = listpack_elements(lp)
    pos = 0

    def next_int() -> int:
        nonlocal pos
        if pos >= len(elements) or type(elements[pos]) is not int:
            raise RdbError("stream node: integer expected")
        pos += 1
        return elements[pos - 1]

    def next_str() -> bytes:
        nonlocal pos
        if pos >= len(elements):
            raise RdbError("stream node ends inside an entry")
        value = elements[pos]
        pos += 1
        return value if type(value) is bytes else b"%d" % value

    live, deleted, n_master = next_int(), next_int(), next_int()
    if n_master < 0 or n_master > len(elements):
        raise RdbError("stream node: bad master field count")
    master = [next_str() for _ in range(n_master)]
    if next_int() != 0:
        raise RdbError("stream node: master entry not terminated")
    master_ms, master_seq = master_id >> 64, master_id & _U64
    entries = []
    while pos < len(elements):
        flags, ms_diff, seq_diff = next_int(), next_int(), next_int()
        if flags & _FLAG_SAME_FIELDS:
            values = [next_str() for _ in range(n_master)]
            fv = [x for pair in zip(master, values) for x in pair]
            expected_count = n_master + 3
        else:
            n = next_int()
            if n < 0 or 2 * n > len(elements) - pos:
                raise RdbError("stream node: bad field count")
            fv = [next_str() for _ in range(2 * n)]
            expected_count = 2 * n + 4
        if next_int() != expected_count:
            raise RdbError("stream node: entry element count is wrong")
        sid = (((master_ms + ms_diff) & _U64) << 64) | ((master_seq + seq_diff) & _U64)
        entries.append((sid, fv, bool(flags & _FLAG_DELETED)))
    if not entries:
        raise RdbError("empty stream node")
    n_deleted = sum(1 for e in entries if e[2])
    if n_deleted != deleted or len(entries) - n_deleted != live:
        raise RdbError("stream node: counts do not match its entries")
    if any(a[0] >= b[0] for a, b in zip(entries, entries[1:])) or entries[0][0] < master_id:
        raise RdbError("stream node: ids out of order")
    return entries


def _node_listpack(master_id: int, master: list, ids: list, entries: list, deleted) -> bytes:
    """A stream node's listpack: its master entry, then each entry (``deleted``: ids so marked)."""
    n_deleted = sum(1 for sid in ids if sid in deleted)
    out: list = [len(ids) - n_deleted, n_deleted, len(master), *master, 0]
    master_ms, master_seq = master_id >> 64, master_id & _U64
    for sid, fv in zip(ids, entries):
        fields = fv[0::2]
        same = fields == master
        flags = (_FLAG_DELETED if sid in deleted else 0) | (_FLAG_SAME_FIELDS if same else 0)
        ms_diff = _signed64(((sid >> 64) - master_ms) & _U64)
        seq_diff = _signed64(((sid & _U64) - master_seq) & _U64)
        out += (flags, ms_diff, seq_diff)
        if same:
            out += fv[1::2]
            out.append(len(master) + 3)
        else:
            out.append(len(fields))
            out += fv
            out.append(2 * len(fields) + 4)
    return listpack(out)


def _signed64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


# -- objects -----------------------------------------------------------------------------

class _RawStream:
    """A stream object as read, before it becomes a Stream (``skip_object`` stops here)."""

    __slots__ = ("nodes", "length", "last_id", "first_id", "max_deleted_id",
                 "entries_added", "groups")


def _read_stream(r: Reader, rdb_type: int) -> _RawStream:
    raw = _RawStream()
    raw.nodes = []
    for _ in range(r.length()):
        key = r.string()
        if len(key) != 16:
            raise RdbError("stream node key is not an id")
        raw.nodes.append((int.from_bytes(key, "big"), r.string()))
    raw.length = r.length()
    raw.last_id = (r.length() << 64) | r.length()
    raw.first_id = raw.max_deleted_id = raw.entries_added = None
    if rdb_type >= TYPE_STREAM_LISTPACKS_2:
        raw.first_id = (r.length() << 64) | r.length()
        raw.max_deleted_id = (r.length() << 64) | r.length()
        raw.entries_added = r.length()
    raw.groups = []
    for _ in range(r.length()):
        name = r.string()
        last_id = (r.length() << 64) | r.length()
        entries_read = r.signed() if rdb_type >= TYPE_STREAM_LISTPACKS_2 else None
        pel = [(r.stream_id(), r.millis(), r.length()) for _ in range(r.length())]
        consumers = []
        for _ in range(r.length()):
            cname = r.string()
            seen = r.millis()
            active = r.millis() if rdb_type >= TYPE_STREAM_LISTPACKS_3 else seen
            pending = [r.stream_id() for _ in range(r.length())]
            consumers.append((cname, seen, active, pending))
        raw.groups.append((name, last_id, entries_read, pel, consumers))
    return raw


def _build_stream(raw: _RawStream) -> Stream:
    """The Stream a read stream object describes: the same nodes (so that trimming with
    ``~`` cuts where Redis would), deleted entries kept as marks, and the groups."""
    s = Stream()
    prev = -1
    for master_id, lp in raw.nodes:
        entries = _node_entries(master_id, lp)
        if entries[0][0] <= prev:
            raise RdbError("stream nodes out of order")
        for i, (sid, fv, _) in enumerate(entries):
            # max_entries 1 on a node's first entry seals the node before it: one node
            # per listpack.  (0 and 0: no limit inside it.)
            s.append(sid, fv, 1 if i == 0 else 0, 0)
        for sid, _, deleted in entries:
            if deleted:
                s.delete(sid)
        prev = entries[-1][0]
    if s.length != raw.length or raw.last_id < prev:
        raise RdbError("stream length or last id does not match its nodes")
    s.last_id = raw.last_id
    if raw.entries_added is None:           # Redis 5-6: as Redis estimates them on load
        s.entries_added = s.length
        s.max_deleted_id = 0
    else:
        if raw.entries_added > _I64_MAX:        # (Redis holds it in a signed 64-bit int)
            raise RdbError("entries-added out of range")
        s.entries_added = raw.entries_added
        s.max_deleted_id = raw.max_deleted_id
    for name, last_id, entries_read, pel, consumers in raw.groups:
        if s.groups is None:
            s.groups = {}
        if name in s.groups:
            raise RdbError("duplicate consumer group")
        if entries_read is None:
            entries_read = estimate_entries_read(s, last_id)
        elif entries_read < ENTRIES_READ_INVALID:
            raise RdbError("group entries-read out of range")
        g = ConsumerGroup(name, last_id, entries_read)
        delivery = {}
        for sid, when, count in pel:
            if sid in delivery or count > MAX_DELIVERY_COUNT:
                raise RdbError("duplicate pending entry or delivery count out of range")
            delivery[sid] = (when, count)
        owned = set()
        for cname, seen, active, pending in consumers:
            if cname in g.consumers:
                raise RdbError("duplicate consumer")
            c = g.create_consumer(cname, seen)
            c.active_time = active
            for sid in pending:
                if sid not in delivery or sid in owned:
                    raise RdbError("consumer's pending entry is not in its group's PEL once")
                owned.add(sid)
                g.add_pending(sid, c, *delivery[sid])
        if len(owned) != len(delivery):
            raise RdbError("group PEL entry without a consumer")
        s.groups[name] = g
    return s


def read_object(r: Reader, rdb_type: int):
    """The StreamDB value of the object of ``rdb_type`` at ``r``: bytes or a Stream."""
    if rdb_type == TYPE_STRING:
        return r.string()
    if rdb_type in STREAM_TYPES:
        return _build_stream(_read_stream(r, rdb_type))
    raise UnsupportedType(rdb_type)


def skip_object(r: Reader, rdb_type: int) -> None:
    """Move ``r`` past an object of ``rdb_type`` without building it (an RDB file's
    reader finds each value's bytes so); UnsupportedType for types it cannot frame."""
    if rdb_type in STREAM_TYPES:
        _read_stream(r, rdb_type)
        return
    frame = _FRAMES.get(rdb_type)
    if frame is None:
        raise UnsupportedType(rdb_type)
    frame(r)


def _skip_double_string(r: Reader) -> None:
    n = r.byte()
    if n < 253:
        r.take(n)


def _skip_quicklist2(r: Reader) -> None:
    for _ in range(r.length()):
        r.length()          # the container kind
        r.string()


def _repeat(*items):
    def frame(r: Reader) -> None:
        for _ in range(r.length()):
            for item in items:
                item(r)
    return frame


_FRAMES = {
    TYPE_STRING: Reader.string,
    1: _repeat(Reader.string), 2: _repeat(Reader.string),
    3: _repeat(Reader.string, _skip_double_string), 4: _repeat(Reader.string, Reader.string),
    5: _repeat(Reader.string, lambda r: r.take(8)),
    9: Reader.string, 10: Reader.string, 11: Reader.string, 12: Reader.string,
    13: Reader.string, 14: _repeat(Reader.string), 16: Reader.string, 17: Reader.string,
    18: _skip_quicklist2, 20: Reader.string,
}


# -- DUMP payloads -----------------------------------------------------------------------

def payload_for(rdb_type: int, body: bytes, version: int) -> bytes:
    """A DUMP payload of an object's bytes: type, body, version and CRC64."""
    head = bytes((rdb_type,)) + body + version.to_bytes(2, "little")
    return head + crc64(head).to_bytes(8, "little")


def load_dump_payload(raw: bytes):
    """The value of a payload Redis's DUMP made: bytes or a Stream.

    RdbError if it is not one; its message says "checksum" when the footer (version
    or CRC64) is wrong, as Redis's reply does; UnsupportedType for a well-formed
    value of a type StreamDB does not hold."""
    if len(raw) < 11:
        raise RdbError("payload version or checksum are wrong")
    version = int.from_bytes(raw[-10:-8], "little")
    if version > MAX_RDB_VERSION or crc64(raw[:-8]) != int.from_bytes(raw[-8:], "little"):
        raise RdbError("payload version or checksum are wrong")
    r = Reader(raw, 1, len(raw) - 10)
    value = read_object(r, raw[0])
    if not r.at_end():
        raise RdbError("bytes after the value")
    return value


def _put_length(n: int) -> bytes:
    if n < 64:
        return bytes((n,))
    if n < 16384:
        return bytes((0x40 | (n >> 8), n & 0xFF))
    if n <= 0xFFFFFFFF:
        return b"\x80" + n.to_bytes(4, "big")
    return b"\x81" + (n & _U64).to_bytes(8, "big")


def _put_string(s: bytes) -> bytes:
    return _put_length(len(s)) + s


def _put_id(sid: int) -> bytes:
    return _put_length(sid >> 64) + _put_length(sid & _U64)


def _millis(ms: int) -> bytes:
    return struct.pack("<q", ms)


def _encode_stream(s: Stream) -> bytes:
    out = []
    nodes = [node for node in s.nodes if node.live]
    out.append(_put_length(len(nodes)))
    for node in nodes:
        ids, entries = node.contents()
        out.append(_put_string(node.first.to_bytes(16, "big")))
        out.append(_put_string(_node_listpack(node.first, node.master_fields(), ids, entries,
                                              node.deleted or ())))
    out += [_put_length(s.length), _put_id(s.last_id), _put_id(s.first_id()),
            _put_id(s.max_deleted_id), _put_length(s.entries_added)]
    groups = list((s.groups or {}).values())
    out.append(_put_length(len(groups)))
    for g in groups:
        out += [_put_string(g.name), _put_id(g.last_id), _put_length(g.entries_read & _U64)]
        pel = list(g.pel.items())
        out.append(_put_length(len(pel)))
        for sid, pe in pel:
            if pe.consumer is None:
                raise RdbError("the stream has NACKed pending entries, which Redis cannot hold")
            out += [sid.to_bytes(16, "big"), _millis(pe.delivery_time),
                    _put_length(pe.delivery_count)]
        out.append(_put_length(len(g.consumers)))
        for c in g.sorted_consumers():
            out += [_put_string(c.name), _millis(c.seen_time), _put_length(len(c.pending))]
            out += [sid.to_bytes(16, "big") for sid in c.pending]
    return b"".join(out)


def dump_payload(value) -> bytes:
    """Redis's DUMP payload of a value (bytes or a Stream): type 19, RDB version 10.

    What Redis cannot hold is left out: a stream's retention settings and IDMP state
    (StreamDB's own), its consumers' active times (type 19 has none: Redis 7.2+ takes
    the seen time).  RdbError for a stream with NACKed entries (no owner in Redis)."""
    if type(value) is bytes:
        return payload_for(TYPE_STRING, _put_string(value), DUMP_RDB_VERSION)
    try:
        body = _encode_stream(value)
    except (ValueError, OverflowError, struct.error) as e:
        if isinstance(e, RdbError):
            raise
        # (a counter or time that a RESTORE of our own form set beyond 64 bits)
        raise RdbError("a counter or time of the stream is out of Redis's range") from None
    return payload_for(TYPE_STREAM_LISTPACKS_2, body, DUMP_RDB_VERSION)


# -- RDB files ---------------------------------------------------------------------------

_OP_KEY_META = 0xF3        # Redis 8.6+: metadata of the key that follows
_OP_SLOT_INFO, _OP_FUNCTION2, _OP_FUNCTION_PRE_GA, _OP_MODULE_AUX = 0xF4, 0xF5, 0xF6, 0xF7
_OP_IDLE, _OP_FREQ, _OP_AUX, _OP_RESIZEDB = 0xF8, 0xF9, 0xFA, 0xFB
_OP_EXPIRETIME_MS, _OP_EXPIRETIME, _OP_SELECTDB, _OP_EOF = 0xFC, 0xFD, 0xFE, 0xFF


class RdbRecord(NamedTuple):
    """One key of an RDB file: its database, name, RDB type, the object's bytes as
    stored (``payload_for`` makes them a DUMP payload) and absolute expiry (ms) if any."""
    db: int
    key: bytes
    rdb_type: int
    body: bytes
    expire_ms: int | None


def rdb_file_version(data: bytes) -> int:
    """The RDB version in a file's ``REDIS<4 digits>`` header; RdbError if it has none."""
    if len(data) < 9 or not data.startswith(b"REDIS") or not data[5:9].isdigit():
        raise RdbError("not a Redis RDB file (it does not start with REDIS and a version)")
    version = int(data[5:9])
    if version > MAX_RDB_VERSION:
        raise RdbError(f"RDB version {version} is newer than the newest this reader knows "
                       f"({MAX_RDB_VERSION})")
    return version


def _skip_module_values(r: Reader) -> None:
    """Past a module's opcode-tagged values (unsigned, signed, float, double, string)
    up to their end opcode: how data of a module StreamDB does not have is skipped."""
    while True:
        opcode = r.length()
        if opcode == 0:
            return
        if opcode in (1, 2):
            r.length()
        elif opcode == 3:
            r.take(4)
        elif opcode == 4:
            r.take(8)
        elif opcode == 5:
            r.string()
        else:
            raise RdbError(f"unknown module value opcode {opcode}")


def rdb_file_records(data: bytes, notes: list[str]):
    """The keys of an RDB file's bytes, in file order, as RdbRecords.

    Auxiliary fields are read past; a function library or module data is skipped with
    a line added to ``notes``.  RdbError for a file that is not RDB, is damaged (the
    CRC64 at its end, when not 0, is checked once the end is reached), or holds a value
    whose extent cannot be found (a module's: nothing after it can be read).  Records
    are yielded as they are read: a caller that must not act on a damaged file reads
    them all first."""
    version = rdb_file_version(data)
    r = Reader(data, 9)
    db, expire_ms = 0, None
    while True:
        op = r.byte()
        if op == _OP_EOF:
            if version >= 5:
                stored = int.from_bytes(r.take(8), "little")
                if stored and stored != crc64(memoryview(data)[:r.pos - 8]):
                    raise RdbError("the file's checksum is wrong: it is damaged")
            return
        if op == _OP_AUX:
            r.string()
            r.string()
        elif op == _OP_SELECTDB:
            db = r.length()
        elif op == _OP_RESIZEDB:
            r.length()
            r.length()
        elif op == _OP_EXPIRETIME:
            expire_ms = int.from_bytes(r.take(4), "little") * 1000
        elif op == _OP_EXPIRETIME_MS:
            expire_ms = r.millis()
        elif op == _OP_IDLE:
            r.length()
        elif op == _OP_FREQ:
            r.byte()
        elif op == _OP_SLOT_INFO:
            r.length()
            r.length()
            r.length()
        elif op == _OP_FUNCTION2:
            r.string()
            notes.append("skipped a function library (StreamDB has no functions)")
        elif op == _OP_MODULE_AUX:
            r.length()
            _skip_module_values(r)
            notes.append("skipped a module's auxiliary data (StreamDB has no modules)")
        elif op == _OP_FUNCTION_PRE_GA:
            raise RdbError("the file holds functions in a pre-release format")
        elif op == _OP_KEY_META:
            raise RdbError("the file holds key metadata (Redis 8.6+), which this reader "
                           "does not read")
        else:
            key = r.string()
            start = r.pos
            try:
                skip_object(r, op)
            except UnsupportedType as e:
                raise RdbError(f"cannot read past key {key.decode('utf-8', 'backslashreplace')}, "
                               f"{e}") from None
            yield RdbRecord(db, key, op, data[start:r.pos], expire_ms)
            expire_ms = None
