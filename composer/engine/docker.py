"""DockerEngine: the ContainerEngine over the Docker SDK. The same Docker API is served by Docker
engines (local, remote over tcp:// or ssh://, in a container) and by Podman's service, whose
builds differ (podman.py)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import tarfile
import time
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator, Mapping, Sequence

import docker.errors
import docker.types
import requests.exceptions

from composer.core import interrupts
from composer.core.docker_config import login_for
from composer.core.errors import BuildFailed, EngineError, EngineUnavailable, ImageNotFound, RegistryError
from composer.core.progress import Heartbeat, LineSink, quiet
from composer.core.refs import ImageRef
from composer.engine import tunnels
from composer.engine.endpoints import Endpoint
from composer.engine.errors import (_Absent, _explain, _not_found_command, _one_line, _patiently, _response_message,
                                    _translated, with_runtime_hint)
from composer.engine.interface import Container, ContainerEngine, Gpus, ImageInfo, Layer, RunResult, gpu_request

_RUNNING = re.compile(r"---> Running in ([0-9a-f]{12})")  # a build step's container, as the engine names it
_STEP = re.compile(r"^ ---> ([0-9a-f]{12,64})$")  # a build step's image (cached or made), as the classic builder names it


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


class DockerEngine(ContainerEngine):
    """A Docker engine reached through the Docker SDK (Podman's service: PodmanEngine)."""

    is_podman = False
    builds_on_files = True
    takes_cache_from = True

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
        def archive(cid: str) -> Iterator[bytes]:
            stream, _stat = self._api.get_archive(cid, path, chunk_size=1 << 20)
            yield from stream

        return self._through_container(image, f"cannot read {path} of {_short(image)}", labels, archive)

    def _through_container(self, image: str, what: str, labels: Mapping[str, str] | None,
                           read: Callable[[str], Iterable[bytes]]) -> Iterator[bytes]:
        """What `read` streams of a container of `image` created, never started, and removed once
        the stream ends or stops (an archive of a path, or Podman's export of the whole)."""
        api = self._api
        with _translated(what, EngineError, absent_is_error=True):
            # Root by number: a stage holding one family's files has no /etc/passwd to look a name
            # up in. (The engine makes the image's working folder where it is missing, as the classic
            # builder's steps do: whichever builder made the image, the folder is there.)
            created = api.create_container(image, command=["/composer-never-run"], entrypoint=[], user="0:0",
                                           labels=dict(labels or {}), network_disabled=True,
                                           host_config=api.create_host_config(network_mode="none"))
        cid = created["Id"]
        try:
            with _translated(what, EngineError, absent_is_error=True):
                yield from read(cid)
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

    def image_graph(self) -> dict[str, tuple[str, int, bool]]:
        with _translated("cannot list images", EngineError):
            found = self._images(all=True)
        return {img["Id"]: (str(img.get("ParentId") or ""), int(img.get("Size") or 0),
                            any("<none>" not in tag for tag in img.get("RepoTags") or []))
                for img in found}

    def labelled_roots(self, label: str) -> list[str]:
        with _translated("cannot list images", EngineError):
            found = self._images(filters={"label": label}, all=True)
        ids = {img["Id"] for img in found}
        roots = [img for img in found if img.get("ParentId") not in ids]
        if roots and any(img.get("ParentId") for img in found):  # the engine keeps parents: a root without
            # one was loaded whole (a BuildKit stage), one with one was built here; the latter first
            return [img["Id"] for img in sorted(roots, key=lambda img: (not img.get("ParentId"),
                                                                         -int(img.get("Created") or 0)))]
        if len(roots) > 1 and not self.is_podman:
            # Docker keeps the parents of what it builds: images with none were each loaded whole, a
            # stage from a builder (two BuildKit builders that made the same stage): any serves.
            return sorted(img["Id"] for img in roots)
        return super().labelled_roots(label)  # no parents known: first_labelled's way

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
        target: str | None = None,
        cache_from: Sequence[str] = (),
        steps: list[str] | None = None,
    ) -> str:
        with Heartbeat(on_line, f"building {tag or context.name}", self._bytes_stored) as beat:
            return self._build(context, dockerfile, tag, labels, network_mode, buildargs, nocache, redact, beat.on_line,
                               target, cache_from, steps)

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

    def _df(self) -> dict:
        """The engine's `docker system df` answer; {} when it cannot give one."""
        try:
            return self._api.df() or {}
        except (docker.errors.DockerException, requests.exceptions.RequestException, OSError):
            return {}

    def disk_usage(self) -> dict[str, dict]:
        found = self._df()
        return {img["Id"]: {"size": int(img.get("Size") or 0), "shared": max(int(img.get("SharedSize") or 0), 0),
                            "containers": max(int(img.get("Containers") or 0), 0), "created": int(img.get("Created") or 0)}
                for img in found.get("Images") or []}

    def layers_bytes(self) -> int | None:
        size = self._df().get("LayersSize")
        return int(size) if isinstance(size, (int, float)) and size >= 0 else None

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

    def _build(self, context, dockerfile, tag, labels, network_mode, buildargs, nocache, redact, on_line,
               target=None, cache_from=(), steps=None) -> str:
        tail: list[str] = []
        image_id = None
        progress = _Progress(on_line)
        stream = None
        try:
            stream = self._build_events(context, dockerfile, tag, labels, network_mode, buildargs, nocache, target,
                                        cache_from)
            for event in stream:
                interrupts.check()  # a set on another builder's thread: the run is being stopped
                if "stream" in event:
                    for line in redact(event["stream"]).splitlines():
                        if line.strip():
                            tail = (tail + [line])[-40:]
                            on_line(line)
                        made = _STEP.match(line)
                        if made and steps is not None:
                            steps.append(made.group(1))
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

    def _build_events(self, context, dockerfile, tag, labels, network_mode, buildargs, nocache,
                      target=None, cache_from=()) -> Iterator[dict]:
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
                               rm=True, forcerm=True, decode=True, target=target, cache_from=list(cache_from) or None)
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
                    self._put_files(cid, tar_of({k.lstrip("/"): v for k, v in files.items()}))
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

    def _put_files(self, cid: str, archive: bytes) -> None:
        """Copy files into a created container. Podman's service extracts the archive through a
        subprocess that, under the load of builds beside it, may break its pipe: tried once more
        then (seen with two builds at once on one service); any other failure stands."""
        for attempt in (1, 2):
            try:
                self._api.put_archive(cid, "/", archive)
                return
            except docker.errors.APIError as exc:
                if attempt == 2 or not getattr(self, "is_podman", False) or "broken pipe" not in str(exc).lower():
                    raise
                interrupts.pause(1.0)

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
                entrypoint=entrypoint,
            )
        container = Container(self, created["Id"], host=self.endpoint.reach_host)
        try:
            with _translated(f"cannot start a container of {_short(image)}", EngineError, absent_is_error=True):
                if files:
                    self._put_files(container.id, tar_of({k.lstrip("/"): v for k, v in files.items()}))
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

    def put_files(self, container_id: str, files: Mapping[str, bytes]) -> None:
        with _translated(f"cannot write files into container {container_id[:12]}", EngineError, absent_is_error=True):
            self._put_files(container_id, tar_of({k.lstrip("/"): v for k, v in files.items()}))

    def container_root(self, container_id: str) -> Path | None:
        """The overlay's merged folder the engine reports, when this machine mounts it (a local
        engine in this machine's mount namespace)."""
        if self.endpoint.scheme != "unix":
            return None
        try:
            data = (self._api.inspect_container(container_id).get("GraphDriver") or {}).get("Data") or {}
        except docker.errors.DockerException:
            return None
        merged = data.get("MergedDir")
        return Path(merged) if merged and os.path.ismount(merged) else None

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


def split_ref(ref: str) -> tuple[str, str]:
    """Split an image reference into repository and tag (or digest), as the engine API takes them."""
    parsed = ImageRef.parse(ref)
    return parsed.familiar_name, parsed.digest or parsed.tag_or_latest


_DIGEST_STATUS = re.compile(r"\bdigest: (sha256:[0-9a-f]{64})\b")


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
