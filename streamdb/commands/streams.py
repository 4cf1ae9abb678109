"""Stream commands without consumer groups: XADD XTRIM XDEL XLEN XRANGE XREVRANGE XREAD XSETID.

Each command's grammar is in its docstring; argument checks happen in the
order Redis makes them, so that a request with several problems gets the same
error from us as from Redis.  What a trim or a policy deletion removes is the
engine's (engine/policies.py); here are their arguments, replies and effects.
"""

from __future__ import annotations

from itertools import repeat

import cython

from ..engine import MAX_ID, MIN_ID
from ..engine.idmp import (DURATION_MAX, DURATION_MIN, MAXSIZE_MAX, MAXSIZE_MIN,
                           IdmpState, auto_iid)
from ..engine.ids import U64, InvalidID, format_id, id_ms, id_seq, make_id, parse_id
from ..engine.policies import (DEL_DELETED, DEL_MISSING, KEEPREF, MAXLEN, REFERENCE_POLICIES,
                               TrimArgs, apply_trim, delete_with_policy)
from ..engine.stream import Stream   # streams.pxd cimports Stream and format_id from these modules
from ..protocol.reply import NULL_ARRAY, OK, CommandError, Map, encode_reply
from .args import (eq, invalid_id_error, parse_int, parse_range_bound,
                   parse_strict_stream_id, parse_strict_stream_ids)
from ..dispatch.context import BlockRequest, Ctx, syntax_error
from ..dispatch.registry import command

# ---------------------------------------------------------------------------
# Shared helpers: entry replies, trimming arguments, effects of a trim
# ---------------------------------------------------------------------------


def entry_reply(sid: int, fv: list) -> list:
    return [format_id(sid), fv]


def entries_reply(entries) -> list:
    return [[format_id(sid), fv] for sid, fv in entries]


def entry_size(sid: int, fv: list) -> int:
    """Bytes of an entry in a reply (the same in RESP2 and RESP3): what MAXSIZE counts."""
    return len(encode_reply(entry_reply(sid, fv), False))


@cython.cfunc
def _new_trim() -> TrimArgs:
    """A TrimArgs for parse_trim_option to fill: no policy and no LIMIT given yet
    (None; settle_trim puts in the defaults)."""
    t = TrimArgs()
    t.policy = None
    t.limit = None
    return t


@cython.cfunc
@cython.locals(i=cython.Py_ssize_t, more=cython.Py_ssize_t, lo=bytes)
def parse_trim_option(t: TrimArgs, argv: list[bytes], i: cython.Py_ssize_t) -> cython.Py_ssize_t:
    """If ``argv[i]`` starts a trim option (``MAXLEN|MINID [=|~] threshold``,
    ``LIMIT count``, ``KEEPREF|DELREF|ACKED``), parse it into ``t`` (from _new_trim)
    and return the index after it; else return ``i``."""
    more = len(argv) - 1 - i
    lo = argv[i].lower()
    if (lo == b"maxlen" or lo == b"minid") and more:
        if t.strategy is not None:
            raise CommandError("ERR syntax error, MAXLEN and MINID options at the same time are not compatible")
        nxt = argv[i + 1]
        t.approx = more >= 2 and nxt == b"~"
        if more >= 2 and (nxt == b"~" or nxt == b"="):
            i += 1
        if lo == b"maxlen":
            t.maxlen = parse_int(argv[i + 1])
            if t.maxlen < 0:
                raise CommandError("ERR The MAXLEN argument must be >= 0.")
        else:
            t.minid = parse_strict_stream_id(argv[i + 1])
        t.strategy = lo.decode()
        return i + 2
    if lo == b"limit" and more:
        t.limit = parse_int(argv[i + 1])
        if t.limit < 0:
            raise CommandError("ERR The LIMIT argument must be >= 0.")
        return i + 2
    if lo in REFERENCE_POLICIES:
        if t.policy is not None:
            raise syntax_error()
        t.policy = lo
        return i + 1
    return i


@cython.cfunc
def settle_trim(ctx: Ctx, t: TrimArgs, xtrim: cython.bint) -> TrimArgs:
    """Check the trim options parse_trim_option gathered into ``t`` once the command's
    options are all read, and put in the defaults: ``t``, or None when XADD asked for
    no trim.  ``xtrim``: a trimming strategy is required."""
    if t.limit and t.strategy is None:
        raise CommandError("ERR syntax error, LIMIT cannot be used without specifying a trimming strategy")
    if t.strategy is None:
        if xtrim:
            raise CommandError("ERR syntax error, XTRIM must be called with a trimming strategy")
        return None
    if t.policy is None:
        t.policy = KEEPREF
    if ctx.replaying:
        t.limit = 0   # effects are exact already
    elif t.limit is not None:
        if not t.approx:
            raise CommandError("ERR syntax error, LIMIT cannot be used without the special ~ option")
    elif t.approx:
        t.limit = 100 * ctx.config["stream-node-max-entries"]
        if t.limit <= 0 or t.limit > 1_000_000:
            t.limit = 10000
    else:
        t.limit = 0
    return t


