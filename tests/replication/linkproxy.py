"""A loopback TCP relay between a replica and its primary, to cut or hold the link
at a chosen point of a full-sync transfer (real sockets on both sides)."""

from __future__ import annotations

import socket
import threading

from streamdb.cli.procs import free_port


class LinkProxy:
    """Relays 127.0.0.1:<port> to the primary.  On the first connection only:

    * ``cut_after``: close both sides once that many bytes after ``+FULLRESYNC``
      went to the replica (a link cut in the middle of the payload);
    * ``hold_after``: stop relaying to the replica after that many payload bytes
      until ``release()`` (the transfer is frozen mid-way, the link stays open), or
      ``cut()`` (closed there: what the primary sent past that point is lost, as when
      it dies mid-transfer);
    * ``corrupt_at``: flip a bit of the byte that many bytes after ``+FULLRESYNC``
      (a payload damaged on its way, its framing intact).

    Later connections are relayed untouched (refused while the primary is down).
    """

    def __init__(self, target_port: int, cut_after: int | None = None,
                 hold_after: int | None = None, corrupt_at: int | None = None) -> None:
        self.target_port = target_port
        self.cut_after = cut_after
        self.hold_after = hold_after
        self.corrupt_at = corrupt_at
        self.corrupted = threading.Event()
        self.port = free_port()
        self.connections = 0
        self.cut_done = threading.Event()
        self.held = threading.Event()
        self._release = threading.Event()
        self._cut_held = False
        self._stop = threading.Event()
        self._socks: list[socket.socket] = []
        self._lsock = socket.create_server(("127.0.0.1", self.port))
        self._lsock.settimeout(0.2)
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)

    def __enter__(self) -> "LinkProxy":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._release.set()
        self._thread.join(5)
        self._lsock.close()
        for s in self._socks:
            try:
                s.close()
            except OSError:
                pass

    def release(self) -> None:
        self._release.set()

    def cut(self) -> None:
        self._cut_held = True
        self._release.set()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                down, _ = self._lsock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                up = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                down.close()
                continue
            self._socks += [down, up]
            self.connections += 1
            first = self.connections == 1
            threading.Thread(target=self._pump, args=(down, up, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(up, down, first), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, watch: bool) -> None:
        seen = b""          # the bytes before +FULLRESYNC's payload starts (watch only)
        after = -1          # payload bytes relayed since +FULLRESYNC, -1 before it
        try:
            while not self._stop.is_set():
                data = src.recv(65536)
                if not data:
                    break
                if watch and after < 0:
                    seen += data
                    at = seen.find(b"+FULLRESYNC")
                    if at >= 0:
                        after = len(seen) - at
                        dst.sendall(data)
                        continue
                elif watch:
                    flip = -1 if self.corrupt_at is None else self.corrupt_at - after
                    if 0 <= flip < len(data):
                        data = data[:flip] + bytes([data[flip] ^ 0x20]) + data[flip + 1:]
                        self.corrupted.set()
                    limit = self.cut_after if self.cut_after is not None else self.hold_after
                    if limit is not None and after + len(data) >= limit:
                        head = max(limit - after, 0)
                        dst.sendall(data[:head])
                        after += head
                        if self.cut_after is not None:
                            self.cut_done.set()
                            break
                        self.held.set()
                        self._release.wait()
                        if self._cut_held:
                            break
                        dst.sendall(data[head:])
                        watch = False
                        continue
                    after += len(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
