"""Keyspace notifications side by side with a real redis-server 7.0: the same script of
every key and stream command StreamDB implements runs on both, and what a subscriber
to ``__key*@*__:*`` receives must be the same message for message (parsed into tagged
values, so a RESP3 push differs from an array), in RESP2 and RESP3, under
notify-keyspace-events set at run time with CONFIG SET.

Every id is given, so that both servers hold the same entries; replies are compared
too, except where they carry a time (idle times).
"""

from __future__ import annotations

import time

import pytest

from helpers import RedisProcess, ServerProcess, wait_until
from .resp import Err, RawClient, encode_command

pytestmark = pytest.mark.differential

_END = b"ksn:end"          # the channel that marks the end of a script's messages


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    if not RedisProcess.available():
        pytest.skip("redis-server is not installed (make test installs it)")
    with ServerProcess(tmp_path_factory.mktemp("sdb"), "--appendonly", "no", "--save", "") as ours, \
            RedisProcess(tmp_path_factory.mktemp("redis"), "--enable-debug-command", "yes") as theirs:
        yield ours.port, theirs.port


class Side:
    """One server's writer and subscriber."""

    def __init__(self, port: int, resp3: bool, events: str) -> None:
        self.writer = RawClient(port)
        self.writer.call("FLUSHALL")
        self.writer.call("DEBUG", "SET-ACTIVE-EXPIRE", "0")
        self.writer.call("CONFIG", "SET", "notify-keyspace-events", events)
        self.sub = RawClient(port)
        if resp3:
            self.sub.call("HELLO", "3")
        self.sub.call("PSUBSCRIBE", "__key*@*__:*")
        self.sub.call("SUBSCRIBE", _END)

    def messages(self) -> list:
        """What the subscriber got up to the end marker (published by ``end``)."""
        got = []
        while True:
            msg = self.sub.read_reply()
            body = msg[1] if msg[0] == "push" else msg       # (RESP3: a tagged push)
            if body[1] == _END:
                return got
            got.append(msg)

    def end(self) -> None:
        self.writer.call("PUBLISH", _END, "x")

    def close(self) -> None:
        self.writer.call("CONFIG", "SET", "notify-keyspace-events", "")
        self.writer.call("DEBUG", "SET-ACTIVE-EXPIRE", "1")
        self.writer.close()
        self.sub.close()


@pytest.fixture
def sides(pair):
    opened: list[Side] = []

    def make(resp3: bool, events: str) -> tuple[Side, Side]:
        made = tuple(Side(port, resp3, events) for port in pair)
        opened.extend(made)
        return made
    yield make
    for side in opened:
        side.close()


# Commands whose replies carry a time (idle, delivery time): run, not compared.
_TIMED = {"XPENDING", "XINFO"}

