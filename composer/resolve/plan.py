"""The composition plan: everything that goes into a composed image, as one plain typed value.

Data flows one way: the spec (what the user asked, composer.config.options) + the release + what the
base images offer -> a CompositionPlan -> rendering. Validation against the images happens here,
so rendering never sees a bad selection and cannot fail on user input.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from composer import __version__
from composer.backends import ONNXRUNTIME, PYTHON, TENSORFLOW, unit
from composer.catalog.catalog import Catalog, Flavour, Release
from composer.config.model_envs import ModelEnv, hints
from composer.config.types import Base, CompositionSpec, Packages, Providers
from composer.core.errors import UsageError
from composer.resolve.offer import FOLDERS, KINDS, FlavourBase, Offer, check_flavour_base, validated
from composer.resolve.plan_types import (BACKENDS_LABEL, FROM_CONTEXT, FROM_FULL, MODELS_ROOT, PROOF_VERDICT, ROOT,
                                         RUN_LABEL, STAGE_LABEL, SYSTEM_TREE, BaseConfig, BaseImage, CompositionPlan,
                                         Copy, CustomBackend, ForeignBackend, LayerPart, LayerSlot, Pruning,
                                         created_label, epoch_of, rfc3339)

# What this module was before the split, still importable from here.
__all__ = ["BACKENDS_LABEL", "FROM_CONTEXT", "FROM_FULL", "MODELS_ROOT", "PROOF_VERDICT", "ROOT", "RUN_LABEL",
           "STAGE_LABEL", "SYSTEM_TREE", "BaseConfig", "BaseImage", "CompositionPlan", "Copy", "CustomBackend",
           "ForeignBackend", "LayerPart", "LayerSlot", "Pruning", "created_label", "epoch_of", "rfc3339", "FOLDERS",
           "KINDS", "FlavourBase", "Offer", "check_flavour_base", "foreign_backend", "check_image_release",
           "resolve_release", "image_refs", "make_plan", "default_tag"]


def foreign_backend(name: str, image: BaseImage, offer: Offer, release: str | None) -> ForeignBackend:
    """Check that `image` offers backend `name` before the plan takes it from there."""
    validated("backend", (name,), offer)
    return ForeignBackend(name, image, release, name in offer.python_based)


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
    notes = list(notes)
    parts = _selected_parts(options, offer, full, minimal, full_env, foreign, flavour, full_cuda_major)
    notes += _release_warnings(parts.foreign, release)
    parts = _python_for_python_based(parts, offer, flavour, notes)
    if options.with_headers and not offer.has_include:
        raise UsageError(f"--with-headers: {offer.source} has no /opt/tritonserver/include")

    all_backends = parts.all_backends
    packages = spec.packages if packages is None else packages
    server_version = (full_env or {}).get("TRITON_SERVER_VERSION") or release.server
    model_envs = _model_envs(model_envs, offer, server_version)
    notes += hints(model_envs, spec.result.model_repository)
    if server_version != release.server:
        notes.append(f"warning: the full image states server {server_version}, but release {release.name} "
                     f"ships server {release.server}: the image's own version is used and checked")
    providers = ONNXRUNTIME.kept_providers(options.providers.kept, parts.backends, offer.ort_providers, offer.source)
    cpu = options.device.cpu_only
    env = _environment(release, server_version, catalog, all_backends, full_env, offer, cpu)
    tag = spec.result.tag or default_tag(release, all_backends, parts.repoagents, parts.caches,
                                         flavour=_flavour(cpu, options.ort_providers))
    labels = _labels(release, server_version, full, minimal, all_backends, parts.repoagents, parts.caches, created,
                     spec.result.labels)
    labels = _choice_labels(labels, flavour, options.device, providers)
    if flavour is not None:
        notes.append(f"built on the {flavour.name} image {minimal.ref} (NGC builds it on {flavour.built_on}); "
                     f"from it: the server core and backends {', '.join(parts.base_backends) or 'none'}")
    return CompositionPlan(
        release=release,
        full=full,
        min=minimal,
        backends=parts.backends,
        repoagents=parts.repoagents,
        caches=parts.caches,
        custom_backends=parts.custom,
        core=() if flavour is not None else offer.core,  # a flavour's image has the server core
        with_headers=options.with_headers,
        env=env,
        labels=labels,
        tag=tag,
        notes=tuple(notes),
        packages=packages,
        constraints=PYTHON.constraints(release) if packages or model_envs else (),
        pip_in_image=offer.has_pip,
        site_packages=f"/usr/local/lib/python{offer.python or release.python}/dist-packages" if packages else None,
        foreign_backends=parts.foreign,
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
        base_backends=parts.base_backends,
    )


@dataclass(frozen=True)
class _Parts:
    """What goes into the image, by where it comes from (make_plan's first step)."""

    backends: tuple[str, ...]  # from the full image
    repoagents: tuple[str, ...]
    caches: tuple[str, ...]
    custom: tuple[CustomBackend, ...]
    foreign: tuple[ForeignBackend, ...]
    base_backends: tuple[str, ...] = ()  # kept from the flavour's image

    @property
    def all_backends(self) -> list[str]:
        own = {c.name for c in self.custom} | {f.name for f in self.foreign}
        return sorted(set(self.backends) | own | set(self.base_backends))


def _selected_parts(options, offer: Offer, full: BaseImage, minimal: BaseImage, full_env, foreign,
                    flavour: FlavourBase | None, full_cuda_major: str | None) -> _Parts:
    """The selection checked against what the images offer: a backend of the user's own, or one the
    flavour's image holds, is not the full image's to offer."""
    custom = _custom_backends(options.custom_backends)
    foreign = tuple(sorted(foreign, key=lambda f: f.name))
    own = {c.name for c in custom} | {f.name for f in foreign}
    base_backends: tuple[str, ...] = ()
    if flavour is not None:
        check_flavour_base(flavour, options.backends, minimal.ref, full.ref, offer,
                           (full_env or {}).get("TRITON_SERVER_VERSION"), full_cuda_major)
        # Every backend of the flavour's image is in the composed image (it is the base), asked or not.
        held = flavour.offer.components.get("backend", ())
        base_backends = tuple(sorted(b for b in flavour.catalogued if b in held and b not in own))
    return _Parts(
        backends=validated("backend", options.backends, offer, exclude=own | set(base_backends)),
        repoagents=validated("repoagent", options.repoagents, offer),
        caches=validated("cache", options.caches, offer),
        custom=custom,
        foreign=foreign,
        base_backends=base_backends,
    )


def _release_warnings(foreign: tuple[ForeignBackend, ...], release: Release) -> list[str]:
    """A backend from another release's image may not work with this server: said, not refused."""
    return [f"warning: backend {other.name} comes from release {other.release} ({other.image.ref}) but the "
            f"server is {release.name}: backends and server of different releases may not work together"
            for other in foreign if other.release and other.release != release.name]


def _python_for_python_based(parts: _Parts, offer: Offer, flavour: FlavourBase | None, notes: list[str]) -> _Parts:
    """A Python-based backend (a model.py in its folder) is served through the python backend:
    kept from the flavour's image, or added from the full image (each said in `notes`)."""
    python = PYTHON.name
    needs_python = sorted({b for b in parts.backends if b in offer.python_based}
                          | {f.name for f in parts.foreign if f.python_based})
    if not needs_python or python in parts.backends:
        return parts
    if flavour is not None and python in flavour.catalogued:
        if python in parts.base_backends:
            return parts
        notes.append(f"kept the {flavour.name} image's python backend: {', '.join(needs_python)} run through it")
        return dataclasses.replace(parts, base_backends=tuple(sorted(set(parts.base_backends) | {python})))
    if python not in offer.components.get("backend", ()):
        raise UsageError(
            f"backend {needs_python[0]} is Python-based and needs the python backend, "
            f"which {offer.source} does not offer"
        )
    notes.append(f"added the python backend: {', '.join(needs_python)} run through it")
    return dataclasses.replace(parts, backends=tuple(sorted(set(parts.backends) | {python})))


def _choice_labels(labels, flavour: FlavourBase | None, device, providers) -> tuple[tuple[str, str], ...]:
    """The labels that say what was chosen beyond the defaults: the flavour, the device, the providers."""
    if flavour is not None:
        labels = tuple(sorted({**dict(labels), "org.triton-composer.flavour": flavour.name}.items()))
    if device.cpu_only or providers is not None:
        extra = {"org.triton-composer.device": str(device)}
        if providers is not None:
            extra["org.triton-composer.ort-providers"] = ",".join(Providers.listing(providers))
        labels = tuple(sorted({**dict(labels), **extra}.items()))
    return labels


def _flavour(cpu: bool, providers: tuple[str, ...]) -> str:
    """What the default tag adds for a CPU-only image or a choice of providers."""
    parts = (["ort-" + "-".join(providers)] if providers else []) + (["cpu"] if cpu else [])
    return "-".join(parts)


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


def _model_envs(envs: tuple[ModelEnv, ...], offer: Offer, server_version: str) -> tuple[ModelEnv, ...]:
    """The environments, checked against the image: the python backend, its stub's python (the
    image's own), a server that takes a folder; each with how its build stage runs pip."""
    if not envs:
        return ()
    PYTHON.check_server(server_version)
    ready = []
    for env in envs:
        if env.wheelhouse is None:
            raise UsageError(f"model {env.model}: its environment is built from wheels fetched on this machine: "
                             "give --wheelhouse DIR, or let composer build or render fetch them with an engine at hand")
        pips = sorted(env.wheelhouse.glob("pip-*.whl"))
        pip = (f"/composer/model_envs/{env.model}/wheelhouse/{pips[-1].name}/pip",) if pips else ("-m", "pip")
        ready.append(dataclasses.replace(env, pip=pip))
    return tuple(ready)



def default_tag(release: Release, backends, repoagents=(), caches=(), flavour: str = "") -> str:
    """e.g. triton-composer/tritonserver:24.09-onnxruntime-python (-cpu for a CPU-only image)"""
    parts = [release.name, *sorted(backends), *sorted(repoagents), *(f"cache-{c}" for c in sorted(caches))]
    parts += [flavour] if flavour else []
    tag = "-".join(parts)
    if len(tag) > 128:  # Docker's limit on a tag
        import hashlib

        tag = f"{release.name}-{hashlib.sha256(tag.encode()).hexdigest()[:12]}"
    return f"triton-composer/tritonserver:{tag}"


def _custom_backends(pairs: tuple[tuple[str, Path], ...]) -> tuple[CustomBackend, ...]:
    """Each --custom-backend folder (its name and content checked by composer.config.rules)."""
    return tuple(sorted((CustomBackend(name, source.resolve()) for name, source in pairs), key=lambda c: c.name))


def _environment(release: Release, server_version: str, catalog: Catalog, backends, full_env,
                 offer: Offer, cpu: bool = False) -> tuple[tuple[str, str], ...]:
    """The environment NGC's final stage sets for this generation, plus what the backends need (each
    unit says its own); a CPU-only image says it has no GPU."""
    full_env = full_env or {}
    env = {
        "TRITON_SERVER_VERSION": server_version,
        "NVIDIA_TRITON_SERVER_VERSION": release.name,
        "TRITON_SERVER_USER": "triton-server",
        "TRITON_SERVER_GPU_ENABLED": full_env.get("TRITON_SERVER_GPU_ENABLED", "1"),
        "PATH": "/opt/tritonserver/bin:${PATH}",
        **catalog.final_stage_env,
    }
    if TENSORFLOW.name in offer.components.get("backend", ()):
        env.update(TENSORFLOW.image_env(catalog))
    env.update(PYTHON.managed_env(catalog, offer.externally_managed, backends))
    for backend in backends:
        env.update(unit(backend).env(catalog))
    if cpu:
        env["TRITON_SERVER_GPU_ENABLED"] = "0"
    return tuple(env.items())


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