def trim_effect(key: bytes, t: TrimArgs) -> list[bytes]:
    """The command that propagates the exact trim ``t`` of ``key`` (apply_trim's or
    exact_trim's): ``XTRIM key MAXLEN|MINID = threshold [DELREF|ACKED]``."""
    if t.strategy == MAXLEN:
        effect = [b"XTRIM", key, b"MAXLEN", b"=", b"%d" % t.maxlen]
    else:
        effect = [b"XTRIM", key, b"MINID", b"=", format_id(t.minid)]
    if t.policy != KEEPREF:
        effect.append(t.policy.upper())
    return effect


# ---------------------------------------------------------------------------
# XADD
# ---------------------------------------------------------------------------


@cython.cfunc
def next_auto_id(last, now_ms):
    """The ID for ``*``: now, or one more than the last ID if the clock is behind."""
    if now_ms > last >> 64:      # id_ms(last)
        return now_ms << 64      # make_id(now_ms, 0)
    if last == MAX_ID:
        return None
    return last + 1


@cython.cclass
class XaddArgs:
    """XADD's options up to and including the ID: ``[NOMKSTREAM]
    [IDMPAUTO pid | IDMP pid iid] <*|id>`` and its trim (None without MAXLEN/MINID).

    A C struct when compiled (XADD reads several fields per request); only this
    module uses it, so the fields are private to the compiled form."""

    nomkstream: cython.bint
    id_arg: object          # index of the ID argument
    id: object              # explicit ID (None for "*")
    seq_given: cython.bint  # False for the "<ms>-*" form
    idmp_pid: object        # IDMP/IDMPAUTO producer id
    idmp_iid: object        # IDMP idempotent id (None for IDMPAUTO)
    idmp_auto: cython.bint
    trim: TrimArgs

    def __init__(self) -> None:
        self.nomkstream = False
        self.id_arg = None
        self.id = None
        self.seq_given = True
        self.idmp_pid = None
        self.idmp_iid = None
        self.idmp_auto = False
        self.trim = None


def parse_xadd_args(ctx: Ctx, argv: list[bytes]) -> XaddArgs:
    """Parse XADD's options, its trim's among them, up to and including the ID."""
    a: XaddArgs = XaddArgs()
    t: TrimArgs = _new_trim()
    i: cython.Py_ssize_t = 2
    j: cython.Py_ssize_t
    n: cython.Py_ssize_t = len(argv)
    while i < n:
        opt = argv[i]
        if opt == b"*":
            a.id_arg = i
            break
        j = parse_trim_option(t, argv, i)
        if j != i:
            i = j
            continue
        more = n - 1 - i
        lo = opt.lower()
        if lo == b"nomkstream":
            a.nomkstream = True
            i += 1
            continue
        if (lo == b"idmp" and more >= 2) or (lo == b"idmpauto" and more):
            if a.idmp_pid is not None:
                raise CommandError("ERR IDMP/IDMPAUTO specified multiple times")
            auto = lo == b"idmpauto"
            pid = argv[i + 1]
            if not pid:
                raise CommandError("ERR IDMPAUTO requires a non-empty producer ID" if auto
                                   else "ERR IDMP requires a non-empty producer ID")
            if not auto and not argv[i + 2]:
                raise CommandError("ERR IDMP requires a non-empty idempotent ID")
            a.idmp_pid, a.idmp_auto = pid, auto
            a.idmp_iid = None if auto else argv[i + 2]
            i += 2 if auto else 3
            continue
        try:
            a.id, a.seq_given = parse_id(opt, 0, strict=True, allow_seq_star=True)
        except InvalidID:
            raise invalid_id_error() from None
        a.id_arg = i
        if a.idmp_pid is not None:
            raise CommandError("ERR IDMP/IDMPAUTO can be used only with auto-generated IDs")
        break
    a.trim = settle_trim(ctx, t, xtrim=False)
    return a


# What parse_xadd_args returns for ``XADD key * ...`` (and, but for the id, for
# ``XADD key <id> ...``); shared, never modified.
_PLAIN_XADD = cython.declare(XaddArgs, XaddArgs())
_PLAIN_XADD.id_arg = 2


