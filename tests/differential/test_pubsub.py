"""Pub/Sub side by side with a real redis-server 7.0: every reply compared after parsing
into tagged values (resp.py), so a push differs from an array, a nil from an empty
bulk.  A fresh pair of servers for the module: PUBSUB's counts see every client.

Where Redis's order is its hash table's (UNSUBSCRIBE of all, PUBSUB CHANNELS) the
replies are compared as sets; everything else must be identical.  Where 7.2
renamed a text 7.0 still has (NOPERM, DRYRUN), StreamDB answers the newer form
and the test maps 7.0's to it.
"""

from __future__ import annotations

import random

import pytest

from helpers import RedisProcess, ServerProcess, wait_until
from .resp import Err, RawClient

pytestmark = pytest.mark.differential


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    if not RedisProcess.available():
        pytest.skip("redis-server is not installed (make test installs it)")
    with ServerProcess(tmp_path_factory.mktemp("sdb"), "--appendonly", "no", "--save", "") as ours, \
            RedisProcess(tmp_path_factory.mktemp("redis")) as theirs:
        yield ours.port, theirs.port


class Both:
    """The same client on both servers: ``both.call(...)`` asserts equal replies."""

    def __init__(self, pair, resp3: bool = False) -> None:
        self.clients = [RawClient(port) for port in pair]
        if resp3:
            for c in self.clients:
                c.call("HELLO", "3")        # (its map names the server: not compared)

    def call(self, *args, replies: int = 1):
        for c in self.clients:
            c.sock.sendall(_encode(args))
        return self.read(replies, what=args)

    def read(self, replies: int = 1, what=()):
        ours, theirs = ([c.read_reply() for _ in range(replies)] for c in self.clients)
        assert ours == theirs, f"{what}: redis {theirs!r}, streamdb {ours!r}"
        return ours[0] if replies == 1 else ours

    def both(self, *args) -> tuple:
        """Each server's reply, not compared."""
        return tuple(c.call(*args) for c in self.clients)

    def close(self) -> None:
        for c in self.clients:
            c.close()


def _encode(args) -> bytes:
    from .resp import encode_command
    return encode_command(*args)


@pytest.fixture
def connect(pair):
    opened = []

    def make(resp3: bool = False) -> Both:
        b = Both(pair, resp3)
        opened.append(b)
        return b
    yield make
    for b in opened:
        b.close()


@pytest.mark.parametrize("resp3", [False, True])
def test_subscribe_and_unsubscribe_sequences(connect, resp3):
    c = connect(resp3)
    c.call("SUBSCRIBE", "seq:a")
    c.call("SUBSCRIBE", "seq:a", "seq:b", "seq:c", replies=3)
    c.call("PSUBSCRIBE", "seq:*", "seq:?", replies=2)
    c.call("SSUBSCRIBE", "seq:s", "seq:s", replies=2)
    c.call("UNSUBSCRIBE", "seq:a", "seq:nope", replies=2)
    c.call("SUNSUBSCRIBE", "seq:nope")
    c.call("PUNSUBSCRIBE", "seq:?")
    c.call("PUNSUBSCRIBE")
    c.call("SUNSUBSCRIBE")
    c.call("SUNSUBSCRIBE")
    c.call("UNSUBSCRIBE", "seq:b")
    c.call("UNSUBSCRIBE")
    c.call("UNSUBSCRIBE")
    c.call("PUNSUBSCRIBE")
    c.call("PING")


@pytest.mark.parametrize("resp3", [False, True])
def test_unsubscribe_all_names_every_channel_once(connect, resp3):
    c = connect(resp3)
    c.call("SUBSCRIBE", "all:1", "all:2", "all:3", replies=3)
    for cl in c.clients:
        cl.sock.sendall(_encode(("UNSUBSCRIBE",)))
    replies = [[cl.read_reply() for _ in range(3)] for cl in c.clients]
    # (Redis walks its hash table: the names in any order, the counts going down.)
    for got in replies:
        body = [r[1] if resp3 else r for r in got]
        assert sorted(r[1] for r in body) == [b"all:1", b"all:2", b"all:3"]
        assert [r[2] for r in body] == [2, 1, 0]
    assert type(replies[0][0]) is type(replies[1][0])


