"""ACL users against a real StreamDB server, side by side with a real redis-server 7.0.

Where Redis 7.2+ changed a text that 7.0 still has (NOPERM messages, DRYRUN
answers), StreamDB follows the current docs: the test asserts the current text
and that 7.0 answers with the same error code and its older text.
"""

from __future__ import annotations

import hashlib
import socket
import time

import pytest
import redis

from helpers import RedisProcess, ServerProcess
from helpers import raw_reply as raw

pytestmark = pytest.mark.skipif(not RedisProcess.available(), reason="needs redis-server")

# Redis 7.0's texts for what 7.2 renamed (StreamDB answers the 7.2 forms).
REDIS70_NOPERM_KEY = "this user has no permissions to access one of the keys used as arguments"
REDIS70_NOPERM_CMD = "this user has no permissions to run the '{cmd}' command"


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    base = tmp_path_factory.mktemp("acl")
    with ServerProcess(base / "streamdb", "--save", "", "--appendonly", "no") as ours, \
            RedisProcess(base / "redis") as theirs:
        yield ours, theirs


def conns(servers, password=None):
    ours, theirs = servers
    return (redis.Redis(port=ours.port, password=password),
            redis.Redis(port=theirs.port, password=password))


@pytest.fixture(autouse=True)
def clean_users(servers):
    yield
    for r, r_pw in zip(conns(servers), conns(servers, "s3cret")):
        try:
            r.execute_command("CONFIG", "SET", "requirepass", "")
        except redis.AuthenticationError:
            r = r_pw
            r.execute_command("CONFIG", "SET", "requirepass", "")
        users = [u for u in r.execute_command("ACL", "USERS") if u != b"default"]
        if users:
            r.execute_command("ACL", "DELUSER", *users)
        r.execute_command("ACL", "SETUSER", "default", "reset", "on", "nopass", "~*", "&*", "+@all")
        r.execute_command("ACL", "LOG", "RESET")


def both(servers, *args):
    """Run one command on both servers; replies or error texts."""
    out = []
    for r in conns(servers):
        try:
            out.append(raw(r, *args))
        except (redis.ResponseError, redis.AuthenticationError) as e:
            out.append(("ERR", str(e)))
    return out


def pairs(reply) -> dict:
    """A RESP3 map or a RESP2 flat array as a dict."""
    return reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2]))


