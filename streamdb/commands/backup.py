"""STREAMDB.BACKUP and Redis 8.10's BACKUP family: online backups of the running server
(persistence/backup.py and persistence/backup_window.py do the work).

``STREAMDB.BACKUP <dir>`` answers at once, like BGSAVE, and the backup goes on in
the background; ``STREAMDB.BACKUP STATUS`` (and INFO persistence's ``backup_*``
fields) say when it is done and how it went.  A directory literally named
STATUS is given as ``./STATUS``.
"""

from __future__ import annotations

from ..protocol.reply import OK, CommandError, Map, Status
from ..dispatch.context import Ctx
from ..dispatch.registry import command, subcommand


def _backup(ctx: Ctx):
    p = ctx.core.persistence
    if p is None:
        raise CommandError("ERR persistence is not configured")
    return p.backup


# since: the Redis version StreamDB reports (redis-version-compat) when the command came.
@command("streamdb.backup", 2, "admin noscript no-async-loading no-multi", since="8.10.0")
def streamdb_backup(ctx: Ctx, argv):
    """STREAMDB.BACKUP <directory | STATUS>"""
    # Imported here: persistence.backup -> persistence.snapshot -> commands (this package).
    from ..persistence.backup import BackupError
    backup = _backup(ctx)
    if argv[1].lower() == b"status":
        fields = backup.status_fields()
        return Map((name.encode(), value if isinstance(value, int) else str(value).encode())
                   for name, value in fields)
    try:
        path = backup.start(argv[1].decode("utf-8", "surrogateescape"))
    except BackupError as e:
        raise CommandError(f"ERR {e}") from None
    if backup.last_status == "err" and not backup.in_progress and backup.last_dir == path:
        raise CommandError(f"ERR Backup failed: {backup.last_error}")
    return Status(f"Backup started into {path}")


def info_fields(core) -> list[tuple[str, object]]:
    """INFO persistence: backup_in_progress, backup_last_status, backup_last_dir, ..."""
    p = core.persistence
    if p is None:
        return []
    fields = [(f"backup_{name}", value) for name, value in p.backup.status_fields()]
    # Redis's backup_in_progress counts a BACKUP window between START and SEAL too.
    fields[0] = ("backup_in_progress", int(p.backup.in_progress or p.backup_window.active))
    return fields


# ---------------------------------------------------------------------------
# BACKUP START | SEAL | LIST | STATUS | ABORT | CLEANUP (Redis 8.10): the window
# of persistence/backup_window.py, on the same online backup.
# ---------------------------------------------------------------------------


def _window(ctx: Ctx):
    p = ctx.core.persistence
    if p is None:
        raise CommandError("ERR persistence is not configured")
    return p.backup_window


def _step(ctx: Ctx, step: str):
    """Run the window's ``step`` (start, seal, abort, cleanup): OK, or its refusal."""
    from ..persistence.backup_window import WindowError
    try:
        getattr(_window(ctx), step)()
    except WindowError as e:
        raise CommandError(f"ERR {e}") from None
    return OK


@command("backup", -2, "", since="8.10.0")
def backup(ctx: Ctx, argv):
    """BACKUP <subcommand>"""


@subcommand("backup", "start", 2, "admin noscript", since="8.10.0")
def backup_start(ctx: Ctx, argv):
    """BACKUP START"""
    return _step(ctx, "start")


@subcommand("backup", "seal", 2, "admin noscript", since="8.10.0")
def backup_seal(ctx: Ctx, argv):
    """BACKUP SEAL"""
    return _step(ctx, "seal")


@subcommand("backup", "abort", 2, "admin noscript", since="8.10.0")
def backup_abort(ctx: Ctx, argv):
    """BACKUP ABORT"""
    return _step(ctx, "abort")


@subcommand("backup", "cleanup", 2, "admin noscript", since="8.10.0")
def backup_cleanup(ctx: Ctx, argv):
    """BACKUP CLEANUP"""
    return _step(ctx, "cleanup")


@subcommand("backup", "list", 2, "admin stale", since="8.10.0")
def backup_list(ctx: Ctx, argv):
    """BACKUP LIST"""
    return [path.encode("utf-8", "surrogateescape") for path in _window(ctx).files()]


@subcommand("backup", "status", 2, "admin stale", since="8.10.0")
def backup_status(ctx: Ctx, argv):
    """BACKUP STATUS"""
    return Map((name.encode(), value if isinstance(value, int) else str(value).encode())
               for name, value in _window(ctx).status())


@subcommand("backup", "help", 2, "loading stale", since="8.10.0")
def backup_help(ctx: Ctx, argv):
    """BACKUP HELP"""
    return [b"BACKUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            b"START", b"    Start a new backup into the configured 'backupdirname'.",
            b"SEAL", b"    Freeze the current backup (BASE + INCR + manifest).",
            b"LIST", b"    List the immutable backup file paths pinned so far.",
            b"STATUS", b"    Report the current backup state.",
            b"ABORT", b"    Cancel a backup that has not been sealed yet.",
            b"CLEANUP", b"    Remove a sealed backup's files and return to idle.",
            b"HELP", b"    Print this help."]
