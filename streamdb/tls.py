"""TLS contexts from the tls-* directives (Python's ssl module), for both ends.

* ``server_context(cfg)``: the tls-port listener.  ``tls-auth-clients yes``
  requires a client certificate signed by the configured CA, ``optional``
  checks one when the client sends it, ``no`` does not ask.
* ``replica_context(cfg)``: a replica's link to its primary under
  ``tls-replication yes``.  It presents tls-cert-file/tls-key-file as its client
  certificate and checks the primary's certificate against the same CA, but not
  the host name, as Redis does (replicaof often names an IP address).

Contexts are built once at start-up (the directives are immutable), so a bad
file is a start-up error rather than a failure at the first connection.
"""

from __future__ import annotations

import ssl

__all__ = ["TlsConfigError", "server_context", "replica_context"]

_VERSIONS = {"TLSv1": ssl.TLSVersion.TLSv1, "TLSv1.1": ssl.TLSVersion.TLSv1_1,
             "TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_DEFAULT_PROTOCOLS = "TLSv1.2 TLSv1.3"
_VERIFY_MODES = {"yes": ssl.CERT_REQUIRED, "optional": ssl.CERT_OPTIONAL, "no": ssl.CERT_NONE}


class TlsConfigError(ValueError):
    pass


def _apply_protocols(ctx: ssl.SSLContext, protocols: str) -> None:
    versions = sorted(_VERSIONS[p] for p in (protocols or _DEFAULT_PROTOCOLS).split())
    ctx.minimum_version = versions[0]
    ctx.maximum_version = versions[-1]


def _load_ca(ctx: ssl.SSLContext, cfg) -> bool:
    cafile, capath = cfg["tls-ca-cert-file"] or None, cfg["tls-ca-cert-dir"] or None
    if cafile is None and capath is None:
        return False
    try:
        ctx.load_verify_locations(cafile=cafile, capath=capath)
    except (OSError, ssl.SSLError) as e:
        raise TlsConfigError(f"Failed to configure CA certificate(s) file/directory: {e}") from None
    return True


def _load_cert(ctx: ssl.SSLContext, cfg) -> None:
    cert, key = cfg["tls-cert-file"], cfg["tls-key-file"]
    if not cert or not key:
        raise TlsConfigError("No tls-cert-file or tls-key-file configured")
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as e:
        raise TlsConfigError(f"Failed to load certificate: {cert} / key: {key}: {e}") from None


def server_context(cfg) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _apply_protocols(ctx, cfg["tls-protocols"])
    _load_cert(ctx, cfg)
    mode = _VERIFY_MODES[cfg["tls-auth-clients"]]
    if not _load_ca(ctx, cfg) and mode != ssl.CERT_NONE:
        raise TlsConfigError("Either tls-ca-cert-file or tls-ca-cert-dir must be specified "
                             "when tls-auth-clients is yes or optional")
    ctx.verify_mode = mode
    return ctx


def replica_context(cfg) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _apply_protocols(ctx, cfg["tls-protocols"])
    ctx.check_hostname = False
    if cfg["tls-cert-file"] and cfg["tls-key-file"]:
        _load_cert(ctx, cfg)
    if not _load_ca(ctx, cfg):
        raise TlsConfigError("Either tls-ca-cert-file or tls-ca-cert-dir must be specified "
                             "when tls-replication is enabled")
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx
