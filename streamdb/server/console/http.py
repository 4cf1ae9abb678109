"""A small, strict HTTP/1.1 reader and response writer for the console.

One request per connection (every response says ``Connection: close``): the
console serves a handful of people, not a crowd, and a connection that carries
one request cannot smuggle a second one behind it.  What is accepted:

* a request line ``METHOD TARGET HTTP/1.0|HTTP/1.1`` with an origin-form target;
* header lines ``Name: value`` (no obsolete line folding), their whole head at
  most ``MAX_HEAD_BYTES``;
* a body only with ``Content-Length`` (at most ``MAX_BODY_BYTES``); any
  ``Transfer-Encoding`` is refused, as is a repeated Content-Length;
* the head and the body within ``REQUEST_TIMEOUT`` seconds (a slow sender
  holds a connection slot for no longer).

Anything else is an ``HttpError`` whose status the caller sends back; the
reader never raises anything else for what a peer sent.
"""

from __future__ import annotations

import asyncio
from urllib.parse import unquote_to_bytes

__all__ = ["Request", "HttpError", "read_request", "response", "parse_form",
           "MAX_HEAD_BYTES", "MAX_BODY_BYTES", "REQUEST_TIMEOUT"]

MAX_HEAD_BYTES = 16384
MAX_BODY_BYTES = 65536
MAX_HEADERS = 64
REQUEST_TIMEOUT = 10.0

REASONS = {200: "OK", 303: "See Other", 400: "Bad Request", 403: "Forbidden",
           404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout",
           411: "Length Required", 413: "Content Too Large",
           431: "Request Header Fields Too Large", 500: "Internal Server Error",
           501: "Not Implemented", 503: "Service Unavailable"}

_METHODS = frozenset({"GET", "HEAD", "POST"})
_TOKEN_CHARS = frozenset(b"!#$%&'*+-.^_`|~0123456789"
                         b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


class HttpError(Exception):
    """A request the console refuses before routing it: ``status`` and a one-line reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class Request:
    """One parsed request: ``method``, ``path`` (percent-decoded text), ``query``
    (name -> bytes, the last value of a repeated name), ``headers`` (lower-case
    names) and ``body`` bytes."""

    __slots__ = ("method", "path", "query", "headers", "body")

    def __init__(self, method: str, path: str, query: dict[str, bytes],
                 headers: dict[str, str], body: bytes) -> None:
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body

    def cookie(self, name: str) -> str | None:
        for part in self.headers.get("cookie", "").split(";"):
            k, sep, v = part.strip().partition("=")
            if sep and k == name:
                return v
        return None

    def form(self) -> dict[str, list[bytes]]:
        """The urlencoded body's fields (every value of a repeated name, in order)."""
        ctype = self.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if self.body and ctype != "application/x-www-form-urlencoded":
            raise HttpError(400, "a form must be application/x-www-form-urlencoded")
        return parse_form(self.body)


def parse_form(data: bytes) -> dict[str, list[bytes]]:
    """``a=1&b=%FF+x`` -> {"a": [b"1"], "b": [b"\\xff x"]}; names are ASCII text.
    Values stay bytes: stream keys and field values are binary."""
    fields: dict[str, list[bytes]] = {}
    for pair in data.split(b"&"):
        if not pair:
            continue
        name, _, value = pair.partition(b"=")
        try:
            key = unquote_to_bytes(name.replace(b"+", b" ")).decode("ascii")
        except UnicodeDecodeError:
            raise HttpError(400, "a form or query field name is not ASCII") from None
        fields.setdefault(key, []).append(unquote_to_bytes(value.replace(b"+", b" ")))
    return fields


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    """The next request from ``reader`` (None: the peer closed before sending one).
    The reader's own limit must be at least ``MAX_HEAD_BYTES``."""
    try:
        return await asyncio.wait_for(_read(reader), REQUEST_TIMEOUT)
    except asyncio.TimeoutError:
        raise HttpError(408, "the request did not arrive in time") from None


async def _read(reader: asyncio.StreamReader) -> Request | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise HttpError(431, "request head too large") from None
    except asyncio.IncompleteReadError as e:
        if not e.partial.strip():
            return None
        raise HttpError(400, "incomplete request head") from None
    if len(head) > MAX_HEAD_BYTES:
        raise HttpError(431, "request head too large")
    lines = head[:-4].split(b"\r\n")
    method, path, query = _request_line(lines[0])
    headers = _headers(lines[1:])
    if "transfer-encoding" in headers:
        raise HttpError(501, "Transfer-Encoding is not accepted; send Content-Length")
    length_text = headers.get("content-length")
    length = 0
    if length_text is not None:
        if not length_text.isdigit() or len(length_text) > 9:
            raise HttpError(400, "bad Content-Length")
        length = int(length_text)
    elif method == "POST":
        raise HttpError(411, "a POST needs Content-Length")
    if length > MAX_BODY_BYTES:
        raise HttpError(413, "request body too large")
    try:
        body = await reader.readexactly(length) if length else b""
    except asyncio.IncompleteReadError:
        raise HttpError(400, "incomplete request body") from None
    return Request(method, path, query, headers, body)


def _request_line(line: bytes) -> tuple[str, str, dict[str, bytes]]:
    parts = line.split(b" ")
    if len(parts) != 3 or parts[2] not in (b"HTTP/1.1", b"HTTP/1.0"):
        raise HttpError(400, "bad request line")
    raw_method, target, _ = parts
    if not raw_method or not set(raw_method) <= _TOKEN_CHARS:
        raise HttpError(400, "bad method")
    method = raw_method.decode("ascii")
    if method not in _METHODS:
        raise HttpError(405, f"method {method[:16]} not allowed")
    if not target.startswith(b"/") or any(c <= 0x20 or c >= 0x7F for c in target):
        raise HttpError(400, "bad request target")
    raw_path, _, raw_query = target.partition(b"?")
    try:
        path = unquote_to_bytes(raw_path).decode("utf-8")
    except UnicodeDecodeError:
        raise HttpError(400, "the path is not UTF-8") from None
    query = {name: values[-1] for name, values in parse_form(raw_query).items()}
    return method, path, query


def _headers(lines: list[bytes]) -> dict[str, str]:
    if len(lines) > MAX_HEADERS:
        raise HttpError(431, "too many header fields")
    headers: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.partition(b":")
        if not sep or not name or not set(name) <= _TOKEN_CHARS:
            raise HttpError(400, "bad header line")
        key = name.decode("ascii").lower()
        if key in headers and key in ("content-length", "host", "cookie"):
            raise HttpError(400, f"repeated {key} header")
        headers[key] = value.strip(b" \t").decode("latin-1")
    return headers


def response(status: int, body: bytes = b"", content_type: str = "text/html; charset=utf-8",
             headers: list[tuple[str, str]] | None = None, head_only: bool = False) -> bytes:
    """A complete HTTP/1.1 response that closes the connection.  Every page is
    private and must not be framed or sniffed: those headers are always sent."""
    lines = [f"HTTP/1.1 {status} {REASONS[status]}",
             f"Content-Type: {content_type}",
             f"Content-Length: {len(body)}",
             "Cache-Control: no-store",
             "X-Frame-Options: DENY",
             "X-Content-Type-Options: nosniff",
             "Referrer-Policy: same-origin",
             "Content-Security-Policy: default-src 'none'; style-src 'unsafe-inline'; "
             "img-src 'self' data:; form-action 'self'; frame-ancestors 'none'"]
    lines += [f"{name}: {value}" for name, value in headers or ()]
    lines.append("Connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if head_only else head + body