@command("xadd", -5, "write denyoom fast", keys=(1, 1, 1), group="stream", since="5.0.0")
def xadd(ctx: Ctx, argv: list[bytes]):
    """XADD key [NOMKSTREAM] [KEEPREF|DELREF|ACKED] [IDMPAUTO pid | IDMP pid iid] [MAXLEN|MINID [=|~] threshold [LIMIT count]] <*|id> field value [field value ...]

    With IDMP/IDMPAUTO (only with ``*``) a pid/iid seen before adds nothing and
    answers the original entry's id, propagating nothing; a new one propagates
    ``XADD key <id> ..`` then ``XIDMPRECORD key pid iid <id>``.
    """
    # The common forms have no options and parse to the defaults: ``XADD key * f v ..``
    # and ``XADD key <id> f v ..`` (no option starts with a digit): the form of every
    # XADD effect, so of every one an AOF replay or a replica applies (a restart's
    # 100k-command tail: parsing the options and their objects cost ~0.2 of ~1.15 us each).
    a: XaddArgs
    sid = None
    seq_given: cython.bint = True
    arg2: bytes = argv[2]
    if arg2 == b"*":
        a = _PLAIN_XADD
    elif arg2 and 48 <= arg2[0] <= 57:        # '0'..'9'
        a = _PLAIN_XADD
        try:
            sid, seq_given = parse_id(arg2, 0, strict=True, allow_seq_star=True)
        except InvalidID:
            raise invalid_id_error() from None
    else:
        a = parse_xadd_args(ctx, argv)
        sid, seq_given = a.id, a.seq_given
    idpos = a.id_arg
    if idpos is None:
        raise CommandError("ERR wrong number of arguments for 'xadd' command")
    nfields = len(argv) - idpos - 1
    if nfields < 2 or nfields % 2:
        raise CommandError("ERR wrong number of arguments for 'xadd' command")
    explicit = sid is not None
    if explicit and seq_given and sid == MIN_ID:
        raise CommandError("ERR The ID specified in XADD must be greater than 0-0")
    key = argv[1]
    s: Stream = ctx.lookup_stream(key)
    if s is None:
        if a.nomkstream:
            return None
        s = Stream()
        created = True
    else:
        created = False
    idmp = None
    if a.idmp_pid is not None:
        idmp = _idmp_check(ctx, s, a, argv[idpos + 1:])
        if type(idmp) is bytes:
            return idmp                  # a duplicate: the original entry's id
    if s.last_id == MAX_ID:
        raise CommandError("ERR The stream has exhausted the last possible ID, unable to add more items")
    if not explicit:
        sid = next_auto_id(s.last_id, ctx.now_ms)
    elif not seq_given:
        ms = id_ms(sid)
        last_ms = id_ms(s.last_id)
        if ms == last_ms:
            if id_seq(s.last_id) == U64:
                sid = None
            else:
                sid = s.last_id + 1
        elif ms < last_ms:
            sid = None
    if sid is None or sid <= s.last_id:
        raise CommandError("ERR The ID specified in XADD is equal or smaller than the target stream top item")
    fv = argv[idpos + 1:]
    if created:
        ctx.add_key(key, s, True)
    cfg: dict = ctx.config.values
    s.append(sid, fv, cfg["stream-node-max-entries"], cfg["stream-node-max-bytes"])
    reply = format_id(sid)
    if a is _PLAIN_XADD:
        # ``XADD key <* | id> f v ..`` with no options: the effect is argv itself with
        # the id (and the name as Redis propagates it), one copy at its size; a list of
        # three extended by fv grows it (~150 instructions of an XADD request, callgrind).
        effect: list = list(argv)
        effect[0] = b"XADD"
        effect[2] = reply
        ctx.propagate(effect)
    else:
        ctx.propagate([b"XADD", key, reply, *fv])
    ctx.notify(b"xadd", key)
    if idmp is not None:
        _idmp_record(ctx, s, key, idmp, sid)
    if a.trim is not None:
        n, exact = apply_trim(s, a.trim)
        if n:
            ctx.propagate(trim_effect(key, exact))
            ctx.notify(b"xtrim", key)
    return reply


def append_auto(ctx: Ctx, key: bytes, s: Stream, fv: list) -> bytes:
    """Append ``fv`` to the stream ``s`` at ``key`` (already in the keyspace) with the id
    ``XADD key *`` would give it, and propagate ``XADD key <id> ..``; returns the id text.
    For the server's own appends (dead letters): the caller has checked that the
    stream's ids are not used up (``s.last_id < MAX_ID``)."""
    sid = next_auto_id(s.last_id, ctx.now_ms)
    cfg: dict = ctx.config.values
    s.append(sid, fv, cfg["stream-node-max-entries"], cfg["stream-node-max-bytes"])
    text = format_id(sid)
    ctx.propagate([b"XADD", key, text, *fv])
    ctx.notify(b"xadd", key)
    return text


def idmp_settings(cfg, s: Stream) -> tuple[int, int]:
    """The stream's effective (duration seconds, maxsize) for IDMP; ``cfg``: the
    server's config (``ctx.config`` or its values)."""
    d, m = cfg["stream-idmp-duration"], cfg["stream-idmp-maxsize"]
    return s.idmp.effective(d, m) if s.idmp is not None else (d, m)


def _idmp_check(ctx: Ctx, s: Stream, a: XaddArgs, fv: list[bytes]):
    """XADD IDMP/IDMPAUTO before adding: the original id (bytes) if this is a
    duplicate, else the (pid, iid) to record once the entry exists."""
    iid = auto_iid(fv) if a.idmp_auto else a.idmp_iid
    if s.idmp is not None:
        duration, _ = idmp_settings(ctx.config, s)
        hit = s.idmp.lookup(a.idmp_pid, iid, ctx.now_ms, duration)
        if hit is not None:
            s.idmp.duplicates += 1
            return format_id(hit)
    return (a.idmp_pid, iid)


