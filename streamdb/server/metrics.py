"""Prometheus metrics: HTTP ``GET /metrics`` in text exposition format 0.0.4.

The endpoint runs on the server's own event loop (``start_metrics`` is called
from ``Server.start`` when ``metrics-port`` is set), so a scrape reads the
keyspace directly, between two loop turns, without locks or copies.  That is
also why its work is bounded:

* at most ``metrics-max-series`` streams + groups + consumers are exported per
  scrape; the rest are only counted (``streamdb_metrics_series_truncated``);
* a request head larger than ``MAX_REQUEST_BYTES`` gets 431, one that does not
  arrive within ``REQUEST_TIMEOUT`` seconds is dropped, a reader that does not
  take the reply within ``WRITE_TIMEOUT`` seconds is dropped, and at most
  ``MAX_CONNECTIONS`` scrapes are open at once (more are closed on accept).

``render`` is a pure function of the core's state and a clock reading, so it
is what the tests read through a real HTTP scrape.
"""

from __future__ import annotations

import asyncio
import time

from .. import log
from ..engine.groups import ENTRIES_READ_INVALID
from ..engine.lag import group_lag, oldest_pending_ms, time_lag_ms
from ..engine.nodecache import CACHE
from ..engine.stream import Stream
from ..memory import rss_memory, used_memory

__all__ = ["start_metrics", "render", "Exposition", "escape_label_value"]

