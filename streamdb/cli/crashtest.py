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
* no group's last-delivered id moved backwards;
* a second group, with a dead-letter policy (MAXDELIVERIES 1, to crash:dlq) and a
  consumer that fails every entry, has each entry it was given either pending or
  in the dead-letter stream, never both, never twice (a dead-lettering and its
  acknowledgement are one step: a kill or a cut keeps both or neither).

Under ``appendfsync always`` any loss is a failure.  Under ``everysec`` and
``no`` a power cut may lose acknowledged writes that were not fsynced yet: such
a loss is measured and reported (how many, and how far back before the cut it
reaches), not a failure, as long as every lost write was in the part of the log
written after the last fsync and, under ``everysec``, no older than 2 s (one
fsync a second, plus a slow fsync).  A lost write that had been fsynced, a
wrong field, or a server that does not start is a failure.  ``no`` has no time
bound: the OS decides when it writes back.

With --faults (root only: exit status 2 otherwise) the server's data lives on a
tmpfs of --fault-disk that the tool mounts, and every round goes through a fault
episode under load, each kind once in every three rounds in a random order:

* disk-full: a filler file takes every free byte (and what the server frees
  while it lasts); BGSAVE and BGREWRITEAOF are requested during it at random;
* fork-failure: the server is moved into a pids cgroup whose pids.max is the
  number of its threads, so fork() fails; BGSAVE and BGREWRITEAOF are requested;
* both at once.

Each round first writes a few entries to a stream no one writes again
(crash:cold:<round>): a snapshot after a failed one must still hold them.  The
kill comes at a random moment in the episode or after it (then the fault is
lifted first, a BGSAVE is requested, and sometimes a BGREWRITEAOF after it, as an
operator would, and the load runs on for a while).  The restart always finds the disk freed and forks allowed.  A
write refused with MISCONF, or whose reply never came, was not acknowledged and
is not verified; every acknowledged one is, as above, under every fsync policy
(no power is cut).  A table per kind of fault follows the rounds: episodes,
BGSAVE/BGREWRITEAOF replies, writes acknowledged and lost, whether writes were
acknowledged again between the lift and the kill, MISCONF replies, replies held
over 1 s, restarts and the verdict.  A loss is traced in the AOF
files as the kill left them (kept under the --dir).  The mount and the cgroup
are removed at the end, on Ctrl-C and on SIGTERM too.

With --failover the rounds run under Redis Sentinel instead: a primary, two
replicas and three Sentinels, the primary killed each round, and every XADD that
WAITAOF 1 1 confirmed checked on the new primary (see crashfailover.py).

A round takes a server start-up (about half a second), the load time drawn
between --min-seconds and --max-seconds, and a verification; the defaults'
10 rounds take about 20-30 s (with --faults about 40-60 s).  Exit status 0
when nothing failed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
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

from ..persistence.aof import (SEGMENT_MAGIC, AofCorruption, AofError, Manifest, frame_size, read_segment,
                               segment_logical_size, split_commands)
from ..config import ConfigError, parse_memory
from .faults import DISK_FULL, KINDS, Faults, FaultSetupError
from .crashfailover import FailoverSetupError, print_failover_table, run_failover
from .crashload import (DEAD_LETTERS, DLQ_GROUP, GROUP, HELD_AFTER_S, STREAM, Ledger,
                        ServerDidNotStart, _client, _consumer, _entries, _failing_consumer,
                        _id_key, _now_ms, _producer, _start)
from .procs import free_port

# --faults: each round first writes a few entries to a stream of its own that no
# one writes again (crash:cold:<round>).  A snapshot writes only the keys changed
# since the last one: if a failed one forgot what it had taken, the next one
# leaves these out, and they are lost once it retires the AOF that held them.
COLD_STREAM = "crash:cold"
COLD_ENTRIES = 5

