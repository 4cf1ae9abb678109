"""STREAMDB.BACKUP: an online backup of the running server (persistence/backup.py does the work).

``STREAMDB.BACKUP <dir>`` answers at once, like BGSAVE, and the backup goes on in
the background; ``STREAMDB.BACKUP STATUS`` (and INFO persistence's ``backup_*``
fields) say when it is done and how it went.  A directory literally named
STATUS is given as ``./STATUS``.
"""

from __future__ import annotations

from ..protocol.reply import CommandError, Map, Status
from .context import Ctx
from .registry import command


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
    return [(f"backup_{name}", value) for name, value in p.backup.status_fields()]
