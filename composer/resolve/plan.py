"""The composition plan: everything that goes into a composed image, as one plain typed value.

Data flows one way: the spec (what the user asked, composer.config.options) + the release + what the
base images offer -> a CompositionPlan -> rendering. Validation against the images happens here,
so rendering never sees a bad selection and cannot fail on user input.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from composer import __version__
from composer.catalog.catalog import Catalog, Flavour, FlavourImage, LayerFamily, Release
from composer.core.errors import UsageError
from composer.config.model_envs import ModelEnv, hints
from composer.config.requirements import public_requirement
from composer.core.refs import ImageRef
from composer.config.types import Base, CompositionSpec, Device, Packages, Providers, Result
from composer.config.values import source_date_epoch
from composer.core.words import did_you_mean

ROOT = "/opt/tritonserver"
MODELS_ROOT = "/models"  # where baked models go, and what the image serves by default
KINDS = ("backend", "repoagent", "cache")
FOLDERS = {"backend": "backends", "repoagent": "repoagents", "cache": "caches"}


@dataclass(frozen=True)
class Offer:
    """What a full image offers, and where that knowledge came from (shown in errors)."""

    source: str
    core: tuple[str, ...]
    has_include: bool
    components: Mapping[str, tuple[str, ...]]  # kind -> names
    python_based: frozenset[str] = frozenset()  # backends served through the python backend
    has_pip: bool = True  # whether the python of the full image has pip
    python: str | None = None  # the python the python backend stub runs on, e.g. "3.11"
    runtime_python: str | None = None  # the image's own python3 (a venv runs it)
    # How NGC's final stage treats this image, read from the full image (else the catalog's):
    tree_owner: str = "1000:1000"  # "uid:gid" of the Triton tree; "0:0" from 26.06 on
    externally_managed: bool = False  # its python carries the PEP 668 marker
    entrypoint_d: bool = True  # /opt/nvidia/entrypoint.d
    serve: bool = False  # /usr/bin/serve (SageMaker-enabled images)
    # ONNX Runtime's provider libraries in its backend folder ("shared" included); None: not known
    # (a plan from the catalog), so a name given is not checked against the image
    ort_providers: tuple[str, ...] | None = None

    @classmethod
    def from_layout(cls, catalog: Catalog, release: Release) -> "Offer":
        layout = catalog.ngc_layout
        backends = tuple(b for b in layout.backends if release.tensorflow or b != "tensorflow")
        return cls(
            source=f"NGC's {release.name} full image (as catalogued; no engine was asked)",
            core=layout.core,
            has_include=True,
            components={"backend": backends, "repoagent": layout.repoagents, "cache": layout.caches},
            python=release.python,
            runtime_python=release.python,
            tree_owner=release.tree_owner,
            externally_managed=release.externally_managed,
        )

    @classmethod
    def from_flavour(cls, flavour: FlavourImage, release: Release) -> "Offer":
        """What a flavour's image holds as the catalog says (no engine was asked)."""
        return cls(
            source=f"NGC's {release.name} {flavour.name} image (as catalogued; no engine was asked)",
            core=(),
            has_include=False,
            components={"backend": flavour.backends, "repoagent": (), "cache": ()},
            python=release.python,
            runtime_python=release.python,
        )

    @classmethod
    def from_contents(cls, contents) -> "Offer":
        """From composer.resolve.contents.FullImageContents (what the probe found in the image)."""
        names = {kind: tuple(contents.names(kind)) for kind in KINDS}
        core = tuple(p.rsplit("/", 1)[-1] for p in contents.core_paths if not p.endswith("/include"))
        return cls(
            source=f"image {contents.image}",
            core=core,
            has_include=any(p.endswith("/include") for p in contents.core_paths),
            components=names,
            python_based=frozenset(c.name for c in contents.components if c.kind == "backend" and c.python_based),
            has_pip=bool(contents.python and contents.python.has_pip),
            python=contents.stub_python_version,
            runtime_python=contents.python.version if contents.python else None,
            tree_owner="0:0" if contents.owner and contents.owner[0] == 0 else "1000:1000",
            externally_managed=bool(contents.python and contents.python.externally_managed),
            entrypoint_d=contents.entrypoint_d,
            serve=contents.serve,
            ort_providers=next((c.providers for c in contents.components
                                if c.kind == "backend" and c.name == "onnxruntime"), ()),
        )


