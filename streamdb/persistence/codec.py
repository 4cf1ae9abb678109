"""Values <-> msgpack: the one serialisation of a stream's full state.

Used by snapshots, COPY, DEBUG RELOAD and the replication full-sync payload.
A sealed node is written as its blob unchanged (no re-encoding); consumer
groups are written completely: last-delivered id, entries-read, every PEL
entry with owner, delivery time and count, every consumer with seen and
active time.  Decoding validates shapes and types, so a hostile file gives an
error, not an exception deep inside the engine.
"""

from __future__ import annotations

import struct
import zlib

import msgpack

from ..engine import ConsumerGroup, Stream
from ..engine.groups import DeadLetterPolicy
from ..engine.nodecache import CACHE
from ..engine.retention import RetentionPolicy
from ..engine.stream import (HEADER_APART, HEADER_OPEN, NODE_HEADER, Node, decode_node,
                             encode_node, node_headers, nodes_from_headers, unpack_node)

__all__ = ["encode_value", "decode_value", "clone_value", "dump_payload", "load_payload",
           "dump_pieces", "append_node_run", "NodeRun", "check_stream_nodes", "CodecError",
           "PAYLOAD_MAGIC", "PAYLOAD_MAGICS"]

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


# A stream's node headers, one fixed-size record each, in one bytes value ("nh"; the
# record is engine/stream.py's NODE_HEADER: node_headers packs a column from Nodes,
# nodes_from_headers makes Nodes of one).  One column is several times cheaper than
# one msgpack list per node, and a 1M-entry stream has 10k nodes: this is most of what
# encoding and decoding a stream costs (snapshots, restarts, a replica's full sync).
_NODE_HDR = NODE_HEADER
_OPEN = HEADER_OPEN
_APART = HEADER_APART
_U64 = (1 << 64) - 1


def _encode_nodes(nodes, external: list | None) -> dict:
    """The columns of a run of nodes: headers ("nh"), blobs ("nb"), deleted ids ("nd").

    With ``external``, the sealed nodes are appended to it and stored apart (a
    sealed node never changes, so an incremental snapshot stores it once, apart
    from the stream's document, and refers to it by first id; the snapshot takes a
    cold node's bytes from where they already are)."""
    headers, open_at, deleted_at = node_headers(nodes, 0 if external is None else _APART)
    if external is None:
        blobs = [node.sealed_blob() if node.ids is None else None for node in nodes]
    else:
        blobs = [None] * len(nodes)
        start = len(external)
        external.extend(nodes)
        for i in reversed(open_at):        # (only ever the last node)
            del external[start + i]
    for i in open_at:
        node = nodes[i]
        blobs[i] = encode_node(node.master, node.ids, node.entries)
    deleted = {i: [_id(x) for x in sorted(nodes[i].deleted)] for i in deleted_at}
    return {"nh": headers, "nb": blobs, "nd": deleted}


def _encode_stream(s: Stream, external: list | None, nodes=None) -> dict:
    """The stream's document; with ``nodes`` (a leading run of its nodes) only those
    nodes, and a length that counts only them (see ``dump_pieces``)."""
    groups = []
    for g in (s.groups or {}).values():
        consumers = [[c.name, c.seen_time, c.active_time] for c in g.consumers.values()]
        # A NACKed entry's owner is nil (a consumer may be named ""); documents
        # written before XNACK simply have none, so they load unchanged.  NACKed
        # entries come first, in their release order (loading keeps it), then the
        # owned ones by id.
        pel = [[_id(sid), None, 0, g.pel[sid].delivery_count] for sid in g.nacked]
        pel += [[_id(sid), pe.consumer.name, pe.delivery_time, pe.delivery_count]
                for sid, pe in g.pel.items() if pe.consumer is not None]
        groups.append([g.name, _id(g.last_id), g.entries_read, consumers, pel])
    if nodes is None:
        nodes, length = s.nodes, s.length
    else:
        length = sum(n.live for n in nodes)
    doc = {
        "t": "stream",
        "length": length, "last_id": _id(s.last_id), "entries_added": s.entries_added,
        "max_deleted_id": _id(s.max_deleted_id),
        "groups": groups,
        "idmp": s.idmp.dump() if s.idmp is not None else None,
    }
    if s.retention is not None and s.retention.has_settings():
        doc["retention"] = s.retention.dump()    # absent otherwise: older readers ignore it
    dead_letters = _encode_dead_letters(s)
    if dead_letters:
        doc["dead_letter"] = dead_letters        # as "retention": absent when there is none
    doc.update(_encode_nodes(nodes, external))
    return doc


