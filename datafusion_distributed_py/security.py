"""``Security``: who may talk to a worker — a shared token, TLS, mutual TLS.

A worker runs the plans it is sent, and plans can carry pickled Python functions, so a worker
must only answer its own cluster's coordinator (and the other workers: they pull shuffle data
from each other). The same ``Security`` object configures both ends:

* **token** — a shared secret sent on every RPC and compared in constant time by the worker
  before anything in the request is decoded; a peer without it gets ``UNAUTHENTICATED``.
* **TLS** — ``https://`` worker URLs; workers serve with ``tls_cert``/``tls_key``, clients
  check them against ``tls_ca`` (a private CA, the usual choice for IP-addressed clusters).
* **mutual TLS** — ``mutual=True``: workers also require a client certificate signed by
  ``tls_ca``; coordinators and workers present ``tls_cert``/``tls_key``.

``LocalCluster`` creates a temporary token by default. For deployments, workers and
coordinators read ``DFDPY_TOKEN_FILE`` (or ``DFDPY_TOKEN``) and ``DFDPY_TLS_CA_FILE``,
``DFDPY_TLS_CERT_FILE``, ``DFDPY_TLS_KEY_FILE``, ``DFDPY_MUTUAL_TLS`` (see :meth:`from_env`).

Example:
    >>> sec = Security.temporary()
    >>> sec.token is not None and sec.token not in repr(sec)
    True
    >>> Security.temporary(tls=True).tls
    True
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

#: Environment variables read by :meth:`Security.from_env` (and set by :meth:`Security.to_env`).
ENV_TOKEN = "DFDPY_TOKEN"
ENV_TOKEN_FILE = "DFDPY_TOKEN_FILE"
ENV_TLS_CA_FILE = "DFDPY_TLS_CA_FILE"
ENV_TLS_CERT_FILE = "DFDPY_TLS_CERT_FILE"
ENV_TLS_KEY_FILE = "DFDPY_TLS_KEY_FILE"
ENV_MUTUAL_TLS = "DFDPY_MUTUAL_TLS"
ENV_SERVER_NAME = "DFDPY_TLS_SERVER_NAME"
# PEM text itself, for processes a parent starts (``LocalCluster``): nothing touches disk.
ENV_TLS_CA_PEM = "DFDPY_TLS_CA_PEM"
ENV_TLS_CERT_PEM = "DFDPY_TLS_CERT_PEM"
ENV_TLS_KEY_PEM = "DFDPY_TLS_KEY_PEM"

_ENV_NAMES = (
    ENV_TOKEN, ENV_TOKEN_FILE, ENV_TLS_CA_FILE, ENV_TLS_CERT_FILE, ENV_TLS_KEY_FILE,
    ENV_MUTUAL_TLS, ENV_SERVER_NAME, ENV_TLS_CA_PEM, ENV_TLS_CERT_PEM, ENV_TLS_KEY_PEM,
)  # fmt: skip


class CoreSecurity(TypedDict):
    """What the Rust core takes (``_internal``): plain values, PEM as bytes."""

    token: str | None
    tls: bool
    ca_pem: bytes | None
    cert_pem: bytes | None
    key_pem: bytes | None
    mutual: bool
    server_name: str | None
    max_message_bytes: int | None


@dataclass(frozen=True)
class Security:
    """Token and/or TLS settings for workers and the coordinators that use them.

    Args:
        token: the shared secret (printable ASCII, no spaces); ``None`` for no token.
        tls_ca: PEM text, or a path to a PEM file, of the CA that signed the workers'
            certificates (and, with ``mutual``, the clients'); without it, the system's roots.
        tls_cert, tls_key: this side's certificate and private key (PEM text or paths): a
            worker serves with them; a coordinator presents them for mutual TLS.
        mutual: workers require client certificates signed by ``tls_ca``.
        server_name: the name certificates are checked against, when workers are addressed
            by IP but their certificates name a host.
        max_message_bytes: the largest gRPC message a worker accepts (default 1 GiB).
        tls: serve and dial TLS; on by default when any certificate setting is given.

    Example:
        >>> Security(token="s3cret")
        Security(token=<set>, tls=False)
    """

    token: str | None = field(default=None, repr=False)
    tls_ca: str | None = field(default=None, repr=False)
    tls_cert: str | None = field(default=None, repr=False)
    tls_key: str | None = field(default=None, repr=False)
    mutual: bool = False
    server_name: str | None = None
    max_message_bytes: int | None = None
    tls: bool = False

    def __post_init__(self) -> None:
        if self.token is not None:
            token = self.token.strip()
            # The same rule as the Rust core's: it goes into an HTTP header as is.
            if not token or not all(33 <= ord(c) <= 126 for c in token):
                raise ValueError("Security token must be printable ASCII without spaces")
            object.__setattr__(self, "token", token)
        for name in ("tls_ca", "tls_cert", "tls_key"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _pem(value, name))
        if self.tls_ca or self.tls_cert or self.tls_key or self.mutual:
            object.__setattr__(self, "tls", True)
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("Security needs tls_cert and tls_key together")
        if self.mutual and (self.tls_ca is None or self.tls_cert is None):
            raise ValueError("mutual TLS needs tls_ca, tls_cert and tls_key")
        if self.max_message_bytes is not None and self.max_message_bytes < 1024:
            raise ValueError(f"max_message_bytes too small: {self.max_message_bytes}")

    @classmethod
    def temporary(
        cls, tls: bool = False, mutual: bool = False, hosts: Sequence[str] = ()
    ) -> Security:
        """A fresh random token; with ``tls=True`` also a self-signed CA and a certificate for
        this machine (127.0.0.1, localhost and its host name) and ``hosts`` (more names or IP
        addresses the workers are reached by), made in memory.

        Example:
            >>> a, b = Security.temporary(), Security.temporary()
            >>> a.token != b.token
            True
        """
        token = secrets.token_urlsafe(32)
        if not (tls or mutual):
            return cls(token=token)
        ca_pem, cert_pem, key_pem = _self_signed(hosts)
        return cls(token=token, tls_ca=ca_pem, tls_cert=cert_pem, tls_key=key_pem, mutual=mutual)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Security | None:
        """Settings from ``DFDPY_*`` environment variables, or ``None`` when none is set.

        Example:
            >>> Security.from_env({"DFDPY_TOKEN": "abc"}).token
            'abc'
            >>> Security.from_env({}) is None
            True
        """
        env = os.environ if environ is None else environ
        if not any(env.get(name) for name in _ENV_NAMES):
            return None
        token = env.get(ENV_TOKEN)
        if env.get(ENV_TOKEN_FILE):
            token = Path(env[ENV_TOKEN_FILE]).read_text().strip()

        def pem(inline: str, path: str) -> str | None:
            return env.get(inline) or (Path(env[path]).read_text() if env.get(path) else None)

        return cls(
            token=token or None,
            tls_ca=pem(ENV_TLS_CA_PEM, ENV_TLS_CA_FILE),
            tls_cert=pem(ENV_TLS_CERT_PEM, ENV_TLS_CERT_FILE),
            tls_key=pem(ENV_TLS_KEY_PEM, ENV_TLS_KEY_FILE),
            mutual=env.get(ENV_MUTUAL_TLS, "").lower() in ("1", "true", "yes"),
            server_name=env.get(ENV_SERVER_NAME) or None,
        )

    def to_env(self) -> dict[str, str]:
        """Environment variables that give a child process these settings (PEM inline)."""
        env: dict[str, str] = {}
        if self.token:
            env[ENV_TOKEN] = self.token
        for name, value in (
            (ENV_TLS_CA_PEM, self.tls_ca),
            (ENV_TLS_CERT_PEM, self.tls_cert),
            (ENV_TLS_KEY_PEM, self.tls_key),
        ):
            if value:
                env[name] = value
        if self.mutual:
            env[ENV_MUTUAL_TLS] = "1"
        if self.server_name:
            env[ENV_SERVER_NAME] = self.server_name
        return env

    @property
    def scheme(self) -> str:
        """``https`` with TLS, else ``http``: the scheme of this cluster's worker URLs."""
        return "https" if self.tls else "http"

    def _to_core(self) -> CoreSecurity:
        def raw(text: str | None) -> bytes | None:
            return text.encode() if text is not None else None

        return CoreSecurity(
            token=self.token,
            tls=self.tls,
            ca_pem=raw(self.tls_ca),
            cert_pem=raw(self.tls_cert),
            key_pem=raw(self.tls_key),
            mutual=self.mutual,
            server_name=self.server_name,
            max_message_bytes=self.max_message_bytes,
        )

    def __repr__(self) -> str:
        token = "<set>" if self.token else None
        extra = ", mutual=True" if self.mutual else ""
        return f"Security(token={token}, tls={self.tls}{extra})"


def _pem(value: str, name: str) -> str:
    """PEM text given inline or as a path."""
    if "-----BEGIN" in value:
        return value
    path = Path(value)
    if not path.is_file():
        raise ValueError(f"Security {name}: {value!r} is neither PEM text nor a readable file")
    return path.read_text()


def _self_signed(hosts: Sequence[str] = ()) -> tuple[str, str, str]:
    """A CA and a certificate it signs for this machine and ``hosts``:
    (ca_pem, cert_pem, key_pem)."""
    try:
        import cryptography  # noqa: F401  (the optional `tls` extra)
    except ImportError as e:
        raise ImportError(
            "Security.temporary(tls=True) makes its certificates with the `cryptography` "
            "package: pip install 'datafusion-distributed-py[tls]'"
        ) from e
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=30)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "datafusion-distributed-py CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )  # fmt: skip
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    host = socket.gethostname()
    names: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("::1")),
    ]
    if host and host != "localhost":
        names.append(x509.DNSName(host))
    for other in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(other)))
        except ValueError:  # a name, not an address
            names.append(x509.DNSName(other))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host or "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        # Workers serve with it and present it to each other: both uses.
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return ca.public_bytes(pem).decode(), cert.public_bytes(pem).decode(), key_pem


__all__ = ["Security"]
