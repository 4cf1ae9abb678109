"""Resource limits that watch connections and memory (maxclients is in network.py).

* used_memory, as Redis's: the bytes the allocators hand out (the data, client
  buffers, the server's own objects), not the process's RSS.  Deleted data lowers
  it at once, while its pages may stay resident (freed malloc chunks and pymalloc
  pools scattered among live ones); RSS stays visible as INFO used_memory_rss.
  ``MemoryMeter`` measures it (see its doc for how and what that costs).
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
import os
import resource
import sys
import time

from .. import log
from ..engine.nodecache import CACHE

__all__ = ["Limits", "MemoryMeter", "METER", "aof_buffer", "not_counted_for_maxmemory",
           "output_limit_reached", "pending_output", "replicas_output", "rss_memory",
           "used_memory"]

# core.memory_recheck_input when nothing is to be checked (no maxmemory, a replica).
NEVER = 1 << 62


def rss_memory() -> int:
    """The process's resident set size (INFO used_memory_rss)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
        "uordblks", "fordblks", "keepcost")]


def _mallinfo2():
    """glibc's mallinfo2 (2.33 and later), or None where the C library has none."""
    try:
        func = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    func.argtypes = []
    func.restype = _MallInfo2
    return func


class MemoryMeter:
    """used_memory: malloc's bytes in use plus pymalloc's, measured at a bounded cost.

    What counts, and why these measures rather than the others at hand:

    * RSS (what used_memory was before) does not fall when data is deleted: the
      freed malloc chunks and pymalloc blocks sit among live ones, in pages that
      stay resident, so a server past maxmemory refused writes until a restart
      even after most of its data was deleted.
    * glibc's mallinfo2 gives malloc's bytes in use (``uordblks`` in its heaps plus
      ``hblkhd`` in blocks it mapped alone): every object of more than 512 bytes
      (a sealed node's blob, a big dict's or list's table) and the buffers of
      asyncio, msgpack and LMDB.  Not the LMDB map: cold nodes, which live only
      in the snapshot's file, are not the data's memory and are not counted;
      resident blobs (at most ``stream-cache-size`` of the durable ones) are.
      It walks malloc's free lists: about 1 us on a compact heap, but 7 ms once
      75k freed 1 KiB chunks lie scattered.
    * pymalloc (objects of up to 512 bytes: the open tail nodes' fields, the
      pending entries, node headers) takes its memory in arenas it maps itself,
      out of malloc's count.  CPython 3.11 tells only how many of its blocks are
      in use (``sys.getallocatedblocks``: a walk of its pools, ~30 us per 100 MB),
      not their bytes (``sys._debugmallocstats`` prints them, walking every
      block); that number times ``PYMALLOC_BLOCK_BYTES``, the average block of a
      stream data set, is the estimate.  The count includes the larger objects
      malloc counted already, once each: 64 bytes too many on a 1 KiB blob.
    * A byte count kept per value by the keyspace would be exact, but it would
      cost every write on the engine's hot path, for the sake of one check.

    Where mallinfo2 is missing (musl, macOS) used_memory is the RSS again.

    Since one measurement can take milliseconds, ``current`` measures again only
    once the time since the last one is ``1 / COST_SHARE`` times what that one
    took (the loop spends at most ~2% of its time measuring), and otherwise
    returns the last value.
    """

    # Average bytes of a pymalloc block in use (sys._debugmallocstats' bytes in
    # allocated blocks over blocks in use) in a server holding 200k entries, small
    # ones with consumer groups or 300-byte values: 64 in both; 300k small entries
    # behind a 1 MB stream cache (mostly cold nodes' headers): 50-57.
    PYMALLOC_BLOCK_BYTES = 64
    COST_SHARE = 0.02

    def __init__(self) -> None:
        self._mallinfo2 = _mallinfo2()
        self.value = 0               # the last measurement
        self.malloc_bytes = 0        # its malloc part (INFO allocator_allocated)
        self.measured_at = float("-inf")   # time.monotonic() of the last measurement
        self.cost = 0.0              # seconds the last measurement took
        self.read_at_measure = 0     # the server's stats.net_input_bytes then

    def measure(self, read: int) -> int:
        """Measure now, whatever it costs; ``read`` is the server's
        stats.net_input_bytes (kept for ``Limits.refresh_memory``'s estimate)."""
        # The thread's CPU time: a measurement the scheduler interrupted (other
        # processes on the cores) would otherwise hold the next one off for long.
        started = time.thread_time()
        if self._mallinfo2 is None:
            self.value = self.malloc_bytes = rss_memory()
        else:
            info = self._mallinfo2()
            self.malloc_bytes = info.uordblks + info.hblkhd
            self.value = self.malloc_bytes + sys.getallocatedblocks() * self.PYMALLOC_BLOCK_BYTES
        self.cost = time.thread_time() - started
        self.measured_at = time.monotonic()
        self.read_at_measure = read
        return self.value

    def due(self) -> bool:
        """Whether a measurement now keeps the meter within its share of the time."""
        return time.monotonic() - self.measured_at >= self.cost / self.COST_SHARE

    def current(self, read: int) -> int:
        """A fresh measurement when one is due, else the last."""
        return self.measure(read) if self.due() else self.value


# One process, one heap: the meter is shared like the node cache.
METER = MemoryMeter()


def used_memory(core) -> int:
    """INFO used_memory (see ``MemoryMeter``); keeps ``core.peak_memory`` up to date."""
    used = METER.current(core.stats.net_input_bytes)
    if used > core.peak_memory:
        core.peak_memory = used
    return used


def replicas_output(core) -> int:
    """Bytes the replicas have yet to take (INFO mem_clients_slaves)."""
    replication = core.replication
    if replication is None:
        return 0
    return sum(link.client.output_size for link in replication.links.values())


def aof_buffer(core) -> int:
    """The AOF frame waiting to be written again (INFO mem_aof_buffer)."""
    return len(core.aof.pending) if core.aof is not None else 0


def not_counted_for_maxmemory(core) -> int:
    """Redis's mem_not_counted_for_evict: the replicas' pending output and the AOF's
    pending frame.  They grow with the writes themselves, and refusing writes
    because of them would not drain them."""
    return replicas_output(core) + aof_buffer(core)


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
