"""README.md's Spark block, run as written (tests/docblocks.py) against a real server:
the pipelines as console scripts, with Spark kept on loopback."""

from __future__ import annotations

import redis

from docblocks import run_block
from helpers import ServerProcess

DOC_BLOCKS = {"README.md": {"spark"}}


def test_the_spark_pipelines_as_the_readme_runs_them(spark, tmp_path):
    # (The spark fixture is asked for its skips: no Java, no Spark test.)
    with ServerProcess(tmp_path / "data", "--save", "") as srv:
        r = redis.Redis(port=srv.port)
        for i in range(20):
            r.xadd("orders:eu", {"item": "book", "qty": str(i)})
        r.xgroup_create("orders:eu", "billing", id="0")
        r.xreadgroup("billing", "w1", {"orders:eu": ">"}, count=5)
        out = run_block("README.md", "spark", cwd=tmp_path, ports={6379: srv.port}, timeout=280)
        assert "billing" in out and "orders:eu" in out
        assert list((tmp_path / "archive").rglob("*.parquet"))
        assert r.xlen("orders:eu") == 20        # --no-trim
