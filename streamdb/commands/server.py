"""Connection and server commands: PING ECHO HELLO AUTH SELECT QUIT RESET,
MULTI EXEC DISCARD WATCH UNWATCH, TIME, DEBUG, SHUTDOWN.

CONFIG, CLIENT, COMMAND and INFO live in admin.py.
"""

from __future__ import annotations

import time

from .. import __version__
from ..engine import Stream
from ..protocol.reply import NULL_ARRAY, OK, PONG, CommandError, Map, Raw, Status
from ..security.enforce import login, reset_to_default
from .args import parse_int
from ..dispatch.context import Ctx, syntax_error
from ..dispatch.registry import command, subcommand

WRONGPASS = "WRONGPASS invalid username-password pair or user is disabled."


@command("ping", -1, "fast", since="1.0.0")
def ping(ctx: Ctx, argv):
    """PING [message]"""
    if len(argv) > 2:
        raise CommandError("ERR wrong number of arguments for 'ping' command")
    if ctx.client.pubsub is not None and ctx.client.resp == 2:
        # RESP2's subscribed mode: a reply that reads like a message (Redis's form).
        return [b"pong", b"" if len(argv) == 1 else argv[1]]
    return PONG if len(argv) == 1 else argv[1]


@command("echo", 2, "fast", since="1.0.0")
def echo(ctx: Ctx, argv):
    """ECHO message"""
    return argv[1]


@command("select", 2, "fast loading stale", since="1.0.0")
def select(ctx: Ctx, argv):
    """SELECT index"""
    try:
        idx = parse_int(argv[1])
    except CommandError:
        raise CommandError("ERR value is not an integer or out of range") from None
    if not 0 <= idx < len(ctx.core.keyspace):
        raise CommandError("ERR DB index is out of range")
    ctx.client.db = idx
    ctx.db = ctx.core.keyspace[idx]
    return OK


@command("quit", -1, "fast loading stale", since="1.0.0")
def quit_(ctx: Ctx, argv):
    """QUIT"""
    ctx.client.close_after_reply = True
    return OK


@command("auth", -2, "fast no-auth", since="1.0.0")
def auth(ctx: Ctx, argv):
    """AUTH [username] password"""
    if len(argv) > 3:
        raise syntax_error()
    if len(argv) == 2 and ctx.core.acl.default.nopass:
        raise CommandError("ERR AUTH <password> called without any password configured for "
                           "the default user. Are you sure your configuration is correct?")
    user, password = (b"default", argv[1]) if len(argv) == 2 else (argv[1], argv[2])
    if not login(ctx.core, ctx.client, user, password, argv[0]):
        raise CommandError(WRONGPASS)
    return OK


def hello_map(ctx: Ctx) -> Map:
    return Map([
        ("server", b"redis"),
        ("version", ctx.config["redis-version-compat"].encode()),
        ("proto", ctx.client.resp),
        ("id", ctx.client.id),
        ("mode", b"standalone"),
        ("role", b"replica" if ctx.core.is_replica else b"master"),
        ("modules", []),
    ])


@command("hello", -1, "fast no-auth", since="6.0.0")
def hello(ctx: Ctx, argv):
    """HELLO [protover [AUTH username password] [SETNAME clientname]]"""
    ver = None
    if len(argv) >= 2:
        try:
            ver = parse_int(argv[1])
        except CommandError:
            raise CommandError("ERR Protocol version is not an integer or out of range") from None
        if ver < 2 or ver > 3:
            raise CommandError("NOPROTO unsupported protocol version")
    i = 2
    name = None
    while i < len(argv):
        more = len(argv) - i - 1
        lo = argv[i].lower()
        if lo == b"auth" and more >= 2:
            if not login(ctx.core, ctx.client, argv[i + 1], argv[i + 2], argv[0]):
                raise CommandError(WRONGPASS)
            i += 3
        elif lo == b"setname" and more:
            name = argv[i + 1]
            from .admin import validate_client_name
            validate_client_name(name)
            i += 2
        else:
            raise CommandError(f"ERR Syntax error in HELLO option '{argv[i].decode('utf-8', 'replace')}'")
    if not ctx.client.authenticated:
        raise CommandError("NOAUTH HELLO must be called with the client already authenticated, "
                           "otherwise the HELLO <proto> AUTH <user> <pass> option can be used to "
                           "authenticate the client and select the RESP protocol version at the same time")
    if name is not None:
        ctx.client.name = name
    if ver is not None:
        ctx.client.resp = ver
    return hello_map(ctx)


@command("reset", 1, "fast no-auth loading stale", since="6.2.0")
def reset(ctx: Ctx, argv):
    """RESET"""
    c = ctx.client
    c.in_multi = False
    c.multi_queue = []
    c.multi_error = False
    ctx.core.unwatch_all(c)
    ctx.core.pubsub.drop_client(c)
    c.db = 0
    c.resp = 2
    c.name = b""
    reset_to_default(ctx.core, c)
    return Status("RESET")