# How far back before a power cut a lost acknowledged write may reach under each
# policy (None: no bound, the OS decides when it writes back).  everysec fsyncs
# once a second; a slow fsync can stretch that, as Redis documents ("up to 2 s").
LOSS_WINDOW_ALLOWED_MS = {"always": 0, "everysec": 2000, "no": None}
# --faults: the server's aof-preallocate (small: a full disk must reach the AOF's
# appends within an episode, not after 16 MiB of zeros), the background jobs an
# episode requests, the mark of those the operator requests after it, and where
# the AOF as the last kill left it is kept (off the fault disk).
FAULT_PREALLOCATE = "64kb"
BACKGROUND_JOBS = ("BGSAVE", "BGREWRITEAOF")
AFTER = " (after the episode)"
AOF_AT_KILL = "aof-at-kill"


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
    lost_cold: list[tuple[bytes, bytes]] = field(default_factory=list)   # (cold stream, id)
    # DLQ_GROUP: entries it was given that are neither pending nor dead-lettered, and
    # ones that are both or dead-lettered twice; how many dead letters there are.
    dlq_lost: list[bytes] = field(default_factory=list)
    dlq_duplicated: list[bytes] = field(default_factory=list)
    dead_letters: int = 0


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
    dlq_violations: int = 0           # DLQ_GROUP's entries lost or duplicated (Check.dlq_*)
    dead_letters: int = 0             # what DEAD_LETTERS held at the check after this round
    loss_window_ms: int = 0           # how far back before the cut the oldest loss reaches
    failures: int = 0
    notes: list[str] = field(default_factory=list)      # why it failed
    # --faults: the episode, and what clients and the server did during it.
    fault: str = ""
    killed_in_episode: bool = False
    acked_at_lift: int | None = None  # ledger.added's size when the fault was lifted (killed after it)
    resumed: bool = False             # a write was acknowledged between the lift and the kill
    misconf: int = 0                  # writes refused with MISCONF during the round
    held: int = 0                     # replies held HELD_AFTER_S or more
    background: list[tuple[str, str]] = field(default_factory=list)   # (BGSAVE..., its reply)
    exited_by_itself: bool = False    # the server was gone before the kill
    restarted: bool = False           # the next start succeeded on what the round left
    events: list[str] = field(default_factory=list)     # what happened that is not a failure


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
    pending = _pending_ids(r, GROUP)
    undone_acks = [sid for sid in ledger.acked if sid in pending]
    undone_deliveries = [sid for sid in ledger.delivered
                         if sid not in ledger.ack_sent and sid not in pending and sid in present]
    groups = {g["name"]: g for g in r.xinfo_groups(STREAM)}
    last = groups[GROUP.encode()]["last-delivered-id"]
    regressed = _id_key(last) < _id_key(ledger.max_delivered) or _id_key(last) < _id_key(last_id_before)
    lost_cold = []
    for key, ids in ledger.cold.items():
        there = {sid for sid, _ in r.xrange(key)}
        lost_cold += [(key, sid) for sid in ids if sid not in there]
    check = Check(lost, bad, undone_acks, undone_deliveries, last, regressed, lost_cold)
    _verify_dead_letters(r, present, groups[DLQ_GROUP.encode()]["last-delivered-id"], check)
    return check


def _pending_ids(r: redis.Redis, group: str) -> set[bytes]:
    pending = set()
    start = "-"
    while True:
        rows = r.xpending_range(STREAM, group, min=start, max="+", count=5000)
        if not rows:
            return pending
        pending.update(row["message_id"] for row in rows)
        start = "(" + rows[-1]["message_id"].decode()


def _verify_dead_letters(r: redis.Redis, present: dict, last_given: bytes, check: Check) -> None:
    """DLQ_GROUP after the restart: every entry of the stream up to the group's
    last-delivered id (it was given to the failing consumer, which acknowledges
    nothing) is pending in the group or in DEAD_LETTERS, exactly once."""
    pending = _pending_ids(r, DLQ_GROUP)
    letters = [fields[b"dlq-id"] for fields in _entries(r, DEAD_LETTERS).values()]
    check.dead_letters = len(letters)
    seen = set()
    for sid in letters:
        if sid in seen or sid in pending:
            check.dlq_duplicated.append(sid)
        seen.add(sid)
    top = _id_key(last_given)
    check.dlq_lost = [sid for sid in present
                      if _id_key(sid) <= top and sid not in pending and sid not in seen]


