"""The rule book: every rule about a user's input that needs no image, one function each.

Each value was checked alone when it was read (composer.config.values); the rules here look at
several values together, at the release catalog, at the files the user names (model
configurations, case files) and at the options of the run (how many sets, --explain, --offline).
`validate` runs them all, for every path a spec comes by (the command line, set files, bundles,
`smoke-test`, `render --offline`, `mirror`), before any engine is asked and before any file is
written; a set file reports the same rules at its file:line:key. What remains for later steps is
only what depends on an image (composer.resolve: does the image offer this backend, this
provider, this python).

A rule returns None, or a Problem in two wordings: as a set file says it (at its key) and as the
command line says it (naming the flags).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from composer.backends import ONNXRUNTIME, PYTHON, TENSORRT, Refusal, unit
from composer.catalog.catalog import Catalog
from composer.config.cases import CaseError, model_folders, read_cases_file, sequence_case_problem
from composer.config.model_needs import repository_needs_problem
from composer.config.options import BUILD, BUNDLE, MIRROR, RENDER, SMOKE, VERIFY, WHEELS
from composer.config.types import Base, CompositionSpec, Device, Result
from composer.core.errors import UsageError



@dataclass(frozen=True)
class Problem:
    """A spec that cannot be built as a whole; `key` is the set key it is reported at."""

    key: str
    in_set: str
    on_command_line: str

    @classmethod
    def of(cls, refusal: Refusal | None) -> "Problem | None":
        """A backend unit's refusal (composer.backends), as the rule book reports it."""
        return None if refusal is None else cls(refusal.key, refusal.in_set, refusal.on_command_line)


@dataclass(frozen=True)
class Invocation:
    """The command a spec is checked for, and the options of the run that rules look at.

    `command` None: a set file being read, before any command is known (rules that hold for
    every command apply)."""

    command: str | None = BUILD
    sets: int = 0  # --set files given
    explain: bool = False  # build --explain
    offline: bool = False  # render --offline: no engine, the catalog answers

    def is_(self, *commands: str | None) -> bool:
        return self.command in commands


Rule = Callable[[CompositionSpec, Invocation], "Problem | None"]


# -- the release and the base images ---------------------------------------------------


def release_or_full_image_given(spec: CompositionSpec, run: Invocation) -> Problem | None:
    """A composition needs its release: named, or read from a full image named outright."""
    if run.is_(MIRROR, SMOKE, VERIFY) or spec.images.version or spec.images.full:
        return None
    return Problem("version", 'missing: give version: "YY.MM" (or images: {full: REF})',
                   "give --version YY.MM (or --image full=REF), or a backend set with --set")


def offline_render_names_its_release(spec: CompositionSpec, run: Invocation) -> Problem | None:
    """With no engine, only a named release says what the full image holds (the catalog)."""
    if run.offline and not spec.images.version:
        return Problem("version", 'missing: give version: "YY.MM"',
                       "render --offline needs --version YY.MM: with no engine the release of --image full= is "
                       "unknown")
    return None


def release_is_catalogued(spec: CompositionSpec, run: Invocation) -> Problem | None:
    version = spec.images.version
    if not version:
        return None
    try:
        Catalog.load().release(version)
    except UsageError as error:
        return Problem("version", error.message, error.message)
    return None


def flavour_exists_for_the_release(spec: CompositionSpec, run: Invocation) -> Problem | None:
    flavour = spec.selection.flavour
    if flavour.on_min_image or not spec.images.version:
        return None
    catalog = Catalog.load()
    release = catalog.releases.get(spec.images.version)
    problem = catalog.flavour_problem(flavour, release) if release else None
    if problem:
        return Problem("flavour", problem, f"--flavour {flavour}: {problem}")
    return None


# -- mirror --------------------------------------------------------------------------------


def mirror_names_its_release(spec: CompositionSpec, run: Invocation) -> Problem | None:
    if run.is_(MIRROR) and not spec.images.version:
        return Problem("version", 'missing: give version: "YY.MM"',
                       "--version is required: the release to mirror, YY.MM (e.g. 24.09)")
    return None


def mirror_names_its_target(spec: CompositionSpec, run: Invocation) -> Problem | None:
    if run.is_(MIRROR) and not spec.mirror.to:
        return Problem("to", "missing: give to: PREFIX", "--to is required: the registry prefix to copy into, "
                       "e.g. harbor.example/nvidia")
    return None


