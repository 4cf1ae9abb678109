"""redis-py's own stream tests, run against a real StreamDB process.

Why: a client's own test suite is how a new user meets StreamDB.  redis-py's CI runs
these tests against current Redis, so they hold every stream command and reply shape
the client relies on (RESP2 and RESP3), including the version gates with which it
hides newer features from older servers.

What: the tests whose function is ``test_x*`` or names a stream
(``redispy_select.is_stream_test``) in ``tests/test_commands.py`` and
``tests/test_asyncio/test_commands.py`` of redis-py 8.1.0, the newest release on
PyPI (its source distribution ships ``tests/``), once per protocol (RESP2, RESP3).

How: the sdist is fetched once with ``pip download`` (PyPI only, whatever index pip is
configured with), its sha256 checked against ``SDIST_SHA256``, and unpacked into
``.cache/redis-py-8.1.0/``.  The tests run in a subprocess with the sdist's own
conftest and pytest settings (``--redis-url`` points at our server) and the sdist
first on ``sys.path``, so ``import redis`` is that release's client code, matching
its tests whatever redis-py the venv holds.  They need ``pytest-asyncio`` and
``packaging`` (the ``test`` extra).  The plugin ``redispy_select`` selects the tests
and writes each one's outcome as JSON; this module turns that into one verdict: it
fails when a selected test fails, or is skipped because redis-py thinks the server
too old ("Redis version required >= x").  Skips for the opposite reason ("< x":
tests of behaviour Redis has since changed, whose current form is a test of its own)
and for other setups (cluster-only, RESP-specific) are counted, not failed.

Run it alone::

    PYTHONPATH=$PWD .venv/bin/python -m pytest -q -s tests/redispy

or against a server already running (prints every failure and skip)::

    PYTHONPATH=$PWD .venv/bin/python tests/redispy/redispy_suite.py redis://127.0.0.1:6379 [2|3]
"""

from __future__ import annotations

import pytest

from helpers import ServerProcess
from redispy_suite import REDISPY_VERSION, SuiteError, run_suite


@pytest.fixture(scope="module")
def streamdb_url(tmp_path_factory):
    """A StreamDB process of our own: redis-py's fixtures FLUSHDB between tests."""
    with ServerProcess(tmp_path_factory.mktemp("redispy"), "--appendonly", "no", "--save", "") as srv:
        yield f"redis://127.0.0.1:{srv.port}"


@pytest.mark.parametrize("protocol", [2, 3], ids=["resp2", "resp3"])
def test_redispy_stream_tests_pass(streamdb_url, protocol):
    try:
        result = run_suite(streamdb_url, protocol)
    except SuiteError as e:
        pytest.fail(str(e), pytrace=False)
    print(f"\nredis-py {REDISPY_VERSION} stream tests, RESP{protocol}: {result.summary()}")
    assert result.counts["selected"] > 0, result.output_tail()
    problems = result.failures + [f"skipped: {s}" for s in result.version_skips]
    assert not problems, f"RESP{protocol}: {result.summary()}\n" + "\n".join(problems)