@pytest.mark.parametrize("resp3", [False, True])
def test_messages_and_publish_counts(connect, resp3):
    sub, psub, ssub, pub = connect(resp3), connect(resp3), connect(resp3), connect()
    sub.call("SUBSCRIBE", "msg:x", "msg:y", replies=2)
    psub.call("PSUBSCRIBE", "msg:[xz]")
    ssub.call("SSUBSCRIBE", "msg:x")
    pub.call("PUBLISH", "msg:x", "one")
    sub.read()
    psub.read()
    pub.call("PUBLISH", "msg:y", "")
    sub.read()
    pub.call("PUBLISH", "msg:z", "three")
    psub.read()
    pub.call("SPUBLISH", "msg:x", "shard")
    ssub.read()
    pub.call("PUBLISH", "msg:none", "x")
    pub.call("SPUBLISH", "msg:y", "x")
    # A client subscribed both ways gets the message once per way.
    sub.call("PSUBSCRIBE", "msg:*")
    pub.call("PUBLISH", "msg:x", "twice")
    sub.read(2)
    psub.read()


@pytest.mark.parametrize("resp3", [False, True])
def test_commands_while_subscribed(connect, resp3):
    c = connect(resp3)
    c.call("SUBSCRIBE", "mode:a")
    for cmd in (("GET", "mode:k"), ("CLIENT", "ID"), ("PING",), ("PING", "x"),
                ("GET",), ("NOSUCH", "x"), ("ECHO", "e"), ("SUBSCRIBE",), ("PUBSUB", "NUMPAT"),
                ("PUBLISH", "mode:a", "self"), ("MULTI",)):
        # (CLIENT ID's reply differs: both run it or both refuse it)
        if cmd == ("CLIENT", "ID"):
            ours, theirs = c.both(*cmd)
            assert type(ours) is type(theirs), (ours, theirs)
            continue
        c.call(*cmd)
        if cmd[0] == "PUBLISH" and resp3:
            c.read()            # then the message itself
    c.call("RESET")
    c.call("GET", "mode:k")


@pytest.mark.parametrize("resp3", [False, True])
def test_pubsub_introspection(connect, resp3):
    c = connect(resp3)
    # The other tests' clients are closed, but a server drops their subscriptions as it
    # reads the close: wait for both to have.
    wait_until(lambda: c.both("PUBSUB", "NUMPAT") == (0, 0) and
               c.both("PUBSUB", "NUMSUB", "intro:a") == ([b"intro:a", 0],) * 2,
               what="earlier subscribers gone")
    subs = [connect() for _ in range(2)]
    subs[0].call("SUBSCRIBE", "intro:a", "intro:b", replies=2)
    subs[1].call("SUBSCRIBE", "intro:a")
    subs[1].call("PSUBSCRIBE", "intro:*", "x*", replies=2)
    subs[0].call("PSUBSCRIBE", "x*")
    subs[1].call("SSUBSCRIBE", "intro:s")
    c.call("PUBSUB", "NUMSUB", "intro:a", "intro:b", "intro:c")
    c.call("PUBSUB", "NUMSUB")
    c.call("PUBSUB", "NUMPAT")
    c.call("PUBSUB", "SHARDNUMSUB", "intro:s", "intro:a")
    c.call("PUBSUB", "SHARDCHANNELS")
    c.call("PUBSUB", "SHARDCHANNELS", "intro:?")
    c.call("PUBSUB", "CHANNELS", "intro:b")
    ours, theirs = c.both("PUBSUB", "CHANNELS")
    assert sorted(ours) == sorted(theirs) == [b"intro:a", b"intro:b"]
    c.call("PUBSUB", "HELP")
    for bad in (("PUBSUB",), ("PUBSUB", "nope"), ("PUBSUB", "channels", "a", "b"),
                ("PUBSUB", "SHARDCHANNELS", "a", "b"), ("PUBSUB", "NUMPAT", "x"),
                ("PUBLISH", "a"), ("SPUBLISH", "a", "b", "c"), ("SSUBSCRIBE",)):
        assert isinstance(c.call(*bad), Err)
    texts = [r[1][4:] if isinstance(r, tuple) else r for r in c.both("INFO", "stats")]  # (RESP3: txt:)
    info = [dict(line.split(":", 1) for line in text.decode().splitlines()
                 if line.startswith("pubsub")) for text in texts]
    assert info[0] == info[1] == {"pubsub_channels": "2", "pubsub_patterns": "2",
                                  "pubsubshard_channels": "1"}