def _encode_dead_letters(s: Stream) -> list:
    """[group, max deliveries, dead-letter key, dead-lettered] of each group with a
    dead-letter policy or a count (nil max and key without a policy)."""
    out = []
    for g in (s.groups or {}).values():
        policy = g.dead_letter
        if policy is not None or g.dead_lettered:
            out.append([g.name, policy.max_deliveries if policy is not None else None,
                        policy.key if policy is not None else None, g.dead_lettered])
    return out


def _decode_dead_letters(s: Stream, items) -> None:
    for name, most, key, count in items:
        g = (s.groups or {}).get(_bytes(name))
        if g is None:
            raise CodecError("dead-letter policy of an unknown group")
        if most is not None:
            if _int(most) < 1:
                raise CodecError("bad dead-letter policy")
            g.dead_letter = DeadLetterPolicy(most, _bytes(key))
        g.dead_lettered = _int(count)


def encode_value(value, external: list | None = None) -> bytes:
    """msgpack bytes of a value (stream or string).

    With ``external`` (a list), sealed nodes are appended to it instead of
    having their blobs embedded; ``decode_value`` then needs a ``fetch(first_id)``
    to get them back.
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


def _node_columns(doc: dict) -> tuple[bytes, list, dict]:
    """The stream document's node columns (headers, blobs, deleted ids by node index):
    its own ("nh", written since the columnar layout) or made from the older
    one-list-per-node form ("nodes"), which snapshots taken before it still hold."""
    if "nh" in doc:
        raw, blobs, deleted = doc["nh"], doc["nb"], doc["nd"]
        if type(raw) is not bytes or len(raw) % _NODE_HDR.size or \
                type(blobs) is not list or len(blobs) != len(raw) // _NODE_HDR.size or \
                type(deleted) is not dict:
            raise CodecError("bad stream node headers")
        return raw, blobs, deleted
    headers, blobs, deleted = [], [], {}
    for i, (first, last, total, live, nbytes, dels, blob, is_open) in enumerate(doc["nodes"]):
        first, last = _sid(first), _sid(last)
        flags = _OPEN if is_open else (_APART if blob is None else 0)
        try:
            headers.append(_NODE_HDR.pack(first >> 64, first & _U64, last >> 64, last & _U64,
                                          _int(total), _int(live), _int(nbytes), flags))
        except struct.error:
            raise CodecError("bad stream node counts") from None
        blobs.append(blob)
        if dels:
            deleted[i] = dels
    return b"".join(headers), blobs, deleted


def _decode_nodes(doc: dict, fetch, cold_where=None) -> tuple[list[Node], list[int]]:
    """Node objects and their first ids from a document's node columns.

    ``cold_where``: the node store's location of the nodes stored apart; those
    (but the last, which XADD appends to) are left cold there, unread: restart time
    follows the number of nodes, not the bytes (a cold node's checksum is checked
    when it is fetched), and ``nodes_from_headers`` makes them in one compiled pass."""
    raw, blobs, deleted = _node_columns(doc)
    nodes, firsts, rest = nodes_from_headers(raw, cold_where)
    last_n = len(nodes) - 1
    for n in rest:
        node = nodes[n]
        flags = raw[(n + 1) * _NODE_HDR.size - 1]
        blob = blobs[n]
        if flags & _APART:
            if fetch is None:
                raise CodecError("node stored apart but no node store given")
            blob = fetch(node.first)
        is_open = flags & _OPEN
        # Sealed nodes stay packed: their bytes are checksummed by the store,
        # and decoding a million entries here would dominate restart time.
        # Only the open node and the last node (the one XADD appends to)
        # are unpacked now.
        if is_open or n == last_n:
            try:
                master, ids, entries = unpack_node(_bytes(blob))
                if is_open:
                    node.master, node.ids, node.entries = master, ids, entries
            except CodecError:
                raise
            except Exception as e:
                raise CodecError(f"bad stream node: {e}") from None
        elif type(blob) is not bytes:
            raise CodecError("expected bytes")
        if not is_open:
            node.blob = blob
            # Sealed but not yet known durable here (a RESTORE, a replica's full
            # sync): counts towards the snapshot a bounded node cache asks for.
            CACHE.sealed(node)
    for n, ids in deleted.items():
        if type(n) is int and 0 <= n <= last_n and ids:
            nodes[n].deleted = {_sid(x) for x in ids}
    return nodes, firsts


def decode_value(raw: bytes, fetch=None, cold_where=None):
    try:
        doc = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except Exception as e:   # msgpack raises several types for bad input
        raise CodecError(f"bad msgpack: {e}") from None
    if not isinstance(doc, dict):
        raise CodecError("value is not a map")
    t = doc.get("t")
    if t == "string":
        return _bytes(doc.get("v"))
    if t == "stream-nodes":
        try:
            return NodeRun(_decode_nodes(doc, fetch)[0])
        except (KeyError, TypeError, ValueError) as e:
            if isinstance(e, CodecError):
                raise
            raise CodecError(f"bad stream nodes document: {e}") from None
    if t != "stream":
        raise CodecError(f"unknown value type {t!r}")
    s = Stream()
    try:
        s.length = _int(doc["length"])
        s.last_id = _sid(doc["last_id"])
        s.entries_added = _int(doc["entries_added"])
        s.max_deleted_id = _sid(doc["max_deleted_id"])
        s.nodes, s.firsts = _decode_nodes(doc, fetch, cold_where)
        if doc.get("idmp") is not None:
            from ..engine.idmp import IdmpState
            s.idmp = IdmpState.load(doc["idmp"])
        if doc.get("retention") is not None:
            s.retention = RetentionPolicy.load(doc["retention"])
        # Inside the try: a hostile document's groups may have any shape.
        for name, last_id, entries_read, consumers, pel in doc["groups"]:
            g = ConsumerGroup(_bytes(name), _sid(last_id), _int(entries_read))
            for cname, seen, active in consumers:
                c = g.create_consumer(_bytes(cname), _int(seen))
                c.active_time = _int(active)
            for sid, owner, dtime, dcount in pel:
                if owner is None:
                    g.add_nacked(_sid(sid), _int(dcount))
                    continue
                c = g.consumers.get(_bytes(owner))
                if c is None:
                    raise CodecError("PEL entry owned by an unknown consumer")
                g.add_pending(_sid(sid), c, _int(dtime), _int(dcount))
            if s.groups is None:
                s.groups = {}
            s.groups[g.name] = g
        _decode_dead_letters(s, doc.get("dead_letter") or ())
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
    prev_last, live_total = check_node_run(s.nodes, -1)
    if live_total != s.length or prev_last > s.last_id:
        raise CodecError("stream length or last id does not match its nodes")


def check_node_run(nodes, prev_last: int) -> tuple[int, int]:
    """Check nodes that must follow an entry id ``prev_last`` (-1: none); returns the
    run's last id and its live entries."""
    live_total = 0
    for node in nodes:
        if node.ids is not None:
            ids, entries = node.ids, node.entries
        else:
            try:
                ids, entries = decode_node(node.sealed_blob())
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
    return prev_last, live_total


