"""In-process helpers for tests that drive a Core directly (no sockets)."""

from __future__ import annotations

import streamdb.commands  # noqa: F401  (fills the command table)
from streamdb.server.core import Core


class FakeClock:
    """A clock the test moves by hand (``clock.t += 0.5``)."""

    def __init__(self, t: float = 1_700_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def argv(*args) -> list[bytes]:
    """A command as bytes: ``argv("XADD", "s", 1)``."""
    return [a if isinstance(a, bytes) else str(a).encode() for a in args]


class Recorder:
    """An effect sink that keeps every batch as (db, commands): ``core.add_effect_sink(rec)``."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, list[list[bytes]]]] = []

    def __call__(self, batch) -> None:
        self.batches.append((batch.db, [list(a) for a in batch.commands]))


def replay(batches, core: Core) -> None:
    """Apply recorded batches through a replay client (the AOF/replica path); no error may occur."""
    client = core.replay_client()
    for db, effects in batches:
        if client.db != db:
            core.execute(client, argv("SELECT", db))
        for a in effects:
            reply = core.execute(client, a)
            assert not hasattr(reply, "message"), (a, getattr(reply, "message", None))