# Every key and stream command with a write (and a few reads, for key misses and lazy
# expiry), in an order that leaves each one something to do.  Ids are explicit.
SCRIPT = [
    # streams: creation, auto-trim, trims, deletes
    ("XADD", "s1", "1-1", "f", "v"),
    ("XADD", "s1", "1-2", "f", "v"),
    ("XADD", "s1", "MAXLEN", "=", "2", "1-3", "f", "v"),
    ("XADD", "s1", "MAXLEN", "=", "5", "1-4", "f", "v"),
    ("XADD", "s1", "NOMKSTREAM", "1-5", "f", "v"),
    ("XADD", "nostream", "NOMKSTREAM", "1-1", "f", "v"),
    ("XADD", "s1", "1-1", "f", "v"),                      # an error: no event
    ("XTRIM", "s1", "MAXLEN", "=", "2"),
    ("XTRIM", "s1", "MAXLEN", "=", "100"),                 # nothing trimmed: no event
    ("XDEL", "s1", "1-4"),
    ("XDEL", "s1", "9-9"),                                  # nothing deleted: no event
    ("XSETID", "s1", "5-0"),
    ("XLEN", "s1"), ("XRANGE", "s1", "-", "+"),
    # consumer groups
    ("XGROUP", "CREATE", "s1", "g1", "0"),
    ("XGROUP", "CREATE", "s1", "g1", "0"),                 # BUSYGROUP: no event
    ("XGROUP", "CREATE", "s2", "g1", "$", "MKSTREAM"),
    ("XGROUP", "CREATECONSUMER", "s1", "g1", "alice"),
    ("XGROUP", "CREATECONSUMER", "s1", "g1", "alice"),     # exists: no event
    ("XGROUP", "SETID", "s1", "g1", "0"),
    ("XADD", "s1", "6-1", "f", "v"),
    ("XREADGROUP", "GROUP", "g1", "bob", "COUNT", "1", "STREAMS", "s1", ">"),
    ("XREADGROUP", "GROUP", "g1", "bob", "STREAMS", "s1", ">"),
    ("XREADGROUP", "GROUP", "g1", "bob", "STREAMS", "s1", "0"),
    ("XPENDING", "s1", "g1", "-", "+", "10"),
    ("XCLAIM", "s1", "g1", "carol", "0", "1-5", "6-1"),
    ("XCLAIM", "s1", "g1", "dave", "0", "1-5", "JUSTID"),
    ("XAUTOCLAIM", "s1", "g1", "erin", "0", "0", "COUNT", "1"),
    ("XAUTOCLAIM", "s1", "g1", "erin", "0", "0", "COUNT", "1", "JUSTID"),
    ("XACK", "s1", "g1", "1-5"),
    ("XGROUP", "DELCONSUMER", "s1", "g1", "erin"),
    ("XGROUP", "DELCONSUMER", "s1", "g1", "nobody"),       # no such consumer: no event
    ("XGROUP", "DESTROY", "s1", "g1"),
    ("XGROUP", "DESTROY", "s1", "g1"),                     # gone: no event
    ("XINFO", "STREAM", "s1"),
    # generic key commands
    ("SET", "k1", "v"),
    ("SET", "k1", "w"),
    ("SET", "k1", "x", "NX"),                               # not set: no event
    ("SET", "k2", "v", "EX", "100"),
    ("SET", "k2", "v", "KEEPTTL"),
    ("SET", "k3", "v", "GET"),
    ("INCR", "n1"), ("INCRBY", "n1", "5"), ("DECR", "n1"), ("DECRBY", "n1", "2"),
    ("GET", "missing"), ("EXISTS", "missing"),
    ("EXPIRE", "k1", "100"),
    ("PEXPIRE", "k1", "200000"),
    ("EXPIREAT", "k1", "99999999999"),
    ("PEXPIREAT", "k1", "99999999999000"),
    ("EXPIRE", "k1", "100", "NX"),                          # has one: no event
    ("EXPIRE", "missing", "100"),
    ("PERSIST", "k1"),
    ("PERSIST", "k1"),                                      # none left: no event
    ("EXPIRE", "k3", "-1"),                                 # in the past: deleted, del
    ("RENAME", "k1", "k4"),
    ("RENAME", "k4", "k2"),                                 # over an existing key
    ("RENAMENX", "k2", "n1"),                               # exists: no event
    ("RENAMENX", "k2", "k5"),
    ("RENAME", "s2", "s3"),
    ("COPY", "s3", "s4"),
    ("COPY", "k5", "s4"),                                   # exists: no event
    ("COPY", "k5", "s4", "REPLACE"),
    ("COPY", "k5", "k5", "DB", "1"),
    ("DEL", "k5", "missing", "s4"),
    ("UNLINK", "s3", "n1"),
    ("SET", "dumped", "v"),
    ("TYPE", "s1"),
]


def _run(sides: tuple[Side, Side], script) -> None:
    for cmd in script:
        if cmd[0] == "RESTORE-DUMP":        # RESTORE of the other server's own DUMP
            replies = []
            for side in sides:
                payload = side.writer.call("DUMP", cmd[1])
                replies.append(side.writer.call("RESTORE", cmd[2], "0", payload, *cmd[3:]))
        else:
            replies = [side.writer.call(*cmd) for side in sides]
        ours, theirs = replies
        if cmd[0] in _TIMED:
            assert type(ours) is type(theirs), f"{cmd}: redis {theirs!r}, streamdb {ours!r}"
        else:
            assert ours == theirs, f"{cmd}: redis {theirs!r}, streamdb {ours!r}"


def _compare(sides: tuple[Side, Side]) -> list:
    for side in sides:
        side.end()
    ours, theirs = (side.messages() for side in sides)
    assert ours == theirs, _diff(ours, theirs)
    return ours


def _diff(ours: list, theirs: list) -> str:
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            return f"message {i}: redis {b!r}, streamdb {a!r}\nredis: {theirs[max(0, i - 3):i + 4]}"
    return f"redis sent {len(theirs)} messages, streamdb {len(ours)}: {theirs[len(ours):] or ours[len(theirs):]}"


RESTORES = [
    ("RESTORE-DUMP", "dumped", "restored"),
    ("RESTORE-DUMP", "dumped", "restored", "REPLACE"),
    ("RESTORE-DUMP", "dumped", "restored"),                  # BUSYKEY: no event
]


