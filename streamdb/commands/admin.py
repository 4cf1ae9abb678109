"""Administrative commands: CONFIG, CLIENT, COMMAND, INFO."""

from __future__ import annotations

import os
import resource
import sys

from .. import __version__, compiled, log, protocol
from ..config import ConfigError, directive
from ..engine.nodecache import CACHE as NODE_CACHE
from ..protocol.reply import OK, CommandError, Map, RSet, Status, Verbatim
from ..security.enforce import refresh_clients
from ..dispatch.client import client_info_line, client_type
from ..glob import glob_matcher
from ..dispatch.pubsub import CHANNELS, PATTERNS, SHARD_CHANNELS
from ..memory import METER, not_counted_for_maxmemory
from .args import parse_int
from ..dispatch.context import Ctx, syntax_error
from .docs import DOCS, GrammarError, grammar_arguments
from .observe import latencystats_fields, memory_numbers, rewrite_config_file
from .pubsub import NOT_KEY_SPECS
from ..dispatch.registry import COMMANDS, CommandSpec, command, resolve, subcommand

# ---------------------------------------------------------------------------
# CONFIG
# ---------------------------------------------------------------------------


@command("config", -2, "", since="2.0.0")
def config(ctx, argv):
    """CONFIG <subcommand>"""


@subcommand("config", "get", -3, "admin noscript loading stale", since="2.0.0")
def config_get(ctx: Ctx, argv):
    """CONFIG GET parameter [parameter ...]"""
    seen: dict[str, str] = {}
    for pat in argv[2:]:
        for name, value in ctx.config.matching(pat.decode("utf-8", "replace")):
            seen.setdefault(name, value)
    pairs = [(k.encode(), v.encode()) for k, v in seen.items()]
    return Map(pairs)


@subcommand("config", "set", -4, "admin noscript loading stale", since="2.0.0")
def config_set(ctx: Ctx, argv):
    """CONFIG SET parameter value [parameter value ...]"""
    if len(argv) % 2:
        raise CommandError("ERR wrong number of arguments for 'config|set' command")
    pairs = [(argv[i].decode("utf-8", "replace").lower(), argv[i + 1].decode("utf-8", "replace"))
             for i in range(2, len(argv), 2)]
    names = [p[0] for p in pairs]
    if len(set(names)) != len(names):
        raise CommandError(f"ERR CONFIG SET failed (possibly related to argument '{names[0]}') - duplicate parameter")
    old = dict(ctx.config.values)
    for name, raw in pairs:
        d = directive(name)
        if d is None:
            ctx.config.values.update(old)
            raise CommandError(f"ERR Unknown option or number of arguments for CONFIG SET - '{name}'")
        try:
            ctx.config.set(name, raw)
        except ConfigError as e:
            ctx.config.values.update(old)
            raise CommandError(f"ERR CONFIG SET failed (possibly related to argument '{name}') - {e}") from None
    if "requirepass" in names:       # the default user's password, as in Redis
        ctx.core.acl.set_default_password(ctx.config["requirepass"])
        refresh_clients(ctx.core)
    if "acl-pubsub-default" in names:
        ctx.core.acl.pubsub_default = ctx.config["acl-pubsub-default"]
    changed = [directive(n).name for n, _ in pairs]
    for listener in ctx.core.config_listeners:
        listener(changed)
    return OK


@subcommand("config", "resetstat", 2, "admin noscript loading stale", since="2.0.0")
def config_resetstat(ctx: Ctx, argv):
    """CONFIG RESETSTAT"""
    ctx.core.stats.reset()
    return OK


@subcommand("config", "rewrite", 2, "admin noscript loading stale", since="2.8.0")
def config_rewrite(ctx: Ctx, argv):
    """CONFIG REWRITE"""
    if not ctx.config.file:
        raise CommandError("ERR The server is running without a config file")
    try:
        rewrite_config_file(ctx.config)
    except OSError as e:
        log.log(log.WARNING, f"CONFIG REWRITE failed: {e.strerror or e}")
        raise CommandError(f"ERR Rewriting config file: {e.strerror or e}") from None
    log.log(log.NOTICE, "CONFIG REWRITE executed with success.")
    return OK