@dataclass(frozen=True)
class FlavourBase:
    """The flavour's image a composition is built on (--flavour), and what it holds."""

    name: str
    catalogued: tuple[str, ...]  # the backends the catalog says its image holds (taken from it)
    offer: Offer  # what the image holds (probed, or as catalogued)
    server_version: str | None  # as its environment states
    cuda_major: str | None  # as its libcudart soname says
    built_on: str  # what NGC builds the flavour's image on

    @classmethod
    def of(cls, flavour: FlavourImage, offer: Offer, env: Mapping[str, str], cuda_major: str | None) -> "FlavourBase":
        return cls(flavour.name, flavour.backends, offer, env.get("TRITON_SERVER_VERSION"), cuda_major,
                   flavour.built_on)


def check_flavour_base(flavour: FlavourBase, asked: tuple[str, ...], base_ref: str, full_ref: str, full_offer: Offer,
                       full_server: str | None, full_cuda: str | None) -> None:
    """The flavour's image and the py3 full image must agree where parts of one run on the other:
    one server, one CUDA major, one python; and the flavour's image must hold what is asked of it.
    Each refusal names both images."""
    pairs = (
        ("server versions differ", flavour.server_version, full_server, "server"),
        ("CUDA majors differ", flavour.cuda_major, full_cuda, "libcudart.so."),
        ("python versions differ", flavour.offer.python, full_offer.python, "python "),
    )
    for what, base_value, full_value, shown in pairs:
        if base_value and full_value and base_value != full_value:
            raise UsageError(
                f"--flavour {flavour.name}: {what}: {base_ref} has {shown}{'' if shown.endswith(('.', ' ')) else ' '}"
                f"{base_value}, {full_ref} has {shown}{'' if shown.endswith(('.', ' ')) else ' '}{full_value}: "
                "parts of one cannot run on the other")
    held = flavour.offer.components.get("backend", ())
    for name in asked:
        if name in flavour.catalogued and name not in held:
            raise UsageError(f"--flavour {flavour.name} -b {name}: {base_ref} does not hold backend {name} (it holds "
                             f"{', '.join(held) or 'none'}); the {flavour.name} flavour takes "
                             f"{', '.join(flavour.catalogued)} from its own image")


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


def foreign_backend(name: str, image: BaseImage, offer: Offer, release: str | None) -> ForeignBackend:
    """Check that `image` offers backend `name` before the plan takes it from there."""
    _validated("backend", (name,), offer)
    return ForeignBackend(name, image, release, name in offer.python_based)


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

    @property
    def description(self) -> str:
        """What the image's history says of the layer."""
        where = ", ".join(c.dest for c in self.copies)
        return f"{self.kind} {self.name} ({where})" if self.name != self.kind else f"{self.kind} ({where})"


STAGE_LABEL = "org.triton-composer.stage-of"  # "<stage> <run>": a stage of one build the composer reads from
RUN_LABEL = "org.triton-composer.run"  # on the final stages' images: the build that made them (theirs alone)
SYSTEM_TREE = "/composer-system/tree"  # what the system stage's steps wrote, as a tree
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
    model_envs: tuple[ModelEnv, ...] = ()  # python models' own environments (composer.resolve.model_envs)
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
        return ("onnxruntime",) if self.ort_providers is not None and "onnxruntime" in self.backends else ()

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
        if "python" in self.base_backends:
            return False
        return "python" in self.all_backends or any(
            (c.source / "model.py").is_file() and not (c.source / f"libtriton_{c.name}.so").is_file()
            for c in self.custom_backends)

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
        server's user) runs over, then the rest (model environments, baked models). The system
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
        if self.packages:
            first.append(LayerPart("packages", "added packages", "packages",
                                   (Copy("/composer/site-packages", self.site_packages),)))
            first.append(LayerPart("record", "composition record", "packages",
                                   (Copy("/composer/composition.json", f"{ROOT}/composition.json"),), own))
        else:
            first.append(LayerPart("record", "composition record", FROM_CONTEXT,
                                   (Copy("composition.json", f"{ROOT}/composition.json"),), own))
        if self.copy_entrypoint_d:
            first.append(LayerPart("server", "entrypoint scripts", FROM_FULL,
                                   (Copy("/opt/nvidia/entrypoint.d", "/opt/nvidia/entrypoint.d", True),)))
        if self.copy_serve:
            first.append(LayerPart("server", "serve", FROM_FULL, (Copy("/usr/bin/serve", "/usr/bin/serve"),)))
        rest: list[LayerPart] = []
        for env in self.model_envs:
            rest.append(LayerPart("model env", env.model, "model-envs", (Copy(env.path, env.path),)))
        if self.baked_models:
            rest.append(LayerPart("models", "baked models", FROM_CONTEXT, (Copy("models", MODELS_ROOT, True),), own))
        return tuple(first), tuple(rest)

    @property
    def system_part(self) -> LayerPart:
        """What the system stage wrote over the copied files: the loader's cache, the server's user
        (and, on a GPU image, the CUDA compat wiring)."""
        return LayerPart("system", "loader cache, user, byte-code", "system", (Copy(SYSTEM_TREE, "/", True),))

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

    def read_stages(self) -> tuple[str, ...]:
        """The build's stages the composer reads layers from (each labelled STAGE_LABEL)."""
        names = []
        for part in self.all_parts():
            if part.source not in (FROM_FULL, FROM_CONTEXT) and part.source not in names and \
                    not part.source.startswith("backend-"):
                names.append(part.source)
        return tuple(names)

    def dropped_provider_filter(self) -> tuple[str, ...]:
        """find(1) arguments naming the provider libraries of the onnxruntime folder that go."""
        kept = list(self.ort_providers or ())
        if kept:
            kept.append(Providers.SHARED)
        args = ["-maxdepth", "1", "-name", "libonnxruntime_providers_*.so"]
        for name in sorted(kept):
            args += ["!", "-name", f"libonnxruntime_providers_{name}.so"]
        return tuple(args)

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