def judge(result: RoundResult, check: Check, ledger: Ledger, fsync: str) -> None:
    """Record ``check`` in ``result``: which losses the policy allows, and which are failures."""
    result.lost_xadds = len(check.lost_xadds) + len(check.lost_cold)
    result.bad_fields = check.bad_fields
    result.ack_violations = len(check.undone_acks)
    result.pending_violations = len(check.undone_deliveries)
    result.last_id_regressions = int(check.last_id_regressed)
    result.dlq_violations = len(check.dlq_lost) + len(check.dlq_duplicated)
    result.dead_letters = check.dead_letters
    # Every loss with the time it was acknowledged.
    losses = ([(sid, _id_key(sid)[0]) for sid in check.lost_xadds]
              + [(sid, _id_key(sid)[0]) for _, sid in check.lost_cold]
              + [(sid, ledger.acked[sid]) for sid in check.undone_acks]
              + [(sid, ledger.delivered[sid]) for sid in check.undone_deliveries])
    if check.last_id_regressed:
        losses.append((ledger.max_delivered, ledger.max_delivered_ms))
    # Under any fsync policy: a cut keeps a dead-lettering's XADD and XACK or neither.
    result.failures = check.bad_fields + result.dlq_violations
    if check.bad_fields:
        result.notes.append(f"{check.bad_fields} entries came back with other fields")
    for what, ids in (("neither pending nor dead-lettered", check.dlq_lost),
                      ("pending and dead-lettered, or dead-lettered twice", check.dlq_duplicated)):
        if ids:
            result.notes.append(f"{len(ids)} entries of {DLQ_GROUP} are {what} "
                                f"(e.g. {ids[0].decode()})")
    if check.lost_cold:
        key, sid = check.lost_cold[0]
        result.notes.append(f"{len(check.lost_cold)} of the losses are entries of streams written only at a "
                            f"round's start (e.g. {key.decode()} {sid.decode()})")
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
        for key, sid in check.lost_cold:
            ledger.cold[key].remove(sid)
        ledger.max_delivered, ledger.max_delivered_ms = check.last_id, 0.0


def _log_tail(path: str, lines: int = 8) -> str:
    with open(path, "rb") as f:
        f.seek(max(os.fstat(f.fileno()).st_size - 8192, 0))
        tail = f.read().decode("utf-8", "replace").splitlines()[-lines:]
    return "\n    ".join(tail)


def _scratch_dir(args, prefix: str) -> str:
    """--dir (emptied first unless --keep), or a new temporary directory named ``prefix``..."""
    scratch = args.dir or tempfile.mkdtemp(prefix=prefix)
    if args.dir and os.path.exists(scratch) and not args.keep:
        shutil.rmtree(scratch)
    os.makedirs(scratch, exist_ok=True)
    return scratch


def run(args) -> list[RoundResult]:
    """The rounds; ``args.faults`` runs each round through a fault episode on a tmpfs
    (raises FaultSetupError when the faults cannot be set up)."""
    rng = random.Random(args.seed)
    scratch = _scratch_dir(args, "streamdb-crash-")
    results: list[RoundResult] = []
    keep = args.keep
    try:
        with contextlib.ExitStack() as stack:
            faults = None
            data_dir = scratch
            if args.faults:
                faults = stack.enter_context(Faults(os.path.join(scratch, "disk"), args.fault_disk,
                                                    f"streamdb-crashtest-{os.getpid()}"))
                data_dir = faults.disk.mountpoint
            keep = _rounds(args, rng, scratch, data_dir, faults, results) or keep
    finally:
        if not args.dir and not keep:
            shutil.rmtree(scratch, ignore_errors=True)
    return results