@subcommand("config", "help", 2, "loading stale", since="5.0.0")
def config_help(ctx: Ctx, argv):
    """CONFIG HELP"""
    return [b"CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            b"GET <pattern>", b"    Return parameters matching the glob-like <pattern> and their values.",
            b"SET <directive> <value>", b"    Set the configuration <directive> to <value>.",
            b"RESETSTAT", b"    Reset statistics reported by the INFO command.",
            b"REWRITE", b"    Rewrite the configuration file.",
            b"HELP", b"    Print this help."]


# ---------------------------------------------------------------------------
# CLIENT
# ---------------------------------------------------------------------------


def validate_client_name(name: bytes) -> None:
    for ch in name:
        if ch < 33 or ch > 126:
            raise CommandError("ERR Client names cannot contain spaces, newlines or special characters.")


@command("client", -2, "", since="2.4.0")
def client_(ctx, argv):
    """CLIENT <subcommand>"""


@subcommand("client", "id", 2, "noscript loading stale", since="5.0.0")
def client_id(ctx: Ctx, argv):
    """CLIENT ID"""
    return ctx.client.id


@subcommand("client", "setname", 3, "noscript loading stale", since="2.6.9")
def client_setname(ctx: Ctx, argv):
    """CLIENT SETNAME connection-name"""
    validate_client_name(argv[2])
    ctx.client.name = argv[2]
    return OK


@subcommand("client", "getname", 2, "noscript loading stale", since="2.6.9")
def client_getname(ctx: Ctx, argv):
    """CLIENT GETNAME"""
    return ctx.client.name or None


@subcommand("client", "setinfo", 4, "noscript loading stale", since="7.2.0")
def client_setinfo(ctx: Ctx, argv):
    """CLIENT SETINFO LIB-NAME libname | LIB-VER libver"""
    attr = argv[2].lower()
    val = argv[3]
    if attr == b"lib-name":
        if any(ch < 33 or ch > 126 for ch in val):
            raise CommandError("ERR lib-name cannot contain spaces, newlines or special characters.")
        ctx.client.lib_name = val
    elif attr == b"lib-ver":
        if any(ch < 33 or ch > 126 for ch in val):
            raise CommandError("ERR lib-ver cannot contain spaces, newlines or special characters.")
        ctx.client.lib_ver = val
    else:
        raise CommandError(f"ERR Unrecognized option '{argv[2].decode('utf-8', 'replace')}'")
    return OK


@subcommand("client", "info", 2, "noscript loading stale", since="6.2.0")
def client_info(ctx: Ctx, argv):
    """CLIENT INFO"""
    return Verbatim(client_info_line(ctx.core, ctx.client) + b"\n")


@subcommand("client", "list", -2, "admin noscript loading stale", since="2.4.0")
def client_list(ctx: Ctx, argv):
    """CLIENT LIST [TYPE NORMAL|MASTER|REPLICA|PUBSUB] [ID id [id ...]]"""
    clients = list(ctx.core.clients.values())
    i = 2
    while i < len(argv):
        lo = argv[i].lower()
        if lo == b"type" and i + 1 < len(argv):
            t = argv[i + 1].lower()
            if t not in (b"normal", b"master", b"replica", b"slave", b"pubsub"):
                raise CommandError(f"ERR Unknown client type '{argv[i + 1].decode('utf-8', 'replace')}'")
            want = {b"slave": "replica"}.get(t, t.decode())
            clients = [c for c in clients if client_type(c) == want]
            i += 2
        elif lo == b"id" and i + 1 < len(argv):
            ids = set()
            for raw in argv[i + 1:]:
                try:
                    v = parse_int(raw)
                except CommandError:
                    raise CommandError("ERR Invalid client ID") from None
                if v <= 0:
                    raise CommandError("ERR Invalid client ID")
                ids.add(v)
            clients = [c for c in clients if c.id in ids]
            break
        else:
            raise syntax_error()
    return Verbatim(b"".join(client_info_line(ctx.core, c) + b"\n" for c in clients))


