"""Charts drawn by the server as inline SVG (no script, works offline), and the
fixed-size ring of per-second samples the overview's throughput chart reads.

``line_chart`` takes any series of numbers (a group's time lag over an hour is
the next one to use it); ``Ring`` keeps the last ``size`` samples in a
preallocated array and never grows.
"""

from __future__ import annotations

from array import array
from html import escape

__all__ = ["Ring", "ThroughputSampler", "line_chart"]


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
