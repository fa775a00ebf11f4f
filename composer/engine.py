"""The one place that talks to Docker: a thin wrapper over the Docker SDK.

Everything else in the composer speaks in plain values (image references, folders,
dataclasses) and gets engine failures as ComposerError subclasses with a one-line message.
"""

from __future__ import annotations

import io
import json
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping

import docker
import docker.errors
import requests.exceptions

from composer.errors import BuildFailed, EngineUnavailable, ImageNotFound, RegistryError
from composer.progress import LineSink, quiet
from composer.refs import ImageRef, digest_for

# Called with one line of engine output (a build step, pull progress, ...).

START_HINT = "start one with scripts/ensure-docker, or point DOCKER_HOST at a running engine"



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

    @property
    def digest(self) -> str | None:
        """The registry digest (sha256:...) recorded for this ref's own repository, if any."""
        return digest_for(self.ref, self.repo_digests)


@dataclass
class RunResult:
    exit_code: int
    output: str


@dataclass
class Container:
    """A container the composer started; remove() is safe to call more than once."""

    _engine: "Engine"
    id: str
    ports: dict[int, int] = field(default_factory=dict)

    def host_port(self, container_port: int) -> int:
        return self.ports[container_port]

    def logs(self, tail: int | str = "all") -> str:
        try:
            raw = self._engine.client.api.logs(self.id, stdout=True, stderr=True, tail=tail)
        except docker.errors.APIError:
            return ""
        return raw.decode("utf-8", "replace")

    def running(self) -> bool:
        try:
            state = self._engine.client.api.inspect_container(self.id)["State"]
        except docker.errors.NotFound:
            return False
        return bool(state.get("Running"))

    def remove(self) -> None:
        try:
            self._engine.client.api.remove_container(self.id, force=True, v=True)
        except docker.errors.NotFound:
            pass


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


