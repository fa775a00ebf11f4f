"""What this machine's Docker configuration says about registries, read from its files: the
logins (`docker login`, a credential helper) and the daemon's insecure registries.

The engine reads the same files; a command that talks to registries with no engine in between
(`composer mirror`, `composer verify`) reads them here, so it needs no running engine.
"""

from __future__ import annotations

import ipaddress
import json
import os
from pathlib import Path
from typing import Mapping

import docker.auth
import docker.errors

DAEMON_JSON = Path("/etc/docker/daemon.json")


def login_for(registry: str, credstore_env: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """`docker login`'s credentials for `registry` ({"username", "password"}), from the user's
    config.json (DOCKER_CONFIG, else ~/.docker) or its credential helper; None: none stored."""
    try:
        config = docker.auth.load_config(credstore_env=credstore_env)
        found = docker.auth.resolve_authconfig(config, registry, credstore_env=credstore_env)
    except docker.errors.DockerException:
        return None
    if not found:
        return None
    username = found.get("username") or found.get("Username")
    password = found.get("password") or found.get("Password")
    if not username or not password:
        return None
    return {"username": username, "password": password}


def daemon_registry_config(path: Path = DAEMON_JSON) -> dict:
    """The daemon's insecure registries from its daemon.json, in the shape `docker info` gives them
    (RegistryConfig: IndexConfigs of names marked not secure, InsecureRegistryCIDRs)."""
    try:
        with open(path, "rb") as fh:
            settings = json.loads(fh.read(1 << 20))
    except (OSError, ValueError):
        return {}
    entries = settings.get("insecure-registries") if isinstance(settings, dict) else None
    names, cidrs = {}, []
    for entry in entries if isinstance(entries, list) else ():
        if not isinstance(entry, str):
            continue
        if "/" in entry and _is_network(entry):
            cidrs.append(entry)  # 10.0.0.0/8
        else:
            names[entry] = {"Name": entry, "Secure": False}
    return {"IndexConfigs": names, "InsecureRegistryCIDRs": cidrs}


def _is_network(text: str) -> bool:
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return False
    return True


class HostDockerConfig:
    """Registry trust and logins as this machine's Docker files say, for commands with no engine."""

    def __init__(self, daemon_json: Path = DAEMON_JSON, environ: Mapping[str, str] | None = None):
        self.daemon_json = daemon_json
        self.environ = os.environ if environ is None else environ

    def registry_config(self) -> dict:
        return daemon_registry_config(self.daemon_json)

    def credentials_for(self, registry: str) -> dict[str, str] | None:
        return login_for(registry)
