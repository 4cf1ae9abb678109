"""Resource limits that watch connections and memory (maxclients is in network.py).

* maxmemory (noeviction only): ``refresh_memory`` compares INFO's used_memory
  with maxmemory once per cron tick and sets ``core.out_of_memory``; the core
  then refuses commands flagged ``denyoom`` with Redis's -OOM error.  A replica
  ignores maxmemory (Redis's replica-ignore-maxmemory default): its data is its
  primary's.  Eviction policies are accepted by CONFIG but act as noeviction,
  with a warning: dropping entries of a log silently is never what its reader wants.
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
import os
import resource
import time

from .. import log
from ..engine.nodecache import CACHE

__all__ = ["Limits", "output_limit_reached", "pending_output", "used_memory"]


def used_memory(core) -> int:
    """Our equivalent of Redis's used_memory: the process's resident set size.

    Python has no cheap allocator-level counter; RSS is what an operator's
    memory limit sees, and it is what the benchmark compares.
    """
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def output_class(client) -> str:
    return "replica" if client.kind == "replica" else "normal"


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
        core = self.core
        maxmemory = core.config["maxmemory"]
        core.out_of_memory = bool(maxmemory) and not core.is_replica \
            and used_memory(core) > maxmemory

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
    server.cron_hooks.append(limits.cron)
    core.config_listeners.append(limits.config_changed)
    return limits
