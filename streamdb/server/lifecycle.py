"""The server process's life around the event loop: the data-directory lock, the
pid file, signals, and the start-up lines of the log.

- The lock (``<dir>/streamdb.lock``, ``fcntl.flock``) is held from before any
  file of the data directory is touched until exit: two servers writing one AOF
  would corrupt it.  The kernel drops it when the process dies (even by
  ``kill -9``); forked children close their copy, and the listening sockets'
  (``close_in_forked_children``), so that a snapshot child outliving a killed
  parent for a moment keeps a restarted server neither out of the directory nor
  off its port.
- SIGTERM and SIGINT ask for the same shutdown as the SHUTDOWN command (AOF
  flushed and fsynced, a snapshot when save rules exist and data changed);
  SIGHUP reopens the log file for logrotate.
"""

from __future__ import annotations

import fcntl
import os
import signal

from .. import __version__, compiled, log, protocol
from ..engine.stream import Stream

__all__ = ["LOCK_NAME", "LifecycleError", "DataDirLock", "PidFile", "close_in_forked_children",
           "install_signal_handlers",
           "log_startup_banner", "aof_bytes_on_disk", "log_loaded"]

LOCK_NAME = "streamdb.lock"


class LifecycleError(Exception):
    pass


# Descriptors a forked child closes at once: the data directory's lock and the
# listening sockets (a child never serves; its copies would only hold them).
_closed_in_children: set[int] = set()


def close_in_forked_children(fd: int) -> None:
    _closed_in_children.add(fd)


def _close_inherited() -> None:
    for fd in _closed_in_children:
        try:
            os.close(fd)
        except OSError:
            pass
    _closed_in_children.clear()


os.register_at_fork(after_in_child=_close_inherited)


class DataDirLock:
    """An exclusive ``flock`` on ``<dir>/streamdb.lock``; the file holds the owner's pid."""

    def __init__(self, directory: str) -> None:
        self.directory = os.path.abspath(directory)
        self.path = os.path.join(self.directory, LOCK_NAME)
        self.fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise LifecycleError naming the directory and the holder's pid.

        A refused start changes nothing on disk (the lock file already exists then).
        """
        os.makedirs(self.directory, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise LifecycleError(
                f"Can't lock the data directory {self.directory}: it is in use by another "
                f"StreamDB server (pid {holder}, lock file {self.path}). Exiting.") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd
        close_in_forked_children(fd)

    def release(self) -> None:
        if self.fd is None:
            return
        fd, self.fd = self.fd, None
        _closed_in_children.discard(fd)
        try:
            os.ftruncate(fd, 0)     # no stale pid for the next reader
        except OSError:
            pass
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


class PidFile:
    """``pidfile``: written at start-up, removed at shutdown (if it still names us)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.written = False

    def write(self) -> None:
        try:
            with open(self.path, "w", encoding="ascii") as f:
                f.write(f"{os.getpid()}\n")
            self.written = True
        except OSError as e:
            # As Redis: a pid file is a convenience, not a reason to stop.
            log.log(log.WARNING, f"Failed to write PID file {self.path}: {e}")

    def remove(self) -> None:
        if not self.written:
            return
        self.written = False
        try:
            with open(self.path, encoding="ascii") as f:
                if f.read().strip() != str(os.getpid()):
                    return
            log.log(log.NOTICE, "Removing the pid file.")
            os.unlink(self.path)
        except OSError:
            pass


def install_signal_handlers(loop, request_shutdown) -> None:
    """SIGTERM/SIGINT -> ``request_shutdown()`` (the SHUTDOWN path); SIGHUP -> reopen the log."""
    def on_stop_signal(name: str) -> None:
        log.log(log.WARNING, f"Received {name} scheduling shutdown...")
        request_shutdown()

    def on_hangup() -> None:
        try:
            log.reopen()
        except OSError as e:
            log.log(log.WARNING, f"Can't reopen the log file: {e}")
            return
        log.log(log.NOTICE, "Received SIGHUP, log file reopened.")

    loop.add_signal_handler(signal.SIGTERM, on_stop_signal, "SIGTERM")
    loop.add_signal_handler(signal.SIGINT, on_stop_signal, "SIGINT")
    loop.add_signal_handler(signal.SIGHUP, on_hangup)


def log_startup_banner(cfg) -> None:
    """What an operator needs to know first: which binary, which config, where the data goes."""
    log.log(log.NOTICE, "oO0OoO0OoO0Oo StreamDB is starting oO0OoO0OoO0Oo")
    log.log(log.NOTICE, f"StreamDB version={__version__}, bits=64, pid={os.getpid()}, just started")
    core, why = compiled.status(protocol.CORE, protocol.CORE_REASON)
    if core == "compiled":
        log.log(log.NOTICE, f"Core: compiled ({why}: the request path is C)")
    else:
        log.log(log.WARNING, f"Core: python, slower ({why})")
    if cfg.file:
        log.log(log.NOTICE, f"Configuration loaded from {os.path.abspath(cfg.file)}")
    else:
        log.log(log.WARNING, "Warning: no config file specified, using the default config. "
                             "In order to specify a config file use streamdb-server /path/to/streamdb.conf")
    listen = f"port={cfg['port']}"
    tls_port = cfg.values.get("tls-port")     # only when a TLS listener is configured
    if tls_port:
        listen += f", tls-port={tls_port}"
    log.log(log.NOTICE, f"Running mode=standalone, {listen}, bind={cfg['bind']}")
    save_rules = cfg["save"] or "off"
    if cfg["appendonly"]:
        persistence = f"appendonly=yes, appendfsync={cfg['appendfsync']}"
    else:
        persistence = "appendonly=no"
    log.log(log.NOTICE, f"Persistence: {persistence}, save rules={save_rules}")
    log.log(log.NOTICE, f"Data directory {os.path.abspath(cfg['dir'])}")


def aof_bytes_on_disk(cfg) -> int:
    """Size of the AOF directory's segments (0 with appendonly no): what a start-up replays at
    most.  A segment counts without the zeros a crashed server's preallocation left after its
    frames; the manifest and the ``.corrupt-<time>`` copies streamdb-check-aof --fix keeps
    are not replayed and do not count (INFO's aof sizes leave them out too)."""
    if not cfg["appendonly"]:
        return 0
    from ..persistence.aof import segment_logical_size
    aof_dir = os.path.join(cfg["dir"], cfg["appenddirname"])
    try:
        names = os.listdir(aof_dir)
    except FileNotFoundError:
        return 0
    total = 0
    for n in names:
        p = os.path.join(aof_dir, n)
        if n.endswith(".aof") and os.path.isfile(p):
            total += segment_logical_size(p)
    return total


def log_loaded(keyspace, aof_bytes: int, seconds: float) -> None:
    keys = sum(len(db) for db in keyspace.dbs)
    entries = sum(value.length for db in keyspace.dbs for value in db.data.values()
                  if isinstance(value, Stream))
    log.log(log.NOTICE, f"DB loaded from disk: {keys} keys, {entries} stream entries, "
                        f"AOF {aof_bytes} bytes, {seconds:.3f} seconds")
