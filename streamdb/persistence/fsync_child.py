"""The child process behind ``appendfsync always`` (persistence/syncer.py).

Run as a script (``python fsync_child.py <socket fd>``), importing nothing of
StreamDB: it waits for a request on the socket, fdatasync()s the AOF segment's
file descriptor, and answers.  One request at a time; it exits when the
server's end of the socket closes (the server stopped, or was killed).

A request is the byte ``S``, carrying the segment's file descriptor
(SCM_RIGHTS) when the server moved to a new segment since the last request;
the answer is ``+`` (synced) or ``-<errno>`` (the fdatasync failed), then a
newline.
"""

import os
import socket
import sys


def main(sock_fd: int) -> None:
    sock = socket.socket(fileno=sock_fd)
    fd = None
    while True:
        try:
            msg, fds, _flags, _addr = socket.recv_fds(sock, 16, 1)
        except OSError:
            return
        if not msg:
            return                      # the server is gone
        if fds:                         # a new segment: sync this file from now on
            if fd is not None:
                os.close(fd)
            fd = fds[0]
            for extra in fds[1:]:
                os.close(extra)
        if fd is None:
            answer = b"-%d\n" % 9      # EBADF: no file to sync yet
        else:
            try:
                os.fdatasync(fd)
                answer = b"+\n"
            except OSError as e:
                answer = b"-%d\n" % (e.errno or 5)
        try:
            sock.sendall(answer)
        except OSError:
            return


if __name__ == "__main__":
    main(int(sys.argv[1]))
