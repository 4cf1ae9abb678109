"""tools/bench.py runs end to end (tiny N) and prints its table.

Timings are never asserted here: this only proves the benchmark still works.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("redis-benchmark") is None or shutil.which("redis-server") is None,
                    reason="redis-benchmark / redis-server not installed")
def test_bench_quick_xadd_completes():
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "bench.py"), "--quick", "--only", "xadd",
         "--rounds", "1", "--n", "2000"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "| workload" in out.stdout
    assert "XADD, 50 clients, -P 1" in out.stdout
