"""Values <-> msgpack: the one serialisation of a stream's full state.

Used by snapshots, COPY, DEBUG RELOAD and the replication full-sync payload.
A sealed node is written as its blob unchanged (no re-encoding); consumer
groups are written completely: last-delivered id, entries-read, every PEL
entry with owner, delivery time and count, every consumer with seen and
active time.  Decoding validates shapes and types, so a hostile file gives an
error, not an exception deep inside the engine.
"""

from __future__ import annotations

import zlib

import msgpack

from ..engine import ConsumerGroup, Stream
from ..engine.stream import Node, decode_node, encode_node

__all__ = ["encode_value", "decode_value", "clone_value", "dump_payload", "load_payload",
           "check_stream_nodes", "CodecError"]

FORMAT_VERSION = 1


class CodecError(ValueError):
    pass


def _id(sid: int) -> bytes:
    """Stream IDs are 128-bit ints; msgpack carries them as 16 big-endian bytes."""
    return sid.to_bytes(16, "big")


def _sid(raw) -> int:
    if type(raw) is not bytes or len(raw) != 16:
        raise CodecError("bad stream id")
    return int.from_bytes(raw, "big")


def _encode_node(node: Node, external: list | None) -> list:
    blob = node.blob
    is_open = blob is None
    if is_open:
        blob = encode_node(node.first, node.master, node.ids, node.entries)
    elif external is not None:
        # A sealed node never changes, so an incremental snapshot stores it
        # once, apart from the stream's document, and refers to it by first id.
        external.append((node.first, blob))
        blob = None
    return [_id(node.first), _id(node.last), node.total, node.live, node.nbytes,
            [_id(x) for x in sorted(node.deleted)] if node.deleted else [], blob, is_open]


def _encode_stream(s: Stream, external: list | None) -> dict:
    groups = []
    for g in (s.groups or {}).values():
        consumers = [[c.name, c.seen_time, c.active_time] for c in g.consumers.values()]
        pel = [[_id(sid), pe.consumer.name, pe.delivery_time, pe.delivery_count]
               for sid, pe in g.pel.items()]
        groups.append([g.name, _id(g.last_id), g.entries_read, consumers, pel])
    return {
        "t": "stream",
        "length": s.length, "last_id": _id(s.last_id), "entries_added": s.entries_added,
        "max_deleted_id": _id(s.max_deleted_id),
        "nodes": [_encode_node(n, external) for n in s.nodes],
        "groups": groups,
        "idmp": s.idmp.dump() if s.idmp is not None else None,
    }


def encode_value(value, external: list | None = None) -> bytes:
    """msgpack bytes of a value (stream or string).

    With ``external`` (a list), sealed node blobs are appended to it as
    ``(first_id, blob)`` instead of being embedded; ``decode_value`` then needs
    a ``fetch(first_id)`` to get them back.
    """
    if type(value) is bytes:
        doc = {"t": "string", "v": value}
    else:
        doc = _encode_stream(value, external)
    return msgpack.packb(doc, use_bin_type=True, default=_default)


def _default(obj):
    raise TypeError(f"cannot encode {type(obj).__name__}")


def _int(x) -> int:
    if type(x) is not int:
        raise CodecError("expected an integer")
    return x


def _bytes(x) -> bytes:
    if type(x) is not bytes:
        raise CodecError("expected bytes")
    return x


