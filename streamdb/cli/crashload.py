"""The crash tools' load and what they record of it: producers (XADD) and group
consumers (XREADGROUP + XACK) whose acknowledged operations go into a Ledger, a
consumer of a group with a dead-letter policy that fails every entry, and a server
start-up that waits until it answers.  streamdb-crashtest's kill -9 rounds and
its --failover rounds (crashfailover.py) both run this load."""

from __future__ import annotations

import random
import subprocess
import threading
import time
from dataclasses import dataclass, field

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from .procs import wait_until_ready

STREAM = "crash:log"
GROUP = "crash-group"
# A second group of STREAM whose only consumer fails every entry: its dead-letter
# policy (MAXDELIVERIES 1) moves each one to DEAD_LETTERS when it is read again.
DLQ_GROUP = "crash-dlq-group"
DEAD_LETTERS = "crash:dlq"
# A reply that takes this long was held (the server waits for a disk that
# fails before it answers): counted, not an error.
HELD_AFTER_S = 1.0


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
    # --failover: the XADDs a WAITAOF 1 1 confirmed (on disk here and on a replica),
    # and the highest id delivered to the group before such a confirmation.
    promised: set[bytes] = field(default_factory=set)
    promised_delivered: bytes = b"0-0"
    cold: dict[bytes, list[bytes]] = field(default_factory=dict)    # COLD_STREAM:<round> -> its ids
    # Replies that acknowledged nothing: a write refused with MISCONF, and a
    # reply held HELD_AFTER_S or more (or never sent before the client's timeout).
    misconf: int = 0
    held: int = 0
    dead_letter_reads: int = 0      # acknowledged re-reads of DLQ_GROUP (each dead-letters what it finds)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _id_key(sid: bytes) -> tuple[int, int]:
    ms, _, seq = sid.partition(b"-")
    return int(ms), int(seq)


NOT_ACKNOWLEDGED = object()      # what _request returns for a refused or unanswered request


def _request(ledger: Ledger, call, *args, **kwargs):
    """``call(*args, **kwargs)``, or NOT_ACKNOWLEDGED when the server refused it
    with MISCONF or held the reply past the client's timeout.  Counts the
    refusals, and the replies held HELD_AFTER_S or more however they ended.

    Any other error (the server is gone: it was killed) ends the calling thread."""
    started = time.monotonic()
    try:
        return call(*args, **kwargs)
    except redis.ResponseError as e:
        if not str(e).startswith("MISCONF"):
            raise
        with ledger.lock:
            ledger.misconf += 1
        time.sleep(0.01)        # the refusal lasts until the disk works again: no busy loop
        return NOT_ACKNOWLEDGED
    except redis.TimeoutError:  # (redis-py reconnects for the next request)
        return NOT_ACKNOWLEDGED
    finally:
        if time.monotonic() - started >= HELD_AFTER_S:
            with ledger.lock:
                ledger.held += 1


def _no_promise(r: redis.Redis) -> bool:
    return False


def _producer(connect, name: str, ledger: Ledger, stop: threading.Event, seq0: int,
              promise=_no_promise) -> int:
    """XADDs through ``connect()``'s client until ``stop`` or an error; ``promise(client)``
    after each acknowledged one: True records it in ``ledger.promised``.  Returns the
    last sequence number used (a caller that reconnects goes on from it)."""
    r = connect()
    seq = seq0
    try:
        while not stop.is_set():
            seq += 1
            sid = _request(ledger, r.xadd, STREAM,
                           {"producer": name, "seq": seq, "pad": "x" * random.randint(0, 40)})
            if sid is not NOT_ACKNOWLEDGED:
                with ledger.lock:
                    ledger.added[sid] = (name, seq)
                if promise(r):
                    with ledger.lock:
                        ledger.promised.add(sid)
    except (redis.RedisError, OSError):
        pass
    return seq


def _consumer(connect, name: str, ledger: Ledger, stop: threading.Event, promise=_no_promise) -> None:
    """XREADGROUP + XACK (70% of what is delivered) until ``stop`` or an error;
    ``promise(client)`` after each batch: True makes the batch's highest id the group
    position promised (``ledger.promised_delivered``)."""
    r = connect()
    try:
        while not stop.is_set():
            got = _request(ledger, r.xreadgroup, GROUP, name, {STREAM: ">"}, count=10, block=100)
            if got is NOT_ACKNOWLEDGED:
                continue
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
                if _request(ledger, r.xack, STREAM, GROUP, *to_ack) is not NOT_ACKNOWLEDGED:
                    now = _now_ms()
                    with ledger.lock:
                        ledger.acked.update(dict.fromkeys(to_ack, now))
            if ids and promise(r):
                with ledger.lock:
                    top = max(ids, key=_id_key)
                    if _id_key(top) > _id_key(ledger.promised_delivered):
                        ledger.promised_delivered = top
    except (redis.RedisError, OSError):
        pass

def _failing_consumer(connect, ledger: Ledger, stop: threading.Event) -> None:
    """DLQ_GROUP's consumer: reads new entries, acknowledges none, and reads its own
    pending ones again, which the group's policy dead-letters instead (every entry
    delivered to the group ends up pending or in DEAD_LETTERS), until ``stop`` or an
    error."""
    r = connect()
    try:
        while not stop.is_set():
            got = _request(ledger, r.xreadgroup, DLQ_GROUP, "failing", {STREAM: ">"}, count=10,
                           block=100)
            if got is NOT_ACKNOWLEDGED:
                continue
            if _request(ledger, r.xreadgroup, DLQ_GROUP, "failing", {STREAM: "0"},
                        count=10) is not NOT_ACKNOWLEDGED:
                with ledger.lock:
                    ledger.dead_letter_reads += 1
    except (redis.RedisError, OSError):
        pass


def _entries(r: redis.Redis, key: str = STREAM) -> dict[bytes, dict]:
    """Every entry of ``key``: id -> fields."""
    present = {}
    start = "-"
    while True:
        chunk = r.xrange(key, min=start, count=5000)
        if not chunk:
            return present
        for sid, fields in chunk:
            present[sid] = fields
        start = "(" + chunk[-1][0].decode()



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

