"""The composition spec: everything a user asks of one composed image, as one typed value.

The spec is plain data: frozen dataclasses, filled by composer.config.options (the command line,
set files, bundle records) and checked as a whole by composer.config.rules.validate, once, before
any work. The notions a spec's fields name (the device, ONNX Runtime's providers, the flavour) are
small types here, so no other module compares their strings.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from composer.backends import onnxruntime
from composer.catalog.catalog import Flavour
from composer.config.model_envs import ModelEnv, requested

DEFAULT_REGISTRY = "nvcr.io/nvidia"


class Device(str, enum.Enum):
    """The hosts an image is for: NGC's GPU composition, or hosts with no GPU (--device cpu)."""

    GPU = "gpu"
    CPU = "cpu"

    def __str__(self) -> str:  # the value, as the flag and the records spell it
        return self.value

    @property
    def cpu_only(self) -> bool:
        return self is Device.CPU

    @property
    def server_flags(self) -> tuple[str, ...]:
        """What tritonserver needs on these hosts: a host with no GPU has no pinned memory to pool."""
        return ("--pinned-memory-pool-byte-size=0",) if self.cpu_only else ()


class Base(str, enum.Enum):
    """What the image is built on: NGC's min image as it is, or a base pruned to the selection."""

    MIN = "min"
    PRUNED = "pruned"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Providers:
    """ONNX Runtime's execution providers an image keeps: the one notion of them (the names are
    the onnxruntime unit's, composer.backends.onnxruntime)."""

    asked: tuple[str, ...] = ()  # as the user named them (--ort-provider), "cpu" included
    device: Device = Device.GPU

    CPU = onnxruntime.CPU
    SHARED = onnxruntime.SHARED
    CPU_IMAGE = onnxruntime.CPU_IMAGE

    @property
    def kept(self) -> tuple[str, ...] | None:
        """The providers kept beside CPU, sorted; None: every one the backend's folder holds (the
        default on a GPU image)."""
        if self.asked or self.device.cpu_only:
            return tuple(sorted({p for p in self.asked if p != self.CPU}))
        return None

    @property
    def needing_a_gpu(self) -> tuple[str, ...]:
        """Asked providers a CPU-only image cannot keep."""
        return tuple(p for p in self.asked if p != self.CPU and p not in self.CPU_IMAGE)

    @classmethod
    def listing(cls, kept: tuple[str, ...]) -> list[str]:
        """Every provider of an image that keeps `kept` beside CPU, as records and labels list them."""
        return [cls.CPU, *kept]


@dataclass(frozen=True)
class Selection:
    """Which parts of Triton go into the image."""

    backends: tuple[str, ...] = ()
    repoagents: tuple[str, ...] = ()
    caches: tuple[str, ...] = ()
    custom_backends: tuple[tuple[str, Path], ...] = ()  # name -> a local folder
    backend_images: tuple[tuple[str, str], ...] = ()  # name -> the full image to take it from
    with_headers: bool = False
    bake_models: Path | None = None  # a model repository copied into the image at /models
    model_envs: tuple[tuple[str, Path], ...] = ()  # model -> its requirements file (composer.config.model_envs)
    base: Base | None = None  # None: not asked (min, or pruned for --device cpu): read it through `base_of`
    keep_tensorrt_builder: bool = False  # a pruned base keeps TensorRT's builder resource library
    ort_providers: tuple[str, ...] = ()  # ONNX Runtime's execution providers asked (none: every one)
    device: Device = Device.GPU
    flavour: Flavour = Flavour()  # py3: on the min image; vllm: on the release's vLLM image

    def __post_init__(self) -> None:
        """The small types from their names too (a record, a benchmark's fields), checked values alike."""
        for name, kind in (("device", Device), ("base", Base), ("flavour", Flavour)):
            value = getattr(self, name)
            if isinstance(value, str):
                object.__setattr__(self, name, kind(value))

    @property
    def base_of(self) -> Base:
        """The base the image is built on: as asked, else pruned for a CPU-only image, else min."""
        return self.base or (Base.PRUNED if self.device.cpu_only else Base.MIN)

    @property
    def providers(self) -> Providers:
        return Providers(self.ort_providers, self.device)


