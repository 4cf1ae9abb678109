"""streamdb-crashtest: kill -9 a StreamDB under load, restart it, and check nothing acknowledged was lost.

    streamdb-crashtest --rounds 20 --fsync always
    streamdb-crashtest --rounds 20 --fsync everysec --power-loss

Each round starts the server on a scratch directory (the same one every round,
so the log keeps growing), runs producers (XADD) and group consumers
(XREADGROUP + XACK) for a random time, then SIGKILLs it.  With --power-loss
the server records its fsync boundaries and the tool cuts the last AOF
segment back to a random point after the last one before restarting: what a
power cut could leave behind.  After every restart it verifies:

* every acknowledged XADD is present, with its fields;
* every acknowledged XACK holds (the entry is not pending);
* every delivered, not acknowledged entry is still pending;
* no group's last-delivered id moved backwards.

Under ``appendfsync always`` the expected losses are zero.  Under ``everysec``
with --power-loss it measures what was lost (at most about one second of
acknowledged writes is the documented window).  A summary table is printed;
the exit status is 1 if an ``always`` run lost anything.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

import redis

from .procs import free_port, wait_until_ready

STREAM = "crash:log"
GROUP = "crash-group"


@dataclass
class Ledger:
    """What clients were told.  Only acknowledged operations are recorded."""

    added: dict[bytes, tuple[str, int]] = field(default_factory=dict)   # id -> (producer, seq)
    delivered: dict[bytes, str] = field(default_factory=dict)          # id -> consumer
    acked: set[bytes] = field(default_factory=set)
    # XACKs sent but maybe not answered: applied or not, both are fine.
    ack_sent: set[bytes] = field(default_factory=set)
    max_delivered: bytes = b"0-0"
    lock: threading.Lock = field(default_factory=threading.Lock)


def _id_key(sid: bytes) -> tuple[int, int]:
    ms, _, seq = sid.partition(b"-")
    return int(ms), int(seq)


def _producer(port: int, name: str, ledger: Ledger, stop: threading.Event, seq0: int) -> None:
    r = redis.Redis(port=port, socket_timeout=5)
    seq = seq0
    try:
        while not stop.is_set():
            seq += 1
            sid = r.xadd(STREAM, {"producer": name, "seq": seq, "pad": "x" * random.randint(0, 40)})
            with ledger.lock:
                ledger.added[sid] = (name, seq)
    except (redis.RedisError, OSError):
        pass


def _consumer(port: int, name: str, ledger: Ledger, stop: threading.Event) -> None:
    r = redis.Redis(port=port, socket_timeout=5)
    try:
        while not stop.is_set():
            got = r.xreadgroup(GROUP, name, {STREAM: ">"}, count=10, block=100)
            ids = [sid for _, entries in got or [] for sid, _ in entries]
            with ledger.lock:
                for sid in ids:
                    ledger.delivered[sid] = name
                    if _id_key(sid) > _id_key(ledger.max_delivered):
                        ledger.max_delivered = sid
            to_ack = [sid for sid in ids if random.random() < 0.7]
            if to_ack:
                with ledger.lock:
                    ledger.ack_sent.update(to_ack)
                r.xack(STREAM, GROUP, *to_ack)
                with ledger.lock:
                    ledger.acked.update(to_ack)
    except (redis.RedisError, OSError):
        pass


def _power_cut(aof_dir: str, rng: random.Random) -> int:
    """Cut the last segment back to a random point after its last durable offset; returns bytes cut."""
    log_path = os.path.join(aof_dir, "fsync.log")
    manifest = [n for n in os.listdir(aof_dir) if n.endswith(".manifest")]
    if not manifest:
        return 0
    from ..persistence.aof import Manifest
    with open(os.path.join(aof_dir, manifest[0]), encoding="utf-8") as f:
        m = Manifest.parse(f.read(), manifest[0])
    seg = m.incrs[-1]
    durable = 0
    if os.path.exists(log_path):
        with open(log_path, encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and parts[0] == seg:
                    durable = max(durable, int(parts[1]))
    path = os.path.join(aof_dir, seg)
    size = os.path.getsize(path)
    if size <= durable:
        return 0
    cut_to = rng.randint(durable, size)
    with open(path, "r+b") as f:
        f.truncate(cut_to)
    return size - cut_to


@dataclass
class RoundResult:
    round: int
    ran_s: float
    acked_xadds: int
    lost_xadds: int
    bad_fields: int
    ack_violations: int
    pending_violations: int
    last_id_regressions: int
    cut_bytes: int
    loss_window_ms: int = 0


def verify(port: int, ledger: Ledger, last_id_before: bytes) -> tuple[int, int, int, int, int, bytes]:
    r = redis.Redis(port=port, socket_timeout=30)
    present = {}
    start = "-"
    while True:
        chunk = r.xrange(STREAM, min=start, count=5000)
        if not chunk:
            break
        for sid, fields in chunk:
            present[sid] = fields
        start = "(" + chunk[-1][0].decode()
    lost = bad = 0
    lost_ms = []
    for sid, (name, seq) in ledger.added.items():
        f = present.get(sid)
        if f is None:
            lost += 1
            lost_ms.append(_id_key(sid)[0])
        elif f.get(b"producer") != name.encode() or f.get(b"seq") != str(seq).encode():
            bad += 1
    pending = set()
    start = "-"
    while True:
        rows = r.xpending_range(STREAM, GROUP, min=start, max="+", count=5000)
        if not rows:
            break
        pending.update(row["message_id"] for row in rows)
        start = "(" + rows[-1]["message_id"].decode()
    ack_viol = sum(1 for sid in ledger.acked if sid in pending)
    pend_viol = sum(1 for sid in ledger.delivered if sid not in ledger.ack_sent and sid not in pending
                    and sid in present)
    groups = {g["name"]: g for g in r.xinfo_groups(STREAM)}
    last = groups[GROUP.encode()]["last-delivered-id"]
    regress = int(_id_key(last) < _id_key(ledger.max_delivered)) + int(_id_key(last) < _id_key(last_id_before))
    window = 0
    if lost_ms:
        newest = max(_id_key(sid)[0] for sid in ledger.added)
        window = newest - min(lost_ms)
    return lost, bad, ack_viol, pend_viol, regress, last, window


def run(args) -> list[RoundResult]:
    rng = random.Random(args.seed)
    data_dir = args.dir or tempfile.mkdtemp(prefix="streamdb-crash-")
    if args.dir and os.path.exists(data_dir) and not args.keep:
        shutil.rmtree(data_dir)
    os.makedirs(data_dir, exist_ok=True)
    port = free_port()
    ledger = Ledger()
    results: list[RoundResult] = []
    cmd = [sys.executable, "-m", "streamdb", "--port", str(port), "--dir", data_dir,
           "--appendonly", "yes", "--appendfsync", args.fsync, "--save", "",
           "--aof-record-fsync", "yes" if args.power_loss else "no", "--loglevel", "warning"]
    last_id = b"0-0"
    log = open(os.path.join(data_dir, "server.log"), "ab")
    try:
        for rnd in range(1, args.rounds + 1):
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
            wait_until_ready(port, proc, timeout=60)
            r = redis.Redis(port=port)
            if rnd == 1:
                r.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
            else:
                res = verify(port, ledger, last_id)
                last_id = res[5]
                _record(results[-1], res)
                if results[-1].lost_xadds:
                    _forget_lost(ledger, port)
            stop = threading.Event()
            threads = [threading.Thread(target=_producer, args=(port, f"p{i}", ledger, stop, rnd * 10**7))
                       for i in range(args.producers)]
            threads += [threading.Thread(target=_consumer, args=(port, f"c{i}", ledger, stop))
                        for i in range(args.consumers)]
            for t in threads:
                t.start()
            ran = rng.uniform(args.min_seconds, args.max_seconds)
            time.sleep(ran)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            stop.set()
            for t in threads:
                t.join(10)
            cut = _power_cut(os.path.join(data_dir, "appendonlydir"), rng) if args.power_loss else 0
            results.append(RoundResult(rnd, ran, len(ledger.added), 0, 0, 0, 0, 0, cut))
            _progress(rnd, args.rounds)
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until_ready(port, proc, timeout=60)
            _record(results[-1], verify(port, ledger, last_id))
        finally:
            proc.terminate()
            proc.wait(30)
    finally:
        log.close()
        if not args.dir and not args.keep:
            shutil.rmtree(data_dir, ignore_errors=True)
    return results


def _record(result: RoundResult, res: tuple) -> None:
    (result.lost_xadds, result.bad_fields, result.ack_violations, result.pending_violations,
     result.last_id_regressions, _, result.loss_window_ms) = res


def _forget_lost(ledger: Ledger, port: int) -> None:
    """After a measured loss (everysec + power loss), later rounds compare against what survived."""
    r = redis.Redis(port=port)
    present = set()
    start = "-"
    while True:
        chunk = r.xrange(STREAM, min=start, count=5000)
        if not chunk:
            break
        present.update(sid for sid, _ in chunk)
        start = "(" + chunk[-1][0].decode()
    with ledger.lock:
        for sid in list(ledger.added):
            if sid not in present:
                del ledger.added[sid]
                ledger.delivered.pop(sid, None)
                ledger.acked.discard(sid)
                ledger.ack_sent.discard(sid)
        groups = {g["name"]: g for g in r.xinfo_groups(STREAM)}
        ledger.max_delivered = groups[GROUP.encode()]["last-delivered-id"]


def _progress(done: int, total: int) -> None:
    width = 30
    fill = int(width * done / total)
    sys.stderr.write(f"crash rounds [{'#' * fill}{'-' * (width - fill)}] {done}/{total}\n")
    sys.stderr.flush()


def print_table(results: list[RoundResult], fsync: str, power_loss: bool) -> None:
    hdr = ("round", "ran_s", "acked_xadds", "lost_xadds", "bad_fields", "ack_viol", "pending_viol",
           "lastid_regress", "cut_bytes", "loss_window_ms")
    print(f"crash test: appendfsync={fsync} power_loss={'yes' if power_loss else 'no'}")
    print(" | ".join(f"{h:>12}" for h in hdr))
    for r in results:
        print(" | ".join(f"{v:>12}" for v in (r.round, f"{r.ran_s:.2f}", r.acked_xadds, r.lost_xadds,
                                               r.bad_fields, r.ack_violations, r.pending_violations,
                                               r.last_id_regressions, r.cut_bytes, r.loss_window_ms)))
    tot = lambda attr: sum(getattr(r, attr) for r in results)
    print(f"TOTAL rounds={len(results)} acked_xadds={results[-1].acked_xadds if results else 0} "
          f"lost={tot('lost_xadds')} bad_fields={tot('bad_fields')} ack_violations={tot('ack_violations')} "
          f"pending_violations={tot('pending_violations')} lastid_regressions={tot('last_id_regressions')} "
          f"max_loss_window_ms={max((r.loss_window_ms for r in results), default=0)}")
    if fsync != "always":
        print("(under appendfsync everysec/no, losses of acknowledged writes within the fsync window "
              "are expected: they are measured here, not failures)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="streamdb-crashtest", description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--fsync", choices=["always", "everysec", "no"], default="always")
    ap.add_argument("--power-loss", action="store_true",
                    help="cut the AOF back to a random point after the last fsync before restarting")
    ap.add_argument("--producers", type=int, default=4)
    ap.add_argument("--consumers", type=int, default=3)
    ap.add_argument("--min-seconds", type=float, default=0.3)
    ap.add_argument("--max-seconds", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--dir", default=None, help="scratch data directory (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the data directory afterwards")
    args = ap.parse_args(argv)
    results = run(args)
    print_table(results, args.fsync, args.power_loss)
    failures = sum(r.bad_fields + r.ack_violations + r.pending_violations + r.last_id_regressions
                   for r in results)
    if args.fsync == "always":
        failures += sum(r.lost_xadds for r in results)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