# ---------------------------------------------------------------------------
# Transactions
# ---------------------------------------------------------------------------


@command("multi", 1, "fast no-multi", since="1.2.0")
def multi(ctx: Ctx, argv):
    """MULTI"""
    if ctx.client.in_multi:
        raise CommandError("ERR MULTI calls can not be nested")
    ctx.client.in_multi = True
    ctx.client.multi_queue = []
    ctx.client.multi_error = False
    return OK


@command("exec", 1, "no-multi", since="1.2.0")
def exec_(ctx: Ctx, argv):
    """EXEC"""
    if not ctx.client.in_multi:
        raise CommandError("ERR EXEC without MULTI")
    return ctx.core.exec_transaction(ctx.client)


@command("discard", 1, "fast no-multi", since="2.0.0")
def discard(ctx: Ctx, argv):
    """DISCARD"""
    c = ctx.client
    if not c.in_multi:
        raise CommandError("ERR DISCARD without MULTI")
    c.in_multi = False
    c.multi_queue = []
    c.multi_error = False
    ctx.core.unwatch_all(c)
    return OK


@command("watch", -2, "fast no-multi", keys=(1, -1, 1), since="2.2.0")
def watch(ctx: Ctx, argv):
    """WATCH key [key ...]"""
    if ctx.client.in_multi:
        raise CommandError("ERR WATCH inside MULTI is not allowed")
    ctx.core.watch(ctx.client, argv[1:])
    return OK


@command("unwatch", 1, "fast no-multi", since="2.2.0")
def unwatch(ctx: Ctx, argv):
    """UNWATCH"""
    ctx.core.unwatch_all(ctx.client)
    return OK


# ---------------------------------------------------------------------------
# Server
# ---------------------------------------------------------------------------


@command("time", 1, "fast loading stale", since="2.6.0")
def time_(ctx: Ctx, argv):
    """TIME"""
    now = ctx.core.clock()
    sec = int(now)
    return [b"%d" % sec, b"%d" % int((now - sec) * 1_000_000)]


@command("lastsave", 1, "fast", since="1.0.0")
def lastsave(ctx: Ctx, argv):
    """LASTSAVE"""
    return int(ctx.core.last_save_time)


@command("shutdown", -1, "admin no-multi loading stale", since="1.0.0")
def shutdown(ctx: Ctx, argv):
    """SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT]"""
    for opt in argv[1:]:
        if opt.lower() not in (b"nosave", b"save", b"now", b"force", b"abort"):
            raise syntax_error()
    opts = {a.lower() for a in argv[1:]}
    if b"abort" in opts:
        raise CommandError("ERR No shutdown in progress.")
    ctx.core.shutdown_save = True if b"save" in opts else (False if b"nosave" in opts else None)
    if ctx.core.shutdown_requested is not None:
        ctx.core.shutdown_requested()
    ctx.client.close_after_reply = True
    # As Redis: a successful SHUTDOWN is never answered; the connection just closes.
    return Raw(b"")


@command("debug", -2, "admin noscript", since="1.0.0")
def debug(ctx: Ctx, argv):
    """DEBUG DIGEST | DIGEST-VALUE key [key ...] | SLEEP seconds | RELOAD | LOADAOF | HELP"""
    sub = argv[1].lower()
    if sub == b"digest":
        return digest_keyspace(ctx.core).encode()
    if sub == b"digest-value":
        out = []
        for key in argv[2:]:
            v = ctx.db.data.get(key)
            out.append(digest_value(key, v, None).hexdigest().encode() if v is not None else b"0" * 40)
        return out
    if sub == b"sleep" and len(argv) == 3:
        try:
            secs = float(argv[2])
        except ValueError:
            raise CommandError("ERR value is not a valid float") from None
        time.sleep(max(secs, 0))
        return OK
    if sub == b"set-active-expire" and len(argv) == 3:
        ctx.core.active_expire_disabled = argv[2] == b"0"
        return OK
    hook = ctx.core.debug_subcommands.get(sub.decode("latin-1", "replace"))
    if hook is not None:
        return hook(ctx, argv)
    if sub == b"help":
        return [b"DEBUG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                b"DIGEST", b"    Output a hex signature representing the current DB content.",
                b"DIGEST-VALUE <key> [<key> ...]", b"    Output a hex signature of the values of all the specified keys.",
                b"SLEEP <seconds>", b"    Stop the server for <seconds>. Decimals allowed.",
                b"RELOAD", b"    Save the snapshot, flush the dataset and load it back.",
                b"LOADAOF", b"    Flush the AOF buffers, flush the dataset and load the AOF."]
    raise CommandError(f"ERR unknown subcommand '{argv[1].decode('utf-8', 'replace')}'. Try DEBUG HELP.")