@subcommand("client", "kill", -3, "admin noscript loading stale", since="2.4.0")
def client_kill(ctx: Ctx, argv):
    """CLIENT KILL ip:port | [ID id] [TYPE NORMAL|MASTER|SLAVE|REPLICA|PUBSUB] [USER name] [ADDR ip:port] [LADDR ip:port] [SKIPME yes/no]"""
    core = ctx.core
    if len(argv) == 3:
        addr = argv[2].decode("utf-8", "replace")
        for c in list(core.clients.values()):
            if c.addr == addr:
                _kill(core, c)
                return OK
        raise CommandError("ERR No such client")
    filters = []
    skipme = True
    i = 2
    while i < len(argv):
        if i + 1 >= len(argv):
            raise syntax_error()
        opt, val = argv[i].lower(), argv[i + 1]
        if opt == b"id":
            try:
                cid = parse_int(val)
            except CommandError:
                raise CommandError("ERR client-id should be greater than 0") from None
            if cid <= 0:
                raise CommandError("ERR client-id should be greater than 0")
            filters.append(lambda c, v=cid: c.id == v)
        elif opt == b"addr":
            filters.append(lambda c, v=val.decode(): c.addr == v)
        elif opt == b"laddr":
            filters.append(lambda c, v=val.decode(): c.laddr == v)
        elif opt == b"user":
            filters.append(lambda c, v=val: c.user == v)
        elif opt == b"type":
            filters.append(lambda c, v=val.lower().decode(): client_type(c) == {"slave": "replica"}.get(v, v))
        elif opt == b"skipme":
            if val.lower() == b"yes":
                skipme = True
            elif val.lower() == b"no":
                skipme = False
            else:
                raise syntax_error()
        else:
            raise syntax_error()
        i += 2
    killed = 0
    for c in list(core.clients.values()):
        if skipme and c is ctx.client:
            continue
        if all(f(c) for f in filters):
            _kill(core, c)
            killed += 1
    return killed


def _kill(core, c) -> None:
    if c.close is not None:
        c.close()
    core.remove_client(c)


@subcommand("client", "unblock", -3, "admin noscript loading stale", since="5.0.0")
def client_unblock(ctx: Ctx, argv):
    """CLIENT UNBLOCK client-id [TIMEOUT|ERROR]"""
    try:
        cid = parse_int(argv[2])
    except CommandError:
        raise CommandError("ERR value is not an integer or out of range") from None
    mode = b"timeout"
    if len(argv) == 4:
        mode = argv[3].lower()
        if mode not in (b"timeout", b"error"):
            raise CommandError("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR")
    elif len(argv) > 4:
        raise syntax_error()
    c = ctx.core.clients.get(cid)
    if c is None or c.blocked is None:
        return 0
    if mode == b"error":
        ctx.core.unblock(c, CommandError("UNBLOCKED client unblocked via CLIENT UNBLOCK"))
    else:
        ctx.core.unblock_on_timeout(c)
    return 1


@subcommand("client", "no-evict", 3, "admin noscript loading stale", since="7.0.0")
def client_no_evict(ctx: Ctx, argv):
    """CLIENT NO-EVICT ON|OFF"""
    if argv[2].lower() not in (b"on", b"off"):
        raise syntax_error()
    return OK


@subcommand("client", "no-touch", 3, "noscript loading stale", since="7.2.0")
def client_no_touch(ctx: Ctx, argv):
    """CLIENT NO-TOUCH ON|OFF"""
    if argv[2].lower() not in (b"on", b"off"):
        raise syntax_error()
    return OK


@subcommand("client", "help", 2, "loading stale", since="5.0.0")
def client_help(ctx: Ctx, argv):
    """CLIENT HELP"""
    return [b"CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            b"ID", b"GETNAME", b"SETNAME <name>", b"SETINFO <option> <value>", b"INFO",
            b"LIST [TYPE <type>] [ID <id> ...]", b"KILL <ip:port> | <option> <value> ...",
            b"UNBLOCK <clientid> [TIMEOUT|ERROR]", b"HELP"]


# ---------------------------------------------------------------------------
# COMMAND
# ---------------------------------------------------------------------------


# COMMAND INFO's flags in Redis's order (server.c addReplyCommandFlags), with its
# spelling of the names the table writes with a hyphen.
_FLAG_ORDER = {name: n for n, name in enumerate((
    "write", "readonly", "denyoom", "module", "admin", "pubsub", "noscript", "blocking",
    "loading", "stale", "skip_monitor", "skip_slowlog", "asking", "fast", "no_auth",
    "no_mandatory_keys", "no_async_loading", "no_multi", "movablekeys", "allow_busy"))}


