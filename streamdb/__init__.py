"""StreamDB: a durable Redis-protocol stream database."""

from .compiled import install_source_finder

__version__ = "0.1.0"

# Before any other streamdb module is imported: STREAMDB_PURE=1 (or a stale build)
# makes the pure-mode compiled modules load from their source (compiled.py).
install_source_finder()
