"""What a full image (or a flavour's image) offers a composition, and the checks against it.

From the probe's report, or from the catalog when no engine is asked; make_plan checks the
selection against it, so a name the image does not hold is refused naming what it does hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from composer.backends import ONNXRUNTIME, unit
from composer.catalog.catalog import Catalog, FlavourImage, Release
from composer.core.errors import UsageError
from composer.core.words import did_you_mean

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
        backends = tuple(b for b in layout.backends if unit(b).in_release(release))
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
                                if c.kind == "backend" and c.name == ONNXRUNTIME.name), ()),
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


def validated(kind: str, names: tuple[str, ...], offer: Offer, exclude=frozenset()) -> tuple[str, ...]:
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