def mirror_target_is_not_its_source(spec: CompositionSpec, run: Invocation) -> Problem | None:
    """Copying a registry prefix onto itself would move nothing and, with --to-engine, re-push
    over the images it reads."""
    to = spec.mirror.to
    if not run.is_(MIRROR) or not to:
        return None
    if to.rstrip("/").lower() == spec.images.registry.rstrip("/").lower():
        return Problem("to", "the target is the source", f"--to {to} is the registry it copies from "
                       f"(--registry {spec.images.registry}): give another prefix to copy into")
    return None


def mirror_to_engine_takes_no_platform(spec: CompositionSpec, run: Invocation) -> Problem | None:
    if spec.mirror.to_engine and spec.mirror.platform:
        return Problem("platform", "to_engine copies the engine's own platform only: leave out platform",
                       f"--to-engine --platform {spec.mirror.platform}: the engine pulls its own platform's "
                       "image only; leave out --platform (or --to-engine to copy registry to registry)")
    return None


# -- the selection ---------------------------------------------------------------------------


def a_backend_is_selected(spec: CompositionSpec, run: Invocation) -> Problem | None:
    s = spec.selection
    if run.is_(None, BUILD, RENDER, BUNDLE, WHEELS) and not (s.backends or s.custom_backends or s.backend_images):
        return Problem("backends", "select at least one backend (backends: [NAME, ...] or custom_backends)",
                       "select at least one backend with --backend NAME (composer backends lists them)")
    return None


def own_backends_take_no_selected_name(spec: CompositionSpec, run: Invocation) -> Problem | None:
    """A custom backend (or one from another image) replaces NGC's of that name only when that one
    is left out of --backend: one name, one folder."""
    s = spec.selection
    taken = sorted(({n for n, _ in s.custom_backends} | {n for n, _ in s.backend_images}) & set(s.backends))
    if taken:
        return Problem(
            "custom_backends", f"{taken[0]} is both an NGC backend of backends: and your own: to use yours in its "
            f"place, leave {taken[0]} out of backends",
            f"--backend {taken[0]} and --custom-backend/--backend-image {taken[0]}=... name one backend twice: to "
            f"use yours in place of NGC's, leave out --backend {taken[0]}")
    clash = sorted({n for n, _ in s.custom_backends} & {n for n, _ in s.backend_images})
    if clash:
        return Problem("custom_backends", f"{clash[0]} is both a custom backend and a backend image",
                       f"{clash[0]} is given by both --custom-backend and --backend-image: keep one")
    return None


def custom_backends_hold_a_backend(spec: CompositionSpec, run: Invocation) -> Problem | None:
    """A backend folder holds libtriton_NAME.so (a C++ backend) or model.py (a Python-based one)."""
    for name, source in spec.selection.custom_backends:
        if not unit(name).holds_a_backend(source):
            message = f"{source} holds neither libtriton_{name}.so nor model.py"
            return Problem("custom_backends", f"{name}: {message}", f"--custom-backend {name}={source}: the folder "
                           f"holds neither libtriton_{name}.so nor model.py")
    return None


def _has_python(spec: CompositionSpec) -> bool:
    """The image will hold the python backend: selected, or kept from the flavour's image."""
    return PYTHON.held(spec.selection.backends, spec.selection.flavour)


def model_envs_need_python(spec: CompositionSpec, run: Invocation) -> Problem | None:
    s = spec.selection
    if s.model_envs and not _has_python(spec):
        return Problem.of(PYTHON.model_envs_refusal(s.model_envs[0][0]))
    if run.is_(BUILD, RENDER, BUNDLE, WHEELS) and s.bake_models is not None and not _has_python(spec):
        envs = spec.model_envs()
        if envs:
            return Problem.of(PYTHON.baked_env_refusal(envs[0].model))
    return None


def packages_need_python(spec: CompositionSpec, run: Invocation) -> Problem | None:
    if spec.packages and run.is_(None, BUILD, RENDER, BUNDLE) and not _has_python(spec):
        return Problem.of(PYTHON.packages_refusal())
    return None


def tensorrt_builder_needs_a_pruned_base(spec: CompositionSpec, run: Invocation) -> Problem | None:
    s = spec.selection
    return Problem.of(TENSORRT.builder_refusal(s.keep_tensorrt_builder, s.base_of is Base.PRUNED))


