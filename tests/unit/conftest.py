"""STREAMDB_TEST_STREAM_CACHE=<bytes> runs the unit tests with a bounded node cache
whose store makes every stream node durable as it is sealed: nodes go cold all the
time, so every engine and command path reads them back through the store."""

import os

import pytest

from streamdb.config import parse_memory
from streamdb.engine.nodecache import CACHE, MemoryStore

_SIZE = os.environ.get("STREAMDB_TEST_STREAM_CACHE")


@pytest.fixture(autouse=True)
def tiny_node_cache():
    if not _SIZE:
        yield
        return
    CACHE.reset()
    store = MemoryStore()
    CACHE.configure(store, parse_memory(_SIZE))
    CACHE.write_through = store
    yield
    CACHE.reset()
