"""TLS: the tls-port listener (redis-py and redis-cli clients), client certificates,
and a replica that follows its primary over TLS.  Real processes on loopback; the
CA and certificates are made at test time with the openssl command-line tool.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from helpers import ROOT, ServerProcess, free_port

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def _issue(d: Path, name: str, cn: str, ext: str) -> None:
    """A key and a certificate for ``name`` signed by the test CA in ``d``."""
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
             "-subj", f"/CN={cn}", "-out", f"{name}.csr", cwd=d)
    (d / f"{name}.ext").write_text(ext)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "2", "-sha256", "-extfile", f"{name}.ext",
             "-out", f"{name}.crt", cwd=d)


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("tls")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
             "-subj", "/CN=StreamDB test CA", "-days", "2", "-out", "ca.crt", cwd=d)
    _issue(d, "server", "localhost",
           "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n")
    _issue(d, "client", "streamdb test client", "extendedKeyUsage=clientAuth\n")
    return d


def _tls_args(certs: Path, tls_port: int, *extra: str) -> list[str]:
    return ["--appendonly", "no", "--save", "", "--tls-port", str(tls_port),
            "--tls-cert-file", str(certs / "server.crt"), "--tls-key-file", str(certs / "server.key"),
            "--tls-ca-cert-file", str(certs / "ca.crt"), *extra]


def _tls_client(certs: Path, port: int, with_cert: bool = True) -> redis.Redis:
    kwargs = dict(ssl_certfile=str(certs / "client.crt"), ssl_keyfile=str(certs / "client.key")) \
        if with_cert else {}
    return redis.Redis(port=port, ssl=True, ssl_ca_certs=str(certs / "ca.crt"),
                       socket_timeout=5, **kwargs)


def test_redis_py_and_redis_cli_over_tls(certs, tmp_path):
    tls_port = free_port()
    with ServerProcess(tmp_path, *_tls_args(certs, tls_port)) as srv:
        r = _tls_client(certs, tls_port)
        r.xadd("tls:s", {"f": "v"}, id="1-1")
        assert r.xrange("tls:s") == [(b"1-1", {b"f": b"v"})]
        # The same data on the plain port: one keyspace, two listeners.
        assert redis.Redis(port=srv.port).xlen("tls:s") == 1
        me = r.client_info()
        assert me["laddr"].endswith(f":{tls_port}")
        cli = shutil.which("redis-cli")
        if cli is None:
            return
        out = subprocess.run(
            [cli, "--tls", "--cacert", str(certs / "ca.crt"), "--cert", str(certs / "client.crt"),
             "--key", str(certs / "client.key"), "-p", str(tls_port), "XLEN", "tls:s"],
            capture_output=True, text=True, timeout=10)
        assert out.stdout.strip() == "1", out.stderr


def test_big_values_in_and_out_over_tls(certs, tmp_path):
    """A reply's big bulks leave as pieces of their own (writelines): the TLS transport
    takes them as the plain one does."""
    tls_port = free_port()
    big = bytes(range(256)) * 8193                          # 2 MB and a bit
    with ServerProcess(tmp_path, *_tls_args(certs, tls_port)) as srv:
        r = _tls_client(certs, tls_port)
        r.xadd("tls:big", {"f": big, "g": big[::-1]}, id="1-1")
        r.xadd("tls:big", {"f": b"small"}, id="2-1")
        assert r.xrange("tls:big") == [(b"1-1", {b"f": big, b"g": big[::-1]}),
                                       (b"2-1", {b"f": b"small"})]
        assert redis.Redis(port=srv.port).xrange("tls:big", count=1)[0][1][b"g"] == big[::-1]


def test_client_without_certificate_is_refused_when_auth_clients_yes(certs, tmp_path):
    tls_port = free_port()
    with ServerProcess(tmp_path, *_tls_args(certs, tls_port)):
        with pytest.raises(redis.ConnectionError):
            _tls_client(certs, tls_port, with_cert=False).ping()
        assert _tls_client(certs, tls_port).ping() is True
        # A plain-text client on the TLS port gets no RESP reply either.
        with pytest.raises(redis.ConnectionError):
            redis.Redis(port=tls_port, socket_timeout=5).ping()


def test_auth_clients_optional_accepts_a_client_without_certificate(certs, tmp_path):
    tls_port = free_port()
    with ServerProcess(tmp_path, *_tls_args(certs, tls_port, "--tls-auth-clients", "optional")):
        assert _tls_client(certs, tls_port, with_cert=False).ping() is True
        assert _tls_client(certs, tls_port).ping() is True


def test_tls_port_without_certificate_is_a_startup_error(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "streamdb", "--port", str(free_port()), "--dir", str(tmp_path),
         "--appendonly", "no", "--tls-port", str(free_port())],
        cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert out.returncode == 1
    assert "No tls-cert-file or tls-key-file configured" in out.stdout + out.stderr


def test_replica_follows_its_primary_over_tls(certs, tmp_path):
    primary_tls = free_port()
    with ServerProcess(tmp_path / "primary", *_tls_args(certs, primary_tls)) as primary:
        p = redis.Redis(port=primary.port)
        p.xadd("repl:s", {"n": "1"}, id="1-1")
        replica_args = _tls_args(certs, free_port(), "--tls-replication", "yes",
                                 "--replicaof", "127.0.0.1", str(primary_tls))
        with ServerProcess(tmp_path / "replica", *replica_args) as replica:
            rr = redis.Redis(port=replica.port)
            p.xadd("repl:s", {"n": "2"}, id="2-1")
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and rr.xlen("repl:s") != 2:
                time.sleep(0.05)
            assert rr.xrange("repl:s") == p.xrange("repl:s")
            assert rr.info("replication")["master_link_status"] == "up"
            # The primary sees its replica's link arrive on the TLS port.
            links = [c for c in p.client_list() if "S" in c["flags"] or c["cmd"] in ("psync", "replconf")]
            assert links and all(c["laddr"].endswith(f":{primary_tls}") for c in links)
