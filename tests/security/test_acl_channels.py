"""ACL channel rules on Pub/Sub, against a real server: &pattern, allchannels,
resetchannels, acl-pubsub-default, the NOPERM replies, ACL LOG, DRYRUN, GETUSER.
(tests/differential/test_pubsub.py compares the same denials with redis-server.)"""

from __future__ import annotations

import pytest

from differential.resp import Err, RawClient, Status

NOPERM_CHANNEL = Err("NOPERM No permissions to access a channel")


@pytest.fixture
def admin(fresh_server):
    c = RawClient(fresh_server.port)
    yield c
    c.close()


def _login(port: int, user: str) -> RawClient:
    c = RawClient(port)
    assert c.call("AUTH", user, "pw") == Status("OK")
    return c


def test_a_new_user_has_no_channels_unless_acl_pubsub_default_says(admin, fresh_server):
    admin.call("ACL", "SETUSER", "plain", "on", ">pw", "~*", "+@all")
    plain = _login(fresh_server.port, "plain")
    assert plain.call("PUBLISH", "news", "x") == NOPERM_CHANNEL
    assert plain.call("SUBSCRIBE", "news") == NOPERM_CHANNEL
    assert plain.call("SET", "k", "v") == Status("OK")           # keys and commands as before
    getuser = admin.call("ACL", "GETUSER", "plain")
    assert getuser[getuser.index(b"channels") + 1] == b""
    assert admin.call("ACL", "LIST")[1].startswith(b"user plain on #")
    assert b" ~* resetchannels +@all" in admin.call("ACL", "LIST")[1]
    assert admin.call("CONFIG", "SET", "acl-pubsub-default", "allchannels") == Status("OK")
    admin.call("ACL", "SETUSER", "open", "on", ">pw", "~*", "+@all")
    opened = _login(fresh_server.port, "open")
    assert opened.call("PUBLISH", "news", "x") == 0
    assert admin.call("ACL", "LIST")[0].endswith(b"~* &* +@all")
    admin.call("ACL", "SETUSER", "plain", "reset")          # (reset starts from the default too)
    getuser = admin.call("ACL", "GETUSER", "plain")
    assert getuser[getuser.index(b"channels") + 1] == b"&*"
    plain.close()
    opened.close()


def test_channel_patterns_and_literal_pattern_rules(admin, fresh_server):
    admin.call("ACL", "SETUSER", "reader", "on", ">pw", "+@all", "&news.*")
    reader = _login(fresh_server.port, "reader")
    assert reader.call("SUBSCRIBE", "news.sport") == [b"subscribe", b"news.sport", 1]
    assert reader.call("SUBSCRIBE", "weather") == NOPERM_CHANNEL
    # A pattern subscription needs that very pattern among the user's rules.
    assert reader.call("PSUBSCRIBE", "news.*") == [b"psubscribe", b"news.*", 2]
    assert reader.call("PSUBSCRIBE", "news.s*") == NOPERM_CHANNEL
    # Several channels: all or nothing.
    assert reader.call("SUBSCRIBE", "news.a", "other") == NOPERM_CHANNEL
    assert reader.call("UNSUBSCRIBE", "weather") == [b"unsubscribe", b"weather", 2]
    reader.close()
    entry = dict(zip(*[iter(admin.call("ACL", "LOG", "1")[0])] * 2))
    assert (entry[b"reason"], entry[b"context"], entry[b"object"], entry[b"username"]) == \
        (b"channel", b"toplevel", b"other", b"reader")
    assert admin.call("ACL", "DRYRUN", "reader", "PUBLISH", "weather", "x") == \
        b"User reader has no permissions to access the 'weather' channel"
    assert admin.call("ACL", "DRYRUN", "reader", "PUBLISH", "news.x", "x") == Status("OK")
    getuser = admin.call("ACL", "GETUSER", "reader")
    assert getuser[getuser.index(b"channels") + 1] == b"&news.*"


def test_a_denied_subscribe_in_multi_aborts_the_transaction(admin, fresh_server):
    admin.call("ACL", "SETUSER", "tx", "on", ">pw", "+@all", "~*")
    tx = _login(fresh_server.port, "tx")
    assert tx.call("MULTI") == Status("OK")
    assert tx.call("PUBLISH", "c", "m") == NOPERM_CHANNEL
    assert tx.call("EXEC") == Err("EXECABORT Transaction discarded because of previous errors.")
    entry = dict(zip(*[iter(admin.call("ACL", "LOG", "1")[0])] * 2))
    assert (entry[b"reason"], entry[b"context"]) == (b"channel", b"multi")
    tx.close()


def test_a_subscriber_whose_channel_is_revoked_is_closed(admin, fresh_server):
    admin.call("ACL", "SETUSER", "sub", "on", ">pw", "+@all", "&news.*", "&alerts")
    listener, other = _login(fresh_server.port, "sub"), _login(fresh_server.port, "sub")
    assert listener.call("PSUBSCRIBE", "news.*") == [b"psubscribe", b"news.*", 1]
    assert other.call("SUBSCRIBE", "alerts") == [b"subscribe", b"alerts", 1]
    # news.* stays allowed: nobody is closed by an unrelated change.
    assert admin.call("ACL", "SETUSER", "sub", "resetchannels", "&news.*") == Status("OK")
    assert listener.call("PING") == [b"pong", b""]
    with pytest.raises(ConnectionError):
        other.call("PING")
    listener.close()