def _idmp_record(ctx: Ctx, s: Stream, key: bytes, pid_iid: tuple[bytes, bytes], sid: int) -> None:
    pid, iid = pid_iid
    duration, maxsize = idmp_settings(ctx.config, s)
    if s.idmp is None:
        s.idmp = IdmpState()
    s.idmp.record(pid, iid, sid, duration, maxsize)
    ctx.propagate([b"XIDMPRECORD", key, pid, iid, format_id(sid)], dirty=0)


# ---------------------------------------------------------------------------
# XTRIM, XDEL, XLEN
# ---------------------------------------------------------------------------


@command("xtrim", -4, "write", keys=(1, 1, 1), group="stream", since="5.0.0")
def xtrim(ctx: Ctx, argv: list[bytes]):
    """XTRIM key MAXLEN|MINID [=|~] threshold [LIMIT count] [KEEPREF|DELREF|ACKED]"""
    t = _new_trim()
    i: cython.Py_ssize_t = 2
    j: cython.Py_ssize_t
    while i < len(argv):
        j = parse_trim_option(t, argv, i)
        if j == i:
            raise syntax_error()
        i = j
    settle_trim(ctx, t, xtrim=True)
    s = ctx.lookup_stream(argv[1])
    if s is None:
        return 0
    n, exact = apply_trim(s, t)
    if n:
        ctx.propagate(trim_effect(argv[1], exact), dirty=n)
        ctx.notify(b"xtrim", argv[1])
    return n


@command("xdel", -3, "write fast", keys=(1, 1, 1), group="stream", since="5.0.0")
def xdel(ctx: Ctx, argv: list[bytes]):
    """XDEL key id [id ...]"""
    s = ctx.lookup_stream(argv[1])
    if s is None:
        return 0
    ids = parse_strict_stream_ids(argv[2:])
    deleted = 0
    for sid in ids:
        if s.delete(sid):
            deleted += 1
    if deleted:
        ctx.propagate_as_is(dirty=deleted)
        ctx.notify(b"xdel", argv[1])
    return deleted


@command("xlen", 2, "readonly fast", keys=(1, 1, 1), group="stream", since="5.0.0")
def xlen(ctx: Ctx, argv: list[bytes]):
    """XLEN key"""
    s = ctx.lookup_stream(argv[1], read=True)
    return s.length if s is not None else 0


# ---------------------------------------------------------------------------
# XRANGE, XREVRANGE
# ---------------------------------------------------------------------------


# What parse_range_bound returns for the open bounds (the usual XRANGE - +).
_OPEN_BOUNDS = {b"-": (MIN_ID, False), b"+": (MAX_ID, False)}
# The COUNTs readers usually give, as parse_int reads them (COUNT 0 is not here:
# it means a null reply).
_SMALL_COUNTS = {b"%d" % n: n for n in range(1, 1025)}


def _range(ctx: Ctx, argv: list[bytes], rev: bool):
    start_arg, end_arg = (argv[3], argv[2]) if rev else (argv[2], argv[3])
    start, start_ex = _OPEN_BOUNDS.get(start_arg) or parse_range_bound(start_arg, 0)
    if start_ex:
        if start == MAX_ID:
            raise CommandError("ERR invalid start ID for the interval")
        start += 1
    end, end_ex = _OPEN_BOUNDS.get(end_arg) or parse_range_bound(end_arg, U64)
    if end_ex:
        if end == MIN_ID:
            raise CommandError("ERR invalid end ID for the interval")
        end -= 1
    count = 0               # no COUNT: everything
    j = 4
    while j < len(argv):
        if eq(argv[j], b"count") and j + 1 < len(argv):
            raw = argv[j + 1]
            count = _SMALL_COUNTS.get(raw)
            if count is None:
                count = parse_int(raw)
                if count <= 0:
                    count = None    # COUNT 0 (or less): a null reply, if the key exists
            j += 2
        else:
            raise syntax_error()
    s = ctx.lookup_stream(argv[1], read=True)
    if s is None:
        return []
    if count is None:
        return NULL_ARRAY
    return entries_reply(s.range(start, end, count, rev))


@command("xrange", -4, "readonly", keys=(1, 1, 1), group="stream", since="5.0.0")
def xrange(ctx: Ctx, argv: list[bytes]):
    """XRANGE key start end [COUNT count]"""
    return _range(ctx, argv, rev=False)


@command("xrevrange", -4, "readonly", keys=(1, 1, 1), group="stream", since="5.0.0")
def xrevrange(ctx: Ctx, argv: list[bytes]):
    """XREVRANGE key end start [COUNT count]"""
    return _range(ctx, argv, rev=True)


# ---------------------------------------------------------------------------
# XREAD (and the argument parser XREADGROUP shares)
# ---------------------------------------------------------------------------

