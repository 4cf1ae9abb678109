"""Pub/Sub's state: who listens to which channel, pattern and shard channel.

One ``PubSub`` per server (``core.pubsub``) maps each channel, pattern and shard
channel to its subscribers in the order they subscribed; each subscribed client
holds the same names (``client.pubsub``, a ``Subscriptions``; None while it has
none, which is what the dispatch tests for RESP2's subscribed mode).  The two
sides change together, here only.  The commands are commands/pubsub.py.

A message goes to each subscriber through ``client.outbox`` (the path a blocked
client's reply takes: queued on its connection, written at the end of the turn),
as a Push: a RESP3 push, an array under RESP2.  Channel subscribers get it
first, then pattern subscribers, each pattern in the order it was first
subscribed; a client subscribed both ways gets it once per way, as in Redis.
"""

from __future__ import annotations

import cython

from ..config import KEYSPACE_EVENT_BITS
from ..glob import glob_match, glob_matcher, literal_prefix
from ..protocol import encode_commands
from ..protocol.reply import CommandError
from .client import Client, Outbox

__all__ = ["PubSub", "Subscriptions", "CHANNELS", "PATTERNS", "SHARD_CHANNELS",
           "subscribed_mode_refusal", "KEYSPACE_EVENTS", "EVENT_CLASS", "event_enabled",
           "publishing_flags"]

# The three kinds of subscription: their index in Subscriptions.kinds and PubSub.kinds.
CHANNELS, PATTERNS, SHARD_CHANNELS = 0, 1, 2

# What a client subscribed under RESP2 may still run (Redis's processCommand).
_SUBSCRIBED_MODE_COMMANDS = frozenset((
    "subscribe", "ssubscribe", "psubscribe", "unsubscribe", "sunsubscribe", "punsubscribe",
    "ping", "quit", "reset"))


# Every keyspace event StreamDB publishes, by the class letter that enables it: the
# names and classes of Redis's notifyKeyspaceEvent calls (docs/COMPATIBILITY.md lists
# which commands publish which, and the choices for commands Redis does not have).
KEYSPACE_EVENTS = {
    "g": (b"del", b"expire", b"persist", b"rename_from", b"rename_to", b"copy_to", b"restore"),
    "$": (b"set", b"incrby"),
    "t": (b"xadd", b"xtrim", b"xdel", b"xsetid", b"xcfgset", b"xgroup-create",
          b"xgroup-setid", b"xgroup-destroy", b"xgroup-createconsumer",
          b"xgroup-delconsumer"),
    "x": (b"expired",),
    "n": (b"new",),
    "m": (b"keymiss",),
}
# event name -> its class's bit in the notify-keyspace-events flags.
EVENT_CLASS = {event: KEYSPACE_EVENT_BITS[letter]
               for letter, events in KEYSPACE_EVENTS.items() for event in events}
_KEYSPACE = KEYSPACE_EVENT_BITS["K"]
_KEYEVENT = KEYSPACE_EVENT_BITS["E"]


def publishing_flags(flags: int) -> int:
    """The notify-keyspace-events flags as the server keeps them: 0 when neither K nor
    E is set (nothing would be published, so handlers need note nothing)."""
    return flags if flags & (_KEYSPACE | _KEYEVENT) else 0


def event_enabled(flags: int, event: bytes) -> bool:
    """Whether ``flags`` publish ``event`` (its class is on)."""
    return bool(flags & EVENT_CLASS[event])


def subscribed_mode_refusal(client, spec) -> CommandError | None:
    """The error for running ``spec`` while ``client`` is in RESP2's subscribed mode
    (it has a subscription and speaks RESP2: its connection only carries messages
    and (un)subscriptions then), or None when the command may run."""
    if client.pubsub is None or client.resp != 2 or spec.name.split("|", 1)[0] in \
            _SUBSCRIBED_MODE_COMMANDS:
        return None
    return CommandError(f"ERR Can't execute '{spec.name}': only (P|S)SUBSCRIBE / "
                        "(P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context")


class Subscriptions:
    """One client's channels, patterns and shard channels (each an insertion-ordered dict)."""

    __slots__ = ("kinds",)

    def __init__(self) -> None:
        self.kinds: tuple[dict, dict, dict] = ({}, {}, {})

    def count(self, kind: int) -> int:
        """The count a (un)subscribe confirmation reports, as Redis's: channels and
        patterns together for those kinds, shard channels on their own."""
        if kind == SHARD_CHANNELS:
            return len(self.kinds[SHARD_CHANNELS])
        return len(self.kinds[CHANNELS]) + len(self.kinds[PATTERNS])

    def total(self) -> int:
        return sum(len(names) for names in self.kinds)