def check_image_release(release: Release, full_env: Mapping[str, str] | None) -> Release:
    """The full image must be of the release the composition is for, when it says which."""
    stated = (full_env or {}).get("NVIDIA_TRITON_SERVER_VERSION")
    if stated and stated != release.name:
        raise UsageError(f"--version {release.name} does not match the full image, which is release {stated}")
    return release


def resolve_release(version: str | None, catalog: Catalog, full_env: Mapping[str, str] | None) -> Release:
    """The release: --version if given, else read from the full image's environment."""
    if version:
        return check_image_release(catalog.release(version), full_env)
    if full_env is None:  # composer.config.rules: a release is named, or a full image whose environment says it
        raise ValueError("resolve_release: neither a release nor the full image's environment")
    name = full_env.get("NVIDIA_TRITON_SERVER_VERSION")
    if name:
        return catalog.release(name)
    server = full_env.get("TRITON_SERVER_VERSION")
    release = catalog.by_server(server) if server else None
    if release is None:
        raise UsageError(
            "cannot tell the Triton release of the full image (no NVIDIA_TRITON_SERVER_VERSION "
            "or known TRITON_SERVER_VERSION in its environment); give --version YY.MM"
        )
    return release


def image_refs(spec: CompositionSpec, release: Release) -> tuple[str, str]:
    """The full and min image references for this release, honouring --image and --registry."""
    images = spec.images
    return images.full or release.full_ref(images.registry), images.min or release.min_ref(images.registry)


