import os
import subprocess
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


@pytest.fixture
def tmpfs(tmp_path):
    """``tmpfs(dir, size)``: a tmpfs of ``size`` mounted at ``dir`` (created), a real file system
    to fill up; unmounted at teardown.  Root only: the test is skipped elsewhere, or when the
    mount is refused."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted: list[Path] = []

    def mount(where: Path, size: str) -> Path:
        where.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                              capture_output=True, text=True)
        if done.returncode:
            pytest.skip(f"cannot mount a tmpfs at {where}: {done.stderr.strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in reversed(mounted):
        subprocess.run(["umount", "-l", str(where)], capture_output=True)
