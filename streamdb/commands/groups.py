"""Consumer group commands: XGROUP XREADGROUP XACK XACKDEL XNACK XPENDING XCLAIM XAUTOCLAIM.

Replies and error texts follow Redis 7.0 where 7.0 has the command and 8.x did
not change it; XACKDEL, XNACK and XREADGROUP's CLAIM/MAXCOUNT/MAXSIZE follow the
current Redis documentation and its tests (docs/COMPATIBILITY.md lists each
difference from 7.0).

Effects (see docs/ARCHITECTURE.md) are deterministic and self-sufficient:

* a delivery or claim of entry X to consumer C becomes
  ``XCLAIM key group C 0 X TIME <ms> RETRYCOUNT <n> FORCE JUSTID LASTID <group last id>``,
  which replayed sets exactly that owner, delivery time and count;
* a move of the group's last-delivered id becomes
  ``XGROUP SETID key group <id> ENTRIESREAD <n>``;
* a consumer created on first use (by XREADGROUP also when it serves nothing)
  becomes ``XGROUP CREATECONSUMER``;
* a PEL entry dropped because its stream entry is gone becomes ``XACK``;
* ``XGROUP CREATE ... $`` is recorded with the resolved id and ENTRIESREAD;
* an XNACK that releases something is recorded as called, as Redis propagates it
  (it reads no clock: replayed on the same PEL it does the same);
* a pending entry dead-lettered by the group's policy (instead of a redelivery, or
  at an XNACK) becomes ``XADD <dead-letter key> <id> ..``, ``XACK key group <id>``
  and ``STREAMDB.GROUP SET key group DEADLETTERED <n>`` (the group's counter).
  Effects being replayed never dead-letter: their own XADD/XACK follow them.

Entries an XREADGROUP leaves out because of MAXCOUNT/MAXSIZE are looked at before
anything changes, so they have no effect at all.
"""

from __future__ import annotations

from itertools import islice, repeat

import cython

from .. import log
from ..engine import MAX_ID, MIN_ID
from ..engine.ids import format_id
from ..engine.stream import Stream   # groups.pxd cimports Stream and format_id from these modules
from ..engine.groups import (DEAD_LETTER_FIELDS, ENTRIES_READ_INVALID, MAX_DELIVERY_COUNT,
                             Consumer, ConsumerGroup, PendingEntry, next_delivery_count)
from ..engine.lag import advance_entries_read_many, clamp_entries_read
from ..engine.policies import DEL_DELETED, delete_with_policy
from ..protocol import encode_reply
from ..protocol.reply import NULL_ARRAY, OK, CommandError, Status
from .args import (eq, parse_int, parse_range_bound, parse_stream_id,
                   parse_strict_stream_id, parse_strict_stream_ids)
from ..dispatch.context import BlockRequest, Ctx, syntax_error
from ..dispatch.registry import command, subcommand
from .streams import (XREAD_BLOCKED_DEFAULT_COUNT, ReadArgs, ReadBudget,
                      _stream_key_positions, append_auto, parse_ids_block, parse_policy_ids,
                      parse_read_args, xread_reply)

__all__ = ["xclaim_effect", "new_delivery_effects", "no_such_group", "setid_effect", "counter_effect"]

NEW_ONLY = -1     # the ">" id of XREADGROUP


# ---------------------------------------------------------------------------
# Shared helpers
# ---------------------------------------------------------------------------


def _s(raw: bytes) -> str:
    """An argument as Redis prints it with %s: up to the first NUL byte."""
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def _nogroup(key: bytes, group: bytes, suffix: str = "") -> CommandError:
    return CommandError(f"NOGROUP No such key '{_s(key)}' or consumer group '{_s(group)}'{suffix}")


def _group_of(s: Stream | None, name: bytes) -> ConsumerGroup | None:
    if s is None or not s.groups:
        return None
    return s.groups.get(name)


def xclaim_effect(key: bytes, g: ConsumerGroup, sid: int, pe: PendingEntry,
                  last_id: int | None = None) -> list[bytes]:
    """The idempotent XCLAIM that recreates PEL entry ``sid`` exactly as it is now;
    its LASTID is ``last_id``, by default the group's last id now."""
    text = format_id(sid)
    last = text if last_id == sid else format_id(g.last_id if last_id is None else last_id)
    return _xclaim_form(key, g.name, pe.consumer.name, text, b"%d" % pe.delivery_time,
                        b"%d" % pe.delivery_count, last)


def new_delivery_effects(key: bytes, g: ConsumerGroup, consumer: Consumer, now: int,
                         texts: list[bytes]) -> list[list[bytes]]:
    """``xclaim_effect(key, g, sid, pe, sid)`` of each entry just delivered to
    ``consumer`` by a ">" read (``texts``: their formatted ids): a first delivery
    at ``now`` and, as Redis propagates it, LASTID the entry's own id (the group's
    last id right after reading it).  The time is formatted once for them all."""
    time_text = b"%d" % now
    return [_xclaim_form(key, g.name, consumer.name, text, time_text, b"1", text)
            for text in texts]


@cython.cfunc
@cython.inline
def _xclaim_form(key: bytes, group: bytes, consumer: bytes, id_text: bytes, time_text: bytes,
                 count_text: bytes, last_id_text: bytes) -> list:
    """The XCLAIM effect that sets one PEL entry (both functions above)."""
    return [b"XCLAIM", key, group, consumer, b"0", id_text, b"TIME", time_text,
            b"RETRYCOUNT", count_text, b"FORCE", b"JUSTID", b"LASTID", last_id_text]


def setid_effect(key: bytes, g: ConsumerGroup) -> list[bytes]:
    return [b"XGROUP", b"SETID", key, g.name, format_id(g.last_id),
            b"ENTRIESREAD", b"%d" % g.entries_read]


