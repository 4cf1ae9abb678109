"""Every shell block of README.md and docs/*.md is run by a test or says why it is not.

A test module claims the blocks it runs with a module-level ``DOC_BLOCKS = {doc: {names}}``
(read here from its source, without importing it: tests/spark needs pyspark to import)."""

from __future__ import annotations

import ast
import re
from collections import Counter

from docblocks import documents, shell_blocks
from helpers import ROOT

BENCHMARKS = {"bench.py", "bench_bigvalue.py", "bench_breakdown.py", "bench_cold.py", "bench_console.py", "bench_fanout.py",
              "bench_group_reset.py", "bench_metrics.py", "bench_persistence.py", "bench_replication.py",
              "bench_spark.py"}


def _claims() -> list[tuple[str, str, str]]:
    """(doc, name, test module) for every block a test module claims."""
    claims = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "DOC_BLOCKS" for t in node.targets):
                for doc, names in ast.literal_eval(node.value).items():
                    claims += [(doc, name, str(path.relative_to(ROOT))) for name in names]
    return claims


def test_every_shell_block_is_marked():
    unmarked = [f"{b.doc}:{b.line}" for b in shell_blocks() if b.mark is None]
    assert not unmarked, ("shell blocks without <!-- guide-test: NAME --> or "
                          f"<!-- not-tested: REASON --> on the line before: {unmarked}")


def test_a_block_left_untested_says_why():
    assert all(b.label for b in shell_blocks() if b.mark == "not-tested")


def test_every_marked_block_is_run_by_exactly_one_test_module():
    marked = Counter((b.doc, b.label) for b in shell_blocks() if b.mark == "guide-test")
    assert [k for k, n in marked.items() if n > 1] == [], "a name marks two blocks of one document"
    claimed = Counter((doc, name) for doc, name, _module in _claims())
    assert [k for k, n in claimed.items() if n > 1] == [], "two test modules claim one block"
    assert set(claimed) == set(marked), (
        f"marked but run by no test: {sorted(set(marked) - set(claimed))}; "
        f"claimed but not in the documents: {sorted(set(claimed) - set(marked))}")


def test_the_documents_call_no_operator_tool_through_python():
    # The console scripts are the way in (streamdb-...); tools/ holds only the benchmarks.
    called = {m for path in documents()
              for m in re.findall(r"python3?\s+(?:\S*/)?tools/(\w+\.py)", path.read_text())}
    assert called <= BENCHMARKS


def test_every_variable_a_block_uses_is_set_earlier_in_its_document():
    """Read in order, a document sets each variable before a block uses it (its variables
    block or an earlier line): a reader who copies the blocks one after another under
    `set -u` never meets an unset one.  (test_operations_walkthrough.py runs the guide so.)"""
    assign = re.compile(r"^\s*(?:export\s+)?([A-Za-z_]\w*)=", re.M)
    use = re.compile(r"\$\{?([A-Za-z_]\w*)")
    unset = []
    for path in documents():
        doc = str(path.relative_to(ROOT))
        known: set[str] = set()
        for b in shell_blocks():
            if b.doc != doc:
                continue
            for line in b.text.splitlines():
                code = line.split(" #", 1)[0]
                unset += [f"{doc}:{b.line} ${name}" for name in use.findall(code)
                          if name not in known and not assign.match(code)]
                known.update(assign.findall(code))
    assert unset == []