def explain_needs_a_pruned_base(spec: CompositionSpec, run: Invocation) -> Problem | None:
    if run.explain and spec.selection.base_of is not Base.PRUNED:
        return Problem("base", "--explain lists what a pruned base keeps and drops: add base: pruned",
                       "--explain lists what a pruned base keeps and drops: add --base pruned")
    return None


# -- ONNX Runtime's providers ---------------------------------------------------------------


def providers_need_onnxruntime(spec: CompositionSpec, run: Invocation) -> Problem | None:
    s = spec.selection
    own = {n for n, _ in s.custom_backends} | {n for n, _ in s.backend_images}
    return Problem.of(ONNXRUNTIME.providers_refusal(s.ort_providers, s.backends, own))


def providers_are_the_releases(spec: CompositionSpec, run: Invocation) -> Problem | None:
    """A provider the release's onnxruntime backend does not build is a typo, refused before any
    pull (an engine checks again against the image's own folder)."""
    s = spec.selection
    if not s.ort_providers or not spec.images.version or spec.images.full:
        return None
    offered = Catalog.load().ngc_layout.ort_providers
    return Problem.of(ONNXRUNTIME.unknown_provider_refusal(s.ort_providers, offered, spec.images.version))


# -- a CPU-only image --------------------------------------------------------------------------


def cpu_image_has_no_tensorrt(spec: CompositionSpec, run: Invocation) -> Problem | None:
    s = spec.selection
    return Problem.of(TENSORRT.cpu_image_refusal(s.device.cpu_only, s.backends))


def cpu_image_is_pruned(spec: CompositionSpec, run: Invocation) -> Problem | None:
    s = spec.selection
    if s.device.cpu_only and s.base is Base.MIN:
        return Problem("base", "device: cpu needs base: pruned (a CPU image on the whole min image would "
                       "carry every GPU library); leave base out or give pruned",
                       "--device cpu needs a pruned base (the whole min image carries every GPU library): "
                       "leave out --base min")
    return None


def cpu_image_keeps_cpu_providers(spec: CompositionSpec, run: Invocation) -> Problem | None:
    s = spec.selection
    return Problem.of(ONNXRUNTIME.cpu_image_refusal(s.providers.needing_a_gpu if s.device.cpu_only else ()))


def flavour_is_for_gpu_hosts(spec: CompositionSpec, run: Invocation) -> Problem | None:
    s = spec.selection
    if s.device.cpu_only and not s.flavour.on_min_image:
        return Problem("flavour", f"flavour: {s.flavour} is a GPU image: device: cpu does not apply",
                       f"--flavour {s.flavour} --device cpu: the {s.flavour} image is for GPU hosts; "
                       "leave out --device cpu")
    return None


def smoke_settings_fit_the_device(device: Device, result: Result, said: str = "") -> Problem | None:
    """A CPU-only image is smoke-tested with no GPU: --gpus and --strict (which fails GPU SKIPs) do
    not apply. The one rule, for a spec (`said` "--device cpu ") and for `smoke-test IMAGE` of an
    image whose record says cpu."""
    if not device.cpu_only:
        return None
    if result.gpus not in ("auto", "none"):
        return Problem("gpus", f"device: cpu: the smoke test runs with no GPU; gpus: {result.gpus} does not apply",
                       f"{said}--gpus {result.gpus}: a CPU-only image is smoke-tested with no GPU "
                       f"(leave out --gpus {result.gpus}, or give --gpus none)")
    if result.strict:
        return Problem("strict", "device: cpu: strict checks GPU SKIPs, which a CPU-only image does not have",
                       f"{said}--strict: --strict is for GPU images (it fails each GPU check skipped); a CPU-only "
                       "image is smoke-tested with no GPU: leave out --strict")
    return None


def cpu_image_smoke_settings(spec: CompositionSpec, run: Invocation) -> Problem | None:
    if run.is_(None, BUILD, SMOKE):
        return smoke_settings_fit_the_device(spec.selection.device, spec.result, said="--device cpu ")
    return None


def models_fit_the_image(spec: CompositionSpec, run: Invocation) -> Problem | None:
    """The first model (of --bake-models, and of --model-repository for a build) that needs what
    the composition leaves out (--device cpu, --ort-provider): named with the need."""
    if not run.is_(BUILD, RENDER, BUNDLE):
        return None
    s = spec.selection
    cpu, kept = s.device.cpu_only, s.providers.kept
    if not cpu and kept is None:
        return None
    sources = [("--bake-models", "bake_models", s.bake_models)]
    if run.is_(BUILD):
        sources.append(("--model-repository", "model_repository", spec.result.model_repository))
    for flag, key, repository in sources:
        if repository is None:
            continue
        problem = repository_needs_problem(model_folders(repository), cpu, kept)
        if problem:
            return Problem(key, problem, f"{flag} {repository}: {problem}")
    return None


