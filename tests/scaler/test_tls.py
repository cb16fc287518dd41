"""TLS and mTLS as KEDA uses them (caCert, tlsClientCert, tlsClientKey); certs made at test time."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from scaler.server import RunningServer, start_server
from scaler.telemetry import ScalerTelemetry
from scaler.tls import TlsError, load_server_tls
from tests.scaler.fake_state import FakeState
from tests.scaler.keda_client import KedaClient, TlsConfig, ref

SO = ref("llama", "llm", {"scalerAddress": "prescaler:9090", "prometheusAddress": "http://p:9090"})


@dataclass(frozen=True)
class Pem:
    cert: bytes
    key: bytes


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None,
    *,
    ca: bool = False,
    server: bool = False,
    client: bool = False,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer[0].subject if issuer else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        ).add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    if client:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    signer = issuer[1] if issuer else key
    return builder.sign(signer, hashes.SHA256())


def _pem(cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> Pem:
    return Pem(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


@dataclass(frozen=True)
class Pki:
    ca: Pem
    server: Pem
    client: Pem
    rogue_ca: Pem
    rogue_client: Pem
    other_server: Pem  # a server cert from the rogue CA (for reload)


def make_pki() -> Pki:
    ca_key, rogue_key = _key(), _key()
    ca = _cert("prescaler test CA", ca_key, None, ca=True)
    rogue = _cert("rogue CA", rogue_key, None, ca=True)
    server_key, client_key, rogue_client_key, other_key = _key(), _key(), _key(), _key()
    return Pki(
        ca=_pem(ca, ca_key),
        server=_pem(_cert("prescaler", server_key, (ca, ca_key), server=True), server_key),
        client=_pem(_cert("keda-operator", client_key, (ca, ca_key), client=True), client_key),
        rogue_ca=_pem(rogue, rogue_key),
        rogue_client=_pem(
            _cert("keda-operator", rogue_client_key, (rogue, rogue_key), client=True),
            rogue_client_key,
        ),
        other_server=_pem(
            _cert("prescaler", other_key, (rogue, rogue_key), server=True), other_key
        ),
    )


@pytest.fixture(scope="module")
def pki() -> Pki:
    return make_pki()


def _write(tmp: Path, pki: Pki, *, mutual: bool) -> tuple[Path, Path, Path | None]:
    cert, key, ca = tmp / "tls.crt", tmp / "tls.key", tmp / "ca.crt"
    cert.write_bytes(pki.server.cert)
    key.write_bytes(pki.server.key)
    ca.write_bytes(pki.ca.cert)
    return cert, key, (ca if mutual else None)


@pytest.fixture
async def mtls_port(tmp_path: Path, pki: Pki) -> AsyncIterator[int]:
    cert, key, ca = _write(tmp_path, pki, mutual=True)
    running = await start_server(
        FakeState(),
        ScalerTelemetry(),
        host="127.0.0.1",
        port=0,
        tls=load_server_tls(cert, key, ca),
    )
    try:
        yield running.port
    finally:
        await running.close()


async def _server_auth_only(tmp_path: Path, pki: Pki) -> RunningServer:
    cert, key, _ = _write(tmp_path, pki, mutual=False)
    return await start_server(
        FakeState(),
        ScalerTelemetry(),
        host="127.0.0.1",
        port=0,
        tls=load_server_tls(cert, key),
    )


async def _poll(port: int, tls: TlsConfig | None) -> int:
    async with KedaClient(f"127.0.0.1:{port}", tls=tls) as client:
        result = await client.poll(SO, timeout=5)
        return result.target_milli


async def _refused(port: int, tls: TlsConfig | None) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await _poll(port, tls)
    return err.value.code()


async def test_mtls_accepts_the_right_client(mtls_port: int, pki: Pki) -> None:
    tls = TlsConfig(ca_cert=pki.ca.cert, client_cert=pki.client.cert, client_key=pki.client.key)
    assert await _poll(mtls_port, tls) == 1000


async def test_mtls_refuses_a_client_without_a_certificate(mtls_port: int, pki: Pki) -> None:
    assert await _refused(mtls_port, TlsConfig(ca_cert=pki.ca.cert)) == grpc.StatusCode.UNAVAILABLE


async def test_mtls_refuses_a_rogue_client_certificate(mtls_port: int, pki: Pki) -> None:
    rogue = TlsConfig(
        ca_cert=pki.ca.cert, client_cert=pki.rogue_client.cert, client_key=pki.rogue_client.key
    )
    assert await _refused(mtls_port, rogue) == grpc.StatusCode.UNAVAILABLE


async def test_mtls_refuses_plaintext(mtls_port: int) -> None:
    assert await _refused(mtls_port, None) == grpc.StatusCode.UNAVAILABLE


async def test_tls_server_auth_only(tmp_path: Path, pki: Pki) -> None:
    """Without --client-ca any client that trusts our CA connects; others do not."""
    running = await _server_auth_only(tmp_path, pki)
    try:
        assert await _poll(running.port, TlsConfig(ca_cert=pki.ca.cert)) == 1000
        assert (
            await _refused(running.port, TlsConfig(ca_cert=pki.rogue_ca.cert))
            == grpc.StatusCode.UNAVAILABLE
        )
    finally:
        await running.close()


async def test_rotated_certificate_is_picked_up(tmp_path: Path, pki: Pki) -> None:
    """cert-manager rewrites the files in place: new handshakes use the new cert."""
    cert, key, _ = _write(tmp_path, pki, mutual=False)
    running = await _server_auth_only(tmp_path, pki)
    try:
        assert await _poll(running.port, TlsConfig(ca_cert=pki.ca.cert)) == 1000
        cert.write_bytes(pki.other_server.cert)
        key.write_bytes(pki.other_server.key)
        later = os.stat(cert).st_mtime + 5
        os.utime(cert, (later, later))
        os.utime(key, (later, later))
        assert await _poll(running.port, TlsConfig(ca_cert=pki.rogue_ca.cert)) == 1000
    finally:
        await running.close()


def test_load_server_tls_errors(tmp_path: Path, pki: Pki) -> None:
    cert, key, _ = _write(tmp_path, pki, mutual=False)
    with pytest.raises(TlsError, match="--tls-cert"):
        load_server_tls(tmp_path / "missing.crt", key)
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate")
    with pytest.raises(TlsError, match="--tls-key"):
        load_server_tls(cert, junk)
    with pytest.raises(TlsError, match="--client-ca"):
        load_server_tls(cert, key, junk)
    assert load_server_tls(cert, key, cert).mutual
