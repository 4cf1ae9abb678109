"""streamdb-crashtest --failover: kill -9 the primary under Redis Sentinel, again and again.

A primary, two replicas and three Sentinels (quorum 2) on 127.0.0.1.  Producers
XADD through Sentinel's view of the primary and follow each XADD with
``WAITAOF 1 1``: a write is *promised* only when that answered [>=1, >=1] (on
disk here and on a replica).  Group consumers XREADGROUP + XACK, and WAITAOF
after each batch: the batch's highest id is then the promised group position.
Each round kills the current primary with SIGKILL, times until the Sentinels
name another one, restarts the killed node on its data (Sentinel turns it into
a replica) and verifies on the new primary: every promised XADD is there, and
the group's last-delivered id is not behind the promised position.  Writes
acknowledged without the wait that are lost are the expected window of
asynchronous replication: reported, not failures.  At the end every node must
converge on the primary's data (DEBUG DIGEST).
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import redis
import redis.sentinel

from .crashload import (GROUP, STREAM, Ledger, ServerDidNotStart, _client, _consumer, _entries, _id_key,
                        _producer, _start)
from .procs import free_port, wait_until_ready

MASTER_NAME = "mymaster"
QUORUM = 2
WAITAOF_TIMEOUT_MS = 1000
# After a kill -9, what the replicas had already read is applied within this.
KILL_SETTLE_S = 0.2
# Sentinel needs a while for each step; bounded waits, with room on a loaded machine.
FAILOVER_WAIT_S = 60.0
CONVERGE_WAIT_S = 60.0


class FailoverSetupError(Exception):
    """The failover run cannot start (no Sentinel binary, a node that does not start)."""


def sentinel_command() -> list[str]:
    """How to start a Redis Sentinel here (redis-sentinel, or redis-server --sentinel)."""
    if shutil.which("redis-sentinel"):
        return ["redis-sentinel"]
    if shutil.which("redis-server"):
        return ["redis-server", "--sentinel"]
    raise FailoverSetupError("--failover needs Redis Sentinel: install redis-sentinel "
                             "(or redis-server, started with --sentinel)")


def log(level: str, message: str) -> None:
    """One progress line per event, with its level."""
    sys.stderr.write(f"{time.strftime('%H:%M:%S')} {level} failover: {message}\n")
    sys.stderr.flush()


def _waitaof_promised(r: redis.Redis) -> bool:
    """WAITAOF 1 1: True only when it answered [>=1, >=1]."""
    try:
        local, replicas = r.execute_command("WAITAOF", 1, 1, WAITAOF_TIMEOUT_MS)
    except (redis.RedisError, OSError, ValueError):
        return False
    return int(local) >= 1 and int(replicas) >= 1


@dataclass
class FailoverRound:
    round: int
    killed_port: int = 0
    new_port: int = 0
    failover_s: float = 0.0
    acked_xadds: int = 0
    promised: int = 0
    lost_promised: int = 0
    lost_unpromised: int = 0
    group_regressed: bool = False
    behind_promoted: bool = False       # Sentinel promoted a replica behind another one
    # The Sentinels' failovers during the round (their config epoch's rise): 1 for the
    # kill; more when a second one followed it (a Sentinel that saw the new primary
    # answer late): each is another window for the writes acknowledged without the wait.
    failovers: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def failures(self) -> int:
        return self.lost_promised + int(self.group_regressed) + len(self.notes)


@dataclass
class FailoverCheck:
    lost_promised: list[bytes]
    lost_unpromised: list[bytes]
    last_delivered: bytes
    group_regressed: bool


def verify_promises(r: redis.Redis, ledger: Ledger) -> FailoverCheck:
    """What ``r`` (the primary after a failover) lacks of what clients were told, and
    whether its group is behind the promised position."""
    present = _entries(r)
    with ledger.lock:
        lost = [sid for sid in ledger.added if sid not in present]
        promised_delivered = ledger.promised_delivered
        lost_promised = [sid for sid in lost if sid in ledger.promised]
    last = {g["name"]: g for g in r.xinfo_groups(STREAM)}[GROUP.encode()]["last-delivered-id"]
    return FailoverCheck(lost_promised, [sid for sid in lost if sid not in lost_promised], last,
                         _id_key(last) < _id_key(promised_delivered))


def _forget(ledger: Ledger, check: FailoverCheck) -> None:
    """Each loss is counted once: later rounds compare against what survived."""
    with ledger.lock:
        for sid in check.lost_promised + check.lost_unpromised:
            ledger.added.pop(sid, None)
            ledger.promised.discard(sid)


class Cluster:
    """The nodes and Sentinels of a failover run, in ``scratch``."""

    def __init__(self, scratch: str, down_after_ms: int) -> None:
        self.scratch = scratch
        self.down_after_ms = down_after_ms
        self.ports = [free_port() for _ in range(3)]
        self.procs: dict[int, subprocess.Popen] = {}
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.sentinels: list[subprocess.Popen] = []
        self.log = open(os.path.join(scratch, "nodes.log"), "ab")

    def start_node(self, port: int, replica_of: int | None) -> None:
        data = os.path.join(self.scratch, f"node-{port}")
        os.makedirs(data, exist_ok=True)
        cmd = [sys.executable, "-m", "streamdb", "--port", str(port), "--dir", data, "--appendonly", "yes",
               "--appendfsync", "always", "--save", "", "--loglevel", "warning"]
        if replica_of:
            cmd += ["--replicaof", f"127.0.0.1 {replica_of}"]
        self.procs[port] = _start(cmd, self.log, port)

    def start(self) -> None:
        program, *flags = sentinel_command()
        primary, *replicas = self.ports
        self.start_node(primary, None)
        for port in replicas:
            self.start_node(port, primary)
        redis.Redis(port=primary).xgroup_create(STREAM, GROUP, id="0", mkstream=True)
        for port in self.sentinel_ports:
            workdir = os.path.join(self.scratch, f"sentinel-{port}")
            os.makedirs(workdir, exist_ok=True)
            conf = os.path.join(workdir, "sentinel.conf")
            with open(conf, "w", encoding="utf-8") as f:
                f.write(f"port {port}\nbind 127.0.0.1\ndir {workdir}\n"
                        f"sentinel monitor {MASTER_NAME} 127.0.0.1 {primary} {QUORUM}\n"
                        f"sentinel down-after-milliseconds {MASTER_NAME} {self.down_after_ms}\n"
                        # A failover may not start within twice this of the last one.
                        f"sentinel failover-timeout {MASTER_NAME} 5000\n")
            proc = subprocess.Popen([program, conf, *flags], stdout=self.log, stderr=subprocess.STDOUT)
            self.sentinels.append(proc)
            try:
                wait_until_ready(port, proc)
            except (RuntimeError, TimeoutError) as e:
                raise FailoverSetupError(f"a Sentinel did not start ({e}); see {self.log.name}") from None
        self.sentinel = redis.sentinel.Sentinel([("127.0.0.1", p) for p in self.sentinel_ports],
                                                socket_timeout=1)

    def primary(self) -> int | None:
        """The primary's port as a Sentinel names it (None while none answers)."""
        for port in self.sentinel_ports:
            try:
                addr = redis.Redis(port=port, socket_timeout=1).execute_command(
                    "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME)
                if addr:
                    return int(addr[1])
            except (redis.RedisError, OSError):
                continue
        return None

    def config_epoch(self) -> int | None:
        """The epoch of the Sentinels' last failover (SENTINEL MASTER's config-epoch, the
        highest any Sentinel answers; None while none does)."""
        epochs = []
        for port in self.sentinel_ports:
            try:
                row = redis.Redis(port=port, socket_timeout=1).execute_command(
                    "SENTINEL", "MASTER", MASTER_NAME)
            except (redis.RedisError, OSError):
                continue
            fields = dict(zip(row[::2], row[1::2])) if isinstance(row, list) else row
            if b"config-epoch" in fields:
                epochs.append(int(fields[b"config-epoch"]))
        return max(epochs, default=None)

    def known_replicas(self) -> set[int]:
        """The replicas every Sentinel knows of and sees up."""
        seen = None
        for port in self.sentinel_ports:
            try:
                rows = redis.Redis(port=port, socket_timeout=1, decode_responses=True).sentinel_slaves(MASTER_NAME)
            except (redis.RedisError, OSError):
                return set()
            ups = {int(r["port"]) for r in rows if "s_down" not in r["flags"] and "disconnected" not in r["flags"]}
            seen = ups if seen is None else seen & ups
        return seen or set()

    def kill9(self, port: int) -> None:
        proc = self.procs.pop(port)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()

    def close(self) -> None:
        for proc in [*self.procs.values(), *self.sentinels]:
            if proc.poll() is None:
                proc.terminate()
        for proc in [*self.procs.values(), *self.sentinels]:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.log.close()


def _wait(what: str, probe, timeout: float):
    """``probe()`` until truthy, polled every 50 ms; None after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        time.sleep(0.05)
    log("ERROR", f"gave up waiting for {what} after {timeout:.0f} s")
    return None


def _role(port: int) -> str:
    try:
        return redis.Redis(port=port, socket_timeout=1).execute_command("ROLE")[0].decode()
    except (redis.RedisError, OSError):
        return ""


def _replica_offset(port: int) -> int | None:
    """The replica's applied offset of its primary's stream (INFO's slave_repl_offset)."""
    try:
        return int(redis.Redis(port=port, socket_timeout=1).info("replication")["slave_repl_offset"])
    except (redis.RedisError, OSError, KeyError, ValueError):
        return None


def _digest(port: int) -> bytes | None:
    try:
        return redis.Redis(port=port, socket_timeout=5).execute_command("DEBUG", "DIGEST")
    except (redis.RedisError, OSError):
        return None


def _load(cluster: Cluster, ledger: Ledger, stop: threading.Event, args) -> list[threading.Thread]:
    """Producers and consumers that follow the primary through the Sentinels,
    reconnecting after each failure until ``stop``."""
    def connect() -> redis.Redis:
        return cluster.sentinel.master_for(MASTER_NAME, socket_timeout=5)

    def produce(name: str) -> None:
        seq = 0
        while not stop.is_set():
            try:
                seq = _producer(connect, name, ledger, stop, seq, promise=_waitaof_promised)
            except (redis.RedisError, OSError):       # (no primary named yet)
                pass
            time.sleep(0.05)

    def consume(name: str) -> None:
        while not stop.is_set():
            try:
                _consumer(connect, name, ledger, stop, promise=_waitaof_promised)
            except (redis.RedisError, OSError):
                pass
            time.sleep(0.05)

    threads = [threading.Thread(target=produce, args=(f"p{i}",), daemon=True) for i in range(args.producers)]
    threads += [threading.Thread(target=consume, args=(f"c{i}",), daemon=True) for i in range(args.consumers)]
    for t in threads:
        t.start()
    return threads


def _round(rnd: int, cluster: Cluster, ledger: Ledger, rng, args) -> FailoverRound:
    result = FailoverRound(rnd)
    with ledger.lock:
        added0, promised0 = len(ledger.added), len(ledger.promised)
    # The node the Sentinels name, once it says it is a primary too: the kill must
    # hit the primary, not a node Sentinel still names while a switch settles.
    old = _wait("the Sentinels' primary to answer as one",
                lambda: (p := cluster.primary()) and _role(p) == "master" and p, FAILOVER_WAIT_S)
    if old not in cluster.procs:        # (None: no Sentinel answered)
        result.notes.append(f"the Sentinels name no primary this run started (got {old})")
        return result
    others = {p for p in cluster.ports if p != old}
    if _wait("the Sentinels to see both replicas up", lambda: cluster.known_replicas() >= others,
             FAILOVER_WAIT_S) is None:
        result.notes.append("the Sentinels never saw both replicas up")
        return result
    time.sleep(rng.uniform(args.min_seconds, args.max_seconds))      # the load runs on the primary
    epoch_before = cluster.config_epoch()
    result.killed_port = old
    cluster.kill9(old)
    killed_at = time.monotonic()
    log("INFO", f"round {rnd}: kill -9 of the primary on port {old}")
    # What the replicas hold once the stream stopped: which one Sentinel should pick
    # (the most advanced holds every write any replica acknowledged).
    time.sleep(KILL_SETTLE_S)
    offsets = {port: _replica_offset(port) for port in sorted(others)}
    new = _wait("a new primary", lambda: (p := cluster.primary()) and p != old and p, FAILOVER_WAIT_S)
    if new is None:
        result.notes.append(f"no new primary within {FAILOVER_WAIT_S:.0f} s")
        return result
    result.new_port, result.failover_s = new, time.monotonic() - killed_at
    log("INFO", f"round {rnd}: the Sentinels promoted port {new} after {result.failover_s:.2f} s "
                f"(replica offsets at the kill: "
                f"{', '.join(f'{port} at {off}' for port, off in offsets.items())})")
    known = [off for off in offsets.values() if off is not None]
    if offsets.get(new) is not None and known and offsets[new] < max(known):
        result.behind_promoted = True
        log("WARNING", f"round {rnd}: the Sentinels promoted port {new}, behind another replica: "
                       f"writes only that replica had are lost with it")
    try:
        cluster.start_node(old, None)     # as it was: Sentinel must make it a replica
    except ServerDidNotStart as e:
        result.notes.append(f"the killed node did not start again on its data ({e})")
        return result
    if _wait(f"port {old} to be reconfigured as a replica", lambda: _role(old) == "slave",
             FAILOVER_WAIT_S) is None:
        result.notes.append(f"port {old} was never turned into a replica")
    else:
        log("INFO", f"round {rnd}: port {old} is back, as a replica")
    epoch_after = cluster.config_epoch()
    if epoch_before is not None and epoch_after is not None:
        result.failovers = epoch_after - epoch_before
        if result.failovers > 1:
            log("WARNING", f"round {rnd}: the Sentinels failed over {result.failovers} times "
                           f"for one kill")
    new = cluster.primary() or new          # (where a second failover left it)
    check = verify_promises(_client(new, 30), ledger)
    result.lost_promised, result.lost_unpromised = len(check.lost_promised), len(check.lost_unpromised)
    result.group_regressed = check.group_regressed
    if check.lost_promised:
        log("ERROR", f"round {rnd}: {len(check.lost_promised)} WAITAOF-promised XADDs are missing on the new "
                     f"primary (e.g. {check.lost_promised[0].decode()})")
    if check.group_regressed:
        log("ERROR", f"round {rnd}: the group's last-delivered id {check.last_delivered.decode()} is behind "
                     f"the promised {ledger.promised_delivered.decode()}")
    if check.lost_unpromised:
        log("WARNING", f"round {rnd}: {len(check.lost_unpromised)} XADDs acknowledged without the wait were "
                       f"lost (asynchronous replication's window)")
    _forget(ledger, check)
    with ledger.lock:
        result.acked_xadds = len(ledger.added) - added0 + result.lost_unpromised + result.lost_promised
        result.promised = len(ledger.promised) - promised0 + result.lost_promised
    return result


def _converge(cluster: Cluster) -> list[str]:
    """Every node's DEBUG DIGEST equal to the primary's, within CONVERGE_WAIT_S; the notes of those that never are."""
    primary = cluster.primary()
    lagging = []
    for port in cluster.ports:
        if port == primary:
            continue
        if _wait(f"port {port} to converge on the primary", lambda: _digest(port) == _digest(primary),
                 CONVERGE_WAIT_S) is None:
            lagging.append(f"port {port} never converged on the primary's data (DEBUG DIGEST differs)")
    return lagging


def run_failover(args, scratch: str, rng) -> tuple[list[FailoverRound], list[str]]:
    """The rounds, and the notes of the final checks (convergence); raises FailoverSetupError."""
    cluster = Cluster(scratch, args.down_after_ms)
    ledger = Ledger()
    stop = threading.Event()
    threads: list[threading.Thread] = []
    results: list[FailoverRound] = []
    try:
        try:
            cluster.start()
        except ServerDidNotStart as e:
            raise FailoverSetupError(f"a node did not start ({e})") from None
        log("INFO", f"primary on {cluster.ports[0]}, replicas on {cluster.ports[1:]}, "
                    f"Sentinels on {cluster.sentinel_ports} (quorum {QUORUM}, down-after {args.down_after_ms} ms)")
        threads = _load(cluster, ledger, stop, args)
        for rnd in range(1, args.rounds + 1):
            results.append(_round(rnd, cluster, ledger, rng, args))
            if results[-1].notes and not results[-1].new_port:
                break
        stop.set()
        for t in threads:
            t.join(15)
        final = []
        primary = cluster.primary()
        if primary:
            check = verify_promises(_client(primary, 30), ledger)
            if check.lost_promised or check.group_regressed:
                final.append(f"at the end the primary lacks {len(check.lost_promised)} promised XADDs"
                             + (" and its group went backwards" if check.group_regressed else ""))
            final += _converge(cluster)
        else:
            final.append("no primary at the end")
        return results, final
    finally:
        stop.set()
        cluster.close()


def print_failover_table(results: list[FailoverRound], final: list[str], down_after_ms: int) -> None:
    cols = ("round", "killed", "new_primary", "failover_s", "failovers", "acked_xadds", "promised",
            "lost_promised", "lost_unpromised", "group_back", "behind_promoted", "failures")
    print(f"failover test: 3 nodes, 3 Sentinels (quorum {QUORUM}), down-after {down_after_ms} ms, WAITAOF 1 1")
    print(" | ".join(f"{c:>15}" for c in cols))
    for r in results:
        print(" | ".join(f"{v!s:>15}" for v in (r.round, r.killed_port, r.new_port, f"{r.failover_s:.2f}",
                                                 r.failovers, r.acked_xadds, r.promised, r.lost_promised, r.lost_unpromised,
                                                 int(r.group_regressed), int(r.behind_promoted),
                                                 r.failures)))
    times = [r.failover_s for r in results if r.new_port]
    tot = lambda attr: sum(getattr(r, attr) for r in results)     # noqa: E731
    median = f"{statistics.median(times):.2f}" if times else "-"
    worst = f"{max(times):.2f}" if times else "-"
    print(f"TOTAL rounds={len(results)} failover_median_s={median} failover_max_s={worst} "
          f"acked_xadds={tot('acked_xadds')} promised={tot('promised')} lost_promised={tot('lost_promised')} "
          f"lost_unpromised={tot('lost_unpromised')} group_regressions={tot('group_regressed')} "
          f"behind_promoted={tot('behind_promoted')} sentinel_failovers={tot('failovers')} "
          f"failures={tot('failures') + len(final)}")
    print(f"lost {tot('lost_unpromised')} XADDs acknowledged without WAITAOF's confirmation: asynchronous "
          f"replication's window, reported, not a failure")
    for r in results:
        for note in r.notes:
            print(f"FAILURE round {r.round}: {note}")
        if r.lost_promised:
            print(f"FAILURE round {r.round}: lost {r.lost_promised} WAITAOF-promised XADDs")
        if r.group_regressed:
            print(f"FAILURE round {r.round}: the group's last-delivered id went behind the promised position")
    for note in final:
        print(f"FAILURE: {note}")
