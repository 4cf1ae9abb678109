"""The benchmark tools run end to end (tiny N) and --write replaces only their own section.

Timings are never asserted here: these only prove that the benchmarks still work, and that
the documents they write (a copy of docs/PERFORMANCE.md in a temporary directory) keep the
markers and everything outside the tool's section byte for byte, and README.md (copied too)
is never written: measurements live in docs/PERFORMANCE.md.
"""

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = {"PERFORMANCE": Path("docs") / "PERFORMANCE.md", "README": Path("README.md")}

needs_redis = pytest.mark.skipif(
    shutil.which("redis-benchmark") is None or shutil.which("redis-server") is None,
    reason="redis-benchmark / redis-server not installed")


def load_bench():
    spec = importlib.util.spec_from_file_location("bench", ROOT / "tools" / "bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = load_bench()


def run_tool(tool: str, *args: str, timeout: int = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "tools" / tool), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def copy_docs(root: Path) -> dict:
    """Copies of the project's documents under ``root``; returns their bytes as copied."""
    before = {}
    for name, rel in DOCS.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / rel, root / rel)
        before[name] = (root / rel).read_bytes()
    return before


def split_at(text: bytes, section: str) -> tuple[bytes, bytes, bytes]:
    """(up to and with the begin marker, the section, from the end marker on)."""
    begin, end = (m.encode() for m in bench.markers(section))
    head, rest = text.split(begin)
    inside, tail = rest.split(end)
    return head + begin, inside, end + tail


def assert_only_section_changed(before: bytes, after: bytes, section: str) -> bytes:
    """The markers and everything outside ``section`` byte-identical; returns the new section."""
    head0, inside0, tail0 = split_at(before, section)
    head1, inside1, tail1 = split_at(after, section)
    assert head1 == head0
    assert tail1 == tail0
    assert inside1 != inside0
    return inside1


# -- the writer, in-process -----------------------------------------------------------


def test_replace_section_keeps_markers_and_everything_around_them():
    text = "intro\r\n<!-- t:begin -->\nold\n<!-- t:end -->  after\n<!-- u:begin -->x<!-- u:end -->"
    out = bench.replace_section(text, "t", "\nnew table\n\n")
    assert out == "intro\r\n<!-- t:begin -->\nnew table\n<!-- t:end -->  after\n" \
                  "<!-- u:begin -->x<!-- u:end -->"


@pytest.mark.parametrize("text", [
    "no markers at all",
    "<!-- t:begin -->\nonly a begin\n",
    "<!-- t:end -->\n<!-- t:begin -->\n",                                 # the wrong way round
    "<!-- t:begin -->a<!-- t:end --><!-- t:begin -->b<!-- t:end -->",     # twice
])
def test_replace_section_refuses_a_document_without_one_marker_pair(text):
    with pytest.raises(ValueError, match="t:begin"):
        bench.replace_section(text, "t", "new")


def test_the_projects_documents_have_every_tools_markers():
    performance = (ROOT / DOCS["PERFORMANCE"]).read_text()
    for tool in ("bench.py", "bench_breakdown.py", "bench_cold.py", "bench_console.py",
                 "bench_fanout.py", "bench_group_reset.py", "bench_metrics.py",
                 "bench_persistence.py", "bench_replication.py", "bench_spark.py",
                 "bench_bigvalue.py"):
        bench.replace_section(performance, tool, "")


def test_write_into_a_document_without_markers_fails_before_any_server_starts(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / DOCS["PERFORMANCE"]).write_text("# no sections here\n")
    (tmp_path / DOCS["README"]).write_text("# nor here\n")
    out = run_tool("bench.py", "--only", "ping", "--write", "--docs-root", str(tmp_path),
                   timeout=30)
    assert out.returncode == 2
    assert "expected one <!-- bench.py:begin --> ... <!-- bench.py:end --> pair" in out.stderr
    assert (tmp_path / DOCS["PERFORMANCE"]).read_text() == "# no sections here\n"