def _claiming_consumer(ctx: Ctx, key: bytes, g: ConsumerGroup, name: bytes, now: int) -> Consumer:
    """The consumer an XCLAIM/XAUTOCLAIM gives entries to, created on first use.

    No CREATECONSUMER effect: the propagated XCLAIM creates it on replay too.
    """
    c = g.consumers.get(name)
    if c is None:
        ctx.notify(b"xgroup-createconsumer", key)
        return g.create_consumer(name, now)
    c.seen_time = now
    return c


# stream-group-max-consumers / stream-group-max-pel (0 = unlimited).  Effects being
# replayed (AOF, a primary's stream) are never refused: they already happened.


def check_consumer_room(ctx: Ctx, g: ConsumerGroup, name: bytes) -> None:
    """Refuse to create consumer ``name`` when the group already has the most allowed."""
    cap = ctx.config["stream-group-max-consumers"]
    if cap and not ctx.replaying and name not in g.consumers and len(g.consumers) >= cap:
        raise CommandError(f"ERR consumer group '{_s(g.name)}' already has {len(g.consumers)} "
                           f"consumers, the most stream-group-max-consumers allows")


def pel_room(ctx: Ctx, g: ConsumerGroup) -> int | None:
    """How many more entries the group's PEL may take; None when there is no cap."""
    cap = ctx.config["stream-group-max-pel"]
    if not cap or ctx.replaying:
        return None
    return cap - len(g.pel)


def check_pel_room(ctx: Ctx, s: Stream, g: ConsumerGroup, noack: bool) -> None:
    """A ">" read that would deliver into a full PEL is an error, not an empty reply.

    An empty reply (or blocking) would look like an idle stream while new entries
    wait; the error tells the consumers to XACK first.  A read that finds some
    room is served up to it (partial delivery is still progress).
    """
    if noack or not _has_new(s, g):
        return
    room = pel_room(ctx, g)
    if room is not None and room <= 0:
        raise CommandError(f"ERR the pending entries list of consumer group '{_s(g.name)}' "
                           f"is full (stream-group-max-pel); XACK entries first")


def _consumer(ctx: Ctx, key: bytes, g: ConsumerGroup, name: bytes) -> Consumer:
    """Look up a consumer (refreshing its seen-time), creating it on first use."""
    c = g.consumers.get(name)
    if c is None:
        check_consumer_room(ctx, g, name)
        c = g.create_consumer(name, ctx.now_ms)
        ctx.propagate([b"XGROUP", b"CREATECONSUMER", key, g.name, name])
        ctx.notify(b"xgroup-createconsumer", key)
    else:
        c.seen_time = ctx.now_ms
    return c


def _drop_pending(ctx: Ctx, key: bytes, g: ConsumerGroup, sid: int) -> None:
    """Remove a PEL entry whose stream entry no longer exists."""
    g.ack(sid)
    ctx.propagate([b"XACK", key, g.name, format_id(sid)])


# ---------------------------------------------------------------------------
# Dead letters (the group's policy: STREAMDB.GROUP SET, commands/groupadmin.py)
# ---------------------------------------------------------------------------

def counter_effect(key: bytes, g: ConsumerGroup) -> list[bytes]:
    """The effect that sets the group's dead-lettered counter as it is now."""
    return [b"STREAMDB.GROUP", b"SET", key, g.name, b"DEADLETTERED", b"%d" % g.dead_lettered]


def _dead_lettered(ctx: Ctx, key: bytes, g: ConsumerGroup, sid: int, fv: list | None,
                   owner: bytes, delivery_count: int) -> bool:
    """Whether pending entry ``sid`` (fields ``fv``; None: deleted from the stream) is,
    by the group's policy, not to be delivered again, and was just dead-lettered:
    appended to the dead-letter stream with ``DEAD_LETTER_FIELDS`` (``owner``: its
    last consumer) and acknowledged, in one step of the command.

    Not when replaying effects (their XADD and XACK follow), nor for a deleted entry
    (nothing to keep).  A dead-letter key that holds another type by now (SET refuses
    one), a stream whose ids are used up, or the stream itself (a RENAME onto the
    dead-letter key) dead-letters nothing: the entry is delivered as usual and a
    warning says why."""
    if fv is None or ctx.replaying or not g.dead_letter_due(delivery_count):
        return False
    target_key = g.dead_letter.key
    target = ctx.lookup(target_key)
    if target is None:
        target = Stream()
        ctx.add_key(target_key, target)
    elif type(target) is not Stream or target.last_id >= MAX_ID or target_key == key:
        why = ("is the stream itself" if target_key == key else "holds a full stream"
               if type(target) is Stream else "holds another type")
        log.log(log.WARNING, f"Not dead-lettering entry {format_id(sid).decode()} of group "
                             f"'{_s(g.name)}' on '{_s(key)}': the dead-letter key "
                             f"'{_s(target_key)}' {why}; delivered again instead")
        return False
    text = format_id(sid)
    append_auto(ctx, target_key, target,
                [DEAD_LETTER_FIELDS[0], key, DEAD_LETTER_FIELDS[1], text,
                 DEAD_LETTER_FIELDS[2], g.name, DEAD_LETTER_FIELDS[3], owner,
                 DEAD_LETTER_FIELDS[4], b"%d" % delivery_count, *fv])
    g.ack(sid)
    ctx.propagate([b"XACK", key, g.name, text])
    g.dead_lettered += 1
    ctx.propagate(counter_effect(key, g), dirty=0)
    return True


# ---------------------------------------------------------------------------
# XGROUP
# ---------------------------------------------------------------------------

