"""streamdb-crashtest: kill -9 a StreamDB under load, restart it, and check nothing acknowledged was lost.

    streamdb-crashtest --rounds 20 --fsync always
    streamdb-crashtest --rounds 20 --fsync everysec --power-loss

Each round starts the server on a scratch directory (the same one every round,
so the log keeps growing), runs producers (XADD) and group consumers
(XREADGROUP + XACK) for a random time, then SIGKILLs it.  With --power-loss
the server records its fsync boundaries and the tool cuts the last AOF
segment back to a random point after the last one before restarting: what a
power cut could leave behind.  Under ``appendfsync always`` the segment holds
durable zeros after its frames (``aof-preallocate``), and a power cut leaves
those: the bytes after the cut become zeros, or, as when the frames were
appended past the zeros, the file ends there (each round draws one of the two).
After every restart it verifies:

* the server starts on what was left (no corruption, nothing unreadable);
* every acknowledged XADD is present, with its fields;
* every acknowledged XACK holds (the entry is not pending);
* every delivered, not acknowledged entry is still pending;
* no group's last-delivered id moved backwards.

Under ``appendfsync always`` any loss is a failure.  Under ``everysec`` and
``no`` a power cut may lose acknowledged writes that were not fsynced yet: such
a loss is measured and reported (how many, and how far back before the cut it
reaches), not a failure, as long as every lost write was in the part of the log
written after the last fsync and, under ``everysec``, no older than 2 s (one
fsync a second, plus a slow fsync).  A lost write that had been fsynced, a
wrong field, or a server that does not start is a failure.  ``no`` has no time
bound: the OS decides when it writes back.

A round takes a server start-up (about half a second), the load time drawn
between --min-seconds and --max-seconds, and a verification; the defaults'
10 rounds take about 20-30 s.  Exit status 0 when nothing failed, 1 otherwise.
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
from redis.backoff import NoBackoff
from redis.retry import Retry

from ..persistence.aof import (SEGMENT_MAGIC, Manifest, frame_size, read_segment, segment_logical_size,
                               split_commands)
from .procs import free_port, wait_until_ready

STREAM = "crash:log"
GROUP = "crash-group"

# How far back before a power cut a lost acknowledged write may reach under each
# policy (None: no bound, the OS decides when it writes back).  everysec fsyncs
# once a second; a slow fsync can stretch that, as Redis documents ("up to 2 s").
LOSS_WINDOW_ALLOWED_MS = {"always": 0, "everysec": 2000, "no": None}


def _now_ms() -> float:
    return time.time() * 1000


def _client(port: int, timeout: float) -> redis.Redis:
    # No client-side retries: redis-py's default back-off (about 7 s in all)
    # would keep every load thread alive long after the SIGKILL, and the
    # round waiting for them.  A failed call ends the thread at once.
    return redis.Redis(port=port, socket_timeout=timeout, retry=Retry(NoBackoff(), 0))


@dataclass
class Ledger:
    """What clients were told.  Only acknowledged operations are recorded, with their times (unix ms)."""

    added: dict[bytes, tuple[str, int]] = field(default_factory=dict)   # id -> (producer, seq)
    delivered: dict[bytes, float] = field(default_factory=dict)        # id -> when
    acked: dict[bytes, float] = field(default_factory=dict)            # id -> when
    # XACKs sent but maybe not answered: applied or not, both are fine.
    ack_sent: set[bytes] = field(default_factory=set)
    max_delivered: bytes = b"0-0"
    max_delivered_ms: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)


def _id_key(sid: bytes) -> tuple[int, int]:
    ms, _, seq = sid.partition(b"-")
    return int(ms), int(seq)


def _producer(port: int, name: str, ledger: Ledger, stop: threading.Event, seq0: int) -> None:
    r = _client(port, 5)
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
    r = _client(port, 5)
    try:
        while not stop.is_set():
            got = r.xreadgroup(GROUP, name, {STREAM: ">"}, count=10, block=100)
            now = _now_ms()
            ids = [sid for _, entries in got or [] for sid, _ in entries]
            with ledger.lock:
                for sid in ids:
                    ledger.delivered[sid] = now
                    if _id_key(sid) > _id_key(ledger.max_delivered):
                        ledger.max_delivered, ledger.max_delivered_ms = sid, now
            to_ack = [sid for sid in ids if random.random() < 0.7]
            if to_ack:
                with ledger.lock:
                    ledger.ack_sent.update(to_ack)
                r.xack(STREAM, GROUP, *to_ack)
                now = _now_ms()
                with ledger.lock:
                    ledger.acked.update(dict.fromkeys(to_ack, now))
    except (redis.RedisError, OSError):
        pass


@dataclass
class PowerCut:
    """What a simulated power cut removed from the AOF."""

    cut_bytes: int = 0
    # Every argument of every command in a frame the cut removed (or tore): the
    # writes a power cut may take, because they came after the last fsync.
    unsynced_args: set[bytes] = field(default_factory=set)


def _last_segment(aof_dir: str) -> str | None:
    """The name of the segment the server appends to."""
    manifest = [n for n in os.listdir(aof_dir) if n.endswith(".manifest")]
    if not manifest:
        return None
    return Manifest.read(os.path.join(aof_dir, manifest[0])).incrs[-1]


def _record_durable(aof_dir: str, seg: str, offset: int) -> None:
    """Tell later cuts that ``seg`` is on disk up to ``offset`` (the server's fsync.log format)."""
    with open(os.path.join(aof_dir, "fsync.log"), "a", encoding="utf-8") as f:
        f.write(f"{seg} {offset}\n")


def _power_cut(aof_dir: str, rng: random.Random) -> PowerCut:
    """Cut the last segment back to a random point after its last durable offset.

    What comes after the cut point: zeros to the old end of the file (frames
    written over preallocated zeros that were durable: the zeros stay), or
    nothing (frames appended: the file ends at the cut)."""
    seg = _last_segment(aof_dir)
    if seg is None:
        return PowerCut()
    durable = len(SEGMENT_MAGIC)        # (fsynced before the manifest named the segment)
    with open(os.path.join(aof_dir, "fsync.log"), encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2 and parts[0] == seg:
                durable = max(durable, int(parts[1]))
    path = os.path.join(aof_dir, seg)
    with open(path, "rb") as f:
        data = f.read()
    scan = read_segment(data, path)
    if scan.end <= durable:          # (the zeros after the frames are not what a cut takes)
        return PowerCut()
    cut_to = rng.randint(durable, scan.end)
    cut = PowerCut(scan.end - cut_to)
    pos = len(SEGMENT_MAGIC)
    for body in scan.frames:
        end = pos + frame_size(body)
        if end > cut_to:
            for argv in split_commands(body):
                cut.unsynced_args.update(argv)
        pos = end
    with open(path, "r+b") as f:
        if rng.random() < 0.5:
            f.truncate(cut_to)
        else:
            f.seek(cut_to)
            f.write(bytes(len(data) - cut_to))
        f.flush()
        os.fsync(f.fileno())
    # What survived the cut is on disk: a later cut must not reach behind it.
    # (The restart cuts a torn last frame, so the durable end is the last whole one.)
    _record_durable(aof_dir, seg, read_segment(data[:cut_to], path).valid_end)
    return cut


@dataclass
class Check:
    """One verification after a restart: what the server no longer has of what clients were told."""

    lost_xadds: list[bytes]
    bad_fields: int
    undone_acks: list[bytes]          # acknowledged XACKs whose entry is pending again
    undone_deliveries: list[bytes]    # delivered, unacknowledged entries no longer pending
    last_id: bytes
    last_id_regressed: bool


@dataclass
class RoundResult:
    round: int
    ran_s: float
    acked_xadds: int                  # acknowledged during this round
    cut: PowerCut = field(default_factory=PowerCut)
    cut_ms: float = 0.0               # when the server was killed (unix ms)
    lost_xadds: int = 0
    bad_fields: int = 0
    ack_violations: int = 0
    pending_violations: int = 0
    last_id_regressions: int = 0
    loss_window_ms: int = 0           # how far back before the cut the oldest loss reaches
    failures: int = 0
    notes: list[str] = field(default_factory=list)


def _entries(r: redis.Redis) -> dict[bytes, dict]:
    present = {}
    start = "-"
    while True:
        chunk = r.xrange(STREAM, min=start, count=5000)
        if not chunk:
            return present
        for sid, fields in chunk:
            present[sid] = fields
        start = "(" + chunk[-1][0].decode()


def verify(port: int, ledger: Ledger, last_id_before: bytes) -> Check:
    r = _client(port, 30)
    present = _entries(r)
    lost, bad = [], 0
    for sid, (name, seq) in ledger.added.items():
        f = present.get(sid)
        if f is None:
            lost.append(sid)
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
    undone_acks = [sid for sid in ledger.acked if sid in pending]
    undone_deliveries = [sid for sid in ledger.delivered
                         if sid not in ledger.ack_sent and sid not in pending and sid in present]
    groups = {g["name"]: g for g in r.xinfo_groups(STREAM)}
    last = groups[GROUP.encode()]["last-delivered-id"]
    regressed = _id_key(last) < _id_key(ledger.max_delivered) or _id_key(last) < _id_key(last_id_before)
    return Check(lost, bad, undone_acks, undone_deliveries, last, regressed)


def judge(result: RoundResult, check: Check, ledger: Ledger, fsync: str) -> None:
    """Record ``check`` in ``result``: which losses the policy allows, and which are failures."""
    result.lost_xadds = len(check.lost_xadds)
    result.bad_fields = check.bad_fields
    result.ack_violations = len(check.undone_acks)
    result.pending_violations = len(check.undone_deliveries)
    result.last_id_regressions = int(check.last_id_regressed)
    # Every loss with the time it was acknowledged.
    losses = ([(sid, _id_key(sid)[0]) for sid in check.lost_xadds]
              + [(sid, ledger.acked[sid]) for sid in check.undone_acks]
              + [(sid, ledger.delivered[sid]) for sid in check.undone_deliveries])
    if check.last_id_regressed:
        losses.append((ledger.max_delivered, ledger.max_delivered_ms))
    result.failures = check.bad_fields
    if check.bad_fields:
        result.notes.append(f"{check.bad_fields} entries came back with other fields")
    if not losses:
        return
    result.loss_window_ms = max(int(result.cut_ms - min(when for _, when in losses)), 0)
    allowed = LOSS_WINDOW_ALLOWED_MS[fsync]
    if fsync == "always" or not result.cut.cut_bytes:
        result.failures += len(losses)
        result.notes.append(f"lost {len(losses)} acknowledged writes under appendfsync {fsync}"
                            + ("" if result.cut.cut_bytes else " after a kill -9 (no power cut)"))
        return
    fsynced = [sid for sid, _ in losses if sid not in result.cut.unsynced_args]
    if fsynced:
        result.failures += len(fsynced)
        result.notes.append(f"lost {len(fsynced)} acknowledged writes that had been fsynced "
                            f"(e.g. {fsynced[0].decode()})")
    if allowed is not None and result.loss_window_ms > allowed:
        result.failures += 1
        result.notes.append(f"lost writes reach {result.loss_window_ms / 1000:.2f} s before the cut: "
                            f"beyond appendfsync {fsync}'s {allowed / 1000:.0f} s")


def reconcile(ledger: Ledger, check: Check) -> None:
    """After a round, later rounds compare against what survived (each loss is counted once)."""
    with ledger.lock:
        for sid in check.lost_xadds:
            del ledger.added[sid]
            ledger.delivered.pop(sid, None)
            ledger.acked.pop(sid, None)
            ledger.ack_sent.discard(sid)
        for sid in check.undone_acks:          # pending again, as if never acknowledged
            del ledger.acked[sid]
            ledger.ack_sent.discard(sid)
        # Entries after the group's restored last-delivered id were not delivered
        # as far as the server knows (their XREADGROUP was lost): they will be
        # delivered again, and an XACK of theirs is gone with it.
        for sid in [sid for sid in ledger.delivered if _id_key(sid) > _id_key(check.last_id)]:
            del ledger.delivered[sid]
            ledger.acked.pop(sid, None)
            ledger.ack_sent.discard(sid)
        for sid in check.undone_deliveries:
            ledger.delivered.pop(sid, None)
        ledger.max_delivered, ledger.max_delivered_ms = check.last_id, 0.0


class ServerDidNotStart(Exception):
    pass


def _start(cmd: list[str], log, port: int) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        # Polls PING every 50 ms: the load starts as soon as the server answers.
        wait_until_ready(port, proc, timeout=60)
    except (RuntimeError, TimeoutError) as e:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        raise ServerDidNotStart(str(e)) from None
    return proc


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
    keep = args.keep
    log = open(os.path.join(data_dir, "server.log"), "ab")
    try:
        for rnd in range(1, args.rounds + 2):
            try:
                proc = _start(cmd, log, port)
            except ServerDidNotStart as e:
                if not results:
                    raise
                results[-1].failures += 1
                results[-1].notes.append(f"the server did not start on what was left ({e}): "
                                         f"see {os.path.join(data_dir, 'server.log')}")
                keep = True
                break
            if rnd == 1:
                redis.Redis(port=port).xgroup_create(STREAM, GROUP, id="0", mkstream=True)
                if args.power_loss:
                    # The set-up is not under test: a cut must not take the stream
                    # and its group away before the first fsync.
                    aof_dir = os.path.join(data_dir, "appendonlydir")
                    seg = _last_segment(aof_dir)
                    _record_durable(aof_dir, seg, segment_logical_size(os.path.join(aof_dir, seg)))
            else:
                check = verify(port, ledger, last_id)
                judge(results[-1], check, ledger, args.fsync)
                reconcile(ledger, check)
                last_id = check.last_id
            if rnd > args.rounds:       # the last start only verifies
                proc.terminate()
                proc.wait(30)
                break
            results.append(_load_and_kill(rnd, proc, port, ledger, rng, args))
            if args.power_loss:
                results[-1].cut = _power_cut(os.path.join(data_dir, "appendonlydir"), rng)
            _progress(rnd, args.rounds)
    finally:
        log.close()
        if not args.dir and not keep:
            shutil.rmtree(data_dir, ignore_errors=True)
    return results


def _load_and_kill(rnd: int, proc: subprocess.Popen, port: int, ledger: Ledger, rng: random.Random,
                   args) -> RoundResult:
    acked_before = len(ledger.added)
    stop = threading.Event()
    threads = [threading.Thread(target=_producer, args=(port, f"p{i}", ledger, stop, rnd * 10**7))
               for i in range(args.producers)]
    threads += [threading.Thread(target=_consumer, args=(port, f"c{i}", ledger, stop))
                for i in range(args.consumers)]
    for t in threads:
        t.start()
    ran = rng.uniform(args.min_seconds, args.max_seconds)
    time.sleep(ran)
    cut_ms = _now_ms()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    stop.set()
    for t in threads:
        t.join(10)
    return RoundResult(rnd, ran, len(ledger.added) - acked_before, cut_ms=cut_ms)


def _progress(done: int, total: int) -> None:
    width = 30
    fill = int(width * done / total)
    sys.stderr.write(f"crash rounds [{'#' * fill}{'-' * (width - fill)}] {done}/{total}\n")
    sys.stderr.flush()


def print_table(results: list[RoundResult], fsync: str, power_loss: bool) -> None:
    hdr = ("round", "ran_s", "acked_xadds", "lost_xadds", "bad_fields", "ack_viol", "pending_viol",
           "lastid_regress", "cut_bytes", "loss_window_ms", "failures")
    print(f"crash test: appendfsync={fsync} power_loss={'yes' if power_loss else 'no'}")
    print(" | ".join(f"{h:>12}" for h in hdr))
    for r in results:
        print(" | ".join(f"{v:>12}" for v in (r.round, f"{r.ran_s:.2f}", r.acked_xadds, r.lost_xadds,
                                               r.bad_fields, r.ack_violations, r.pending_violations,
                                               r.last_id_regressions, r.cut.cut_bytes, r.loss_window_ms,
                                               r.failures)))
    tot = lambda attr: sum(getattr(r, attr) for r in results)
    window = max((r.loss_window_ms for r in results), default=0)
    print(f"TOTAL rounds={len(results)} acked_xadds={tot('acked_xadds')} "
          f"lost={tot('lost_xadds')} bad_fields={tot('bad_fields')} ack_violations={tot('ack_violations')} "
          f"pending_violations={tot('pending_violations')} lastid_regressions={tot('last_id_regressions')} "
          f"max_loss_window_ms={window} failures={tot('failures')}")
    for r in results:
        for note in r.notes:
            print(f"FAILURE round {r.round}: {note}")
    lost = tot("lost_xadds") + tot("ack_violations") + tot("pending_violations") + tot("last_id_regressions")
    allowed = LOSS_WINDOW_ALLOWED_MS[fsync]
    if fsync != "always" and not tot("failures"):
        bound = f"up to ~{allowed / 1000:.0f} s" if allowed else "whatever the OS had not written back"
        print(f"lost {tot('lost_xadds')} acknowledged XADDs (and {lost - tot('lost_xadds')} XACKs, "
              f"deliveries and last-id moves), the last {window / 1000:.2f} s before the cut at most, "
              f"all written after the last fsync: appendfsync {fsync} allows {bound}")


def main(argv: list[str] | None = None) -> int:
    class Help(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
        pass

    ap = argparse.ArgumentParser(prog="streamdb-crashtest", description=__doc__.split("\n\n", 1)[1],
                                 formatter_class=Help)
    ap.add_argument("--rounds", type=int, default=10, help="kill -9 rounds")
    ap.add_argument("--fsync", choices=["always", "everysec", "no"], default="always",
                    help="the server's appendfsync")
    ap.add_argument("--power-loss", action="store_true",
                    help="cut the AOF back to a random point after the last fsync before restarting")
    ap.add_argument("--producers", type=int, default=4, help="XADD client threads")
    ap.add_argument("--consumers", type=int, default=3, help="XREADGROUP + XACK client threads")
    ap.add_argument("--min-seconds", type=float, default=0.3, help="shortest load before the kill")
    ap.add_argument("--max-seconds", type=float, default=2.0, help="longest load before the kill")
    ap.add_argument("--seed", type=int, default=None, help="random seed (rounds' lengths and cuts)")
    ap.add_argument("--dir", default=None, help="scratch data directory (default: a temporary one)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the data directory afterwards (always kept when the server did not start)")
    args = ap.parse_args(argv)
    results = run(args)
    print_table(results, args.fsync, args.power_loss)
    return 1 if sum(r.failures for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
