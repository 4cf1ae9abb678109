"""The AOF's manifest (which segments make up the log, in order) and the directory
that holds them.

The manifest is the one file that says what the log is: a segment no manifest
names is not part of it, so every change to the set of segments is made by saving
a new manifest (aside, fsync, rename, fsync dir) before memory believes it, and a
segment's file is deleted only after a saved manifest stopped naming it.
"""

from __future__ import annotations

import os
import zlib

from ... import log
from ...files import fsync_dir, replace_file
from .format import SEGMENT_NAME, AofError, segment_logical_size

__all__ = ["AofDirectory", "MANIFEST_MAGIC", "Manifest", "ManifestNotDurable", "manifest_way_out"]

MANIFEST_MAGIC = "#SDBMANIFEST 1"


def manifest_way_out(dirpath: str) -> str:
    """What an operator runs when the manifest of the AOF directory ``dirpath`` is missing
    or damaged (the end of the start-up error, and of streamdb-check-aof's report)."""
    return (f"restore it from a backup (docs/OPERATIONS.md, \"Repair a corrupt AOF\"), or run "
            f"'streamdb-check-aof --fix {dirpath}' on the stopped server's files to write one "
            f"naming the segments found there (it lists them and asks first)")


class ManifestNotDurable(OSError):
    """Manifest.save renamed the new manifest into place but the directory's fsync
    failed: it is what readers see now, yet a power cut may bring back the old one."""


class Manifest:
    """The ordered list of segments.  Replaced atomically: temp file, fsync, rename, fsync dir."""

    def __init__(self, base: str | None = None, incrs: list[str] | None = None, seq: int = 0) -> None:
        self.base = base
        self.incrs = incrs or []
        self.seq = seq

    def segments(self) -> list[str]:
        return ([self.base] if self.base else []) + self.incrs

    def render(self) -> str:
        lines = [MANIFEST_MAGIC, f"seq {self.seq}"]
        if self.base:
            lines.append(f"file {self.base} type b")
        for name in self.incrs:
            lines.append(f"file {name} type i")
        body = "\n".join(lines) + "\n"
        return body + f"#C {zlib.crc32(body.encode()):08x}\n"

    @classmethod
    def read(cls, path: str) -> "Manifest":
        """The manifest file at ``path``.  Raises AofError, naming the file and the way
        out, for anything but a readable, checksummed manifest (binary data, an empty
        file, a bad line): never another exception."""
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError as e:
            raise AofError(f"{path}: cannot read the AOF manifest: {e.strerror or e}") from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise cls.damaged(path, "not a StreamDB AOF manifest (binary data)") from None
        return cls.parse(text, path)

    @staticmethod
    def damaged(path: str, what: str) -> AofError:
        """The error for the manifest at ``path`` that cannot be used, and why (``what``)."""
        return AofError(f"{path}: {what}. The manifest says which segments make up the log "
                        f"and in what order; the server will not start without it: "
                        f"{manifest_way_out(os.path.dirname(path) or '.')}")

    @classmethod
    def parse(cls, text: str, path: str) -> "Manifest":
        """Raises AofError (see ``damaged``) for anything but a valid manifest."""
        if not text:
            raise cls.damaged(path, "the manifest file is empty")
        lines = text.split("\n")
        if lines[0] != MANIFEST_MAGIC:
            raise cls.damaged(path, "not a StreamDB AOF manifest (or an unsupported version)")
        try:
            crc_line = next(i for i, l in enumerate(lines) if l.startswith("#C "))
        except StopIteration:
            raise cls.damaged(path, "the manifest has no checksum line") from None
        body = "\n".join(lines[:crc_line]) + "\n"
        if f"{zlib.crc32(body.encode()):08x}" != lines[crc_line][3:].strip():
            raise cls.damaged(path, "manifest checksum mismatch")
        m = cls()
        for line in lines[1:crc_line]:
            parts = line.split()
            if parts[:1] == ["seq"] and len(parts) == 2 and parts[1].isdigit():
                m.seq = int(parts[1])
            elif parts[:1] == ["file"] and len(parts) == 4 and parts[3] in ("b", "i"):
                if "/" in parts[1] or parts[1].startswith(".") or not SEGMENT_NAME.fullmatch(parts[1]):
                    raise cls.damaged(path, f"bad segment name {parts[1]!r}")
                if parts[3] == "b":
                    m.base = parts[1]
                else:
                    m.incrs.append(parts[1])
            else:
                raise cls.damaged(path, f"unreadable manifest line {line!r}")
        return m

    def save(self, dirpath: str, name: str) -> None:
        """Make this the manifest ``name`` in ``dirpath``: written aside, fsynced, renamed
        into place, the directory fsynced.

        Raises OSError when a step fails, the file aside removed: the manifest in place
        is the old one then, except for ManifestNotDurable (only the last fsync failed)."""
        replace_file(os.path.join(dirpath, name), self.render().encode("utf-8"))
        try:
            fsync_dir(dirpath)
        except OSError as e:
            raise ManifestNotDurable(e.errno, e.strerror) from None


class AofDirectory:
    """The AOF directory of a running server: the manifest memory believes (saved
    before it is believed: ``replace_manifest``), the logical sizes of the segments
    loaded or sealed, and the deletion of the files of segments it no longer names."""

    def __init__(self, dirpath: str, basename: str) -> None:
        self.dir = dirpath
        self.basename = basename
        self.manifest_name = basename + ".manifest"
        self.manifest = Manifest()
        # The logical sizes of the segments loaded or sealed (a file may be longer:
        # zeros after a crash); the current segment's is the writer's ``size``.
        self.sizes: dict[str, int] = {}
        # (name, path) -> None: called before a retired segment's file is deleted (BACKUP's pins)
        self.keep_retired = None

    def manifest_path(self) -> str:
        return os.path.join(self.dir, self.manifest_name)

    def current_segment(self) -> str:
        """The segment frames go to: the manifest's last incr ("" before there is one)."""
        return self.manifest.incrs[-1] if self.manifest.incrs else ""

    def sealed_size(self, name: str) -> int:
        """The logical size of segment ``name``, which gets no more frames: known
        since it was loaded or sealed, else read from its file (0 when unreadable)."""
        known = self.sizes.get(name)
        if known is not None:
            return known
        try:
            return segment_logical_size(os.path.join(self.dir, name))
        except OSError:
            return 0

    def replace_manifest(self, manifest: Manifest, why: str) -> None:
        """Save ``manifest``, and only then make it the one memory believes.

        OSError (logged at warning) when the save failed: memory keeps the old one,
        which names only files that still exist (nothing was deleted yet)."""
        try:
            manifest.save(self.dir, self.manifest_name)
        except OSError as e:
            log.log(log.WARNING, f"Could not save the AOF manifest ({why}): {e.strerror or e}; "
                                 f"the AOF goes on with the segments it named")
            raise
        self.manifest = manifest

    def drop_segment_file(self, name: str) -> None:
        """Delete the file of a segment the manifest no longer names.  ``keep_retired``
        (set by an open BACKUP window, persistence/backup.py) is told first, so that it
        can pin the segment's bytes before the name goes."""
        self.sizes.pop(name, None)
        path = os.path.join(self.dir, name)
        if self.keep_retired is not None:
            self.keep_retired(name, path)
        try:
            os.unlink(path)
        except OSError:
            pass