def decode_value(raw: bytes, fetch=None):
    try:
        doc = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except Exception as e:   # msgpack raises several types for bad input
        raise CodecError(f"bad msgpack: {e}") from None
    if not isinstance(doc, dict):
        raise CodecError("value is not a map")
    t = doc.get("t")
    if t == "string":
        return _bytes(doc.get("v"))
    if t != "stream":
        raise CodecError(f"unknown value type {t!r}")
    s = Stream()
    try:
        s.length = _int(doc["length"])
        s.last_id = _sid(doc["last_id"])
        s.entries_added = _int(doc["entries_added"])
        s.max_deleted_id = _sid(doc["max_deleted_id"])
        docs = doc["nodes"]
        for n, (first, last, total, live, nbytes, deleted, blob, is_open) in enumerate(docs, 1):
            if blob is None:
                if fetch is None:
                    raise CodecError("node stored apart but no node store given")
                blob = fetch(_sid(first))
            ids = entries = None
            master: list = []
            # Sealed nodes stay packed: their bytes are checksummed by the store,
            # and decoding a million entries here would dominate restart time.
            # Only the open node and the last node (the one XADD appends to)
            # are unpacked now.
            if is_open or n == len(docs):
                try:
                    master = msgpack.unpackb(_bytes(blob), raw=True)[1]
                    if is_open:
                        ids, entries = decode_node(blob)
                except CodecError:
                    raise
                except Exception as e:
                    raise CodecError(f"bad stream node: {e}") from None
            node = Node(_sid(first), [])
            node.master = master
            node.last, node.total, node.live, node.nbytes = _sid(last), _int(total), _int(live), _int(nbytes)
            node.deleted = {_sid(x) for x in deleted} if deleted else None
            if is_open:
                node.ids, node.entries, node.blob = ids, entries, None
            else:
                node.ids = node.entries = None
                node.blob = blob
            s.nodes.append(node)
            s.firsts.append(node.first)
        if doc.get("idmp") is not None:
            from ..engine.idmp import IdmpState
            s.idmp = IdmpState.load(doc["idmp"])
        # Inside the try: a hostile document's groups may have any shape.
        for name, last_id, entries_read, consumers, pel in doc["groups"]:
            g = ConsumerGroup(_bytes(name), _sid(last_id), _int(entries_read))
            for cname, seen, active in consumers:
                c = g.create_consumer(_bytes(cname), _int(seen))
                c.active_time = _int(active)
            for sid, owner, dtime, dcount in pel:
                c = g.consumers.get(_bytes(owner))
                if c is None:
                    raise CodecError("PEL entry owned by an unknown consumer")
                g.add_pending(_sid(sid), c, _int(dtime), _int(dcount))
            if s.groups is None:
                s.groups = {}
            s.groups[g.name] = g
    except (KeyError, TypeError, ValueError) as e:
        if isinstance(e, CodecError):
            raise
        raise CodecError(f"bad stream document: {e}") from None
    return s


def check_stream_nodes(s: Stream) -> None:
    """Decode every node of ``s`` and check it against its header: CodecError if not.

    ``decode_value`` leaves sealed nodes packed (restart speed), trusting files
    the server wrote.  A payload from a client (RESTORE) is checked here
    instead, so that a crafted node fails the RESTORE rather than a later read.
    """
    prev_last = -1
    live_total = 0
    for node in s.nodes:
        if node.blob is None:
            ids, entries = node.ids, node.entries
        else:
            try:
                ids, entries = decode_node(node.blob)
            except Exception as e:   # msgpack and the unpacking raise several types
                raise CodecError(f"bad stream node: {e}") from None
        if not ids or len(ids) != len(entries) or len(ids) != node.total \
                or ids[0] != node.first or ids[-1] != node.last or node.first <= prev_last \
                or any(a >= b for a, b in zip(ids, ids[1:])):
            raise CodecError("stream node does not match its header")
        deleted = node.deleted or set()
        if not deleted.issubset(ids) or node.live != node.total - len(deleted):
            raise CodecError("stream node's deleted entries do not match its counts")
        for fv in entries:
            if len(fv) % 2 or any(type(x) is not bytes for x in fv):
                raise CodecError("stream entry is not field/value pairs of strings")
        prev_last = node.last
        live_total += node.live
    if live_total != s.length or prev_last > s.last_id:
        raise CodecError("stream length or last id does not match its nodes")


PAYLOAD_MAGIC = b"SDB1"


def dump_payload(value) -> bytes:
    """DUMP/RESTORE and AOF-rewrite form of a value: magic + codec bytes + CRC32."""
    body = PAYLOAD_MAGIC + encode_value(value)
    return body + zlib.crc32(body).to_bytes(4, "big")


def load_payload(raw: bytes, check_nodes: bool = False):
    """Inverse of dump_payload; CodecError on a bad version or checksum.

    ``check_nodes``: also decode and check every stream node (an untrusted payload).
    """
    if len(raw) < 8 or not raw.startswith(PAYLOAD_MAGIC) or \
            zlib.crc32(raw[:-4]).to_bytes(4, "big") != raw[-4:]:
        raise CodecError("payload version or checksum are wrong")
    value = decode_value(raw[len(PAYLOAD_MAGIC):-4])
    if check_nodes and type(value) is not bytes:
        check_stream_nodes(value)
    return value


def clone_value(value):
    if type(value) is bytes:
        return value
    return decode_value(encode_value(value))
