"""Where ACLs meet clients: the per-command check, the ACL LOG entries, logins.

``client.acl_check`` is the client's User when that user is restricted, else
None: the dispatch (server/core.py) tests that one attribute per request, so
the unrestricted default user costs nothing on the XADD path.  Every change to
users (SETUSER, DELUSER, LOAD, requirepass) ends in ``refresh_clients``.
"""

from __future__ import annotations

from .. import log
from ..protocol.reply import CommandError
from ..dispatch.client import client_info_line
from .acl import User

__all__ = ["command_denied", "login", "log_auth_failure", "refresh_clients", "dryrun_denial"]


def _client_info(core, client) -> str:
    return client_info_line(core, client).decode("utf-8", "replace")


def _log(core, client, reason: str, context: str, obj: str, username: str) -> None:
    core.acl.log.add(reason, context, obj, username, _client_info(core, client), core.now_ms(),
                     core.config["acllog-max-len"])


def command_denied(core, client, user: User, spec, argv: list[bytes],
                   context: str = "toplevel") -> CommandError | None:
    """The NOPERM error for running ``spec`` with ``argv`` as ``user`` (logged), or None."""
    client.last_cmd = spec.name      # the log's client-info names the refused command, as Redis's
    if not user.may_run(spec):
        _log(core, client, "command", context, spec.name, user.name)
        return CommandError(f"NOPERM User {user.name} has no permissions to run "
                            f"the '{spec.name}' command")
    key = user.denied_key(spec, argv)
    if key is not None:
        _log(core, client, "key", context, key.decode("utf-8", "surrogateescape"), user.name)
        return CommandError("NOPERM No permissions to access a key")
    channel = user.denied_channel(spec, argv)
    if channel is not None:
        _log(core, client, "channel", context, channel.decode("utf-8", "surrogateescape"),
             user.name)
        return CommandError("NOPERM No permissions to access a channel")
    return None


def dryrun_denial(user: User, spec, argv: list[bytes]) -> str | None:
    """ACL DRYRUN's answer when ``user`` may not run ``argv``; nothing is logged."""
    if not user.may_run(spec):
        return f"User {user.name} has no permissions to run the '{spec.name}' command"
    key = user.denied_key(spec, argv)
    if key is not None:
        return (f"User {user.name} has no permissions to access the "
                f"'{key.decode('utf-8', 'surrogateescape')}' key")
    channel = user.denied_channel(spec, argv)
    if channel is not None:
        return (f"User {user.name} has no permissions to access the "
                f"'{channel.decode('utf-8', 'surrogateescape')}' channel")
    return None


def login(core, client, username: bytes, password: bytes, command: bytes) -> bool:
    """AUTH / HELLO AUTH: switch ``client`` to the user, or log the failure.

    ``command``: argv[0] as the client sent it; the ACL LOG's object, as in Redis."""
    user = core.acl.authenticate(username, password)
    if user is None:
        log_auth_failure(core, client, username, command)
        return False
    client.authenticated = True
    client.user = user.name.encode("utf-8", "surrogateescape")
    client.acl_check = None if user.unrestricted else user
    return True


def log_auth_failure(core, client, username: bytes, command: bytes) -> None:
    _log(core, client, "auth", "toplevel", command.decode("utf-8", "surrogateescape"),
         username.decode("utf-8", "surrogateescape"))


def reset_to_default(core, client) -> None:
    """RESET and new connections: the default user, logged in only if it has no password."""
    user = core.acl.default
    client.user = b"default"
    client.authenticated = user.nopass and user.enabled
    client.acl_check = None if user.unrestricted else user


def refresh_clients(core) -> None:
    """After users changed: re-bind every client; close those whose user is gone."""
    users = core.acl.users
    for client in list(core.clients.values()):
        user = users.get(client.user.decode("utf-8", "surrogateescape"))
        if user is None:
            log.log(log.VERBOSE, f"Closing client id={client.id}: its user "
                                 f"'{client.user.decode('utf-8', 'replace')}' was removed")
            client.acl_check = User("(deleted)")     # refuses everything until it is closed
            if client.close is not None:
                client.close()
            continue
        client.acl_check = None if user.unrestricted else user
        if client.pubsub is not None and _lost_a_subscription(user, client):
            # Redis drops such a client rather than leave it listening where it may not.
            log.log(log.VERBOSE, f"Closing client id={client.id}: its user may no longer "
                                 "use a channel it subscribes to")
            if client.close is not None:
                client.close()


def _lost_a_subscription(user: User, client) -> bool:
    channels, patterns, shard_channels = client.pubsub.kinds
    return not (all(user.may_use_channel(name, False) for name in (*channels, *shard_channels))
                and all(user.may_use_channel(name, True) for name in patterns))
