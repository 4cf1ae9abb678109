"""Changing a small file so that a crash or a full disk at any step leaves it whole.

Every file the server rewrites in place (the AOF manifest, a backup's manifest, the
replication state) goes through ``replace_file``: the new content is written aside
(``<path>.tmp``), fsynced when it must survive a power cut, and renamed over ``path``,
so that ``path`` holds the old content or the new one, never a part.  Making the rename
itself durable is ``fsync_dir`` on the directory, left to the caller: only it knows
what a failed directory fsync means for what memory may believe (Aof's manifest)."""

from __future__ import annotations

import os

__all__ = ["fsync_dir", "replace_file"]


def fsync_dir(dirpath: str) -> None:
    """fsync the directory ``dirpath``: the renames and creations in it reach the disk."""
    fd = os.open(dirpath, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_file(path: str, data: bytes, durable: bool = True) -> None:
    """Make ``path`` hold ``data`` (see the module's docstring); fsynced first when
    ``durable``.  Raises OSError when a step fails, with the file aside removed (it
    holds room a full disk may need) and ``path`` as it was."""
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
