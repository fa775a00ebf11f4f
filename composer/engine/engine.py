"""The container engine: one interface (ContainerEngine); engines by kind over the Docker SDK
(DockerEngine, PodmanEngine: chosen by connect() from what the endpoint says it is). ssh
tunnels to a remote engine's published ports live in composer/tunnels.py.

Everything else in the composer speaks in plain values (image references, folders,
dataclasses) and gets engine failures as ComposerError subclasses with a one-line message:
no Docker SDK or requests exception ever leaves this module. The same Docker API is served by
Docker engines (local, remote over tcp:// or ssh://, in a container) and by Podman's service,
whose builds differ.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import tarfile
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator, Mapping, Union
from urllib.parse import urlsplit

import docker
import docker.auth
import docker.errors
import docker.types
import docker.utils
import requests.exceptions

from composer.core import interrupts
from composer.core.docker_config import login_for
from composer.engine import tunnels
from composer.core.errors import BuildFailed, ComposerError, EngineError, EngineUnavailable, ImageNotFound, RegistryError, UsageError
from composer.core.redaction import redact
from composer.core.progress import Heartbeat, LineSink, quiet
from composer.core.refs import ImageRef, digest_for

START_HINT = "start one with scripts/ensure-docker, or point DOCKER_HOST at a running engine"

# GPUs a container asks for: "all", "none" or a count.
Gpus = Union[str, int]


_RUNNING = re.compile(r"---> Running in ([0-9a-f]{12})")  # a build step's container, as the engine names it
LIST_PATIENCE = 60.0  # seconds an image list or inspect may keep failing while another run removes images (Podman)

@dataclass(frozen=True)
class ImageInfo:
    """What the composer needs to know of a local image."""

    id: str
    ref: str
    tags: tuple[str, ...]
    repo_digests: tuple[str, ...]
    env: Mapping[str, str]
    labels: Mapping[str, str]
    size: int
    layers: tuple[str, ...] = ()  # diff ids of its root filesystem, bottom first
    # The rest of its configuration, which an image built FROM scratch on a copy of it must restate:
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    workdir: str = ""
    created: str = ""  # when its configuration says it was made (RFC 3339), "" when it does not say

    @property
    def digest(self) -> str | None:
        """The registry digest (sha256:...) recorded for this ref's own repository, if any."""
        return digest_for(self.ref, self.repo_digests)


@dataclass(frozen=True)
class Layer:
    """One step of an image's history: the instruction that made it and the bytes it added."""

    created_by: str
    size: int


@dataclass(frozen=True)
class RunResult:
    exit_code: int
    output: str


