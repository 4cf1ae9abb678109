"""Changing a file so that a crash or a full disk at any step leaves it whole.

Every file the server rewrites in place (the AOF manifest and a rewrite's base segment,
a backup's manifest, the replication state, the config file on CONFIG REWRITE, the ACL
file on ACL SAVE) goes through ``replace_file`` (or ``replacing``, for content written
piece by piece): the new content is written aside (``<path>.tmp``), fsynced when it
must survive a power cut, and renamed over ``path``, so that ``path`` holds the old
content or the new one, never a part.  Making the rename itself durable is
``fsync_dir`` on the directory, left to the caller: only it knows what a failed
directory fsync means for what memory may believe (Aof's manifest).

A leaf of the ground floor (no streamdb import): persistence/ and security/ both use it."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import BinaryIO, Iterator

__all__ = ["fsync_dir", "replace_file", "replacing"]


def fsync_dir(dirpath: str) -> None:
    """fsync the directory ``dirpath``: the renames and creations in it reach the disk."""
    fd = os.open(dirpath, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def replacing(path: str, durable: bool = True, mode: int | None = None) -> Iterator[BinaryIO]:
    """The file the new content of ``path`` is written into (see the module's
    docstring); when the block ends it is fsynced (if ``durable``) and renamed over
    ``path``.  ``mode``: the new file's permission bits, set exactly (None: what
    open() gives a new file); it has them from its creation, never wider ones.

    When a step (or the block) fails, the exception goes on with the file aside
    removed (it holds room a full disk may need) and ``path`` as it was."""
    tmp = path + ".tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666 if mode is None else 0o600)
        with open(fd, "wb") as f:
            if mode is not None:
                os.fchmod(fd, mode)     # (exactly: the umask narrowed what os.open gave)
            yield f
            if durable:
                f.flush()
                os.fsync(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def replace_file(path: str, data: bytes, durable: bool = True, mode: int | None = None) -> None:
    """Make ``path`` hold ``data`` (see ``replacing``).  Raises OSError when a step
    fails, with the file aside removed and ``path`` as it was."""
    with replacing(path, durable, mode) as f:
        f.write(data)