_XGROUP_HELP = [
    b"XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"CREATE <key> <groupname> <id|$> [option]",
    b"    Create a new consumer group. Options are:",
    b"    * MKSTREAM",
    b"      Create the empty stream if it does not exist.",
    b"    * ENTRIESREAD entries_read",
    b"      Set the group's entries_read counter (internal use).",
    b"CREATECONSUMER <key> <groupname> <consumer>",
    b"    Create a new consumer in the specified group.",
    b"DELCONSUMER <key> <groupname> <consumer>",
    b"    Remove the specified consumer.",
    b"DESTROY <key> <groupname>",
    b"    Remove the specified group.",
    b"SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
    b"    Set the current group ID and entries_read counter.",
    b"HELP",
    b"    Prints this help.",
]

_REQUIRES_KEY = ("ERR The XGROUP subcommand requires the key to exist. Note that for CREATE "
                 "you may want to use the MKSTREAM option to create an empty stream "
                 "automatically.")


def _xgroup_syntax(argv: list[bytes]) -> CommandError:
    return CommandError(f"ERR unknown subcommand or wrong number of arguments for "
                        f"'{_s(argv[1])}'. Try XGROUP HELP.")


def _parse_entries_read(raw: bytes) -> int:
    n = parse_int(raw)
    if n < 0 and n != ENTRIES_READ_INVALID:
        raise CommandError("ERR value for ENTRIESREAD must be positive or -1")
    return n


def _xgroup_prelude(ctx: Ctx, argv: list[bytes], need_group: bool,
                    mkstream: bool = False) -> tuple[Stream | None, ConsumerGroup | None]:
    """The checks Redis makes for every subcommand but HELP, in its order."""
    key = argv[2]
    s = ctx.lookup_stream(key)
    if s is None and not mkstream:
        raise CommandError(_REQUIRES_KEY)
    g = _group_of(s, argv[3])
    if need_group and g is None:
        raise no_such_group(key, argv[3])
    return s, g


def no_such_group(key: bytes, name: bytes) -> CommandError:
    """XGROUP's NOGROUP error (Redis prints both names with %s)."""
    return CommandError(f"NOGROUP No such consumer group '{_s(name)}' for key name '{_s(key)}'")


@command("xgroup", -2, "", group="stream", since="5.0.0")
def xgroup(ctx: Ctx, argv: list[bytes]):
    """XGROUP <subcommand> [<arg> [value] [opt] ...]"""
    raise _xgroup_syntax(argv)   # the dispatcher resolves subcommands


@subcommand("xgroup", "help", 2, "loading stale", since="5.0.0")
def xgroup_help(ctx: Ctx, argv: list[bytes]):
    """XGROUP HELP"""
    return [Status(line.decode()) for line in _XGROUP_HELP]


@subcommand("xgroup", "create", -5, "write denyoom", keys=(2, 2, 1), since="5.0.0")
def xgroup_create(ctx: Ctx, argv: list[bytes]):
    """XGROUP CREATE key group <id|$> [MKSTREAM] [ENTRIESREAD entries-read]"""
    mkstream = False
    entries_read = ENTRIES_READ_INVALID
    i = 5
    n = len(argv)
    while i < n:
        if eq(argv[i], b"mkstream"):
            mkstream = True
            i += 1
        elif eq(argv[i], b"entriesread") and i + 1 < n:
            entries_read = _parse_entries_read(argv[i + 1])
            i += 2
        else:
            raise _xgroup_syntax(argv)
    s, g = _xgroup_prelude(ctx, argv, need_group=False, mkstream=mkstream)
    if n > 8:
        raise _xgroup_syntax(argv)
    key, name = argv[2], argv[3]
    if argv[4] == b"$":
        sid = s.last_id if s is not None else MIN_ID
    else:
        sid = parse_strict_stream_id(argv[4])
    created = False
    if s is None:
        s = Stream()
        ctx.add_key(key, s)
        created = True
    if g is not None:
        raise CommandError("BUSYGROUP Consumer Group name already exists")
    if s.groups is None:
        s.groups = {}
    entries_read = clamp_entries_read(s, entries_read)
    s.groups[name] = ConsumerGroup(name, sid, entries_read)
    effect = [b"XGROUP", b"CREATE", key, name, format_id(sid),
              b"ENTRIESREAD", b"%d" % entries_read]
    if created:
        effect.append(b"MKSTREAM")
    ctx.propagate(effect)
    ctx.notify(b"xgroup-create", key)
    return OK


@subcommand("xgroup", "setid", -5, "write", keys=(2, 2, 1), since="5.0.0")
def xgroup_setid(ctx: Ctx, argv: list[bytes]):
    """XGROUP SETID key group <id|$> [ENTRIESREAD entries-read]"""
    entries_read = ENTRIES_READ_INVALID
    n = len(argv)
    if n == 7:
        if not eq(argv[5], b"entriesread"):
            raise _xgroup_syntax(argv)
        entries_read = _parse_entries_read(argv[6])
    elif n != 5:
        raise _xgroup_syntax(argv)
    s, g = _xgroup_prelude(ctx, argv, need_group=True)
    if argv[4] == b"$":
        sid = s.last_id
    else:
        sid = parse_stream_id(argv[4])
    g.last_id = sid
    g.entries_read = clamp_entries_read(s, entries_read)
    ctx.propagate(setid_effect(argv[2], g))
    ctx.notify(b"xgroup-setid", argv[2])
    return OK


@subcommand("xgroup", "destroy", 4, "write", keys=(2, 2, 1), since="5.0.0")
def xgroup_destroy(ctx: Ctx, argv: list[bytes]):
    """XGROUP DESTROY key group"""
    s, g = _xgroup_prelude(ctx, argv, need_group=False)
    if g is None:
        return 0
    del s.groups[argv[3]]
    # The effect also wakes clients blocked in XREADGROUP on this group (NOGROUP).
    ctx.propagate_as_is()
    ctx.notify(b"xgroup-destroy", argv[2])
    return 1


