"""The plan's types: the composition plan and the values it is made of (base images, the pruned
base's layers, the composition's own layers), plain and frozen, so rendering and the build read one
value. composer.resolve.plan makes them.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from composer import __version__
from composer.backends import ONNXRUNTIME, PYTHON, ROOT, unit
from composer.catalog.catalog import Flavour, LayerFamily, Release
from composer.config.model_envs import ModelEnv
from composer.config.requirements import public_requirement
from composer.config.types import Device, Packages, Result
from composer.config.values import source_date_epoch
from composer.core.refs import ImageRef
from composer.engine.interface import STAGE_LABEL as BUILDER_STAGE_LABEL

__all__ = ["ROOT"]  # ROOT is the backends' (composer.backends.base), named here for the plan's readers too

MODELS_ROOT = "/models"  # where baked models go, and what the image serves by default


@dataclass(frozen=True)
class BaseImage:
    """A base image of the composition: the ref the user gave, and what it resolved to."""

    role: str  # "full", "min" or "backend:<name>"
    ref: str
    id: str | None = None
    digest: str | None = None  # the registry digest of ref's own repository, when it has one
    # What the Dockerfile builds FROM, as resolved (composer.core.refs.build_source): repo@digest, the
    # image id, or the name; None where nothing was resolved (a plan from the catalog).
    source: str | None = None

    @property
    def from_ref(self) -> str:
        """What the Dockerfile builds FROM: pinned by digest when there is one."""
        if self.source:
            return self.source
        if self.digest:
            return str(ImageRef.parse(self.ref).without_tag().with_digest(self.digest))
        return self.ref

    @property
    def in_its_registry(self) -> str | None:
        """repo@digest in the registry ref names, when the image was resolved there (None: local only)."""
        return str(ImageRef.parse(self.ref).without_tag().with_digest(self.digest)) if self.digest else None

    def record(self) -> dict:
        return {"ref": self.ref, "id": self.id, "digest": self.digest}


@dataclass(frozen=True)
class BaseConfig:
    """The min image's configuration: a pruned base is built FROM scratch, so the image restates it."""

    env: tuple[tuple[str, str], ...] = ()
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    workdir: str = ""

    @classmethod
    def of(cls, info) -> "BaseConfig":
        """From composer.engine.interface.ImageInfo."""
        return cls(tuple(info.env.items()), tuple(info.entrypoint), tuple(info.cmd), info.workdir)


@dataclass(frozen=True)
class LayerSlot:
    """One layer of a pruned base: a family's part, named as its stage and its list are."""

    name: str  # "03-cublas", or "07-tensorrt-2" for a family of more than one part
    family: str
    part: int
    takes: str  # the family's own rule ("distribution", "rest", "database") or ""


@dataclass(frozen=True)
class Pruning:
    """How a pruned base is made (--base pruned): the catalog's run-time loads for the release, and
    the family layers it is written as (the same for every release: rules on names and paths)."""

    loaded_at_run_time: tuple[tuple[str, tuple[str, ...]], ...]  # library -> what it loads by name
    min_config: BaseConfig
    keep_tensorrt_builder: bool = False
    layers: tuple[LayerFamily, ...] = ()
    layer_bytes: int = 1_900_000_000

    def loaded_json(self) -> str:
        return json.dumps({library: list(loads) for library, loads in self.loaded_at_run_time}, indent=1) + "\n"

    @property
    def slots(self) -> tuple[LayerSlot, ...]:
        """Every layer of the base, in order: each family's parts (an empty part is a layer too, of
        its list alone: the Dockerfile names every layer before the build knows what each holds)."""
        slots: list[LayerSlot] = []
        for family in self.layers:
            for part in range(1, family.parts + 1):
                suffix = f"-{part}" if family.parts > 1 else ""
                slots.append(LayerSlot(f"{len(slots):02d}-{family.family}{suffix}", family.family, part, family.takes))
        return tuple(slots)

    def layers_json(self) -> str:
        """The table layers.py assigns files by (in the base's context)."""
        return json.dumps({"layer_bytes": self.layer_bytes, "families": [f.to_dict() for f in self.layers],
                           "slots": [dataclasses.asdict(s) for s in self.slots]}, indent=1, sort_keys=True) + "\n"


