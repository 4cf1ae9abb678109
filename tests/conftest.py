import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from helpers import RedisProcess, ServerProcess  # noqa: E402


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """One StreamDB process for the session (tests use distinct keys or FLUSHALL)."""
    d = tmp_path_factory.mktemp("streamdb")
    with ServerProcess(d, "--appendonly", "no", "--save", "") as srv:
        yield srv


@pytest.fixture
def fresh_server(tmp_path):
    with ServerProcess(tmp_path / "sdb", "--appendonly", "no", "--save", "") as srv:
        yield srv


@pytest.fixture
def r(server):
    import redis
    client = redis.Redis(port=server.port, decode_responses=False)
    client.flushall()
    yield client
    client.close()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    if not RedisProcess.available():
        pytest.skip("redis-server is not installed (make test installs it)")
    with RedisProcess(tmp_path_factory.mktemp("redis")) as rs:
        yield rs