# Compiled, a cclass: ``kinds`` is a C field (pubsub.pxd), read by every PUBLISH.
@cython.cclass
class PubSub:
    """The server's subscriptions: name -> {client: None} per kind; and each
    subscribed pattern's test, which every PUBLISH tries: the prefix of a ``prefix*``
    pattern (literal_prefix), else its matcher (glob_matcher)."""

    __slots__ = ("kinds", "matchers")

    def __init__(self) -> None:
        self.kinds: tuple[dict, dict, dict] = ({}, {}, {})
        self.matchers: dict = {}

    def subscribe(self, client, kind: int, name: bytes) -> None:
        """Subscribe ``client`` to ``name`` (nothing changes if it already is)."""
        subs = client.pubsub
        if subs is None:
            subs = client.pubsub = Subscriptions()
        if name in subs.kinds[kind]:
            return
        subs.kinds[kind][name] = None
        listeners = self.kinds[kind].get(name)
        if listeners is None:
            listeners = self.kinds[kind][name] = {}
            if kind == PATTERNS:
                self.matchers[name] = literal_prefix(name) or glob_matcher(name)
        listeners[client] = None

    def unsubscribe(self, client, kind: int, name: bytes) -> None:
        """Drop ``client``'s subscription to ``name`` if it has one; a client left with
        none leaves subscribed mode."""
        subs = client.pubsub
        if subs is None or name not in subs.kinds[kind]:
            return
        del subs.kinds[kind][name]
        listeners = self.kinds[kind][name]
        del listeners[client]
        if not listeners:
            del self.kinds[kind][name]
            if kind == PATTERNS:
                del self.matchers[name]
        if not subs.total():
            client.pubsub = None

    def names_of(self, client, kind: int) -> list[bytes]:
        """``client``'s subscriptions of ``kind``, in the order it made them."""
        return [] if client.pubsub is None else list(client.pubsub.kinds[kind])

    def drop_client(self, client) -> None:
        """Every subscription of ``client`` goes, unannounced (RESET, a closed connection)."""
        if client.pubsub is None:
            return
        for kind in (CHANNELS, PATTERNS, SHARD_CHANNELS):
            for name in self.names_of(client, kind):
                self.unsubscribe(client, kind, name)

    @cython.ccall
    def publish(self, channel: bytes, message: bytes,
                shard: cython.bint = False) -> cython.Py_ssize_t:
        """Send ``message`` to the subscribers of ``channel`` (a shard channel's if
        ``shard``: those only, no pattern applies); the number of deliveries."""
        kinds: tuple = self.kinds
        if shard:
            return _send(kinds[SHARD_CHANNELS].get(channel), [b"smessage", channel, message])
        # (_send is called only when someone listens: PUBLISH to a channel nobody
        # hears, in-process, 10.5k -> 9.1k instructions; ECHO is 4.5k; callgrind)
        channels: dict = kinds[CHANNELS]
        listeners = channels.get(channel)
        sent = _send(listeners, [b"message", channel, message]) if listeners else 0
        matchers: dict = self.matchers
        if matchers:
            patterns: dict = kinds[PATTERNS]
            for pattern, test in matchers.items():
                # "news.*" keeps its prefix, compared here (in C, compiled): through
                # its matcher, a methodcaller of startswith, a PUBLISH to one pattern
                # subscriber took ~900 instructions more (tools/bench_request.py
                # --pattern, callgrind).  Other shapes keep a kept matcher (a C
                # callable), not glob_match's loop in Python per PUBLISH.
                if type(test) is bytes:
                    prefix: bytes = test
                    hit = channel.startswith(prefix)
                else:
                    hit = test(channel)
                if hit:
                    sent += _send(patterns[pattern], [b"pmessage", pattern, channel, message])
        return sent

    def publish_keyspace_event(self, flags: int, db: int, event: bytes, key: bytes) -> None:
        """Publish one keyspace event as Redis's notifyKeyspaceEvent: the event name to
        ``__keyspace@<db>__:<key>`` (K), then the key to ``__keyevent@<db>__:<event>``
        (E).  The caller checked ``event_enabled``."""
        if flags & _KEYSPACE:
            self.publish(b"__keyspace@%d__:%s" % (db, key), event)
        if flags & _KEYEVENT:
            self.publish(b"__keyevent@%d__:%s" % (db, event), key)

    def active(self, kind: int, pattern: bytes | None) -> list[bytes]:
        """PUBSUB CHANNELS / SHARDCHANNELS: the names of ``kind`` with a subscriber
        that match ``pattern`` (every one if None)."""
        return [name for name in self.kinds[kind] if pattern is None or glob_match(pattern, name)]

    def listeners(self, kind: int, name: bytes) -> int:
        """How many clients subscribe to ``name`` (PUBSUB NUMSUB / SHARDNUMSUB)."""
        return len(self.kinds[kind].get(name, ()))

    def count(self, kind: int) -> int:
        """How many distinct names of ``kind`` have a subscriber (INFO, PUBSUB NUMPAT)."""
        return len(self.kinds[kind])


@cython.cfunc
def _frame(words: list, resp3: cython.bint) -> bytes:
    """A message as its subscribers get it: an array of bulk strings under RESP2,
    the bytes of a command (encode_commands), and a push (``>``) under RESP3.  Built
    so and delivered as bytes (``Outbox.deliver_encoded``), a PUBLISH to one
    subscriber costs ~2.6k instructions less than as a Raw of the generic encoder's
    Push(words) (tools/bench_request.py, callgrind)."""
    frame: bytes = encode_commands([words])
    return b">" + frame[1:] if resp3 else frame


@cython.cfunc
def _send(listeners: dict | None, message: list) -> cython.Py_ssize_t:
    """Deliver the push of ``message`` (its words) to each of ``listeners``; how many
    they are.  (Nothing is built for a channel nobody listens to.)

    Every listener of one protocol gets the same bytes, so the push is encoded once
    per protocol (``encoded``, by RESP version) and delivered as it is: encoded once
    per listener, the encoding was a fifth of the server's time with 10 subscribers
    (PUBLISH, -P 16; py-spy)."""
    if not listeners:
        return 0
    encoded = [None, None, None, None]
    client: Client
    outbox: Outbox
    resp: cython.int
    for client in listeners:
        outbox = client.outbox
        if outbox is not None:              # (a bare core's clients have no connection)
            resp = client.resp
            frame = encoded[resp]
            if frame is None:
                frame = encoded[resp] = _frame(message, resp == 3)
            outbox.deliver_encoded(frame)
    return len(listeners)