@subcommand("xgroup", "createconsumer", 5, "write denyoom", keys=(2, 2, 1), since="6.2.0")
def xgroup_createconsumer(ctx: Ctx, argv: list[bytes]):
    """XGROUP CREATECONSUMER key group consumer"""
    s, g = _xgroup_prelude(ctx, argv, need_group=True)
    if argv[4] in g.consumers:
        return 0
    check_consumer_room(ctx, g, argv[4])
    g.create_consumer(argv[4], ctx.now_ms)
    ctx.propagate_as_is()
    ctx.notify(b"xgroup-createconsumer", argv[2])
    return 1


@subcommand("xgroup", "delconsumer", 5, "write", keys=(2, 2, 1), since="5.0.0")
def xgroup_delconsumer(ctx: Ctx, argv: list[bytes]):
    """XGROUP DELCONSUMER key group consumer"""
    s, g = _xgroup_prelude(ctx, argv, need_group=True)
    if argv[4] not in g.consumers:
        return 0
    pending = g.delete_consumer(argv[4])
    ctx.propagate_as_is()
    ctx.notify(b"xgroup-delconsumer", argv[2])
    return pending


# ---------------------------------------------------------------------------
# XREADGROUP
# ---------------------------------------------------------------------------


# A MAXSIZE read fetches new entries this many at a time until the budget is spent.
_SIZED_CHUNK = 128


def _entry_size(entry: list, resp3: bool) -> int:
    """Bytes of one entry of a read's reply (what MAXSIZE counts)."""
    return len(encode_reply(entry, resp3))


@cython.locals(got=list, entries=list, sids=list, fetched=cython.Py_ssize_t,
               n=cython.Py_ssize_t)
def _deliver_new(ctx: Ctx, key: bytes, s: Stream, g: ConsumerGroup, consumer: Consumer,
                 count: int, noack: bool, out: list, claim_shape: bool = False,
                 budget: ReadBudget | None = None) -> None:
    """Serve entries after the group's last id (the ">" id), at most ``count`` (0 = all)
    and within ``budget``; with ``claim_shape`` each as a CLAIM read carries it."""
    if not s.length or g.last_id >= MAX_ID:
        return
    now = ctx.now_ms
    left = count
    served = False
    while g.last_id < MAX_ID:
        if budget is not None and budget.exhausted():
            break
        want = left if budget is None else budget.cap(left)
        chunked = budget is not None and budget.sized
        if chunked and (not want or want > _SIZED_CHUNK):
            want = _SIZED_CHUNK
        got = s.range(g.last_id + 1, MAX_ID, want)
        # A CLAIM read carries each entry with its idle time and earlier
        # deliveries: 0 and 0 for a new one.
        entries = ([[format_id(sid), fv, 0, 0] for sid, fv in got] if claim_shape
                   else [[format_id(sid), fv] for sid, fv in got])
        fetched = len(entries)
        if budget is not None:
            # Cut before anything changes: what does not fit has no effect.
            n = budget.fit(map(_entry_size, entries, repeat(ctx.resp3)) if chunked
                           else repeat(0, fetched))
            del entries[n:], got[n:]
        if not entries:
            break
        served = True
        sids = [sid for sid, _ in got]
        advance_entries_read_many(s, g, sids)
        out += entries
        if not noack:
            g.add_new_pending(sids, consumer, now)
            # As in Redis, the deliveries' XCLAIMs add nothing to the dirty count: the
            # read counts once, for the SETID below (stream-cgroups.tcl, "XREADGROUP of
            # multiple entries changes dirty by one").  With nobody recording effects
            # (no AOF, no replica) they are not even built; the SETID still names the
            # changed key.
            if ctx.core.effects_wanted():
                ctx.effects += new_delivery_effects(key, g, consumer, now,
                                                    [entry[0] for entry in entries])
        if left:
            left -= len(sids)
        if not chunked or len(sids) < fetched or fetched < want or (count and left <= 0):
            break
    if served:
        consumer.active_time = now
        ctx.propagate(setid_effect(key, g))


def _claim_idle(ctx: Ctx, key: bytes, s: Stream, g: ConsumerGroup, consumer: Consumer,
                min_idle: int, count: int, out: list, budget: ReadBudget | None = None) -> int:
    """XREADGROUP ... CLAIM: take over entries pending for at least ``min_idle`` ms,
    NACKed ones first in the order they were released (Redis's NACK zone), then
    the longest idle.  Claimed entries carry [id, fields, idle, deliveries before
    this one]."""
    if not g.pel:
        return 0
    now = ctx.now_ms
    owned = sorted((pe.delivery_time, sid) for sid, pe in g.pel.items()
                   if pe.consumer is not None and pe.claimable(now, min_idle))
    n = 0
    for sid in [*g.nacked, *[sid for _when, sid in owned]]:
        if count and n >= count:
            break
        pe = g.pel[sid]
        fv = s.get(sid)
        if fv is None:
            continue      # deleted entry: left for XAUTOCLAIM/XCLAIM to clean up
        previous = pe.delivery_count
        if _dead_lettered(ctx, key, g, sid, fv, pe.owner_name, previous):
            continue
        # The idle time since the last delivery; a NACKed entry's delivery time is
        # 0, so Redis reports the current time for it (not XPENDING's -1).
        entry = [format_id(sid), fv, max(now - pe.delivery_time, 0), previous]
        if budget is not None and not budget.take(
                _entry_size(entry, ctx.resp3) if budget.sized else 0):
            break
        g.add_pending(sid, consumer, now, next_delivery_count(previous))
        out.append(entry)
        ctx.propagate(xclaim_effect(key, g, sid, pe))
        n += 1
    if n:
        consumer.active_time = now
    return n


def _serve_history(ctx: Ctx, key: bytes, s: Stream, g: ConsumerGroup, consumer: Consumer,
                   after: int, count: int, budget: ReadBudget | None = None) -> list:
    """The consumer's own pending entries with id > ``after`` (deleted ones as [id, nil])."""
    out = []
    now = ctx.now_ms
    start = after + 1
    for sid in list(consumer.pending.irange(start, MAX_ID)):
        if count and len(out) >= count:
            break
        fv = s.get(sid)
        pe = g.pel[sid]
        if _dead_lettered(ctx, key, g, sid, fv, consumer.name, pe.delivery_count):
            continue
        entry = [format_id(sid), NULL_ARRAY if fv is None else fv]
        if budget is not None and not budget.take(
                _entry_size(entry, ctx.resp3) if budget.sized else 0):
            break
        out.append(entry)
        if fv is None:
            continue
        pe.delivery_time = now
        pe.delivery_count = next_delivery_count(pe.delivery_count)
        # Redis neither propagates nor counts a history read's new delivery time and
        # count (too insignificant, its tests say); the effect keeps the AOF and the
        # replicas exact, and like Redis it leaves the dirty count alone.
        ctx.propagate(xclaim_effect(key, g, sid, pe), dirty=0)
    return out


def _has_new(s: Stream, g: ConsumerGroup) -> bool:
    """Whether a live entry lies above the group's last id."""
    if not s.length or s.last_id <= g.last_id:
        return False                # (no entry lies above the last id ever given)
    tail = s.nodes[-1]
    if tail.deleted is None:        # nothing deleted in the tail: its last entry is live
        return tail.last > g.last_id
    last = s.last_entry()
    return last is not None and last[0] > g.last_id


def _has_idle(s: Stream, g: ConsumerGroup, now: int, min_idle: int | None) -> bool:
    if min_idle is None or not g.pel:
        return False
    return any(pe.claimable(now, min_idle) and s.get(sid) is not None
               for sid, pe in g.pel.items())


def _claim_wake(keys: list[bytes], a: ReadArgs):
    """A blocked CLAIM read's BlockRequest.next_wake: when the first entry pending in
    its group on one of ``keys`` reaches min-idle-time, as Redis wakes such a read
    (it keeps, per key, the earliest time an entry becomes claimable).  Entries
    already claimable, NACKed ones and those deleted from the stream are not
    waited for: the serving that asks has just found nothing to take."""
    group = a.group
    min_idle = a.claim_min_idle

    def next_wake(db, now: int) -> int | None:
        soonest = None
        for key in keys:
            s = db.data.get(key)
            g = _group_of(s, group) if type(s) is Stream else None
            if g is None:
                continue
            for sid, pe in g.pel.items():
                if pe.consumer is None:
                    continue
                at = pe.delivery_time + min_idle
                if at > now and (soonest is None or at < soonest) and s.get(sid) is not None:
                    soonest = at
        return soonest
    return next_wake


def _serve_new_or_claim(ctx: Ctx, key: bytes, s: Stream, g: ConsumerGroup,
                        consumer_name: bytes, count: int, noack: bool,
                        min_idle: int | None, budget: ReadBudget | None = None):
    """Entries for a ">" read of one key, or None when there is nothing to serve.

    The consumer is created (and its seen time refreshed) whether or not there
    is something to serve, as Redis >= 7.2 does for every key it looks at (7.0
    created it only when serving).
    """
    if budget is not None and budget.exhausted():
        return None
    consumer = _consumer(ctx, key, g, consumer_name)
    if not _has_new(s, g) and not _has_idle(s, g, ctx.now_ms, min_idle):
        return None
    if budget is not None:
        written = budget.written
        budget.open_stream(key)
    out: list = []
    claimed = 0
    if min_idle is not None:
        claimed = _claim_idle(ctx, key, s, g, consumer, min_idle, count, out, budget)
    if not count or claimed < count:
        wanted = count - claimed if count else 0          # 0 = all
        room = None if noack else pel_room(ctx, g)
        if room is not None:
            wanted = min(wanted, room) if wanted else room
        if room is None or room > 0:
            _deliver_new(ctx, key, s, g, consumer, wanted, noack, out,
                         claim_shape=min_idle is not None, budget=budget)
    if budget is not None:
        if not out and not budget.exhausted():
            budget.written = written        # nothing served: the name is not sent
            return None
        # Served, even with no entry when the name alone filled MAXSIZE (as Redis).
        budget.close_stream(len(out))
        return out
    return out if out else None


def _read_group(ctx: Ctx, key: bytes, group: bytes) -> tuple[Stream, ConsumerGroup]:
    """The stream at ``key`` and its ``group`` as XREADGROUP finds them (WRONGTYPE, NOGROUP)."""
    s = ctx.lookup_stream(key, read=True)
    g = _group_of(s, group)
    if g is None:
        raise _nogroup(key, group, " in XREADGROUP with GROUP option")
    return s, g


def _blocked_serve(keys: list[bytes], a: ReadArgs, count: int):
    """The closure a blocked XREADGROUP uses: the command run again, as Redis (>= 7.2)
    re-executes it when a key it waits on changes: a key that is gone, holds another
    type or lost the group answers what the command would answer now (NOGROUP,
    WRONGTYPE) rather than Redis 7.0's "UNBLOCKED the stream key no longer exists";
    nothing to serve keeps waiting, with the original timeout."""
    group = a.group

    def serve(ctx: Ctx):
        for key in keys:
            s, g = _read_group(ctx, key, group)
            check_pel_room(ctx, s, g, a.noack)
        items = []
        budget = a.budget(ctx.resp3)
        for key in keys:
            s = ctx.db.data[key]
            got = _serve_new_or_claim(ctx, key, s, s.groups[group], a.consumer, count,
                                      a.noack, a.claim_min_idle, budget)
            if got is not None:
                items.append((key, got))
        return xread_reply(ctx, items) if items else None
    return serve


@command("xreadgroup", -7, "write blocking", group="stream", since="5.0.0",
         key_finder=lambda argv: _stream_key_positions(argv))