MAX_REQUEST_BYTES = 8192
REQUEST_TIMEOUT = 5.0
WRITE_TIMEOUT = 10.0
MAX_CONNECTIONS = 16
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def escape_label_value(text: str) -> str:
    """The exposition format's label escaping: backslash, double quote, newline."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _key_text(raw: bytes) -> str:
    # Keys are binary; a label must be UTF-8.  Invalid bytes become \xNN so two
    # different keys never share a label value.
    return raw.decode("utf-8", "backslashreplace")


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if value != value:
        return "NaN"
    return repr(float(value))


class Exposition:
    """Collects samples per metric family and writes them grouped, HELP and TYPE first."""

    def __init__(self) -> None:
        self._families: dict[str, tuple[str, str, list[str]]] = {}

    def declare(self, name: str, kind: str, help_text: str) -> None:
        if name not in self._families:
            self._families[name] = (kind, help_text, [])

    def add(self, name: str, value: float, labels: dict[str, str] | None = None) -> None:
        samples = self._families[name][2]
        if labels:
            inner = ",".join(f'{k}="{escape_label_value(v)}"' for k, v in labels.items())
            samples.append(f"{name}{{{inner}}} {_number(value)}")
        else:
            samples.append(f"{name} {_number(value)}")

    def text(self) -> str:
        lines: list[str] = []
        for name, (kind, help_text, samples) in self._families.items():
            lines.append(f"# HELP {name} {_escape_help(help_text)}")
            lines.append(f"# TYPE {name} {kind}")
            lines.extend(samples)
        return "\n".join(lines) + "\n"


# (name, type, help) of every family, declared up front so that HELP/TYPE
# lines are present even when a scrape has no sample of a family.
_FAMILIES = [
    ("streamdb_uptime_seconds", "gauge", "Seconds since the server started."),
    ("streamdb_connected_clients", "gauge", "Client connections (INFO connected_clients)."),
    ("streamdb_blocked_clients", "gauge", "Clients blocked in XREAD/XREADGROUP/WAIT."),
    ("streamdb_used_memory_bytes", "gauge",
     "Bytes the allocators hand out: data, buffers, the server's objects (INFO used_memory)."),
    ("streamdb_used_memory_rss_bytes", "gauge", "Resident memory of the server process (INFO used_memory_rss)."),
    ("streamdb_commands_processed_total", "counter", "Commands processed since start (or CONFIG RESETSTAT)."),
    ("streamdb_aof_enabled", "gauge", "1 when the append-only file is on."),
    ("streamdb_aof_last_write_ok", "gauge", "1 when the last AOF write and fsync succeeded; 0 while a failed one is retried and writes are refused (MISCONF)."),
    ("streamdb_aof_size_bytes", "gauge", "Size of the AOF: base segment plus incremental segments."),
    ("streamdb_snapshot_last_save_timestamp_seconds", "gauge", "Unix time of the last successful snapshot (start time if none)."),
    ("streamdb_snapshot_changes_since_last_save", "gauge", "Writes since the last snapshot (INFO rdb_changes_since_last_save)."),
    ("streamdb_snapshot_bgsave_in_progress", "gauge", "1 while a snapshot child runs."),
    ("streamdb_snapshot_last_bgsave_ok", "gauge", "1 when the last snapshot succeeded."),
    ("streamdb_replication_role", "gauge", "Always 1; the role label is master or slave (INFO role)."),
    ("streamdb_replication_offset_bytes", "gauge", "Replication stream offset (INFO master_repl_offset)."),
    ("streamdb_connected_replicas", "gauge", "Replicas connected to this server."),
    ("streamdb_replica_lag_bytes", "gauge", "Bytes of the replication stream a replica has not acknowledged."),
    ("streamdb_replica_lag_seconds", "gauge", "Seconds since a replica's last acknowledgement."),
    ("streamdb_master_link_up", "gauge", "On a replica: 1 when the link to the primary is up."),
    ("streamdb_stream_length", "gauge", "Entries in the stream (XLEN)."),
    ("streamdb_stream_last_entry_age_seconds", "gauge", "Seconds between now and the time part of the stream's last entry id."),
    ("streamdb_stream_entries_added_total", "counter", "Entries ever added to the stream (XINFO STREAM entries-added)."),
    ("streamdb_stream_retention_trimmed_entries_total", "counter", "Entries retention removed from the stream since start (STREAMDB.RETENTION GET trimmed-entries); absent before its first trim."),
    ("streamdb_retention_trimmed_entries_total", "counter", "Entries retention removed from all streams since start (INFO stream_retention_trimmed_entries)."),
    ("streamdb_stream_cache_size_bytes", "gauge", "stream-cache-size: bytes of sealed stream nodes kept in memory once on disk (0 = all in memory)."),
    ("streamdb_stream_cache_resident_bytes", "gauge", "Bytes of sealed stream nodes on disk that are also in memory (INFO stream_cache_resident_bytes)."),
    ("streamdb_stream_cache_cold_reads_total", "counter", "Stream nodes read back from disk (INFO stream_cache_cold_reads)."),
    ("streamdb_stream_cache_hits_total", "counter", "Reads of on-disk stream nodes that found them in memory (INFO stream_cache_hits)."),
    ("streamdb_stream_cache_evictions_total", "counter", "Stream nodes dropped from memory past the cache size (INFO stream_cache_evictions)."),
    ("streamdb_group_lag", "gauge", "Entries not yet delivered to the group (XINFO GROUPS lag); absent when Redis reports it as unknown."),
    ("streamdb_group_pending", "gauge", "Entries delivered to the group and not acknowledged (PEL size)."),
    ("streamdb_group_oldest_pending_idle_seconds", "gauge", "Seconds since the lowest-id pending entry was last delivered; absent when nothing is pending."),
    ("streamdb_group_entries_read", "gauge", "The group's entries-read counter; absent when unknown."),
    ("streamdb_stream_group_lag_seconds", "gauge", "Age of the oldest entry the group has not been given (its id's time; STREAMDB.GROUP INFO lag-ms); 0 when it has been given everything."),
    ("streamdb_stream_group_oldest_pending_seconds", "gauge", "Age of the group's oldest pending entry (its id's time; STREAMDB.GROUP INFO oldest-pending-ms); 0 when nothing is pending."),
    ("streamdb_consumer_pending", "gauge", "Entries pending for the consumer."),
    ("streamdb_consumer_idle_seconds", "gauge", "Seconds since the consumer's last interaction (XINFO CONSUMERS idle)."),
    ("streamdb_metrics_series_truncated", "gauge", "Streams, groups and consumers left out of this scrape by metrics-max-series."),
    ("streamdb_metrics_scrape_errors_total", "counter", "Scrapes that failed inside the server (logged)."),
]


def render(core, now: float | None = None, scrape_errors: int = 0) -> str:
    """The whole exposition text for the core's current state."""
    now = core.clock() if now is None else now
    out = Exposition()
    for name, kind, help_text in _FAMILIES:
        out.declare(name, kind, help_text)
    _server_metrics(core, out, now)
    _stream_metrics(core, out, now, core.config["metrics-max-series"])
    out.add("streamdb_metrics_scrape_errors_total", scrape_errors)
    return out.text()