def _flags_reply(spec: CommandSpec) -> RSet:
    names = sorted((f.replace("-", "_") for f in spec.flags),
                   key=lambda f: (_FLAG_ORDER.get(f, len(_FLAG_ORDER)), f))
    return RSet([Status(f) for f in names])


def _not_key_spec(begin: int, lastkey: int) -> Map:
    """A key spec flagged not_key (pubsub.NOT_KEY_SPECS), in Redis's form."""
    return Map([(b"flags", RSet([Status("not_key")])),
                (b"begin_search", Map([(b"type", b"index"), (b"spec", Map([(b"index", begin)]))])),
                (b"find_keys", Map([(b"type", b"range"), (b"spec", Map(
                    [(b"lastkey", lastkey), (b"keystep", 1), (b"limit", 0)]))]))])


def command_info(spec: CommandSpec) -> list:
    first, last, step = spec.first_key, spec.last_key, spec.key_step
    key_specs = []
    not_key = NOT_KEY_SPECS.get(spec.name)
    if not_key is not None:
        # Redis derives first/last/step from every key spec, a not_key one included.
        begin, lastkey = not_key
        first, last, step = begin, begin + lastkey if lastkey >= 0 else lastkey, 1
        key_specs.append(_not_key_spec(begin, lastkey))
    # Tips and key specs are sets under RESP3, and so are no subcommands (but not some),
    # as Redis 7.0 answers them.
    return [
        spec.name.encode(), spec.arity, _flags_reply(spec), first, last, step,
        RSet([Status(c) for c in spec.acl_categories]), RSet(), RSet(key_specs),
        [command_info(s) for s in spec.subcommands.values()] or RSet(),
    ]


def _spec_named(name: str) -> CommandSpec | None:
    """The spec of "xadd" or of a subcommand named as "xgroup|create"."""
    parent, _, sub = name.partition("|")
    spec = COMMANDS.get(parent)
    if spec is None or not sub:
        return spec
    return spec.subcommands.get(sub)


def command_docs(spec: CommandSpec) -> Map:
    """COMMAND DOCS of one command (or subcommand), in Redis's field order: the texts of
    docs.DOCS, ``since`` from the table, arguments from the handler's grammar."""
    doc = DOCS.get(spec.name)
    fields = [(b"summary", (doc.summary if doc else spec.grammar).encode()),
              (b"since", spec.since.encode()), (b"group", (doc.group if doc else spec.group).encode())]
    if doc is not None:
        if doc.complexity:
            fields.append((b"complexity", doc.complexity.encode()))
        if doc.doc_flags:
            fields.append((b"doc_flags", RSet([Status(f) for f in doc.doc_flags])))
        if doc.deprecated:
            fields += [(b"deprecated_since", doc.deprecated[0].encode()),
                       (b"replaced_by", doc.deprecated[1].encode())]
        if doc.history:
            fields.append((b"history", [[v.encode(), text.encode()] for v, text in doc.history]))
    if spec.subcommands:
        fields.append((b"subcommands", Map([(s.name.encode(), command_docs(s))
                                            for s in spec.subcommands.values()])))
        return Map(fields)
    try:
        args = grammar_arguments(spec.grammar, spec.name.count("|") + 1)
    except GrammarError:
        args = []          # a grammar line this notation cannot read: no arguments shown
    if args:
        fields.append((b"arguments", [_argument_reply(a) for a in args]))
    return Map(fields)


# COMMAND DOCS's argument flags in Redis's order (server.c addReplyFlagsForArg).
_ARGUMENT_FLAG_ORDER = ("optional", "multiple", "multiple_token")


def _argument_reply(arg: dict) -> Map:
    fields = [(b"name", arg["name"].encode()), (b"type", arg["type"].encode())]
    if "token" in arg:
        fields.append((b"token", arg["token"].encode()))
    if arg.get("flags"):
        flags = sorted(arg["flags"], key=_ARGUMENT_FLAG_ORDER.index)
        fields.append((b"flags", RSet([Status(f) for f in flags])))
    if "arguments" in arg:
        fields.append((b"arguments", [_argument_reply(a) for a in arg["arguments"]]))
    return Map(fields)


# Redis 7.0's arities of the COMMAND subcommands (COMMAND is not split into
# registered subcommands here because the bare form is valid too).
_COMMAND_SUB_ARITY = {b"count": 2, b"docs": -2, b"getkeys": -4, b"getkeysandflags": -4,
                      b"help": 2, b"info": -2, b"list": -2}


