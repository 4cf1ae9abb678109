"""Generic key commands and the string type.

The string type exists for consumer checkpoints (``SET last-processed <id>``)
and so that WRONGTYPE is real; streams are the product.
"""

from __future__ import annotations


from ..engine import Stream, type_name
from ..protocol.reply import OK, CommandError, Status
from .args import eq, parse_int
from ..dispatch.context import WRONGTYPE, Ctx, syntax_error
from ..glob import glob_matcher
from ..dispatch.registry import command

# ---------------------------------------------------------------------------
# Key space
# ---------------------------------------------------------------------------


def _delete(ctx: Ctx, argv: list[bytes]) -> int:
    n = 0
    for key in argv[1:]:
        if ctx.lookup(key) is not None:
            ctx.db.delete(key)
            ctx.propagate([b"DEL", key])
            ctx.notify(b"del", key)
            n += 1
    return n


@command("del", -2, "write", keys=(1, -1, 1), since="1.0.0")
def del_(ctx: Ctx, argv):
    """DEL key [key ...]"""
    return _delete(ctx, argv)


@command("unlink", -2, "write fast", keys=(1, -1, 1), since="4.0.0")
def unlink(ctx: Ctx, argv):
    """UNLINK key [key ...]"""
    return _delete(ctx, argv)


@command("exists", -2, "readonly fast", keys=(1, -1, 1), since="1.0.0")
def exists(ctx: Ctx, argv):
    """EXISTS key [key ...]"""
    return sum(1 for key in argv[1:] if ctx.lookup(key, read=True) is not None)


@command("type", 2, "readonly fast", keys=(1, 1, 1), since="1.0.0")
def type_(ctx: Ctx, argv):
    """TYPE key"""
    value = ctx.lookup(argv[1], read=True)
    return Status("none" if value is None else type_name(value).decode())


@command("dbsize", 1, "readonly fast", since="1.0.0")
def dbsize(ctx: Ctx, argv):
    """DBSIZE"""
    return len(ctx.db.data)


def _live_keys(ctx: Ctx):
    db = ctx.db
    now = ctx.now_ms
    for key in list(db.data):
        if db.expires and db.is_expired(key, now):
            continue
        yield key


@command("keys", 2, "readonly", since="1.0.0")
def keys_(ctx: Ctx, argv):
    """KEYS pattern"""
    if argv[1] == b"*":
        return list(_live_keys(ctx))
    matches = glob_matcher(argv[1])
    return [k for k in _live_keys(ctx) if matches(k)]


@command("scan", -2, "readonly", since="2.8.0")
def scan(ctx: Ctx, argv):
    """SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]

    The cursor is a position in the key order of the dict.  Keys added or
    removed during a scan may or may not be returned, as in Redis; keys present
    for the whole scan are returned at least once because Python dicts keep
    insertion order and deletions do not reorder the rest.
    """
    cursor = _parse_cursor(argv[1])
    count = 10
    matches = None
    want_type = None
    i = 2
    while i < len(argv):
        more = len(argv) - i - 1
        lo = argv[i].lower()
        if lo == b"count" and more:
            count = parse_int(argv[i + 1])
            if count < 1:
                raise syntax_error()
            i += 2
        elif lo == b"match" and more:
            matches = None if argv[i + 1] == b"*" else glob_matcher(argv[i + 1])
            i += 2
        elif lo == b"type" and more:
            want_type = argv[i + 1].lower()
            i += 2
        else:
            raise syntax_error()
    keys = list(ctx.db.data)
    batch = keys[cursor:cursor + count]
    nxt = cursor + count
    if nxt >= len(keys):
        nxt = 0
    out = []
    now = ctx.now_ms
    for key in batch:
        if ctx.db.is_expired(key, now):
            continue
        if matches is not None and not matches(key):
            continue
        if want_type is not None and type_name(ctx.db.data[key]) != want_type:
            continue
        out.append(key)
    return [b"%d" % nxt, out]


def _parse_cursor(raw: bytes) -> int:
    try:
        v = int(raw)
    except ValueError:
        raise CommandError("ERR invalid cursor") from None
    if v < 0 or not raw.strip().isdigit():
        raise CommandError("ERR invalid cursor")
    return v


@command("flushdb", -1, "write", since="1.0.0")
def flushdb(ctx: Ctx, argv):
    """FLUSHDB [ASYNC|SYNC]"""
    if len(argv) > 2 or (len(argv) == 2 and argv[1].lower() not in (b"async", b"sync")):
        raise syntax_error()
    ctx.db.clear()
    ctx.propagate([b"FLUSHDB"])
    return OK


