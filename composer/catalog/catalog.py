"""The release catalog: which Triton container release carries which server, OS and python.

The facts live in composer/catalog/releases.yaml; this module only loads and looks them up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import resources

import yaml

from composer.core.errors import UsageError

RELEASE_PATTERN = re.compile(r"^\d\d\.\d\d$")


@dataclass(frozen=True)
class Release:
    """One Triton container release (YY.MM)."""

    name: str
    server: str
    os: str
    python: str
    numpy: str | None  # the numpy requirement the python backend needs, e.g. "numpy<2"
    # From the catalog's generations (the fallback when no full image is looked into):
    tree_owner: str = "1000:1000"  # who owns /opt/tritonserver ("0:0": root)
    externally_managed: bool = False  # python is PEP 668 managed (Ubuntu 24.04 generation)
    tensorflow: bool = True  # the full image carries a tensorflow backend

    def full_ref(self, registry: str) -> str:
        return f"{registry.rstrip('/')}/tritonserver:{self.name}-py3"

    def min_ref(self, registry: str) -> str:
        return f"{registry.rstrip('/')}/tritonserver:{self.name}-py3-min"


@dataclass(frozen=True)
class Flavour:
    """Which of a release's tritonserver images a composition is built on (--flavour): py3, the
    min image (the default), or another flavour the catalog describes (vllm). A new flavour is
    catalog data (releases.yaml, flavours) and, where it serves something new, a sample."""

    name: str = "py3"

    DEFAULT = "py3"

    def __str__(self) -> str:
        return self.name

    @property
    def on_min_image(self) -> bool:
        """py3: the composition is built on the release's min image, not a flavour's image."""
        return self.name == self.DEFAULT


@dataclass(frozen=True)
class FlavourImage:
    """A flavour's image of one release: the base of a composition (--flavour)."""

    name: str
    release: str
    tag: str  # e.g. 24.09-vllm-python-py3
    backends: tuple[str, ...]  # what its image holds (taken from it, not from the full image)
    built_on: str  # the image NGC builds it on, e.g. <registry>/tritonserver:24.09-py3-min

    def ref(self, registry: str) -> str:
        return f"{registry.rstrip('/')}/tritonserver:{self.tag}"


@dataclass(frozen=True)
class NgcLayout:
    """What NGC's full image carries: used to validate and render when no engine is at hand."""

    core: tuple[str, ...]
    backends: tuple[str, ...]
    repoagents: tuple[str, ...]
    caches: tuple[str, ...]
    ort_providers: tuple[str, ...] = ()  # ONNX Runtime's providers of its onnxruntime backend (CPU aside)


@dataclass(frozen=True)
class LayerFamily:
    """One family of a pruned base's files, written as its own layer(s) (releases.yaml, pruned_base_layers)."""

    family: str
    packages: str = ""  # a regex on a kept package's name
    paths: str = ""  # a regex on the path (relative to /) of a file no package owns
    takes: str = ""  # "distribution", "rest" or "database": the families with a rule of their own
    parts: int = 1  # how many layers of at most `layer_bytes` it may take
    # Only on a base whose python distributions are pruned too (a flavour's image, where pip put
    # gigabytes of them): the other bases' layers, and so their digests, stay as they were.
    python_distributions: bool = False

    def to_dict(self) -> dict:
        return {"family": self.family, "packages": self.packages, "paths": self.paths, "takes": self.takes,
                "parts": self.parts}


