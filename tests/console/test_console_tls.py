"""With the server's TLS configured, the console speaks HTTPS with the server's
certificate, asks the browser for no client certificate (even under
tls-auth-clients yes: the login authenticates) and marks its cookie Secure."""

from __future__ import annotations

import socket
import ssl
import subprocess
import urllib.parse

import pytest

from console_helpers import ADMIN, ConsoleServer, request
from streamdb.cli.procs import free_port


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    d = tmp_path_factory.mktemp("console-tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-keyout", "console.key", "-out", "console.crt", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   cwd=d, check=True, capture_output=True, timeout=60)
    return d


def test_the_console_speaks_https_with_the_servers_certificate(cert, tmp_path):
    args = ["--tls-port", str(free_port()), "--tls-cert-file", str(cert / "console.crt"),
            "--tls-key-file", str(cert / "console.key"), "--tls-ca-cert-file", str(cert / "console.crt"),
            "--tls-auth-clients", "yes"]
    with ConsoleServer(tmp_path, *args) as cs:
        trusting = ssl.create_default_context(cafile=str(cert / "console.crt"))
        status, headers, _ = request(cs.console_port, "POST", "/login",
                                     urllib.parse.urlencode({"user": ADMIN[0], "password": ADMIN[1]}),
                                     tls=trusting)
        assert status == 303
        assert "Secure" in [p.strip() for p in headers["set-cookie"].split(";")]
        cookie = headers["set-cookie"].split(";", 1)[0]
        assert request(cs.console_port, "GET", "/streams", cookie=cookie, tls=trusting)[0] == 200
        # Plain HTTP on that port gets no page.
        with socket.create_connection(("127.0.0.1", cs.console_port), timeout=10) as s:
            s.sendall(b"GET /login HTTP/1.1\r\n\r\n")
            assert not s.recv(100).startswith(b"HTTP/1.1 200")
        assert cs.redis.ping()
