"""The one fake container engine for unit tests: in memory, at the ContainerEngine boundary.

It subclasses the interface, so a method added there and missing here fails every unit test
that makes one, instead of drifting.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping

from composer.engine.interface import Container, ContainerEngine, Gpus, ImageInfo, Layer, RunResult, gpu_request
from composer.core.errors import ImageNotFound, RegistryError

PUSHED_DIGEST = "sha256:" + "d" * 64
FACTS_COMMAND = ["/bin/sh", "/composer-facts.sh"]  # composer.verify.sbom.read_facts, in a built image


def recorded_facts() -> str:
    """What in_image/facts.sh printed in a real 24.09 onnxruntime+python image (stand-ins)."""
    return (Path(__file__).parent / "data" / "facts-24.09-onnxruntime-python.txt").read_text()

# run_once's answer: one result (or error) for every command, or a function of (image, command).
Answer = RunResult | Exception | Callable[[str, list[str]], RunResult]


@dataclass
class FakeEngine(ContainerEngine):
    """Images by name (name -> image id, or a whole ImageInfo), scripted run_once answers,
    recorded starts and pushes, the engine's registry settings and logins."""

    images: dict[str, str] = field(default_factory=dict)
    infos: dict[str, ImageInfo] = field(default_factory=dict)  # full records by name, where a test needs them
    answer: Answer | None = None
    offered_runtimes: frozenset[str] = frozenset({"runc"})
    push_failures: list[str] = field(default_factory=list)
    logs: str = "server log line"
    runs: list[dict] = field(default_factory=list)
    starts: list[dict] = field(default_factory=list)
    pushes: list[tuple[str, object]] = field(default_factory=list)
    running: set[str] = field(default_factory=set)
    removed: list[str] = field(default_factory=list)
    put: list[tuple[str, dict]] = field(default_factory=list)  # files written into running containers
    root: Path | None = None  # where its containers' filesystems are mounted on this machine
    registry_settings: dict = field(default_factory=lambda: {"InsecureRegistryCIDRs": ["127.0.0.0/8"]})
    logins: dict[str, dict] = field(default_factory=dict)  # registry host -> docker login credentials
    asked_logins: list[str] = field(default_factory=list)
    histories: dict[str, list[Layer]] = field(default_factory=dict)  # image -> its layers, oldest first
    builds: list[dict] | None = None  # when a list: builds succeed and are recorded here
    dockerfiles: list[str | None] = field(default_factory=list)  # each build's Dockerfile, as it was then
    archives: dict[tuple[str, str], bytes] = field(default_factory=dict)  # (image, path) -> its tar
    exports: list[tuple[str, str]] = field(default_factory=list)
    loaded: dict[str, dict] = field(default_factory=dict)  # image id -> {"config": bytes, "layers": {diff id: tar}}
    configs: dict[str, dict] = field(default_factory=dict)  # image -> image_config()'s answer
    roots: dict[str, list[str]] = field(default_factory=dict)  # label -> the images labelled_roots() gives

    @classmethod
    def with_images(cls, *names: str, **kwargs) -> "FakeEngine":
        """An engine holding `names`, each its own image."""
        return cls(images={n: f"sha256:{i:064x}" for i, n in enumerate(names, 1)}, **kwargs)

    # -- images -------------------------------------------------------------

    def image(self, ref: str) -> ImageInfo | None:
        if ref in self.infos:
            return self.infos[ref]
        image_id = self.images.get(ref) or (ref if ref in self.images.values() else None)
        if image_id is None:
            return None
        tags = tuple(n for n, i in self.images.items() if i == image_id and n != image_id)
        return ImageInfo(id=image_id, ref=ref, tags=tags, repo_digests=(), env={}, labels={}, size=0)

    def pull(self, ref, *, on_line=None, auth=None) -> ImageInfo:
        raise ImageNotFound(f"cannot pull {ref}: the fake engine reaches no registry")

    def tag(self, image_id: str, ref: str) -> None:
        self.images[ref] = image_id

    def remove_image(self, ref: str, *, force: bool = False, prune: bool = True) -> None:
        image_id = self.images.pop(ref, None)  # a tag: the image goes with its last one, as an engine's does
        if image_id and ref != image_id and not any(i == image_id and n != image_id for n, i in self.images.items()):
            self.images.pop(image_id, None)

    def image_config(self, ref: str) -> dict:
        return self.configs.get(ref) or {"config": {"Env": ["PATH=/usr/bin"], "Cmd": ["tritonserver"]},
                                         "architecture": "amd64", "os": "linux", "variant": ""}

    def export_path(self, image: str, path: str, *, labels=None):
        self.exports.append((image, path))
        if (image, path) not in self.archives:
            raise ImageNotFound(f"cannot read {path} of {image}: no such path in the fake engine")
        data = self.archives[(image, path)]
        for start in range(0, len(data), 4096):
            yield data[start:start + 4096]

    def load_stream(self, archive, what: str) -> None:
        import hashlib
        import json
        import tarfile

        files = {}
        with tarfile.open(fileobj=archive, mode="r|") as tar:
            for member in tar:
                files[member.name] = tar.extractfile(member).read() if member.isreg() else b""
        manifest = json.loads(files["manifest.json"])[0]
        config = files[manifest["Config"]]
        image_id = "sha256:" + hashlib.sha256(config).hexdigest()
        layers = {name.split("/")[0]: files[name] for name in manifest["Layers"] if name in files}
        self.loaded[image_id] = {"config": config, "layers": layers}
        self.images[image_id] = image_id
        for tag in manifest.get("RepoTags") or ():
            self.images[tag] = image_id

    def images_labelled(self, label: str, *, untagged: bool = False) -> list[str]:
        return []

    def first_labelled(self, label: str) -> str | None:
        return None

    def labelled_roots(self, label: str) -> list[str]:
        return list(self.roots.get(label, ()))

    def image_names(self) -> list[str]:
        return [n for n, i in self.images.items() if n != i]

    def history(self, ref: str) -> list[str]:
        return []

    def layers(self, ref: str) -> list[Layer]:
        if ref not in self.histories:
            raise ImageNotFound(f"cannot read the history of {ref}: no such image")
        return list(self.histories[ref])

    def import_rootfs(self, tarball: Path, ref: str, changes: Iterable[str] = ()) -> str:
        self.images[ref] = f"sha256:{len(self.images) + 1:064x}"
        return self.images[ref]

    def build(self, context: Path, **kwargs) -> str:
        if self.builds is None:
            raise NotImplementedError("the fake engine does not build")
        dockerfile = context / kwargs.get("dockerfile", "Dockerfile")
        self.builds.append({"context": context, **kwargs})
        self.dockerfiles.append(dockerfile.read_text() if dockerfile.is_file() else None)  # the build's copy may go after
        image_id = f"sha256:{len(self.images) + 100:064x}"
        if kwargs.get("tag"):
            self.images[kwargs["tag"]] = image_id
        return image_id

    # -- containers ---------------------------------------------------------

    def run_once(self, image, command, *, entrypoint=None, files=None, user=None, labels=None,
                 timeout=300) -> RunResult:
        self.runs.append({"image": image, "command": command, "entrypoint": entrypoint, "files": files})
        if isinstance(self.answer, Exception):
            raise self.answer
        if callable(self.answer):
            return self.answer(image, command)
        return self.answer if self.answer is not None else RunResult(0, "")

    def start(self, image: str, command: list[str] | None = None, *, ports: Iterable[int] = (),
              files: Mapping | None = None, labels: Mapping | None = None, shm_size: str | None = None,
              environment: Mapping | None = None, user: str | None = None, gpus: Gpus | None = None,
              entrypoint: list[str] | None = None) -> Container:
        ports = list(ports)
        gpu_request(gpus)  # refuses a bad value as the real engine does
        container_id = f"container-{len(self.starts) + 1}"
        self.starts.append({"image": image, "command": command, "ports": ports, "files": files,
                            "labels": labels, "shm_size": shm_size, "gpus": gpus, "entrypoint": entrypoint})
        self.running.add(container_id)
        return Container(self, container_id, host="127.0.0.1", ports={p: 40000 + p for p in ports})

    def put_files(self, container_id: str, files) -> None:
        self.put.append((container_id, dict(files)))

    def container_root(self, container_id: str):
        return self.root

    def containers_labelled(self, label: str) -> list[str]:
        return sorted(self.running)

    def container_logs(self, container_id: str, tail="all") -> str:
        return self.logs

    def container_running(self, container_id: str) -> bool:
        return container_id in self.running

    def remove_container(self, container_id: str) -> None:
        if container_id in self.running:
            self.running.discard(container_id)
            self.removed.append(container_id)

    def runtimes(self) -> frozenset[str]:
        return self.offered_runtimes

    # -- registries and archives --------------------------------------------

    def push(self, ref, *, auth=None, on_line=None) -> str:
        self.pushes.append((ref, auth))
        if self.push_failures:
            raise RegistryError(f"cannot push {ref}: {self.push_failures.pop(0)}")
        return PUSHED_DIGEST

    def registry_config(self) -> dict:
        return dict(self.registry_settings)

    def credentials_for(self, registry: str):
        self.asked_logins.append(registry)
        return self.logins.get(registry)

    def save(self, refs, out: Path) -> None:
        out.write_bytes(b"")

    def load(self, archive: Path) -> None:
        pass

    def save_stream(self, ref: str):
        """A save archive of an image this fake loaded (its own layers; the base's are left out)."""
        import io
        import json
        import tarfile

        loaded = self.loaded.get(self.images.get(ref, ref))
        if loaded is None:
            raise ImageNotFound(f"cannot save {ref}: no such image")
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w") as tar:
            for name, data in [("config.json", loaded["config"]),
                               *((f"{hex_}/layer.tar", tar_) for hex_, tar_ in loaded["layers"].items()),
                               ("manifest.json", json.dumps([{"Config": "config.json",
                                                              "Layers": [f"{h}/layer.tar" for h in loaded["layers"]]}]).encode())]:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        yield out.getvalue()