@command("flushall", -1, "write", since="1.0.0")
def flushall(ctx: Ctx, argv):
    """FLUSHALL [ASYNC|SYNC]"""
    if len(argv) > 2 or (len(argv) == 2 and argv[1].lower() not in (b"async", b"sync")):
        raise syntax_error()
    for db in ctx.core.keyspace.dbs:
        db.clear()
    ctx.propagate([b"FLUSHALL"])
    return OK


def _swapdb_index(raw: bytes, error: str) -> int:
    """An index as Redis's getIntFromObjectOrReply takes it: a 32-bit integer."""
    v = parse_int(raw, error)
    if not -(1 << 31) <= v < (1 << 31):
        raise CommandError(error)
    return v


@command("swapdb", 3, "write fast", group="server", since="4.0.0",
         categories=("@keyspace", "@write", "@fast", "@dangerous"))
def swapdb(ctx: Ctx, argv):
    """SWAPDB index1 index2"""
    first = _swapdb_index(argv[1], "ERR invalid first DB index")
    second = _swapdb_index(argv[2], "ERR invalid second DB index")
    keyspace = ctx.core.keyspace
    if not (0 <= first < len(keyspace) and 0 <= second < len(keyspace)):
        raise CommandError("ERR DB index is out of range")
    if first != second:
        keyspace.swap(first, second)
    # Deterministic as it is; the effect path wakes the blocked clients of both
    # databases (Core._emit), so that each waiting command runs again.
    ctx.propagate_as_is()
    return OK


@command("rename", 3, "write", keys=(1, 2, 1), since="1.0.0")
def rename(ctx: Ctx, argv):
    """RENAME key newkey"""
    return _rename(ctx, argv, nx=False)


@command("renamenx", 3, "write fast", keys=(1, 2, 1), since="1.0.0")
def renamenx(ctx: Ctx, argv):
    """RENAMENX key newkey"""
    return _rename(ctx, argv, nx=True)


def _rename(ctx: Ctx, argv, nx: bool):
    src, dst = argv[1], argv[2]
    value = ctx.lookup(src)
    if value is None:
        raise CommandError("ERR no such key")
    if src == dst:
        return 0 if nx else OK
    if nx and ctx.lookup(dst) is not None:
        return 0
    when = ctx.db.expires.get(src)
    ctx.db.delete(src)
    ctx.lookup(dst)
    ctx.db.delete(dst)
    ctx.add_key(dst, value)
    if when is not None:
        ctx.db.expires[dst] = when
    ctx.propagate_as_is()
    ctx.notify(b"rename_from", src)
    ctx.notify(b"rename_to", dst)
    return 1 if nx else OK


@command("copy", -3, "write denyoom", keys=(1, 2, 1), since="6.2.0")
def copy(ctx: Ctx, argv):
    """COPY source destination [DB destination-db] [REPLACE]"""
    from ..persistence.codec import clone_value
    dst_db = ctx.db
    replace = False
    i = 3
    while i < len(argv):
        lo = argv[i].lower()
        if lo == b"replace":
            replace = True
            i += 1
        elif lo == b"db" and i + 1 < len(argv):
            idx = parse_int(argv[i + 1])
            if not 0 <= idx < len(ctx.core.keyspace):
                raise CommandError("ERR DB index is out of range")
            dst_db = ctx.core.keyspace[idx]
            i += 2
        else:
            raise syntax_error()
    src, dst = argv[1], argv[2]
    if src == dst and dst_db is ctx.db:
        raise CommandError("ERR source and destination objects are the same")
    value = ctx.lookup(src, read=True)
    if value is None:
        return 0
    if dst_db is ctx.db:
        exists = ctx.lookup(dst) is not None        # (an expired one goes: its event)
    else:
        exists = dst in dst_db.data and not (dst_db.expires and dst_db.is_expired(dst, ctx.now_ms))
    if exists and not replace:
        return 0
    dst_db.set(dst, clone_value(value))
    ctx.notify(b"new", dst, dst_db.index)       # Redis's dbAdd, after deleting a replaced key
    when = ctx.db.expires.get(src)
    if when is not None:
        dst_db.expires[dst] = when
    ctx.propagate_as_is()
    ctx.notify(b"copy_to", dst, dst_db.index)
    return 1


# ---------------------------------------------------------------------------
# Expiry
# ---------------------------------------------------------------------------


