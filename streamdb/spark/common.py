"""What the StreamDB Spark sources and sinks share: options, ids, connections, rows.

Nothing here imports pyspark, so the pieces are usable (and testable) without it.
Stream IDs travel as their text form ``"<ms>-<seq>"``; an *offset* is the last ID
already read (exclusive), as XREAD's ID argument is.
"""

from __future__ import annotations

import fnmatch
import json
from typing import Iterable

from ..protocol.request import encode_request as encode_command  # noqa: F401 (re-exported)

MAX_SEQ = (1 << 64) - 1
MAX_MS = (1 << 64) - 1

__all__ = [
    "parse_id", "format_id", "next_id", "prev_id", "split_range", "connect", "expand_streams",
    "resolve_offsets", "stream_bounds", "Codec", "int_option", "bool_option", "xrange_pages",
    "RespConnection", "encode_command",
]


# ---------------------------------------------------------------------------
# IDs
# ---------------------------------------------------------------------------


def parse_id(text: str | bytes) -> tuple[int, int]:
    """``"5-3"`` -> (5, 3); ``"5"`` -> (5, 0). Raises ValueError on anything else."""
    if isinstance(text, bytes):
        text = text.decode("ascii")
    text = text.strip()
    ms, sep, seq = text.partition("-")
    m, s = int(ms), int(seq) if sep else 0
    if not (0 <= m <= MAX_MS and 0 <= s <= MAX_SEQ):
        raise ValueError(f"stream ID out of range: {text!r}")
    return m, s


def format_id(i: tuple[int, int]) -> str:
    return f"{i[0]}-{i[1]}"


def next_id(i: tuple[int, int]) -> tuple[int, int] | None:
    """The smallest ID after ``i`` (None after the largest)."""
    ms, seq = i
    if seq < MAX_SEQ:
        return ms, seq + 1
    return (ms + 1, 0) if ms < MAX_MS else None


def prev_id(i: tuple[int, int]) -> tuple[int, int] | None:
    ms, seq = i
    if seq > 0:
        return ms, seq - 1
    return (ms - 1, MAX_SEQ) if ms > 0 else None


def split_range(first: tuple[int, int], last: tuple[int, int], n: int) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Cut the inclusive ID range [first, last] into at most ``n`` inclusive ranges by time."""
    if n <= 1 or first >= last:
        return [(first, last)]
    span = last[0] - first[0]
    if span == 0:
        # One millisecond: split by sequence number.
        step = max((last[1] - first[1] + 1) // n, 1)
        cuts = [first[1] + step * k for k in range(1, n) if first[1] + step * k <= last[1]]
        bounds = [first] + [(first[0], c) for c in cuts]
    else:
        step = max((span + n - 1) // n, 1)
        cuts = [first[0] + step * k for k in range(1, n) if first[0] + step * k <= last[0]]
        bounds = [first] + [(c, 0) for c in cuts]
    out = []
    for k, lo in enumerate(bounds):
        hi = prev_id(bounds[k + 1]) if k + 1 < len(bounds) else last
        if lo <= hi:
            out.append((lo, hi))
    return out


# ---------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------


def int_option(options, name: str, default: int, minimum: int = 1) -> int:
    raw = options.get(name)
    if raw is None or str(raw).strip() == "":
        return default
    try:
        v = int(str(raw).strip())
    except ValueError:
        raise ValueError(f"option {name} must be an integer, got {raw!r}") from None
    if v < minimum:
        raise ValueError(f"option {name} must be >= {minimum}, got {v}")
    return v


def bool_option(options, name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None:
        return default
    s = str(raw).strip().lower()
    if s in ("true", "1", "yes", "on"):
        return True
    if s in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"option {name} must be true or false, got {raw!r}")


class Codec:
    """Bytes <-> str for stream names, field names and values (option ``valueEncoding``).

    The default, utf-8, refuses bytes that are not UTF-8 (with an error naming the
    option); ``latin-1`` maps every byte to one character, so any value survives a
    read and a write back unchanged.
    """

    def __init__(self, encoding: str | None) -> None:
        self.encoding = (encoding or "utf-8").strip()
        "".encode(self.encoding)   # LookupError for an unknown codec

    def decode(self, b: bytes) -> str:
        try:
            return b.decode(self.encoding)
        except UnicodeDecodeError:
            raise ValueError(f"value {b[:40]!r} is not {self.encoding}; set the option "
                             f"valueEncoding (e.g. latin-1, which keeps every byte)") from None

    def encode(self, v) -> bytes:
        if v is None:
            return b""
        if isinstance(v, (bytes, bytearray)):
            return bytes(v)
        if isinstance(v, bool):
            return b"true" if v else b"false"
        if not isinstance(v, str):
            v = str(v)
        return v.encode(self.encoding)


# ---------------------------------------------------------------------------
# Connections and discovery
# ---------------------------------------------------------------------------


def connect(url: str | None, timeout: float = 30.0):
    """A redis-py client for ``redis://[user:pass@]host:port[/db]`` returning raw bytes."""
    import redis
    url = url or "redis://127.0.0.1:6379"
    return redis.Redis.from_url(url, decode_responses=False, socket_timeout=timeout,
                                socket_connect_timeout=timeout)