XREAD_BLOCKED_DEFAULT_COUNT = 1000
NEW_ONLY = -1          # the ">" id of XREADGROUP
LAST_ENTRY = -2        # the "+" id of XREAD (last entry of the stream)


@cython.cclass
class ReadArgs:
    """Parsed XREAD/XREADGROUP options: a C struct when compiled, its fields public
    (groups.py reads them)."""

    timeout = cython.declare(object, visibility="public")         # -1 = no BLOCK
    count = cython.declare(object, visibility="public")
    keys = cython.declare(list, visibility="public")
    raw_ids = cython.declare(list, visibility="public")
    group = cython.declare(object, visibility="public")           # bytes | None
    consumer = cython.declare(object, visibility="public")        # bytes | None
    noack = cython.declare(cython.bint, visibility="public")
    claim_min_idle = cython.declare(object, visibility="public")  # int | None
    maxcount = cython.declare(object, visibility="public")  # MAXCOUNT: entries of the whole reply; 0 = no cap
    maxsize = cython.declare(object, visibility="public")   # MAXSIZE: bytes of the whole reply's entries; 0 = no cap

    def __init__(self) -> None:
        self.timeout = -1
        self.count = 0
        self.keys = []
        self.raw_ids = []
        self.group = None
        self.consumer = None
        self.noack = False
        self.claim_min_idle = None
        self.maxcount = 0
        self.maxsize = 0

    def budget(self, resp3: bool) -> "ReadBudget | None":
        """A fresh budget for one serving of the read (None without MAXCOUNT/MAXSIZE)."""
        if not (self.maxcount or self.maxsize):
            return None
        return ReadBudget(self.maxcount, self.maxsize, resp3)


class ReadBudget:
    """MAXCOUNT/MAXSIZE of one XREAD/XREADGROUP reply, across all its streams.

    MAXSIZE is kept as Redis's xreadCommand keeps it: against the bytes of the
    reply written so far (its ``net_output_bytes_curr_cmd``): each served
    stream's name and framing, its entries as sent (the four elements of a CLAIM
    read), and the length of its entry list once the stream is done; the reply's
    own length comes last and never counts.  Before each stream and each entry
    the read stops if some entry was taken and the bytes written reach MAXSIZE:
    the entry that crosses the budget is sent, the next one is not, and the
    first entry is always sent, however big.  Readers ask before they change
    anything (PEL, last-delivered id, effects), so an entry left out is untouched.
    """

    __slots__ = ("entries_left", "maxsize", "written", "taken", "resp3")

    def __init__(self, maxcount: int, maxsize: int, resp3: bool) -> None:
        self.entries_left = maxcount or None
        self.maxsize = maxsize
        self.written = 0
        self.taken = 0
        self.resp3 = resp3

    @property
    def sized(self) -> bool:
        return bool(self.maxsize)

    def exhausted(self) -> bool:
        return self.entries_left == 0 or (bool(self.maxsize) and self.taken > 0
                                          and self.written >= self.maxsize)

    def open_stream(self, key: bytes) -> None:
        """A stream is served: its name (in RESP2 inside a two-element array)."""
        if self.maxsize:
            self.written += (0 if self.resp3 else 4) + len(b"$%d\r\n\r\n" % len(key)) + len(key)

    def close_stream(self, entries: int) -> None:
        """The stream's entry list is done: its length header is written."""
        if self.maxsize:
            self.written += len(b"*%d\r\n" % entries)

    def cap(self, count: int) -> int:
        """A stream's COUNT (0 = all) cut to what MAXCOUNT leaves."""
        left = self.entries_left
        if left is None:
            return count
        return min(count, left) if count else left

    def take(self, size: int) -> bool:
        """Whether one more entry of ``size`` bytes is sent; if it is, it is counted."""
        if self.exhausted():
            return False
        self.written += size
        if self.entries_left is not None:
            self.entries_left -= 1
        self.taken += 1
        return True

    def fit(self, sizes) -> int:
        """How many of the leading entries with these sizes are sent (each counted)."""
        n = 0
        for size in sizes:
            if not self.take(size):
                break
            n += 1
        return n


_UNBALANCED_XREAD = ("ERR Unbalanced 'xread' list of streams: for each stream key an ID, "
                     "'+', or '$' must be specified.")
_UNBALANCED_XREADGROUP = ("ERR Unbalanced 'xreadgroup' list of streams: for each stream key "
                          "an ID or '>' must be specified.")


def parse_timeout_ms(raw: bytes) -> int:
    t = parse_int(raw, "ERR timeout is not an integer or out of range")
    if t < 0:
        raise CommandError("ERR timeout is negative")
    return t


def _parse_read_cap(raw: bytes, name: str) -> int:
    n = parse_int(raw)
    if n < 1:
        raise CommandError(f"ERR {name} must be a positive integer")
    return n


@cython.locals(a=ReadArgs, n=cython.Py_ssize_t, i=cython.Py_ssize_t, more=cython.Py_ssize_t,
               streams_arg=cython.Py_ssize_t, nargs=cython.Py_ssize_t, half=cython.Py_ssize_t,
               lo=bytes)
