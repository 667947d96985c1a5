"""TLS mode: the same frames inside ``ssl``, with a self-signed certificate made here."""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import subprocess
from pathlib import Path

import pytest

from ckpt.migration import ClientTLS, MigrationError, PageRuns, ServerTLS, pack_pages

from .conftest import open_pair


def _cert_with_cryptography(cert: Path, key: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    private = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ckpt test")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(private.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(private, hashes.SHA256())
    )
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def _cert_with_openssl(cert: Path, key: Path) -> None:
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "1", "-subj", "/CN=ckpt test", "-addext",
         "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip


@pytest.fixture
def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    try:
        _cert_with_cryptography(cert, key)
    except ImportError:
        if shutil.which("openssl") is None:
            pytest.skip("needs the cryptography package or the openssl command to make a cert")
        _cert_with_openssl(cert, key)
    return cert, key


def test_tls_round_trip(self_signed, watchdog) -> None:
    cert, key = self_signed
    client, server = open_pair(
        server_options={"tls": ServerTLS(cert, key)}, client_options={"tls": ClientTLS(cert)}
    )
    try:
        assert client._wire.sock.version() in ("TLSv1.2", "TLSv1.3")
        pages = [(i, bytes([i % 256]) * 4096) for i in range(300)]
        msg = pack_pages(1, pages)
        client.send(msg)
        got = server.recv()
        assert isinstance(got, PageRuns) and got == msg
        server.send(msg)
        assert client.recv() == msg
    finally:
        client.close()
        server.close()


def test_tls_client_refuses_a_server_its_ca_did_not_sign(self_signed, tmp_path, watchdog):
    cert, key = self_signed
    other = tmp_path / "other"
    other.mkdir()
    try:
        _cert_with_cryptography(other / "cert.pem", other / "key.pem")
    except ImportError:
        _cert_with_openssl(other / "cert.pem", other / "key.pem")
    with pytest.raises(MigrationError, match="TLS handshake failed"):
        open_pair(
            server_options={"tls": ServerTLS(cert, key), "handshake_timeout": 5.0},
            client_options={"tls": ClientTLS(other / "cert.pem")},
        )


def test_missing_tls_files_are_one_line_errors(tmp_path) -> None:
    with pytest.raises(MigrationError, match="cannot load the TLS"):
        ServerTLS(tmp_path / "nope.pem", tmp_path / "nope.key").context()
    with pytest.raises(MigrationError, match="cannot load the TLS CA"):
        ClientTLS(tmp_path / "nope.pem").context()