def digest_value(key: bytes, value, expire: int | None):
    """SHA-1 over one key's complete logical state."""
    import hashlib       # here, not at start-up (~2 ms of import): DEBUG DIGEST only
    h = hashlib.sha1()
    h.update(b"k%d:%s" % (len(key), key))
    if expire is not None:
        h.update(b"e%d" % expire)
    if type(value) is bytes:
        h.update(b"s%d:%s" % (len(value), value))
        return h
    s: Stream = value
    h.update(b"x%d/%d/%d/%d/%d" % (s.length, s.last_id, s.entries_added, s.max_deleted_id,
                                     s.first_id()))
    for sid, fv in s:
        h.update(b"i%d" % sid)
        for x in fv:
            h.update(b"%d:%s" % (len(x), x))
    for name in sorted(s.groups or {}):
        g = s.groups[name]
        h.update(b"g%d:%s/%d/%d" % (len(name), name, g.last_id, g.entries_read))
        policy = g.dead_letter          # (absent from groups without: older digests stay)
        if policy is not None or g.dead_lettered:
            h.update(b"d%d" % g.dead_lettered if policy is None else
                     b"d%d/%d/%d:%s" % (g.dead_lettered, policy.max_deliveries,
                                        len(policy.key), policy.key))
        for sid, pe in g.pel.items():
            if pe.consumer is None:     # NACKed (XNACK): no owner, time 0
                h.update(b"n%d/%d" % (sid, pe.delivery_count))
            else:
                h.update(b"p%d/%s/%d/%d" % (sid, pe.consumer.name, pe.delivery_time,
                                            pe.delivery_count))
        for sid in g.nacked:            # their release order (CLAIM reads take them so)
            h.update(b"o%d" % sid)
        for cname in sorted(g.consumers):
            c = g.consumers[cname]
            h.update(b"c%d:%s/%d" % (len(cname), cname, len(c.pending)))
    st = s.idmp
    if st is not None:   # IDMP: settings, maps and iids-added (duplicates is a statistic)
        h.update(b"m%d/%d/%d" % (-1 if st.duration is None else st.duration,
                                 -1 if st.maxsize is None else st.maxsize, st.added))
        for pid, iid, sid, t in st.items():
            h.update(b"q%d:%s/%d:%s/%d/%d" % (len(pid), pid, len(iid), iid, sid, t))
    if s.retention is not None and s.retention.has_settings():   # (its counters are statistics)
        h.update(b"r%r" % (s.retention.settings(),))
    return h


def digest_keyspace(core) -> str:
    """DEBUG DIGEST: XOR of per-key digests (order independent), 40 zeros when empty.

    Covers entries, stream metadata, groups, PELs (owner, delivery time and
    count) and consumers.  Consumer seen/active times are left out: they are
    wall-clock observations that Redis does not propagate either.
    """
    acc = 0
    any_key = False
    for db in core.keyspace.dbs:
        for key, value in db.data.items():
            any_key = True
            h = digest_value(b"%d:" % db.index + key, value, db.expires.get(key))
            acc ^= int.from_bytes(h.digest(), "big")
    if not any_key:
        return "0" * 40
    return f"{acc:040x}"


# ---------------------------------------------------------------------------
# What client libraries and Redis test harnesses send on connect.  StreamDB has
# no scripting; these answer as an empty Redis would, so tools work unchanged.
# ---------------------------------------------------------------------------


@command("function", -2, "noscript", since="7.0.0")
def function(ctx: Ctx, argv):
    """FUNCTION <subcommand>"""


@subcommand("function", "flush", -2, "write noscript", since="7.0.0")
def function_flush(ctx: Ctx, argv):
    """FUNCTION FLUSH [ASYNC|SYNC]"""
    if len(argv) > 3 or (len(argv) == 3 and argv[2].lower() not in (b"async", b"sync")):
        raise CommandError("ERR FUNCTION FLUSH only supports SYNC|ASYNC option")
    return OK


@subcommand("function", "list", -2, "noscript", since="7.0.0")
def function_list(ctx: Ctx, argv):
    """FUNCTION LIST [LIBRARYNAME pattern] [WITHCODE]"""
    return []


@subcommand("function", "stats", 2, "noscript allow-busy", since="7.0.0")
def function_stats(ctx: Ctx, argv):
    """FUNCTION STATS"""
    return Map([(b"running_script", None), (b"engines", Map([]))])


@command("script", -2, "noscript", since="2.6.0")
def script(ctx: Ctx, argv):
    """SCRIPT <subcommand>"""


@subcommand("script", "flush", -2, "noscript", since="2.6.0")
def script_flush(ctx: Ctx, argv):
    """SCRIPT FLUSH [ASYNC|SYNC]"""
    if len(argv) > 3 or (len(argv) == 3 and argv[2].lower() not in (b"async", b"sync")):
        raise CommandError("ERR SCRIPT FLUSH only support SYNC|ASYNC option")
    return OK


@subcommand("script", "exists", -3, "noscript", since="2.6.0")
def script_exists(ctx: Ctx, argv):
    """SCRIPT EXISTS sha1 [sha1 ...]"""
    return [0] * (len(argv) - 2)