class Line:
    """A raw connection for commands with one-line replies (status, error, integer)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buf = b""

    def __call__(self, *args: str) -> bytes:
        self.sock.sendall(" ".join(args).encode() + b"\r\n")
        deadline = time.monotonic() + 5
        while b"\r\n" not in self.buf and time.monotonic() < deadline:
            data = self.sock.recv(4096)
            if not data:
                return b"<closed>"
            self.buf += data
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def close(self) -> None:
        self.sock.close()


def getuser(r, name) -> dict:
    return pairs(raw(r, "ACL", "GETUSER", name))


def acl_log(r, *args) -> list[dict]:
    return [pairs(e) for e in raw(r, "ACL", "LOG", *args)]


def user_line(r, name: str) -> bytes:
    return next(line for line in r.execute_command("ACL", "LIST")
                if line.startswith(b"user %s " % name.encode()))


HASH = hashlib.sha256(b"secret").hexdigest()

# Rule sets whose description Redis 7.0 and the current Redis agree on.
RULE_SETS = [
    ["on", ">pw", "~orders:*", "%R~ro:*", "%W~wo:*", "&ch*", "+@read", "-xrange"],
    ["reset"],
    ["on", "nopass", "allkeys", "allchannels", "+@all", "-@dangerous"],
    ["on", f"#{HASH}", ">b", "<b", "~x", "resetkeys", "~y", "%R~z", "%W~z", "+@all", "-debug"],
    ["on", ">a", "-@all", "+@stream", "-xadd", "%RW~both:*"],
    ["off", ">a", "nopass", "+xadd", "-xadd", "+@all", "-@all", "+xlen"],
    ["on", ">a", "allcommands", "-@write", "+@write", "resetpass", "skip-sanitize-payload"],
]


@pytest.mark.parametrize("rules", RULE_SETS, ids=range(len(RULE_SETS)))
def test_setuser_then_getuser_and_list_match_redis(servers, rules):
    ours, theirs = conns(servers)
    assert both(servers, "ACL", "SETUSER", "u1", *rules) == [b"OK", b"OK"]
    assert getuser(ours, "u1") == getuser(theirs, "u1")
    assert user_line(ours, "u1") == user_line(theirs, "u1")
    assert getuser(ours, "default") == getuser(theirs, "default")
    a, b = both(servers, "ACL", "LIST")
    assert a == b


def test_rules_keep_their_order_and_drop_what_changes_nothing(servers):
    ours, _ = conns(servers)
    cases = {
        ("+@all", "-debug"): b"+@all -debug",
        ("-@all", "+xadd", "-xadd"): b"-@all",
        ("+@all", "-@dangerous", "+debug", "-debug"): b"+@all -@dangerous",
        ("+xgroup", "-xgroup|create"): b"-@all +xgroup -xgroup|create",
        ("-@all", "+xgroup|create", "+xgroup"): b"-@all +xgroup",
        ("+@read", "-xrange", "+xgroup|create"): b"-@all +@read -xrange +xgroup|create",
    }
    for rules, expected in cases.items():
        ours.execute_command("ACL", "DELUSER", "t")
        ours.execute_command("ACL", "SETUSER", "t", *rules)
        assert getuser(ours, "t")[b"commands"] == expected, rules


BAD_MODIFIERS = ["+nosuch", "+@nosuch", "bogus", "#abc", "+xgroup|nosuch", "%X~a", "%~a",
                 "%RRW~a", f"!{HASH}", "<notthere"]


def test_setuser_errors_match_redis_and_change_nothing(servers):
    for bad in BAD_MODIFIERS:
        a, b = both(servers, "ACL", "SETUSER", "v", "on", bad)
        assert a == b and a[0] == "ERR", bad
    a, b = both(servers, "ACL", "SETUSER", "v", "~a", "allkeys", "%RW~b")
    assert a == b and a[0] == "ERR"
    # A failed SETUSER creates nothing.
    assert both(servers, "ACL", "GETUSER", "v") == [None, None]
    for args in (["ACL", "SETUSER"], ["ACL", "CAT", "a", "b"], ["ACL", "WHOAMI", "x"],
                 ["ACL", "LOG", "1", "2"], ["ACL", "LOG", "x"], ["ACL", "CAT", "nosuch"],
                 ["ACL", "DELUSER", "a", "default"], ["ACL", "GENPASS", "0"],
                 ["ACL", "GENPASS", "4097"], ["ACL", "NOSUCH"], ["AUTH", "x"],
                 ["ACL", "LOAD"], ["ACL", "SAVE"]):
        a, b = both(servers, *args)
        assert a == b, args


def test_acl_cat_matches_redis_for_shared_commands(servers):
    ours, theirs = conns(servers)
    assert ours.execute_command("ACL", "CAT") == theirs.execute_command("ACL", "CAT")
    ours_all = {c for cat in ours.execute_command("ACL", "CAT")
                for c in ours.execute_command("ACL", "CAT", cat)}
    theirs_all = {c for cat in theirs.execute_command("ACL", "CAT")
                  for c in theirs.execute_command("ACL", "CAT", cat)}
    shared = ours_all & theirs_all
    assert {b"xadd", b"xreadgroup", b"xgroup|create", b"xinfo|stream"} <= shared
    for cat in ours.execute_command("ACL", "CAT"):
        mine = set(ours.execute_command("ACL", "CAT", cat)) & shared
        redis_ = set(theirs.execute_command("ACL", "CAT", cat)) & shared
        assert mine == redis_, (cat, mine ^ redis_)


def _alice(servers):
    for r in conns(servers):
        r.execute_command("ACL", "SETUSER", "alice", "on", ">pw", "~orders:*", "%R~ro:*",
                          "%W~wo:*", "+@all", "-xdel")


def _as(port: int, user: str, password: str) -> redis.Redis:
    return redis.Redis(port=port, username=user, password=password)


def test_enforcement_errors_and_acl_log_match_redis(servers):
    _alice(servers)
    ours_srv, theirs_srv = servers
    results = []
    for srv in (ours_srv, theirs_srv):
        r = _as(srv.port, "alice", "pw")
        out = []
        for args in (["XADD", "orders:1", "*", "a", "1"], ["XADD", "other", "*", "a", "1"],
                     ["XADD", "wo:1", "*", "a", "1"], ["XRANGE", "wo:1", "-", "+"],
                     ["XLEN", "wo:1"], ["XLEN", "zzz"], ["XRANGE", "ro:1", "-", "+"],
                     ["XADD", "ro:1", "*", "a", "1"], ["XDEL", "orders:1", "0-1"],
                     ["ACL", "WHOAMI"]):
            try:
                reply = r.execute_command(*args)
                out.append(("ok", reply if args[0] != "XADD" else b"<id>"))
            except redis.ResponseError as e:
                out.append(("err", str(e)))
        results.append(out)
        r.close()
    ours, theirs = results
    cmd_err = "User alice has no permissions to run the 'xdel' command"
    assert ours == [("ok", b"<id>"), ("err", "No permissions to access a key"), ("ok", b"<id>"),
                    ("err", "No permissions to access a key"), ("ok", 1),
                    ("err", "No permissions to access a key"), ("ok", []),
                    ("err", "No permissions to access a key"), ("err", cmd_err),
                    ("ok", b"alice")]
    as70 = {"No permissions to access a key": REDIS70_NOPERM_KEY,
            cmd_err: REDIS70_NOPERM_CMD.format(cmd="xdel")}
    assert [(k, as70.get(v, v) if k == "err" else v) for k, v in ours] == theirs

    # The raw error code is NOPERM on both.
    for srv in servers:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
            s.sendall(b"AUTH alice pw\r\nXADD other * a 1\r\n")
            data = b""
            deadline = time.monotonic() + 5
            while data.count(b"\r\n") < 2 and time.monotonic() < deadline:
                data += s.recv(4096)
            assert data.split(b"\r\n")[1].startswith(b"-NOPERM ")

    # Same ACL LOG (7.0's fields in 7.0's order, then 7.2's three).
    ours_log, theirs_log = [acl_log(r) for r in conns(servers)]
    fields70 = [b"count", b"reason", b"context", b"object", b"username", b"age-seconds",
                b"client-info"]
    assert list(theirs_log[0]) == fields70
    assert list(ours_log[0]) == fields70 + [b"entry-id", b"timestamp-created",
                                            b"timestamp-last-updated"]
    keep = (b"count", b"reason", b"context", b"object", b"username")
    assert [{k: e[k] for k in keep} for e in ours_log] == \
        [{k: e[k] for k in keep} for e in theirs_log]
    assert {e[b"reason"] for e in ours_log} == {b"key", b"command"}
    assert b"user=alice" in ours_log[0][b"client-info"]
    assert b"cmd=xadd" in ours_log[0][b"client-info"]   # the refused command, as Redis
    assert float(ours_log[0][b"age-seconds"]) >= 0


def test_auth_failures_multi_context_and_log_count(servers):
    _alice(servers)
    for r in conns(servers):
        r.execute_command("ACL", "SETUSER", "dis", "off", ">pw")
    results = []
    for srv in servers:
        r = redis.Redis(port=srv.port, single_connection_client=True)
        out = []
        for args in (["AUTH", "alice", "bad"], ["AUTH", "alice", "bad"], ["AUTH", "dis", "pw"],
                     ["AUTH", "nobody", "x"], ["HELLO", "2", "AUTH", "alice", "bad"],
                     ["AUTH", "alice", "pw"], ["MULTI"], ["XADD", "other", "*", "a", "1"],
                     ["EXEC"]):
            try:
                out.append(raw(r, *args))
            except redis.AuthenticationError:
                out.append("WRONGPASS")
            except redis.ResponseError as e:
                out.append(str(e).split(" ")[0])
        results.append(out)
        r.close()
    assert results[0][:7] == results[1][:7] == [
        "WRONGPASS", "WRONGPASS", "WRONGPASS", "WRONGPASS", "WRONGPASS", b"OK", b"OK"]
    assert results[0][7:] == ["No", "Transaction"] and results[1][7:] == ["this", "Transaction"]
    keep = (b"count", b"reason", b"context", b"object", b"username")
    logs = [[{k: e[k] for k in keep} for e in acl_log(r)] for r in conns(servers)]
    assert logs[0] == logs[1]
    assert logs[0][0] == {b"count": 1, b"reason": b"key", b"context": b"multi",
                          b"object": b"other", b"username": b"alice"}
    # The object is the command as sent: AUTH and HELLO failures are separate entries.
    assert {b"count": 2, b"reason": b"auth", b"context": b"toplevel", b"object": b"AUTH",
            b"username": b"alice"} in logs[0]


def test_exec_checks_again_after_the_rules_changed(servers):
    ours_srv, _ = servers
    admin = redis.Redis(port=ours_srv.port)
    admin.execute_command("ACL", "SETUSER", "bob", "on", ">pw", "~*", "+@all")
    bob = redis.Redis(port=ours_srv.port, username="bob", password="pw",
                      single_connection_client=True)
    assert bob.execute_command("MULTI") == b"OK"
    assert bob.execute_command("XADD", "s", "1-1", "a", "1") == b"QUEUED"
    assert bob.execute_command("XLEN", "s") == b"QUEUED"
    admin.execute_command("ACL", "SETUSER", "bob", "-xadd")
    replies = bob.execute_command("EXEC")
    assert isinstance(replies[0], redis.ResponseError)
    assert str(replies[0]) == "User bob has no permissions to run the 'xadd' command"
    assert replies[1] == 0
    assert acl_log(admin, "1")[0][b"context"] == b"multi"


def test_requirepass_is_the_default_users_password(servers):
    ours, theirs = conns(servers)
    for r in (ours, theirs):
        r.execute_command("CONFIG", "SET", "requirepass", "s3cret")
    transcripts = []
    for srv in servers:
        anon = Line(srv.port)
        transcripts.append([anon("XADD", "k", "*", "a", "1"), anon("AUTH", "nope"),
                            anon("AUTH", "default", "nope"), anon("AUTH", "s3cret"),
                            anon("XLEN", "k"), anon("RESET"), anon("XLEN", "k"),
                            anon("HELLO", "2", "AUTH", "default", "s3cret")[:2]])
        anon.close()
    wrongpass = b"-WRONGPASS invalid username-password pair or user is disabled."
    assert transcripts[0] == transcripts[1] == [
        b"-NOAUTH Authentication required.", wrongpass, wrongpass, b"+OK", b":0", b"+RESET",
        b"-NOAUTH Authentication required.", b"*1"]
    ours, theirs = conns(servers, "s3cret")
    assert getuser(ours, "default") == getuser(theirs, "default")
    assert user_line(ours, "default") == user_line(theirs, "default")


def test_hello_auth_and_deluser_disconnects(servers):
    ours_srv, _ = servers
    admin = redis.Redis(port=ours_srv.port)
    admin.execute_command("ACL", "SETUSER", "carol", "on", ">pw", "~*", "+@read", "+hello")
    with socket.create_connection(("127.0.0.1", ours_srv.port), timeout=5) as s:
        s.sendall(b"HELLO 3 AUTH carol pw\r\n")
        data = b""
        deadline = time.monotonic() + 5
        while b"modules" not in data and time.monotonic() < deadline:
            data += s.recv(4096)
        assert data.startswith(b"%7\r\n")
        s.sendall(b"ACL WHOAMI\r\n")
        assert s.recv(100) == b"-NOPERM User carol has no permissions to run the 'acl|whoami' command\r\n"
        s.sendall(b"XLEN k\r\n")
        assert s.recv(100) == b":0\r\n"
        assert admin.execute_command("ACL", "DELUSER", "carol", "nosuch") == 1
        s.settimeout(5)
        assert s.recv(100) == b""       # closed: its user is gone


def test_dryrun(servers):
    _alice(servers)
    cases = [(["alice", "xadd", "other", "*", "a", "1"],
              b"User alice has no permissions to access the 'other' key",
              b"This user has no permissions to access the 'other' key"),
             (["alice", "xadd", "orders:1", "*", "a", "1"], b"OK", b"OK"),
             (["alice", "xdel", "orders:1", "0-1"],
              b"User alice has no permissions to run the 'xdel' command",
              b"This user has no permissions to run the 'xdel' command")]
    for args, mine, redis70 in cases:
        assert both(servers, "ACL", "DRYRUN", *args) == [mine, redis70]
    for args in (["nobody", "xadd", "x"], ["alice", "nosuchcmd", "x"], ["alice", "xadd"]):
        a, b = both(servers, "ACL", "DRYRUN", *args)
        assert a == b and a[0] == "ERR"


def test_genpass_whoami_users(servers):
    for r in conns(servers):
        assert len(r.execute_command("ACL", "GENPASS")) == 64
        assert len(r.execute_command("ACL", "GENPASS", "5")) == 2
        assert len(r.execute_command("ACL", "GENPASS", "4096")) == 1024
    a, b = both(servers, "ACL", "GENPASS")
    assert a != b and int(a, 16) >= 0
    assert both(servers, "ACL", "WHOAMI") == [b"default", b"default"]
    _alice(servers)
    assert both(servers, "ACL", "USERS") == [[b"alice", b"default"]] * 2
    assert both(servers, "ACL", "HELP")[0] == both(servers, "ACL", "HELP")[1]


def test_aclfile_load_save(tmp_path):
    aclfile = tmp_path / "users.acl"
    aclfile.write_text(f"user alice on #{HASH} ~orders:* +@read\n"
                       "user default on nopass ~* &* +@all\n")
    with ServerProcess(tmp_path / "d", "--save", "", "--aclfile", str(aclfile)) as srv:
        admin = redis.Redis(port=srv.port)
        alice = _as(srv.port, "alice", "secret")
        assert alice.xrange("orders:1") == []
        with pytest.raises(redis.ResponseError, match="^User alice has no permissions"):
            alice.xadd("orders:1", {"a": 1})
        admin.execute_command("ACL", "SETUSER", "bob", "on", ">pw", "%R~logs:*", "+xread")
        assert admin.execute_command("ACL", "SAVE") == b"OK"
        saved = aclfile.read_text().splitlines()
        assert saved == [line.decode() for line in admin.execute_command("ACL", "LIST")]
        assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]     # (the file aside)
        assert aclfile.stat().st_mode & 0o7777 == 0o600     # (password hashes: the owner's only)
        # A bad line: nothing changes, and the error names the file and line.
        aclfile.write_text(f"user alice on #{HASH} ~orders:* +@read\nuser carol on +nosuch\n")
        with pytest.raises(redis.ResponseError) as e:
            admin.execute_command("ACL", "LOAD")
        assert f"{aclfile}:2: Unknown command or category name in ACL" in str(e.value)
        assert b"bob" in admin.execute_command("ACL", "USERS")
        # A good file replaces every user; the default user comes back as fresh.
        aclfile.write_text(f"user carol on #{HASH} ~* +@all\n")
        assert admin.execute_command("ACL", "LOAD") == b"OK"
        assert admin.execute_command("ACL", "USERS") == [b"carol", b"default"]
        assert _as(srv.port, "carol", "secret").execute_command("ACL", "WHOAMI") == b"carol"
    # A server whose ACL file does not parse refuses to start.
    aclfile.write_text("user x on +nosuch\n")
    bad = ServerProcess(tmp_path / "e", "--save", "", "--aclfile", str(aclfile))
    with pytest.raises(RuntimeError, match="exited with 1"):
        bad.start()
    bad.stop()
    assert "Aborting StreamDB startup because of ACL errors" in bad.log_text()


def test_replica_with_wrong_password_logs_and_retries(tmp_path):
    with ServerProcess(tmp_path / "p", "--save", "", "--appendonly", "no") as primary:
        p = redis.Redis(port=primary.port)
        p.execute_command("ACL", "SETUSER", "repl", "on", ">right", "+psync", "+replconf",
                          "+ping")
        p.execute_command("ACL", "SETUSER", "default", "resetpass", ">admin")
        p = redis.Redis(port=primary.port, password="admin")
        p.xadd("orders", {"n": 1}, id="1-1")
        with ServerProcess(tmp_path / "r", "--save", "", "--appendonly", "no", "--replicaof",
                           "127.0.0.1", str(primary.port), "--masteruser", "repl",
                           "--masterauth", "wrong") as replica:
            r = redis.Redis(port=replica.port)
            deadline = time.monotonic() + 10
            while replica.log_text().count("Unable to AUTH to MASTER: -WRONGPASS") < 2:
                assert time.monotonic() < deadline, replica.log_text()
                time.sleep(0.1)
            assert r.xlen("orders") == 0
            failures = [e for e in acl_log(p) if e[b"reason"] == b"auth"]
            assert failures and failures[0][b"username"] == b"repl"
            r.config_set("masterauth", "right")
            deadline = time.monotonic() + 15
            while r.xlen("orders") != 1:
                assert time.monotonic() < deadline, replica.log_text()
                time.sleep(0.1)
            assert r.xrange("orders") == [(b"1-1", {b"n": b"1"})]