def xreadgroup(ctx: Ctx, argv: list[bytes]):
    """XREADGROUP GROUP group consumer [COUNT count] [MAXCOUNT maxcount] [MAXSIZE maxsize] [BLOCK milliseconds] [CLAIM min-idle-time] [NOACK] STREAMS key [key ...] id [id ...]"""
    a = parse_read_args(argv, group_cmd=True)
    streams: list[Stream] = []
    groups: list[ConsumerGroup] = []
    after: list[int] = []
    for key, raw in zip(a.keys, a.raw_ids):
        s, g = _read_group(ctx, key, a.group)
        streams.append(s)
        groups.append(g)
        if raw == b"$" or raw == b"+":
            # ("+", the last entry of XREAD since 7.4, gets the same text.)
            sym = raw.decode()
            raise CommandError(f"ERR The {sym} ID is meaningless in the context of XREADGROUP: "
                               f"you want to read the history of this consumer by specifying a "
                               f"proper ID, or use the > ID to get new messages. The {sym} ID "
                               f"would just return an empty result set.")
        if raw == b">":
            after.append(NEW_ONLY)
        else:
            sid = parse_strict_stream_id(raw)
            # Redis marks ">" with the maximum id internally, so that id means ">" too.
            after.append(NEW_ONLY if sid == MAX_ID else sid)
    # Redis looks each key up again to serve it (xreadCommand): INFO counts both.
    ctx.count_lookups_again(a.keys, streams)
    for s, g, gt in zip(streams, groups, after):
        if gt == NEW_ONLY:       # before anything is served: an error must change nothing
            check_pel_room(ctx, s, g, a.noack)
    items = []
    budget = a.budget(ctx.resp3)
    for key, s, g, gt in zip(a.keys, streams, groups, after):
        if budget is not None and budget.exhausted():
            break                       # as Redis: no further stream is looked at
        if gt != NEW_ONLY:
            consumer = _consumer(ctx, key, g, a.consumer)
            if budget is not None:
                budget.open_stream(key)
            got = _serve_history(ctx, key, s, g, consumer, gt, a.count, budget)
            if budget is not None:
                budget.close_stream(len(got))
            items.append((key, got))
            continue
        got = _serve_new_or_claim(ctx, key, s, g, a.consumer, a.count, a.noack,
                                  a.claim_min_idle, budget)
        if got is not None:
            items.append((key, got))
    if items:
        return xread_reply(ctx, items)
    if a.timeout == -1:
        return NULL_ARRAY
    keys = list(a.keys)
    return BlockRequest(keys, a.timeout,
                        _blocked_serve(keys, a, a.count or XREAD_BLOCKED_DEFAULT_COUNT),
                        NULL_ARRAY, "xreadgroup",
                        None if a.claim_min_idle is None else _claim_wake(keys, a))


# ---------------------------------------------------------------------------
# XACK, XACKDEL
# ---------------------------------------------------------------------------


@command("xack", -4, "write fast", keys=(1, 1, 1), group="stream", since="5.0.0")
def xack(ctx: Ctx, argv: list[bytes]):
    """XACK key group id [id ...]"""
    s = ctx.lookup_stream(argv[1], read=True)
    g = _group_of(s, argv[2])
    if g is None:
        return 0
    ids: list = parse_strict_stream_ids(argv[3:])
    acked = g.ack_many(ids)
    if acked:
        ctx.propagate_as_is(dirty=acked)
    return acked


@command("xackdel", -6, "write fast", keys=(1, 1, 1), group="stream", since="8.2.0")
def xackdel(ctx: Ctx, argv: list[bytes]):
    """XACKDEL key group [KEEPREF|DELREF|ACKED] IDS numids id [id ...]"""
    policy, ids = parse_policy_ids(argv, 3)
    s = ctx.lookup_stream(argv[1], read=True)
    g = _group_of(s, argv[2])
    if g is None:
        return [-1] * len(ids)
    out = []
    changed = 0
    deleted = False
    for sid in ids:
        if not g.ack(sid):
            out.append(-1)
            continue
        changed += 1
        code = delete_with_policy(s, (sid,), policy)[0]
        deleted = deleted or code == DEL_DELETED
        # Acknowledged is never "no such id" (-1): an entry already deleted from the
        # stream (a KEEPREF delete left its reference here) counts as deleted.
        out.append(max(code, DEL_DELETED))
    if changed:
        ctx.propagate_as_is(dirty=changed)
    if deleted:
        ctx.notify(b"xdel", argv[1])      # as XDELEX: when an entry went
    return out


# ---------------------------------------------------------------------------
# XNACK
# ---------------------------------------------------------------------------

_NACK_MODES = (b"silent", b"fail", b"fatal")
_INT_MAX = (1 << 31) - 1    # XNACK numids is parsed as an int


def _nacked_count(mode: bytes, count: int) -> int:
    """The delivery count XNACK's mode leaves: SILENT undoes the delivery, FAIL
    keeps the count, FATAL marks the entry as failed for good."""
    if mode == b"silent":
        return max(count - 1, 0)
    if mode == b"fatal":
        return MAX_DELIVERY_COUNT
    return count