# -- the tools, end to end ------------------------------------------------------------


@needs_redis
def test_bench_write_replaces_its_section_only(tmp_path):
    before = copy_docs(tmp_path)
    project_doc = (ROOT / DOCS["PERFORMANCE"]).read_bytes()
    args = ["--quick", "--only", "xadd", "--rounds", "1", "--n", "2000", "--write",
            "--docs-root", str(tmp_path)]
    out = run_tool("bench.py", *args)
    assert out.returncode == 0, out.stderr[-2000:]

    section = assert_only_section_changed(
        before["PERFORMANCE"], (tmp_path / DOCS["PERFORMANCE"]).read_bytes(), "bench.py").decode()
    assert f"by `python tools/bench.py {' '.join(args)}`" in section
    assert "Machine: " in section and "redis-server 7." in section and "hiredis " in section
    assert "| workload" in section and "| StreamDB (Python path) |" in section
    assert "| XADD, 50 clients, -P 1 " in section and "| >= 1x " in section
    assert section.strip() in out.stdout          # what it wrote is what it printed

    assert (tmp_path / DOCS["README"]).read_bytes() == before["README"]   # measurements live in PERFORMANCE.md
    assert (ROOT / DOCS["PERFORMANCE"]).read_bytes() == project_doc   # the copy, not the project


@needs_redis
def test_bench_without_the_python_path_runs_two_servers_and_prints_without_writing(tmp_path):
    before = copy_docs(tmp_path)
    out = run_tool("bench.py", "--quick", "--only", "ping,xlen", "--rounds", "1", "--n", "2000",
                   "--no-python-path", "--docs-root", str(tmp_path))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "| PING, 50 clients " in out.stdout and "| XLEN, 50 clients " in out.stdout
    assert "| >= 1x " in out.stdout
    assert "Python path" not in out.stdout
    assert "round 1/1 on streamdb-py" not in out.stderr and "round 1/1 on streamdb" in out.stderr
    assert {name: (tmp_path / rel).read_bytes() for name, rel in DOCS.items()} == before


@needs_redis
def test_bench_dead_letter_row_compares_streamdb_with_and_without_a_policy(tmp_path):
    out = run_tool("bench.py", "--quick", "--only", "xgroupdlq", "--rounds", "1", "--n", "2000",
                   "--no-python-path")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "| XREADGROUP + XACK with a dead-letter policy (StreamDB both) " in out.stdout
    assert "| >= 0.97x " in out.stdout and "column = StreamDB without a policy" in out.stdout
    assert "round 1/1 on with a policy" in out.stderr and "on redis" not in out.stderr


def test_bench_publish_rows_run_with_and_without_subscribers():
    out = run_tool("bench.py", "--only", "publish,publishp16", "--rounds", "1", "--n", "2000",
                   "--no-python-path")
    assert out.returncode == 0, out.stderr[-2000:]
    for subscribers in (0, 10):
        for pipeline in (1, 16):
            assert f"| PUBLISH, {subscribers} subscribers, 50 clients, -P {pipeline} " in out.stdout
    assert "| >= 0.9x " in out.stdout


@needs_redis
def test_fanout_writes_its_section_only_with_both_kinds_of_subscriber(tmp_path):
    before = copy_docs(tmp_path)
    args = ["--subscribers", "1,3", "--publishers", "5", "--deliveries", "3000", "--rounds", "1"]
    out = run_tool("bench_fanout.py", *args, "--write", "--docs-root", str(tmp_path))
    assert out.returncode == 0, out.stderr[-2000:]
    section = assert_only_section_changed(
        before["PERFORMANCE"], (tmp_path / DOCS["PERFORMANCE"]).read_bytes(),
        "bench_fanout.py").decode()
    assert "by `python tools/bench_fanout.py " in section and "Machine: " in section
    for what in ("1 plain subscriber,", "1 pattern subscriber,", "3 plain subscribers,",
                 "3 pattern subscribers,"):
        assert f"| delivered, {what} 5 publishers, -P 1, 32-byte messages " in section
    assert "| msg/s " in section and "| >= 0.9x " in section
    assert "the subscribers' reader used at most" in out.stderr
    assert (tmp_path / DOCS["README"]).read_bytes() == before["README"]


