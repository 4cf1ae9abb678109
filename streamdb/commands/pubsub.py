"""Pub/Sub, as Redis 7 has it: SUBSCRIBE UNSUBSCRIBE PSUBSCRIBE PUNSUBSCRIBE PUBLISH,
the shard forms SSUBSCRIBE SUNSUBSCRIBE SPUBLISH, and PUBSUB's introspection.

The state and the delivery are dispatch/pubsub.py (``core.pubsub``).  Nothing here
is data: no AOF, no snapshot; a message goes down to the replicas, as Redis sends
it, whose subscribers then get it (``Core.propagate_message``).

A (un)subscribe command answers one confirmation per name, each a Push
(``[kind, name, count]``), as several replies in a row: the handler returns them
already encoded for the client's protocol.  ACL channel rules (``&pattern``) are
checked before the handler runs (security/enforce.py).
"""

from __future__ import annotations

import cython

from ..dispatch.context import Ctx
from ..dispatch.pubsub import CHANNELS, PATTERNS, SHARD_CHANNELS, PubSub
from ..dispatch.registry import command, subcommand
from ..protocol import encode_reply
from ..protocol.reply import CommandError, Push, Raw, Status

__all__ = ["NOT_KEY_SPECS"]

# Redis's COMMAND flags of the (un)subscribe commands.
_SUBSCRIBING = "pubsub noscript loading stale"
_PUBLISHING = "pubsub loading stale fast"

# Redis 7 describes a shard channel argument with a key spec flagged not_key (a cluster
# routes it by its slot), which COMMAND INFO shows: command -> (the index where the
# channels begin, the last one relative to it: 0 itself, -1 the last argument). They
# are no keys: the commands are registered with none, so no ACL key pattern, WATCH,
# keyspace or COMMAND GETKEYS sees them; ACL channel rules govern them.
NOT_KEY_SPECS: dict[str, tuple[int, int]] = {
    "spublish": (1, 0), "ssubscribe": (1, -1), "sunsubscribe": (1, -1)}

# The first word of a confirmation, per kind.
_SUBSCRIBED = {CHANNELS: b"subscribe", PATTERNS: b"psubscribe", SHARD_CHANNELS: b"ssubscribe"}
_UNSUBSCRIBED = {CHANNELS: b"unsubscribe", PATTERNS: b"punsubscribe",
                 SHARD_CHANNELS: b"sunsubscribe"}


def _count(client, kind: int) -> int:
    return 0 if client.pubsub is None else client.pubsub.count(kind)


def _in_a_row(ctx: Ctx, replies: list) -> Raw:
    """Several replies to one command, one after the other on the connection."""
    resp3 = ctx.client.resp == 3
    return Raw(b"".join([encode_reply(r, resp3) for r in replies]))


def _subscribe(ctx: Ctx, kind: int, names: list[bytes]) -> Raw:
    client, pubsub = ctx.client, ctx.core.pubsub
    replies = []
    for name in names:
        pubsub.subscribe(client, kind, name)
        replies.append(Push([_SUBSCRIBED[kind], name, _count(client, kind)]))
    return _in_a_row(ctx, replies)


def _unsubscribe(ctx: Ctx, kind: int, names: list[bytes]) -> Raw:
    """Unsubscribe from ``names`` (all of ``kind`` if none is named: a confirmation
    with a nil name if there were none)."""
    client, pubsub = ctx.client, ctx.core.pubsub
    if not names:
        names = pubsub.names_of(client, kind)
        if not names:
            return _in_a_row(ctx, [Push([_UNSUBSCRIBED[kind], None, _count(client, kind)])])
    replies = []
    for name in names:
        pubsub.unsubscribe(client, kind, name)
        replies.append(Push([_UNSUBSCRIBED[kind], name, _count(client, kind)]))
    return _in_a_row(ctx, replies)


def _register_pair(kind: int, name: str, argument: str, since: str) -> None:
    """Register NAME (e.g. PSUBSCRIBE) for the subscriptions of ``kind`` and its UN-form."""
    unname = name.replace("subscribe", "unsubscribe")

    def subscribe_handler(ctx: Ctx, argv):
        return _subscribe(ctx, kind, argv[1:])

    def unsubscribe_handler(ctx: Ctx, argv):
        return _unsubscribe(ctx, kind, argv[1:])

    # (the docstring's first line is the command's grammar: COMMAND DOCS)
    subscribe_handler.__doc__ = f"{name.upper()} {argument} [{argument} ...]"
    unsubscribe_handler.__doc__ = f"{unname.upper()} [{argument} [{argument} ...]]"
    command(name, -2, _SUBSCRIBING, group="pubsub", since=since)(subscribe_handler)
    command(unname, -1, _SUBSCRIBING, group="pubsub", since=since)(unsubscribe_handler)