def _expire(ctx: Ctx, argv, unit_ms: int, absolute: bool):
    key = argv[1]
    try:
        t = parse_int(argv[2])
    except CommandError:
        raise CommandError("ERR value is not an integer or out of range") from None
    nx = xx = gt = lt = False
    for opt in argv[3:]:
        lo = opt.lower()
        if lo == b"nx":
            nx = True
        elif lo == b"xx":
            xx = True
        elif lo == b"gt":
            gt = True
        elif lo == b"lt":
            lt = True
        else:
            raise CommandError(f"ERR Unsupported option {opt.decode('utf-8', 'replace')}")
    if nx and (xx or gt or lt):
        raise CommandError("ERR NX and XX, GT or LT options at the same time are not compatible")
    if gt and lt:
        raise CommandError("ERR GT and LT options at the same time are not compatible")
    when = t * unit_ms if absolute else ctx.now_ms + t * unit_ms
    if abs(t) > (2**63 - 1) // unit_ms or not (-(2**63) < when < 2**63):
        name = argv[0].decode().lower()
        raise CommandError(f"ERR invalid expire time in '{name}' command")
    if ctx.lookup(key) is None:
        return 0
    cur = ctx.db.expires.get(key)
    if nx and cur is not None:
        return 0
    if xx and cur is None:
        return 0
    if gt and (cur is None or when <= cur):
        return 0
    if lt and cur is not None and when >= cur:
        return 0
    if when <= ctx.now_ms:
        ctx.db.delete(key)
        ctx.propagate([b"DEL", key])
        ctx.notify(b"del", key)
        return 1
    ctx.db.expires[key] = when
    ctx.propagate([b"PEXPIREAT", key, b"%d" % when])
    ctx.notify(b"expire", key)
    return 1


@command("expire", -3, "write fast", keys=(1, 1, 1), since="1.0.0")
def expire(ctx, argv):
    """EXPIRE key seconds [NX|XX|GT|LT]"""
    return _expire(ctx, argv, 1000, False)


@command("pexpire", -3, "write fast", keys=(1, 1, 1), since="2.6.0")
def pexpire(ctx, argv):
    """PEXPIRE key milliseconds [NX|XX|GT|LT]"""
    return _expire(ctx, argv, 1, False)


@command("expireat", -3, "write fast", keys=(1, 1, 1), since="1.2.0")
def expireat(ctx, argv):
    """EXPIREAT key unix-time-seconds [NX|XX|GT|LT]"""
    return _expire(ctx, argv, 1000, True)


@command("pexpireat", -3, "write fast", keys=(1, 1, 1), since="2.6.0")
def pexpireat(ctx, argv):
    """PEXPIREAT key unix-time-milliseconds [NX|XX|GT|LT]"""
    return _expire(ctx, argv, 1, True)


