"""Charts drawn by the server as inline SVG (no script, works offline), and the
fixed-size ring of per-second samples the overview's throughput chart reads.

``line_chart`` takes any series of numbers (throughput, a group's time lag);
``Ring`` keeps the last ``size`` samples in a preallocated array and never grows.
"""

from __future__ import annotations

import time
from array import array
from collections import OrderedDict
from html import escape

from ...engine.lag import time_lag_ms
from ...engine.stream import Stream

__all__ = ["Ring", "ThroughputSampler", "GroupLagSampler", "line_chart"]


class Ring:
    """The last ``size`` numbers appended, oldest first; memory fixed at creation."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._values = array("d", bytes(8 * size))
        self._next = 0
        self._count = 0

    def append(self, value: float) -> None:
        self._values[self._next] = value
        self._next = (self._next + 1) % self.size
        self._count = min(self._count + 1, self.size)

    def values(self) -> list[float]:
        start = (self._next - self._count) % self.size
        return [self._values[(start + i) % self.size] for i in range(self._count)]


class ThroughputSampler:
    """Commands and input bytes per second over the last hour, one sample a second
    (``sample`` is called by a one-second timer on the server's loop)."""

    SECONDS = 3600

    def __init__(self, core) -> None:
        self.core = core
        self.commands = Ring(self.SECONDS)
        self.input_bytes = Ring(self.SECONDS)
        self._last = self._counters()

    def _counters(self) -> tuple[int, int]:
        stats = self.core.stats
        return stats.commands_processed, stats.net_input_bytes

    def sample(self) -> None:
        now = self._counters()
        # CONFIG RESETSTAT sets the counters back: that second counts as nothing.
        self.commands.append(max(now[0] - self._last[0], 0))
        self.input_bytes.append(max(now[1] - self._last[1], 0))
        self._last = now


class GroupLagSampler:
    """The time lag (STREAMDB.GROUP INFO's lag-ms) of the groups the console's group
    pages showed, one sample a second over the last hour.

    At most ``MAX_GROUPS`` groups are followed, each in a Ring of ``SECONDS``
    samples (about 29 kB; 100 groups under 3 MB): showing a new group when the
    bound is reached drops the one shown longest ago.  A group that is gone
    (deleted, or its stream) is dropped at the next sample.  Like the metrics
    endpoint, the sampler reads the engine directly: it is a timer, no client's
    command, and reads at most the node holding each group's next entry."""

    SECONDS = 3600
    MAX_GROUPS = 100

    def __init__(self, core) -> None:
        self.core = core
        self.rings: OrderedDict[tuple[int, bytes, bytes], Ring] = OrderedDict()

    def watch(self, db: int, key: bytes, group: bytes) -> Ring:
        """The group's ring, made (and sampled once) when it was not followed yet."""
        name = (db, key, group)
        ring = self.rings.get(name)
        if ring is not None:
            self.rings.move_to_end(name)
            return ring
        if len(self.rings) >= self.MAX_GROUPS:
            self.rings.popitem(last=False)
        ring = self.rings[name] = Ring(self.SECONDS)
        self._sample_one(name, ring, int(time.time() * 1000))
        return ring

    def sample(self) -> None:
        now_ms = int(time.time() * 1000)
        for name, ring in list(self.rings.items()):
            self._sample_one(name, ring, now_ms)

    def _sample_one(self, name: tuple[int, bytes, bytes], ring: Ring, now_ms: int) -> None:
        db_index, key, group = name
        dbs = self.core.keyspace.dbs
        stream = dbs[db_index].data.get(key) if db_index < len(dbs) else None
        g = stream.groups.get(group) if isinstance(stream, Stream) and stream.groups else None
        if g is None:
            self.rings.pop(name, None)
            return
        ring.append(time_lag_ms(stream, g, now_ms))


def _tick_label(value: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= size:
            return f"{value / size:.3g}{unit}"
    return f"{value:.3g}"


def line_chart(values: list[float], title: str, unit: str, seconds_per_point: int = 1,
               width: int = 640, height: int = 160) -> str:
    """An SVG line chart of ``values`` (oldest first, one every ``seconds_per_point``),
    its y axis from 0 to the maximum, labelled with ``unit``; the x axis ends at now."""
    pad_left, pad_bottom, pad_top = 48, 18, 18
    plot_w, plot_h = width - pad_left - 8, height - pad_bottom - pad_top
    top = max(values, default=0.0) or 1.0
    n = len(values)
    points = []
    for i, v in enumerate(values):
        x = pad_left + (plot_w * i / (n - 1) if n > 1 else plot_w)
        y = pad_top + plot_h * (1 - v / top)
        points.append(f"{x:.1f},{y:.1f}")
    span = n * seconds_per_point
    span_text = f"-{span} s" if span < 120 else f"-{span // 60} min"
    label = escape(title)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{label}" class="chart">',
        f'<text x="{pad_left}" y="12" class="chart-title">{label} ({escape(unit)})</text>',
        f'<line x1="{pad_left}" y1="{pad_top + plot_h}" x2="{width - 8}" y2="{pad_top + plot_h}" class="axis"/>',
        f'<line x1="{pad_left}" y1="{pad_top}" x2="{pad_left}" y2="{pad_top + plot_h}" class="axis"/>',
        f'<text x="{pad_left - 4}" y="{pad_top + 4}" text-anchor="end">{_tick_label(top)}</text>',
        f'<text x="{pad_left - 4}" y="{pad_top + plot_h}" text-anchor="end">0</text>',
        f'<text x="{pad_left}" y="{height - 4}">{span_text}</text>',
        f'<text x="{width - 8}" y="{height - 4}" text-anchor="end">now</text>',
    ]
    if points:
        parts.append(f'<polyline points="{" ".join(points)}" class="series"/>')
    else:
        parts.append(f'<text x="{pad_left + 8}" y="{pad_top + plot_h / 2}">no samples yet</text>')
    parts.append("</svg>")
    return "".join(parts)
