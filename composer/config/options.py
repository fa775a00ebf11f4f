"""Every option of a composition, declared once: the flag table.

An option is its spec field (composer.config.types), its flag on the command line, its key in a
backend set, its help text and its kind (composer.config.values: how a value is read and checked).
The CLI's parameters, the set reader (composer.config.sets), the bundle manifest, the records and
docs/reference/options.md come from these declarations, so a new option is one declaration plus
its use. A set file and the command line give equal specs; a field given on the command line
replaces the set's value of that field (lists included: nothing is merged). Whether the values
make sense together is for composer.config.rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping
from urllib.parse import urlsplit

from composer.catalog.catalog import Flavour
from composer.config.requirements import check_requirement
from composer.config.types import DEFAULT_REGISTRY, Base, CompositionSpec, Device
from composer.config.values import (
    CasesFile, Flag, FromEnvironment, Kind, LocalPath, ModelRepository, Named, Number, OutputFile, RequirementFiles,
    RequirementsFile, Strings, Text, TlsFolder, Tree, check_base, check_device, check_flavour, check_gpus, check_host,
    check_builder, check_compression, check_smoke_mode, check_label_key, check_label_value, check_name, check_prefix, check_provider,
    check_push_via, check_reference, check_release_name, check_secret_source, check_tag_reference, check_url,
    is_sbom,
)
from composer.core.errors import Invalid, UsageError
from composer.core.files import printable
from composer.core.platforms import platform_problem
from composer.core.redaction import redact_url

BUILD, RENDER, BUNDLE, WHEELS, BACKENDS, SMOKE, MIRROR, INSPECT, VERIFY = (
    "build", "render", "bundle", "wheels", "backends", "smoke-test", "mirror", "inspect", "verify")
COMPOSING = (BUILD, RENDER, BUNDLE)


@dataclass(frozen=True)
class Option:
    """One option of the spec: its field, flag, set key, kind and help, declared once."""

    field: str  # "group.name" in CompositionSpec
    flag: str | None  # on the command line; None: only in sets
    key: str | None  # in a set file ("packages.pip"); None: only on the command line
    kind: Kind
    help: str
    short: str | None = None
    commands: tuple[str, ...] = COMPOSING
    aliases: tuple[str, ...] = ()  # other long names of the flag (mirror's --from for --registry)
    envvar: str | None = None
    portable: bool = True  # carried in a bundle manifest (secrets and host paths are not)
    # For one flag that feeds two fields (--image full=REF / min=REF): the NAME this field takes.
    flag_key: str | None = None
    secret: bool = False  # names where a secret is: a refused value is never shown back


    @property
    def metavar(self) -> str:
        """What the flag's value is, in words a help text shows (INT, FILE, {gzip,zstd,none}); '' for a flag."""
        return metavar_of(self.flag, self.kind)

    def help_for(self, command: str) -> str:
        """The help of the flag as `command` takes it: a clause that starts 'other: ...' is another
        command's, left out (one declaration serves several commands)."""
        parts = self.help.split("; ")
        mine = [part.partition(": ")[2] for part in parts if part.partition(": ")[0].strip() == command]
        if mine:  # the command's own clause replaces the others'
            text = "; ".join(mine)
            text = text[:1].upper() + text[1:]
        else:
            text = "; ".join(part for part in parts if not _other_commands_clause(part, command))
        return text if text.endswith(".") or not text else text + "."

    @property
    def param(self) -> str:
        """The python parameter name of the flag in the typer command."""
        return (self.flag or "").lstrip("-").replace("-", "_")


# Metavars of values whose kind says little by itself (Text's checks, numbers with a unit).
_METAVARS = {"--version": "YY.MM", "--registry": "PREFIX", "--to": "PREFIX", "--platform": "OS/ARCH[/VARIANT]",
             "--image": "full=REF|min=REF", "--backend": "NAME", "--repoagent": "NAME", "--cache": "NAME",
             "--ort-provider": "PROVIDER", "--flavour": "FLAVOUR", "--tag": "REF", "--push": "REF",
             "--sign-key": "SOURCE", "--sign-passphrase": "SOURCE", "--gpus": "{auto,all,none,N}",
             "--pip": "REQUIREMENT", "--pip-index-url": "URL", "--pip-extra-index-url": "URL",
             "--pip-trusted-host": "HOST", "--registry-backoff": "SECONDS", "--registry-tries": "INT"}


