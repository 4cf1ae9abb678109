"""Trims and deletions under a reference policy: which entries go, and the exact trim
that removes them again.

A stream's consumer groups refer to its entries (each group's PEL, its last-delivered
id).  A trim or a deletion names how it treats those references: KEEPREF (the
default) leaves them dangling, as XDEL does; DELREF removes them from every group's
PEL with the entries; ACKED removes only the entries no group still needs (Redis
8.2+).  XADD and XTRIM trim, XDELEX and XACKDEL delete, retention trims up to
``acked_bound``: the command handlers (commands/streams.py, groups.py, retention.py)
parse the arguments, reply and propagate; what goes is decided here.

An approximate or limited trim's outcome depends on the node layout, which an AOF
replay or a replica need not share: ``apply_trim`` also gives the exact trim that
removes the same entries from any layout, the form the handlers propagate.

Pure: no context, no clock, no protocol errors.  Compiled in Cython's pure mode
(streamdb/compiled.py): XADD with MAXLEN or MINID runs ``apply_trim`` per request.
"""

from __future__ import annotations

import cython

from .ids import MAX_ID, MIN_ID, PAST_MAX_ID
from .stream import Stream

__all__ = ["KEEPREF", "DELREF", "ACKED", "REFERENCE_POLICIES", "TrimArgs", "apply_trim",
           "exact_trim", "acked_bound", "entry_referenced", "delete_with_policy",
           "DEL_MISSING", "DEL_DELETED", "DEL_REFERENCED"]

# The reference policies, as the commands' arguments name them (lower-cased).
KEEPREF, DELREF, ACKED = b"keepref", b"delref", b"acked"
REFERENCE_POLICIES = (KEEPREF, DELREF, ACKED)

# The trimming strategies (TrimArgs.strategy).
MAXLEN, MINID = "maxlen", "minid"


@cython.cclass
class TrimArgs:
    """A trim: ``MAXLEN|MINID [=|~] threshold [LIMIT n] [KEEPREF|DELREF|ACKED]``, as
    XADD and XTRIM take it (commands/streams.py parses it) and as ``apply_trim``
    gives the exact form of one it applied.

    ``limit`` is the work cap in entries, 0 for none (the parser has already
    turned an absent LIMIT of an approximate trim into the server's default).
    """

    # Its fields (C struct fields when compiled) are declared in policies.pxd.

    def __init__(self) -> None:
        self.strategy = None
        self.maxlen = -1
        self.minid = MIN_ID
        self.approx = False
        self.limit = 0
        self.policy = KEEPREF


def exact_trim(s: Stream, policy: bytes) -> TrimArgs:
    """The exact, deterministic form of a trim that removed a leading run of ``s``'s
    entries, taken after it: ``MINID = <first remaining id>`` removes exactly those
    entries, whatever strategy, approximation or limit removed them (an empty
    stream: ``MAXLEN = 0``).  ``policy``: the form's reference policy."""
    return _exact(s.first_id() if s.length else None, policy)


@cython.cfunc
def _exact(minid, policy: bytes) -> TrimArgs:
    """``MINID = minid``, or ``MAXLEN = 0`` when ``minid`` is None, under ``policy``."""
    t: TrimArgs = TrimArgs()
    if minid is None:
        t.strategy = MAXLEN
        t.maxlen = 0
    else:
        t.strategy = MINID
        t.minid = minid
    t.policy = policy
    return t


def apply_trim(s: Stream, t: TrimArgs) -> tuple:
    """Trim ``s`` per ``t``; returns the number of entries removed and, when some
    were, the exact trim that removes them (None otherwise).

    ACKED keeps each entry some group still needs (``entry_referenced``), one by
    one, as Redis's trim does: entries after one still pending may go, so what
    it removes is not a leading run.  Its exact form is the trim of every entry
    not needed below the last one removed, ``MINID = <last + 1> ACKED``: applied
    to the same groups it removes the same entries, whatever the node layout
    (approximation and LIMIT only decide where the trim stopped).  Without groups
    ACKED is KEEPREF.  DELREF removes the removed entries from every group's PEL.
    """
    acked = t.policy == ACKED and bool(s.groups)
    referenced = None
    if acked:
        def referenced(sid):
            return entry_referenced(s, sid)
    removed: list | None = [] if (acked or (t.policy == DELREF and s.groups)) else None
    if t.strategy == MAXLEN:
        n = s.trim(maxlen=t.maxlen, approx=t.approx, limit=t.limit, referenced=referenced,
                   removed=removed)
    else:
        n = s.trim(minid=t.minid, approx=t.approx, limit=t.limit, referenced=referenced,
                   removed=removed)
    if not n:
        return 0, None
    if acked:
        last = max(removed)
        # MAX_ID: nothing lies past it, so every entry not needed went.
        return n, _exact(None if last == MAX_ID else last + 1, ACKED)
    if removed:
        drop_references(s, removed)
    return n, exact_trim(s, DELREF if t.policy == DELREF else KEEPREF)


def acked_bound(s: Stream) -> int:
    """The lowest id that some consumer group may still need (ACKED policy).

    An entry is safe to delete when every group has read past it and none has
    it pending.  Without groups everything is safe.
    """
    bound = PAST_MAX_ID
    for g in (s.groups or {}).values():
        b = g.last_id + 1
        if g.pel:
            b = min(b, g.pel.peekitem(0)[0])
        bound = min(bound, b)
    return bound


def drop_references(s: Stream, ids) -> None:
    """DELREF: remove ``ids`` from every group's PEL."""
    if not s.groups:
        return
    for g in s.groups.values():
        if g.pel:
            for sid in ids:
                g.ack(sid)


def entry_referenced(s: Stream, sid: int) -> bool:
    """ACKED: whether some consumer group still needs entry ``sid``.

    It does when the entry is pending in a group's PEL, or when a group has not
    read that far yet (its last-delivered id is below ``sid``).
    """
    for g in (s.groups or {}).values():
        if g.last_id < sid or sid in g.pel:
            return True
    return False


# What delete_with_policy answers per id (XDELEX's reply codes).
DEL_MISSING, DEL_DELETED, DEL_REFERENCED = -1, 1, 2


def delete_with_policy(s: Stream, ids, policy: bytes, changed: list | None = None) -> list[int]:
    """Delete ``ids`` from ``s`` under KEEPREF/DELREF/ACKED; one code per id.

    DEL_MISSING: no such entry; DEL_DELETED: deleted; DEL_REFERENCED: kept because
    still referenced (ACKED).  KEEPREF leaves PEL references alone (like XDEL);
    DELREF removes the references of each id from every group, also for an id
    that is no longer in the stream but still dangles in a PEL.  ``changed``, if
    given, collects the ids whose deletion or reference removal changed something.
    """
    codes: list[int] = []
    delref = policy == DELREF and bool(s.groups)
    for sid in ids:
        if policy == ACKED and s.get(sid) is not None and entry_referenced(s, sid):
            codes.append(DEL_REFERENCED)
            continue
        deleted = s.delete(sid)
        dropped = False
        if delref:
            for g in s.groups.values():
                if g.ack(sid):
                    dropped = True
        codes.append(DEL_DELETED if deleted else DEL_MISSING)
        if changed is not None and (deleted or dropped):
            changed.append(sid)
    return codes
