"""Connecting to an engine: the kind that answers at an address (DockerEngine, or PodmanEngine when
it says it is Podman's service). Above both kinds, so the interface below them imports neither."""

from __future__ import annotations

import os

import docker
import docker.errors
import requests.exceptions

from composer.core.errors import EngineError, EngineUnavailable, UsageError
from composer.core.redaction import redact
from composer.engine.docker import DockerEngine
from composer.engine.endpoints import Endpoint
from composer.engine.errors import _translated
from composer.engine.interface import ContainerEngine
from composer.engine.podman import PodmanEngine

START_HINT = "start one with scripts/ensure-docker, or point DOCKER_HOST at a running engine"


def connect(timeout: int = 600, host: str | None = None) -> ContainerEngine:
    """The engine at `host` (a DOCKER_HOST value), else the one the docker CLI would use
    (DOCKER_HOST, DOCKER_CONTEXT, the current context, the local socket): a DockerEngine, or
    a PodmanEngine when the endpoint says it is Podman's service."""
    endpoint = Endpoint(host) if host else Endpoint.from_environment()
    try:
        if host:
            client = docker.DockerClient(base_url=host, timeout=timeout, use_ssh_client=endpoint.scheme == "ssh")
        elif os.environ.get("DOCKER_HOST"):
            client = docker.from_env(timeout=timeout, use_ssh_client=endpoint.scheme == "ssh")
        else:
            client = docker.DockerClient(base_url=endpoint.url, tls=endpoint.tls or False, timeout=timeout,
                                         use_ssh_client=endpoint.scheme == "ssh")
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
        if "DOCKER_HOST" in str(exc) or "Invalid bind address" in str(exc) or "scheme" in str(exc).lower():
            raise UsageError(f"DOCKER_HOST {redact(endpoint.url)[:200]}: not an engine address "
                             "(unix:///PATH, tcp://HOST:PORT or ssh://HOST)") from None
        raise EngineUnavailable(f"no Docker engine answers at {redact(endpoint.url)[:200]}: {START_HINT}") from exc
    except (ValueError, TypeError, IndexError, KeyError) as exc:  # the SDK's parse of a malformed address
        raise UsageError(f"DOCKER_HOST {redact(endpoint.url)[:200]}: not an engine address "
                         "(unix:///PATH, tcp://HOST:PORT or ssh://HOST)") from exc
    with _translated("cannot ask the engine its version", EngineError):
        components = client.api.version().get("Components") or []
    podman = any("podman" in str(c.get("Name", "")).lower() for c in components)
    return (PodmanEngine if podman else DockerEngine)(client, endpoint)