def test_glob_patterns_match_as_redis(connect):
    """PUBSUB CHANNELS <pattern> runs Redis's stringmatchlen over the live channels:
    random patterns from glob's special bytes, on channels made of the same."""
    rnd = random.Random(29)
    subject_bytes = b"ab-]^\\*?[\xff\x80\x00"
    pattern_bytes = b"ab*?[]^\\-\xff\x80"
    channels = sorted({bytes(rnd.choice(subject_bytes) for _ in range(rnd.randint(0, 6)))
                       for _ in range(150)})
    holder, c = connect(), connect()
    holder.call("SUBSCRIBE", *channels, replies=len(channels))
    patterns = {bytes(rnd.choice(pattern_bytes) for _ in range(rnd.randint(0, 8)))
                for _ in range(800)} | {b"*", b"", b"[", b"\\", b"[^]", b"[a-]", b"[z-a]*"}
    for pattern in sorted(patterns):
        ours, theirs = c.both("PUBSUB", "CHANNELS", pattern)
        assert sorted(ours) == sorted(theirs), pattern
    # And PSUBSCRIBE's delivery, which counts the patterns that match.
    listener = connect()
    chosen = sorted(patterns)[::40]
    listener.call("PSUBSCRIBE", *chosen, replies=len(chosen))
    for channel in channels[::5]:
        ours, theirs = c.both("PUBLISH", channel, "m")
        assert ours == theirs, channel
        for cl in listener.clients:            # (drain: the order is Redis's hash order)
            for _ in range(ours - 1):     # (holder's own message is not read)
                cl.read_reply()


# Redis 7.0's texts for what 7.2 renamed (StreamDB answers the 7.2+ forms).
REDIS70_NOPERM_CHANNEL = "NOPERM this user has no permissions to access one of the channels used as arguments"
NOPERM_CHANNEL = "NOPERM No permissions to access a channel"


def run_as(connect, user: str, script: list[tuple]) -> None:
    """Each command of ``script`` as ``user`` (password pw) on both servers: the same
    replies, but for the channel denial 7.2 renamed."""
    c = connect()
    c.call("AUTH", user, "pw")
    for cmd in script:
        ours, theirs = c.both(*cmd)
        if theirs == Err(REDIS70_NOPERM_CHANNEL):
            assert ours == Err(NOPERM_CHANNEL), cmd
        else:
            assert ours == theirs, cmd
    c.close()