def make_plan(
    spec: CompositionSpec,
    release: Release,
    offer: Offer,
    catalog: Catalog,
    full: BaseImage,
    minimal: BaseImage,
    full_env: Mapping[str, str] | None = None,
    foreign: tuple[ForeignBackend, ...] = (),
    created: str | None = None,
    notes: tuple[str, ...] = (),
    packages: Packages | None = None,
    model_envs: tuple[ModelEnv, ...] = (),
    min_config: BaseConfig | None = None,
    flavour: FlavourBase | None = None,
    full_cuda_major: str | None = None,
) -> CompositionPlan:
    """Check the selection against what the full image offers and fix every detail of the image.

    `created` is the image's creation time for its OCI label (resolved once, by the caller);
    `packages` the spec's packages as the build installs them (fetched into a wheelhouse by
    composer.resolve.resolve), so the spec itself is never rewritten; `min_config` the min image's
    configuration (needed for --base pruned); `flavour` the flavour's image the image is built on
    (the min role), checked against the full image (`full_cuda_major`: its libcudart's major).
    """
    options = spec.selection
    custom = _custom_backends(options.custom_backends)
    custom_names = {c.name for c in custom}
    foreign = tuple(sorted(foreign, key=lambda f: f.name))
    custom_names |= {f.name for f in foreign}
    base_backends: tuple[str, ...] = ()
    if flavour is not None:
        check_flavour_base(flavour, options.backends, minimal.ref, full.ref, offer,
                           (full_env or {}).get("TRITON_SERVER_VERSION"), full_cuda_major)
        # Every backend of the flavour's image is in the composed image (it is the base), asked or not.
        held = flavour.offer.components.get("backend", ())
        base_backends = tuple(sorted(b for b in flavour.catalogued if b in held and b not in custom_names))
        custom_names_or_base = custom_names | set(base_backends)
    else:
        custom_names_or_base = custom_names
    backends = _validated("backend", options.backends, offer, exclude=custom_names_or_base)
    repoagents = _validated("repoagent", options.repoagents, offer)
    caches = _validated("cache", options.caches, offer)

    notes: list[str] = list(notes)
    for other in foreign:
        if other.release and other.release != release.name:
            notes.append(
                f"warning: backend {other.name} comes from release {other.release} ({other.image.ref}) but the "
                f"server is {release.name}: backends and server of different releases may not work together"
            )
    # A Python-based backend (a model.py in its folder) is served through the python backend.
    needs_python = sorted({b for b in backends if b in offer.python_based} | {f.name for f in foreign if f.python_based})
    if needs_python and "python" not in backends and flavour is not None and "python" in flavour.catalogued:
        if "python" not in base_backends:
            base_backends = tuple(sorted(set(base_backends) | {"python"}))
            notes.append(f"kept the {flavour.name} image's python backend: {', '.join(needs_python)} run through it")
    elif needs_python and "python" not in backends:
        if "python" not in offer.components.get("backend", ()):
            raise UsageError(
                f"backend {needs_python[0]} is Python-based and needs the python backend, "
                f"which {offer.source} does not offer"
            )
        backends = tuple(sorted(set(backends) | {"python"}))
        notes.append(f"added the python backend: {', '.join(needs_python)} run through it")
    if options.with_headers and not offer.has_include:
        raise UsageError(f"--with-headers: {offer.source} has no /opt/tritonserver/include")

    all_backends = sorted(set(backends) | custom_names | set(base_backends))
    packages = spec.packages if packages is None else packages
    server_version = (full_env or {}).get("TRITON_SERVER_VERSION") or release.server
    model_envs = _model_envs(model_envs, all_backends, offer, server_version)
    notes += hints(model_envs, spec.result.model_repository)
    if server_version != release.server:
        notes.append(f"warning: the full image states server {server_version}, but release {release.name} "
                     f"ships server {release.server}: the image's own version is used and checked")
    providers = _ort_providers(options, backends, offer)
    cpu = options.device.cpu_only
    env = _environment(release, server_version, catalog, all_backends, full_env, offer)
    if cpu:
        env = tuple((k, "0" if k == "TRITON_SERVER_GPU_ENABLED" else v) for k, v in env)
    tag = spec.result.tag or default_tag(release, all_backends, repoagents, caches,
                                         flavour=_flavour(cpu, options.ort_providers))
    labels = _labels(release, server_version, full, minimal, all_backends, repoagents, caches, created,
                     spec.result.labels)
    if flavour is not None:
        notes.append(f"built on the {flavour.name} image {minimal.ref} (NGC builds it on {flavour.built_on}); "
                     f"from it: the server core and backends {', '.join(base_backends) or 'none'}")
        labels = tuple(sorted({**dict(labels), "org.triton-composer.flavour": flavour.name}.items()))
    if cpu or providers is not None:
        extra = {"org.triton-composer.device": str(options.device)}
        if providers is not None:
            extra["org.triton-composer.ort-providers"] = ",".join(Providers.listing(providers))
        labels = tuple(sorted({**dict(labels), **extra}.items()))
    return CompositionPlan(
        release=release,
        full=full,
        min=minimal,
        backends=backends,
        repoagents=repoagents,
        caches=caches,
        custom_backends=custom,
        core=() if flavour is not None else offer.core,  # a flavour's image has the server core
        with_headers=options.with_headers,
        env=env,
        labels=labels,
        tag=tag,
        notes=tuple(notes),
        packages=packages,
        constraints=release_constraints(release) if packages or model_envs else (),
        pip_in_image=offer.has_pip,
        site_packages=f"/usr/local/lib/python{offer.python or release.python}/dist-packages" if packages else None,
        foreign_backends=foreign,
        pip_command=_pip_command(packages, offer, full.ref),
        server_version=server_version,
        chown=None if offer.tree_owner == "0:0" else offer.tree_owner,
        copy_entrypoint_d=offer.entrypoint_d,
        copy_serve=offer.serve,
        gpu=dict(env).get("TRITON_SERVER_GPU_ENABLED") == "1" and not cpu,
        baked_models=options.bake_models,
        model_envs=model_envs,
        python=offer.python if model_envs else None,
        smoke=spec.result if spec.result.smoke_test else None,
        pruning=_pruning(options, release, catalog, min_config),
        device=options.device,
        ort_providers=providers,
        flavour=Flavour(flavour.name) if flavour is not None else Flavour(),
        created=created or rfc3339(0),
        base_backends=base_backends,
    )