_register_pair(CHANNELS, "subscribe", "channel", "2.0.0")
_register_pair(PATTERNS, "psubscribe", "pattern", "2.0.0")
_register_pair(SHARD_CHANNELS, "ssubscribe", "shardchannel", "7.0.0")


@cython.cfunc
def _propagate(ctx: Ctx, name: bytes, argv) -> cython.void:
    """The message to the replicas (Core.propagate_message), when a sink records
    commands: the snapshot's tracker, the only sink of a server with neither AOF nor
    replicas, skips a message, and the batch made for it cost a PUBLISH heard by
    nobody a seventh of its instructions (in-process: 9.1k -> 7.8k, callgrind)."""
    core = ctx.core
    if core.effects_wanted():
        core.propagate_message(ctx.db.index, [name, argv[1], argv[2]])


@command("publish", 3, _PUBLISHING, group="pubsub", since="2.0.0")
def publish(ctx: Ctx, argv):
    """PUBLISH channel message"""
    pubsub: PubSub = ctx.core.pubsub
    receivers = pubsub.publish(argv[1], argv[2], False)
    _propagate(ctx, b"PUBLISH", argv)
    return receivers


@command("spublish", 3, _PUBLISHING, group="pubsub", since="7.0.0")
def spublish(ctx: Ctx, argv):
    """SPUBLISH shardchannel message"""
    pubsub: PubSub = ctx.core.pubsub
    receivers = pubsub.publish(argv[1], argv[2], True)
    _propagate(ctx, b"SPUBLISH", argv)
    return receivers


# -- PUBSUB ---------------------------------------------------------------------------


@command("pubsub", -2, "", group="pubsub", since="2.8.0")
def pubsub(ctx: Ctx, argv):
    """PUBSUB <subcommand>"""


def _at_most_one_pattern(argv: list[bytes]) -> bytes | None:
    if len(argv) > 3:
        raise CommandError("ERR unknown subcommand or wrong number of arguments for "
                           f"'{argv[1].decode('utf-8', 'surrogateescape')}'. Try PUBSUB HELP.")
    return argv[2] if len(argv) == 3 else None


def _listeners(ctx: Ctx, kind: int, names: list[bytes]) -> list:
    pubsub = ctx.core.pubsub
    out: list = []
    for name in names:
        out += [name, pubsub.listeners(kind, name)]
    return out


@subcommand("pubsub", "channels", -2, "pubsub loading stale", since="2.8.0")
def pubsub_channels(ctx: Ctx, argv):
    """PUBSUB CHANNELS [pattern]"""
    return ctx.core.pubsub.active(CHANNELS, _at_most_one_pattern(argv))


@subcommand("pubsub", "numsub", -2, "pubsub loading stale", since="2.8.0")
def pubsub_numsub(ctx: Ctx, argv):
    """PUBSUB NUMSUB [channel [channel ...]]"""
    return _listeners(ctx, CHANNELS, argv[2:])


@subcommand("pubsub", "numpat", 2, "pubsub loading stale", since="2.8.0")
def pubsub_numpat(ctx: Ctx, argv):
    """PUBSUB NUMPAT"""
    return ctx.core.pubsub.count(PATTERNS)


@subcommand("pubsub", "shardnumsub", -2, "pubsub loading stale", since="7.0.0")
def pubsub_shardnumsub(ctx: Ctx, argv):
    """PUBSUB SHARDNUMSUB [shardchannel [shardchannel ...]]"""
    return _listeners(ctx, SHARD_CHANNELS, argv[2:])


@subcommand("pubsub", "shardchannels", -2, "pubsub loading stale", since="7.0.0")
def pubsub_shardchannels(ctx: Ctx, argv):
    """PUBSUB SHARDCHANNELS [pattern]"""
    return ctx.core.pubsub.active(SHARD_CHANNELS, _at_most_one_pattern(argv))


_PUBSUB_HELP = (
    "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CHANNELS [<pattern>]",
    "    Return the currently active channels matching a <pattern> (default: '*').",
    "NUMPAT",
    "    Return number of subscriptions to patterns.",
    "NUMSUB [<channel> ...]",
    "    Return the number of subscribers for the specified channels, excluding",
    "    pattern subscriptions(default: no channels).",
    "SHARDCHANNELS [<pattern>]",
    "    Return the currently active shard level channels matching a <pattern> (default: '*').",
    "SHARDNUMSUB [<shardchannel> ...]",
    "    Return the number of subscribers for the specified shard level channel(s)",
    "HELP",
    "    Prints this help.",
)


@subcommand("pubsub", "help", 2, "loading stale", since="6.2.0")
def pubsub_help(ctx: Ctx, argv):
    """PUBSUB HELP"""
    return [Status(line) for line in _PUBSUB_HELP]