def _rounds(args, rng: random.Random, scratch: str, data_dir: str, faults: Faults | None,
            results: list[RoundResult]) -> bool:
    """Run the rounds into ``results``; True when the scratch directory must be kept
    (a failure left files to look at)."""
    port = free_port()
    ledger = Ledger()
    aof_dir = os.path.join(data_dir, "appendonlydir")
    log_path = os.path.join(scratch, "server.log")      # (off the fault disk: it must not fill)
    cmd = [sys.executable, "-m", "streamdb", "--port", str(port), "--dir", data_dir,
           "--appendonly", "yes", "--appendfsync", args.fsync, "--save", "",
           "--aof-record-fsync", "yes" if args.power_loss else "no", "--loglevel", "warning"]
    if faults:
        # A save rule, so that a failed BGSAVE refuses writes (stop-writes-on-bgsave-error)
        # as on a server with save rules.
        cmd += ["--save", "3600 1", "--aof-preallocate", FAULT_PREALLOCATE]
    last_id = b"0-0"
    keep = False
    proc = None
    episodes: list[str] = []
    log = open(log_path, "ab")
    try:
        for rnd in range(1, args.rounds + 2):
            try:
                proc = _start(cmd, log, port)
            except ServerDidNotStart as e:
                if not results:
                    raise
                log.flush()
                results[-1].failures += 1
                results[-1].notes.append(f"the server did not start on what was left ({e}); "
                                         f"the end of {log_path}:\n    {_log_tail(log_path)}")
                return True
            if rnd == 1:
                r = redis.Redis(port=port)
                r.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
                r.xgroup_create(STREAM, DLQ_GROUP, id="0")
                r.execute_command("STREAMDB.GROUP", "SET", STREAM, DLQ_GROUP, "MAXDELIVERIES", 1,
                                  "DEADLETTER", DEAD_LETTERS)
                r.close()
                if args.power_loss:
                    # The set-up is not under test: a cut must not take the stream
                    # and its group away before the first fsync.
                    seg = _last_segment(aof_dir)
                    _record_durable(aof_dir, seg, segment_logical_size(os.path.join(aof_dir, seg)))
                if faults:
                    # A snapshot to start from, as on a server that ran a while: the
                    # snapshots after it write only what changed (see COLD_STREAM).
                    _background(port, ["BGSAVE"], RoundResult(0, 0.0, 0), wait=True).join(70)
            else:
                results[-1].restarted = True
                check = verify(port, ledger, last_id)
                judge(results[-1], check, ledger, args.fsync)
                if faults and (check.lost_xadds or check.lost_cold):
                    keep = True
                    _trace_losses(results[-1], check, scratch)
                reconcile(ledger, check)
                last_id = check.last_id
            if rnd > args.rounds:       # the last start only verifies
                proc.terminate()
                proc.wait(30)
                break
            if faults and not episodes:
                episodes = rng.sample(KINDS, len(KINDS))     # each kind once in every three rounds
            results.append(_load_and_kill(rnd, proc, port, ledger, rng, args, faults,
                                          episodes.pop() if faults else ""))
            if faults and results[-1].exited_by_itself:
                log.flush()
                results[-1].events.append(f"the server exited by itself (code {proc.returncode}) during the "
                                          f"{results[-1].fault} episode; the end of {log_path}:\n    "
                                          f"{_log_tail(log_path)}")
            if args.power_loss:
                results[-1].cut = _power_cut(aof_dir, rng)
            if faults:
                _copy_aof_at_kill(aof_dir, scratch)
            _progress(rnd, args.rounds)
    finally:
        if proc is not None and proc.poll() is None:      # (interrupted: the disk cannot unmount under it)
            proc.kill()
            proc.wait()
        log.close()
    return keep


def _copy_aof_at_kill(aof_dir: str, scratch: str) -> None:
    """Keep, off the fault disk, the AOF as the kill left it: the evidence for a loss the restart reports."""
    copy = os.path.join(scratch, AOF_AT_KILL)
    shutil.rmtree(copy, ignore_errors=True)
    if os.path.isdir(aof_dir):
        shutil.copytree(aof_dir, copy)


def _trace_losses(result: RoundResult, check: Check, scratch: str) -> None:
    """Say where the lost XADDs were when the server was killed: in an XADD of the
    AOF files (written, but the start-up did not load it) or in none (acknowledged,
    yet never written).  The files are kept as aof-at-kill-round<N>."""
    copy = os.path.join(scratch, AOF_AT_KILL)
    if not os.path.isdir(copy):
        return
    kept = f"{copy}-round{result.round}"
    os.rename(copy, kept)
    written = set()
    for name in sorted(os.listdir(kept)):
        if name.endswith(".aof"):
            with open(os.path.join(kept, name), "rb") as f:
                written |= _xadd_ids(f.read(), name)
    lost = check.lost_xadds + [sid for _, sid in check.lost_cold]
    in_files = sum(1 for sid in lost if sid in written)
    result.notes.append(f"of the {len(lost)} lost XADDs (e.g. {lost[0].decode()}), the AOF files the kill "
                        f"left hold {in_files} and not the other {len(lost) - in_files}: see {kept}")


def _xadd_ids(data: bytes, name: str) -> set[bytes]:
    """The ids of the XADDs in a segment's whole frames (up to a bad one)."""
    try:
        frames = read_segment(data, name).frames
    except AofCorruption as e:          # what comes before the bad frame still counts
        frames = e.scan.frames
    except AofError:                    # not a segment at all
        frames = []
    return {argv[2] for body in frames for argv in split_commands(body)
            if len(argv) > 2 and argv[0].upper() == b"XADD"}