def _ttl(ctx: Ctx, key: bytes, unit_ms: int, absolute: bool) -> int:
    if ctx.lookup(key, read=True) is None:
        return -2
    when = ctx.db.expires.get(key)
    if when is None:
        return -1
    if absolute:
        return when // unit_ms
    left = max(when - ctx.now_ms, 0)
    return (left + unit_ms // 2) // unit_ms if unit_ms > 1 else left


@command("ttl", 2, "readonly fast", keys=(1, 1, 1), since="1.0.0")
def ttl(ctx, argv):
    """TTL key"""
    return _ttl(ctx, argv[1], 1000, False)


@command("pttl", 2, "readonly fast", keys=(1, 1, 1), since="2.6.0")
def pttl(ctx, argv):
    """PTTL key"""
    return _ttl(ctx, argv[1], 1, False)


@command("expiretime", 2, "readonly fast", keys=(1, 1, 1), since="7.0.0")
def expiretime(ctx, argv):
    """EXPIRETIME key"""
    return _ttl(ctx, argv[1], 1000, True)


@command("pexpiretime", 2, "readonly fast", keys=(1, 1, 1), since="7.0.0")
def pexpiretime(ctx, argv):
    """PEXPIRETIME key"""
    return _ttl(ctx, argv[1], 1, True)


@command("persist", 2, "write fast", keys=(1, 1, 1), since="2.2.0")
def persist(ctx, argv):
    """PERSIST key"""
    if ctx.lookup(argv[1]) is None or argv[1] not in ctx.db.expires:
        return 0
    del ctx.db.expires[argv[1]]
    ctx.propagate_as_is()
    ctx.notify(b"persist", argv[1])
    return 1


# ---------------------------------------------------------------------------
# Strings
# ---------------------------------------------------------------------------


def _string(ctx: Ctx, key: bytes, read: bool = False):
    value = ctx.lookup(key, read)
    if value is not None and type(value) is not bytes:
        raise CommandError(WRONGTYPE)
    return value


@command("get", 2, "readonly fast", keys=(1, 1, 1), since="1.0.0")
def get(ctx, argv):
    """GET key"""
    return _string(ctx, argv[1], read=True)


@command("mget", -2, "readonly fast", keys=(1, -1, 1), since="1.0.0")
def mget(ctx, argv):
    """MGET key [key ...]"""
    out = []
    for key in argv[1:]:
        v = ctx.lookup(key, read=True)
        out.append(v if type(v) is bytes else None)
    return out


@command("set", -3, "write denyoom", keys=(1, 1, 1), since="1.0.0")
def set_(ctx, argv):
    """SET key value [NX|XX] [GET] [EX seconds | PX milliseconds | EXAT unix-time-seconds | PXAT unix-time-milliseconds | KEEPTTL]"""
    key, value = argv[1], argv[2]
    nx = xx = get_old = keepttl = False
    when = None
    i = 3
    expire_seen = False
    while i < len(argv):
        lo = argv[i].lower()
        more = len(argv) - i - 1
        if lo == b"nx" and not xx:
            nx = True
        elif lo == b"xx" and not nx:
            xx = True
        elif lo == b"get":
            get_old = True
        elif lo == b"keepttl" and not expire_seen:
            keepttl = True
            expire_seen = True
        elif lo in (b"ex", b"px", b"exat", b"pxat") and more and not expire_seen:
            t = parse_int(argv[i + 1])
            unit = 1000 if lo in (b"ex", b"exat") else 1
            # Redis: non-positive, or seconds whose ms overflow, or a relative
            # time whose sum with now overflows a signed 64-bit int.
            if t <= 0 or (unit == 1000 and t > (2**63 - 1) // 1000):
                raise CommandError("ERR invalid expire time in 'set' command")
            when = t * unit if lo in (b"exat", b"pxat") else ctx.now_ms + t * unit
            if when > 2**63 - 1:
                raise CommandError("ERR invalid expire time in 'set' command")
            expire_seen = True
            i += 1
        else:
            raise syntax_error()
        i += 1
    old = ctx.lookup(key, read=get_old)     # SET .. GET reads the key (Redis counts it)
    if get_old and old is not None and type(old) is not bytes:
        raise CommandError(WRONGTYPE)
    if (nx and old is not None) or (xx and old is None):
        return old if get_old else None
    _store_string(ctx, key, value, old is None, keepttl)
    ctx.notify(b"set", key)
    if when is not None:
        ctx.db.expires[key] = when
        ctx.propagate([b"SET", key, value, b"PXAT", b"%d" % when])
        ctx.notify(b"expire", key)
    elif keepttl:
        ctx.propagate([b"SET", key, value, b"KEEPTTL"])
    else:
        ctx.propagate([b"SET", key, value])
    return old if get_old else OK


def _store_string(ctx: Ctx, key: bytes, value: bytes, new: bool, keep_ttl: bool) -> None:
    """Redis's setKey: a key that did not exist is added (its ``new`` event)."""
    if new:
        ctx.add_key(key, value, keep_ttl)
    else:
        ctx.db.set(key, value, keep_ttl=keep_ttl)


def _incr(ctx: Ctx, key: bytes, by: int):
    old = _string(ctx, key)
    if old is None:
        cur = 0
    else:
        try:
            cur = parse_int(old)
        except CommandError:
            raise CommandError("ERR value is not an integer or out of range") from None
    new = cur + by
    if not -(2**63) <= new < 2**63:
        raise CommandError("ERR increment or decrement would overflow")
    _store_string(ctx, key, b"%d" % new, old is None, True)
    ctx.propagate([b"SET", key, b"%d" % new, b"KEEPTTL"])
    ctx.notify(b"incrby", key)
    return new


@command("incr", 2, "write denyoom fast", keys=(1, 1, 1), since="1.0.0")
def incr(ctx, argv):
    """INCR key"""
    return _incr(ctx, argv[1], 1)


@command("decr", 2, "write denyoom fast", keys=(1, 1, 1), since="1.0.0")
def decr(ctx, argv):
    """DECR key"""
    return _incr(ctx, argv[1], -1)


@command("incrby", 3, "write denyoom fast", keys=(1, 1, 1), since="1.0.0")
def incrby(ctx, argv):
    """INCRBY key increment"""
    return _incr(ctx, argv[1], parse_int(argv[2]))


@command("decrby", 3, "write denyoom fast", keys=(1, 1, 1), since="1.0.0")
def decrby(ctx, argv):
    """DECRBY key decrement"""
    by = parse_int(argv[2])
    if by == -(2**63):
        raise CommandError("ERR decrement would overflow")   # Redis checks before negating
    return _incr(ctx, argv[1], -by)
