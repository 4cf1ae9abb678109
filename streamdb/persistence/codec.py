"""Values <-> msgpack: the one serialisation of a stream's full state.

Used by snapshots, COPY, DEBUG RELOAD and the replication full-sync payload.
A sealed node is written as its blob unchanged (no re-encoding); consumer
groups are written completely: last-delivered id, entries-read, every PEL
entry with owner, delivery time and count, every consumer with seen and
active time.  Decoding validates shapes and types, so a hostile file gives an
error, not an exception deep inside the engine.
"""

from __future__ import annotations

import msgpack

from ..engine import ConsumerGroup, Stream
from ..engine.stream import Node, decode_node

__all__ = ["encode_value", "decode_value", "clone_value", "CodecError"]

FORMAT_VERSION = 1


class CodecError(ValueError):
    pass


def _encode_node(node: Node) -> list:
    blob = node.blob
    if blob is None:
        from ..engine.stream import encode_node
        blob = encode_node(node.first, node.master, node.ids, node.entries)
    return [node.first, node.last, node.total, node.live, node.nbytes,
            sorted(node.deleted) if node.deleted else [], blob, node.blob is None]


def _encode_stream(s: Stream) -> dict:
    groups = []
    for g in (s.groups or {}).values():
        consumers = [[c.name, c.seen_time, c.active_time] for c in g.consumers.values()]
        pel = [[sid, pe.consumer.name, pe.delivery_time, pe.delivery_count]
               for sid, pe in g.pel.items()]
        groups.append([g.name, g.last_id, g.entries_read, consumers, pel])
    return {
        "t": "stream",
        "length": s.length, "last_id": s.last_id, "entries_added": s.entries_added,
        "max_deleted_id": s.max_deleted_id,
        "nodes": [_encode_node(n) for n in s.nodes],
        "groups": groups,
    }


def _to_bytes(x: int) -> bytes:
    return x.to_bytes(16, "big")


def encode_value(value) -> bytes:
    """msgpack bytes of a value (stream or string)."""
    if type(value) is bytes:
        doc = {"t": "string", "v": value}
    else:
        doc = _encode_stream(value)
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


def decode_value(raw: bytes):
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
    s.length = _int(doc["length"])
    s.last_id = _int(doc["last_id"])
    s.entries_added = _int(doc["entries_added"])
    s.max_deleted_id = _int(doc["max_deleted_id"])
    for item in doc["nodes"]:
        first, last, total, live, nbytes, deleted, blob, is_open = item
        ids, entries = decode_node(_bytes(blob))   # validates the blob
        node = Node(_int(first), [])
        node.last, node.total, node.live, node.nbytes = _int(last), _int(total), _int(live), _int(nbytes)
        node.deleted = set(deleted) if deleted else None
        if entries:
            first_fv = entries[0]
            node.master = first_fv[0::2]
        if is_open:
            node.ids, node.entries, node.blob = ids, entries, None
            # The open node's master fields are those of its first entry.
        else:
            node.ids = node.entries = None
            node.blob = blob
            import msgpack as _m
            node.master = _m.unpackb(blob, raw=True)[1]
        s.nodes.append(node)
        s.firsts.append(node.first)
    for name, last_id, entries_read, consumers, pel in doc["groups"]:
        g = ConsumerGroup(_bytes(name), _int(last_id), _int(entries_read))
        for cname, seen, active in consumers:
            c = g.create_consumer(_bytes(cname), _int(seen))
            c.active_time = _int(active)
        for sid, owner, dtime, dcount in pel:
            c = g.consumers.get(owner)
            if c is None:
                raise CodecError("PEL entry owned by an unknown consumer")
            g.add_pending(_int(sid), c, _int(dtime), _int(dcount))
        if s.groups is None:
            s.groups = {}
        s.groups[g.name] = g
    return s


def clone_value(value):
    if type(value) is bytes:
        return value
    return decode_value(encode_value(value))