def metavar_of(flag: str | None, kind: Kind) -> str:
    """The metavar of a flag: its own above, else its kind's (a choice of words as {a,b})."""
    if isinstance(kind, Flag):
        return ""
    if flag in _METAVARS:
        return _METAVARS[flag]
    if isinstance(kind, Named):
        return kind.what
    if isinstance(kind, RequirementFiles):
        return "FILE"
    if isinstance(kind, LocalPath):
        return "DIR" if getattr(kind, "what", "") == "folder" else "FILE"
    if isinstance(kind, Number):
        return "INT" if kind.whole else "NUMBER"
    what = getattr(kind, "what", "") or ""
    words = [w.strip() for w in what.replace(" or ", ", ").split(",")]
    if len(words) > 1 and all(w.isalpha() and w.islower() for w in words):
        return "{" + ",".join(words) + "}"
    return "VALUE"


def _other_commands_clause(part: str, command: str) -> bool:
    """'smoke-test: a backend the image must hold' belongs to smoke-test's help only."""
    head, colon, _ = part.partition(": ")
    names = {BUILD, RENDER, BUNDLE, WHEELS, BACKENDS, SMOKE, MIRROR, INSPECT, VERIFY}
    return bool(colon) and head.strip() in names and head.strip() != command


_NAMES = Strings(check_name, "a list of names", unique=True)


def _no_credentials(url: str) -> str | None:
    parts = urlsplit(url)
    if parts.username or parts.password:
        return ("a URL in a set must not carry credentials: use an index without them, or index_url_env "
                "for one that needs them")
    return None

_REF = Text(check_reference, "an image reference")
_TAG_REF = Text(check_tag_reference, "an image reference")