# -- a big stream in pieces -------------------------------------------------------------
#
# The AOF rewrite and a replica's full sync write every key as RESTORE commands
# (aof.state_commands).  A big stream as one RESTORE is one payload the reader can
# only decode once the last byte has arrived; in pieces, a replica decodes each
# piece while the primary's child encodes the next.  The first piece is a normal
# stream payload holding the stream's metadata, its groups and its first nodes
# (its length counts only those: every piece leaves a valid stream behind); each
# further piece is a "stream-nodes" payload that RESTORE appends to the stream
# the key holds.  DUMP never produces one: it is for StreamDB's own logs and syncs.

PIECE_BYTES = 1 << 20      # node bytes per piece


class NodeRun:
    """A decoded "stream-nodes" payload: nodes to append to an existing stream."""

    __slots__ = ("nodes",)

    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = nodes


def dump_pieces(value, piece_bytes: int | None = None):
    """``dump_payload(value)`` as a sequence of payloads, each about ``piece_bytes``
    (default PIECE_BYTES) of stream nodes (one payload for a string or a small stream)."""
    piece_bytes = piece_bytes or PIECE_BYTES
    if type(value) is bytes or len(value.nodes) < 2:
        yield dump_payload(value)
        return
    nodes = value.nodes
    start, size, first = 0, 0, True
    for i, node in enumerate(nodes):
        size += node.nbytes
        if size >= piece_bytes or i == len(nodes) - 1:
            run = nodes[start:i + 1]
            if first:
                doc = _encode_stream(value, None, run)
                first = False
            else:
                doc = {"t": "stream-nodes"}
                doc.update(_encode_nodes(run, None))
            yield _seal(msgpack.packb(doc, use_bin_type=True, default=_default))
            start, size = i + 1, 0