def parse_read_args(argv: list[bytes], group_cmd: bool) -> ReadArgs:
    a = ReadArgs()
    n = len(argv)
    i = 1
    streams_arg = 0
    while i < n:
        more = n - i - 1
        lo = argv[i].lower()
        if lo == b"block" and more:
            a.timeout = parse_timeout_ms(argv[i + 1])
            i += 2
        elif lo == b"count" and more:
            a.count = max(parse_int(argv[i + 1]), 0)
            i += 2
        elif lo == b"maxcount" and more:
            a.maxcount = _parse_read_cap(argv[i + 1], "MAXCOUNT")
            i += 2
        elif lo == b"maxsize" and more:
            a.maxsize = _parse_read_cap(argv[i + 1], "MAXSIZE")
            i += 2
        elif lo == b"streams" and more:
            streams_arg = i + 1
            nargs = n - streams_arg
            if nargs % 2:
                # Redis >= 7.4 names the command and the special ids it takes
                # (7.0 said "XREAD" and "'$'" for both).
                raise CommandError(_UNBALANCED_XREADGROUP if group_cmd else _UNBALANCED_XREAD)
            half = nargs // 2
            a.keys = argv[streams_arg:streams_arg + half]
            a.raw_ids = argv[streams_arg + half:]
            break
        elif lo == b"group" and more >= 2:
            if not group_cmd:
                raise CommandError("ERR The GROUP option is only supported by XREADGROUP. "
                                   "You called XREAD instead.")
            a.group, a.consumer = argv[i + 1], argv[i + 2]
            i += 3
        elif lo == b"noack":
            if not group_cmd:
                raise CommandError("ERR The NOACK option is only supported by XREADGROUP. "
                                   "You called XREAD instead.")
            a.noack = True
            i += 1
        elif lo == b"claim" and more:
            if not group_cmd:
                raise CommandError("ERR The CLAIM option is only supported by XREADGROUP. "
                                   "You called XREAD instead.")
            a.claim_min_idle = parse_int(argv[i + 1], "ERR min-idle-time is not an integer")
            if a.claim_min_idle < 0:
                raise CommandError("ERR min-idle-time must be a positive integer")
            i += 2
        else:
            raise syntax_error()
    if not streams_arg:
        raise syntax_error()
    if group_cmd and a.group is None:
        raise CommandError("ERR Missing GROUP option for XREADGROUP")
    if a.maxcount and a.count and a.maxcount < a.count:
        # MAXCOUNT caps the whole reply, so Redis refuses one below the per-stream COUNT.
        raise CommandError("ERR MAXCOUNT must be greater than or equal to COUNT")
    return a


def xread_reply(ctx: Ctx, items: list) -> object:
    """[[key, entries], ...] under RESP2, {key: entries} under RESP3."""
    if ctx.resp3:
        return Map(items)
    return [[k, v] for k, v in items]


def _read_after(key: bytes, s: Stream, gt: int, count: int, budget: ReadBudget | None):
    """XREAD's entries of ``s`` after ``gt`` (at most ``count``, 0 = all), as the
    reply carries them, within ``budget``; None when there is none to serve."""
    if budget is None:
        got = s.range(gt + 1, MAX_ID, count)
        return entries_reply(got) if got else None
    got = s.range(gt + 1, MAX_ID, budget.cap(count))
    if not got:
        return None
    # Served: the name counts before the entries (so an entry list can end up
    # empty, as in Redis, when the name alone fills MAXSIZE).
    budget.open_stream(key)
    if budget.sized:
        got = got[:budget.fit(entry_size(sid, fv) for sid, fv in got)]
    else:
        got = got[:budget.fit(repeat(0, len(got)))]
    budget.close_stream(len(got))
    return entries_reply(got)


def _xread_serve(keys: list[bytes], after: list[int], count: int, a: ReadArgs):
    """The closure a blocked XREAD uses: reply when some key has entries past its id."""
    def serve(ctx: Ctx):
        items = []
        budget = a.budget(ctx.resp3)
        for key, gt in zip(keys, after):
            s = ctx.db.data.get(key)
            if type(s) is not Stream or not s.length or s.last_id <= gt:
                continue
            if budget is not None and budget.exhausted():
                break
            got = _read_after(key, s, gt, count, budget)
            if got is not None:
                items.append((key, got))
        return xread_reply(ctx, items) if items else None
    return serve


@command("xread", -4, "readonly blocking", group="stream", since="5.0.0",
         key_finder=lambda argv: _stream_key_positions(argv))
