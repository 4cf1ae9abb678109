"""The full-sync payload, streamed: a forked child writes it, the loop relays it.

At ``+FULLRESYNC <replid> <offset>`` the primary forks.  The child holds the
dataset exactly as it is at that offset (copy-on-write) and writes the payload
-- the AOF rewrite's commands (``state_commands``: SELECT + RESTORE per key) and
a final SELECT of the stream's current db -- into a pipe, followed by a random
40-byte end mark, like Redis's diskless sync (``$EOF:<mark>``).  The parent reads
the pipe a chunk at a time and hands each chunk to the replica's connection; it
stops reading while that connection's write buffer is above ``HIGH_WATER`` (the
child then blocks on the full pipe), so neither side holds the payload in
memory and the loop serves other clients between chunks.

The live stream of the syncing link is held (``ReplicaLink.held``) until the
replica acks the loaded payload: nothing follows the mark on the wire before
then, so the replica can recognise the mark as the last 40 bytes it read.
"""

from __future__ import annotations

import fcntl
import os
import signal

from .. import log
from ..persistence.aof import encode_command, state_commands
from ..persistence.child import fork_child
from ..protocol.reply import Raw

__all__ = ["PayloadTransfer", "MARK_LEN", "new_mark"]

MARK_LEN = 40
CHUNK = 1024 * 1024
PIPE_SIZE = 1024 * 1024
HIGH_WATER = 4 * 1024 * 1024      # pending bytes on the replica's socket before we pause
RETRY_S = 0.005


def new_mark() -> bytes:
    return os.urandom(MARK_LEN // 2).hex().encode()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_payload(fd: int, keyspace, db: int, mark: bytes) -> None:
    """The child: the payload in CHUNK-sized writes, then the end mark."""
    buf: list[bytes] = []
    size = 0
    for cmd in state_commands(keyspace):
        buf.append(cmd)
        size += len(cmd)
        if size >= CHUNK:
            _write_all(fd, b"".join(buf))
            buf, size = [], 0
    buf.append(encode_command([b"SELECT", b"%d" % db]))
    buf.append(mark)
    _write_all(fd, b"".join(buf))
    os.close(fd)


def _widen_pipe(fd: int) -> None:
    """Give the pipe 1 MiB instead of 64 KiB where Linux allows it: the loop then
    wakes once per MiB of payload instead of once per 64 KiB (a 16 MB payload took
    ~250 child/loop hand-offs)."""
    try:
        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_SIZE)
    except OSError:
        pass          # not Linux, or above /proc/sys/fs/pipe-max-size: keep the default


def _write_buffer_size(client) -> int:
    """Bytes queued on the client's socket: the network layer's transport, reached
    through the bound ``deliver`` (the core's Client holds no socket)."""
    conn = getattr(client.deliver, "__self__", None)
    transport = getattr(conn, "transport", None)
    if transport is None:
        return 0
    return transport.get_write_buffer_size() + sum(len(b) for b in getattr(conn, "out", ()))


class PayloadTransfer:
    """One payload on its way from a child to one replica link."""

    def __init__(self, repl, link, db: int) -> None:
        self.repl = repl
        self.link = link
        self.loop = repl.server.loop
        self.mark = new_mark()
        self.sent = 0
        self.done = False
        rfd, wfd = os.pipe()
        _widen_pipe(wfd)
        keyspace = repl.core.keyspace
        mark = self.mark

        def work() -> None:
            os.close(rfd)
            write_payload(wfd, keyspace, db, mark)

        self.pid = fork_child(work, "replication payload")
        os.close(wfd)
        os.set_blocking(rfd, False)
        self.fd = rfd
        self.loop.add_reader(rfd, self._pump)
        self.reading = True

    @property
    def header(self) -> bytes:
        return b"$EOF:" + self.mark + b"\r\n"

    def _pump(self) -> None:
        link = self.link
        client = link.client
        if client.id not in self.repl.core.clients:
            self.abort("the replica disconnected")
            return
        if _write_buffer_size(client) > HIGH_WATER:
            # Flow control: wait for the socket to drain; the child blocks on the pipe.
            self.loop.remove_reader(self.fd)
            self.reading = False
            self.loop.call_later(RETRY_S, self._resume)
            return
        try:
            data = os.read(self.fd, CHUNK)
        except BlockingIOError:
            return
        except OSError as e:
            self.abort(f"reading the payload failed: {e}")
            return
        if data:
            self.sent += len(data)
            link.touch()
            client.deliver(Raw(data))
            return
        self._close_fd()
        _, status = os.waitpid(self.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            self._drop("the payload child failed")
            return
        self.done = True
        log.log(log.NOTICE, f"Synchronization with replica {link.name} succeeded: "
                            f"{self.sent} bytes of payload sent")

    def _resume(self) -> None:
        if self.fd is not None and not self.reading:
            self.reading = True
            self.loop.add_reader(self.fd, self._pump)
            self._pump()

    def _close_fd(self) -> None:
        if self.fd is not None:
            if self.reading:
                self.loop.remove_reader(self.fd)
                self.reading = False
            os.close(self.fd)
            self.fd = None

    def abort(self, why: str) -> None:
        """Stop the transfer (link gone, or server shutting down): end the child."""
        if self.fd is None:
            return
        self._close_fd()
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except OSError:
            pass
        log.log(log.NOTICE, f"Full sync with replica {self.link.name} stopped: {why}")

    def _drop(self, why: str) -> None:
        log.log(log.WARNING, f"Full sync with replica {self.link.name} failed: {why}")
        if self.link.client.close is not None:
            self.link.client.close()