def _load_and_kill(rnd: int, proc: subprocess.Popen, port: int, ledger: Ledger, rng: random.Random,
                   args, faults: Faults | None = None, fault: str = "") -> RoundResult:
    """A round's load, through an episode of ``fault`` with ``faults``, and its SIGKILL.

    With ``faults`` the episode is lifted once the server is dead: the restart
    finds the disk freed and forks allowed."""
    if faults is not None:
        _write_cold_stream(port, rnd, ledger)
    acked_before, misconf_before, held_before = len(ledger.added), ledger.misconf, ledger.held
    stop = threading.Event()
    connect = lambda: _client(port, 5)     # noqa: E731
    threads = [threading.Thread(target=_producer, args=(connect, f"p{i}", ledger, stop, rnd * 10**7),
                                daemon=True) for i in range(args.producers)]
    threads += [threading.Thread(target=_consumer, args=(connect, f"c{i}", ledger, stop), daemon=True)
                for i in range(args.consumers)]
    threads.append(threading.Thread(target=_failing_consumer, args=(connect, ledger, stop), daemon=True))
    for t in threads:
        t.start()
    result = RoundResult(rnd, 0.0, 0, fault=fault)
    started = time.monotonic()
    if faults is None:
        time.sleep(rng.uniform(args.min_seconds, args.max_seconds))
    else:
        threads += _fault_episode(result, proc, port, faults, ledger, rng, args)
    result.ran_s = time.monotonic() - started
    result.cut_ms = _now_ms()
    result.exited_by_itself = proc.poll() is not None
    if not result.exited_by_itself:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    if faults is not None:
        faults.lift()
    stop.set()
    for t in threads:
        t.join(10)
    with ledger.lock:
        result.resumed = result.acked_at_lift is not None and len(ledger.added) > result.acked_at_lift
        result.acked_xadds = len(ledger.added) - acked_before
        result.misconf = ledger.misconf - misconf_before
        result.held = ledger.held - held_before
    return result


def _write_cold_stream(port: int, rnd: int, ledger: Ledger) -> None:
    """The round's COLD_STREAM, written before the load starts and never again."""
    key = f"{COLD_STREAM}:{rnd}".encode()
    r = _client(port, 5)
    try:
        ledger.cold[key] = [r.xadd(key, {"round": rnd, "n": n}) for n in range(COLD_ENTRIES)]
    finally:
        r.close()


def _fault_episode(result: RoundResult, proc: subprocess.Popen, port: int, faults: Faults, ledger: Ledger,
                   rng: random.Random, args) -> list[threading.Thread]:
    """The middle of a --faults round, under load: an episode of ``result.fault``, with
    BGSAVE and BGREWRITEAOF requested during it (always under a fork failure, each
    at random on a full disk), and a return at the moment of the kill: in the
    episode (the fault still on) or after it, once lifted and the load has run again.

    Returns the threads of the requests, for the caller to join after the kill."""
    time.sleep(rng.uniform(0.1, 0.5))           # the load runs a while without the fault
    hold = rng.uniform(args.min_seconds, args.max_seconds)
    kill_in_episode = rng.random() < 0.5
    ends = rng.uniform(min(0.2, hold), hold) if kill_in_episode else hold
    jobs = [job for job in BACKGROUND_JOBS if result.fault != DISK_FULL or rng.random() < 0.5]
    rng.shuffle(jobs)
    due = sorted(rng.uniform(0, ends * 0.5) for _ in jobs)    # (sent before the kill, whenever it comes)
    threads = []
    try:
        faults.inject(result.fault, proc.pid)
    except ProcessLookupError:                 # the server is gone already
        return threads
    began = time.monotonic()
    while (now := time.monotonic()) - began < ends and proc.poll() is None:
        while jobs and now - began >= due[0]:
            due.pop(0)
            threads.append(_background(port, [jobs.pop(0)], result))
        faults.keep_on()
        time.sleep(0.05)
    result.killed_in_episode = kill_in_episode
    if not kill_in_episode:
        faults.lift()
        with ledger.lock:
            result.acked_at_lift = len(ledger.added)
        # What an operator does once the cause is fixed: a snapshot (a failed one
        # refuses writes until one succeeds), sometimes a rewrite too.  Both start
        # by rotating the AOF after the failed attempts: what those left behind
        # (dirty keys, segments) must still be right.
        after = ["BGSAVE", "BGREWRITEAOF"] if rng.random() < 0.5 else ["BGSAVE"]
        operator = _background(port, after, result, AFTER, wait=True)
        threads.append(operator)
        if rng.random() < 0.5:      # the kill after the recovery, not during it
            operator.join(70)
        time.sleep(rng.uniform(0.1, args.max_seconds))
    return threads


