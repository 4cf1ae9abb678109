"""How much memory the server uses: INFO used_memory and the parts maxmemory leaves out.

A leaf every floor may read (INFO and MEMORY in commands/, the maxmemory check in
server/limits.py, the observer's start-up figure, the metrics page).

used_memory, as Redis's: the bytes the allocators hand out (the data, client
buffers, the server's own objects), not the process's RSS.  Deleted data lowers
it at once, while its pages may stay resident (freed malloc chunks and pymalloc
pools scattered among live ones); RSS stays visible as INFO used_memory_rss.
``MemoryMeter`` measures it (see its doc for how and what that costs).
"""

from __future__ import annotations

import ctypes
import os
import resource
import sys
import time

__all__ = ["MemoryMeter", "METER", "aof_buffer", "not_counted_for_maxmemory",
           "replicas_output", "rss_memory", "used_memory"]


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
