"""``python -m streamdb [CONFIG-FILE] [--directive value ...]``, like redis-server."""

from __future__ import annotations

import gc

# No cyclic GC from the start to the end of loading: importing the server makes
# tens of thousands of objects that live as long as it does (modules, classes,
# functions), and the young collections they set off walked them for nothing,
# ~6 ms of a start; recovery keeps it off while loading for the same reason, and
# serve() freezes everything and turns it on once the data is loaded.  (Only when
# run as the program: a test importing this module keeps its GC.)
if __name__ == "__main__":
    gc.disable()

import asyncio
import os
import sys
import time

from . import __version__, log

# The cyclic GC's thresholds while serving.  CPython's default young-generation
# threshold is 700 net new container objects; a loop turn of pipelined requests
# holds more than that until its end (every request's argv and reply), so a
# young collection ran almost every turn, promoted those short-lived lists,
# and the promotions set off full collections that walk every stream node: at
# 2M entries, 43 full passes of 7 ms
# (18 ms the longest) and 0.74 s of GC in all per 2M pipelined XADDs.  At 5000,
# only objects that really live on (new stream nodes) fill the young generation:
# 16 young passes of about 1 ms (1.5 ms the longest) and 13 ms in all for the
# same 2M XADDs.  The older generations keep CPython's ratios.
GC_THRESHOLDS = (5000, 10, 10)
from .config import Config, ConfigError


def build_config(args: list[str]) -> Config:
    cfg = Config()
    if args and not args[0].startswith("--"):
        cfg.load_file(args[0])
        args = args[1:]
    cfg.load_args(args)
    return cfg


async def serve(cfg: Config) -> int:
    from . import commands  # noqa: F401  (fills the command table)
    from .commands import persistence
    from .persistence.recovery import RecoveryError, open_persistence
    from .server.core import Core
    from .server.lifecycle import aof_bytes_on_disk, install_signal_handlers, log_loaded
    from .server.network import Server

    core = Core(cfg)
    if cfg["aclfile"]:
        from .security.acl import AclError
        try:
            core.acl.load_file(cfg["aclfile"])
        except (AclError, OSError) as e:
            log.log(log.WARNING, f"Aborting StreamDB startup because of ACL errors: {e}")
            return 1
    core.run_id = os.urandom(20).hex()
    server = Server(core)
    os.makedirs(cfg["dir"], exist_ok=True)
    persistence.install(core)
    store = open_persistence(core, server, cfg)
    from . import replication
    repl = replication.install(core, server)
    core.config_listeners.append(lambda names: _apply_config(core, store.aof, names))
    server.cron_hooks.append(store.cron)
    server.cron_hooks.append(core.observe.cron)
    from .server import limits
    limits.install(core, server)
    from .commands import retention
    retention.install(core, server)
    await server.start()
    # From here a signal takes the SHUTDOWN path (even while loading: it runs after the load).
    install_signal_handlers(asyncio.get_running_loop(), server.request_stop)
    aof_bytes = aof_bytes_on_disk(cfg)
    load_started = time.monotonic()
    try:
        await store.load(server)
    except RecoveryError as e:
        log.log(log.WARNING, str(e))
        await server.close()
        return 1
    log_loaded(core.keyspace, aof_bytes, time.monotonic() - load_started)
    # Long-lived data is loaded by now: keep the cyclic GC from rescanning it.
    # No full collection first: it would walk every loaded object (about 0.1 s
    # per million entries, all of it restart time) for the little garbage
    # loading leaves.
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    gc.enable()                 # (off since the start: see the top of this module)
    replication.start(repl)     # (what it says of the saved state belongs before "Ready")
    log.log(log.NOTICE, "Ready to accept connections tcp")
    await server.serve_until_stopped()      # SHUTDOWN, SIGTERM or SIGINT; listeners closed
    log.log(log.WARNING, "User requested shutdown...")
    store.shutdown(core.shutdown_save)
    replication.shutdown(repl)
    await server.close()                    # last replies out, then every client closed
    await asyncio.sleep(0)                  # let the transports finish closing
    return 0


