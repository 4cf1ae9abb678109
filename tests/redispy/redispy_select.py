"""A pytest plugin loaded into redis-py's own test run (``-p redispy_select``).

It keeps only the stream tests (:func:`is_stream_test`) and writes every kept
test's outcome to the JSON file named by ``--redispy-report``, so the outer test
reads results rather than parsing pytest's terminal output.
"""

from __future__ import annotations

import json
import tracemalloc

import pytest


def is_stream_test(item: pytest.Item) -> bool:
    """``test_x*`` (every stream command: XADD ... XREADGROUP, XCFGSET) or a test
    whose function or class names streams (the XREAD/XREADGROUP metrics tests)."""
    name = getattr(item, "originalname", item.name)
    cls = item.cls.__name__ if getattr(item, "cls", None) else ""
    return name.startswith("test_x") or "stream" in name.lower() or "xread" in cls.lower()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--redispy-report", help="write each stream test's outcome here (JSON)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kept = [i for i in items if is_stream_test(i)]
    dropped = [i for i in items if not is_stream_test(i)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = kept


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    """Stop the tracemalloc that redis-py's session fixture starts: it only serves leak
    diagnostics, and it made the client side 2.5x slower (23 s of CPU against 9 s for
    the sync tests here), the bulk of this suite's time."""
    try:
        return (yield)
    finally:
        tracemalloc.stop()


class _Outcomes:
    """nodeid -> {"outcome": passed|failed|skipped, "detail": why}; the worst phase wins
    (a failing teardown after a passing call is a failure)."""

    def __init__(self) -> None:
        self.results: dict[str, dict[str, str]] = {}

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        entry = self.results.setdefault(report.nodeid, {"outcome": "passed", "detail": ""})
        if report.failed:
            entry["outcome"] = "failed"
            entry["detail"] = (f"{report.when}: " + _last_line(report.longreprtext))
        elif report.skipped and entry["outcome"] != "failed":
            entry["outcome"] = "skipped"
            # longrepr of a skip is (file, line, "Skipped: reason")
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            entry["detail"] = reason.removeprefix("Skipped: ")


def _last_line(text: str) -> str:
    """The line of a failure report that says what went wrong (pytest's ``E`` lines)."""
    errors = [ln[1:].strip() for ln in text.splitlines() if ln.startswith("E ")]
    return (errors[0] if errors else text.strip().splitlines()[-1] if text.strip() else "")[:300]


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--redispy-report"):
        config._redispy_outcomes = _Outcomes()
        config.pluginmanager.register(config._redispy_outcomes, "redispy_outcomes")


def pytest_unconfigure(config: pytest.Config) -> None:
    outcomes = getattr(config, "_redispy_outcomes", None)
    if outcomes is not None:
        with open(config.getoption("--redispy-report"), "w") as f:
            json.dump(outcomes.results, f, indent=1, sort_keys=True)