def _flavour(cpu: bool, providers: tuple[str, ...]) -> str:
    """What the default tag adds for a CPU-only image or a choice of providers."""
    parts = (["ort-" + "-".join(providers)] if providers else []) + (["cpu"] if cpu else [])
    return "-".join(parts)


def _ort_providers(options, backends, offer: Offer) -> tuple[str, ...] | None:
    """ONNX Runtime's providers kept (composer.config.types.Providers), or None for the backend's
    folder as it is (the default on a GPU image); the names checked against the folder, when the
    probe read it (the rules checked them against the catalog, and everything else, up front)."""
    kept = options.providers.kept
    if "onnxruntime" not in backends or kept is None:
        return None
    if offer.ort_providers is not None:
        offered = tuple(p for p in offer.ort_providers if p != Providers.SHARED)
        for name in kept:
            if name not in offered:
                raise UsageError(
                    f"unknown ONNX Runtime provider '{name}'{did_you_mean(name, offered)}: the onnxruntime backend of "
                    f"{offer.source} holds {', '.join(offered) if offered else 'none'} (and CPU, always there)")
    return kept


def _pruning(options, release: Release, catalog: Catalog, min_config: BaseConfig | None) -> Pruning | None:
    """How the pruned base is made, or None for the min base; refused where it cannot be made."""
    if options.base_of is not Base.PRUNED:
        return None
    loaded = catalog.loaded_at_run_time_for(release)
    if min_config is None:
        raise UsageError("--base pruned needs the min image's configuration: render it with a Docker engine")
    python = not options.flavour.on_min_image  # a flavour's image: its python distributions are pruned
    layers = tuple(f for f in catalog.pruned_base_layers if python or not f.python_distributions)
    return Pruning(tuple(sorted(loaded.items())), min_config, options.keep_tensorrt_builder, layers, catalog.layer_bytes)


def _pip_command(packages: Packages, offer: Offer, full_ref: str) -> tuple[str, ...]:
    """How the packages stage runs pip: the full image's own, or pip straight from its wheel.

    The build installs from a wheelhouse only (composer build fetches one on the host when the
    packages come from an index), so no index URL ever reaches the engine.
    """
    if not packages:
        return ()
    if packages.wheelhouse is None:
        raise UsageError(
            "python packages are installed from a wheelhouse: give --wheelhouse DIR (composer wheels -o DIR "
            "fills one), or let composer build or render fetch them with an engine at hand"
        )
    pips = sorted(packages.wheelhouse.glob("pip-*.whl"))
    if pips:
        return ("python3", f"/composer/packages/wheelhouse/{pips[-1].name}/pip")
    if not offer.has_pip:
        raise UsageError(
            f"--wheelhouse {packages.wheelhouse} holds no pip wheel and the full image has no pip "
            "(composer wheels puts one in)"
        )
    return ("python3", "-m", "pip")


def _model_envs(envs: tuple[ModelEnv, ...], backends, offer: Offer, server_version: str) -> tuple[ModelEnv, ...]:
    """The environments, checked against the image: the python backend, its stub's python (the
    image's own), a server that takes a folder; each with how its build stage runs pip."""
    if not envs:
        return ()
    check_server(server_version)
    ready = []
    for env in envs:
        if env.wheelhouse is None:
            raise UsageError(f"model {env.model}: its environment is built from wheels fetched on this machine: "
                             "give --wheelhouse DIR, or let composer build or render fetch them with an engine at hand")
        pips = sorted(env.wheelhouse.glob("pip-*.whl"))
        pip = (f"/composer/model_envs/{env.model}/wheelhouse/{pips[-1].name}/pip",) if pips else ("-m", "pip")
        ready.append(dataclasses.replace(env, pip=pip))
    return tuple(ready)