@dataclass
class Container:
    """A container the composer started; remove() is safe to call more than once.

    Its published ports are reached at `host` (where the engine publishes them, which is not
    127.0.0.1 for a remote engine).
    """

    engine: "ContainerEngine"
    id: str
    host: str = "127.0.0.1"
    ports: dict[int, int] = field(default_factory=dict)
    _tunnels: list = field(default_factory=list, repr=False)

    def host_port(self, container_port: int) -> int:
        return self.ports[container_port]

    def url(self, container_port: int) -> str:
        """http://HOST:PORT of a published port."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.host_port(container_port)}"

    def logs(self, tail: int | str = "all") -> str:
        return self.engine.container_logs(self.id, tail=tail)

    def running(self) -> bool:
        return self.engine.container_running(self.id)

    def remove(self) -> None:
        for tunnel in self._tunnels:
            tunnels.stop(tunnel)
        self._tunnels.clear()
        self.engine.remove_container(self.id)


def gpu_request(gpus: Gpus | None) -> int | None:
    """How many GPUs `gpus` asks for: None for none, -1 for all; a bad value is refused."""
    if gpus is None or gpus == "none" or gpus == 0:
        return None
    if gpus == "all":
        return -1
    if isinstance(gpus, int) and not isinstance(gpus, bool) and gpus > 0:
        return gpus
    raise EngineError(f"gpus {gpus!r}: give all, none or a positive number")


class ContainerEngine(ABC):
    """What the composer asks of a container engine. `connect()` gives the Docker API one.

    Every method raises only ComposerError subclasses; "not there" is a value (None, no-op),
    never an exception, where the caller has nothing to do about it.
    """

    loads_partial_archives = True  # whether a loaded archive may leave out layers the engine holds

    # -- images -------------------------------------------------------------

    @abstractmethod
    def image(self, ref: str) -> ImageInfo | None:
        """The local image named `ref` (a tag, digest reference or id), or None."""

    def require_image(self, ref: str, *, pull: bool = True, on_line: LineSink = quiet) -> ImageInfo:
        """The image `ref`, pulled if it is not local (and `pull` allows)."""
        info = self.image(ref)
        if info is not None:
            return info
        if not pull:
            raise ImageNotFound(f"image {ref} is not on the engine")
        return self.pull(ref, on_line=on_line)

    @abstractmethod
    def pull(self, ref: str, *, on_line: LineSink = quiet, auth: Mapping[str, str] | None = None) -> ImageInfo: ...

    @abstractmethod
    def tag(self, image_id: str, ref: str) -> None: ...

    @abstractmethod
    def remove_image(self, ref: str, *, force: bool = False, prune: bool = True) -> None:
        """Remove a name (or, by id, an image); an absent one is fine, one in use is an error.
        `prune` False keeps its untagged parents (a stage's build cache under a label image)."""

    @abstractmethod
    def image_config(self, ref: str) -> dict:
        """What an image runs with, as its configuration says: {"config": Env, Cmd, Labels, ...,
        "architecture", "os", "variant"} (the parts a new image made of its layers restates)."""

    @abstractmethod
    def export_path(self, image: str, path: str, *, labels: Mapping[str, str] | None = None) -> Iterator[bytes]:
        """A tar of `path` in `image` (its entries named from the path's last part), read through a
        container that is created, never started, and removed once the stream ends or stops."""

    @abstractmethod
    def load_stream(self, archive: BinaryIO, what: str) -> None:
        """Load an image archive read from `archive` (a docker save archive, or one that leaves out
        the layers the engine holds already)."""

    def discard_untagged(self, image_id: str) -> None:
        """Remove an image only if nothing names it, so no existing tag is ever touched."""
        info = self.image(image_id)
        if info is None or info.tags:
            return
        try:
            self.remove_image(image_id)
        except ComposerError:
            pass  # still used by a container or as a parent: leave it

    def identity(self) -> str:
        """What tells this engine from another on the host (locks on what runs make are per engine)."""
        endpoint = getattr(self, "endpoint", None)
        return str(getattr(endpoint, "url", "") or "engine")

    def where(self) -> str:
        """The engine's address as a message names it (its credentials, if any, redacted)."""
        endpoint = getattr(self, "endpoint", None)
        url = getattr(endpoint, "url", None)
        return redact(url)[:200] if url else type(self).__name__

    def storage(self) -> tuple[str, "shutil._ntuple_diskusage"] | None:
        """Where the engine stores images and that disk's usage; None when this machine cannot see it."""
        return None

    def disk_usage(self) -> dict[str, dict]:
        """Per image id: its bytes ("size"), those it shares with other images ("shared") and the
        containers using it, as the engine counts them (docker system df); {} when it cannot say."""
        return {}

    @abstractmethod
    def images_labelled(self, label: str, *, untagged: bool = False) -> list[str]:
        """Ids of images carrying `label` (key or key=value); with `untagged`, only those no tag
        names (a multi-stage build's stage images, which label themselves only by inheritance)."""

    @abstractmethod
    def first_labelled(self, label: str) -> str | None:
        """The image a label first appears on: of the images carrying it (intermediate ones too),
        the one built on an image that does not. A stage's last image, when its label is set there,
        though the stages built FROM it inherit the label."""

    @abstractmethod
    def image_names(self) -> list[str]:
        """Every local tag and digest reference."""

    @abstractmethod
    def history(self, ref: str) -> list[str]:
        """The instruction that made each layer of `ref`, newest first."""

    @abstractmethod
    def layers(self, ref: str) -> list[Layer]:
        """The history of `ref`, oldest step first, with the bytes each step added (0 for steps
        that only change the configuration)."""

    @abstractmethod
    def import_rootfs(self, tarball: Path, ref: str, changes: Iterable[str] = ()) -> str:
        """Load a root filesystem tarball as an image (docker import); its id."""

    @abstractmethod
    def build(
        self,
        context: Path,
        *,
        dockerfile: str = "Dockerfile",
        tag: str | None = None,
        labels: Mapping[str, str] | None = None,
        network_mode: str | None = None,
        buildargs: Mapping[str, str] | None = None,
        nocache: bool = False,
        redact: Callable[[str], str] = lambda line: line,
        on_line: LineSink = quiet,
    ) -> str:
        """Build `context` and return the image id; on failure the output tail is kept.

        `redact` scrubs every line before it is shown or kept (build arguments may hold secrets).
        """

    # -- containers ---------------------------------------------------------

    @abstractmethod
    def run_once(
        self,
        image: str,
        command: list[str],
        *,
        entrypoint: list[str] | None = None,
        files: Mapping[str, bytes] | None = None,
        user: str | None = None,
        labels: Mapping[str, str] | None = None,
        timeout: float = 300,
    ) -> RunResult:
        """Run `command` with no network in a short-lived container of `image`; its output.

        A command the image lacks gives exit code 127, as in a shell.
        """

    @abstractmethod
    def start(
        self,
        image: str,
        command: list[str] | None = None,
        *,
        ports: Iterable[int] = (),
        files: Mapping[str, bytes | Path] | None = None,
        labels: Mapping[str, str] | None = None,
        shm_size: str | None = None,
        environment: Mapping[str, str] | None = None,
        user: str | None = None,
        gpus: Gpus | None = None,
    ) -> Container:
        """Start a container with `ports` published where only this machine reaches them
        (the local engine's loopback), or where the remote engine publishes them."""

    @abstractmethod
    def containers_labelled(self, label: str) -> list[str]: ...

    @abstractmethod
    def container_logs(self, container_id: str, tail: int | str = "all") -> str:
        """Its output so far ("" once it is gone)."""

    @abstractmethod
    def container_running(self, container_id: str) -> bool: ...

    @abstractmethod
    def remove_container(self, container_id: str) -> None:
        """Remove it, running or not, with its volumes; an absent one is fine."""

    @abstractmethod
    def runtimes(self) -> frozenset[str]:
        """The container runtimes the engine offers (docker info: Runtimes)."""

    def offers_nvidia_runtime(self) -> bool:
        """True when the engine can give containers GPUs (the NVIDIA container runtime)."""
        return "nvidia" in self.runtimes()

    # -- registries and archives ---------------------------------------------

    @abstractmethod
    def push(self, ref: str, *, auth: Mapping[str, str] | None = None, on_line: LineSink = quiet) -> str:
        """Push `ref` and return the digest the registry reported."""

    @abstractmethod
    def registry_config(self) -> dict:
        """The engine's RegistryConfig (insecure registries and CIDRs), as `docker info` shows it."""

    @abstractmethod
    def credentials_for(self, registry: str) -> dict[str, str] | None:
        """The engine's own credentials for `registry`: {"username", "password"} or None."""

    @abstractmethod
    def save(self, refs: list[str], out: Path) -> None:
        """Write `refs` to one tar archive (docker save); shared layers are stored once."""

    @abstractmethod
    def load(self, archive: Path) -> None:
        """Load a `save` archive (docker load)."""

    @abstractmethod
    def save_stream(self, ref: str) -> Iterator[bytes]:
        """The `save` archive of one image, streamed (its layers as the engine stores them)."""


# The name the rest of the composer uses for the interface.
Engine = ContainerEngine


def tar_of(files: Mapping[str, bytes | Path]) -> bytes:
    """A tar archive holding `files` (archive path -> content or host path/folder)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, content in sorted(files.items()):
            if isinstance(content, Path):
                tar.add(str(content), arcname=name)
                continue
            info = tarfile.TarInfo(name)
            info.size = len(content)
            info.mode = 0o755 if name.endswith((".sh", ".py")) else 0o644
            tar.addfile(info, io.BytesIO(content))
    return buf.getvalue()


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


class DockerEngine(ContainerEngine):
    """A Docker engine reached through the Docker SDK (Podman's service: PodmanEngine)."""

    is_podman = False

    def __init__(self, client: docker.DockerClient, endpoint: Endpoint | None = None):
        self._client = client
        self._api = client.api
        self.endpoint = endpoint or Endpoint.from_environment()
        self._data_root: str | None = None

    # -- images -------------------------------------------------------------

    def image(self, ref: str) -> ImageInfo | None:
        try:
            with _translated(f"cannot inspect image {ref}", ImageNotFound):
                attrs = _patiently(self._api.inspect_image, ref)
        except _Absent:
            return None
        config = attrs.get("Config") or {}
        env = dict(item.split("=", 1) for item in (config.get("Env") or []) if "=" in item)
        return ImageInfo(
            id=attrs["Id"],
            ref=ref,
            tags=tuple(t for t in attrs.get("RepoTags") or () if t != "<none>:<none>"),
            repo_digests=tuple(attrs.get("RepoDigests") or ()),
            env=env,
            labels=dict(config.get("Labels") or {}),
            size=int(attrs.get("Size") or 0),
            layers=tuple((attrs.get("RootFS") or {}).get("Layers") or ()),
            entrypoint=tuple(config.get("Entrypoint") or ()),
            cmd=tuple(config.get("Cmd") or ()),
            workdir=str(config.get("WorkingDir") or ""),
            created=str(attrs.get("Created") or ""),
        )

    def image_config(self, ref: str) -> dict:
        with _translated(f"cannot inspect image {ref}", ImageNotFound, absent_is_error=True):
            attrs = _patiently(self._api.inspect_image, ref)
        return {"config": dict(attrs.get("Config") or {}), "architecture": attrs.get("Architecture") or "amd64",
                "os": attrs.get("Os") or "linux", "variant": attrs.get("Variant") or ""}

    def export_path(self, image: str, path: str, *, labels: Mapping[str, str] | None = None) -> Iterator[bytes]:
        api = self._api
        what = f"cannot read {path} of {_short(image)}"
        with _translated(what, EngineError, absent_is_error=True):
            created = api.create_container(image, command=["/composer-never-run"], entrypoint=[],
                                           labels=dict(labels or {}), network_disabled=True,
                                           host_config=api.create_host_config(network_mode="none"))
        cid = created["Id"]
        try:
            with _translated(what, EngineError, absent_is_error=True):
                stream, _stat = api.get_archive(cid, path, chunk_size=1 << 20)
                for chunk in stream:
                    yield chunk
        finally:
            self.remove_container(cid)

    def load_stream(self, archive: BinaryIO, what: str) -> None:
        with _translated(f"cannot load {what}", BuildFailed, absent_is_error=True):
            for event in self._api.load_image(archive):
                if isinstance(event, dict) and "error" in event:
                    raise BuildFailed(f"cannot load {what}: {_one_line(event['error'])}")

    def pull(self, ref: str, *, on_line: LineSink = quiet, auth: Mapping[str, str] | None = None) -> ImageInfo:
        repo, tag = split_ref(ref)
        with Heartbeat(on_line, f"pulling {ref}", self._bytes_stored) as beat, \
                _translated(f"cannot pull {ref}", ImageNotFound, absent_is_error=True):
            progress = _Progress(beat.on_line)
            for event in self._api.pull(repo, tag=tag, stream=True, decode=True, auth_config=auth):
                if "error" in event:
                    raise ImageNotFound(f"cannot pull {ref}: {_one_line(event['error'])}")
                progress(event)
        info = self.image(ref)
        if info is None:
            raise ImageNotFound(f"cannot pull {ref}: the engine reported no image")
        return info

    def tag(self, image_id: str, ref: str) -> None:
        repo, tag = split_ref(ref)
        with _translated(f"cannot tag {_short(image_id)} as {ref}", ImageNotFound, absent_is_error=True):
            self._api.tag(image_id, repo, tag=tag, force=True)

    def remove_image(self, ref: str, *, force: bool = False, prune: bool = True) -> None:
        try:
            with _translated(f"cannot remove image {ref}", EngineError):
                self._api.remove_image(ref, force=force, noprune=not prune)
        except _Absent:
            pass

    def images_labelled(self, label: str, *, untagged: bool = False) -> list[str]:
        filters: dict = {"label": label, **({"dangling": True} if untagged else {})}
        with _translated("cannot list images", EngineError):
            return [img["Id"] for img in self._images(filters=filters)]

    def _images(self, **query) -> list[dict]:
        return _patiently(self._api.images, listing=True, **query)

    def first_labelled(self, label: str) -> str | None:
        with _translated("cannot list images", EngineError):
            found = self._images(filters={"label": label}, all=True)
        ids = {img["Id"] for img in found}
        roots = [img["Id"] for img in found if img.get("ParentId") not in ids]
        if len(roots) == 1:
            return roots[0]
        # No parents known (an engine that keeps none): the top-level one, if alone.
        top = self.images_labelled(label)
        return top[0] if len(top) == 1 else None

    def image_names(self) -> list[str]:
        with _translated("cannot list images", EngineError):
            images = self._images()
        names = []
        for img in images:
            names += [n for n in (img.get("RepoTags") or []) + (img.get("RepoDigests") or []) if "<none>" not in n]
        return names

    def history(self, ref: str) -> list[str]:
        with _translated(f"cannot read the history of {ref}", ImageNotFound, absent_is_error=True):
            return [str(layer.get("CreatedBy") or "") for layer in _patiently(self._api.history, ref)]

    def layers(self, ref: str) -> list[Layer]:
        with _translated(f"cannot read the history of {ref}", ImageNotFound, absent_is_error=True):
            steps = _patiently(self._api.history, ref)
        return [Layer(str(step.get("CreatedBy") or ""), int(step.get("Size") or 0)) for step in reversed(steps)]

    def import_rootfs(self, tarball: Path, ref: str, changes: Iterable[str] = ()) -> str:
        repo, tag = split_ref(ref)
        with _translated(f"cannot import {tarball}", BuildFailed, absent_is_error=True), open(tarball, "rb") as fh:
            result = self._api.import_image_from_data(fh, repository=repo, tag=tag, changes=list(changes) or None)
        for line in (result.splitlines() if isinstance(result, str) else [result]):
            status = json.loads(line) if isinstance(line, str) and line.strip().startswith("{") else line
            if isinstance(status, dict) and "error" in status:
                raise BuildFailed(f"cannot import {tarball}: {_one_line(status['error'])}")
        info = self.image(ref)
        if info is None:
            raise BuildFailed(f"cannot import {tarball}: the engine reported no image")
        return info.id

    # -- build --------------------------------------------------------------

    def build(
        self,
        context: Path,
        *,
        dockerfile: str = "Dockerfile",
        tag: str | None = None,
        labels: Mapping[str, str] | None = None,
        network_mode: str | None = None,
        buildargs: Mapping[str, str] | None = None,
        nocache: bool = False,
        redact: Callable[[str], str] = lambda line: line,
        on_line: LineSink = quiet,
    ) -> str:
        with Heartbeat(on_line, f"building {tag or context.name}", self._bytes_stored) as beat:
            return self._build(context, dockerfile, tag, labels, network_mode, buildargs, nocache, redact, beat.on_line)

    def identity(self) -> str:
        """The engine's own ID (docker info), so two sockets to one engine share its locks."""
        if getattr(self, "_identity", None) is None:
            try:
                self._identity = self._identity_in(self._api.info()) or self.endpoint.url
            except (docker.errors.DockerException, requests.exceptions.RequestException, OSError):
                self._identity = self.endpoint.url
        return self._identity

    def _identity_in(self, info: dict) -> str:
        """What names this engine in its `docker info`: Docker's ID."""
        return str(info.get("ID") or "")

    def disk_usage(self) -> dict[str, dict]:
        try:
            found = self._api.df()
        except (docker.errors.DockerException, requests.exceptions.RequestException, OSError):
            return {}
        return {img["Id"]: {"size": int(img.get("Size") or 0), "shared": max(int(img.get("SharedSize") or 0), 0),
                            "containers": max(int(img.get("Containers") or 0), 0), "created": int(img.get("Created") or 0)}
                for img in found.get("Images") or []}

    def _bytes_stored(self) -> int | None:
        """Bytes used on the disk of a local engine's storage (what a pull or build has written
        so far shows as its growth); None for an engine on another machine."""
        found = self.storage()
        return found[1].used if found else None

    def storage(self) -> tuple[str, "shutil._ntuple_diskusage"] | None:
        """Where a local engine stores images (its data root) and that disk's usage; None for an
        engine on another machine, whose disk this machine cannot see."""
        if self.endpoint.scheme != "unix":
            return None
        if self._data_root is None:
            try:
                self._data_root = str(self._api.info().get("DockerRootDir") or "")
            except (docker.errors.DockerException, requests.exceptions.RequestException, OSError):
                self._data_root = ""
        try:
            return (self._data_root, shutil.disk_usage(self._data_root)) if self._data_root else None
        except OSError:
            return None

    def _build(self, context, dockerfile, tag, labels, network_mode, buildargs, nocache, redact, on_line) -> str:
        tail: list[str] = []
        image_id = None
        progress = _Progress(on_line)
        stream = None
        try:
            stream = self._build_events(context, dockerfile, tag, labels, network_mode, buildargs, nocache)
            for event in stream:
                if "stream" in event:
                    for line in redact(event["stream"]).splitlines():
                        if line.strip():
                            tail = (tail + [line])[-40:]
                            on_line(line)
                elif "aux" in event and "ID" in (event["aux"] or {}):
                    image_id = event["aux"]["ID"]
                elif "error" in event:
                    error = redact(event["error"]).strip()
                    message = with_runtime_hint(error.splitlines()[-1] if error else "unknown error",
                                                "\n".join([error, *tail]))
                    raise BuildFailed(f"image build failed: {message}", log_tail="\n".join(tail))
                else:
                    progress(event)
        except docker.errors.APIError as exc:
            raise BuildFailed(f"image build failed: {redact(_explain(exc))}", log_tail="\n".join(tail)) from exc
        except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
            raise EngineUnavailable(f"lost the Docker engine during the build: {redact(_one_line(str(exc)))}") from exc
        finally:
            if stream is not None:  # an interrupt or a failure: the answer's connection closes, so the
                stream.close()  # engine cancels the build (and removes its step's container)
                if image_id is None:
                    self._cancelled(tail)
        if image_id is None:
            # Podman's service ends a build with the image id (or "Successfully built ID"), no aux event.
            image_id = _built_id(tail, tag, self)
        if image_id is None:
            raise BuildFailed("image build failed: the engine returned no image id", log_tail="\n".join(tail))
        return image_id

    def _cancelled(self, tail: list[str], timeout: float = 30) -> None:
        """Wait (a while) for the engine to end the step a closed build was running: it may still
        commit that step's image after the client hung up, and the run's cleanup, which comes next,
        must find it."""
        running = next((m.group(1) for line in reversed(tail) for m in [_RUNNING.search(line)] if m), None)
        if running is None:
            return
        deadline = time.monotonic() + timeout
        with contextlib.suppress(docker.errors.DockerException, requests.exceptions.RequestException):
            while time.monotonic() < deadline and self._api.containers(all=True, filters={"id": running}):
                time.sleep(0.5)

    def _build_events(self, context, dockerfile, tag, labels, network_mode, buildargs, nocache) -> Iterator[dict]:
        """The build's progress events, from the Docker API's build endpoint. The SDK keeps the
        streaming answer to itself; it is caught on its way to the SDK's reader so that closing this
        generator (an interrupt, a failure) closes the connection, which is what makes the engine
        cancel a build: the SDK's own generator would leave it open and the build running."""
        api = self._api
        answers: list = []
        reader = api._stream_helper

        def keep(response, decode=False):
            answers.append(response)
            return reader(response, decode)

        api._stream_helper = keep  # this engine's client builds one image at a time
        try:
            events = api.build(path=str(context), dockerfile=dockerfile, tag=tag, labels=dict(labels or {}),
                               network_mode=network_mode, buildargs=dict(buildargs or {}), nocache=nocache,
                               rm=True, forcerm=True, decode=True)
        finally:
            del api._stream_helper
        try:
            yield from events
        finally:
            for answer in answers:
                answer.close()

    # -- containers ---------------------------------------------------------

    def run_once(
        self,
        image: str,
        command: list[str],
        *,
        entrypoint: list[str] | None = None,
        files: Mapping[str, bytes] | None = None,
        user: str | None = None,
        labels: Mapping[str, str] | None = None,
        timeout: float = 300,
    ) -> RunResult:
        api = self._api
        cid = None
        try:
            # An interrupt waits until the container is known to the `finally` that removes it.
            with interrupts.holding(), _translated(f"cannot run {command[0] if command else 'a command'} in "
                                                   f"{_short(image)}", EngineError, absent_is_error=True):
                cid = api.create_container(
                    image,
                    command=command,
                    entrypoint=entrypoint,
                    user=user,
                    labels=dict(labels or {}),
                    network_disabled=True,
                    host_config=api.create_host_config(network_mode="none"),
                )["Id"]
            with _translated(f"cannot run {command[0] if command else 'a command'} in {_short(image)}", EngineError,
                             absent_is_error=True):
                if files:
                    api.put_archive(cid, "/", tar_of({k.lstrip("/"): v for k, v in files.items()}))
                try:
                    api.start(cid)
                except docker.errors.APIError as exc:
                    if not _not_found_command(_explain(exc)):
                        raise
                    return RunResult(127, _explain(exc))  # the command does not exist in the image
                status = api.wait(cid, timeout=timeout)
                stdout = api.logs(cid, stdout=True, stderr=False).decode("utf-8", "replace")
                stderr = api.logs(cid, stdout=False, stderr=True).decode("utf-8", "replace")
            code = int(status.get("StatusCode", 1))
            return RunResult(code, stdout if code == 0 else (stdout + stderr))
        finally:
            if cid is not None:
                self.remove_container(cid)

    def start(
        self,
        image: str,
        command: list[str] | None = None,
        *,
        ports: Iterable[int] = (),
        files: Mapping[str, bytes | Path] | None = None,
        labels: Mapping[str, str] | None = None,
        shm_size: str | None = None,
        environment: Mapping[str, str] | None = None,
        user: str | None = None,
        gpus: Gpus | None = None,
    ) -> Container:
        api = self._api
        ports = list(ports)
        count = gpu_request(gpus)
        where = self.endpoint.publish_ip
        with _translated(f"cannot start a container of {_short(image)}", EngineError, absent_is_error=True):
            host_config = api.create_host_config(
                port_bindings={p: (where, None) if where else None for p in ports},
                shm_size=shm_size,
                device_requests=[docker.types.DeviceRequest(count=count, capabilities=[["gpu"]])]
                if count is not None else None,
            )
            created = api.create_container(
                image,
                command=command,
                ports=ports,
                labels=dict(labels or {}),
                environment=dict(environment or {}),
                user=user,
                host_config=host_config,
            )
        container = Container(self, created["Id"], host=self.endpoint.reach_host)
        try:
            with _translated(f"cannot start a container of {_short(image)}", EngineError, absent_is_error=True):
                if files:
                    api.put_archive(container.id, "/", tar_of({k.lstrip("/"): v for k, v in files.items()}))
                api.start(container.id)
                network = api.inspect_container(container.id)["NetworkSettings"]["Ports"] or {}
            for p in ports:
                bindings = network.get(f"{p}/tcp") or []
                if not bindings:
                    raise EngineError(f"the engine published no host port for port {p} of {_short(image)}")
                container.ports[p] = int(bindings[0]["HostPort"])
            if self.endpoint.scheme == "ssh":
                for p, remote in list(container.ports.items()):
                    tunnel, local = tunnels.ssh_tunnel(self.endpoint.url, remote)
                    container._tunnels.append(tunnel)
                    container.ports[p] = local
        except BaseException:
            container.remove()
            raise
        return container

    def containers_labelled(self, label: str) -> list[str]:
        with _translated("cannot list containers", EngineError):
            return [c["Id"] for c in self._api.containers(all=True, filters={"label": label})]

    def container_logs(self, container_id: str, tail: int | str = "all") -> str:
        try:
            raw = self._api.logs(container_id, stdout=True, stderr=True, tail=tail)
        except (docker.errors.DockerException, requests.exceptions.RequestException):
            return ""
        return raw.decode("utf-8", "replace")

    def container_running(self, container_id: str) -> bool:
        try:
            with _translated(f"cannot inspect container {_short(container_id)}", EngineError):
                state = self._api.inspect_container(container_id)["State"]
        except _Absent:
            return False
        return bool(state.get("Running"))

    def remove_container(self, container_id: str) -> None:
        try:
            with _translated(f"cannot remove container {_short(container_id)}", EngineError):
                self._api.remove_container(container_id, force=True, v=True)
        except _Absent:
            pass

    def runtimes(self) -> frozenset[str]:
        with _translated("cannot ask the engine what it offers", EngineError):
            info = self._api.info()
        return frozenset((info.get("Runtimes") or {}).keys())

    # -- registries and archives ----------------------------------------------

    def push(self, ref: str, *, auth: Mapping[str, str] | None = None, on_line: LineSink = quiet) -> str:
        repo, tag = split_ref(ref)
        digest = None
        with Heartbeat(on_line, f"pushing {ref}") as beat, \
                _translated(f"cannot push {ref}", RegistryError, absent_is_error=True):
            progress = _Progress(beat.on_line)
            for event in self._api.push(repo, tag=tag, stream=True, decode=True, auth_config=auth):
                if "error" in event:
                    raise RegistryError(f"cannot push {ref}: {_one_line(event['error'])}")
                aux = event.get("aux") or {}
                if "Digest" in aux:
                    digest = aux["Digest"]
                elif digest is None:  # Podman says it only in the status line: "TAG: digest: sha256:... size: N"
                    found = _DIGEST_STATUS.search(str(event.get("status") or ""))
                    digest = found.group(1) if found else None
                progress(event)
        if digest is None:
            raise RegistryError(f"cannot push {ref}: the registry reported no digest")
        return digest

    def registry_config(self) -> dict:
        with _translated("cannot read the engine's registry settings", EngineUnavailable):
            return dict(self._api.info().get("RegistryConfig") or {})

    def credentials_for(self, registry: str) -> dict[str, str] | None:
        return login_for(registry, self._api.credstore_env)

    def save(self, refs: list[str], out: Path) -> None:
        # One archive for all refs, so layers they share are stored once; the SDK saves one
        # image at a time, so this asks the engine's /images/get endpoint with its session.
        api = self._api
        url = f"{api.base_url}/v{api.api_version}/images/get"
        what = f"cannot save {', '.join(refs)}"
        with _translated(what, ImageNotFound, absent_is_error=True):
            with api.get(url, params={"names": refs}, stream=True, timeout=api.timeout) as response:
                if response.status_code != 200:
                    raise ImageNotFound(f"{what}: {_response_message(response)}")
                with open(out, "wb") as fh:
                    for chunk in response.iter_content(chunk_size=1 << 20):
                        fh.write(chunk)

    def save_stream(self, ref: str) -> Iterator[bytes]:
        api = self._api
        url = f"{api.base_url}/v{api.api_version}/images/get"
        what = f"cannot save {ref}"
        with _translated(what, ImageNotFound, absent_is_error=True):
            with api.get(url, params={"names": [ref]}, stream=True, timeout=api.timeout) as response:
                if response.status_code != 200:
                    raise ImageNotFound(f"{what}: {_response_message(response)}")
                yield from response.iter_content(chunk_size=1 << 20)

    def load(self, archive: Path) -> None:
        with _translated(f"cannot load {archive}", BuildFailed, absent_is_error=True):
            with open(archive, "rb") as fh:  # streamed: base images can be many GB
                for event in self._api.load_image(fh):
                    if isinstance(event, dict) and "error" in event:
                        raise BuildFailed(f"cannot load {archive}: {_one_line(event['error'])}")


class PodmanEngine(DockerEngine):
    """Podman's service: the Docker API, except for builds (its libpod endpoint keeps a build
    off the network and keeps stage images); chosen by connect() from the endpoint's version."""

    is_podman = True
    loads_partial_archives = False  # containers/image's docker-archive reader wants every layer

    def _identity_in(self, info: dict) -> str:
        """Podman's storage root: its `info` ID is new on every request, so two runs on one service
        would never share a lock (both made the same pruned base at once)."""
        root = str(info.get("DockerRootDir") or "")
        return f"podman:{root}" if root else ""

    def _build_events(self, context, dockerfile, tag, labels, network_mode, buildargs, nocache) -> Iterator[dict]:
        """A build through Podman's own endpoint: its Docker-compatible one ignores network_mode
        "none" (RUN steps would share the host's network), the libpod one takes networkmode=1.
        layers=1 keeps stage images as Docker's builder does: without it, Podman 4.3 deletes a
        stage that is only a FROM, and that is the base image itself."""
        if network_mode not in (None, "none"):
            raise BuildFailed(f"image build failed: Podman builds take no network mode {network_mode!r}")
        api = self._api
        params = {"dockerfile": dockerfile, "labels": json.dumps(dict(labels or {})),
                  "buildargs": json.dumps(dict(buildargs or {})), "rm": "1", "forcerm": "1", "layers": "1"}
        if tag:
            params["t"] = tag
        if nocache:
            params["nocache"] = "1"
        if network_mode == "none":
            params["networkmode"] = "1"  # buildah's NetworkDisabled
        archive = docker.utils.tar(str(context))
        response = None
        try:
            response = api.post(f"{api.base_url}/v4.0.0/libpod/build", params=params, data=archive, stream=True,
                                headers={"Content-Type": "application/x-tar"}, timeout=api.timeout)
            if response.status_code != 200:
                raise BuildFailed(f"image build failed: {_response_message(response)}")
            for line in response.iter_lines():
                if line.strip():
                    event = json.loads(line)
                    if "error" in event:
                        event["error"] = str(event["error"])
                    yield event
        finally:
            if response is not None:  # closed: the service stops the build
                response.close()
            archive.close()


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


def split_ref(ref: str) -> tuple[str, str]:
    """Split an image reference into repository and tag (or digest), as the engine API takes them."""
    parsed = ImageRef.parse(ref)
    return parsed.familiar_name, parsed.digest or parsed.tag_or_latest


_DIGEST_STATUS = re.compile(r"\bdigest: (sha256:[0-9a-f]{64})\b")


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


def _short(ref: str) -> str:
    return ref[:19] if ref.startswith("sha256:") else ref


def _built_id(tail: list[str], tag: str | None, engine: DockerEngine) -> str | None:
    """The image id from a build's last lines ("Successfully built ID", or a bare id), or the tag's."""
    for line in reversed(tail):
        words = line.split()
        candidate = words[-1] if words else ""
        if len(candidate) in (12, 64) and all(c in "0123456789abcdef" for c in candidate):
            info = engine.image(candidate)
            if info is not None:
                return info.id
    if tag:
        info = engine.image(tag)
        return info.id if info else None
    return None


class _Progress:
    """Turns pull/push progress events into lines, one per layer every few seconds."""

    def __init__(self, on_line: LineSink):
        self.on_line = on_line
        self.last: dict[str, float] = {}

    def __call__(self, event: Mapping) -> None:
        status = event.get("status")
        if not status:
            return
        layer = event.get("id", "")
        if (event.get("progressDetail") or {}).get("current"):
            now = time.monotonic()
            key = f"{layer}:{status}"
            if now - self.last.get(key, 0) < 5:
                return
            self.last[key] = now
            self.on_line(f"{layer} {status} {event.get('progress', '')}".strip())
            return
        self.on_line(f"{layer}: {status}" if layer else status)
