"""What LMDB leaves to its memory map: checking a data file before it is opened.

LMDB reads ``data.mdb`` through an mmap.  A page the file does not hold (the file
was cut short: a copy that stopped, a full disk, a bad restore) is then a SIGBUS
that kills the process without a word, and a file too short for its two meta pages
is a bare ``MDB_INVALID`` (or ENOENT when empty).  ``damage`` reads with plain
reads what LMDB would trust: both meta pages, and that the file holds every page
the newest of them says is in use.

The layout read here (liblmdb mdb.c, 64-bit builds, native byte order):

* a page starts with a 16-byte header: ``mp_pgno`` (8), ``mp_pad`` (2),
  ``mp_flags`` (2), then ``mp_lower`` and ``mp_upper`` (2 each; an overflow page
  has its page count, 4 bytes, there instead); a page's node offsets (2 bytes
  each) follow the header, their count is ``(mp_lower - 16) / 2``;
* pages 0 and 1 are meta pages (``P_META``); the meta (``MDB_meta``) follows the
  header: ``mm_magic`` (4), ``mm_version`` (4), ``mm_address`` (8),
  ``mm_mapsize`` (8), two ``MDB_db`` of 48 bytes (free pages, then the main
  database: ``md_pad`` (4, in the first one the page size), ``md_flags`` (2),
  ``md_depth`` (2), four counters (8 each), ``md_root`` (8)), ``mm_last_pg`` (8),
  ``mm_txnid`` (8).  LMDB uses the meta with the higher ``mm_txnid``, and refuses
  the file if either is not a meta page;
* a node (``MDB_node``): ``mn_lo``, ``mn_hi``, ``mn_flags``, ``mn_ksize`` (2 each),
  then the key and, in a leaf, the data.  In a branch node lo | hi << 16 | flags
  << 32 is the child's page number; in a leaf lo | hi << 16 is the data's size,
  and with ``F_BIGDATA`` the data is the number of the overflow page holding it.

A file may legitimately end before ``mm_last_pg``: pages a transaction took and
freed again before its commit are never written (liblmdb: "the file may be shorter
if the freeDB lists the final pages").  So when the file is short, the pages it
lacks must all be listed as free in the free-page database, which ``damage`` then
walks (with plain reads, its pages checked to be in the file too).
"""

from __future__ import annotations

import os
import struct

__all__ = ["damage", "reserve_lock_file"]

_HEADER = 16                 # PAGEHDRSZ
_META_END = _HEADER + 136    # header + MDB_meta: what LMDB reads of a meta page
_MAGIC = 0xBEEFC0DE
_DATA_VERSION = 1
_P_BRANCH, _P_LEAF, _P_META = 0x01, 0x02, 0x08
_F_BIGDATA = 0x01
_NO_PAGE = 2 ** 64 - 1       # P_INVALID: an empty database's root

_U16 = struct.Struct("=H")
_U32 = struct.Struct("=I")
_U64 = struct.Struct("=Q")
_NODE = struct.Struct("=HHHH")


class _Meta:
    """The fields of one meta page that the checks need."""

    def __init__(self, raw: bytes) -> None:
        self.page_size = _U32.unpack_from(raw, 40)[0]
        self.free_root = _U64.unpack_from(raw, 80)[0]
        self.last_page = _U64.unpack_from(raw, 136)[0]
        self.txnid = _U64.unpack_from(raw, 144)[0]
        self.valid = (bool(_U16.unpack_from(raw, 10)[0] & _P_META) and
                      _U32.unpack_from(raw, 16)[0] == _MAGIC and
                      _U32.unpack_from(raw, 20)[0] == _DATA_VERSION and
                      # (a page size LMDB could have written: a power of two it supports)
                      512 <= self.page_size <= 65536 and self.page_size & (self.page_size - 1) == 0)


def damage(path: str) -> str | None:
    """Why the LMDB data file ``path`` must not be opened (LMDB would fail on it, or
    fault reading it), as a phrase starting with the path; None when its meta pages
    are sound and it holds every page in use."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        return f"{path} cannot be opened ({e.strerror})"
    try:
        return _damage(fd, path)
    except OSError as e:
        return f"{path} cannot be read ({e.strerror})"
    finally:
        os.close(fd)


def _damage(fd: int, path: str) -> str | None:
    size = os.fstat(fd).st_size
    metas = []
    offset = 0
    for which in (0, 1):
        raw = os.pread(fd, _META_END, offset)
        if len(raw) < _META_END:
            return (f"{path} is {size} bytes, too short to hold LMDB's meta page {which} "
                    f"(the file was cut short or never completely written)")
        meta = _Meta(raw)
        if not meta.valid:
            return f"{path}: page {which} is not an LMDB meta page (the file is damaged)"
        metas.append(meta)
        offset = metas[0].page_size       # (where LMDB looks for the second one)
    meta = max(metas, key=lambda m: m.txnid)
    needed = (meta.last_page + 1) * meta.page_size
    if size >= needed:
        return None
    whole_pages = size // meta.page_size
    try:
        free = _free_pages(fd, meta, size)
    except struct.error:                  # (a node that runs past its page)
        free = None
    if free is not None and all(p in free for p in range(whole_pages, meta.last_page + 1)):
        return None
    return (f"{path} is {size} bytes but its last committed transaction uses {needed} "
            f"({meta.last_page + 1} pages of {meta.page_size}): the file was cut short")


def _free_pages(fd: int, meta: _Meta, size: int) -> set[int] | None:
    """The page numbers the free-page database of ``meta`` lists; None when one of
    its own pages is not wholly in the file (or is not a B-tree page)."""
    psize = meta.page_size
    free: set[int] = set()
    todo = [] if meta.free_root == _NO_PAGE else [meta.free_root]
    visited = 0
    while todo:
        pgno = todo.pop()
        visited += 1
        if visited > meta.last_page + 1 or (pgno + 1) * psize > size:
            return None                   # (a cycle, or a page the file lacks)
        page = os.pread(fd, psize, pgno * psize)
        flags = _U16.unpack_from(page, 10)[0]
        count = (_U16.unpack_from(page, 12)[0] - _HEADER) // 2
        if not flags & (_P_BRANCH | _P_LEAF) or not 0 <= count <= (psize - _HEADER) // 2:
            return None
        for i in range(count):
            at = _U16.unpack_from(page, _HEADER + 2 * i)[0]
            if at + _NODE.size > psize:
                return None
            lo, hi, node_flags, key_size = _NODE.unpack_from(page, at)
            if flags & _P_BRANCH:
                todo.append(lo | hi << 16 | node_flags << 32)
                continue
            data_size = lo | hi << 16
            data_at = at + _NODE.size + key_size
            if node_flags & _F_BIGDATA:
                overflow = _U64.unpack_from(page, data_at)[0]
                start = overflow * psize + _HEADER
                if start + data_size > size:
                    return None
                data = os.pread(fd, data_size, start)
            else:
                data = page[data_at:data_at + data_size]
            # The data is an ID list: its length, then that many page numbers.
            if len(data) < 8:
                return None
            listed = _U64.unpack_from(data, 0)[0]
            if 8 + 8 * listed > len(data):
                return None
            free.update(struct.unpack_from(f"={listed}Q", data, 8))
    return free


# LMDB's lock file (``lock.mdb``: its reader table, written through an mmap) is made by
# ftruncate, so its pages hold no disk space until first written.  On a full file
# system that first write through the map is a SIGBUS, and the process that dies is
# whichever opened the environment first: a snapshot child, or the server itself when
# its node store opens the snapshot (a pinned read transaction takes a reader slot).
# ``reserve_lock_file`` gives the file its space with plain calls before LMDB maps it,
# so a full disk is an ENOSPC there.  64 KiB covers py-lmdb's 126 reader slots (64 bytes
# each) and the table's header many times over; LMDB never shrinks the file.
LOCK_FILE = "lock.mdb"
LOCK_FILE_RESERVE = 64 * 1024


def reserve_lock_file(env_dir: str) -> None:
    """Make sure ``env_dir``'s lock file exists with its space allocated (creating the
    directory as LMDB would).  Raises OSError (ENOSPC on a full disk) instead of the
    SIGBUS LMDB's first write to an unallocated page would be; changes no byte already
    there (fallocate only fills holes)."""
    os.makedirs(env_dir, exist_ok=True)
    fd = os.open(os.path.join(env_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.posix_fallocate(fd, 0, LOCK_FILE_RESERVE)
    finally:
        os.close(fd)