def raw(client, *args):
    """Run one command without redis-py's reply parsing (XRANGE as nested lists)."""
    pool = client.connection_pool
    conn = pool.get_connection()
    try:
        conn.send_command(*args)
        return conn.read_response()
    except BaseException:
        conn.disconnect()
        raise
    finally:
        pool.release(conn)


def _is_pattern(name: str) -> bool:
    return any(c in name for c in "*?[")


def expand_streams(client, spec: str | None, codec: Codec) -> list[str]:
    """The comma list in option ``streams``; glob patterns expanded with SCAN ... TYPE stream."""
    if not spec or not spec.strip():
        raise ValueError("option streams is required (a comma list of stream keys or glob patterns)")
    out: list[str] = []
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        if not _is_pattern(item):
            out.append(item)
            continue
        cursor = b"0"
        found = set()
        while True:
            cursor, keys = raw(client, "SCAN", cursor, "MATCH", codec.encode(item), "COUNT", 1000,
                               "TYPE", "stream")
            found.update(codec.decode(k) for k in keys)
            if cursor in (b"0", 0, "0"):
                break
        out.extend(sorted(found))
    seen, uniq = set(), []
    for s in out:
        if s not in seen:
            seen.add(s)
            uniq.append(s)
    return uniq


def matches(spec: str, name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, p.strip()) for p in spec.split(",") if p.strip())


def stream_bounds(client, key: bytes) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """(first id, last id) of the live entries, None if the stream is empty or missing."""
    p = client.pipeline(transaction=False)
    p.execute_command("XRANGE", key, "-", "+", "COUNT", 1)
    p.execute_command("XREVRANGE", key, "+", "-", "COUNT", 1)
    first, last = p.execute()
    if not first or not last:
        return None
    return parse_id(first[0][0]), parse_id(last[0][0])


def stream_state(client, key: bytes) -> dict | None:
    """XINFO STREAM as a dict of the fields we use, None if the key does not exist."""
    import redis
    try:
        reply = raw(client, "XINFO", "STREAM", key)
    except redis.ResponseError as e:
        if "no such key" in str(e).lower():
            return None
        raise
    d = reply if isinstance(reply, dict) else dict(zip(reply[0::2], reply[1::2]))   # RESP3 / RESP2
    def _id(v):
        return parse_id(v) if v else (0, 0)
    first = d.get(b"first-entry")
    return {
        "length": int(d.get(b"length", 0)),
        "last_generated": _id(d.get(b"last-generated-id")),
        "entries_added": int(d.get(b"entries-added") or 0),
        "first": parse_id(first[0]) if first else None,
    }