@dataclass(frozen=True)
class CustomBackend:
    """A backend folder from the user's machine, copied in as backends/<name>."""

    name: str
    source: Path


@dataclass(frozen=True)
class ForeignBackend:
    """A backend taken from another full image, e.g. another release's (--backend-image)."""

    name: str
    image: BaseImage
    release: str | None  # that image's release, when it says
    python_based: bool = False

    @property
    def stage(self) -> str:
        return "backend-" + re.sub(r"[^a-z0-9_.-]", "-", self.name.lower())

    def record(self) -> dict:
        return {**self.image.record(), "release": self.release}



@dataclass(frozen=True)
class Copy:
    """One tree of a layer: `source` put at `dest` in the image; `contents` copies what is inside
    the folder `source` into `dest` (a Dockerfile's `COPY src/ dest/`)."""

    source: str  # an absolute path in the source stage or image, or a path in the build context
    dest: str
    contents: bool = False

    def dockerfile(self) -> tuple[str, str]:
        """The source and destination as a Dockerfile's COPY writes them."""
        if self.contents:
            return self.source.rstrip("/") + "/", self.dest.rstrip("/") + "/"
        return self.source, self.dest


# Where the parts of a layer come from, besides the build's stages.
FROM_CONTEXT = "context"  # files of the build context (custom backends, baked models, the record)
FROM_FULL = "full"  # the full image


@dataclass(frozen=True)
class LayerPart:
    """One layer the composition writes above its base, and where its files come from. The one list
    the Dockerfile's final stage copies from (composer render) and the composer writes its canonical
    layers from (composer build), so both hold the same files."""

    kind: str  # as the size report names it: server, backend, repoagent, cache, libraries, python,
    # packages, model env, models, record, system
    name: str
    source: str  # FROM_FULL, FROM_CONTEXT, or the stage it is read from (collect, packages, system, ...)
    copies: tuple[Copy, ...]
    owner: str | None = None  # "uid:gid" of every entry; None: as the source has it (root's for context files)
    # A list in the source of the entries that are not root's ("uid:gid path", NUL-separated), for
    # an engine whose archive names every file root's (Engine.archives_keep_owners)
    owners: str | None = None

    @property
    def description(self) -> str:
        """What the image's history says of the layer."""
        where = ", ".join(c.dest for c in self.copies)
        return f"{self.kind} {self.name} ({where})" if self.name != self.kind else f"{self.kind} ({where})"


# "<stage> <key>": a stage the composer reads from, named by what it is made of (render.composition_key),
# shared by every build of the same inputs (build cache: `composer cache` lists and clears it)
STAGE_LABEL = BUILDER_STAGE_LABEL  # composer.engine.interface's: a builder loads the stages it names
# Build cache no stage is read from: the pruned base's own decide steps, where they are not the
# composition's (--no-cache): `composer cache` lists and clears it as the stages above. Not
# STAGE_LABEL: a builder would load it (BuildKit loads each stage STAGE_LABEL names).
CACHE_LABEL = "org.triton-composer.build-cache"
RUN_LABEL = "org.triton-composer.run"  # on a run's containers (and a pruned base's stages): the run that made them
BASE_LABEL = "org.triton-composer.pruned-base"  # on a pruned base: the key of what it was made from
BASE_REPOSITORY = "triton-composer/pruned-base"  # where pruned bases are tagged, by release and key
SYSTEM_TREE = "/composer-system/tree"  # what the system stage's steps wrote, as a tree
SYSTEM_OWNERS = "/composer-system/owners"  # that tree's entries that are not root's (system.sh)
PROOF_VERDICT = "/composer-proof/proved.txt"


@dataclass(frozen=True)
class CompositionPlan:
    """Everything the rendered Dockerfile and build context are made from."""

    release: Release
    full: BaseImage
    min: BaseImage
    backends: tuple[str, ...]
    repoagents: tuple[str, ...]
    caches: tuple[str, ...]
    custom_backends: tuple[CustomBackend, ...]
    core: tuple[str, ...]
    with_headers: bool
    env: tuple[tuple[str, str], ...]
    labels: tuple[tuple[str, str], ...]
    tag: str
    notes: tuple[str, ...] = ()
    packages: Packages = Packages()
    constraints: tuple[str, ...] = ()  # release pins pip must hold (numpy<2)
    pip_in_image: bool = True  # the full image's python has pip (else it must come from the wheelhouse)
    # Where added packages go: a folder the stub's python puts on sys.path by itself (the stub
    # ignores PYTHONPATH), ahead of the system's numpy.
    site_packages: str | None = None
    foreign_backends: tuple[ForeignBackend, ...] = ()
    composer_version: str = __version__
    server_version: str = ""  # the server inside, as the full image states it (else the catalog's)
    # NGC's final stage for this image's generation (read from the full image, see Offer):
    chown: str | None = "1000:1000"  # --chown of every Triton COPY; None: root's, as from 26.06
    copy_entrypoint_d: bool = False
    copy_serve: bool = False
    gpu: bool = True  # TRITON_SERVER_GPU_ENABLED: wire the CUDA compat libraries
    pip_command: tuple[str, ...] = ()  # how the packages stage runs pip (the image's, or the wheelhouse's)
    baked_models: Path | None = None  # a model repository on this machine, copied in at MODELS_ROOT
    model_envs: tuple[ModelEnv, ...] = ()  # python models' own environments (composer.config.model_envs)
    python: str | None = None  # the stub's python, which model environments are built for
    smoke: Result | None = None  # the smoke test's settings, as the spec gave them (None: --no-smoke-test)
    pruning: Pruning | None = None  # --base pruned: a new base of only what the selection needs of the min image
    device: Device = Device.GPU  # CPU: an image for hosts with no GPU (--device cpu)
    # ONNX Runtime's providers kept ("shared" with any of them); None: the backend's folder as it is
    ort_providers: tuple[str, ...] | None = None
    flavour: Flavour = Flavour()  # vllm: built on the release's vLLM image, not the min image
    created: str = "1970-01-01T00:00:00Z"  # the image's time (created_label): never the clock
    base_backends: tuple[str, ...] = ()  # backends the flavour's image holds and the image keeps from it

    @property
    def cpu_only(self) -> bool:
        return self.device.cpu_only

    @property
    def epoch(self) -> int:
        """The composition's epoch: every time in its layers and configuration is at most this."""
        return epoch_of(self.created)

    @property
    def trimmed_backends(self) -> tuple[str, ...]:
        """Backends whose folder the collect stage trims (ONNX Runtime's providers left out): copied
        from the collect stage, not from the full image."""
        return (ONNXRUNTIME.name,) if ONNXRUNTIME.trimmed(self.ort_providers, self.backends) else ()

    @property
    def cmd(self) -> tuple[str, ...]:
        """The image's default command, when the composition sets one: a CPU-only image turns the
        pinned memory pool off (overridable, as any default command)."""
        if self.baked_models:
            return ("tritonserver", f"--model-repository={MODELS_ROOT}", *self.server_flags)
        return ("tritonserver", *self.server_flags) if self.server_flags else ()

    @property
    def server_flags(self) -> tuple[str, ...]:
        """What the server needs on this image's hosts (the smoke test passes them too)."""
        return self.device.server_flags

    @property
    def base(self) -> str:
        """What the image is built on, as --base names it: "pruned" or "min"."""
        return "pruned" if self.pruning else "min"

    @property
    def all_backends(self) -> tuple[str, ...]:
        """Backends in the image: from the full image, from other images, and custom ones."""
        others = {c.name for c in self.custom_backends} | {f.name for f in self.foreign_backends}
        return tuple(sorted(set(self.backends) | others | set(self.base_backends)))

    @property
    def python_runtime(self) -> bool:
        """Whether the image gets the python the stub runs on (its own layer): the python backend,
        or a custom backend that is a model.py served through it. A flavour's image has its own."""
        return PYTHON.runtime_needed(self.all_backends, self.base_backends,
                                     [(unit(c.name), c.source) for c in self.custom_backends])

    def component_paths(self) -> list[str]:
        """Folders copied from the full image, relative to /opt/tritonserver."""
        paths = [f"backends/{b}" for b in self.backends]
        paths += [f"repoagents/{r}" for r in self.repoagents]
        paths += [f"caches/{c}" for c in self.caches]
        return paths

    def component_sources(self) -> list[tuple[str, str]]:
        """(stage, folder) of each folder copied in: from the full image, or from the collect stage
        where it was trimmed there."""
        trimmed = {f"backends/{b}" for b in self.trimmed_backends}
        return [("collected" if path in trimmed else "full", path) for path in self.component_paths()]

    def layer_parts(self) -> tuple[tuple[LayerPart, ...], tuple[LayerPart, ...]]:
        """The composition's own layers, in order: those the system stage (the loader cache and the
        server's user) runs over, then the rest (python packages, the composition record, model
        environments, baked models). The system
        stage's own tree and, on a pruned base, the proof's verdict follow them (system_part,
        proof_part)."""
        own = self.chown
        first: list[LayerPart] = []
        if self.pruning:
            first.append(LayerPart("record", "pruning report", "decide",
                                   (Copy("/composer/prune/pruned.json", f"{ROOT}/pruned.json"),)))
        if self.core:
            first.append(LayerPart("server", "server core", FROM_FULL,
                                   tuple(Copy(f"{ROOT}/{p}", f"{ROOT}/{p}") for p in self.core), own))
        if self.with_headers:
            first.append(LayerPart("server", "headers", FROM_FULL, (Copy(f"{ROOT}/include", f"{ROOT}/include"),), own))
        first.append(LayerPart("libraries", "collected libraries", "collected", (Copy("/composer/rootfs", "/", True),)))
        if self.python_runtime:
            first.append(LayerPart("python", "python runtime", "collected", (Copy("/composer/python-rootfs", "/", True),)))
        kinds = {"backends": "backend", "repoagents": "repoagent", "caches": "cache"}
        for stage, path in self.component_sources():
            folder, _, name = path.partition("/")
            first.append(LayerPart(kinds[folder], name, stage, (Copy(f"{ROOT}/{path}", f"{ROOT}/{path}"),), own))
        for other in self.foreign_backends:
            path = f"{ROOT}/backends/{other.name}"
            first.append(LayerPart("backend", other.name, other.stage, (Copy(path, path),), own))
        for custom in self.custom_backends:
            first.append(LayerPart("backend", custom.name, FROM_CONTEXT,
                                   (Copy(f"custom-backends/{custom.name}", f"{ROOT}/backends/{custom.name}"),), own))
        if self.copy_entrypoint_d:
            first.append(LayerPart("server", "entrypoint scripts", FROM_FULL,
                                   (Copy("/opt/nvidia/entrypoint.d", "/opt/nvidia/entrypoint.d", True),)))
        if self.copy_serve:
            first.append(LayerPart("server", "serve", FROM_FULL, (Copy("/usr/bin/serve", "/usr/bin/serve"),)))
        # After the system stage's: the loader cache, the user and the backends' byte-code need
        # none of them, so a new pin or model redoes only its own layer, not the system stage.
        rest: list[LayerPart] = []
        if self.packages:
            rest.append(LayerPart("packages", "added packages", "packages",
                                  (Copy("/composer/site-packages", self.site_packages),)))
            rest.append(LayerPart("record", "composition record", "packages",
                                  (Copy("/composer/composition.json", f"{ROOT}/composition.json"),), own))
        else:
            rest.append(LayerPart("record", "composition record", FROM_CONTEXT,
                                  (Copy("composition.json", f"{ROOT}/composition.json"),), own))
        for env in self.model_envs:
            rest.append(LayerPart("model env", env.model, "model-envs", (Copy(env.path, env.path),)))
        if self.baked_models:
            rest.append(LayerPart("models", "baked models", FROM_CONTEXT, (Copy("models", MODELS_ROOT, True),), own))
        return tuple(first), tuple(rest)

    @property
    def system_part(self) -> LayerPart:
        """What the system stage wrote over the copied files: the loader's cache, the server's user
        (and, on a GPU image, the CUDA compat wiring)."""
        return LayerPart("system", "loader cache, user, byte-code", "system", (Copy(SYSTEM_TREE, "/", True),),
                         owners=SYSTEM_OWNERS)

    @property
    def proof_part(self) -> LayerPart | None:
        """On a pruned base: the proof's verdict, copied from the proof stage."""
        if not self.pruning:
            return None
        return LayerPart("record", "proof", "proof", (Copy(PROOF_VERDICT, f"{ROOT}/proved.txt"),))

    def all_parts(self) -> tuple[LayerPart, ...]:
        """Every layer the composition writes, in the image's order (the SBOM's is added last)."""
        first, rest = self.layer_parts()
        proof = (self.proof_part,) if self.proof_part else ()
        return (*first, self.system_part, *rest, *proof)

    def read_stages(self, parts: tuple[LayerPart, ...] | None = None) -> tuple[str, ...]:
        """The build's stages the composer reads layers from (each labelled STAGE_LABEL): those of
        `parts`, or of every part."""
        names = []
        for part in self.all_parts() if parts is None else parts:
            if part.source not in (FROM_FULL, FROM_CONTEXT) and part.source not in names and \
                    not part.source.startswith("backend-"):
                names.append(part.source)
        return tuple(names)

    def dropped_provider_filter(self) -> tuple[str, ...]:
        """find(1) arguments naming the provider libraries of the onnxruntime folder that go
        (the onnxruntime unit's fragment of _collect.j2)."""
        return ONNXRUNTIME.dropped_provider_filter(self.ort_providers)

    def record(self) -> dict:
        """The composition record written into the image as composition.json."""
        return {
            "composer_version": self.composer_version,
            "release": self.release.name,
            "server_version": self.server_version,
            "backends": list(self.all_backends),
            "custom_backends": [c.name for c in self.custom_backends],
            "repoagents": list(self.repoagents),
            "caches": list(self.caches),
            "with_headers": self.with_headers,
            "base_images": {"full": self.full.record(), "min": self.min.record()},
            "backend_images": {f.name: f.record() for f in self.foreign_backends},
            "requested_packages": [public_requirement(spec) for spec in self.packages.specs],
            # Where baked models are (the smoke test serves them from there); not what they are, so
            # a change of the models leaves every layer before theirs as it was.
            "baked_models": MODELS_ROOT if self.baked_models else None,
            **({"model_envs": {e.model: e.record() for e in self.model_envs}} if self.model_envs else {}),
            "base": self.base,
            **({"device": str(self.device)} if self.cpu_only else {}),
            **({"ort_providers": list(self.ort_providers)} if self.ort_providers is not None else {}),
            **({"flavour": str(self.flavour), "base_backends": list(self.base_backends)}
               if not self.flavour.on_min_image else {}),
        }


BACKENDS_LABEL = "org.triton-composer.backends"  # on every composed image (never on a pruned base)


def created_label(environ: Mapping[str, str], bases: Iterable[str] = ()) -> str:
    """The image's time (RFC 3339, UTC), never the clock: SOURCE_DATE_EPOCH when set, else the
    newest of its base images' own times (`bases`, as their configurations state them), else 1970.
    So the same inputs give the same configuration, and the same image id, on any machine."""
    epoch = environ.get("SOURCE_DATE_EPOCH")
    if epoch is not None:
        return rfc3339(source_date_epoch(epoch))
    return rfc3339(max((epoch_of(created) for created in bases if created), default=0))


def rfc3339(epoch: int) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(epoch, tz=datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def epoch_of(created: str) -> int:
    """Whole seconds since 1970 of an RFC 3339 time as engines print them (fractions and zones alike)."""
    import datetime

    text = created.strip().replace("Z", "+00:00")
    head, dot, rest = text.partition(".")
    if dot:  # engines print nanoseconds, which datetime does not read: keep the zone, drop the fraction
        zone = rest.lstrip("0123456789")
        text = head + zone
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        return 0
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return max(0, int(moment.timestamp()))