def _server_metrics(core, out: Exposition, now: float) -> None:
    out.add("streamdb_uptime_seconds", round(now - core.start_time, 3))
    out.add("streamdb_connected_clients", len(core.clients))
    out.add("streamdb_blocked_clients", sum(1 for c in core.clients.values() if c.blocked is not None))
    out.add("streamdb_used_memory_bytes", used_memory(core))
    out.add("streamdb_used_memory_rss_bytes", rss_memory())
    out.add("streamdb_commands_processed_total", core.stats.commands_processed)
    out.add("streamdb_retention_trimmed_entries_total",
            core.retention.trimmed_entries if core.retention is not None else 0)

    cache = CACHE.stats()
    out.add("streamdb_stream_cache_size_bytes", cache["stream_cache_size"])
    out.add("streamdb_stream_cache_resident_bytes", cache["stream_cache_resident_bytes"])
    out.add("streamdb_stream_cache_cold_reads_total", cache["stream_cache_cold_reads"])
    out.add("streamdb_stream_cache_hits_total", cache["stream_cache_hits"])
    out.add("streamdb_stream_cache_evictions_total", cache["stream_cache_evictions"])

    persist = dict(core.info_persistence()) if core.info_persistence else {}
    aof = core.aof
    out.add("streamdb_aof_enabled", int(aof is not None))
    out.add("streamdb_aof_last_write_ok", int(persist.get("aof_last_write_status", "ok") == "ok"))
    if aof is not None:
        out.add("streamdb_aof_size_bytes", aof.total_size)
    out.add("streamdb_snapshot_last_save_timestamp_seconds",
            int(persist.get("rdb_last_save_time", core.start_time)))
    out.add("streamdb_snapshot_changes_since_last_save",
            int(persist.get("rdb_changes_since_last_save", core.dirty)))
    out.add("streamdb_snapshot_bgsave_in_progress", int(persist.get("rdb_bgsave_in_progress", 0)))
    out.add("streamdb_snapshot_last_bgsave_ok", int(persist.get("rdb_last_bgsave_status", "ok") == "ok"))

    repl = core.replication
    is_replica = bool(core.is_replica and repl is not None and repl.replica is not None)
    out.add("streamdb_replication_role", 1, {"role": "slave" if is_replica else "master"})
    if repl is None:
        out.add("streamdb_connected_replicas", 0)
        return
    out.add("streamdb_replication_offset_bytes", repl.offset)
    mono = time.monotonic()        # ack times are monotonic readings
    live = [link for link in repl.links.values() if link.client.id in core.clients]
    out.add("streamdb_connected_replicas", len(live))
    for link in live:
        labels = {"replica": link.name}
        out.add("streamdb_replica_lag_bytes", max(repl.offset - link.ack_offset, 0), labels)
        out.add("streamdb_replica_lag_seconds", round(max(mono - link.ack_time, 0.0), 3), labels)
    if is_replica:
        out.add("streamdb_master_link_up", int(repl.replica.state == "connected"))


def _stream_metrics(core, out: Exposition, now: float, budget: int) -> None:
    """Per stream, group and consumer; each of them costs one unit of ``budget``."""
    now_ms = int(now * 1000)
    truncated = 0
    for db in core.keyspace.dbs:
        if not db.data:
            continue
        dbl = str(db.index)
        for key, value in db.data.items():
            if not isinstance(value, Stream) or db.is_expired(key, now_ms):
                continue
            groups = value.groups or {}
            if budget <= 0:
                truncated += 1 + len(groups) + sum(len(g.consumers) for g in groups.values())
                continue
            budget -= 1
            labels = {"db": dbl, "key": _key_text(key)}
            out.add("streamdb_stream_length", value.length, labels)
            if value.last_id:
                age_ms = now_ms - (value.last_id >> 64)
                out.add("streamdb_stream_last_entry_age_seconds", round(age_ms / 1000.0, 3), labels)
            out.add("streamdb_stream_entries_added_total", value.entries_added, labels)
            if value.retention is not None and value.retention.trimmed_entries:
                out.add("streamdb_stream_retention_trimmed_entries_total",
                        value.retention.trimmed_entries, labels)
            for gname, group in groups.items():
                if budget <= 0:
                    truncated += 1 + len(group.consumers)
                    continue
                budget -= 1
                glabels = {**labels, "group": _key_text(gname)}
                lag = group_lag(value, group)
                if lag is not None:
                    out.add("streamdb_group_lag", lag, glabels)
                out.add("streamdb_group_pending", len(group.pel), glabels)
                if group.pel:
                    oldest = group.pel.peekitem(0)[1]
                    idle_ms = max(oldest.idle(now_ms), 0)
                    out.add("streamdb_group_oldest_pending_idle_seconds", round(idle_ms / 1000.0, 3), glabels)
                if group.entries_read != ENTRIES_READ_INVALID:
                    out.add("streamdb_group_entries_read", group.entries_read, glabels)
                # Labelled as redis_exporter labels its stream group series (stream, group).
                tlabels = {"db": dbl, "stream": _key_text(key), "group": _key_text(gname)}
                out.add("streamdb_stream_group_lag_seconds",
                        round(time_lag_ms(value, group, now_ms) / 1000.0, 3), tlabels)
                out.add("streamdb_stream_group_oldest_pending_seconds",
                        round(oldest_pending_ms(group, now_ms) / 1000.0, 3), tlabels)
                for cname, consumer in group.consumers.items():
                    if budget <= 0:
                        truncated += 1
                        continue
                    budget -= 1
                    clabels = {**glabels, "consumer": _key_text(cname)}
                    out.add("streamdb_consumer_pending", len(consumer.pending), clabels)
                    idle_ms = max(now_ms - consumer.seen_time, 0)
                    out.add("streamdb_consumer_idle_seconds", round(idle_ms / 1000.0, 3), clabels)
    out.add("streamdb_metrics_series_truncated", truncated)


