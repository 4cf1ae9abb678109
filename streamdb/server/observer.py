"""The per-command observer: what the dispatch records of every command it runs.

The core calls ``Observer.command_done`` once per executed command with the
handler's duration; everything recorded here hangs off that one hook:

* the per-command latency histogram behind INFO latencystats and LATENCY
  HISTOGRAM (``latency-tracking``),
* the slow log (``slowlog-log-slower-than`` microseconds, ``slowlog-max-len``),
* the latency monitor's "command" / "fast-command" events
  (``latency-monitor-threshold`` milliseconds; other subsystems report their own
  events, e.g. the AOF's "aof-write" and "aof-fsync-always", through
  ``Observer.latency_sample``),
* MONITOR clients, fed every executed command in Redis's line format.

The commands that read it (SLOWLOG, LATENCY, MONITOR, INFO latencystats) are in
commands/observe.py; they reach it as ``core.observe``.  Compiled (observer.pxd):
``command_done`` runs once per request.
"""

from __future__ import annotations

import time
from collections import deque

import cython

from ..dispatch.registry import CommandSpec
from ..memory import used_memory
from ..protocol.reply import Status

__all__ = ["Observer", "histogram_buckets", "bucket_upper_ns", "redacted_argv"]

# Redis's slowlog.h limits on what an entry keeps of the command.
SLOWLOG_ENTRY_MAX_ARGC = 32
SLOWLOG_ENTRY_MAX_STRING = 128
# Redis's latency.h: samples kept per event (one per second at most).
LATENCY_TS_LEN = 160
# Histogram buckets keep this many significant bits of a duration in ns (< 4% error).
_HIST_BITS = 5
# A command's histogram is a list of counts, one slot per bucket: the slot of a
# duration of b significant bits (b > _HIST_BITS) is (b - _HIST_BITS) << _HIST_BITS
# | its top _HIST_BITS bits, of a shorter one the duration itself.  Counting is
# then two C shifts and a list index per command, where a dict keyed by the
# bucket's bound (a new int to hash, a get and a set) measured ~600 instructions
# of an XADD request (callgrind).  Durations are below 2**63 ns: 59 bit counts.
_HIST_SLOTS = (64 - _HIST_BITS) << _HIST_BITS
# Rate samples kept (one per >= 100 ms cron tick, as Redis's STATS_METRIC_SAMPLES).
_RATE_SAMPLES = 16


class LatencyEvent:
    __slots__ = ("samples", "max")

    def __init__(self) -> None:
        self.samples: deque = deque(maxlen=LATENCY_TS_LEN)   # [unix seconds, ms]
        self.max = 0