@command("xnack", -7, "write fast", keys=(1, 1, 1), group="stream", since="8.8.0")
def xnack(ctx: Ctx, argv: list[bytes]):
    """XNACK key group <SILENT | FAIL | FATAL> IDS numids id [id ...] [RETRYCOUNT count] [FORCE]"""
    # As Redis's xnackCommand: key and group first, then the mode, then IDS,
    # RETRYCOUNT and FORCE in any order (a later IDS block replaces an earlier one).
    key = argv[1]
    s = ctx.lookup_stream(key)
    g = _group_of(s, argv[2])
    if g is None:
        raise _nogroup(key, argv[2])
    mode = argv[3].lower()
    if mode not in _NACK_MODES:
        raise CommandError("ERR mode must be SILENT, FAIL, or FATAL")
    raw_ids: list[bytes] | None = None
    retrycount = -1
    force = False
    n = len(argv)
    i = 4
    while i < n:
        lo = argv[i].lower()
        if lo == b"ids" and i + 1 < n:
            raw_ids, i = parse_ids_block(argv, i + 1, "ERR numids must be a positive integer",
                                         "ERR number of IDs doesn't match numids", _INT_MAX)
        elif lo == b"force":
            force = True
            i += 1
        elif lo == b"retrycount" and i + 1 < n:
            retrycount = parse_int(argv[i + 1])
            if retrycount < 0:
                raise CommandError("ERR Invalid RETRYCOUNT value, must be >= 0")
            i += 2
        else:
            raise CommandError(f"ERR Unrecognized XNACK option '{_s(argv[i])}'")
    if raw_ids is None:
        raise CommandError("ERR syntax error, expected IDS keyword")
    ids = parse_strict_stream_ids(raw_ids)
    released = 0
    # Released entries the group's policy dead-letters at once (their count has
    # reached its MAXDELIVERIES: FATAL's always has): id -> (last owner, count).  By
    # id: an id named twice is released twice, and dead-lettered once if at all.
    due = {}
    for sid in ids:
        pe = g.pel.get(sid)
        if pe is None:
            # FORCE: a new unowned entry, for an id the stream still holds.
            if not force or s.get(sid) is None:
                continue
            count = retrycount if retrycount >= 0 else _nacked_count(mode, 0)
            owner = b""
            g.add_nacked(sid, count)
        else:
            count = retrycount if retrycount >= 0 else _nacked_count(mode, pe.delivery_count)
            owner = pe.owner_name
            g.nack(sid, count)
        released += 1
        if g.dead_letter_due(count):
            due[sid] = (due[sid][0] if sid in due else owner, count)
        else:
            due.pop(sid, None)
    if released:
        # Redis propagates XNACK as it was called: it reads no clock, so replayed
        # on the same PEL it releases the same entries with the same counts.  The
        # dead letters' effects follow it: replayed, the XACK removes what it released.
        ctx.propagate_as_is(released)
    for sid, (owner, count) in due.items():
        _dead_lettered(ctx, key, g, sid, s.get(sid), owner, count)
    return released


# ---------------------------------------------------------------------------
# XPENDING
# ---------------------------------------------------------------------------


@command("xpending", -3, "readonly", keys=(1, 1, 1), group="stream", since="5.0.0")
def xpending(ctx: Ctx, argv: list[bytes]):
    """XPENDING key group [[IDLE min-idle-time] start end count [consumer]]"""
    n = len(argv)
    summary = n == 3
    if n != 3 and (n < 6 or n > 9):
        raise syntax_error()
    min_idle = 0
    consumer_name = None
    if n >= 6:
        i = 3
        if eq(argv[3], b"idle"):
            min_idle = parse_int(argv[4])
            if n < 8:
                raise syntax_error()
            i += 2
        count = max(parse_int(argv[i + 2]), 0)
        start, start_ex = parse_range_bound(argv[i], 0)
        if start_ex:
            if start == MAX_ID:
                raise CommandError("ERR invalid start ID for the interval")
            start += 1
        end, end_ex = parse_range_bound(argv[i + 1], (1 << 64) - 1)
        if end_ex:
            if end == MIN_ID:
                raise CommandError("ERR invalid end ID for the interval")
            end -= 1
        if i + 3 < n:
            consumer_name = argv[i + 3]
    s = ctx.lookup_stream(argv[1], read=True)
    g = _group_of(s, argv[2])
    if g is None:
        raise _nogroup(argv[1], argv[2])
    if summary:
        if not g.pel:
            return [0, None, None, NULL_ARRAY]
        per = [[c.name, b"%d" % len(c.pending)] for c in g.sorted_consumers() if c.pending]
        return [len(g.pel), format_id(g.pel.peekitem(0)[0]), format_id(g.pel.peekitem(-1)[0]),
                per]
    source = g.pel
    if consumer_name is not None:
        c = g.consumers.get(consumer_name)
        if c is None:
            return []
        source = c.pending
    now = ctx.now_ms
    out = []
    if count <= 0 or start > end:
        return out
    for sid in source.irange(start, end):
        pe = g.pel[sid]
        if min_idle and not pe.claimable(now, min_idle):
            continue
        out.append([format_id(sid), pe.owner_name, pe.idle(now), pe.delivery_count])
        if len(out) >= count:
            break
    return out


# ---------------------------------------------------------------------------
# XCLAIM, XAUTOCLAIM
# ---------------------------------------------------------------------------


def _is_id(raw: bytes) -> bool:
    try:
        parse_strict_stream_id(raw)
    except CommandError:
        return False
    return True