def _listed_specs():
    """What COMMAND LIST names, as Redis does: every command, each followed by its
    subcommands ("xgroup", "xgroup|create", ...).  COMMAND COUNT counts commands only."""
    for spec in COMMANDS.values():
        yield spec
        yield from spec.subcommands.values()


@command("command", -1, "loading stale", since="2.8.13")
def command_(ctx: Ctx, argv):
    """COMMAND [COUNT | INFO name ... | DOCS name ... | LIST | GETKEYS cmd ...]"""
    if len(argv) == 1:
        return [command_info(s) for s in COMMANDS.values()]
    sub = argv[1].lower()
    arity = _COMMAND_SUB_ARITY.get(sub)
    if arity is not None and ((arity > 0 and len(argv) != arity) or len(argv) < -arity):
        raise CommandError(f"ERR wrong number of arguments for 'command|{sub.decode()}' command")
    if sub == b"count":
        return len(COMMANDS)
    if sub == b"list":
        if len(argv) == 2:
            return [spec.name.encode() for spec in _listed_specs()]
        if len(argv) != 5 or argv[2].lower() != b"filterby":
            raise syntax_error()
        kind, value = argv[3].lower(), argv[4]
        if kind == b"module":
            return []
        if kind == b"aclcat":
            cat = "@" + value.decode("utf-8", "replace").lower()
            return [sp.name.encode() for sp in _listed_specs() if cat in sp.acl_categories]
        if kind == b"pattern":
            matches = glob_matcher(value.lower())     # Redis matches names without case
            return [sp.name.encode() for sp in _listed_specs() if matches(sp.name.encode())]
        raise syntax_error()
    if sub == b"info":
        names = [n.decode("latin-1").lower() for n in argv[2:]] or list(COMMANDS)
        return [None if spec is None else command_info(spec) for spec in map(_spec_named, names)]
    if sub == b"docs":
        names = [n.decode("latin-1").lower() for n in argv[2:]] or list(COMMANDS)
        return Map([(n.encode(), command_docs(spec)) for n, spec in zip(names, map(_spec_named, names))
                    if spec is not None])
    if sub == b"getkeys" and len(argv) >= 3:
        # Redis's order of checks (getKeysSubcommandImpl): the command (its subcommand
        # resolved; an unknown one is no command), whether it has keys at all, arity.
        spec = resolve(argv[2:])
        if spec is None or (spec.subcommands and len(argv) > 3):
            raise CommandError("ERR Invalid command specified")
        if not spec.first_key and spec.key_finder is None:
            raise CommandError("ERR The command has no key arguments")
        n = len(argv) - 2
        if (spec.arity > 0 and n != spec.arity) or n < -spec.arity:
            raise CommandError("ERR Invalid number of arguments specified for command")
        keys = spec.keys(argv[2:])
        if not keys:
            raise CommandError("ERR The command has no key arguments")
        return keys
    if sub == b"help":
        return [b"COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                b"(no subcommand)", b"COUNT", b"INFO [<command-name> ...]", b"DOCS [<command-name> ...]",
                b"LIST", b"GETKEYS <full-command>", b"HELP"]
    raise CommandError(f"ERR unknown subcommand '{argv[1].decode('utf-8', 'replace')}'. Try COMMAND HELP.")


# ---------------------------------------------------------------------------
# INFO
# ---------------------------------------------------------------------------


