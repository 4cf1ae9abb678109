"""Resource limits that watch connections and memory (maxclients is in network.py).

* used_memory and what maxmemory leaves out of it are measured in memory.py.
* maxmemory (noeviction only): ``refresh_memory`` compares used_memory, less the
  replicas' output and the AOF's retried frame (Redis's mem_not_counted_for_evict),
  with maxmemory and sets ``core.out_of_memory``; the core then refuses commands
  flagged ``denyoom`` with Redis's -OOM error.  It runs on each cron tick and, so
  that a pipelining client cannot write far past the limit between two ticks, from
  the dispatch whenever the bytes read since the last measurement could have used
  half the headroom left (``core.memory_recheck_input``; at least every
  ``RECHECK_STEP`` bytes near the limit).  The dispatch runs the requests of one
  read (at most 256 KiB) before it sees the next read's bytes, so one read's worth
  is what a client can overshoot by.  A replica ignores maxmemory (Redis's
  replica-ignore-maxmemory default): its data is its primary's.  Eviction policies
  are accepted by CONFIG but act as noeviction, with a warning: dropping entries of
  a log silently is never what its reader wants.
* timeout: idle normal clients are closed by the cron, at most once a second;
  replicas and blocked clients are never idle-closed, as in Redis.
* Freed memory goes back to the OS: with a bounded stream cache the cron calls
  glibc's ``malloc_trim`` once enough node blobs were evicted since the last call
  (``release_evicted_memory``).  An evicted blob's memory returns to malloc's free
  lists, where the next blobs reuse only part of it; without the trim the process
  keeps those pages resident (10M entries, 16 MB cache: RSS 86 -> 78 MB).  One
  call takes about 0.7 ms there (2 ms at most), a few times a second at the most.
* client-output-buffer-limit: ``output_limit_reached`` runs after each write to
  a connection and measures its pending output (the transport's write buffer
  plus replies not yet written); past the class's hard limit, or past the
  soft limit for longer than its seconds, the client is dropped without
  flushing, as Redis does.
"""

from __future__ import annotations

import ctypes
import time

from .. import log
from ..engine.nodecache import CACHE
from ..dispatch.client import client_type
from ..memory import METER, not_counted_for_maxmemory, used_memory

__all__ = ["Limits", "output_limit_reached", "pending_output"]

# core.memory_recheck_input when nothing is to be checked (no maxmemory, a replica).
NEVER = 1 << 62


def output_class(client) -> str:
    """The client-output-buffer-limit class of ``client`` (as Redis's getClientType)."""
    kind = client_type(client)
    return kind if kind in ("replica", "pubsub") else "normal"


def pending_output(conn) -> int:
    """Bytes written to the connection but not yet taken by the peer, plus replies not yet written."""
    size = conn.transport.get_write_buffer_size()
    if conn.out:
        size += sum(len(b) for b in conn.out)
    return size


def output_limit_reached(conn, limits: dict) -> bool:
    """Record the connection's pending output; True when its class's limit is overcome.

    Redis's rule: the hard limit closes at once; the soft limit closes once it
    has been exceeded continuously for more than its seconds.
    """
    client = conn.client
    used = pending_output(conn)
    client.output_size = used
    hard, soft, soft_seconds = limits[output_class(client)]
    if hard and used >= hard:
        return True
    if soft and used >= soft:
        now = time.monotonic()
        if conn.soft_limit_since is None:
            conn.soft_limit_since = now
            return False
        return now - conn.soft_limit_since > soft_seconds
    conn.soft_limit_since = None
    return False


