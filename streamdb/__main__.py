"""``python -m streamdb [CONFIG-FILE] [--directive value ...]``, like redis-server."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import sys

from . import __version__, log
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
    from .server.network import Server

    core = Core(cfg)
    core.extra["run_id"] = os.urandom(20).hex()
    server = Server(core)
    os.makedirs(cfg["dir"], exist_ok=True)
    persistence.install(core)
    store = open_persistence(core, server, cfg)
    from . import replication
    repl = replication.install(core, server)
    core.extra["config_changed"] = lambda names: _apply_config(core, store.aof, names)
    server.cron_hooks.append(store.cron)
    await server.start()
    log.log(log.NOTICE, f"StreamDB {__version__} (Redis protocol 7.0 compatible) pid={os.getpid()} "
                        f"port={cfg['port']} bind={cfg['bind']} dir={os.path.abspath(cfg['dir'])} "
                        f"config={cfg.file or '(none)'} appendonly={'yes' if cfg['appendonly'] else 'no'} "
                        f"appendfsync={cfg['appendfsync']}")
    try:
        await store.load(server)
    except RecoveryError as e:
        log.log(log.WARNING, str(e))
        await server.close()
        return 1
    log.log(log.NOTICE, f"Data loaded: {sum(len(db) for db in core.keyspace.dbs)} keys")
    # Long-lived data is loaded by now: keep the cyclic GC from rescanning it.
    gc.collect()
    gc.freeze()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, server.request_stop)
    log.log(log.NOTICE, "Ready to accept connections tcp")
    replication.start(repl)
    await server.serve_until_stopped()
    store.shutdown(core.extra.get("shutdown_save"))
    replication.shutdown(repl)
    log.log(log.NOTICE, "StreamDB is now ready to exit, bye bye...")
    return 0


def _apply_config(core, aof, names: list[str]) -> None:
    """CONFIG SET of directives that live objects cache."""
    if "appendfsync" in names and aof is not None:
        aof.policy = core.config["appendfsync"]
    if "aof-load-truncated" in names and aof is not None:
        aof.load_truncated = core.config["aof-load-truncated"]


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-v", "--version"):
        print(f"StreamDB server v={__version__}")
        return 0
    try:
        cfg = build_config(args)
    except (ConfigError, OSError) as e:
        print(f"*** FATAL CONFIG FILE ERROR ***\n{e}", file=sys.stderr)
        return 1
    log.configure(cfg["loglevel"], cfg["logfile"])
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    try:
        return asyncio.run(serve(cfg))
    except OSError as e:
        log.log(log.WARNING, f"Failed listening on port {cfg['port']}: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