def test_acl_channel_denials(connect, pair):
    admin = connect()
    admin.call("ACL", "SETUSER", "chan", "on", ">pw", "~*", "+@all", "&n.*")
    admin.call("ACL", "SETUSER", "none", "on", ">pw", "~*", "+@all")
    admin.call("ACL", "GETUSER", "chan")
    ours, theirs = admin.both("ACL", "LIST")
    assert ours[1:] == theirs[1:]        # (the default user's line: 7.0 has no sanitize flag)
    for user, script in (("chan", [("SUBSCRIBE", "n.1"), ("SUBSCRIBE", "n.2", "x"),
                                   ("PSUBSCRIBE", "n.*"), ("PSUBSCRIBE", "n.x*"),
                                   ("PUBLISH", "n.1", "m"), ("SPUBLISH", "x", "m"),
                                   ("UNSUBSCRIBE", "x")]),
                         ("none", [("PUBLISH", "a", "m"), ("SSUBSCRIBE", "a")])):
        run_as(connect, user, script)
    ours, theirs = admin.both("ACL", "LOG")
    fields = [[dict(zip(e[::2], e[1::2])) for e in log] for log in (ours, theirs)]
    keep = (b"count", b"reason", b"context", b"object", b"username")
    assert [{k: e[k] for k in keep} for e in fields[0]] == \
        [{k: e[k] for k in keep} for e in fields[1]]
    for args in (("PUBLISH", "n.1", "m"), ("PSUBSCRIBE", "n.*")):
        admin.call("ACL", "DRYRUN", "chan", *args)
    ours, theirs = admin.both("ACL", "DRYRUN", "chan", "PUBLISH", "x", "m")
    assert theirs == b"This user has no permissions to access the 'x' channel"
    assert ours == b"User chan has no permissions to access the 'x' channel"


def test_a_shard_channel_is_no_key(connect, pair):
    """COMMAND INFO describes a shard channel with a key spec (not_key), yet it is no key:
    a user without key patterns may SPUBLISH/SSUBSCRIBE/SUNSUBSCRIBE it, one without
    channel rules may not; a WATCH of a key of the same name stays clean; it never
    appears in the keyspace."""
    admin = connect()
    admin.call("ACL", "SETUSER", "keyless", "on", ">pw", "resetkeys", "&*", "+@all")
    admin.call("ACL", "SETUSER", "channelless", "on", ">pw", "~*", "resetchannels", "+@all")
    for user, script in (("keyless", [("SPUBLISH", "shard:k", "m"), ("SSUBSCRIBE", "shard:k"),
                                      ("SUNSUBSCRIBE", "shard:k"), ("SUNSUBSCRIBE",)]),
                         ("channelless", [("SPUBLISH", "shard:k", "m"), ("SSUBSCRIBE", "shard:k")])):
        run_as(connect, user, script)
    admin.call("ACL", "DRYRUN", "keyless", "SPUBLISH", "shard:k", "m")
    watcher = connect()
    watcher.call("WATCH", "shard:k")
    admin.call("SPUBLISH", "shard:k", "m")
    admin.call("SSUBSCRIBE", "shard:k")
    watcher.call("MULTI")
    watcher.call("EXISTS", "shard:k")
    assert watcher.call("EXEC") == [0]          # not nil: no key of that name changed


def test_subscribe_queued_in_multi(connect):
    c = connect()
    c.call("MULTI")
    c.call("SUBSCRIBE", "tx:a")
    c.call("EXEC")
    c.call("PING")              # subscribed now: RESP2's subscribed-mode form
    c.call("GET", "tx:k")
    c.call("UNSUBSCRIBE")


def test_a_message_to_itself_inside_exec_comes_before_exec_reply_unlike_redis(connect):
    """Redis writes a message for the client running EXEC into EXEC's reply as it goes,
    between the array's elements (its length then counts commands, not elements);
    StreamDB queues it before the EXEC reply, whole.  Pinned: docs/COMPATIBILITY.md."""
    c = connect(resp3=True)
    c.call("SUBSCRIBE", "tx:self")
    c.call("MULTI")
    c.call("PUBLISH", "tx:self", "m")
    ours, theirs = c.clients
    for cl in c.clients:
        cl.sock.sendall(_encode(("EXEC",)))
    assert theirs.read_reply() == [("push", [b"message", b"tx:self", b"m"])]   # then :1 alone
    assert theirs.read_reply() == 1
    assert ours.read_reply() == ("push", [b"message", b"tx:self", b"m"])
    assert ours.read_reply() == [1]
