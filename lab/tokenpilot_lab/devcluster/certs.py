"""Self-generated PKI for one dev cluster: a CA, the API server's serving certificate and the
service-account signing key pair. ECDSA P-256 throughout, because generating it is instant and
kube-apiserver accepts it for serving and for signing service-account tokens."""

from __future__ import annotations

import datetime as dt
import ipaddress
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = dt.timedelta(days=365)


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    sa_key: Path
    sa_pub: Path


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write(path: Path, data: bytes, private: bool) -> None:
    path.write_bytes(data)
    if private:
        path.chmod(0o600)


def _cert(
    subject: str,
    public_key: ec.EllipticCurvePublicKey,
    issuer: x509.Name | None,
    signer: ec.EllipticCurvePrivateKey,
    *,
    now: dt.datetime,
    is_ca: bool,
    sans: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer or name)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
    )
    if is_ca:
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
    else:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(signer, hashes.SHA256())


def serving_sans(service_ip: str) -> list[x509.GeneralName]:
    names = [
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ]
    ips = ["127.0.0.1", service_ip]
    return [x509.DNSName(n) for n in names] + [
        x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips
    ]


def generate(directory: Path, *, service_ip: str, now: dt.datetime) -> Pki:
    """Write a fresh CA, serving certificate and service-account key pair into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("tokenpilot-dev-cluster-ca", ca_key.public_key(), None, ca_key, now=now, is_ca=True)
    serving_key = ec.generate_private_key(ec.SECP256R1())
    serving = _cert(
        "kube-apiserver",
        serving_key.public_key(),
        ca.subject,
        ca_key,
        now=now,
        is_ca=False,
        sans=serving_sans(service_ip),
    )
    sa_key = ec.generate_private_key(ec.SECP256R1())
    pki = Pki(
        ca_cert=directory / "ca.crt",
        ca_key=directory / "ca.key",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        sa_key=directory / "sa.key",
        sa_pub=directory / "sa.pub",
    )
    _write(pki.ca_cert, ca.public_bytes(serialization.Encoding.PEM), private=False)
    _write(pki.ca_key, _key_pem(ca_key), private=True)
    _write(pki.serving_cert, serving.public_bytes(serialization.Encoding.PEM), private=False)
    _write(pki.serving_key, _key_pem(serving_key), private=True)
    _write(pki.sa_key, _key_pem(sa_key), private=True)
    _write(
        pki.sa_pub,
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
        private=False,
    )
    return pki


def new_token() -> str:
    return secrets.token_hex(24)