FIRST_SERVER_TAKING_FOLDERS = (2, 36, 0)  # python backend: takes an environment folder as it is


def check_server(server_version: str) -> None:
    """The release's python backend must take an environment folder as it is."""
    numbers = tuple(int(n) for n in re.findall(r"\d+", server_version)[:3])
    if numbers and numbers < FIRST_SERVER_TAKING_FOLDERS:
        raise UsageError(f"model environments need server 2.36.0 (23.07) or newer, whose python backend takes "
                         f"an environment folder; this image's server is {server_version}")


def release_constraints(release: Release) -> tuple[str, ...]:
    """The pins pip must hold for the release's python backend (numpy<2 from 24.06 on)."""
    return (release.numpy,) if release.numpy else ()


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


def default_tag(release: Release, backends, repoagents=(), caches=(), flavour: str = "") -> str:
    """e.g. triton-composer/tritonserver:24.09-onnxruntime-python (-cpu for a CPU-only image)"""
    parts = [release.name, *sorted(backends), *sorted(repoagents), *(f"cache-{c}" for c in sorted(caches))]
    parts += [flavour] if flavour else []
    tag = "-".join(parts)
    if len(tag) > 128:  # Docker's limit on a tag
        import hashlib

        tag = f"{release.name}-{hashlib.sha256(tag.encode()).hexdigest()[:12]}"
    return f"triton-composer/tritonserver:{tag}"


def _validated(kind: str, names: tuple[str, ...], offer: Offer, exclude=frozenset()) -> tuple[str, ...]:
    offered = tuple(offer.components.get(kind, ()))
    for name in names:
        if name in exclude:
            continue
        if name not in offered:
            listing = ", ".join(offered) if offered else "none"
            raise UsageError(
                f"unknown {kind} '{name}'{did_you_mean(name, offered)}: {offer.source} offers {FOLDERS[kind]}: {listing}"
            )
    return tuple(sorted(set(n for n in names if n not in exclude)))


def _custom_backends(pairs: tuple[tuple[str, Path], ...]) -> tuple[CustomBackend, ...]:
    """Each --custom-backend folder (its name and content checked by composer.config.rules)."""
    return tuple(sorted((CustomBackend(name, source.resolve()) for name, source in pairs), key=lambda c: c.name))


def _environment(release: Release, server_version: str, catalog: Catalog, backends, full_env,
                 offer: Offer) -> tuple[tuple[str, str], ...]:
    """The environment NGC's final stage sets for this generation, plus what the backends need."""
    full_env = full_env or {}
    env = {
        "TRITON_SERVER_VERSION": server_version,
        "NVIDIA_TRITON_SERVER_VERSION": release.name,
        "TRITON_SERVER_USER": "triton-server",
        "TRITON_SERVER_GPU_ENABLED": full_env.get("TRITON_SERVER_GPU_ENABLED", "1"),
        "PATH": "/opt/tritonserver/bin:${PATH}",
        **catalog.final_stage_env,
    }
    if "tensorflow" in offer.components.get("backend", ()):
        env.update(catalog.tensorflow_env)
    if offer.externally_managed and "python" in backends:
        env.update(catalog.externally_managed_env)
    for backend in backends:
        env.update(catalog.backend_env.get(backend, {}))
    return tuple(env.items())


BACKENDS_LABEL = "org.triton-composer.backends"  # on every composed image (never on a pruned base)


def _labels(release, server_version: str, full: BaseImage, minimal: BaseImage, backends, repoagents, caches, created=None,
            user=()) -> tuple[tuple[str, str], ...]:
    labels = {
        **dict(user),
        "org.opencontainers.image.created": created,
        "com.nvidia.tritonserver.version": server_version,
        "org.opencontainers.image.title": "Triton Inference Server (composed)",
        "org.opencontainers.image.version": release.name,
        "org.opencontainers.image.base.name": minimal.ref,
        "org.triton-composer.version": __version__,
        "org.triton-composer.release": release.name,
        BACKENDS_LABEL: ",".join(backends),
        "org.triton-composer.repoagents": ",".join(repoagents),
        "org.triton-composer.caches": ",".join(caches),
        "org.triton-composer.full-image": full.ref,
    }
    if minimal.digest:
        labels["org.opencontainers.image.base.digest"] = minimal.digest
    return tuple(sorted((key, value) for key, value in labels.items() if value))