# Compiled, a cclass (observe.pxd): the dispatch calls command_done per request.
@cython.cclass
class Observer:
    """State of the observability commands; one per Core (``core.observe``)."""

    def __init__(self, core) -> None:
        self.core = core
        self.settings = core.config.values
        # command_done's three settings, read from ``settings`` when they change
        # (CONFIG SET calls the core's config listeners) rather than per command:
        # three dict look-ups by non-interned names measured ~600 of the ~16k
        # instructions of an XADD request (callgrind).
        self.settings_changed(["latency-tracking"])
        core.config_listeners.append(self.settings_changed)
        self.slowlog = deque()                 # newest first, as SLOWLOG GET replies
        self.slowlog_next_id = 0
        self.latency = {}                      # event name -> LatencyEvent
        self.monitors = {}                     # client id -> Client in MONITOR mode
        # command name -> its counts per histogram slot (histogram_buckets reads them)
        self.histograms = {}
        self.last_name = None      # command_done's last command and its histogram
        self.last_counts = None
        self.startup_memory = used_memory(core)     # MEMORY STATS startup.allocated
        # (monotonic s, commands, net in, net out) taken by cron: INFO's instantaneous_*.
        self.rate_samples = deque(maxlen=_RATE_SAMPLES)

    def cron(self) -> None:
        """Server cron hook: sample the counters for the instantaneous_* rates."""
        now = time.monotonic()
        if self.rate_samples and now - self.rate_samples[-1][0] < 0.1:
            return
        st = self.core.stats
        self.rate_samples.append((now, st.commands_processed, st.net_input_bytes,
                                  st.net_output_bytes))

    def rates(self) -> tuple[int, float, float]:
        """(ops/s, input KB/s, output KB/s) over the sampled window, as Redis's trackInstantaneousMetric."""
        if len(self.rate_samples) < 2:
            return 0, 0.0, 0.0
        (t0, c0, i0, o0), (t1, c1, i1, o1) = self.rate_samples[0], self.rate_samples[-1]
        dt = t1 - t0
        if dt <= 0:
            return 0, 0.0, 0.0
        return int((c1 - c0) / dt), (i1 - i0) / dt / 1024, (o1 - o0) / dt / 1024

    # -- the per-command hook ----------------------------------------------------

    def settings_changed(self, names: list[str]) -> None:
        """A config listener: CONFIG SET changed the directives ``names``."""
        settings = self.settings
        self.latency_tracking = settings["latency-tracking"]
        self.slowlog_slower_than = settings["slowlog-log-slower-than"]
        self.latency_threshold_ms = settings["latency-monitor-threshold"]

    def command_done(self, spec: CommandSpec, client, argv, elapsed_ns: cython.longlong) -> None:
        """One request ``argv`` of ``client`` ran ``spec``, taking ``elapsed_ns``."""
        name = spec.name
        bits: cython.int
        hist_bits: cython.int = _HIST_BITS      # (a C int: C shifts below)
        slot: cython.Py_ssize_t
        counts: list
        if self.latency_tracking:
            # (int.bit_length, which the compiled form would make a Python int for)
            bits = (_bit_length(elapsed_ns) if cython.compiled
                    else elapsed_ns.bit_length()) - hist_bits
            slot = bits << hist_bits | elapsed_ns >> bits if bits > 0 else elapsed_ns
            # The last command's histogram, kept by the identity of its name (the
            # spec's str): a pipeline's runs of one command skip the dict look-up.
            if name is self.last_name:
                counts = self.last_counts
            else:
                counts = self.histograms.get(name)
                if counts is None:
                    counts = self.histograms[name] = [0] * _HIST_SLOTS
                self.last_name = name
                self.last_counts = counts
            counts[slot] += 1
        usec: cython.longlong = elapsed_ns // 1000
        threshold: cython.longlong = self.slowlog_slower_than
        ms_threshold: cython.longlong = self.latency_threshold_ms
        if not (0 <= threshold <= usec or ms_threshold or self.monitors):
            return          # the usual case: nothing more to record
        if 0 <= threshold <= usec and name != "exec":
            self._log_slow(client, argv, usec)
        if ms_threshold and usec // 1000 >= ms_threshold:
            self.latency_sample("fast-command" if "fast" in spec.flags else "command", usec // 1000)
        if self.monitors and "admin" not in spec.flags and client.kind != "aof":
            self._feed_monitors(client, argv)

    # -- slow log ---------------------------------------------------------------------

    def _log_slow(self, client, argv: list[bytes], usec: int) -> None:
        entry = [self.slowlog_next_id, int(self.core.clock()), usec, slowlog_argv(argv),
                 client.addr.encode(), client.name]
        self.slowlog_next_id += 1
        self.slowlog.appendleft(entry)
        while len(self.slowlog) > self.settings["slowlog-max-len"]:
            self.slowlog.pop()

    # -- latency monitor -------------------------------------------------------------

    def latency_sample(self, event: str, ms: int) -> None:
        """Record ``ms`` for ``event`` when it reaches latency-monitor-threshold (loop thread only)."""
        threshold = self.settings["latency-monitor-threshold"]
        if not threshold or ms < threshold:
            return
        ev = self.latency.get(event)
        if ev is None:
            ev = self.latency[event] = LatencyEvent()
        now = int(self.core.clock())
        ev.max = max(ev.max, ms)
        # One sample per second: a second spike in the same second keeps the worse one.
        if ev.samples and ev.samples[-1][0] == now:
            ev.samples[-1][1] = max(ev.samples[-1][1], ms)
        else:
            ev.samples.append([now, ms])

    # -- MONITOR ---------------------------------------------------------------------

    def _feed_monitors(self, client, argv: list[bytes]) -> None:
        line = Status(f"{self.core.clock():.6f} [{client.db} {client.addr}] " +
                      " ".join(_repr_arg(a) for a in redacted_argv(argv)))
        live = self.core.clients
        for cid, monitor in list(self.monitors.items()):
            if live.get(cid) is not monitor:       # disconnected since MONITOR
                del self.monitors[cid]
            elif monitor.outbox is not None:
                monitor.outbox.deliver(line)

    # -- latency histograms ---------------------------------------------------------

    def buckets(self, name: str) -> list[tuple[int, int, int]]:
        """Command ``name``'s histogram: (lower ns, upper ns, count) of each bucket
        counted, lowest first; [] for a command not counted."""
        counts = self.histograms.get(name)
        if not counts:
            return []
        return [(lower, bucket_upper_ns(lower), n) for lower, n in histogram_buckets(counts)]

    def percentiles_usec(self, name: str, percentiles) -> list[tuple[float, float]]:
        buckets = self.buckets(name)
        total = sum(n for _, _, n in buckets)
        out = []
        for p in percentiles:
            wanted = total * p / 100.0
            seen = 0
            for _, upper, n in buckets:
                seen += n
                if seen >= wanted:
                    out.append((p, upper / 1000.0))
                    break
        return out


@cython.cfunc
@cython.inline
def _bit_length(n: cython.longlong) -> cython.int:
    """int.bit_length of a duration (>= 0) in C."""
    bits: cython.int = 0
    while n > 0:
        n >>= 1
        bits += 1
    return bits


def histogram_buckets(counts: list) -> list[tuple[int, int]]:
    """A command's histogram as (bucket lower bound in ns, count) for each bucket
    counted, lowest first (slots are in the order of their bounds)."""
    mask = (1 << _HIST_BITS) - 1
    return [((slot & mask) << (slot >> _HIST_BITS) if slot > mask else slot, n)
            for slot, n in enumerate(counts) if n]


def bucket_upper_ns(lower: int) -> int:
    bits = lower.bit_length() - _HIST_BITS
    return lower + (1 << bits) - 1 if bits > 0 else lower


# -- argv as Redis shows it in the slow log and to monitors --------------------------

_REDACTED = b"(redacted)"


def redacted_argv(argv: list[bytes]) -> list[bytes]:
    """Secrets replaced as Redis's redactClientCommandArgument does (AUTH, HELLO AUTH)."""
    name = argv[0].lower()
    if name == b"auth":
        return [argv[0]] + [_REDACTED] * (len(argv) - 1)
    if name == b"hello":
        out = list(argv)
        for i in range(2, len(argv) - 2):
            if argv[i].lower() == b"auth":
                out[i + 1] = out[i + 2] = _REDACTED
                break
        return out
    return argv


def slowlog_argv(argv: list[bytes]) -> list[bytes]:
    argv = redacted_argv(argv)
    kept = min(len(argv), SLOWLOG_ENTRY_MAX_ARGC)
    out = []
    for i in range(kept):
        if kept != len(argv) and i == kept - 1:
            out.append(b"... (%d more arguments)" % (len(argv) - kept + 1))
            break
        arg = argv[i]
        if len(arg) > SLOWLOG_ENTRY_MAX_STRING:
            arg = arg[:SLOWLOG_ENTRY_MAX_STRING] + b"... (%d more bytes)" % (
                len(arg) - SLOWLOG_ENTRY_MAX_STRING)
        out.append(arg)
    return out


_ESCAPES = {ord("\\"): "\\\\", ord('"'): '\\"', ord("\n"): "\\n", ord("\r"): "\\r",
            ord("\t"): "\\t", 7: "\\a", 8: "\\b"}


def _repr_arg(arg: bytes) -> str:
    """Redis's sdscatrepr: quoted, C escapes, other non-printables as \\xHH."""
    parts = ['"']
    for ch in arg:
        esc = _ESCAPES.get(ch)
        if esc is not None:
            parts.append(esc)
        elif 32 <= ch < 127:
            parts.append(chr(ch))
        else:
            parts.append(f"\\x{ch:02x}")
    parts.append('"')
    return "".join(parts)
