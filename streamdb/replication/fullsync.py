"""The full-sync payload, both ends: a forked child on the primary writes it and
the loop relays it (``PayloadTransfer``); the replica keeps it aside until it is
complete (``PayloadAside``).

At ``+FULLRESYNC <replid> <offset>`` the primary forks.  The child holds the
dataset exactly as it is at that offset (copy-on-write) and writes the payload
-- the AOF rewrite's commands (``state_commands``: SELECT + RESTORE per key) and
a final SELECT of the stream's current db -- into a pipe, followed by a random
40-byte end mark, like Redis's diskless sync (``$EOF:<mark>``).  The parent reads
the pipe a chunk at a time and hands each chunk to the replica's connection; it
stops reading while that connection's write buffer is above ``HIGH_WATER`` (the
child then blocks on the full pipe), so neither side holds the payload in
memory and the loop serves other clients between chunks.

The wire format::

    $EOF:<mark>\r\n <body> <mark>                    (a replica without the capability)
    $EOF:<mark>:crc32\r\n <body> <crc32> <mark>      (REPLCONF capa streamdb-crc32)

``<crc32>`` is the body's CRC-32 as 8 hex digits.  The mark says the body is
all there; the checksum that it is what the primary's child wrote.  Only a
replica that announced ``CHECKSUM_CAPA`` gets the checksum (an older replica
would take it for part of the body: a replica of the old version follows a new
primary during an upgrade), and a replica accepts both forms (and the
``$<length>`` one) from whatever primary it follows.

The live stream of the syncing link is held (``ReplicaLink.held``) until the
replica acks the loaded payload: nothing follows the mark on the wire before
then, so the replica can recognise the mark as the last 40 bytes it read.
"""

from __future__ import annotations

import fcntl
import glob
import os
import signal
import zlib

from .. import log
from ..persistence.aof import state_commands
from ..protocol import encode_command
from ..persistence.child import fork_child
from ..protocol import ProtocolError, RequestParser
from ..protocol.reply import Raw

__all__ = ["PayloadTransfer", "PayloadAside", "PayloadError", "MARK_LEN", "CHECKSUM_CAPA",
           "new_mark"]

MARK_LEN = 40
CHECKSUM_CAPA = b"streamdb-crc32"    # REPLCONF capa: the replica checks a body checksum
CHECKSUM_TAG = b":crc32"             # after the mark in the header: a checksum precedes it
CHECKSUM_LEN = 8
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


def _checksum_text(crc: int) -> bytes:
    return b"%08x" % crc


def write_payload(fd: int, keyspace, db: int, mark: bytes, checksum: bool) -> None:
    """The child: the body in CHUNK-sized writes, then (``checksum``) its CRC-32,
    then the end mark."""
    crc = 0
    buf: list[bytes] = []
    size = 0

    def write_body() -> None:
        nonlocal crc
        data = b"".join(buf)
        crc = zlib.crc32(data, crc)
        _write_all(fd, data)

    for cmd in state_commands(keyspace):
        buf.append(cmd)
        size += len(cmd)
        if size >= CHUNK:
            write_body()
            buf, size = [], 0
    buf.append(encode_command([b"SELECT", b"%d" % db]))
    write_body()
    _write_all(fd, (_checksum_text(crc) if checksum else b"") + mark)
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
    """Bytes queued for the client and not yet taken by its socket."""
    return 0 if client.outbox is None else client.outbox.queued_bytes()


class PayloadTransfer:
    """One payload on its way from a child to one replica link."""

    def __init__(self, repl, link, db: int, checksum: bool) -> None:
        self.repl = repl
        self.link = link
        self.loop = repl.server.loop
        self.mark = new_mark()
        self.checksum = checksum
        self.sent = 0
        self.done = False
        rfd, wfd = os.pipe()
        _widen_pipe(wfd)
        keyspace = repl.core.keyspace
        mark = self.mark

        def work() -> None:
            os.close(rfd)
            write_payload(wfd, keyspace, db, mark, checksum)

        self.pid = fork_child(work, "replication payload")
        os.close(wfd)
        os.set_blocking(rfd, False)
        self.fd = rfd
        self.loop.add_reader(rfd, self._pump)
        self.reading = True

    @property
    def header(self) -> bytes:
        return b"$EOF:" + self.mark + (CHECKSUM_TAG if self.checksum else b"") + b"\r\n"

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
            client.outbox.deliver(Raw(data))
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


# -- the replica's end ----------------------------------------------------------------

TEMP_PREFIX = "temp-fullsync-"
TEMP_SUFFIX = ".payload"


class PayloadError(Exception):
    """A payload the replica cannot use: a bad header, a body cut short, a wrong
    checksum, a body that ends inside a command, or a file it could not write."""


def parse_header(hdr: bytes) -> tuple[bytes | None, bool, int]:
    """The ``$...`` line before the body: (the end mark or None, whether a checksum
    precedes the mark, the body's length or -1 when a mark ends it)."""
    if hdr.startswith(b"$EOF:"):
        mark = hdr[5:]
        checked = mark.endswith(CHECKSUM_TAG)
        if checked:
            mark = mark[:-len(CHECKSUM_TAG)]
        if len(mark) != MARK_LEN:
            raise PayloadError(f"Bad end mark in the full sync header: {hdr!r}")
        return mark, checked, -1
    if hdr.startswith(b"$") and hdr[1:].isdigit():
        return None, False, int(hdr[1:])
    raise PayloadError(f"Bad protocol from MASTER, the first byte is not '$': {hdr[:40]!r}")