def info_sections(ctx: Ctx) -> dict[str, list[tuple[str, object]]]:
    import platform      # here, not at start-up: INFO is the only user (~3 ms of import)
    core = ctx.core
    now = core.clock()
    uptime = int(now - core.start_time)
    cfg = ctx.config
    ru = resource.getrusage(resource.RUSAGE_SELF)
    ru_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    sections: dict[str, list[tuple[str, object]]] = {}
    sections["server"] = [
        ("redis_version", cfg["redis-version-compat"]), ("streamdb_version", __version__),
        ("streamdb_core", compiled.status(protocol.CORE, protocol.CORE_REASON)[0]),
        ("redis_git_sha1", "00000000"), ("redis_git_dirty", 0), ("redis_build_id", "streamdb"),
        ("redis_mode", "standalone"), ("os", f"{platform.system()} {platform.release()} {platform.machine()}"),
        ("arch_bits", 64), ("multiplexing_api", "epoll"), ("atomicvar_api", "python"),
        ("gcc_version", "0.0.0"), ("python_version", platform.python_version()),
        ("process_id", os.getpid()), ("process_supervised", "no"),
        ("run_id", core.run_id),
        ("tcp_port", cfg["port"]), ("server_time_usec", int(now * 1_000_000)),
        ("uptime_in_seconds", uptime), ("uptime_in_days", uptime // 86400), ("hz", cfg["hz"]),
        ("configured_hz", cfg["hz"]), ("lru_clock", int(now) & 0xFFFFFF),
        ("executable", os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""),
        ("config_file", os.path.abspath(cfg.file) if cfg.file else ""), ("io_threads_active", 0),
    ]
    blocked = [c for c in core.clients.values() if c.blocked is not None]
    sections["clients"] = [
        ("connected_clients", len(core.clients)), ("cluster_connections", 0),
        ("maxclients", cfg["maxclients"]), ("client_recent_max_input_buffer", 0),
        ("client_recent_max_output_buffer", max((c.output_size for c in core.clients.values()), default=0)),
        ("blocked_clients", len(blocked)),
        ("tracking_clients", 0), ("clients_in_timeout_table", sum(1 for c in blocked if c.blocked.timeout_ms)),
        ("total_blocking_keys", len(core.blocking_keys)),
        ("total_blocking_keys_on_nokey", 0),
    ]
    m = memory_numbers(core)
    used, rss, peak = m["used"], m["rss"], m["peak"]
    total_system = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    # Redis's fields and order (used_memory is the allocators' count, see memory.py).
    sections["memory"] = [
        ("used_memory", used), ("used_memory_human", _human(used)),
        ("used_memory_rss", rss), ("used_memory_rss_human", _human(rss)),
        ("used_memory_peak", peak), ("used_memory_peak_human", _human(peak)),
        ("used_memory_peak_perc", f"{used * 100 / peak:.2f}%" if peak else "0.00%"),
        ("used_memory_overhead", m["overhead"]), ("used_memory_startup", m["startup"]),
        ("used_memory_dataset", m["dataset"]),
        ("used_memory_dataset_perc", f"{m['dataset'] * 100 / used:.2f}%" if used else "0.00%"),
        ("allocator_allocated", METER.malloc_bytes),
        ("total_system_memory", total_system), ("total_system_memory_human", _human(total_system)),
        ("maxmemory", cfg["maxmemory"]), ("maxmemory_human", _human(cfg["maxmemory"])),
        ("maxmemory_policy", cfg["maxmemory-policy"]),
        ("mem_fragmentation_ratio", f"{rss / used:.2f}" if used else "0.00"),
        ("mem_fragmentation_bytes", rss - used),
        ("mem_not_counted_for_evict", not_counted_for_maxmemory(core)),
        ("mem_clients_slaves", m["clients_replicas"]), ("mem_clients_normal", m["clients_normal"]),
        ("mem_aof_buffer", m["aof_buffer"]),
        ("mem_allocator", "pymalloc"),
    ] + list(NODE_CACHE.stats().items())
    sections["persistence"] = core.info_persistence() if core.info_persistence else [
        ("loading", 0), ("async_loading", 0), ("rdb_changes_since_last_save", core.dirty),
        ("rdb_bgsave_in_progress", 0), ("rdb_last_save_time", int(core.start_time)),
        ("rdb_last_bgsave_status", "ok"), ("aof_enabled", 0), ("aof_rewrite_in_progress", 0),
        ("aof_last_write_status", "ok"),
    ]
    st = core.stats
    ops_per_sec, in_kbps, out_kbps = core.observe.rates()
    sections["stats"] = [
        ("total_connections_received", st.connections_received),
        ("total_commands_processed", st.commands_processed),
        ("instantaneous_ops_per_sec", ops_per_sec),
        ("total_net_input_bytes", st.net_input_bytes), ("total_net_output_bytes", st.net_output_bytes),
        ("instantaneous_input_kbps", f"{in_kbps:.2f}"), ("instantaneous_output_kbps", f"{out_kbps:.2f}"),
        ("rejected_connections", st.rejected_connections), ("expired_keys", st.expired_keys),
        # Redis 7.2's names for clients dropped by the query/output buffer limits.
        ("client_query_buffer_limit_disconnections", st.query_buffer_limit_disconnections),
        ("client_output_buffer_limit_disconnections", st.output_buffer_limit_disconnections),
        ("evicted_keys", 0), ("keyspace_hits", st.keyspace_hits), ("keyspace_misses", st.keyspace_misses),
        ("pubsub_channels", core.pubsub.count(CHANNELS)),
        ("pubsub_patterns", core.pubsub.count(PATTERNS)),
        ("pubsubshard_channels", core.pubsub.count(SHARD_CHANNELS)),
        ("total_error_replies", st.error_replies),
        ("total_reads_processed", st.reads_processed), ("total_writes_processed", st.writes_processed),
    ] + (core.replication.info_stats() if core.replication else []) \
        + (core.retention.info_stats() if core.retention else [])
    sections["replication"] = core.replication.info_fields() if core.replication else [
        ("role", "master"), ("connected_slaves", 0),
        ("master_replid", "0" * 40),
        ("master_replid2", "0" * 40), ("master_repl_offset", 0),
        ("second_repl_offset", -1), ("repl_backlog_active", 0),
        ("repl_backlog_size", cfg["repl-backlog-size"]),
        ("repl_backlog_first_byte_offset", 0), ("repl_backlog_histlen", 0),
    ]
    sections["cpu"] = [
        ("used_cpu_sys", f"{ru.ru_stime:.6f}"), ("used_cpu_user", f"{ru.ru_utime:.6f}"),
        ("used_cpu_sys_children", f"{ru_children.ru_stime:.6f}"),
        ("used_cpu_user_children", f"{ru_children.ru_utime:.6f}"),
    ]
    sections["modules"] = []
    sections["errorstats"] = [(f"errorstat_{code}", f"count={n}") for code, n in sorted(st.errors.items())]
    sections["commandstats"] = [
        (f"cmdstat_{name}",
         f"calls={cs.calls},usec={cs.usec},usec_per_call={(cs.usec / cs.calls) if cs.calls else 0:.2f},"
         f"rejected_calls={cs.rejected},failed_calls={cs.failed}")
        for name, cs in sorted(st.commands.items()) if cs.calls or cs.rejected or cs.failed]
    ks = []
    for db in core.keyspace.dbs:
        if db.data:
            ks.append((f"db{db.index}", f"keys={len(db.data)},expires={len(db.expires)},avg_ttl=0"))
    # A single node: clients and harnesses read cluster_enabled to choose their mode.
    sections["cluster"] = [("cluster_enabled", 0)]
    sections["keyspace"] = ks
    sections["latencystats"] = latencystats_fields(core) if cfg["latency-tracking"] else []
    return sections


# Redis's sections, in the order Redis prints them whatever order they are asked in.
# Redis 8's threads, keysizes and hotkeys sections describe things StreamDB does not
# have (I/O threads, non-stream types, hot-key sampling) and are not reported.
_SECTION_ORDER = ["server", "clients", "memory", "persistence", "stats", "replication", "cpu",
                  "modules", "commandstats", "errorstats", "latencystats", "cluster", "keyspace"]
_DEFAULT_SECTIONS = [s for s in _SECTION_ORDER if s not in ("commandstats", "latencystats")]
_ALL_SECTIONS = _SECTION_ORDER


_SECTION_TITLES = {"cpu": "CPU"}


def _human(n: int) -> str:
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return f"{n}B"


@command("info", -1, "loading stale", since="1.0.0")
def info(ctx: Ctx, argv):
    """INFO [section [section ...]]"""
    wanted = [a.decode("utf-8", "replace").lower() for a in argv[1:]] or ["default"]
    names: list[str] = []
    for w in wanted:
        if w == "default":
            names += _DEFAULT_SECTIONS
        elif w in ("all", "everything"):
            names += _ALL_SECTIONS
        else:
            names.append(w)
    sections = info_sections(ctx)
    parts = []
    wanted_names = set(names)
    for name in _SECTION_ORDER:
        if name not in wanted_names:
            continue
        lines = [f"# {_SECTION_TITLES.get(name, name.capitalize())}"]
        lines += [f"{k}:{v}" for k, v in sections[name]]
        parts.append("\r\n".join(lines) + "\r\n")
    return Verbatim("\r\n".join(parts).encode())
