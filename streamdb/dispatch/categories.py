"""What the command flags do not say about ACL categories and key access.

The command table (dispatch/registry.py) derives most of a command's ACL
categories from its flags (write -> @write, readonly -> @read, admin ->
@admin @dangerous, fast/slow, blocking) and its group (@stream).  These tables
add the rest, as Redis 7.0's command table has it (checked against
``COMMAND`` of a real redis-server; tests/security/test_acl.py compares
``ACL CAT <category>``).  Pure data: imported by the registry at registration.
"""

from __future__ import annotations

__all__ = ["ALL_CATEGORIES", "extra_categories", "category_override", "KEY_ACCESS"]

# ACL CAT with no argument, in Redis's order.
ALL_CATEGORIES = ("keyspace", "read", "write", "set", "sortedset", "list", "hash", "string",
                  "bitmap", "hyperloglog", "geo", "stream", "pubsub", "admin", "fast", "slow",
                  "blocking", "dangerous", "connection", "transaction", "scripting")

_EXTRA: dict[str, tuple[str, ...]] = {}


def _add(category: str, names: str) -> None:
    for name in names.split():
        _EXTRA[name] = _EXTRA.get(name, ()) + (category,)


_add("@keyspace", "object copy dbsize del dump exists expire expireat expiretime flushall flushdb keys "
                  "persist pexpire pexpireat pexpiretime pttl rename renamenx restore scan ttl "
                  "type unlink")
_add("@string", "decr decrby get incr incrby mget set")
_add("@connection", "auth command echo hello ping quit reset select wait waitaof client")
_add("@transaction", "discard exec multi unwatch watch")
_add("@scripting", "function script")
_add("@dangerous", "flushall flushdb info keys restore")
_add("@admin", "lastsave role")
_add("@dangerous", "lastsave role")

# Commands that only group subcommands carry no categories of their own but
# @slow (XGROUP, XINFO, CLIENT...); their subcommands carry the real ones.
# XINFO HELP is flagged readonly here but is not @read in Redis.
_OVERRIDE = {name: ("@slow",) for name in ("xgroup", "xinfo", "client", "function", "script",
                                                 "object")}
_OVERRIDE["xinfo|help"] = ("@stream", "@slow")


def extra_categories(name: str) -> tuple[str, ...]:
    """Categories of ``name`` ("xgroup|create" or "get") that its flags do not imply.

    A subcommand inherits its parent's entry (every CLIENT subcommand is @connection)."""
    return _EXTRA.get(name) or _EXTRA.get(name.split("|", 1)[0], ())


def category_override(name: str) -> tuple[str, ...] | None:
    return _OVERRIDE.get(name)


# Which permission each key argument needs, as Redis's key specs say: "R" for a
# key whose value is read (ACCESS), "W" for one changed (INSERT/DELETE/UPDATE),
# "RW" for both, "" for metadata only (any key pattern of the user will do).
# One letter group per key argument in order; the last applies to the rest.
# Commands not listed: "W" when flagged write, "R" when flagged readonly.
KEY_ACCESS: dict[str, tuple[str, ...]] = {
    "exists": ("",), "type": ("",), "xlen": ("",), "watch": ("",),
    "decr": ("RW",), "decrby": ("RW",), "incr": ("RW",), "incrby": ("RW",), "set": ("RW",),
    "copy": ("R", "W"), "rename": ("RW", "W"), "renamenx": ("RW", "W"),
    "xreadgroup": ("R",),
}
