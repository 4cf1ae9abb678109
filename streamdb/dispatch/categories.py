"""What the command flags do not say about ACL categories and key access.

The command table (dispatch/registry.py) derives most of a command's ACL
categories from its flags (write -> @write, readonly -> @read, admin ->
@admin @dangerous, fast/slow, blocking) and its group (@stream).  These tables
add the rest, as Redis 7.0's command table has it (checked against
``COMMAND`` of a real redis-server; tests/security/test_acl.py compares
``ACL CAT <category>``).  Pure data: imported by the registry at registration.
"""

from __future__ import annotations

__all__ = ["ALL_CATEGORIES", "extra_categories", "category_override", "KEY_ACCESS",
           "CHANNEL_ARGS"]

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
_add("@pubsub", "subscribe unsubscribe psubscribe punsubscribe ssubscribe sunsubscribe publish "
                "spublish pubsub")
_add("@dangerous", "flushall flushdb info keys restore")
_add("@admin", "lastsave role")
_add("@dangerous", "lastsave role")

# Commands that only group subcommands carry no categories of their own but
# @slow (XGROUP, XINFO, CLIENT...); their subcommands carry the real ones.
# XINFO HELP is flagged readonly here but is not @read in Redis.
_OVERRIDE = {name: ("@slow",) for name in ("xgroup", "xinfo", "client", "function", "script",
                                                 "object")}
_OVERRIDE["xinfo|help"] = ("@stream", "@slow")
# Redis lists @pubsub first; PUBSUB HELP is only @slow.
_OVERRIDE.update({name: ("@pubsub", "@slow") for name in (
    "subscribe unsubscribe psubscribe punsubscribe ssubscribe sunsubscribe pubsub|channels "
    "pubsub|numsub pubsub|numpat pubsub|shardchannels pubsub|shardnumsub").split()})
_OVERRIDE.update({"publish": ("@pubsub", "@fast"), "spublish": ("@pubsub", "@fast"),
                  "pubsub": ("@slow",), "pubsub|help": ("@slow",)})


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

# The arguments that name Pub/Sub channels, which ACL channel rules (&pattern) govern:
# command -> (first, last (-1: the last argument), whether they are patterns).  A
# pattern is allowed only when the user has that very pattern (Redis's rule);
# unsubscribing needs no permission.
CHANNEL_ARGS: dict[str, tuple[int, int, bool]] = {
    "publish": (1, 1, False), "spublish": (1, 1, False),
    "subscribe": (1, -1, False), "ssubscribe": (1, -1, False), "psubscribe": (1, -1, True),
}