def append_node_run(s: Stream, run: NodeRun, check: bool) -> None:
    """Append a "stream-nodes" piece to ``s``; CodecError if it does not follow it."""
    nodes = run.nodes
    if not nodes:
        return
    prev_last = s.nodes[-1].last if s.nodes else -1
    if check:
        last, live = check_node_run(nodes, prev_last)
        if last > s.last_id:
            raise CodecError("stream nodes go past the stream's last id")
    else:
        if nodes[0].first <= prev_last:
            raise CodecError("stream nodes do not follow the stream's last node")
        live = sum(n.live for n in nodes)
    if s.nodes and s.nodes[-1].ids is not None:
        s.nodes[-1].seal()      # only the last node may be open
    s.nodes.extend(nodes)
    s.firsts.extend(n.first for n in nodes)
    s.length += live


# The payload's version.  SDB2 payloads may hold sealed nodes of format 2
# (engine/stream.py), which a version that writes SDB1 cannot read: it refuses an
# SDB2 payload as one of an unknown version (a RESTORE, a replica's full sync) rather
# than failing on a node later.  SDB1 payloads (DUMPs, AOF rewrites of earlier
# versions) still load.
PAYLOAD_MAGIC = b"SDB2"
PAYLOAD_MAGICS = (b"SDB1", PAYLOAD_MAGIC)


def dump_payload(value) -> bytes:
    """DUMP/RESTORE and AOF-rewrite form of a value: magic + codec bytes + CRC32."""
    return _seal(encode_value(value))


def _seal(doc: bytes) -> bytes:
    """magic + msgpack document + CRC32 of both."""
    body = PAYLOAD_MAGIC + doc
    return body + zlib.crc32(body).to_bytes(4, "big")


def load_payload(raw: bytes, check_nodes: bool = False):
    """Inverse of dump_payload; CodecError on a bad version or checksum.

    ``check_nodes``: also decode and check every stream node (an untrusted payload).
    """
    if len(raw) < 8 or not raw.startswith(PAYLOAD_MAGICS) or \
            zlib.crc32(raw[:-4]).to_bytes(4, "big") != raw[-4:]:
        raise CodecError("payload version or checksum are wrong")
    value = decode_value(raw[len(PAYLOAD_MAGIC):-4])      # (every magic has 4 bytes)
    if check_nodes and type(value) is Stream:
        check_stream_nodes(value)
    return value


def clone_value(value):
    if type(value) is bytes:
        return value
    return decode_value(encode_value(value))