# ---------------------------------------------------------------------------
# HTTP
# ---------------------------------------------------------------------------

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            408: "Request Timeout", 431: "Request Header Fields Too Large",
            500: "Internal Server Error", 503: "Service Unavailable"}


def _response(status: int, body: bytes, content_type: str = "text/plain; charset=utf-8",
              extra: str = "", head_only: bool = False) -> bytes:
    head = (f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
            f"Content-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n"
            f"{extra}Connection: close\r\n\r\n")
    return head.encode("ascii") + (b"" if head_only else body)


class MetricsEndpoint:
    """The HTTP side: one short-lived connection per scrape."""

    def __init__(self, core) -> None:
        self.core = core
        self.open_connections = 0
        self.scrape_errors = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.open_connections >= MAX_CONNECTIONS:
            writer.write(_response(503, b"too many metrics connections\n"))
            writer.close()       # close() still sends what was written
            return
        self.open_connections += 1
        try:
            reply = await self._reply_for(reader)
            if reply is not None:
                writer.write(reply)
                await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT)
        except (asyncio.TimeoutError, ConnectionError):
            pass
        finally:
            self.open_connections -= 1
            writer.close()

    async def _reply_for(self, reader: asyncio.StreamReader) -> bytes | None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT)
        except asyncio.LimitOverrunError:
            return _response(431, b"request head too large\n")
        except asyncio.IncompleteReadError:
            return None               # the client went away mid-request
        except asyncio.TimeoutError:
            return _response(408, b"request timeout\n")
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = request_line.split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return _response(400, b"bad request\n")
        method, target = parts[0], parts[1]
        path = target.split("?", 1)[0]
        if path != "/metrics":
            return _response(404, b"not found\n")
        if method not in ("GET", "HEAD"):
            return _response(405, b"method not allowed\n", extra="Allow: GET, HEAD\r\n")
        try:
            body = render(self.core, scrape_errors=self.scrape_errors).encode("utf-8")
        except Exception as e:     # a bug here must not take the server down
            self.scrape_errors += 1
            log.log(log.WARNING, f"Metrics scrape failed: {type(e).__name__}: {e}")
            return _response(500, b"scrape failed\n")
        return _response(200, body, CONTENT_TYPE, head_only=method == "HEAD")


async def start_metrics(core) -> list:
    """Listen on ``metrics-bind``:``metrics-port``; returns the asyncio servers."""
    cfg = core.config
    endpoint = MetricsEndpoint(core)
    servers = []
    for addr in cfg["metrics-bind"].split():
        srv = await asyncio.start_server(endpoint.handle, addr.lstrip("-"), cfg["metrics-port"],
                                         limit=MAX_REQUEST_BYTES, reuse_address=True)
        servers.append(srv)
    log.log(log.NOTICE, f"Metrics endpoint listening on {cfg['metrics-bind']} port {cfg['metrics-port']} (GET /metrics)")
    return servers