def parse_offsets_json(text: str, what: str) -> dict[str, str]:
    try:
        d = json.loads(text)
    except ValueError:
        raise ValueError(f"option {what} must be earliest, latest or a JSON object "
                         f"{{stream: id}}, got {text!r}") from None
    if not isinstance(d, dict):
        raise ValueError(f"option {what} must be a JSON object {{stream: id}}")
    out = {}
    for k, v in d.items():
        if isinstance(v, int):
            v = str(v)
        if v in ("earliest", "latest", "-", "+", "$"):
            out[str(k)] = {"-": "earliest", "+": "latest", "$": "latest"}.get(v, v)
        else:
            out[str(k)] = format_id(parse_id(str(v)))
    return out


def resolve_offsets(spec: str | None, default: str, what: str) -> tuple[str, dict[str, str]]:
    """Option text -> (default for unnamed streams, {stream: "earliest"|"latest"|id})."""
    s = (spec or default).strip()
    if s.lower() in ("earliest", "latest"):
        return s.lower(), {}
    return default, parse_offsets_json(s, what)


# ---------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------


class RespConnection:
    """The socket of a redis-py connection, read straight through a hiredis Reader.

    redis-py does the connecting (TLS, AUTH, SELECT from the URL); after that
    this sends pre-encoded bytes and parses replies in C without redis-py's
    per-reply Python layers, which cost more than the parsing itself on a reply
    per XADD.  Error replies come back as ``redis.ResponseError`` objects (not
    raised).  ``close(ok=False)`` drops the socket, so a connection left with
    replies in flight is never reused.
    """

    RECV = 1 << 20    # one recv_into of up to 1 MiB: a 10,000-entry XRANGE page is ~1 MB

    def __init__(self, client) -> None:
        import hiredis
        import redis
        self.pool = client.connection_pool
        self.conn = self.pool.get_connection()
        self.sock = self.conn._sock
        self.reader = hiredis.Reader(replyError=redis.ResponseError)
        self.buf = bytearray(self.RECV)
        self.view = memoryview(self.buf)

    def send(self, data) -> None:
        self.sock.sendall(data)

    def reply(self):
        r = self.reader.gets()
        while r is False:
            n = self.sock.recv_into(self.view)
            if not n:
                raise ConnectionError("the server closed the connection")
            self.reader.feed(self.view, 0, n)
            r = self.reader.gets()
        return r

    def replies(self, n: int) -> list:
        """The next ``n`` replies, in order."""
        out = []
        gets = self.reader.gets
        while len(out) < n:
            r = gets()
            if r is False:
                r = self.reply()
            out.append(r)
        return out

    def close(self, ok: bool = True) -> None:
        if self.conn is None:
            return
        if not ok:
            self.conn.disconnect()
        self.pool.release(self.conn)
        self.conn = self.sock = None


def xrange_pages(client, key: bytes, lo: tuple[int, int], hi: tuple[int, int], batch: int,
                 exclusive_lo: bool = False) -> Iterable[list]:
    """Pages of raw XRANGE entries [lo, hi] (or (lo, hi]), ``batch`` at a time.

    The request for the next page goes out as soon as a page is parsed, before
    the page is handed to the caller: the server prepares page k+1 while the
    caller turns page k into Arrow (the two run on different cores).
    """
    import redis
    start = ("(" if exclusive_lo else "") + format_id(lo)
    end = format_id(hi)
    conn = RespConnection(client)
    ok = False
    try:
        conn.send(encode_command(b"XRANGE", key, start, end, b"COUNT", batch))
        while True:
            page = conn.reply()
            if isinstance(page, redis.ResponseError):
                raise page
            more = bool(page) and len(page) >= batch
            if more:
                conn.send(encode_command(b"XRANGE", key, b"(" + page[-1][0], end, b"COUNT", batch))
            if page:
                yield page
            if not more:
                break
        ok = True
    finally:
        conn.close(ok)