def _remove_leftovers(dirpath: str) -> None:
    """Delete payloads a killed run left behind (the data directory's lock says no
    other server uses the directory, so these are this server's)."""
    for path in glob.glob(os.path.join(glob.escape(dirpath), f"{TEMP_PREFIX}*{TEMP_SUFFIX}")):
        try:
            os.unlink(path)
        except OSError:
            continue
        log.log(log.NOTICE, f"Removed {path}: a full-sync payload an earlier run left")


class PayloadAside:
    """The replica's end: the payload kept aside in ``<dir>/temp-fullsync-<pid>.payload``
    while it arrives, so that the replica's data -- served meanwhile -- and its own AOF,
    snapshot and replication state stay exactly what they were until the whole payload
    is here and checked (Redis's default, disk-based load).

    ``feed`` takes each read's bytes until ``complete``: the end mark (and the
    checksum, when the header announces one) or the length reached, and the body
    ending on a command boundary (its commands are parsed, and counted, as they
    arrive).  ``batches`` then reads the commands back for the switch;
    ``remove`` (always called) closes and deletes the file.

    A file rather than memory: the body is as large as the primary's data set, and the
    replica holds its own data besides.  It is not fsynced: nothing reads it once this
    process is gone (a kill -9 leaves it for the next sync to delete).
    """

    def __init__(self, dirpath: str, header: bytes) -> None:
        self.mark, self.checked, self.total = parse_header(header)
        # The bytes held back from the file at each read: maybe the checksum and the mark.
        self.trailer_len = 0 if self.mark is None else MARK_LEN + CHECKSUM_LEN * self.checked
        self.path = os.path.join(dirpath, f"{TEMP_PREFIX}{os.getpid()}{TEMP_SUFFIX}")
        self.received = 0          # bytes off the wire, trailer included
        self.size = 0              # body bytes in the file
        self.commands = 0
        self.crc = 0
        self._held = b""
        self._parser = RequestParser(max_bulk_len=1 << 62)
        _remove_leftovers(dirpath)
        try:
            self.file = open(self.path, "wb")
        except OSError as e:
            raise PayloadError(f"cannot create {self.path} for the payload: {e.strerror}") from None
        self.complete = False
        if self.total == 0:              # ``$0``: nothing to wait for
            self._finish()

    def want(self) -> int:
        """How many bytes to read next: a length-prefixed body is read to its end only."""
        return CHUNK if self.mark is not None else min(self.total - self.received, CHUNK)

    def feed(self, data: bytes) -> bool:
        """One read's bytes; returns ``complete``.  PayloadError when the payload
        cannot be used."""
        self.received += len(data)
        if self.mark is None:
            self._write_body(data)
            done = self.received >= self.total
        else:
            data = self._held + data
            done = len(data) >= self.trailer_len and data.endswith(self.mark)
            cut = max(len(data) - self.trailer_len, 0)
            self._write_body(data[:cut])
            self._held = data[cut:]
        if done:
            self._finish()
        return self.complete

    def _write_body(self, body: bytes) -> None:
        if not body:
            return
        try:
            self.file.write(body)
        except OSError as e:
            raise PayloadError(f"cannot write the payload to {self.path}: {e.strerror}") from None
        self.size += len(body)
        self.crc = zlib.crc32(body, self.crc)
        parser = self._parser
        parser.feed(body)
        try:
            while parser.next_command() is not None:
                self.commands += 1
        except ProtocolError as e:
            raise PayloadError(f"the payload is not RESP commands: {e}") from None

    def _finish(self) -> None:
        """All of it is here: check it, and have it in the file for ``batches``."""
        if self._parser.buffered():
            raise PayloadError("the payload ends in the middle of a command")
        if self.checked:
            sent = self._held[:CHECKSUM_LEN]
            if sent != _checksum_text(self.crc):
                raise PayloadError(f"the payload's checksum does not match (sent "
                                   f"{sent.decode('latin-1')}, received "
                                   f"{_checksum_text(self.crc).decode()})")
        try:
            self.file.close()
        except OSError as e:
            raise PayloadError(f"cannot write the payload to {self.path}: {e.strerror}") from None
        self.complete = True

    def batches(self):
        """The body's commands read back from the file (once ``complete``), a list of
        argv lists per CHUNK read.  The file is opened here, before the caller
        changes anything, so that only a read error can fail the iteration."""
        try:
            f = open(self.path, "rb")
        except OSError as e:
            raise PayloadError(f"cannot read the payload back from {self.path}: {e.strerror}") from None
        return self._read_batches(f)

    def _read_batches(self, f):
        parser = RequestParser(max_bulk_len=1 << 62)
        with f:
            while True:
                try:
                    chunk = f.read(CHUNK)
                except OSError as e:
                    raise PayloadError(f"cannot read the payload back from {self.path}: "
                                       f"{e.strerror}") from None
                if not chunk:
                    return
                parser.feed(chunk)
                batch = []
                while (argv := parser.next_command()) is not None:
                    batch.append(argv)
                yield batch

    def remove(self) -> None:
        try:
            self.file.close()
        except OSError:
            pass
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        except OSError as e:
            log.log(log.WARNING, f"Cannot remove {self.path}: {e.strerror}")
