"""Console sessions: a logged-in browser owns a ``Client`` of its own.

A session is made by running ``AUTH user password`` on a new client through
``Core.execute``, so the password check, the ACL log of a failed login and the
user's rules are the server's own.  Every read and action of the session then
runs on that client through ``Core.execute`` as well: ACL checks, MISCONF,
READONLY on a replica, the AOF, replicas, MONITOR and the slow log apply as
they do to any client, and the client shows up in CLIENT LIST (named
``console:<user>``); CLIENT KILL of it ends the session.

A write's reply is returned only once the turn's effects are durable, exactly
as a connection's reply waits for the group commit (network.py): the session
is scheduled for the end of the turn like a connection and waits to be
"flushed".
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
import time

from ...dispatch.registry import resolve
from ...protocol.reply import CommandError
from ..core import BLOCKED, DROP

__all__ = ["Session", "Sessions", "COOKIE_NAME", "LoginRefused"]

COOKIE_NAME = "streamdb_console"
# A session unused this long is ended (its client removed).
IDLE_TIMEOUT = 1800.0
MAX_SESSIONS = 64
# The longest a reply waits for its write to be durable (a failing disk holds it).
DURABLE_WAIT = 10.0


class LoginRefused(Exception):
    """A login the console refuses; the message is what the login page shows."""


class _TurnWaiter:
    """Stands in for a connection at the end of the loop turn (network.Server):
    ``flush`` is called once the turn's writes are durable, or later, after a
    failed write's retry, when this client's own writes were among them."""

    __slots__ = ("client", "done")

    def __init__(self, client, loop) -> None:
        self.client = client
        self.done = loop.create_future()

    def flush(self) -> None:
        if not self.done.done():
            self.done.set_result(None)


class Session:
    """One logged-in browser: its cookie token, its CSRF token and its client."""

    def __init__(self, core, server, client, user: str) -> None:
        self.core = core
        self.server = server
        self.client = client
        self.user = user
        self.token = secrets.token_urlsafe(32)
        self.csrf = secrets.token_urlsafe(32)
        self.last_used = time.monotonic()
        self.ended = False
        # The outcome of the last action, (message, is_error), shown once by the next page.
        self.flash = ("", False)

    async def run(self, *argv: bytes | str | int):
        """The reply of one command run as this session's client (a CommandError
        is returned, not raised).  Waits, bounded, for a write to be durable."""
        args = [a if isinstance(a, bytes) else str(a).encode() for a in argv]
        if self.ended:
            return CommandError("ERR the console session has ended")
        client = self.client
        mark = client.aof_woff
        reply = self.core.execute(client, args)
        if reply is BLOCKED or reply is DROP:
            # The console never sends a blocking or closing command.
            return CommandError("ERR the command did not answer at once")
        if client.aof_woff == mark:
            # Nothing of it went to the AOF (a read; or no AOF): there is nothing to
            # wait for, as a connection's reply to a read goes out even while writes
            # wait for the disk.  (Waiting a loop turn for each was most of the
            # Streams page: four reads a stream.)
            return reply
        waiter = _TurnWaiter(client, asyncio.get_running_loop())
        self.server.schedule_flush(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter.done), DURABLE_WAIT)
        except asyncio.TimeoutError:
            return CommandError("ERR not acknowledged: the write is not durable yet "
                                "(the disk is failing; see the server log)")
        return reply

    def may(self, *argv: bytes | str) -> bool:
        """Whether this session's user's ACL lets it run ``argv`` (to show or hide a
        button; the server checks again when the command runs)."""
        user = self.core.acl.users.get(self.user)
        if user is None or not user.enabled:
            return False
        if user.unrestricted:
            return True
        args = [a if isinstance(a, bytes) else a.encode() for a in argv]
        spec = resolve(args)
        return spec is not None and user.may_run(spec) and user.denied_key(spec, args) is None

    def csrf_ok(self, sent: bytes | None) -> bool:
        return sent is not None and hmac.compare_digest(sent, self.csrf.encode())


class Sessions:
    """The live sessions by cookie token; ended on logout, idleness or CLIENT KILL."""

    def __init__(self, core, server) -> None:
        self.core = core
        self.server = server
        self.by_token: dict[str, Session] = {}

    async def login(self, user: bytes, password: bytes, addr: str) -> Session:
        """A new session for ``user``; LoginRefused when the server's AUTH refuses it.
        A user without a password is refused too: the console is reachable from any
        web page a local browser opens, so it asks for a secret that page cannot know."""
        name = user.decode("utf-8", "surrogateescape")
        acl_user = self.core.acl.users.get(name)
        if acl_user is not None and acl_user.nopass:
            raise LoginRefused(f"user {name} has no password: set one (ACL SETUSER or "
                               "requirepass) to use the console")
        client = self.core.new_client(addr=addr, laddr="console")
        session = Session(self.core, self.server, client, name)
        client.name = f"console:{name}".encode("utf-8", "surrogateescape")
        # CLIENT KILL runs inside a command: the session ends after it, not during it.
        client.close = lambda: asyncio.get_running_loop().call_soon(self.end, session)
        reply = await session.run(b"AUTH", user, password)
        if isinstance(reply, CommandError):
            self.end(session)
            raise LoginRefused("invalid username or password")
        self.expire()
        if len(self.by_token) >= MAX_SESSIONS:
            self.end(min(self.by_token.values(), key=lambda s: s.last_used))
        self.by_token[session.token] = session
        return session

    def find(self, token: str | None) -> Session | None:
        """The live session of a cookie token (None: none, or it has expired)."""
        if not token:
            return None
        session = self.by_token.get(token)
        if session is None:
            return None
        now = time.monotonic()
        if now - session.last_used > IDLE_TIMEOUT:
            self.end(session)
            return None
        session.last_used = now
        return session

    def expire(self) -> None:
        now = time.monotonic()
        for session in [s for s in self.by_token.values() if now - s.last_used > IDLE_TIMEOUT]:
            self.end(session)

    def end(self, session: Session) -> None:
        """Log out: the token stops working and the client is removed."""
        if session.ended:
            return
        session.ended = True
        self.by_token.pop(session.token, None)
        self.core.remove_client(session.client)

    def end_all(self) -> None:
        for session in list(self.by_token.values()):
            self.end(session)