# The INFO persistence field that is 1 while a job's child runs.
IN_PROGRESS = {"BGSAVE": "rdb_bgsave_in_progress", "BGREWRITEAOF": "aof_rewrite_in_progress"}


def _background(port: int, jobs: list[str], result: RoundResult, mark: str = "",
                wait: bool = False) -> threading.Thread:
    """Request ``jobs`` (BGSAVE, BGREWRITEAOF) one after the other from a thread of
    its own (a reply may be held), recording each reply in ``result.background``
    with ``mark`` after the job's name.  ``wait``: each job's child has ended
    (INFO persistence, polled for up to 30 s) before the next job, and the thread."""
    def request() -> None:
        r = _client(port, 30)
        try:
            for job in jobs:
                try:
                    reply = r.execute_command(job)
                    outcome = reply.decode() if isinstance(reply, bytes) else str(reply)
                except redis.ResponseError as e:
                    outcome = f"-{e}"
                except redis.TimeoutError:
                    outcome = "(held past 30 s)"
                result.background.append((job + mark, outcome))
                deadline = time.monotonic() + 30
                while wait and r.info("persistence").get(IN_PROGRESS[job]) and time.monotonic() < deadline:
                    time.sleep(0.05)
        except (redis.RedisError, OSError):
            pass            # the server was killed first
        finally:
            r.close()

    t = threading.Thread(target=request, daemon=True)
    t.start()
    return t


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
          f"dead_letters={results[-1].dead_letters if results else 0} "
          f"dlq_violations={tot('dlq_violations')} "
          f"max_loss_window_ms={window} failures={tot('failures')}")
    for r in results:
        for note in r.notes:
            print(f"FAILURE round {r.round}: {note}")
        for event in r.events:
            print(f"round {r.round}: {event}")
    lost = tot("lost_xadds") + tot("ack_violations") + tot("pending_violations") + tot("last_id_regressions")
    allowed = LOSS_WINDOW_ALLOWED_MS[fsync]
    if fsync != "always" and not tot("failures"):
        bound = f"up to ~{allowed / 1000:.0f} s" if allowed else "whatever the OS had not written back"
        print(f"lost {tot('lost_xadds')} acknowledged XADDs (and {lost - tot('lost_xadds')} XACKs, "
              f"deliveries and last-id moves), the last {window / 1000:.2f} s before the cut at most, "
              f"all written after the last fsync: appendfsync {fsync} allows {bound}")


FAULT_COLUMNS = ("fault", "episodes", "killed_in", "killed_after", "resumed", "bg_started", "bg_refused",
                 "acked_xadds", "lost_writes", "lastid_regress", "misconf", "held", "exited",
                 "restarts", "verdict")


def fault_rows(results: list[RoundResult]) -> list[dict[str, object]]:
    """One row per kind of fault, then the total: the table --faults prints."""
    rows = []
    for kind in (*KINDS, "total"):
        rs = [r for r in results if kind in ("total", r.fault)]
        replies = [reply for r in rs for cmd, reply in r.background if not cmd.endswith(AFTER)]
        rows.append({
            "fault": kind, "episodes": len(rs),
            "killed_in": sum(r.killed_in_episode for r in rs),
            "killed_after": sum(not r.killed_in_episode for r in rs),
            "resumed": sum(r.resumed for r in rs),
            "bg_started": sum(not reply.startswith(("-", "(")) for reply in replies),
            "bg_refused": sum(reply.startswith("-") for reply in replies),
            "acked_xadds": sum(r.acked_xadds for r in rs),
            "lost_writes": sum(r.lost_xadds + r.ack_violations + r.pending_violations for r in rs),
            "lastid_regress": sum(r.last_id_regressions for r in rs),
            "misconf": sum(r.misconf for r in rs), "held": sum(r.held for r in rs),
            "exited": sum(r.exited_by_itself for r in rs),
            "restarts": sum(r.restarted for r in rs),
            "verdict": "FAIL" if any(r.failures for r in rs) else "ok"})
    return rows