@needs_redis
def test_the_subscribers_reader_reports_messages_that_did_not_arrive(tmp_path):
    srv = bench.Server("redis", tmp_path).start()
    try:
        with bench.Subscribers(srv.port, 2, b"ch", b"hello") as subs:
            assert srv.call(b"PUBLISH", b"ch", b"hello") == 2
            # (the wait ends at its timeout: long enough that the one message has
            # arrived on a loaded machine; at 0.5 s a run saw "0 of 2")
            with pytest.raises(RuntimeError, match="a subscriber got 1 of 2 messages"):
                subs.wait(2, timeout=3)
        with bench.Subscribers(srv.port, 1, b"ch", b"hello") as subs:
            srv.call(b"PUBLISH", b"ch", b"other")
            with pytest.raises(RuntimeError, match="unexpected bytes"):
                subs.wait(1, timeout=5)
    finally:
        srv.stop()


@needs_redis
@pytest.mark.parametrize("tool, args", [
    ("bench_persistence.py", ["--quick", "--only", "everysec", "--rounds", "1"]),
    ("bench_replication.py", ["--only", "fullsync", "--entries", "2000", "--rounds", "1"]),
    ("bench_metrics.py", ["--streams", "20", "--scrapes", "2"]),
    ("bench_bigvalue.py", ["--rounds", "1", "--big-mb", "1", "--value-kb", "16",
                           "--requests", "20", "--clients", "2"]),
])
def test_the_other_tools_write_their_own_section_only(tmp_path, tool, args):
    before = copy_docs(tmp_path)
    out = run_tool(tool, *args, "--write", "--docs-root", str(tmp_path))
    assert out.returncode == 0, out.stderr[-2000:]
    section = assert_only_section_changed(
        before["PERFORMANCE"], (tmp_path / DOCS["PERFORMANCE"]).read_bytes(), tool).decode()
    assert f"by `python tools/{tool} " in section and "Machine: " in section
    assert "| target " in section and ("PASS" in section or "FAIL" in section)
    assert (tmp_path / DOCS["README"]).read_bytes() == before["README"]


@pytest.mark.soak
def test_bench_spark_writes_its_section_with_the_sink_target(tmp_path):
    pytest.importorskip("pyspark")
    before = copy_docs(tmp_path)
    out = run_tool("bench_spark.py", "--quick", "--entries", "3000", "--no-streaming",
                   "--write", "--docs-root", str(tmp_path), timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    section = assert_only_section_changed(
        before["PERFORMANCE"], (tmp_path / DOCS["PERFORMANCE"]).read_bytes(),
        "bench_spark.py").decode()
    assert "| sink, XADD IDMP (exactly once) " in section and ">= 100,000 entries/s" in section


@needs_redis
def test_breakdown_writes_cpu_per_request_for_both_servers(tmp_path):
    before = copy_docs(tmp_path)
    out = run_tool("bench_breakdown.py", "--workload", "ping-p1", "--requests", "10000",
                   "--no-python-path", "--write", "--docs-root", str(tmp_path))
    assert out.returncode == 0, out.stderr[-2000:]
    section = assert_only_section_changed(
        before["PERFORMANCE"], (tmp_path / DOCS["PERFORMANCE"]).read_bytes(),
        "bench_breakdown.py").decode()
    assert "| CPU us per request" in section and "| Redis 7.0" in section
    assert "| StreamDB " in section and "Python path" not in section
    total = next(line for line in section.splitlines() if "total (user + system)" in line)
    assert all(float(cell) > 0 for cell in total.strip("| \n").split("|")[1:])
    assert (tmp_path / DOCS["README"]).read_bytes() == before["README"]