class Engine:
    """A Docker engine reached through the Docker SDK."""

    def __init__(self, client: docker.DockerClient):
        self.client = client

    @classmethod
    def connect(cls, timeout: int = 600) -> "Engine":
        """Connect the way the docker CLI would (DOCKER_HOST or the local socket)."""
        try:
            client = docker.from_env(timeout=timeout)
            client.ping()
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            where = _engine_address()
            raise EngineUnavailable(f"no Docker engine answers at {where}: {START_HINT}") from exc
        return cls(client)

    # -- images -------------------------------------------------------------

    def image(self, ref: str) -> ImageInfo | None:
        """The local image named `ref` (a tag, digest reference or id), or None."""
        try:
            attrs = self.client.api.inspect_image(ref)
        except docker.errors.ImageNotFound:
            return None
        except docker.errors.APIError as exc:
            raise ImageNotFound(f"cannot inspect image {ref}: {_explain(exc)}") from exc
        config = attrs.get("Config") or {}
        env = dict(item.split("=", 1) for item in (config.get("Env") or []) if "=" in item)
        return ImageInfo(
            id=attrs["Id"],
            ref=ref,
            tags=tuple(attrs.get("RepoTags") or ()),
            repo_digests=tuple(attrs.get("RepoDigests") or ()),
            env=env,
            labels=dict(config.get("Labels") or {}),
            size=int(attrs.get("Size") or 0),
        )

    def require_image(self, ref: str, *, pull: bool = True, on_line: LineSink = quiet) -> ImageInfo:
        """The image `ref`, pulled if it is not local (and `pull` allows)."""
        info = self.image(ref)
        if info is not None:
            return info
        if not pull:
            raise ImageNotFound(f"image {ref} is not on the engine")
        return self.pull(ref, on_line=on_line)

    def pull(self, ref: str, *, on_line: LineSink = quiet, auth: Mapping[str, str] | None = None) -> ImageInfo:
        repo, tag = split_ref(ref)
        progress = _Progress(on_line)
        try:
            for event in self.client.api.pull(repo, tag=tag, stream=True, decode=True, auth_config=auth):
                if "error" in event:
                    raise ImageNotFound(f"cannot pull {ref}: {event['error'].strip()}")
                progress(event)
        except docker.errors.APIError as exc:
            raise ImageNotFound(f"cannot pull {ref}: {_explain(exc)}") from exc
        except requests.exceptions.RequestException as exc:
            raise EngineUnavailable(f"lost the Docker engine while pulling {ref}: {exc}") from exc
        info = self.image(ref)
        if info is None:
            raise ImageNotFound(f"cannot pull {ref}: the engine reported no image")
        return info

    def tag(self, image_id: str, ref: str) -> None:
        repo, tag = split_ref(ref)
        self.client.api.tag(image_id, repo, tag=tag, force=True)

    def remove_image(self, ref: str, *, force: bool = False) -> None:
        try:
            self.client.api.remove_image(ref, force=force, noprune=False)
        except docker.errors.ImageNotFound:
            pass

    def discard_untagged(self, image_id: str) -> None:
        """Remove an image only if nothing names it, so no existing tag is ever touched."""
        info = self.image(image_id)
        if info is None or info.tags:
            return
        try:
            self.client.api.remove_image(image_id, force=False)
        except docker.errors.APIError:
            pass  # still used by a container or as a parent: leave it

    def images_labelled(self, label: str) -> list[str]:
        """Ids of images carrying `label` (key or key=value)."""
        return [img["Id"] for img in self.client.api.images(filters={"label": label})]

    def containers_labelled(self, label: str) -> list[str]:
        return [c["Id"] for c in self.client.api.containers(all=True, filters={"label": label})]

    def import_rootfs(self, tarball: Path, ref: str, changes: Iterable[str] = ()) -> str:
        """Load a root filesystem tarball as an image (docker import)."""
        repo, tag = split_ref(ref)
        with open(tarball, "rb") as fh:
            result = self.client.api.import_image_from_data(
                fh, repository=repo, tag=tag, changes=list(changes) or None
            )
        status = json.loads(result.splitlines()[-1]) if isinstance(result, str) else result
        if isinstance(status, dict) and "error" in status:
            raise BuildFailed(f"cannot import {tarball}: {status['error']}")
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
        """Build `context` and return the image id; on failure the output tail is kept.

        `redact` scrubs every line before it is shown or kept (build arguments may hold secrets).
        """
        tail: list[str] = []
        image_id = None
        progress = _Progress(on_line)
        try:
            stream = self.client.api.build(
                path=str(context),
                dockerfile=dockerfile,
                tag=tag,
                labels=dict(labels or {}),
                network_mode=network_mode,
                buildargs=dict(buildargs or {}),
                nocache=nocache,
                rm=True,
                forcerm=True,
                decode=True,
            )
            for event in stream:
                if "stream" in event:
                    for line in redact(event["stream"]).splitlines():
                        if line.strip():
                            tail = (tail + [line])[-40:]
                            on_line(line)
                elif "aux" in event and "ID" in event["aux"]:
                    image_id = event["aux"]["ID"]
                elif "error" in event:
                    error = redact(event["error"]).strip()
                    message = error.splitlines()[-1] if error else "unknown error"
                    raise BuildFailed(f"image build failed: {message}", log_tail="\n".join(tail))
                else:
                    progress(event)
        except docker.errors.APIError as exc:
            raise BuildFailed(f"image build failed: {redact(_explain(exc))}", log_tail="\n".join(tail)) from exc
        except requests.exceptions.RequestException as exc:
            raise EngineUnavailable(f"lost the Docker engine during the build: {exc}") from exc
        if image_id is None:
            raise BuildFailed("image build failed: the engine returned no image id", log_tail="\n".join(tail))
        return image_id

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
        """Run `command` in a short-lived container of `image` and return its output.

        `files` are copied into the container (absolute path -> content) before it starts,
        which works with remote engines too, unlike a bind mount.
        """
        api = self.client.api
        created = api.create_container(
            image,
            command=command,
            entrypoint=entrypoint,
            user=user,
            labels=dict(labels or {}),
            network_disabled=True,
            host_config=api.create_host_config(network_mode="none"),
        )
        cid = created["Id"]
        try:
            if files:
                api.put_archive(cid, "/", tar_of({k.lstrip("/"): v for k, v in files.items()}))
            try:
                api.start(cid)
            except docker.errors.APIError as exc:  # e.g. the command does not exist in the image
                return RunResult(127, _explain(exc))
            status = api.wait(cid, timeout=timeout)
            stdout = api.logs(cid, stdout=True, stderr=False).decode("utf-8", "replace")
            stderr = api.logs(cid, stdout=False, stderr=True).decode("utf-8", "replace")
            code = int(status.get("StatusCode", 1))
            return RunResult(code, stdout if code == 0 else (stdout + stderr))
        finally:
            try:
                api.remove_container(cid, force=True, v=True)
            except docker.errors.NotFound:
                pass

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
    ) -> Container:
        """Start a container whose ports are published on 127.0.0.1 (ephemeral host ports)."""
        api = self.client.api
        ports = list(ports)
        host_config = api.create_host_config(
            port_bindings={p: ("127.0.0.1", None) for p in ports},
            shm_size=shm_size,
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
        container = Container(self, created["Id"])
        try:
            if files:
                api.put_archive(container.id, "/", tar_of({k.lstrip("/"): v for k, v in files.items()}))
            api.start(container.id)
            network = api.inspect_container(container.id)["NetworkSettings"]["Ports"] or {}
            for p in ports:
                bindings = network.get(f"{p}/tcp") or []
                container.ports[p] = int(bindings[0]["HostPort"])
        except BaseException:
            container.remove()
            raise
        return container

    # -- registries -----------------------------------------------------------

    def push(
        self, ref: str, *, auth: Mapping[str, str] | None = None, on_line: LineSink = quiet
    ) -> str:
        """Push `ref` and return the digest the registry reported."""
        repo, tag = split_ref(ref)
        digest = None
        progress = _Progress(on_line)
        try:
            for event in self.client.api.push(repo, tag=tag, stream=True, decode=True, auth_config=auth):
                if "error" in event:
                    raise RegistryError(f"cannot push {ref}: {event['error'].strip()}")
                aux = event.get("aux") or {}
                if "Digest" in aux:
                    digest = aux["Digest"]
                progress(event)
        except docker.errors.APIError as exc:
            raise RegistryError(f"cannot push {ref}: {_explain(exc)}") from exc
        except requests.exceptions.RequestException as exc:
            raise EngineUnavailable(f"lost the Docker engine while pushing {ref}: {exc}") from exc
        if digest is None:
            raise RegistryError(f"cannot push {ref}: the registry reported no digest")
        return digest

    def registry_config(self) -> dict:
        """The engine's RegistryConfig (insecure registries and CIDRs), as `docker info` shows it."""
        try:
            return dict(self.client.info().get("RegistryConfig") or {})
        except (docker.errors.APIError, requests.exceptions.RequestException) as exc:
            raise EngineUnavailable(f"cannot read the engine's registry settings: {exc}") from exc

    def credentials_for(self, registry: str) -> dict[str, str] | None:
        """The engine's own credentials for `registry` (~/.docker/config.json, credential helpers).

        What `push`/`pull` use when given no auth; the composer needs them only to talk to a
        registry's HTTP API itself. Returns {"username", "password"} or None.
        """
        import docker.auth

        try:
            config = docker.auth.load_config(credstore_env=self.client.api.credstore_env)
            found = docker.auth.resolve_authconfig(config, registry, credstore_env=self.client.api.credstore_env)
        except docker.errors.DockerException:
            return None
        if not found:
            return None
        username = found.get("username") or found.get("Username")
        password = found.get("password") or found.get("Password")
        if not username or not password:
            return None
        return {"username": username, "password": password}

    def save(self, refs: list[str], out: Path) -> None:
        """Write `refs` to a tar archive (docker save)."""
        # One archive for all refs, so layers they share are stored once; the SDK saves one
        # image at a time, so this asks the engine's /images/get endpoint directly.
        api = self.client.api
        try:
            response = api.get(api._url("/images/get"), params={"names": refs}, stream=True)
            api._raise_for_status(response)
            with open(out, "wb") as fh:
                for chunk in response.iter_content(chunk_size=1 << 20):
                    fh.write(chunk)
        except docker.errors.APIError as exc:
            raise ImageNotFound(f"cannot save {', '.join(refs)}: {_explain(exc)}") from exc

    def load(self, archive: Path) -> None:
        with open(archive, "rb") as fh:  # streamed: base images can be many GB
            for event in self.client.api.load_image(fh):
                if isinstance(event, dict) and "error" in event:
                    raise BuildFailed(f"cannot load {archive}: {event['error']}")


def split_ref(ref: str) -> tuple[str, str]:
    """Split an image reference into repository and tag (or digest), as the engine API takes them."""
    parsed = ImageRef.parse(ref)
    return parsed.familiar_name, parsed.digest or parsed.tag_or_latest


def _engine_address() -> str:
    import os

    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def _explain(exc: docker.errors.APIError) -> str:
    explanation = getattr(exc, "explanation", None) or str(exc)
    if isinstance(explanation, bytes):
        explanation = explanation.decode("utf-8", "replace")
    return str(explanation).strip().splitlines()[0] if str(explanation).strip() else str(exc)


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
        if event.get("progressDetail", {}).get("current"):
            now = time.monotonic()
            key = f"{layer}:{status}"
            if now - self.last.get(key, 0) < 5:
                return
            self.last[key] = now
            self.on_line(f"{layer} {status} {event.get('progress', '')}".strip())
            return
        self.on_line(f"{layer}: {status}" if layer else status)
