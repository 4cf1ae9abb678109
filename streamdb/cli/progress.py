"""A dependency-free progress bar for tools (stderr, redrawn in place when on a terminal)."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: int, label: str = "", stream=sys.stderr) -> None:
        self.total = max(total, 1)
        self.label = label
        self.stream = stream
        self.tty = stream.isatty()
        self._last = time.monotonic()
        self.done = 0

    def update(self, done: int) -> None:
        self.done = done
        now = time.monotonic()
        if now - self._last < (0.1 if self.tty else 2.0) and done < self.total:
            return
        self._last = now
        frac = min(done / self.total, 1.0)
        width = 30
        bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
        line = f"{self.label} [{bar}] {frac * 100:5.1f}% ({done}/{self.total})"
        self.stream.write(("\r" + line) if self.tty else (line + "\n"))
        self.stream.flush()

    def finish(self) -> None:
        self.update(self.total)
        if self.tty:
            self.stream.write("\n")