@dataclass(frozen=True)
class Images:
    """Which base images: a release in a registry, or images named outright."""

    version: str | None = None
    registry: str = DEFAULT_REGISTRY
    full: str | None = None
    min: str | None = None
    registry_ca: Path | None = None  # a CA the composer's registry client trusts, beyond the engine's
    registry_tries: int = 6  # tries at a registry that does not answer (or says 5xx/429) before giving up
    registry_backoff: float = 1.0  # seconds before the second try, doubled for each one after


@dataclass(frozen=True)
class Packages:
    """Python packages for python-backend models, and where pip may get them.

    Index URLs may carry credentials: pip uses them on the host only (the build installs from a
    wheelhouse), so they never reach the engine, a rendered file, a record or any output.
    """

    specs: tuple[str, ...] = ()  # requirement lines, from --pip and --requirements
    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    trusted_hosts: tuple[str, ...] = ()
    wheelhouse: Path | None = None
    ca_cert: Path | None = None

    def __bool__(self) -> bool:
        return bool(self.specs)


@dataclass(frozen=True)
class Result:
    """What becomes of the built image."""

    tag: str | None = None
    push: str | None = None
    smoke_test: bool = True
    model_repository: Path | None = None
    labels: tuple[tuple[str, str], ...] = ()
    gpus: str = "auto"  # GPUs for the smoke test: auto, all, none or a count
    strict: bool = False  # every SKIP of the smoke test is a failure
    smoke_cases: Path | None = None  # a file of test cases for the served models
    samples: bool = True  # serve the samples beside the user's models in the smoke test
    sbom: Path | None = None  # a copy of the image's SBOM, written here after the build
    push_via: str = "composer"  # "composer": its own registry client; "engine": the engine's push
    compression: str | None = None  # of the layers the composer pushes: gzip (None), zstd or none
    sign_key: str | None = None  # file:PATH or env:NAME of a PEM ECDSA P-256 private key (never the key)
    sign_passphrase: str | None = None  # env:NAME or file:PATH of that key's passphrase
    space_check: bool = True  # refuse a build the engine's disk cannot hold (composer.assembly.space)
    smoke_mode: str = "recorded"  # "recorded": a PASS recorded for the same image, models and host stands; "always"
    cache: bool = True  # False (--no-cache): no build cache, no recorded image or smoke test: from scratch
    # What builds: the engine's builder, or buildkit[://ADDR] (composer.engine.buildkit); several: the
    # run's sets are spread over them (composer.pipeline.compose_all).
    builders: tuple[str, ...] = ("engine",)
    builder_cache: str | None = None  # a repository BuildKit exports its cache to and imports it from
    builder_tls: Path | None = None  # the client's TLS files for a tcp:// BuildKit (buildctl --tlsdir)


    @property
    def layer_compression(self) -> str:
        return self.compression or "gzip"


@dataclass(frozen=True)
class Mirror:
    """How `composer mirror` copies a release (nothing of a composed image)."""

    to: str | None = None  # the registry prefix to copy into
    platform: str | None = None  # os/arch[/variant]: only that image of an index (None: every platform)
    to_engine: bool = False  # through the engine (pull, push), as before registry-to-registry copies


@dataclass(frozen=True)
class CompositionSpec:
    """The whole description of one composed image, as the user gave it."""

    selection: Selection = Selection()
    images: Images = Images()
    packages: Packages = Packages()
    result: Result = Result()
    mirror: Mirror = Mirror()
    name: str = "command line"  # a set's file stem, or "command line"
    source: Path | None = None  # the set file it came from

    def model_envs(self) -> tuple[ModelEnv, ...]:
        """The python environments this spec asks for (baked models' requirements.txt and each
        --model-env), read from its files: the one place they are derived from a spec."""
        return requested(self.selection.bake_models, self.selection.model_envs)

    def get(self, path: str) -> Any:
        group, name = path.split(".")
        return getattr(getattr(self, group), name)

    def with_fields(self, values: Mapping[str, Any]) -> "CompositionSpec":
        """This spec with `values` (field path -> value) in place of its own."""
        groups: dict[str, dict[str, Any]] = {}
        for path, value in values.items():
            group, name = path.split(".")
            groups.setdefault(group, {})[name] = value
        changes = {g: dataclasses.replace(getattr(self, g), **v) for g, v in groups.items()}
        return dataclasses.replace(self, **changes)
