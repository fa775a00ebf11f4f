"""The container engine as the rest of the composer sees it: the ContainerEngine interface
(named Engine elsewhere) and the plain values it answers with (ImageInfo, Layer, RunResult,
Container). The kinds of engine sit above it (docker.py, podman.py, chosen by connect.py), so
the composer and its tests' fake engine depend on this module alone.
"""

from __future__ import annotations

import shutil
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator, Mapping, Protocol, Sequence, Union

from composer.core.errors import ComposerError, EngineError, ImageNotFound
from composer.core.progress import LineSink, quiet
from composer.core.redaction import redact
from composer.core.refs import digest_for
from composer.engine import tunnels

# GPUs a container asks for: "all", "none" or a count.
Gpus = Union[str, int]


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
    # Whether export_path hands out files with their owners (Podman's archive gives its caller's;
    # export_tree keeps them on every engine; a part's own list of owners, LayerPart.owners, where not).
    archives_keep_owners = True
    # Whether a build's stages after the parts stand on the image the composer loads of the base and
    # those parts (composer.pipeline._build_on_files): an engine whose builder runs every stage before
    # its target (Docker's classic builder) and that takes a partial load; off by default.
    builds_on_files = False
    # Whether build() takes `cache_from` as Docker's classic builder does (a step from the build cache
    # only where it is, or is under, one of those images) and reports its steps' images: what lets
    # a --no-cache run build a stage two of its builds share once (composer.pipeline). Podman's
    # cache-from names a registry repository instead, BuildKit has its own (composer.engine.buildkit).
    takes_cache_from = False

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

    def export_tree(self, image: str, *, labels: Mapping[str, str] | None = None) -> Iterator[bytes]:
        """A tar of the whole of `image` with its files' owners (export_path's "/", where that
        keeps them: archives_keep_owners), read through a container created, never started."""
        return self.export_path(image, "/", labels=labels)

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

    def layers_bytes(self) -> int | None:
        """Bytes of every layer the engine stores, each counted once (docker system df's images
        size); None when it cannot say."""
        return None

    @abstractmethod
    def images_labelled(self, label: str, *, untagged: bool = False) -> list[str]:
        """Ids of images carrying `label` (key or key=value); with `untagged`, only those no tag
        names (a multi-stage build's stage images, which label themselves only by inheritance)."""

    @abstractmethod
    def first_labelled(self, label: str) -> str | None:
        """The image a label first appears on: of the images carrying it (intermediate ones too),
        the one built on an image that does not. A stage's last image, when its label is set there,
        though the stages built FROM it inherit the label."""

    def image_graph(self) -> dict[str, tuple[str, int, bool]]:
        """Every image (intermediate ones too): id -> (its parent's id or "", its bytes with its
        parents', whether a tag names it); {} when the engine keeps no parents."""
        return {}

    def labelled_roots(self, label: str) -> list[str]:
        """Every image a label first appears on (first_labelled's, when builds of the same steps at
        once made several), newest first."""
        first = self.first_labelled(label)
        return [first] if first else []

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
        target: str | None = None,
        cache_from: Sequence[str] = (),
        steps: list[str] | None = None,
    ) -> str:
        """Build `context` (to its stage `target`, or its last) and return the image id; on failure
        the output tail is kept.

        `redact` scrubs every line before it is shown or kept (build arguments may hold secrets).
        Where the engine `takes_cache_from`: `cache_from` limits the build cache to those images
        and the steps under them, and `steps` gets the id of each step's image as it is made.
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
        entrypoint: list[str] | None = None,
    ) -> Container:
        """Start a container with `ports` published where only this machine reaches them
        (the local engine's loopback), or where the remote engine publishes them. `entrypoint`
        replaces the image's."""

    def put_files(self, container_id: str, files: Mapping[str, bytes]) -> None:
        """Write files into a container, running or not."""
        raise EngineError("this engine cannot write files into a container")

    def container_root(self, container_id: str) -> Path | None:
        """The running container's root filesystem as this machine mounts it (a local engine's
        overlay), or None: a remote engine, or a storage this machine does not see."""
        return None

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


# The label a stage's last step carries when the composer reads that stage (with the composition's
# key): what a builder that keeps no stages (BuildKit) must load into the engine.
STAGE_LABEL = "org.triton-composer.cached-stage"


class Builder(Protocol):
    """What builds a rendered context into an image the engine then holds: the engine itself (its
    build), or BuildKit (composer.engine.buildkit), which loads what it built into the engine."""

    def build(self, context: Path, *, dockerfile: str = "Dockerfile", tag: str | None = None,
              labels: Mapping[str, str] | None = None, network_mode: str | None = None,
              buildargs: Mapping[str, str] | None = None, nocache: bool = False,
              redact: Callable[[str], str] = ..., on_line: LineSink = quiet, target: str | None = None) -> str: ...