def _malloc_trim():
    """glibc's malloc_trim, or None where the C library has none (musl, macOS)."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


class Limits:
    """The cron side of the limits: the memory flag, idle clients, freed memory."""

    IDLE_SCAN_INTERVAL = 1.0     # seconds: timeout is given in whole seconds
    # Evicted node blobs (about 1 KiB each) between two malloc_trim calls.
    TRIM_AFTER_EVICTIONS = 256
    # Bytes read between two maxmemory checks near the limit: a measurement costs
    # 0.1-0.5 ms with 100 MB of data (more on a fragmented heap, see MemoryMeter),
    # 64 KiB of 1 KiB XADDs take about as long to run.
    RECHECK_STEP = 64 * 1024
    # How much used memory grows per byte of request read, about the most
    # (measured on the plain engine: XADDs of 1 KiB values 1.1, 1.7 with the read's
    # buffers; of small entries 0.5; SETs of new small keys 3.3, XADDs making new
    # streams 4.9, XREADGROUPs 3.8).
    GROWTH_PER_BYTE_READ = 4

    def __init__(self, core, server) -> None:
        self.core = core
        self.server = server
        self._next_idle_scan = 0.0
        self._malloc_trim = _malloc_trim()
        self._evictions_at_trim = 0
        self.warn_policy()

    def warn_policy(self) -> None:
        policy = self.core.config["maxmemory-policy"]
        if policy != "noeviction":
            log.log(log.WARNING, f"maxmemory-policy {policy} is treated as noeviction: "
                                 "StreamDB never evicts keys; writes get -OOM past maxmemory")

    def config_changed(self, names: list[str]) -> None:
        if "maxmemory-policy" in names:
            self.warn_policy()
        if "maxmemory" in names:
            self.refresh_memory()

    def cron(self) -> None:
        self.release_evicted_memory()
        self.refresh_memory()
        if self.core.config["timeout"]:
            now = time.monotonic()
            if now >= self._next_idle_scan:
                self._next_idle_scan = now + self.IDLE_SCAN_INTERVAL
                self.close_idle_clients()

    def refresh_memory(self) -> None:
        """Set ``core.out_of_memory`` and the input position of the next check.

        The cron calls this every tick, CONFIG SET maxmemory at once, and the
        dispatch (``core.memory_recheck``) once ``stats.net_input_bytes`` reaches
        ``core.memory_recheck_input``.  When a measurement is not due (see
        MemoryMeter) an estimate stands for it until the next: the last one plus
        the most that the bytes read since could have added, so that near the
        limit it errs on the side of refusing."""
        core = self.core
        maxmemory = core.config["maxmemory"]
        read = core.stats.net_input_bytes
        if not maxmemory or core.is_replica:
            core.out_of_memory = False
            core.memory_recheck_input = NEVER
            return
        used = used_memory(core) + \
            max(read - METER.read_at_measure, 0) * self.GROWTH_PER_BYTE_READ
        headroom = maxmemory - (used - not_counted_for_maxmemory(core))
        core.out_of_memory = headroom < 0
        # Check again once the bytes read could have grown the data by half the
        # headroom: the checks come closer as the limit nears, each at least
        # RECHECK_STEP apart, and seldom far from it.
        core.memory_recheck_input = read + max(headroom // (2 * self.GROWTH_PER_BYTE_READ),
                                               self.RECHECK_STEP)

    def release_evicted_memory(self) -> None:
        """Return the pages of evicted node blobs to the OS (see the module's doc)."""
        if self._malloc_trim is None or \
                CACHE.evictions - self._evictions_at_trim < self.TRIM_AFTER_EVICTIONS:
            return
        self._evictions_at_trim = CACHE.evictions
        self._malloc_trim(0)

    def close_idle_clients(self) -> None:
        core = self.core
        max_idle_ms = core.config["timeout"] * 1000
        now_ms = core.now_ms()
        for conn in list(self.server.connections):
            client = conn.client
            if client is None or conn.closing or client.kind != "normal" \
                    or client.blocked is not None:
                continue
            if now_ms - client.last_ms > max_idle_ms:
                log.log(log.VERBOSE, f"Closing idle client id={client.id} addr={client.addr}")
                conn.closing = True
                conn.transport.close()


def install(core, server) -> Limits:
    limits = Limits(core, server)
    core.memory_recheck = limits.refresh_memory
    limits.refresh_memory()
    server.cron_hooks.append(limits.cron)
    core.config_listeners.append(limits.config_changed)
    return limits
