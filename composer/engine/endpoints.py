"""Where the engine listens (DOCKER_HOST, a docker context, the local socket), and so where the
ports it publishes are reached."""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit

import docker.errors


@dataclass(frozen=True)
class Endpoint:
    """Where the engine listens, and so where the ports it publishes are reached.

    A local engine (unix socket) publishes on this machine's 127.0.0.1. A tcp:// engine
    publishes on its own host at the address its operator configured (dockerd --ip, 0.0.0.0 by
    default) and is reached at the host DOCKER_HOST names. An ssh:// engine publishes on the
    remote's 127.0.0.1, reached through an ssh tunnel per port.
    """

    url: str
    tls: object = None

    @property
    def scheme(self) -> str:
        return urlsplit(self.url).scheme or "unix"

    @property
    def publish_ip(self) -> str | None:
        """The host address to publish on; None leaves it to the engine's configuration."""
        return None if self.scheme == "tcp" else "127.0.0.1"

    @property
    def reach_host(self) -> str:
        if self.scheme == "tcp":
            return urlsplit(self.url).hostname or "127.0.0.1"
        return "127.0.0.1"

    @classmethod
    def from_environment(cls) -> "Endpoint":
        """DOCKER_HOST, else the docker context (DOCKER_CONTEXT or the CLI's current one)."""
        host = os.environ.get("DOCKER_HOST")
        if host:
            return cls(host)
        try:
            from docker.context import ContextAPI

            context = ContextAPI.get_current_context()
        except (docker.errors.DockerException, OSError, ValueError, KeyError, TypeError):
            # a broken context store: fall back to the local socket, as the SDK does
            context = None
        if context is not None and context.Host:
            return cls(context.Host, context.TLSConfig or None)
        return cls("unix:///var/run/docker.sock")