OPTIONS: tuple[Option, ...] = (
    # images
    Option("images.version", "--version", "version", Text(check_release_name, "a release YY.MM"),
           "Triton release, YY.MM (e.g. 24.09).", short="-v", commands=COMPOSING + (WHEELS, BACKENDS, MIRROR)),
    Option("images.registry", "--registry", "registry", Text(check_prefix, "a registry prefix"),
           f"Registry prefix holding tritonserver images: a mirror, or localhost/standin (default {DEFAULT_REGISTRY}).",
           commands=COMPOSING + (WHEELS, BACKENDS, MIRROR), aliases=("--from",)),
    Option("images.full", "--image", "images.full", _REF, "Name a base image outright: full=REF or min=REF.",
           commands=COMPOSING + (WHEELS, BACKENDS), flag_key="full"),
    Option("images.min", "--image", "images.min", _REF, "Name a base image outright: full=REF or min=REF.",
           commands=COMPOSING + (WHEELS, BACKENDS), flag_key="min"),
    Option("images.registry_ca", "--registry-ca", "registry_ca", LocalPath("file"),
           "CA certificate for registries with their own CA (beyond /etc/docker/certs.d), used by the composer's "
           "registry client.", commands=(BUILD, BUNDLE, MIRROR, INSPECT, VERIFY), portable=False),
    Option("images.registry_tries", "--registry-tries", "registry_tries", Number(1, 100, whole=True),
           "Tries at a registry that drops the connection, does not answer or says 5xx/429, before the command "
           "gives up with one line (default 6; a blob's upload is tried again whole, skipping the blobs the "
           "registry holds already).", commands=(BUILD, MIRROR), portable=False),
    Option("images.registry_backoff", "--registry-backoff", "registry_backoff", Number(0, 60),
           "Seconds before the second try at a registry, doubled for each try after, at most 30 (default 1).",
           commands=(BUILD, MIRROR), portable=False),
    Option("mirror.to", "--to", None, Text(check_prefix, "a registry prefix"),
           "Registry prefix to copy into, e.g. harbor.example/nvidia.", commands=(MIRROR,), portable=False),
    Option("mirror.platform", "--platform", None, Text(platform_problem, "a platform os/arch[/variant]"),
           "Copy only this platform's image of each index: os/arch or os/arch/variant, e.g. linux/arm64 (default: every "
           "platform).",
           commands=(MIRROR,), portable=False),
    Option("mirror.to_engine", "--to-engine", None, Flag(),
           "Copy through the Docker engine (pull, then push), leaving the images in it; without it the images go "
           "from registry to registry and the engine holds nothing new.", commands=(MIRROR,), portable=False),
    # selection
    Option("selection.backends", "--backend", "backends", _NAMES,
           "A backend to include (repeatable); smoke-test: the backends the image must hold, exactly (repeatable, "
           "one more or one fewer in the image fails the check, default: those its composition record names).", short="-b", commands=COMPOSING + (WHEELS, SMOKE)),
    Option("selection.repoagents", "--repoagent", "repoagents", _NAMES, "A repository agent to include (repeatable)."),
    Option("selection.caches", "--cache", "caches", _NAMES, "A cache implementation to include (repeatable)."),
    Option("selection.custom_backends", "--custom-backend", "custom_backends",
           Named(Tree(), check_name, "NAME=DIR"), "Copy a local backend folder in: NAME=DIR (repeatable; to use it in place of an NGC backend, leave that one "
           "out of --backend).",
           portable=False),
    Option("selection.backend_images", "--backend-image", "backend_images", Named(_REF, check_name, "NAME=REF"),
           "Take a backend from another full image (another release): NAME=REF (repeatable)."),
    Option("selection.with_headers", "--with-headers", "with_headers", Flag(), "Include /opt/tritonserver/include."),
    Option("selection.base", "--base", "base", Text(check_base, "min or pruned", Base),
           "The base of the image: min (NGC's min image, as it is) or pruned (a new base made of only the packages "
           "and files of the min image the selection needs, proven before the tag moves)."),
    Option("selection.keep_tensorrt_builder", "--keep-tensorrt-builder", "keep_tensorrt_builder", Flag(),
           "With --base pruned: keep TensorRT's builder resource library (needed only to build engines, not to run "
           "them)."),
    Option("selection.ort_providers", "--ort-provider", "ort_providers",
           Strings(check_provider, "a list of provider names", unique=True),
           "An ONNX Runtime execution provider to keep (repeatable), as the onnxruntime backend's folder names it "
           "(libonnxruntime_providers_NAME.so: cuda, tensorrt, openvino); the CPU provider is always there, and "
           "--ort-provider cpu alone keeps no other (default: every provider the backend holds; with --device cpu: "
           "none but CPU)."),
    Option("selection.device", "--device", "device", Text(check_device, "gpu or cpu", Device),
           "gpu (default) or cpu: an image for hosts with no GPU (a pruned base, ONNX Runtime's CPU provider "
           "only, the pinned memory pool off by default, smoke-tested with no GPU)."),
    Option("selection.flavour", "--flavour", "flavour", Text(check_flavour, "a flavour", Flavour),
           "The release's image the composition is built on: py3 (default: the min image) or vllm (NGC's "
           "<release>-vllm-python-py3, whose python and vllm backends it keeps; other backends come from the py3 "
           "full image)."),
    Option("selection.bake_models", "--bake-models", "bake_models", ModelRepository(),
           "Copy this model repository into the image at /models (a layer of its own) and serve it by default; "
           "wheels: fetch its models' environments' wheels.", commands=COMPOSING + (WHEELS,), portable=False),
    Option("selection.model_envs", "--model-env", "model_envs", Named(RequirementsFile(), check_name,
           "MODEL=REQUIREMENTS"), "Build a python environment of its own for this model (a model of a baked repository "
           "gets one from its requirements.txt): MODEL=REQUIREMENTS (repeatable).", commands=(BUILD, RENDER, WHEELS),
           portable=False),
    # result
    Option("result.tag", "--tag", "tag", _TAG_REF, "Tag for the composed image (default names release and backends).",
           short="-t"),
    Option("result.labels", "--label", "labels", Named(Text(check_label_value, "a label value"), check_label_key,
           "KEY=VALUE"), "A label on the composed image: KEY=VALUE (repeatable).", commands=(BUILD, RENDER, BUNDLE)),
    Option("result.smoke_test", "--no-smoke-test", "smoke_test", Flag(inverted=True),
           "Tag without serving the samples first.", commands=(BUILD, BUNDLE)),
    Option("result.smoke_mode", "--smoke-test", "smoke_mode", Text(check_smoke_mode, "recorded or always"),
           "recorded (the default): an image, models, cases and host that passed before on this engine are not "
           "served again (the smoke table says when they passed); always: serve them anyway.",
           commands=(BUILD, BUNDLE), portable=False),
    Option("result.cache", "--no-cache", "build_cache", Flag(inverted=True),
           "Build from scratch: no step of the engine's build cache, no image or smoke test recorded before, "
           "a pruned base made again.",
           commands=(BUILD, BUNDLE), portable=False),
    Option("result.builders", "--builder", "builder",
           Strings(check_builder, "engine, buildkit, buildkit://unix:///PATH, buildkit://tcp://HOST:PORT or "
                   "buildkit://docker-container://NAME",
                   unique=True, one_or_many=True),
           "What builds the rendered Dockerfile: engine (default: the engine's own builder), or a BuildKit daemon: "
           "buildkit://unix:///PATH, buildkit://tcp://HOST:PORT, buildkit://docker-container://NAME (a daemon in a "
           "container, as buildx's docker-container driver runs one), or buildkit (BUILDKIT_HOST's address). The engine "
           "still runs the smoke test; the same inputs give the same image id either way. Repeatable: the run's "
           "sets are spread over the builders, each taking the next set when it is free.",
           commands=(BUILD,), portable=False),
    Option("result.builder_cache", "--builder-cache", "builder_cache", Text(check_prefix, "a repository, REGISTRY/PATH"),
           "With a BuildKit --builder: export the build's cache to this repository (BuildKit's registry cache, "
           "mode=max, a tag per Dockerfile and stage) and import it first, so a fresh builder rebuilds from it.",
           commands=(BUILD,), portable=False),
    Option("result.builder_tls", "--builder-tls", "builder_tls", TlsFolder(),
           "With a BuildKit --builder at tcp://: the folder of the client's TLS files (ca.pem, cert.pem, key.pem, "
           "or ca.crt, tls.crt, tls.key), as buildctl's --tlsdir takes it.", commands=(BUILD,), portable=False),
    Option("result.space_check", "--no-space-check", "space_check", Flag(inverted=True),
           "Build even when the estimate of what the build writes exceeds the free space at the engine's "
           "data root (see docs/guides/shared-engines-and-cache.md).", commands=(BUILD,), portable=False),
    Option("result.model_repository", "--model-repository", "model_repository", ModelRepository(),
           "Smoke-test these models too (beside the samples): each must load and answer its cases, or a "
           "request built from its configuration.", commands=(BUILD, SMOKE), portable=False),
    Option("result.smoke_cases", "--smoke-cases", "smoke_cases", CasesFile(),
           "A file of test cases (inputs, expected outputs) for the served models.", commands=(BUILD, SMOKE),
           portable=False),
    Option("result.samples", "--no-samples", "samples", Flag(inverted=True),
           "Serve only your models in the smoke test, not the samples.", commands=(BUILD, SMOKE)),
    Option("result.push", "--push", "push", _TAG_REF, "Push the image as REF once its smoke test passed.",
           commands=(BUILD,)),
    Option("result.push_via", "--push-via", "push_via", Text(check_push_via, "composer or engine"),
           "How --push pushes: composer (default: its own registry client, the same inputs giving the same digest, "
           "signed and attested) or engine (the engine's own push, as docker push does).", commands=(BUILD,)),
    Option("result.compression", "--compression", "compression",
           Text(check_compression, "gzip, zstd, estargz or none"),
           "How the layers the composer pushes are compressed: gzip (default: every runtime pulls it), zstd "
           "(faster to pull: containerd, Podman, Docker 23+), estargz (gzip a stargz snapshotter mounts lazily, "
           "every other runtime pulls as gzip; a build's push puts first what its smoke test saw the server "
           "read, a mirror's has no such list) or none; mirror: recompress every layer so on the way "
           "(new digests, without it the source's blobs are copied as they are).", commands=(BUILD, MIRROR)),
    Option("result.sign_key", "--sign-key", "sign_key", Text(check_secret_source, "file:PATH or env:NAME"),
           "Sign the pushed image and its provenance (cosign's format) with this PEM ECDSA P-256 private key: "
           "file:PATH or env:NAME (a variable holding the PEM). Never written anywhere.", commands=(BUILD,),
           portable=False, secret=True),
    Option("result.sign_passphrase", "--sign-passphrase", "sign_passphrase",
           Text(check_secret_source, "file:PATH or env:NAME"),
           "The passphrase of an encrypted --sign-key: file:PATH or env:NAME.", commands=(BUILD,), portable=False,
           secret=True),
    Option("result.sbom", "--sbom", "sbom", OutputFile(is_sbom),
           "Write the image's SBOM (CycloneDX JSON, as the image holds it) to this file too.", commands=(BUILD,),
           portable=False),
    Option("result.gpus", "--gpus", "gpus", Text(check_gpus, "auto, all, none or a number"),
           "GPUs for the smoke test: auto (all when the engine offers the NVIDIA runtime), all, none or N.",
           commands=(BUILD, SMOKE)),
    Option("result.strict", "--strict", "strict", Flag(), "Every SKIP of the smoke test fails the build.",
           commands=(BUILD, SMOKE)),
    # packages
    Option("packages.specs", "--pip", "packages.pip", Strings(check_requirement, "a list of strings"),
           "A python package for python models, pip requirement syntax (repeatable).",
           commands=COMPOSING + (WHEELS,)),
    Option("packages.specs", "--requirements", "packages.requirements", RequirementFiles(),
           "A requirements file (repeatable).", short="-r", commands=COMPOSING + (WHEELS,)),
    Option("packages.index_url", "--pip-index-url", "packages.index_url_env",
           FromEnvironment("the package index URL"),
           "Package index (may hold credentials: never written anywhere; env COMPOSER_PIP_INDEX_URL).",
           commands=COMPOSING + (WHEELS,), envvar="COMPOSER_PIP_INDEX_URL", portable=False),
    Option("packages.extra_index_urls", "--pip-extra-index-url", "packages.extra_index_urls",
           Strings(check_url, "a list of URLs", set_check=_no_credentials), "Extra package index (repeatable).",
           commands=COMPOSING + (WHEELS,), portable=False),
    Option("packages.trusted_hosts", "--pip-trusted-host", "packages.trusted_hosts",
           Strings(check_host, "a list of host names"), "Host pip may reach without valid TLS (repeatable).",
           commands=COMPOSING + (WHEELS,), portable=False),
    Option("packages.wheelhouse", "--wheelhouse", "packages.wheelhouse", LocalPath("folder", must_exist=False),
           "Install from this folder of wheels only, no index.", commands=COMPOSING, portable=False),
    Option("packages.ca_cert", "--ca-cert", "packages.ca_cert", LocalPath("file"),
           "CA certificate pip trusts when it fetches the packages on this machine.", commands=COMPOSING + (WHEELS,), portable=False),
)