def sequence_cases_fit_their_models(spec: CompositionSpec, run: Invocation) -> Problem | None:
    """--smoke-cases' sequences go to sequence (or decoupled) models of the repository served."""
    r = spec.result
    if not run.is_(BUILD, SMOKE) or r.smoke_cases is None:
        return None
    folders = {}
    for repository in (spec.selection.bake_models, r.model_repository):
        if repository is not None:
            folders.update(model_folders(repository))
    if not folders:
        return None
    try:
        cases = read_cases_file(r.smoke_cases)
    except CaseError:
        return None  # refused when the option was read
    problem = sequence_case_problem(cases, folders)
    if problem:
        return Problem("smoke_cases", problem, f"--smoke-cases {r.smoke_cases}: {problem}")
    return None


# -- the result and the packages ---------------------------------------------------------------


def signing_needs_a_push(spec: CompositionSpec, run: Invocation) -> Problem | None:
    """A signature is of a pushed digest: --sign-key signs what --push pushes."""
    r = spec.result
    if r.sign_key and not r.push:
        return Problem("sign_key", "sign_key signs the pushed image: add push: REF",
                       "--sign-key signs the image --push pushes: add --push REF")
    if r.sign_passphrase and not r.sign_key:
        return Problem("sign_passphrase", "sign_passphrase is the passphrase of sign_key: add sign_key",
                       "--sign-passphrase is the passphrase of --sign-key: add --sign-key file:PATH or env:NAME")
    return None


def some_builder(spec: CompositionSpec, run: Invocation) -> Problem | None:
    """Something must build: an empty builder list is a mistake, not the default."""
    if not spec.result.builders:
        return Problem("builder", "builder is empty: give engine, buildkit or buildkit://ADDR (or leave it out)",
                       "--builder: give engine, buildkit or buildkit://ADDR")
    return None


def builder_tls_needs_tcp(spec: CompositionSpec, run: Invocation) -> Problem | None:
    """TLS files are for a BuildKit reached over tcp:// (or BUILDKIT_HOST, which may be one)."""
    if spec.result.builder_tls and not any(b == "buildkit" or b.startswith("buildkit://tcp://")
                                           for b in spec.result.builders):
        return Problem("builder_tls", "builder_tls is for a BuildKit at tcp://: add builder: buildkit://tcp://HOST:PORT",
                       "--builder-tls is for a BuildKit at tcp://: add --builder buildkit://tcp://HOST:PORT")
    return None


def builder_cache_needs_buildkit(spec: CompositionSpec, run: Invocation) -> Problem | None:
    """A registry cache is BuildKit's: the engine's own builder keeps its cache on the engine."""
    if spec.result.builder_cache and all(builder == "engine" for builder in spec.result.builders):
        return Problem("builder_cache", "builder_cache is BuildKit's registry cache: add builder: buildkit://ADDR",
                       "--builder-cache is BuildKit's registry cache: add --builder buildkit://ADDR (or buildkit)")
    return None


def compression_is_the_composers(spec: CompositionSpec, run: Invocation) -> Problem | None:
    """The layers' compression is chosen where the composer pushes them itself."""
    r = spec.result
    if run.is_(MIRROR):
        if r.compression and spec.mirror.to_engine:
            return Problem("compression", "to_engine pushes as the engine compresses: leave out compression",
                           f"--to-engine --compression {r.compression}: the engine pushes as it compresses (gzip); "
                           "leave out --to-engine to recompress registry to registry")
        return None
    if r.compression and not r.push:
        return Problem("compression", "compression applies to a push: add push: REF",
                       f"--compression {r.compression} is how --push sends the layers: add --push REF")
    if r.compression and r.push_via == "engine":
        return Problem("compression", "push_via: engine compresses its own way (gzip): leave out compression",
                       f"--push-via engine --compression {r.compression}: the engine compresses its own way (gzip); "
                       "leave out --push-via engine to push through the composer")
    return None


