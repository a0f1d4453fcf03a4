"""Test PKI: a trusted CA, a localhost server cert, SPIFFE client certs, and an untrusted CA."""

from __future__ import annotations

import datetime as dt
import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ALPHA = "spiffe://example.org/ns/agents/sa/alpha"
BETA = "spiffe://example.org/ns/agents/sa/beta"


@dataclass(frozen=True)
class CertPair:
    """PEM files: certificate (chain of one) and its private key."""

    cert: Path
    key: Path

    def as_tuple(self) -> tuple[str, str]:
        return str(self.cert), str(self.key)


@dataclass
class _Issuer:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey


@dataclass
class Pki:
    """Everything generated into `directory`. `ca` signs server and client certs Envoy trusts."""

    directory: Path
    ca: CertPair
    server: CertPair
    untrusted_ca: CertPair
    _issuers: dict[str, _Issuer] = field(default_factory=dict, repr=False)
    _clients: dict[tuple[object, ...], CertPair] = field(default_factory=dict, repr=False)
    _stems: set[str] = field(default_factory=set, repr=False)

    def client(
        self,
        spiffe_ids: str | Sequence[str] = (),
        *,
        name: str | None = None,
        untrusted: bool = False,
        expired: bool = False,
        dns_names: Sequence[str] = (),
    ) -> CertPair:
        """Client cert with one URI SAN per SPIFFE ID (may be none), signed by the trusted CA
        (or the untrusted one). Cached by arguments, so repeated calls return the same files."""
        ids = (spiffe_ids,) if isinstance(spiffe_ids, str) else tuple(spiffe_ids)
        key = (ids, name, untrusted, expired, tuple(dns_names))
        if key not in self._clients:
            issuer = self._issuers["untrusted" if untrusted else "ca"]
            stem = name or _slug("-".join(i.rsplit("/", 1)[-1] for i in ids) or "client")
            stem += ("-untrusted" if untrusted else "") + ("-expired" if expired else "")
            # Distinct arguments, distinct files (`.../beta` and `//.../beta` share a last part).
            base, n = stem, 2
            while stem in self._stems:
                stem, n = f"{base}-{n}", n + 1
            self._stems.add(stem)
            self._clients[key] = _issue(
                self.directory, stem, issuer, cn=stem, uris=ids, dns=dns_names, client=True, expired=expired
            )
        return self._clients[key]


def make_pki(directory: Path | str) -> Pki:
    """Generate a trusted CA, a server cert for localhost/127.0.0.1, and an untrusted CA."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    ca_pair, ca = _make_ca(d, "ca", "mcp-access test CA")
    bad_pair, bad = _make_ca(d, "untrusted-ca", "untrusted test CA")
    server = _issue(d, "server", ca, cn="localhost", dns=["localhost"], ips=["127.0.0.1"], client=False)
    return Pki(directory=d, ca=ca_pair, server=server, untrusted_ca=bad_pair, _issuers={"ca": ca, "untrusted": bad})


def make_server_pki(directory: Path | str, stem: str, dns: Sequence[str]) -> tuple[CertPair, CertPair]:
    """A CA of its own and a server certificate it signs for `dns` (an upstream's PKI, apart
    from the one Envoy's listeners use): (ca, server)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    ca_pair, ca = _make_ca(d, f"{stem}-ca", f"{stem} CA")
    server = _issue(d, f"{stem}-server", ca, cn=dns[0] if dns else stem, dns=dns, client=False)
    return ca_pair, server


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", s)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _write(d: Path, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> CertPair:
    cert_path, key_path = d / f"{stem}.crt", d / f"{stem}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    key_path.chmod(0o600)
    return CertPair(cert_path, key_path)


def _make_ca(d: Path, stem: str, cn: str) -> tuple[CertPair, _Issuer]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now() - dt.timedelta(hours=1))
        .not_valid_after(_now() + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ski, critical=False)
        .sign(key, hashes.SHA256())
    )
    return _write(d, stem, cert, key), _Issuer(cert, key)


def _issue(
    d: Path,
    stem: str,
    issuer: _Issuer,
    *,
    cn: str,
    uris: Sequence[str] = (),
    dns: Sequence[str] = (),
    ips: Sequence[str] = (),
    client: bool,
    expired: bool = False,
) -> CertPair:
    key = ec.generate_private_key(ec.SECP256R1())
    if expired:
        not_before, not_after = _now() - dt.timedelta(days=10), _now() - dt.timedelta(days=1)
    else:
        not_before, not_after = _now() - dt.timedelta(hours=1), _now() + dt.timedelta(days=30)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
        .issuer_name(issuer.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH]),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer.key.public_key()), critical=False
        )
    )
    sans: list[x509.GeneralName] = [x509.UniformResourceIdentifier(u) for u in uris]
    sans += [x509.DNSName(n) for n in dns]
    sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(issuer.key, hashes.SHA256())
    return _write(d, stem, cert, key)
