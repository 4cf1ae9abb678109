"""The web console (``console-port``; docs/CONSOLE.md): HTTP on the server's own
event loop, like the metrics endpoint, so that its commands run between two
loop turns like any client's.

* ``http.py``: the strict request reader (limits on head, body and time);
* ``sessions.py``: login through AUTH, the session cookie and CSRF token, and
  ``Session.run``, the one way a page reads or acts (``Core.execute``);
* ``pages.py``: the HTML of every page and the group actions;
* ``charts.py``: server-drawn SVG charts and the throughput ring.

Security: every page but /login answers a browser without a session with a
redirect to /login; every POST but /login needs the session's CSRF token; the
cookie is HttpOnly, SameSite=Strict and, over TLS, Secure.  With the server's
TLS configured (``tls-port`` and a certificate) the console speaks HTTPS with
that certificate.  A bad request gets its 4xx and the connection is closed;
an error inside a page is logged and answered with 500; the server goes on.
"""

from __future__ import annotations

import asyncio
import ssl

from ... import log, tls
from .charts import GroupLagSampler, ThroughputSampler
from .http import HttpError, MAX_HEAD_BYTES, Request, read_request, response
from .pages import (group_action, group_page, layout, login_page, overview_page, stream_page,
                    streams_page, url_value)
from .sessions import COOKIE_NAME, LoginRefused, Sessions

__all__ = ["start_console", "Console"]

MAX_CONNECTIONS = 64
WRITE_TIMEOUT = 10.0

# The GET pages that take the query string, by path ("/" is the overview, "/group"
# also takes the group lag sampler).
_PAGES = {"/streams": streams_page, "/stream": stream_page}


class Console:
    """Routes one request per connection to its page or action."""

    def __init__(self, core, server, secure: bool) -> None:
        self.core = core
        self.sessions = Sessions(core, server)
        self.sampler = ThroughputSampler(core)
        self.group_lag = GroupLagSampler(core)
        self.secure = secure
        self.open_connections = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.open_connections >= MAX_CONNECTIONS:
            writer.write(response(503, b"too many console connections\n", "text/plain; charset=utf-8"))
            writer.close()
            return
        self.open_connections += 1
        peer = writer.get_extra_info("peername")
        addr = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "console"
        try:
            try:
                request = await read_request(reader)
                if request is None:
                    return
                reply = await self.route(request, addr)
            except HttpError as e:
                log.log(log.VERBOSE, f"Console: refused a request from {addr}: {e.status} {e.reason}")
                reply = response(e.status, f"{e.reason}\n".encode(), "text/plain; charset=utf-8")
            except Exception as e:     # a bug in a page costs that page, never the server
                log.log(log.WARNING, f"Console request failed: {type(e).__name__}: {e}")
                reply = response(500, b"internal error (see the server log)\n", "text/plain; charset=utf-8")
            writer.write(reply)
            await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT)
        except (asyncio.TimeoutError, ConnectionError, ssl.SSLError):
            pass
        finally:
            self.open_connections -= 1
            writer.close()

    def _cookie(self, value: str, max_age: int | None = None) -> tuple[str, str]:
        attrs = f"{COOKIE_NAME}={value}; Path=/; HttpOnly; SameSite=Strict"
        if max_age is not None:
            attrs += f"; Max-Age={max_age}"
        if self.secure:
            attrs += "; Secure"
        return ("Set-Cookie", attrs)

    @staticmethod
    def _redirect(location: str, extra: list[tuple[str, str]] | None = None) -> bytes:
        return response(303, b"", headers=[("Location", location)] + (extra or []))

    async def route(self, request: Request, addr: str) -> bytes:
        path, method = request.path, request.method
        if path == "/login":
            return await self._login(request, addr)
        session = self.sessions.find(request.cookie(COOKIE_NAME))
        if session is None:
            return self._redirect("/login")
        if method == "POST":
            form = request.form()
            # Every action needs the token only the session's own pages carry.
            if not session.csrf_ok(form.get("csrf", [None])[-1]):
                return response(403, layout("Refused", "<p>The form's CSRF token is missing or wrong: "
                                            "reload the page and try again.</p>", session))
            if path == "/logout":
                self.sessions.end(session)
                return self._redirect("/login", [self._cookie("", 0)])
            if path == "/group":
                # Post/redirect/get: the outcome shows on the group page the browser
                # loads next, and reloading that page does not post again.
                session.flash = await group_action(session, request.query, form)
                key, group = request.query.get("key", b""), request.query.get("group", b"")
                return self._redirect(f"/group?key={url_value(key)}&group={url_value(group)}")
            raise HttpError(404, "no such action")
        head_only = method == "HEAD"
        if path == "/":
            return response(200, await overview_page(session, self.sampler), head_only=head_only)
        if path == "/group":
            return response(200, await group_page(session, request.query, self.group_lag), head_only=head_only)
        page = _PAGES.get(path)
        if page is None:
            raise HttpError(404, "no such page")
        return response(200, await page(session, request.query), head_only=head_only)

    async def _login(self, request: Request, addr: str) -> bytes:
        if request.method != "POST":
            return response(200, login_page(), head_only=request.method == "HEAD")
        form = request.form()
        user = form.get("user", [b""])[-1]
        password = form.get("password", [b""])[-1]
        try:
            session = await self.sessions.login(user, password, addr)
        except LoginRefused as e:
            return response(200, login_page(str(e)))
        return self._redirect("/", [self._cookie(session.token)])


async def start_console(core, server) -> list:
    """Listen on ``console-bind``:``console-port``; returns the asyncio servers.
    HTTPS when the server's TLS is configured; browsers send no client
    certificate, so the console asks for none (the login authenticates)."""
    cfg = core.config
    context = None
    if cfg["tls-port"] and cfg["tls-cert-file"]:
        try:
            context = tls.server_context(cfg)
        except tls.TlsConfigError as e:
            raise OSError(f"Failed to configure TLS for the console: {e}") from None
        context.verify_mode = ssl.CERT_NONE
    console = Console(core, server, secure=context is not None)
    servers = []
    for addr in cfg["console-bind"].split():
        srv = await asyncio.start_server(console.handle, addr.lstrip("-"), cfg["console-port"],
                                         limit=MAX_HEAD_BYTES, reuse_address=True, ssl=context)
        servers.append(srv)
    _sample_every_second(asyncio.get_running_loop(), console)
    scheme = "https" if context is not None else "http"
    log.log(log.NOTICE, f"Console listening on {cfg['console-bind']} port {cfg['console-port']} ({scheme})")
    return servers


def _sample_every_second(loop, console: Console) -> None:
    console.sampler.sample()
    console.group_lag.sample()
    console.sessions.expire()
    loop.call_later(1.0, _sample_every_second, loop, console)