# Keys a set may not hold, and why.
REFUSED_KEYS = {
    "packages.index_url": "a set never holds an index URL (it may carry credentials): put it in an environment "
                          "variable and name that variable with index_url_env",
}


def unique_fields() -> list[Option]:
    """The first declaration of each field (for records and manifests)."""
    seen, result = set(), []
    for option in OPTIONS:
        if option.field not in seen:
            seen.add(option.field)
            result.append(option)
    return result


def options_for(command: str) -> list[Option]:
    return [o for o in OPTIONS if o.flag and command in o.commands]


# -- the command line ---------------------------------------------------------------


def flags_for(command: str) -> list[Option]:
    """One declaration per distinct flag of `command` (--image feeds two fields)."""
    seen, result = set(), []
    for option in options_for(command):
        if option.flag not in seen:
            seen.add(option.flag)
            result.append(option)
    return result


def given_on_command_line(command: str, values: Mapping[str, Any], cwd: Path | None = None) -> dict[str, Any]:
    """Field path -> typed value for each field the command line gave (not given: absent).

    `values` maps each flag's parameter name to what typer parsed. Every value is checked here;
    a bad one is a UsageError naming the flag.
    """
    base = cwd or Path.cwd()
    given: dict[str, Any] = {}
    for option in options_for(command):
        raw = values.get(option.param)
        if raw is None or raw is False or (option.kind.repeatable and not raw):
            continue
        try:
            if option.flag_key is not None:
                pairs = _pairs(raw, option.flag)
                allowed = sorted(o.flag_key for o in OPTIONS if o.flag == option.flag)
                stray = [k for k, _ in pairs if k not in allowed]
                if stray:
                    raise Invalid(f"takes {' or '.join(f'{k}=REF' for k in allowed)}, not {stray[0]}=...")
                picked = [v for k, v in pairs if k == option.flag_key]
                if not picked:
                    continue
                value = option.kind.read(picked[-1], base)
            elif isinstance(option.kind, Flag):
                value = not option.kind.inverted
            elif isinstance(option.kind, Named):
                value = option.kind.read(_pairs(raw, option.flag), base)
            else:
                value = option.kind.read(raw, base)
        except Invalid as problem:
            if option.secret:  # where a secret comes from: a refused value may be the secret itself
                raise UsageError(f"{option.flag}: {problem}") from None
            values = raw if isinstance(raw, (list, tuple)) else [raw]
            shown = ", ".join(redact_url(str(v)) for v in values)  # a URL's credentials never echoed
            shown = shown if len(shown) <= 200 else shown[:200] + "..."
            raise UsageError(f"{option.flag} {printable(shown)}: {problem}") from None
        if option.field in given and isinstance(value, tuple):
            value = given[option.field] + value  # --pip and --requirements feed one field
        given[option.field] = value
    return given