@command("xclaim", -6, "write fast", keys=(1, 1, 1), group="stream", since="5.0.0")
def xclaim(ctx: Ctx, argv: list[bytes]):
    """XCLAIM key group consumer min-idle-time id [id ...] [IDLE ms] [TIME unix-time-milliseconds] [RETRYCOUNT count] [FORCE] [JUSTID] [LASTID lastid]"""
    key = argv[1]
    s = ctx.lookup_stream(key, read=True)
    g = _group_of(s, argv[2])
    if g is None:
        raise _nogroup(key, argv[2])
    min_idle = max(parse_int(argv[4], "ERR Invalid min-idle-time argument for XCLAIM"), 0)
    n = len(argv)
    j = 5
    ids = []
    while j < n and _is_id(argv[j]):
        ids.append(parse_strict_stream_id(argv[j]))
        j += 1
    now = ctx.now_ms
    force = justid = False
    retrycount = -1
    delivery_time = -1
    last_id = MIN_ID
    while j < n:
        more = n - 1 - j
        opt = argv[j]
        lo = opt.lower()
        if lo == b"force":
            force = True
        elif lo == b"justid":
            justid = True
        elif lo == b"idle" and more:
            j += 1
            delivery_time = now - parse_int(argv[j], "ERR Invalid IDLE option argument for XCLAIM")
        elif lo == b"time" and more:
            j += 1
            delivery_time = parse_int(argv[j], "ERR Invalid TIME option argument for XCLAIM")
        elif lo == b"retrycount" and more:
            j += 1
            retrycount = parse_int(argv[j], "ERR Invalid RETRYCOUNT option argument for XCLAIM")
        elif lo == b"lastid" and more:
            j += 1
            last_id = parse_strict_stream_id(argv[j])
        else:
            raise CommandError(f"ERR Unrecognized XCLAIM option '{_s(opt)}'")
        j += 1
    check_consumer_room(ctx, g, argv[3])
    moved_last_id = False
    if last_id > g.last_id:
        g.last_id = last_id
        moved_last_id = True
    if delivery_time == -1:
        delivery_time = now
    elif (delivery_time < 0 or delivery_time > now) and not ctx.replaying:
        # Clients may compute the time on a clock slightly ahead of ours; Redis
        # then uses "now".  An effect being replayed carries the exact time.
        delivery_time = now
    consumer: Consumer | None = None
    out = []
    for sid in ids:
        pe = g.pel.get(sid)
        fv = s.get(sid)
        if fv is None:
            if pe is not None:
                _drop_pending(ctx, key, g, sid)
            continue
        if pe is None:
            if not force:
                continue
        elif min_idle and not pe.claimable(now, min_idle):
            continue
        elif _dead_lettered(ctx, key, g, sid, fv, pe.owner_name, pe.delivery_count):
            continue
        if consumer is None:
            consumer = _claiming_consumer(ctx, key, g, argv[3], now)
        # A PEL entry FORCE creates starts, as in Redis, at one delivery.
        count = 1 if pe is None else pe.delivery_count
        if retrycount >= 0:
            count = retrycount
        elif not justid:
            count = next_delivery_count(count)
        pe = g.add_pending(sid, consumer, delivery_time, count)
        consumer.active_time = now
        out.append(format_id(sid) if justid else [format_id(sid), fv])
        ctx.propagate(xclaim_effect(key, g, sid, pe))
        moved_last_id = False      # the XCLAIM effects carry LASTID
    if moved_last_id:
        ctx.propagate(setid_effect(key, g))
    return out


_AUTOCLAIM_ATTEMPTS = 10
_AUTOCLAIM_MAX_COUNT = ((1 << 63) - 1) // 16
_AUTOCLAIM_ALLOC_LIMIT = 1 << 40     # bytes; where a real allocation would surely fail


@command("xautoclaim", -6, "write fast", keys=(1, 1, 1), group="stream", since="6.2.0")
def xautoclaim(ctx: Ctx, argv: list[bytes]):
    """XAUTOCLAIM key group consumer min-idle-time start [COUNT count] [JUSTID]"""
    key = argv[1]
    min_idle = max(parse_int(argv[4], "ERR Invalid min-idle-time argument for XAUTOCLAIM"), 0)
    start, start_ex = parse_range_bound(argv[5], 0)
    if start_ex:
        if start == MAX_ID:
            raise CommandError("ERR invalid start ID for the interval")
        start += 1
    count = 100
    justid = False
    j = 6
    n = len(argv)
    while j < n:
        more = n - 1 - j
        if eq(argv[j], b"count") and more:
            count = parse_int(argv[j + 1], "ERR COUNT must be > 0")
            if count < 1 or count > _AUTOCLAIM_MAX_COUNT:
                raise CommandError("ERR COUNT must be > 0")
            j += 1
        elif eq(argv[j], b"justid"):
            justid = True
        else:
            raise syntax_error()
        j += 1
    s = ctx.lookup_stream(key, read=True)
    g = _group_of(s, argv[2])
    if g is None:
        raise _nogroup(key, argv[2])
    if count * 16 >= _AUTOCLAIM_ALLOC_LIMIT:
        # Redis allocates COUNT ids up front and reports a failed allocation.
        raise CommandError("ERR Insufficient memory, failed allocating transient memory, "
                           "COUNT too high.")
    check_consumer_room(ctx, g, argv[3])
    attempts = count * _AUTOCLAIM_ATTEMPTS
    # Candidates in id order; one more than the scan may visit, for the cursor.
    cands = list(islice(g.pel.irange(start), attempts + 1))
    now = ctx.now_ms
    consumer: Consumer | None = None
    claimed = []
    deleted = []
    idx = 0
    while attempts > 0 and count > 0 and idx < len(cands):
        attempts -= 1
        sid = cands[idx]
        idx += 1
        fv = s.get(sid)
        if fv is None:
            _drop_pending(ctx, key, g, sid)
            deleted.append(format_id(sid))
            count -= 1
            continue
        pe = g.pel[sid]
        if min_idle and not pe.claimable(now, min_idle):
            continue
        if _dead_lettered(ctx, key, g, sid, fv, pe.owner_name, pe.delivery_count):
            continue      # (not delivered: neither in the reply nor counted)
        if consumer is None:
            consumer = _claiming_consumer(ctx, key, g, argv[3], now)
        g.add_pending(sid, consumer, now,
                      pe.delivery_count if justid else next_delivery_count(pe.delivery_count))
        consumer.active_time = now
        claimed.append(format_id(sid) if justid else [format_id(sid), fv])
        count -= 1
        ctx.propagate(xclaim_effect(key, g, sid, pe))
    cursor = format_id(cands[idx]) if idx < len(cands) else b"0-0"
    return [cursor, claimed, deleted]