def samples_off_leaves_models(spec: CompositionSpec, run: Invocation) -> Problem | None:
    r, s = spec.result, spec.selection
    if run.is_(BUILD) and r.smoke_test and not r.samples and not (r.model_repository or s.bake_models):
        return Problem(
            "samples", "samples: false leaves the smoke test nothing to serve: add model_repository or bake_models",
            "--no-samples leaves the smoke test nothing to serve: add --model-repository DIR or --bake-models DIR")
    return None


def wheelhouse_exists(spec: CompositionSpec, run: Invocation) -> Problem | None:
    """A set may name a wheelhouse `composer wheels` is about to fill: checked for builds only."""
    p = spec.packages
    if run.is_(BUILD, RENDER, BUNDLE) and p.wheelhouse is not None and not p.wheelhouse.is_dir():
        return Problem("packages.wheelhouse", f"no such folder {p.wheelhouse}",
                       f"--wheelhouse {p.wheelhouse}: no such folder (composer wheels -o DIR fills one)")
    return None


def package_sources_have_packages(spec: CompositionSpec, run: Invocation) -> Problem | None:
    p, s = spec.packages, spec.selection
    if (p.wheelhouse or p.index_url or p.extra_index_urls or p.ca_cert) and not (p.specs or s.model_envs or s.bake_models):
        return Problem("packages", "package sources are given but no package: add pip: [SPEC] or requirements: [FILE]",
                       "package sources were given but no package: add --pip SPEC or --requirements FILE")
    return None


def bundles_carry_no_model_envs(spec: CompositionSpec, run: Invocation) -> Problem | None:
    if not run.is_(BUNDLE):
        return None
    envs = spec.model_envs()
    if envs:
        message = (f"model {envs[0].model} has its own python environment, which bundles do not carry yet: build it "
                   "where the index is reachable (or leave out --model-env and the models' requirements.txt)")
        return Problem("model_envs", message, message)
    return None


def model_envs_are_read(spec: CompositionSpec, run: Invocation) -> Problem | None:
    """A model named twice, a configuration naming one: refused when the environments are read."""
    if run.is_(BUILD, RENDER, BUNDLE, WHEELS):
        spec.model_envs()  # raises a UsageError naming the model
    return None


# The rule book, in the order problems are reported (the first one found is the one said).
RULES: tuple[Rule, ...] = (
    mirror_names_its_release,
    mirror_names_its_target,
    mirror_target_is_not_its_source,
    release_or_full_image_given,
    offline_render_names_its_release,
    mirror_to_engine_takes_no_platform,
    a_backend_is_selected,
    own_backends_take_no_selected_name,
    custom_backends_hold_a_backend,
    model_envs_need_python,
    cpu_image_has_no_tensorrt,
    cpu_image_is_pruned,
    cpu_image_keeps_cpu_providers,
    cpu_image_smoke_settings,
    flavour_is_for_gpu_hosts,
    providers_need_onnxruntime,
    tensorrt_builder_needs_a_pruned_base,
    explain_needs_a_pruned_base,
    samples_off_leaves_models,
    signing_needs_a_push,
    compression_is_the_composers,
    some_builder,
    builder_tls_needs_tcp,
    builder_cache_needs_buildkit,
    wheelhouse_exists,
    package_sources_have_packages,
    packages_need_python,
    release_is_catalogued,
    flavour_exists_for_the_release,
    providers_are_the_releases,
    models_fit_the_image,
    sequence_cases_fit_their_models,
    model_envs_are_read,
    bundles_carry_no_model_envs,
)


def problems(spec: CompositionSpec, run: Invocation = Invocation()) -> list[Problem]:
    """Every problem of the spec as a whole (each field was checked when it was read)."""
    return [problem for rule in RULES if (problem := rule(spec, run)) is not None]


def validate(spec: CompositionSpec, command: str | None = BUILD, *, sets: int = 0, explain: bool = False,
             offline: bool = False) -> CompositionSpec:
    """The spec, or a UsageError for the first problem as the command line names it: the one
    place a whole spec is checked, for every command and every way a spec is given."""
    found = problems(spec, Invocation(command, sets, explain, offline))
    if found:
        raise UsageError(found[0].on_command_line)
    return spec


def one_tag_for_several_sets(set_count: int, fields: set[str]) -> None:
    """--tag and --push name one image: with several --set files, each set names its own."""
    if set_count > 1 and ({"result.tag", "result.push"} & fields):
        raise UsageError("--tag and --push name one image: with several --set files, put them in the sets")