def xread(ctx: Ctx, argv: list[bytes]):
    """XREAD [COUNT count] [MAXCOUNT maxcount] [MAXSIZE maxsize] [BLOCK milliseconds] STREAMS key [key ...] id [id ...]"""
    a = parse_read_args(argv, group_cmd=False)
    after: list[int] = []
    streams: list[Stream | None] = []
    for key, raw in zip(a.keys, a.raw_ids):
        s = ctx.lookup_stream(key, read=True)
        streams.append(s)
        if raw == b"$":
            after.append(s.last_id if s is not None else MIN_ID)
        elif raw == b">":
            raise CommandError("ERR The > ID can be specified only when calling XREADGROUP "
                               "using the GROUP <group> <consumer> option.")
        elif raw == b"+":
            after.append(LAST_ENTRY)
        else:
            after.append(parse_strict_stream_id(raw))
    # Redis looks each key up again to serve it (xreadCommand): INFO counts both.
    ctx.count_lookups_again(a.keys, streams)
    items = []
    budget = a.budget(ctx.resp3)
    for key, s, gt in zip(a.keys, streams, after):
        if s is None or not s.length:
            continue
        if budget is not None and budget.exhausted():
            break
        if gt == LAST_ENTRY:
            last = s.last_entry()
            if budget is not None:
                budget.open_stream(key)
                budget.take(entry_size(*last) if budget.sized else 0)   # not exhausted: sent
                budget.close_stream(1)
            items.append((key, [entry_reply(*last)]))
            continue
        if s.last_id <= gt:
            continue
        got = _read_after(key, s, gt, a.count, budget)
        if got is not None:
            items.append((key, got))
    if items:
        return xread_reply(ctx, items)
    if a.timeout == -1:
        return NULL_ARRAY
    # "+" on an empty stream waits for the next entry, like "$".
    after = [(s.last_id if s is not None else MIN_ID) if gt == LAST_ENTRY else gt
             for s, gt in zip(streams, after)]
    return BlockRequest(list(a.keys), a.timeout,
                        _xread_serve(list(a.keys), after, a.count or XREAD_BLOCKED_DEFAULT_COUNT,
                                     a),
                        NULL_ARRAY, "xread")


