"""In-process helpers for tests that drive a Core directly (no sockets)."""

from __future__ import annotations

import contextlib
import sys

import streamdb.commands  # noqa: F401  (fills the command table)
from streamdb.dispatch.client import Outbox
from streamdb.server.core import Core


class FakeClock:
    """A clock the test moves by hand (``clock.t += 0.5``)."""

    def __init__(self, t: float = 1_700_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Delivered(Outbox):
    """A bare client's outbox: each reply delivered to it goes to ``sink`` (a callable):
    ``core.new_client(outbox=Delivered(got.append))``."""

    def __init__(self, sink) -> None:
        self.sink = sink

    def deliver(self, reply) -> None:
        self.sink(reply)

    def deliver_encoded(self, data) -> None:
        self.sink(data)


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


# -- the command table, for the tests that hold compiled handlers equal to their sources


def command_table() -> dict:
    """The command table as it is: each spec with a copy of its subcommands."""
    from streamdb.dispatch import registry
    return {name: (spec, dict(spec.subcommands)) for name, spec in registry.COMMANDS.items()}


def install_table(table: dict) -> None:
    """Make ``table`` (from command_table) the one commands run from."""
    from streamdb.dispatch import registry
    for spec, subs in table.values():
        spec.subcommands.clear()
        spec.subcommands.update(subs)
    registry.TABLE.replace({name: spec for name, (spec, _) in table.items()})


@contextlib.contextmanager
def table_installed(table: dict):
    built = command_table()
    install_table(table)
    try:
        yield
    finally:
        install_table(built)


def table_from_sources(module_names) -> tuple[dict, dict]:
    """(the command table with these pure-mode modules registered from their sources,
    in order, each importing the sources before it; the source modules by name).  The
    build's table and modules are put back at once."""
    from streamdb import compiled
    built = command_table()
    saved = {name: sys.modules[name] for name in module_names}
    loaded = {}
    try:
        for name in module_names:
            loaded[name] = sys.modules[name] = compiled.load_source(name)
        table = command_table()
    finally:
        sys.modules.update(saved)
        install_table(built)
    return table, loaded
