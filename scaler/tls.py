"""Server-side TLS / mTLS for the gRPC service, matching KEDA's client side.

KEDA's TriggerAuthentication supplies ``caCert`` (the CA that signed *our*
server certificate), and for mTLS ``tlsClientCert``/``tlsClientKey`` (the
certificate KEDA presents). So the server needs its certificate and key,
and, for mTLS, the CA that signed KEDA's client certificate
(``--client-ca``): with it, a client without a certificate from that CA is
refused during the handshake.

The files are re-read when they change on disk (cert-manager rotates them
in place): gRPC asks :func:`server_credentials`'s fetcher before each new
handshake, and the fetcher answers from memory unless a file's mtime moved.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import grpc

__all__ = ["ServerTls", "TlsError", "load_server_tls", "server_credentials"]

log = logging.getLogger(__name__)


class TlsError(ValueError):
    """A TLS file is missing or does not hold what it should."""


@dataclass(frozen=True)
class ServerTls:
    """PEM material for the server; ``client_ca`` set means mTLS required."""

    cert_chain: bytes
    private_key: bytes
    client_ca: bytes | None = None
    cert_path: Path | None = None
    key_path: Path | None = None
    client_ca_path: Path | None = None

    @property
    def mutual(self) -> bool:
        return self.client_ca is not None


def _read_pem(path: Path, what: str, marker: bytes) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TlsError(f"{what} {path}: {exc.strerror or exc}") from None
    if marker not in data:
        raise TlsError(f"{what} {path}: no PEM block '{marker.decode()}' found")
    return data


def load_server_tls(
    cert: str | Path, key: str | Path, client_ca: str | Path | None = None
) -> ServerTls:
    """Read and sanity-check the PEM files (``--tls-cert``, ``--tls-key``,
    ``--client-ca``); raises :class:`TlsError` naming the file at fault."""
    cert_path, key_path = Path(cert), Path(key)
    ca_path = Path(client_ca) if client_ca is not None else None
    chain = _read_pem(cert_path, "--tls-cert", b"-----BEGIN CERTIFICATE-----")
    private = _read_pem(key_path, "--tls-key", b"PRIVATE KEY-----")
    ca = _read_pem(ca_path, "--client-ca", b"-----BEGIN CERTIFICATE-----") if ca_path else None
    return ServerTls(chain, private, ca, cert_path, key_path, ca_path)


def _mtimes(tls: ServerTls) -> tuple[float, ...]:
    out = []
    for p in (tls.cert_path, tls.key_path, tls.client_ca_path):
        try:
            out.append(os.stat(p).st_mtime if p is not None else 0.0)
        except OSError:
            out.append(-1.0)
    return tuple(out)


def _configuration(tls: ServerTls) -> grpc.ServerCertificateConfiguration:
    return grpc.ssl_server_certificate_configuration(
        [(tls.private_key, tls.cert_chain)], root_certificates=tls.client_ca
    )


def server_credentials(tls: ServerTls) -> grpc.ServerCredentials:
    """Credentials that reload the files when they change on disk."""
    if tls.cert_path is None:
        return grpc.ssl_server_credentials(
            [(tls.private_key, tls.cert_chain)],
            root_certificates=tls.client_ca,
            require_client_auth=tls.mutual,
        )
    state = {"mtimes": _mtimes(tls)}

    def fetch() -> grpc.ServerCertificateConfiguration | None:
        now = _mtimes(tls)
        if now == state["mtimes"]:
            return None  # unchanged: keep the current configuration
        try:
            fresh = load_server_tls(tls.cert_path, tls.key_path, tls.client_ca_path)  # type: ignore[arg-type]
        except TlsError as exc:
            log.warning("TLS files changed but cannot be read (keeping the old ones): %s", exc)
            return None
        state["mtimes"] = now
        log.info("TLS files changed on disk: reloaded")
        return _configuration(fresh)

    return grpc.dynamic_ssl_server_credentials(
        _configuration(tls), fetch, require_client_authentication=tls.mutual
    )
