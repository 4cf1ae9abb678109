"""Fetch, run and judge redis-py's own stream tests (see test_redispy_streams.py for why).

``python tests/redispy/redispy_suite.py URL [PROTOCOL ...]`` runs them against a server
already running and prints every failure and skip.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

REDISPY_VERSION = "8.1.0"
SDIST_SHA256 = "6e1a19beef9225c83efd689c7e6b7da2d5215b1f42cd13b7fc3714d0a09c7b25"
SDIST_DIR = ROOT / ".cache" / f"redis-py-{REDISPY_VERSION}"
TEST_FILES = ["tests/test_commands.py", "tests/test_asyncio/test_commands.py"]

# pip's own socket timeout and retries bound one slow request; the whole download
# (with the build backend pip fetches to read the sdist's metadata) is bounded too.
# Both stay under the outer test's 300 s (pytest-timeout), so this module's message,
# not a stack dump, says what was slow.
DOWNLOAD_TIMEOUT_S = 120
# One protocol's run takes ~20 s on an idle machine; this only stops a hang.
RUN_TIMEOUT_S = 150
# The skip reason of redis-py's skip_if_server_version_lt (tests/conftest.py).
TOO_OLD_SKIP = "Redis version required >="


class SuiteError(Exception):
    """The suite could not be fetched or run (as opposed to tests that failed)."""


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def fetch_sdist() -> Path:
    """The unpacked sdist, downloaded and checked the first time.

    The marker file is written last, so a download or unpack cut short is redone.
    """
    marker = SDIST_DIR / ".sdist-sha256"
    if marker.is_file() and marker.read_text().strip() == SDIST_SHA256:
        return SDIST_DIR
    SDIST_DIR.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=SDIST_DIR.parent, prefix="redis-py-fetch-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               "--timeout", "30", "--retries", "2", "--disable-pip-version-check",
               f"redis=={REDISPY_VERSION}", "-d", tmp]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise SuiteError(f"PyPI too slow: `pip download redis=={REDISPY_VERSION}` took over "
                             f"{DOWNLOAD_TIMEOUT_S} s (nothing is cached until it succeeds once; "
                             "run again when PyPI answers)") from None
        if proc.returncode != 0:
            raise SuiteError(f"`pip download redis=={REDISPY_VERSION}` failed (is PyPI "
                             f"reachable?):\n{_tail(proc.stdout + proc.stderr)}")
        sdist = Path(tmp) / f"redis-{REDISPY_VERSION}.tar.gz"
        if not sdist.is_file():
            raise SuiteError(f"pip left no {sdist.name} in {tmp}: {sorted(os.listdir(tmp))}")
        got = _sha256(sdist)
        if got != SDIST_SHA256:
            raise SuiteError(f"{sdist.name} has sha256 {got}, expected {SDIST_SHA256}: "
                             "not the release this suite pins; not running it")
        with tarfile.open(sdist) as tar:
            tar.extractall(tmp, filter="data")
        shutil.rmtree(SDIST_DIR, ignore_errors=True)
        os.replace(Path(tmp) / f"redis-{REDISPY_VERSION}", SDIST_DIR)
    marker.write_text(SDIST_SHA256 + "\n")
    return SDIST_DIR


@dataclass
class SuiteResult:
    """Outcomes of one run: nodeid -> (outcome, detail), and pytest's output."""

    outcomes: dict[str, dict[str, str]]
    output: str = ""
    counts: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        self.counts = {"selected": len(self.outcomes), "passed": 0, "failed": 0, "skipped": 0}
        for entry in self.outcomes.values():
            self.counts[entry["outcome"]] += 1

    def _with(self, outcome: str, too_old: bool | None = None) -> list[str]:
        return [f"{nodeid}: {e['detail']}" for nodeid, e in sorted(self.outcomes.items())
                if e["outcome"] == outcome
                and (too_old is None or e["detail"].startswith(TOO_OLD_SKIP) == too_old)]

    @property
    def failures(self) -> list[str]:
        return self._with("failed")

    @property
    def version_skips(self) -> list[str]:
        """Tests redis-py hid because it takes the server for an older Redis."""
        return self._with("skipped", too_old=True)

    @property
    def other_skips(self) -> list[str]:
        return self._with("skipped", too_old=False)

    def output_tail(self) -> str:
        return _tail(self.output)

    def summary(self) -> str:
        c = self.counts
        return (f"{c['selected']} selected, {c['passed']} passed, {c['failed']} failed, "
                f"{c['skipped']} skipped ({len(self.version_skips)} for the server version)")


def run_suite(redis_url: str, protocol: int) -> SuiteResult:
    """redis-py's stream tests against ``redis_url``, speaking RESP ``protocol``."""
    if importlib.util.find_spec("pytest_asyncio") is None:
        raise SuiteError("pytest-asyncio is missing (redis-py's async tests need it): "
                         "`make deps` installs the test extra")
    sdist = fetch_sdist()
    with tempfile.TemporaryDirectory(prefix="redispy-report-") as tmp:
        report = Path(tmp) / "outcomes.json"
        env = dict(os.environ)
        env.pop("PYTEST_ADDOPTS", None)     # options meant for our run, not redis-py's
        env["PYTHONPATH"] = os.pathsep.join(
            [str(sdist), str(HERE)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        cmd = [sys.executable, "-m", "pytest", *TEST_FILES,
               "-p", "redispy_select", "--redispy-report", str(report),
               "--redis-url", redis_url, "--protocol", str(protocol),
               "-q", "-p", "no:cacheprovider", "-p", "no:warnings"]
        try:
            proc = subprocess.run(cmd, cwd=sdist, env=env, capture_output=True, text=True,
                                  timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired as e:
            raise SuiteError(f"redis-py's tests still running after {RUN_TIMEOUT_S} s:\n"
                             f"{_tail(e.stdout or '')}") from None
        output = proc.stdout + proc.stderr
        # 0: all passed, 1: some failed; anything else (usage, internal error,
        # nothing collected) means the suite itself did not run.
        if proc.returncode not in (0, 1) or not report.is_file():
            raise SuiteError(f"redis-py's pytest exited with {proc.returncode}:\n{_tail(output)}")
        return SuiteResult(json.loads(report.read_text()), output)


def _tail(text: str | bytes, lines: int = 40) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return "\n".join(text.rstrip().splitlines()[-lines:])


def main(argv: list[str]) -> int:
    """``redispy_suite.py URL [PROTOCOL ...]``: both protocols unless named; exit 1 on a
    failure or a version skip."""
    if not argv:
        print(__doc__)
        return 2
    status = 0
    for protocol in [int(p) for p in argv[1:]] or [2, 3]:
        result = run_suite(argv[0], protocol)
        for line in result.failures:
            print(f"FAILED  {line}")
        for line in result.version_skips + result.other_skips:
            print(f"SKIPPED {line}")
        print(f"RESP{protocol}: {result.summary()}")
        status |= bool(result.failures or result.version_skips)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