@dataclass(frozen=True)
class Catalog:
    releases: dict[str, Release]
    ngc_layout: NgcLayout
    backend_env: dict[str, dict[str, str]]
    final_stage_env: dict[str, str]
    tensorflow_env: dict[str, str]
    externally_managed_env: dict[str, str]
    # release -> {library: libraries it loads by name at run time} (for a pruned base)
    loaded_at_run_time: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict)
    flavours: dict[str, dict] = field(default_factory=dict)  # name -> its entry in releases.yaml
    pruned_base_layers: tuple[LayerFamily, ...] = ()  # in order, the first holding the distribution's core
    layer_bytes: int = 1_900_000_000  # a family bigger than this is split into parts

    @classmethod
    def load(cls) -> "Catalog":
        text = resources.files("composer.catalog").joinpath("releases.yaml").read_text()
        raw = yaml.safe_load(text)
        layout = {key: tuple(value) for key, value in raw["ngc_full_image"].items()}
        generations = sorted(raw["generations"], key=lambda g: g["from"])
        releases = {}
        for name, fields in raw["releases"].items():
            traits: dict = {}
            for generation in generations:
                if generation["from"] <= name:  # YY.MM sorts as text
                    traits.update({k: v for k, v in generation.items() if k != "from"})
            releases[name] = Release(name=name, **fields, **traits)
        return cls(
            releases=releases,
            ngc_layout=NgcLayout(**layout),
            backend_env={name: dict(env) for name, env in (raw.get("backend_env") or {}).items()},
            final_stage_env=dict(raw["final_stage_env"]),
            tensorflow_env=dict(raw["tensorflow_env"]),
            externally_managed_env=dict(raw["externally_managed_env"]),
            loaded_at_run_time={family: {library: tuple(loads) for library, loads in table.items()}
                                for family, table in (raw.get("loaded_at_run_time") or {}).items()},
            flavours={name: dict(entry) for name, entry in (raw.get("flavours") or {}).items()},
            pruned_base_layers=tuple(LayerFamily(**item) for item in raw["pruned_base_layers"]["families"]),
            layer_bytes=int(raw["pruned_base_layers"]["layer_bytes"]),
        )

    def release(self, name: str) -> Release:
        """The release `name`; an unknown one is a usage error naming the known ones."""
        if name in self.releases:
            return self.releases[name]
        known = sorted(self.releases)
        hint = "" if RELEASE_PATTERN.match(name) else " (releases are named YY.MM)"
        raise UsageError(
            f"unknown Triton release '{name}'{hint}; known releases: {known[0]} ... {known[-1]}: "
            + ", ".join(known)
        )

    def loaded_at_run_time_for(self, release: Release) -> dict[str, tuple[str, ...]]:
        """What strings cannot show of the libraries loaded by name at run time, for the release's
        family (the OS it is built on); empty for a family the catalog knows nothing of."""
        return self.loaded_at_run_time.get(release.os, {})

    def flavour_problem(self, flavour: Flavour, release: Release | None = None) -> str | None:
        """Why `flavour` cannot be composed (of `release`, when given), or None."""
        if flavour.on_min_image:
            return None
        name = flavour.name
        entry = self.flavours.get(name)
        if entry is None:
            known = ", ".join([Flavour.DEFAULT, *(n for n, e in sorted(self.flavours.items()) if "unsupported" not in e)])
            return f"'{name}' is not a flavour; flavours: {known}"
        if "unsupported" in entry:
            return f"the {name} flavour is not yet supported: {entry['unsupported']}"
        if release is not None and release.name < entry["from"]:
            return f"release {release.name} has no {name} image (NGC publishes one from {entry['from']} on)"
        return None

    def flavour(self, flavour: Flavour, release: Release, registry: str) -> FlavourImage | None:
        """The image of `flavour` of `release` (None for py3); refused as flavour_problem says."""
        problem = self.flavour_problem(flavour, release)
        if problem:
            raise UsageError(problem)
        if flavour.on_min_image:
            return None
        name = flavour.name
        entry = self.flavours[name]
        built_on = ""
        for row in sorted(entry.get("built_on") or (), key=lambda r: r["from"]):
            if row["from"] <= release.name:
                built_on = row["base"]
        values = {"release": release.name, "registry": registry.rstrip("/")}
        return FlavourImage(name, release.name, entry["tag"].format(**values), tuple(entry["backends"]),
                       built_on.format(**values))

    def by_server(self, server_version: str) -> Release | None:
        """The release that carries server `server_version` (e.g. 2.50.0)."""
        for release in self.releases.values():
            if release.server == server_version:
                return release
        return None