def print_fault_table(results: list[RoundResult], disk_size: int) -> None:
    print(f"\nfaults: {len(results)} rounds on a {disk_size / 1e6:.0f} MB tmpfs")
    print("(lost_writes: acknowledged XADDs, XACKs and deliveries the restart did not have; resumed: rounds "
          "killed after the episode that had a write acknowledged between the lift and the kill; held: "
          f"replies that took {HELD_AFTER_S:.0f} s or more)")
    rows = fault_rows(results)
    widths = {c: max(len(c), *(len(str(row[c])) for row in rows)) for c in FAULT_COLUMNS}
    print(" | ".join(f"{c:>{widths[c]}}" for c in FAULT_COLUMNS))
    for row in rows:
        print(" | ".join(f"{row[c]!s:>{widths[c]}}" for c in FAULT_COLUMNS))
    refusals = sorted({(r.fault, cmd, reply) for r in results for cmd, reply in r.background
                       if reply.startswith("-")})
    for kind, cmd, reply in refusals:
        print(f"{kind}: {cmd} answered {reply}")


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
    ap.add_argument("--min-seconds", type=float, default=0.3,
                    help="shortest load before the kill (--faults: the shortest episode)")
    ap.add_argument("--max-seconds", type=float, default=2.0,
                    help="longest load before the kill (--faults: the longest episode)")
    ap.add_argument("--seed", type=int, default=None, help="random seed (rounds' lengths and cuts)")
    ap.add_argument("--dir", default=None,
                    help="scratch data directory (default: a temporary one; --faults mounts its tmpfs "
                         "on DIR/disk)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the data directory afterwards (always kept when the server did not start)")
    ap.add_argument("--faults", action="store_true",
                    help="each round goes through a fault episode (a full disk, failed forks, or both) "
                         "on a tmpfs of --fault-disk, with the kill in or after it (needs root)")
    ap.add_argument("--fault-disk", type=_size, default="64m",
                    help="--faults: the size of the tmpfs the server's data lives on")
    ap.add_argument("--failover", action="store_true",
                    help="a primary, two replicas and three Sentinels: each round kills the primary and "
                         "checks that every XADD confirmed by WAITAOF 1 1 survives the failover "
                         "(see streamdb/cli/crashfailover.py)")
    ap.add_argument("--down-after-ms", type=int, default=1000,
                    help="--failover: the Sentinels' down-after-milliseconds")
    args = ap.parse_args(argv)
    if args.failover and (args.faults or args.power_loss):
        ap.error("--failover is a run of its own: it cannot be combined with --faults or --power-loss")
    if args.failover:
        return _failover_main(args)
    if args.faults and args.power_loss:
        ap.error("--faults and --power-loss are separate runs: a fault episode ends in a kill -9")
    try:
        # SIGTERM ends a run as Ctrl-C does: the disk is unmounted and the cgroup removed.
        signal.signal(signal.SIGTERM, lambda *_: _interrupt())
        results = run(args)
    except FaultSetupError as e:
        print(f"streamdb-crashtest: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        undone = ", the fault disk unmounted and the cgroup removed" if args.faults else ""
        print(f"streamdb-crashtest: interrupted (the server is stopped{undone})", file=sys.stderr)
        return 130
    print_table(results, args.fsync, args.power_loss)
    if args.faults:
        print_fault_table(results, args.fault_disk)
    return 1 if sum(r.failures for r in results) else 0


def _failover_main(args) -> int:
    """--failover: its rounds in the scratch directory (kept with --keep or --dir), and its table."""
    scratch = _scratch_dir(args, "streamdb-failover-")
    try:
        signal.signal(signal.SIGTERM, lambda *_: _interrupt())
        results, final = run_failover(args, scratch, random.Random(args.seed))
    except FailoverSetupError as e:
        print(f"streamdb-crashtest: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("streamdb-crashtest: interrupted (the nodes and Sentinels are stopped)", file=sys.stderr)
        return 130
    finally:
        if not args.dir and not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    print_failover_table(results, final, args.down_after_ms)
    return 1 if final or sum(r.failures for r in results) else 0


def _interrupt() -> None:
    raise KeyboardInterrupt


def _size(text: str) -> int:
    try:
        size = parse_memory(text)
    except ConfigError:
        size = 0
    if size < 1 << 20:
        raise argparse.ArgumentTypeError(f"{text!r}: a size of at least 1m (such as 64m or 1g)")
    return size


if __name__ == "__main__":
    sys.exit(main())