def _apply_config(core, aof, names: list[str]) -> None:
    """CONFIG SET of directives that live objects cache."""
    if "appendfsync" in names and aof is not None:
        aof.policy = core.config["appendfsync"]
    if "aof-load-truncated" in names and aof is not None:
        aof.load_truncated = core.config["aof-load-truncated"]
    if "aof-preallocate" in names and aof is not None:
        aof.preallocate = core.config["aof-preallocate"]
    if "loglevel" in names:
        log.set_level(core.config["loglevel"])


def version_line() -> str:
    """``streamdb-server --version``, shaped like ``redis-server -v``'s line."""
    import platform
    return f"StreamDB server v={__version__} python={platform.python_version()} bits=64"


def usage() -> str:
    """``streamdb-server --help``: how to start it, with the defaults from DIRECTIVES."""
    from pathlib import Path

    from .config import DIRECTIVES

    def default(name: str) -> str:
        return f"{name} {DIRECTIVES[name].default}"

    shipped = Path(__file__).resolve().parent.parent / "streamdb.conf"
    where = str(shipped) if shipped.is_file() else "streamdb.conf at the top of the source tree"
    return f"""\
Usage: streamdb-server [/path/to/streamdb.conf] [--directive value ...]
       streamdb-server -v or --version
       streamdb-server -h or --help
       (python -m streamdb takes the same arguments)

The config file (redis.conf syntax: one "directive value" per line) is read first;
each --directive value after it overrides that directive, as with redis-server.
Without a file every directive has its default: {default("port")}, {default("bind")},
{default("dir")}, {default("appendonly")}, {default("appendfsync")}.

Examples:
       streamdb-server                            (all defaults)
       streamdb-server /etc/streamdb/streamdb.conf
       streamdb-server --port 7777 --dir /var/lib/streamdb
       streamdb-server --port 7777 --replicaof 127.0.0.1 6379
       streamdb-server streamdb.conf --appendfsync always --loglevel verbose
       streamdb-server --appendonly no --save ""  (nothing written to disk)

Every directive, with its default and what it does: the shipped config file,
       {where}
"""


def main(argv: list[str] | None = None) -> int:
    gc.disable()                # (the streamdb-server script's start: see the top)
    args = list(sys.argv[1:] if argv is None else argv)
    # As redis-server: these are looked for as the first argument only.
    if args and args[0] in ("-v", "--version"):
        print(version_line())
        return 0
    if args and args[0] in ("-h", "--help"):
        print(usage(), end="")
        return 0
    try:
        cfg = build_config(args)
    except (ConfigError, OSError) as e:
        print(f"*** FATAL CONFIG FILE ERROR ***\n{e}", file=sys.stderr)
        return 1
    try:
        log.configure(cfg["loglevel"], cfg["logfile"], syslog_enabled=cfg["syslog-enabled"],
                      syslog_ident=cfg["syslog-ident"], syslog_facility=cfg["syslog-facility"])
    except OSError as e:
        print(f"Can't open the log file: {e}", file=sys.stderr)
        return 1
    return run_server(cfg)


def run_server(cfg: Config) -> int:
    """Lock the data directory, write the pid file, serve; undo both on the way out."""
    from .server.lifecycle import DataDirLock, LifecycleError, PidFile, log_startup_banner

    log_startup_banner(cfg)
    lock = DataDirLock(cfg["dir"])
    try:
        lock.acquire()
    except (LifecycleError, OSError) as e:
        log.log(log.WARNING, str(e))
        return 1
    pidfile = PidFile(cfg["pidfile"]) if cfg["pidfile"] else None
    if pidfile is not None:
        pidfile.write()
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    try:
        code = asyncio.run(serve(cfg))
    except OSError as e:
        log.log(log.WARNING, f"Failed listening on port {cfg['port']}: {e}")
        code = 1
    finally:
        if pidfile is not None:
            pidfile.remove()
        lock.release()
    if code == 0:
        log.log(log.WARNING, "StreamDB is now ready to exit, bye bye...")
    return code


if __name__ == "__main__":
    sys.exit(main())
