"""High availability: Redis's own Sentinel fails StreamDB nodes over (issue 29).

A real Sentinel (Debian's redis-sentinel, or `redis-server --sentinel`, the same
binary) monitors real StreamDB processes on loopback; the primary dies by kill -9.
What Sentinel needs of a node: INFO replication as Redis writes it, a Pub/Sub link
that stays up (without it every replica flaps +sdown/-sdown and the failover ends in
-failover-abort-no-good-slave), and its MULTI; REPLICAOF; CONFIG REWRITE; CLIENT KILL
TYPE normal; CLIENT KILL TYPE pubsub; EXEC transaction.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
import redis.sentinel

from differential.resp import Err, RawClient, Status
from helpers import ROOT, RedisProcess, ServerProcess, wait_until
from streamdb.cli.procs import free_port, wait_until_ready

# Sentinel's own clock: a primary silent for a second is down, and a second failover
# of the same primary may start after 10 s.
SENTINEL_TIMING = ("sentinel down-after-milliseconds mymaster 1000\n"
                   "sentinel failover-timeout mymaster 10000\n")
FAILOVER_WAIT = 30.0      # seconds: detection (1 s) + election + promotion, with room


def sentinel_command() -> list[str]:
    """How to start a Sentinel on this machine, or skip the test saying why."""
    if shutil.which("redis-sentinel"):
        return ["redis-sentinel"]
    if shutil.which("redis-server"):
        return ["redis-server", "--sentinel"]
    pytest.skip("Redis Sentinel is not installed (make test installs redis-sentinel)")


class Sentinel:
    """One Sentinel process watching ``mymaster`` at ``primary_port`` with quorum 1."""

    def __init__(self, workdir: Path, primary_port: int) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.conf = workdir / "sentinel.conf"
        self.conf.write_text(f"port {self.port}\nbind 127.0.0.1\ndir {workdir}\nloglevel verbose\n"
                             f"sentinel monitor mymaster 127.0.0.1 {primary_port} 1\n"
                             + SENTINEL_TIMING)
        self.log_path = workdir / "sentinel.log"

    def __enter__(self) -> "Sentinel":
        program, *flags = sentinel_command()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen([program, str(self.conf), *flags], stdout=log,
                                         stderr=subprocess.STDOUT)
        wait_until_ready(self.port, self.proc)
        self.client = redis.Redis(port=self.port, decode_responses=True)
        return self

    def __exit__(self, *exc) -> None:
        self.client.close()
        self.proc.terminate()
        self.proc.wait(timeout=10)

    def primary_port(self) -> int:
        return int(self.client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster")[1])

    def replica_ports(self, flags_without: str = "s_down") -> set[int]:
        """The replicas Sentinel knows of and sees up."""
        return {int(r["port"]) for r in self.client.sentinel_slaves("mymaster")
                if flags_without not in r["flags"]}

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def replica_of(tmp_path: Path, name: str, primary: ServerProcess, *args: str) -> ServerProcess:
    return ServerProcess(tmp_path / name, "--replicaof", f"127.0.0.1 {primary.port}", *args)


def role(port: int) -> str:
    return redis.Redis(port=port, decode_responses=True).execute_command("ROLE")[0]


def write_until_accepted(client: redis.Redis, value: str) -> str:
    """XADD through a Sentinel-managed client, retrying while the failover settles."""
    def attempt():
        try:
            return client.xadd("events", {"v": value})
        except (redis.ConnectionError, redis.ReadOnlyError, redis.sentinel.MasterNotFoundError):
            return None
    return wait_until(attempt, timeout=FAILOVER_WAIT, what=f"a write of {value} to be accepted")


@contextmanager
def watched_pair(tmp_path: Path):
    """A primary, its replica and a Sentinel that knows both: (primary, replica, Sentinel)."""
    with ServerProcess(tmp_path / "primary") as primary, \
            replica_of(tmp_path, "replica", primary) as replica, \
            Sentinel(tmp_path, primary.port) as sentinel:
        wait_until(lambda: sentinel.replica_ports() == {replica.port},
                   what="Sentinel to discover the replica through the primary's INFO")
        yield primary, replica, sentinel


def kill9_and_await_failover(primary: ServerProcess, replica: ServerProcess, sentinel: Sentinel) -> None:
    primary.kill9()
    wait_until(lambda: sentinel.primary_port() == replica.port, timeout=FAILOVER_WAIT,
               what="Sentinel to switch mymaster to the replica")


@contextmanager
def failed_over(tmp_path: Path):
    """A primary, its replica and a Sentinel; kill -9 of the primary once Sentinel knows
    the replica, and the failover awaited. Yields (killed primary, new primary, Sentinel,
    redis-py's master_for client, the entry written before the kill)."""
    with watched_pair(tmp_path) as (primary, replica, sentinel):
        client = redis.sentinel.Sentinel([("127.0.0.1", sentinel.port)],
                                         socket_timeout=2).master_for("mymaster", socket_timeout=2)
        before = client.xadd("events", {"v": "before"})
        wait_until(lambda: redis.Redis(port=replica.port).xlen("events") == 1,
                   what="the replica to receive the first entry")
        kill9_and_await_failover(primary, replica, sentinel)
        yield primary, replica, sentinel, client, before


def test_sentinel_promotes_the_replica_after_kill9_and_clients_follow(tmp_path):
    """kill -9 of the primary: Sentinel promotes the replica (ROLE says master, Sentinel
    names it) and redis-py's master_for writes before and after."""
    with failed_over(tmp_path) as (_, replica, sentinel, client, before):
        assert "+promoted-slave" in sentinel.log() and "failover-abort" not in sentinel.log()
        assert role(replica.port) == "master"
        after = write_until_accepted(client, "after")
        assert [e[0] for e in client.xrange("events")] == [before, after]


IOREDIS = ROOT / ".cache" / "node" / "node_modules" / "ioredis"

# One ioredis client given only the Sentinel: two writes acknowledged by WAITAOF 1 1,
# a line to say so, then (once the test has killed the primary and written "killed" to
# its stdin) writes retried until the new primary takes them, and what it reads back.
IOREDIS_FAILOVER = r"""
const Redis = require(process.argv[2]);
const deadline = Date.now() + 45000;
setTimeout(() => { console.error("timed out"); process.exit(2); }, 50000).unref();
const r = new Redis({ sentinels: [{ host: "127.0.0.1", port: Number(process.argv[3]) }],
                      name: "mymaster", connectTimeout: 2000, retryStrategy: () => 100 });
const killed = new Promise((resolve) => process.stdin.once("data", resolve));
async function writeUntilAccepted(value) {
  for (;;) {
    try { return await r.xadd("events", "*", "v", value); }
    catch (e) { if (Date.now() > deadline) throw e; await new Promise((t) => setTimeout(t, 100)); }
  }
}
(async () => {
  const before = [await r.xadd("events", "*", "v", "before-1"), await r.xadd("events", "*", "v", "before-2")];
  const waitaof = await r.call("WAITAOF", "1", "1", "10000");
  console.log(JSON.stringify({ before, waitaof }));
  await killed;
  const after = [await writeUntilAccepted("after-1"), await writeUntilAccepted("after-2")];
  const read = (await r.xrange("events", "-", "+")).map((e) => e[0]);
  console.log(JSON.stringify({ after, read, port: r.stream.remotePort }));
  r.disconnect();
})().catch((e) => { console.error(e); process.exit(1); });
"""


def test_ioredis_follows_sentinel_through_a_failover(tmp_path):
    """ioredis's own Sentinel support ({sentinels, name}): the same client writes to the
    primary, and after its kill -9 and Sentinel's promotion of the replica goes on
    writing to the new primary, which it finds through Sentinel. What WAITAOF 1 1
    acknowledged before the kill is on the new primary, and so is every later write."""
    if not (IOREDIS.exists() and shutil.which("node")):
        pytest.skip("ioredis is not installed (make test installs Node.js and ioredis)")
    script = tmp_path / "failover.js"
    script.write_text(IOREDIS_FAILOVER)
    with watched_pair(tmp_path) as (primary, replica, sentinel):
        node = subprocess.Popen(["node", str(script), str(IOREDIS), str(sentinel.port)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            acknowledged = json.loads(node.stdout.readline() or "null")
            assert acknowledged is not None, node.communicate(timeout=60)[1]
            assert acknowledged["waitaof"] == [1, 1]
            kill9_and_await_failover(primary, replica, sentinel)
            node.stdin.write("killed\n")
            node.stdin.flush()
            out, err = node.communicate(timeout=60)
        finally:
            if node.poll() is None:
                node.kill()
                node.wait()
        assert node.returncode == 0, err
        got = json.loads(out)
        on_new_primary = [e[0] for e in redis.Redis(port=replica.port, decode_responses=True)
                          .xrange("events")]
        assert got["port"] == replica.port and role(replica.port) == "master"
        assert on_new_primary == acknowledged["before"] + got["after"] == got["read"]


@pytest.mark.soak        # Sentinel waits 8 s of a wrong role before it reconfigures a node
def test_sentinel_turns_the_restarted_old_primary_into_a_replica(tmp_path):
    """The old primary, restarted after the failover, is told by Sentinel to follow the
    new primary, and converges on its data (DEBUG DIGEST), including what was written
    after the failover."""
    with failed_over(tmp_path) as (primary, replica, _, client, _):
        write_until_accepted(client, "after")
        with ServerProcess(primary.data_dir, port=primary.port) as old:
            wait_until(lambda: role(old.port) == "slave", timeout=FAILOVER_WAIT,
                       what="Sentinel to turn the restarted old primary into a replica")
            digest = redis.Redis(port=replica.port).execute_command("DEBUG", "DIGEST")
            wait_until(lambda: redis.Redis(port=old.port).execute_command("DEBUG", "DIGEST") == digest,
                       what="the old primary to converge on the new primary's data")


def test_min_replicas_to_write_refuses_writes_without_a_good_replica(tmp_path):
    """min-replicas-to-write 1: writes get Redis's NOREPLICAS (a queued one is refused
    when queued) while the only replica is gone, and are accepted again once it is
    back; reads are always served."""
    with ServerProcess(tmp_path / "primary", "--min-replicas-to-write", "1",
                       "--min-replicas-max-lag", "10") as primary:
        client = redis.Redis(port=primary.port, decode_responses=True)
        with pytest.raises(redis.ResponseError, match="^NOREPLICAS Not enough good replicas to write.$"):
            client.xadd("events", {"v": "alone"})
        assert client.xlen("events") == 0
        pipe = client.pipeline(transaction=True)
        pipe.xadd("events", {"v": "queued"})
        with pytest.raises(redis.ResponseError, match="caused error: NOREPLICAS"):
            pipe.execute()
        with replica_of(tmp_path, "replica", primary):
            wait_until(lambda: client.info("replication").get("min_slaves_good_slaves") == 1,
                       what="the replica to count as good")
            client.xadd("events", {"v": "replicated"})
        wait_until(lambda: client.info("replication")["min_slaves_good_slaves"] == 0,
                   what="the primary to see its replica gone")
        with pytest.raises(redis.ResponseError, match="Not enough good replicas"):
            client.xadd("events", {"v": "alone again"})
        client.config_set("min-replicas-to-write", "0")
        client.xadd("events", {"v": "unguarded"})
        assert [e[1]["v"] for e in client.xrange("events")] == ["replicated", "unguarded"]


def node(kind: str, workdir: Path, *args: str):
    """A StreamDB node (kind "streamdb") or a real redis-server 7.0 ("redis"), not started."""
    if kind == "redis":
        if not RedisProcess.available():
            pytest.skip("redis-server is not installed (make test installs it)")
        return RedisProcess(workdir, *args)
    return ServerProcess(workdir, *args)


def exec_of_writes_queued_before_a_refusal(kind: str, workdir: Path) -> list:
    """EXEC's reply where the writes it queued were accepted when queued and a write
    refusal began before EXEC: min-replicas-to-write no longer met (the only replica
    killed), then the node turned into a replica (REPLICAOF). Also EXEC's rejected_calls
    and the EXECABORT count, and what the next transaction of reads answers."""
    with node(kind, workdir / "primary", "--min-replicas-to-write", "1",
              "--min-replicas-max-lag", "1") as primary:
        admin = redis.Redis(port=primary.port, decode_responses=True)
        replica = node(kind, workdir / "replica", "--replicaof", "127.0.0.1", str(primary.port)).start()
        try:
            wait_until(lambda: admin.info("replication").get("min_slaves_good_slaves") == 1,
                       what="the replica to count as good")
            tx = RawClient(primary.port)
            queued = tx.pipeline([["MULTI"], ["XADD", "events", "*", "v", "queued"], ["XLEN", "events"]])
            replica.proc.kill()                       # kill -9: the link drops, no goodbye
            replica.proc.wait()
            wait_until(lambda: admin.info("replication")["min_slaves_good_slaves"] == 0,
                       timeout=FAILOVER_WAIT, what="the primary to count no good replica")
            replies = [queued, tx.call("EXEC"), tx.pipeline([["MULTI"], ["XLEN", "events"], ["EXEC"]])]
            admin.config_set("min-replicas-to-write", "0")
            replies.append(tx.pipeline([["MULTI"], ["XADD", "events", "*", "v", "queued"]]))
            with node(kind, workdir / "new-primary") as new_primary:
                admin.replicaof("127.0.0.1", new_primary.port)
                replies.append(tx.call("EXEC"))
            stats = admin.info("commandstats")["cmdstat_exec"]
            replies.append((stats["rejected_calls"], admin.info("errorstats")["errorstat_EXECABORT"]))
            tx.close()
            return replies
        finally:
            replica.stop()


def test_exec_is_aborted_whole_when_a_write_refusal_began_after_its_writes_were_queued(tmp_path):
    """As Redis counts an EXEC holding queued writes as a write: NOREPLICAS (the only
    replica killed under min-replicas-to-write 1) and READONLY (the node made a replica)
    abort it with EXECABORT, nothing of it runs; a transaction of reads still runs. The
    same replies as a real redis-server 7.0 pair."""
    ours = exec_of_writes_queued_before_a_refusal("streamdb", tmp_path / "streamdb")
    assert ours == [
        [Status("OK"), Status("QUEUED"), Status("QUEUED")],
        Err("EXECABORT Transaction discarded because of: NOREPLICAS Not enough good replicas to write."),
        [Status("OK"), Status("QUEUED"), [0]],
        [Status("OK"), Status("QUEUED")],
        Err("EXECABORT Transaction discarded because of: READONLY You can't write against a read only replica."),
        (2, {"count": 2}),
    ]
    assert exec_of_writes_queued_before_a_refusal("redis", tmp_path / "redis") == ours


def test_a_replica_announces_the_address_and_priority_sentinel_uses(tmp_path):
    """replica-announce-ip/port are what the primary lists (INFO slaveN, ROLE: where
    Sentinel connects), and replica-priority is INFO slave_priority; both CONFIG SET-able."""
    with ServerProcess(tmp_path / "primary") as primary, \
            replica_of(tmp_path, "replica", primary, "--replica-announce-ip", "10.9.9.9",
                       "--replica-announce-port", "7777", "--replica-priority", "0") as replica:
        p = redis.Redis(port=primary.port, decode_responses=True)
        wait_until(lambda: p.info("replication").get("connected_slaves") == 1,
                   what="the replica to connect")
        slave0 = p.info("replication")["slave0"]
        assert (slave0["ip"], slave0["port"]) == ("10.9.9.9", 7777)
        assert p.execute_command("ROLE")[2][0][:2] == ["10.9.9.9", "7777"]
        r = redis.Redis(port=replica.port, decode_responses=True)
        assert r.info("replication")["slave_priority"] == 0
        r.config_set("replica-priority", "7")
        assert r.info("replication")["slave_priority"] == 7
        assert r.config_get("replica-announce-*") == {"replica-announce-ip": "10.9.9.9",
                                                      "replica-announce-port": "7777"}


@pytest.mark.parametrize("kind", ["streamdb", "redis"])
def test_announce_settings_changed_on_a_linked_replica_reach_the_primary_at_the_next_handshake(
        tmp_path, kind):
    """CONFIG SET replica-announce-ip/port on a replica whose link is up changes nothing
    the primary lists (Redis sends REPLCONF ip-address/listening-port only in the
    handshake), even once the replica has acknowledged later writes; after the primary
    drops the link (CLIENT KILL TYPE replica) the replica reconnects and is listed under
    the new address. The same on a real redis-server 7.0 pair."""
    with node(kind, tmp_path / "primary", "--repl-diskless-sync-delay", "0") as primary:
        replica = node(kind, tmp_path / "replica", "--replicaof", "127.0.0.1", str(primary.port)).start()
        try:
            p = redis.Redis(port=primary.port, decode_responses=True)

            def listed(state="online"):
                slave0 = p.info("replication").get("slave0")
                return slave0 and slave0["state"] == state and (slave0["ip"], slave0["port"])

            assert wait_until(listed, what="the replica to come online") == ("127.0.0.1", replica.port)
            r = redis.Redis(port=replica.port)
            r.config_set("replica-announce-ip", "10.9.9.9")
            r.config_set("replica-announce-port", "7777")
            p.xadd("events", {"v": "after the change"})
            assert p.execute_command("WAIT", 1, 10000) == 1       # the link carried acks since
            assert listed() == ("127.0.0.1", replica.port)
            p.execute_command("CLIENT", "KILL", "TYPE", "replica")
            wait_until(lambda: listed() == ("10.9.9.9", 7777),
                       what="the reconnected replica to be listed under its new address")
        finally:
            replica.stop()


def test_a_replica_that_never_reached_its_primary_reports_its_link_down_since_minus_1(tmp_path):
    """As Redis: -1, not the seconds since start-up, which Sentinel would take for a link
    down too long to promote the replica."""
    with ServerProcess(tmp_path / "replica", "--replicaof", f"127.0.0.1 {free_port()}") as replica:
        info = redis.Redis(port=replica.port).info("replication")
        assert (info["master_link_status"], info["master_link_down_since_seconds"]) == ("down", -1)


def test_sentinel_never_promotes_a_replica_of_priority_0(tmp_path):
    """Two replicas, one with replica-priority 0: Sentinel promotes the other one."""
    with ServerProcess(tmp_path / "primary") as primary, \
            replica_of(tmp_path, "never", primary, "--replica-priority", "0") as never, \
            replica_of(tmp_path, "chosen", primary) as chosen, \
            Sentinel(tmp_path, primary.port) as sentinel:
        wait_until(lambda: sentinel.replica_ports() == {never.port, chosen.port},
                   what="Sentinel to discover both replicas")
        primary.kill9()
        wait_until(lambda: sentinel.primary_port() == chosen.port, timeout=FAILOVER_WAIT,
                   what="Sentinel to promote the replica of priority 100")
        assert role(never.port) == "slave"


FAILOVER_TRANSACTION = (["MULTI"], ["CONFIG", "REWRITE"], ["CLIENT", "KILL", "TYPE", "normal"],
                        ["CLIENT", "KILL", "TYPE", "pubsub"], ["EXEC"])


def sentinel_transaction(port: int, replicaof: list[str]) -> list:
    """What Sentinel sends to reconfigure a node (sentinelSendSlaveOf): one MULTI with
    REPLICAOF, CONFIG REWRITE, CLIENT KILL TYPE normal and pubsub; EXEC's replies."""
    c = RawClient(port)
    try:
        replies = c.pipeline([FAILOVER_TRANSACTION[0], ["REPLICAOF", *replicaof],
                              *FAILOVER_TRANSACTION[1:]])
        assert c.call("PING") == Status("PONG")     # CLIENT KILL spared the sender
        return replies[-1]
    finally:
        c.close()


def test_the_failover_transaction_rewrites_the_config_file_and_spares_its_sender(tmp_path):
    """Sentinel's transaction on a server started with a config file: REPLICAOF takes
    effect, CONFIG REWRITE writes the new role into the file (a restart keeps it), CLIENT
    KILL drops the other normal clients but not Sentinel's own connection; without a
    config file CONFIG REWRITE fails inside EXEC with Redis's error, the rest still runs."""
    with ServerProcess(tmp_path / "primary") as primary:
        conf = tmp_path / "replica.conf"
        conf.write_text(f"# operator's comment\nreplicaof 127.0.0.1 {primary.port}\n")
        with ServerProcess(tmp_path / "replica", config=str(conf)) as replica:
            other = socket.create_connection(("127.0.0.1", replica.port), timeout=5)
            assert sentinel_transaction(replica.port, ["NO", "ONE"]) == ["OK", "OK", 1, 0]
            assert other.recv(1) == b""              # the other normal client was killed
            assert role(replica.port) == "master"
            assert "replicaof" not in conf.read_text().replace('replicaof ""', "")
            assert conf.read_text().startswith("# operator's comment\n")
            assert sentinel_transaction(replica.port, ["127.0.0.1", str(primary.port)])[:2] == \
                ["OK", "OK"]
            assert f"replicaof 127.0.0.1 {primary.port}" in conf.read_text()
        # No config file: Redis's error for CONFIG REWRITE, the other commands run.
        replies = sentinel_transaction(primary.port, ["NO", "ONE"])
        assert replies == [Status("OK"), Err("ERR The server is running without a config file"),
                           0, 0]


def documented_sentinel_conf() -> str:
    """The sentinel.conf of docs/OPERATIONS.md "High availability with Redis Sentinel"."""
    guide = (ROOT / "docs" / "OPERATIONS.md").read_text()
    section = guide.split("## High availability with Redis Sentinel", 1)[1]
    return re.search(r"^```conf\n(# sentinel.conf\n.*?)^```", section, re.M | re.S).group(1)


def test_the_guides_sentinel_conf_fails_over_with_three_sentinels(tmp_path):
    """Three Sentinels, each on the guide's file as written (only its ports moved to free
    ones), fail the primary over to its replica after kill -9, with quorum 2."""
    sentinel_command()
    with ServerProcess(tmp_path / "primary") as primary, \
            replica_of(tmp_path, "replica", primary) as replica:
        sentinels = []
        try:
            for i in range(3):
                workdir = tmp_path / f"sentinel{i}"
                workdir.mkdir()
                port = free_port()
                conf = re.sub(r"(?<!\d)26379(?!\d)", str(port), documented_sentinel_conf())
                (workdir / "sentinel.conf").write_text(
                    re.sub(r"(?<!\d)6379(?!\d)", str(primary.port), conf))
                program, *flags = sentinel_command()
                sentinels.append(subprocess.Popen([program, "sentinel.conf", *flags], cwd=workdir,
                                                  stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
                wait_until_ready(port, sentinels[-1])
                sentinels[-1].client = redis.Redis(port=port, decode_responses=True)
            wait_until(lambda: all(len(s.client.sentinel_sentinels("streamdb")) == 2
                                   and len(s.client.sentinel_slaves("streamdb")) == 1
                                   for s in sentinels),
                       what="the Sentinels to find each other and the replica")
            primary.kill9()
            for s in sentinels:
                wait_until(lambda: s.client.sentinel_get_master_addr_by_name("streamdb")[1]
                           == replica.port, timeout=FAILOVER_WAIT,
                           what="every Sentinel to name the promoted replica")
            assert role(replica.port) == "master"
        finally:
            for proc in sentinels:
                proc.terminate()
                proc.wait(timeout=10)