@pytest.mark.parametrize("resp3", [False, True])
@pytest.mark.parametrize("events", ["KEA", "KEAn", "Et", "Kx", "Eg$n"])
def test_every_command_publishes_as_redis(sides, resp3, events):
    both = sides(resp3, events)
    _run(both, SCRIPT + RESTORES)
    got = _compare(both)
    if events in ("KEA", "KEAn"):
        assert len(got) > 80            # (the script did publish: not two empty lists)


@pytest.mark.parametrize("resp3", [False, True])
def test_transaction_publishes_each_command_in_order(sides, resp3):
    both = sides(resp3, "KEA")
    _run(both, [("MULTI",), ("XADD", "t1", "1-1", "f", "v"), ("SET", "t2", "v"),
                ("XGROUP", "CREATE", "t1", "g", "0"), ("DEL", "t2"), ("EXEC",)])
    assert len(_compare(both)) == 8


def test_key_misses(sides):
    """m: a read of a key that is not there (Redis's lookupKeyRead), not a write's."""
    both = sides(False, "Km")
    _run(both, [("GET", "nope"), ("EXISTS", "nope", "nope2"), ("TYPE", "nope"),
                ("XRANGE", "nope", "-", "+"), ("XLEN", "nope"), ("SET", "nope", "v"),
                ("GET", "nope"), ("DEL", "nope"), ("SET", "other", "v", "GET"),
                ("XREAD", "STREAMS", "nope", "nope2", "0", "0"), ("XINFO", "STREAM", "nope"),
                ("XPENDING", "nope", "g"), ("COPY", "nope", "x"), ("TTL", "nope"),
                ("MGET", "nope", "other")])
    assert len(_compare(both)) >= 5


@pytest.mark.parametrize("resp3", [False, True])
def test_expired_on_lazy_and_active_expiry(sides, resp3):
    """x: the key a read finds past its time (lazy), and the one the cron removes
    (active); neither publishes a del."""
    both = sides(resp3, "KEA")
    # 20 ms, not 1: Redis 7.0 reads its clock twice in PEXPIRE, and on a busy machine a
    # millisecond between the two makes it delete the key at once (a del, not an expire).
    _run(both, [("SET", "lazy", "v", "PX", "20"), ("XADD", "lazys", "1-1", "f", "v"),
                ("PEXPIRE", "lazys", "20")])
    time.sleep(0.05)
    _run(both, [("GET", "lazy"), ("XLEN", "lazys")])
    _run(both, [("SET", "active", "v", "PX", "20"), ("DEBUG", "SET-ACTIVE-EXPIRE", "1")])
    for side in both:
        wait_until(lambda: side.writer.call("DBSIZE") == 0, what="active expiry")
    got = [msg[1] if msg[0] == "push" else msg for msg in _compare(both)]
    expired = [m[2] for m in got if m[-1] == b"expired"]
    assert expired == [b"__keyspace@0__:lazy", b"__keyspace@0__:lazys",
                       b"__keyspace@0__:active"], got


def test_config_get_shows_redis_spelling(pair):
    for port in pair:
        c = RawClient(port)
        try:
            for given, shown in (("KEAn", b"AKE"), ("Ag", b"A"), ("gxK", b"gxK"),
                                 ("tE$", b"$tE"), ("", b"")):
                assert c.call("CONFIG", "SET", "notify-keyspace-events", given) == "OK"
                assert c.call("CONFIG", "GET", "notify-keyspace-events")[1] == shown, given
            assert isinstance(c.call("CONFIG", "SET", "notify-keyspace-events", "Q"), Err)
        finally:
            c.call("CONFIG", "SET", "notify-keyspace-events", "")
            c.close()


def test_writes_over_expired_keys(sides):
    """A write that finds its key past its time: Redis expires it first (expired), then
    the write creates it again (new)."""
    both = sides(False, "KEAn")
    keys = ["e1", "e2", "e3", "e4", "e5", "e6", "e7"]
    _run(both, [("SET", k, "1", "PX", "20") for k in keys] + [("SET", "src", "v")])
    time.sleep(0.05)
    _run(both, [("SET", "e1", "v"), ("INCR", "e2"), ("XADD", "e3", "1-1", "f", "v"),
                ("EXPIRE", "e4", "100"), ("RENAME", "src", "e5"), ("COPY", "e5", "e6"),
                ("XGROUP", "CREATE", "e7", "g", "0", "MKSTREAM"), ("SET", "e1", "w")])
    _compare(both)
