"""Random command sequences, the same on StreamDB and on redis-server 7.0, must get the same replies.

The run is bounded so that the whole differential suite takes well under two
minutes; ``STREAMDB_DIFF_EXAMPLES=<n>`` runs n examples per protocol instead
(``STREAMDB_DIFF_STEPS`` sets the steps per example).

Both servers get ``stream-node-max-entries 5`` first, so that node
boundaries, ``~`` trimming and LIMIT are exercised by streams of a few
entries (field values stay tiny, so the byte limit of a node never matters).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from .machine import ENABLED_GROUP_COMMANDS, KNOWN_MISMATCHES, StreamMachine
from .resp import RawClient

pytestmark = pytest.mark.differential

EXAMPLES = int(os.environ.get("STREAMDB_DIFF_EXAMPLES", "100"))
STEPS = int(os.environ.get("STREAMDB_DIFF_STEPS", "50"))
NODE_MAX_ENTRIES = b"5"
NO_SHRINK = [Phase.explicit, Phase.reuse, Phase.generate]


@pytest.fixture(scope="module")
def small_nodes(server, redis_server):
    """Small stream nodes on both servers for this module; the defaults come back after."""
    saved = []
    for port in (server.port, redis_server.port):
        c = RawClient(port)
        old = c.call("CONFIG", "GET", "stream-node-max-entries")
        old = dict(zip(old[0::2], old[1::2])) if isinstance(old, list) else dict(old)
        saved.append((port, old[b"stream-node-max-entries"]))
        assert c.call("CONFIG", "SET", "stream-node-max-entries", NODE_MAX_ENTRIES) == "OK"
        c.close()
    yield server.port, redis_server.port
    for port, value in saved:
        c = RawClient(port)
        c.call("CONFIG", "SET", "stream-node-max-entries", value)
        c.call("FLUSHALL")
        c.close()


@pytest.mark.parametrize("resp", [2, 3])
def test_random_command_sequences_match_redis(small_nodes, resp):
    sdb_port, redis_port = small_nodes

    class Machine(StreamMachine):
        pass

    Machine.streamdb_port = sdb_port
    Machine.redis_port = redis_port
    Machine.resp = resp
    run_state_machine_as_test(Machine, settings=settings(
        max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None,
        suppress_health_check=list(HealthCheck), print_blob=True,
        # STREAMDB_DIFF_NOSHRINK=1 reports the first failure as found (fast, long)
        **({"phases": NO_SHRINK} if os.environ.get("STREAMDB_DIFF_NOSHRINK") else {})))


def test_group_commands_switch_follows_the_command_table():
    from streamdb.commands import COMMANDS
    for name in ENABLED_GROUP_COMMANDS:
        parent, _, sub = name.partition("|")
        assert parent in COMMANDS and (not sub or sub in COMMANDS[parent].subcommands)
    assert not ENABLED_GROUP_COMMANDS & set(KNOWN_MISMATCHES)