def _stream_key_positions(argv: list[bytes]) -> list[int]:
    """Key positions of XREAD/XREADGROUP: the first half of the args after STREAMS."""
    for i in range(1, len(argv)):
        if argv[i].lower() == b"streams":
            rest = len(argv) - i - 1
            return list(range(i + 1, i + 1 + rest // 2))
    return []


# ---------------------------------------------------------------------------
# XSETID
# ---------------------------------------------------------------------------


@command("xsetid", -3, "write denyoom fast", keys=(1, 1, 1), group="stream", since="5.0.0")
def xsetid(ctx: Ctx, argv: list[bytes]):
    """XSETID key last-id [ENTRIESADDED entries-added] [MAXDELETEDID max-deleted-id]"""
    sid = parse_strict_stream_id(argv[2])
    entries_added = -1
    max_xdel = MIN_ID
    i = 3
    while i < len(argv):
        more = len(argv) - i - 1
        lo = argv[i].lower()
        if lo == b"entriesadded" and more:
            entries_added = parse_int(argv[i + 1])
            if entries_added < 0:
                raise CommandError("ERR entries_added must be positive")
            i += 2
        elif lo == b"maxdeletedid" and more:
            max_xdel = parse_strict_stream_id(argv[i + 1])
            if sid < max_xdel:
                raise CommandError("ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id")
            i += 2
        else:
            raise syntax_error()
    s = ctx.lookup_stream(argv[1])
    if s is None:
        raise CommandError("ERR no such key")
    # Redis >= 7.2 (xsetidCommand): the new last id may not go below an id already
    # deleted, whatever MAXDELETEDID says; 7.0 accepted it.
    if sid < s.max_deleted_id:
        raise CommandError("ERR The ID specified in XSETID is smaller than current max_deleted_entry_id")
    if s.length:
        last = s.last_entry()[0]
        if sid < last:
            raise CommandError("ERR The ID specified in XSETID is smaller than the target stream top item")
        if entries_added != -1 and s.length > entries_added:
            raise CommandError("ERR The entries_added specified in XSETID is smaller than the target stream length")
    s.last_id = sid
    if entries_added != -1:
        s.entries_added = entries_added
    if max_xdel != MIN_ID:
        s.max_deleted_id = max_xdel
    ctx.propagate_as_is()
    ctx.notify(b"xsetid", argv[1])
    return OK


# ---------------------------------------------------------------------------
# XDELEX (and the argument parsers XACKDEL shares)
# ---------------------------------------------------------------------------

def parse_ids_block(argv: list[bytes], i: int, bad: str, mismatch: str,
                    most: int = (1 << 63) - 1) -> tuple[list[bytes], int]:
    """The ``numids id [id ...]`` at ``argv[i:]`` (after an IDS): the raw ids and the
    index after them.  ``bad`` is the error for a numids that is not an integer in
    1..``most``, ``mismatch`` for one past the arguments (each command has its texts)."""
    numids = parse_int(argv[i], bad)
    if not 1 <= numids <= most:
        raise CommandError(bad)
    start = i + 1
    if numids > len(argv) - start:
        raise CommandError(mismatch)
    return argv[start:start + numids], start + numids


def parse_policy_ids(argv: list[bytes], pos: int) -> tuple[bytes, list[int]]:
    """``[KEEPREF|DELREF|ACKED] IDS numids id [id ...]`` from ``argv[pos:]``, as
    XDELEX and XACKDEL take it.  Returns (policy, ids)."""
    policy = None
    ids: list[bytes] | None = None
    n = len(argv)
    i = pos
    while i < n:
        lo = argv[i].lower()
        if lo == b"ids" and i + 1 < n:
            ids, i = parse_ids_block(argv, i + 1, "ERR Number of IDs must be a positive integer",
                                     "ERR The `numids` parameter must match the number of "
                                     "arguments")
        elif policy is None and lo in REFERENCE_POLICIES:
            policy = lo
            i += 1
        else:
            raise syntax_error()
    if ids is None:
        raise CommandError("ERR IDS option is required")
    return policy or KEEPREF, parse_strict_stream_ids(ids)


@command("xdelex", -5, "write fast", keys=(1, 1, 1), group="stream", since="8.2.0")
def xdelex(ctx: Ctx, argv: list[bytes]):
    """XDELEX key [KEEPREF|DELREF|ACKED] IDS numids id [id ...]"""
    policy, ids = parse_policy_ids(argv, 2)
    s = ctx.lookup_stream(argv[1])
    if s is None:
        return [DEL_MISSING] * len(ids)
    changed: list[int] = []
    codes = delete_with_policy(s, ids, policy, changed)
    if changed:
        # Deterministic as given: the decisions depend only on the stream's state.
        ctx.propagate_as_is(dirty=len(changed))
    if DEL_DELETED in codes:
        ctx.notify(b"xdel", argv[1])      # Redis 8.2: when an entry went, not for references
    return codes


# ---------------------------------------------------------------------------
# IDMP configuration and records: XCFGSET, XIDMPRECORD
# ---------------------------------------------------------------------------


@command("xcfgset", -2, "write fast", keys=(1, 1, 1), group="stream", since="8.6.0")
def xcfgset(ctx: Ctx, argv: list[bytes]):
    """XCFGSET key [IDMP-DURATION duration] [IDMP-MAXSIZE maxsize]"""
    duration = maxsize = None
    i = 2
    n = len(argv)
    while i < n:
        lo = argv[i].lower()
        if lo == b"idmp-duration" and i + 1 < n:
            duration = parse_int(argv[i + 1])
            if not DURATION_MIN <= duration <= DURATION_MAX:
                raise CommandError(f"ERR IDMP-DURATION must be between {DURATION_MIN} and "
                                   f"{DURATION_MAX} seconds")
            i += 2
        elif lo == b"idmp-maxsize" and i + 1 < n:
            maxsize = parse_int(argv[i + 1])
            if not MAXSIZE_MIN <= maxsize <= MAXSIZE_MAX:
                raise CommandError(f"ERR IDMP-MAXSIZE must be between {MAXSIZE_MIN} and "
                                   f"{MAXSIZE_MAX} entries")
            i += 2
        else:
            raise syntax_error()
    if duration is None and maxsize is None:
        raise CommandError("ERR At least one parameter must be specified")
    s = ctx.lookup_stream(argv[1])
    if s is None:
        raise CommandError("ERR no such key")
    if s.idmp is None:
        s.idmp = IdmpState()
    cfg = ctx.config
    s.idmp.configure(duration, maxsize, cfg["stream-idmp-duration"], cfg["stream-idmp-maxsize"])
    ctx.propagate_as_is()
    ctx.notify(b"xcfgset", argv[1])
    return OK


@command("xidmprecord", 5, "write denyoom fast", keys=(1, 1, 1), group="stream", since="8.8.0")
def xidmprecord(ctx: Ctx, argv: list[bytes]):
    """XIDMPRECORD key pid iid stream-id"""
    key, pid, iid = argv[1], argv[2], argv[3]
    if not pid:
        raise CommandError("ERR IDMP requires a non-empty producer ID")
    if not iid:
        raise CommandError("ERR IDMP requires a non-empty idempotent ID")
    sid = parse_strict_stream_id(argv[4])
    s = ctx.lookup_stream(key)
    if s is None:
        raise CommandError("ERR no such key")
    if s.get(sid) is None:
        raise CommandError("ERR The stream ID does not exist or was deleted")
    if s.idmp is None:
        s.idmp = IdmpState()
    duration, maxsize = idmp_settings(ctx.config, s)
    have = s.idmp.mapped(pid, iid)
    if have is not None:
        if have[0] == sid:
            return OK
        # A mapping that had expired by the time of this entry was legitimately
        # replaced on the primary (XADD IDMP reusing an expired iid).
        if have[1] + duration * 1000 > id_ms(sid):
            raise CommandError("ERR The producer ID and idempotent ID are already mapped "
                               "to a different stream ID")
    s.idmp.record(pid, iid, sid, duration, maxsize)
    ctx.propagate_as_is()
    return OK
