"""Protected mode: with no password on the default user, only loopback clients get in.

Redis's rule (clientAcceptHandlerCommon): when protected-mode is yes and the
default user is ``nopass``, a connection that is not from the loopback
interface (or a Unix socket) gets the DENIED error below and is closed.
"""

from __future__ import annotations

import ipaddress

__all__ = ["DENIED", "refuses"]

DENIED = (
    b"-DENIED Redis is running in protected mode because protected mode is enabled and no "
    b"password is set for the default user. In this mode connections are only accepted from "
    b"the loopback interface. If you want to connect from external computers to Redis you may "
    b"adopt one of the following solutions: 1) Just disable protected mode sending the command "
    b"'CONFIG SET protected-mode no' from the loopback interface by connecting to Redis from "
    b"the same host the server is running, however MAKE SURE Redis is not publicly accessible "
    b"from internet if you do so. Use CONFIG REWRITE to make this change permanent. 2) "
    b"Alternatively you can just disable the protected mode by editing the Redis configuration "
    b"file, and setting the protected mode option to 'no', and then restarting the server. 3) "
    b"If you started the server manually just for testing, restart it with the "
    b"'--protected-mode no' option. 4) Setup a an authentication password for the default "
    b"user. NOTE: You only need to do one of the above things in order for the server to start "
    b"accepting connections from the outside.\r\n")


def is_loopback(peer_host: str | None) -> bool:
    """True for 127.0.0.0/8, ::1, IPv4-mapped loopback, and non-IP peers (Unix sockets)."""
    if not peer_host:
        return True
    try:
        ip = ipaddress.ip_address(peer_host.split("%", 1)[0])
    except ValueError:
        return True          # a Unix socket path: local by definition
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def refuses(protected_mode: bool, default_user_nopass: bool, peer_host: str | None) -> bool:
    """Whether a new connection from ``peer_host`` is refused with DENIED."""
    return protected_mode and default_user_nopass and not is_loopback(peer_host)
