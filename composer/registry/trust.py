"""Registry trust: which CAs verify a registry's TLS, and where plain http is allowed.

The engine's own rules (certs.d folders, its insecure registries, loopback), read apart from the
API client so each decision can be tested without a registry.
"""

from __future__ import annotations

import ipaddress
import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence
from urllib.parse import urlsplit

import requests.adapters

from composer.core.errors import UsageError

SYSTEM_CERTS_D = Path("/etc/docker/certs.d")
LOOPBACK = ipaddress.ip_network("127.0.0.0/8")


def certs_dirs(environ: Mapping[str, str] | None = None) -> tuple[Path, ...]:
    """Where engines keep a CA per registry: the system engine's folder, then a rootless
    engine's ($XDG_CONFIG_HOME/docker/certs.d) and the user's docker config folder."""
    env = os.environ if environ is None else environ
    home = Path(env.get("HOME") or Path.home())
    config = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else home / ".config"
    return (SYSTEM_CERTS_D, config / "docker" / "certs.d", home / ".docker" / "certs.d")


def ca_files(host: str, *, explicit: Path | None = None, dirs: Sequence[Path] | None = None) -> tuple[Path, ...]:
    """The CA files to trust for `host`, besides the system's: every *.crt in <certs.d>/<host>/
    (as the engine reads them), then the explicit one (--registry-ca)."""
    found: list[Path] = []
    for folder in certs_dirs() if dirs is None else dirs:
        try:
            found += sorted(path for path in (Path(folder) / host).glob("*.crt") if path.is_file())
        except OSError:
            continue
    if explicit is not None:
        found.append(Path(explicit))
    return tuple(found)


def check_ca_file(path: Path, what: str = "--registry-ca") -> Path:
    """A readable PEM file holding at least one certificate."""
    try:
        text = Path(path).read_text(encoding="ascii", errors="replace")
    except OSError as exc:
        raise UsageError(f"{what} {path}: cannot read it ({exc.strerror or exc})") from None
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise UsageError(f"{what} {path}: not a PEM certificate file (expected -----BEGIN CERTIFICATE-----)")
    return Path(path)


@dataclass(frozen=True)
class InsecureRegistries:
    """The registries the engine calls insecure, the only ones spoken to over plain http:
    its configured ones (`docker info`: RegistryConfig), 127.0.0.0/8 and localhost."""

    names: frozenset[str] = frozenset()
    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()

    @classmethod
    def from_engine_config(cls, config: Mapping) -> "InsecureRegistries":
        indexes = config.get("IndexConfigs") or {}
        names = frozenset(
            name for name, index in indexes.items() if isinstance(index, Mapping) and index.get("Secure") is False
        )
        networks = []
        for cidr in config.get("InsecureRegistryCIDRs") or ():
            try:
                networks.append(ipaddress.ip_network(cidr, strict=False))
            except (TypeError, ValueError):
                continue
        return cls(names, tuple(networks))

    def allows_http(self, host: str) -> bool:
        if host in self.names:
            return True
        hostname = _hostname(host)
        if hostname == "localhost":
            return True
        try:
            address = ipaddress.ip_address(hostname)
        except ValueError:
            return False  # a name: only the engine's IndexConfigs can make it insecure
        return address in LOOPBACK or any(address in network for network in self.networks)


def _hostname(host: str) -> str:
    """host[:port] without the port (IPv6 in brackets unwrapped)."""
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def may_send_credentials(realm: str, registry_host: str) -> bool:
    """Credentials go to a token realm only over https, or to the registry's own host."""
    url = urlsplit(realm)
    if url.scheme == "https":
        return True
    return url.scheme == "http" and url.netloc.lower() == registry_host.lower()


class TrustAdapter(requests.adapters.HTTPAdapter):
    """Verifies TLS against the system's CAs plus the registry's own (as the engine does)."""

    def __init__(self, cafiles: Sequence[Path]):
        self._context = ssl.create_default_context()
        for cafile in cafiles:
            try:
                self._context.load_verify_locations(cafile=str(cafile))
            except FileNotFoundError:
                continue  # a certs.d file removed since it was listed: the engine would not read it either
            except (OSError, ssl.SSLError):
                raise UsageError(f"{cafile}: not a readable PEM CA certificate") from None
        super().__init__()

    def init_poolmanager(self, *args, **kwargs):
        kwargs["ssl_context"] = self._context
        return super().init_poolmanager(*args, **kwargs)