def _pairs(raw: Iterable[str], flag: str | None) -> list[tuple[str, str]]:
    """The KEY=VALUE items of a repeatable flag (--image, --label, --custom-backend, ...): the one
    reading of them, so a KEY given twice is refused here for every such flag, as a single-valued
    option given twice is (the last would silently win, or a name would mean two things)."""
    pairs: list[tuple[str, str]] = []
    for item in raw:
        key, sep, value = str(item).partition("=")
        if not sep or not key or not value:
            raise Invalid(f"takes NAME=VALUE, got '{printable(redact_url(str(item))[:200])}'")
        first = next((v for k, v in pairs if k == key), None)
        if first is not None:
            shown = [printable(redact_url(v))[:80] for v in (first, value)]
            raise UsageError(f"{flag} {printable(key)[:80]} is given twice ({shown[0]} and {shown[1]}): give it once")
        pairs.append((key, value))
    return pairs


# -- records: a spec as JSON holds it (bundle manifests) -----------------------------


def spec_record(spec: CompositionSpec, *, portable_only: bool = False) -> dict:
    """Field path -> plain value; portable_only leaves out secrets and host-only values."""
    out = {}
    for option in unique_fields():
        if portable_only and not option.portable:
            continue
        out[option.field] = option.kind.plain(spec.get(option.field))
    return out


def spec_from_record(values: Mapping[str, Any], *, base: Path | None = None, source: str = "record",
                     **extra: Any) -> CompositionSpec:
    """The spec a record holds (a bundle's manifest): each value read and checked by its
    option's declaration, as a set file's are, and named `source: key: problem` when refused."""
    by_field = {o.field: o for o in unique_fields()}
    unknown = sorted(set(values) - set(by_field))
    if unknown:
        raise UsageError(f"{source}: {unknown[0]}: not a key of a composition")
    read = {}
    for field, raw in values.items():
        option = by_field[field]
        try:
            read[field] = None if raw is None else option.kind.read(raw, base or Path.cwd())
        except Invalid as problem:
            item = f"[{problem.item}]" if problem.item is not None else ""
            raise UsageError(f"{source}: {option.key or option.field}{item}: {problem}") from None
    return CompositionSpec(**extra).with_fields(read)
