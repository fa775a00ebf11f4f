"""The engine's failures as the composer's errors: no Docker SDK or requests exception ever leaves
composer/engine/, each becomes a ComposerError subclass with a one-line message (with what to change
when the OCI runtime refuses the host); and the calls Podman fails while another run removes
images, asked again.
"""

from __future__ import annotations

import contextlib
import time
from typing import Iterator

import docker.errors
import requests.exceptions

from composer.core.errors import ComposerError, EngineUnavailable

LIST_PATIENCE = 60.0  # seconds an image list or inspect may keep failing while another run removes images (Podman)


class _Absent(Exception):
    """Raised by _translated for a 404 the caller treats as a value."""


def _patiently(call, *args, listing: bool = False, **kwargs):
    """An engine call that Podman fails while another run removes images: a list, or an inspect or
    history that walks the image tree, fails on an image it met there that is gone by the time it reads
    it ("image not known", not a 404 of the image asked for). Asked again for up to LIST_PATIENCE: a
    run's cleanup removes its images one at a time, a minute at most."""
    deadline = time.monotonic() + LIST_PATIENCE
    attempt = 0
    while True:
        try:
            return call(*args, **kwargs)
        except docker.errors.APIError as error:
            asked_for_is_absent = isinstance(error, docker.errors.NotFound) and not listing
            if asked_for_is_absent or "image not known" not in str(error) or time.monotonic() > deadline:
                raise
            attempt += 1
            time.sleep(min(2.0, 0.2 * attempt))


@contextlib.contextmanager
def _translated(what: str, error: type[ComposerError], *, absent_is_error: bool = False) -> Iterator[None]:
    """SDK and transport failures as `error` (or EngineUnavailable) with a one-line message."""
    try:
        yield
    except docker.errors.NotFound as exc:
        if not absent_is_error:
            raise _Absent() from exc
        raise error(f"{what}: {_explain(exc)}") from exc
    except docker.errors.APIError as exc:
        raise error(f"{what}: {_explain(exc)}") from exc
    except requests.exceptions.Timeout as exc:
        raise error(f"{what}: the engine gave no answer in time") from exc
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
        raise EngineUnavailable(f"{what}: lost the engine: {_one_line(str(exc)) or type(exc).__name__}") from exc


def _not_found_command(message: str) -> bool:
    """An engine's way of saying the command to start is not in the image."""
    lowered = message.lower()
    return "executable file not found" in lowered or "no such file or directory" in lowered \
        or "not found in $path" in lowered


def _one_line(text: object) -> str:
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return lines[0] if lines else ""


def _explain(exc: docker.errors.APIError) -> str:
    explanation = getattr(exc, "explanation", None) or str(exc)
    if isinstance(explanation, bytes):
        explanation = explanation.decode("utf-8", "replace")
    return with_runtime_hint(_one_line(explanation) or _one_line(str(exc)) or type(exc).__name__)


# OCI runtimes' refusals of the host itself: what the engine's operator changes, not the user's input.
RUNTIME_REFUSALS = {
    "cgroups in hybrid mode not supported": (
        "the engine's OCI runtime (crun) refuses this host's cgroup layout (v1 controllers beside a cgroup2 "
        "mount): run containers with runc (Podman: runtime = \"runc\" under [engine] in containers.conf; "
        "scripts/podman-service picks a runtime that works)"),
}


def with_runtime_hint(message: str, evidence: str = "") -> str:
    """`message`, followed by what to change when it (or `evidence`) is a runtime refusing the host."""
    for refusal, hint in RUNTIME_REFUSALS.items():
        if refusal in message or refusal in evidence:
            return f"{message}: {hint}"
    return message


def _response_message(response) -> str:
    try:
        message = response.json().get("message")
    except ValueError:
        message = None
    return _one_line(message or response.text) or f"HTTP {response.status_code}"


def lost_layer(message: str) -> bool:
    """Whether a load failed for a layer its archive left out because the engine held it, and the
    engine no longer does (another run removed the only image holding it meanwhile): the load
    names the missing layer.tar (a docker save archive) or blob (an OCI-style one)."""
    return "layer.tar" in message or "blobs/sha256/" in message or "layer does not exist" in message
