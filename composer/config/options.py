"""The composition spec: everything a user asks of one composed image, as one typed value.

Every option is declared once, in OPTIONS below: the spec field it sets, its flag on the
command line, its key in a backend set, its help text and its kind (how a value is read and
checked). The CLI's parameters, the set reader (composer.config.sets), the bundle manifest and the
records come from these declarations, so a new option is one declaration plus its use in the
template. A set file and the command line give equal specs; a field given on the command line
replaces the set's value of that field (lists included: nothing is merged).
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence
from urllib.parse import urlsplit

from composer.core.errors import Invalid, UsageError
from composer.core.files import MAX_VALUE, check_output_file, path_problem, printable, tree_problem
from composer.core.platforms import platform_problem
from composer.core.redaction import redact_url
from composer.core.refs import SHAPE, prefix_problem, reference_problem
from composer.config.cases import CaseError, model_folders, read_cases_file, repository_problem
from composer.catalog.catalog import DEFAULT_FLAVOUR, RELEASE_PATTERN, Catalog
from composer.config.model_envs import ModelEnv, requested
from composer.config.model_needs import repository_needs_problem
from composer.config.requirements import check_requirement, read_requirement_file

DEFAULT_REGISTRY = "nvcr.io/nvidia"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
ENV_NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Label keys: letters, digits and . _ - / (reverse-DNS style, as OCI recommends).
LABEL_KEY_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
# Labels the composer sets itself: a user's --label may not change them.
OWN_LABEL_PREFIXES = ("org.triton-composer.", "org.opencontainers.image.", "com.nvidia.")


# -- the spec ---------------------------------------------------------------------


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
    model_envs: tuple[tuple[str, Path], ...] = ()  # model -> its requirements file (composer.resolve.model_envs)
    base: str | None = None  # "min": NGC's min image as it is; "pruned": only what the selection needs of it;
    # None: not asked (min, or pruned for --device cpu): read it through `base_of`
    keep_tensorrt_builder: bool = False  # a pruned base keeps TensorRT's builder resource library
    ort_providers: tuple[str, ...] = ()  # ONNX Runtime's execution providers kept (none given: every one)
    device: str = "gpu"  # "gpu": NGC's GPU composition; "cpu": for hosts with no GPU
    flavour: str = DEFAULT_FLAVOUR  # "py3": on the min image; "vllm": on the release's vLLM image

    @property
    def base_of(self) -> str:
        """The base the image is built on: as asked, else pruned for a CPU-only image, else min."""
        return self.base or ("pruned" if self.device == "cpu" else "min")


@dataclass(frozen=True)
class Images:
    """Which base images: a release in a registry, or images named outright."""

    version: str | None = None
    registry: str = DEFAULT_REGISTRY
    full: str | None = None
    min: str | None = None
    registry_ca: Path | None = None  # a CA the composer's registry client trusts, beyond the engine's


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


@dataclass(frozen=True)
class Mirror:
    """How `composer mirror` copies a release (nothing of a composed image)."""

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

    def to_dict(self, *, portable_only: bool = False) -> dict:
        """Field path -> plain value; portable_only leaves out secrets and host-only values."""
        out = {}
        for option in unique_fields():
            if portable_only and not option.portable:
                continue
            out[option.field] = option.kind.plain(self.get(option.field))
        return out

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], *, base: Path | None = None, source: str = "record",
                  **extra: Any) -> "CompositionSpec":
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
        return cls(**extra).with_fields(read)


# -- kinds: how one option's value is read and checked ----------------------------


class Kind:
    """How an option's values are read (command line, set file) and checked.

    `read` turns what the command line or YAML gave (strings, lists, mappings) into the typed
    value, raising Invalid; `read_set` is the same for a set file, where a kind may ask more
    (a set holds no secret); `cli_type` is what the typer parameter holds; `repeatable` makes
    the flag repeatable; `plain`/`typed` convert for JSON (bundle manifests).
    """

    cli_type: Any = str
    repeatable = False
    yaml_shape = "string"  # "string", "list", "mapping", "boolean"

    def read(self, raw: Any, base: Path) -> Any:
        return raw

    def read_set(self, raw: Any, base: Path, environ: Mapping[str, str]) -> Any:
        return self.read(raw, base)

    def plain(self, value: Any) -> Any:
        return value

    def typed(self, value: Any) -> Any:
        return value


class Text(Kind):
    def __init__(self, check: Callable[[str], str | None] = lambda v: None, what: str = "a string"):
        self.check, self.what = check, what

    def read(self, raw: str, base: Path) -> str:
        value = _text(raw, self.what)
        problem = self.check(value)
        if problem:
            raise Invalid(problem)
        return value


class Flag(Kind):
    cli_type = bool
    yaml_shape = "boolean"

    def __init__(self, inverted: bool = False):
        self.inverted = inverted  # --no-smoke-test sets smoke_test to False

    def read(self, raw: bool, base: Path) -> bool:
        if not isinstance(raw, bool):
            raise Invalid(f"expected true or false, got {type(raw).__name__}")
        return raw


class Strings(Kind):
    """A list of strings, each checked; `unique` refuses the same one twice."""

    repeatable = True
    yaml_shape = "list"

    def __init__(self, check: Callable[[str], str | None] = lambda v: None, what: str = "a list of strings",
                 unique: bool = False, set_check: Callable[[str], str | None] = lambda v: None):
        self.check, self.what, self.unique, self.set_check = check, what, unique, set_check

    def read_set(self, raw: Sequence[str], base: Path, environ: Mapping[str, str]) -> tuple[str, ...]:
        for index, item in enumerate(raw):
            problem = self.set_check(item)
            if problem:
                raise Invalid(problem, item=index)
        return self.read(raw, base)

    def read(self, raw: Sequence[str], base: Path) -> tuple[str, ...]:
        values = []
        for index, item in enumerate(raw):
            item = _text(item, self.what)
            problem = self.check(item)
            if problem:
                raise Invalid(problem, item=index)
            if self.unique and item in values:
                raise Invalid(f"'{item}' is listed twice", item=index)
            values.append(item)
        return tuple(values)

    def plain(self, value):
        return list(value)

    def typed(self, value):
        return tuple(value)


class RequirementFiles(Kind):
    """Files of requirement lines: the value is their lines (pip options refused)."""

    cli_type = Path
    repeatable = True
    yaml_shape = "list"

    def read(self, raw: Sequence[Any], base: Path) -> tuple[str, ...]:
        lines: list[str] = []
        for index, item in enumerate(raw):
            try:
                lines += read_requirement_file(LocalPath("file").read(item, base))
            except Invalid as problem:
                raise Invalid(str(problem), item=index) from None
        return tuple(lines)

    plain = Strings.plain
    typed = Strings.typed


class LocalPath(Kind):
    """A file or folder on this machine, resolved against the set's folder (or the cwd)."""

    cli_type = Path

    def __init__(self, what: str, must_exist: bool = True):
        self.what, self.must_exist = what, must_exist  # what: "file" or "folder"

    def read(self, raw: Any, base: Path) -> Path:
        text = _text(raw, f"a {self.what}")
        try:
            path = _local(base, text)
        except (OSError, RuntimeError, ValueError) as exc:  # a loop, a name too long, a NUL byte
            raise Invalid(f"{text}: {path_problem(Path(text), self.what) or exc}") from None
        problem = path_problem(path, self.what)
        if problem == f"no such {self.what}" and not self.must_exist:
            problem = None  # made later (a wheelhouse `composer wheels` fills)
        if problem:
            where = "" if Path(text).is_absolute() else f" (relative to {base})"
            raise Invalid(f"no such {self.what} {text}{where}" if problem.startswith("no such") else
                          problem + (f" ({text}{where})" if where else ""))
        return path

    def plain(self, value):
        return str(value) if value is not None else None

    def typed(self, value):
        return Path(value) if value is not None else None


class OutputFile(LocalPath):
    """A file the composer writes (--sbom), checked up front: no link, no folder, an existing
    file only when `ours(path)` says the composer wrote it."""

    def __init__(self, ours: Callable[[Path], bool]):
        super().__init__("file", must_exist=False)
        self.ours = ours

    def read(self, raw: Any, base: Path) -> Path:
        text = _text(raw, "a file")
        try:
            return check_output_file(_local(base, text), "", self.ours)
        except (OSError, RuntimeError, ValueError) as exc:
            raise Invalid(f"{text}: {exc}") from None
        except Invalid as problem:
            raise Invalid(str(problem).partition(": ")[2]) from None


def is_sbom(path) -> bool:
    """Whether the file at `path` is an SBOM this composer wrote (so --sbom may replace it)."""
    try:
        with open(path, "rb") as fh:
            data = json.loads(fh.read(64 * 1024 * 1024))
        return data.get("bomFormat") == "CycloneDX" and any(
            t.get("name") == "triton-composer" for t in data["metadata"]["tools"]["components"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


class Tree(LocalPath):
    """A folder copied into the image: every file in it readable, no link loops, checked up front."""

    def __init__(self):
        super().__init__("folder")

    def read(self, raw: Any, base: Path) -> Path:
        path = super().read(raw, base)
        problem = tree_problem(path)
        if problem:
            raise Invalid(problem)
        return path


class ModelRepository(Tree):
    """A Triton model repository on this machine: one folder per model, and any case files in
    them (composer.config.cases) readable, checked before any work starts."""

    def read(self, raw: Any, base: Path) -> Path:
        path = super().read(raw, base)
        problem = repository_problem(path)
        if problem:
            raise Invalid(problem)
        for requirements in sorted(path.glob("*/requirements.txt")):  # a model's own environment
            read_requirement_file(requirements)
        return path


class RequirementsFile(LocalPath):
    """A requirements file, its lines checked before any work starts (the value is its path)."""

    def __init__(self):
        super().__init__("file")

    def read(self, raw: Any, base: Path) -> Path:
        path = super().read(raw, base)
        read_requirement_file(path)
        return path


class CasesFile(LocalPath):
    """A file of smoke-test cases (composer.config.cases), read and checked before any work starts."""

    def __init__(self):
        super().__init__("file")

    def read(self, raw: Any, base: Path) -> Path:
        path = super().read(raw, base)
        try:
            read_cases_file(path)
        except CaseError as error:
            raise Invalid(str(error)) from None
        return path


class Named(Kind):
    """NAME=VALUE pairs (a mapping in a set): custom backends, backend images, labels."""

    repeatable = True
    yaml_shape = "mapping"

    def __init__(self, value: Kind, name_check: Callable[[str], str | None], what: str, keys: tuple[str, ...] = ()):
        self.value, self.name_check, self.what, self.keys = value, name_check, what, keys

    def read(self, raw: Iterable[tuple[str, Any]], base: Path) -> tuple[tuple[str, Any], ...]:
        result: dict[str, Any] = {}
        for name, value in raw:
            problem = self.name_check(name)
            if problem:
                raise Invalid(problem)
            result[name] = self.value.read(value, base)  # a name given twice: refused by _pairs
        return tuple(sorted(result.items()))

    def plain(self, value):
        return [[k, self.value.plain(v)] for k, v in value]

    def typed(self, value):
        return tuple((k, self.value.typed(v)) for k, v in value)


class FromEnvironment(Kind):
    """In a set: the name of an environment variable holding the value (a set holds no secret)."""

    def __init__(self, what: str):
        self.what = what

    def read(self, raw: str, base: Path) -> str:
        value = _text(raw, self.what)
        problem = check_url(value)
        if problem:
            raise Invalid(problem)
        return value

    def read_set(self, raw: str, base: Path, environ: Mapping[str, str]) -> str:
        name = _text(raw, "the name of an environment variable")
        if not ENV_NAME_PATTERN.match(name):
            raise Invalid("name the environment variable that holds the index URL, not the URL itself"
                          if "://" in name else f"'{printable(name)}' is not an environment variable name")
        value = environ.get(name, "").strip()
        if not value:
            raise Invalid(f"environment variable {name} is not set (it should hold {self.what})")
        try:
            return self.read(value, base)
        except Invalid as problem:
            raise Invalid(f"environment variable {name}: {problem}") from None


# -- checks shared by every input -------------------------------------------------


def check_release_name(value: str) -> str | None:
    if not RELEASE_PATTERN.fullmatch(value):
        return f"'{printable(value)}' is not a release: releases are named YY.MM, e.g. 24.09"
    return None


def check_name(value: str) -> str | None:
    if not NAME_PATTERN.fullmatch(value):
        return f"'{printable(value)}' is not a name (letters, digits, '.', '_' or '-')"
    return None


def check_reference(value: str) -> str | None:
    problem = reference_problem(value)
    return f"not a valid image reference ({problem}): expected {SHAPE}" if problem else None


def check_tag_reference(value: str) -> str | None:
    """A reference to write (--tag, --push): a tag, never a digest."""
    if "@" in value and not reference_problem(value):
        return "names a digest: give a tag to write, e.g. registry.example/team/triton:1.0"
    return check_reference(value)


def check_prefix(value: str) -> str | None:
    return prefix_problem(value)


def check_url(value: str) -> str | None:
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError:
        return f"'{printable(redact_url(value))}' is not a URL"
    if parts.scheme not in ("http", "https") or not parts.hostname or any(c.isspace() for c in value) \
            or not value.isascii():
        return f"'{printable(redact_url(value))}' is not an http(s) URL"
    return None


def check_host(value: str) -> str | None:
    if not re.fullmatch(r"[A-Za-z0-9.-]+(:[0-9]{1,5})?", value):
        return f"'{printable(value)}' is not a host name"
    return None


MAX_GPUS = 1024


BASES = ("min", "pruned")


def check_base(value: str) -> str | None:
    if value not in BASES:
        return f"'{printable(value[:40])}' is not a base: give min (NGC's min image) or pruned (only what the selection needs of it)"
    return None


DEVICES = ("gpu", "cpu")
# The ONNX Runtime providers a CPU-only image may keep beside the CPU provider (which is always there).
CPU_PROVIDERS = ("openvino",)
# Always kept; named alone (--ort-provider cpu), it keeps no other: ONNX models on the CPU of a GPU
# image (beside vLLM, say) without the gigabytes the CUDA and TensorRT providers reach.
CPU_PROVIDER = "cpu"
# The library of ONNX Runtime's providers that every other provider loads through: no provider of its own.
SHARED_PROVIDER = "shared"


def check_device(value: str) -> str | None:
    if value not in DEVICES:
        return f"'{printable(value[:40])}' is not a device: give gpu (NGC's GPU images) or cpu (hosts with no GPU)"
    return None


def check_flavour(value: str) -> str | None:
    problem = Catalog.load().flavour_problem(value)
    return f"{problem[:200]}" if problem else None


def check_provider(value: str) -> str | None:
    problem = check_name(value)
    if problem:
        return problem
    if value == SHARED_PROVIDER:
        return ("'shared' is not an execution provider: it is the library the other providers load through, "
                "kept with any of them")
    return None


def check_gpus(value: str) -> str | None:
    if value in ("auto", "all", "none"):
        return None
    try:
        ascii_number(value, "a number of GPUs", 1, MAX_GPUS)
    except Invalid:
        return (f"'{printable(value)}' is not a GPU request: give auto, all, none or a number of GPUs "
                f"(1 to {MAX_GPUS})")
    return None


def ascii_number(text: str, what: str, low: int, high: int) -> int:
    """A whole number written in ASCII digits (no sign, no other script's digits) within [low, high]."""
    value = str(text).strip()
    if not re.fullmatch(r"[0-9]{1,19}", value):
        raise Invalid(f"'{printable(value[:40])}' is not {what} (ASCII digits only)")
    number = int(value)
    if not low <= number <= high:
        raise Invalid(f"{number} is out of range for {what} ({low} to {high})")
    return number


def source_date_epoch(text: str) -> int:
    """SOURCE_DATE_EPOCH: whole seconds since 1970, up to the year 9999."""
    try:
        return ascii_number(text, "whole seconds since 1970", 0, 253402300799)
    except Invalid as problem:
        raise UsageError(f"SOURCE_DATE_EPOCH: {problem}") from None


def check_environment(environ: Mapping[str, str]) -> None:
    """Inputs a composition takes from the environment, checked before any work."""
    if environ.get("SOURCE_DATE_EPOCH") is not None:
        source_date_epoch(environ["SOURCE_DATE_EPOCH"])


def check_label_key(value: str) -> str | None:
    if not LABEL_KEY_PATTERN.fullmatch(value) or len(value) > 255:
        return f"'{printable(value)}' is not a label key (up to 255 ASCII letters, digits, '.', '_', '-', '/')"
    if value.startswith(OWN_LABEL_PREFIXES):
        return f"label {value} is set by the composer itself; choose another key"
    return None


def check_label_value(value: str) -> str | None:
    if any(ord(c) < 32 or c == "\x7f" for c in value):
        return "a label value is one line of text (no control characters)"
    return None


# -- the declarations -------------------------------------------------------------

BUILD, RENDER, BUNDLE, WHEELS, BACKENDS, SMOKE, MIRROR, INSPECT = (
    "build", "render", "bundle", "wheels", "backends", "smoke-test", "mirror", "inspect")
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

    @property
    def param(self) -> str:
        """The python parameter name of the flag in the typer command."""
        return (self.flag or "").lstrip("-").replace("-", "_")


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
           "registry client.", commands=(BUILD, BUNDLE, MIRROR, INSPECT), portable=False),
    Option("mirror.platform", "--platform", None, Text(platform_problem, "a platform os/arch[/variant]"),
           "Copy only this platform's image of each index: os/arch or os/arch/variant, e.g. linux/arm64 (default: every "
           "platform).",
           commands=(MIRROR,), portable=False),
    Option("mirror.to_engine", "--to-engine", None, Flag(),
           "Copy through the Docker engine (pull, then push), leaving the images in it; without it the images go "
           "from registry to registry and the engine holds nothing new.", commands=(MIRROR,), portable=False),
    # selection
    Option("selection.backends", "--backend", "backends", _NAMES,
           "A backend to include (repeatable); smoke-test: a backend the image must hold (default: those its "
           "composition record names).", short="-b", commands=COMPOSING + (WHEELS, SMOKE)),
    Option("selection.repoagents", "--repoagent", "repoagents", _NAMES, "A repository agent to include (repeatable)."),
    Option("selection.caches", "--cache", "caches", _NAMES, "A cache implementation to include (repeatable)."),
    Option("selection.custom_backends", "--custom-backend", "custom_backends",
           Named(Tree(), check_name, "NAME=DIR"), "Copy a local backend folder in: NAME=DIR (repeatable; to use it in place of an NGC backend, leave that one "
           "out of --backend).",
           portable=False),
    Option("selection.backend_images", "--backend-image", "backend_images", Named(_REF, check_name, "NAME=REF"),
           "Take a backend from another full image (another release): NAME=REF (repeatable)."),
    Option("selection.with_headers", "--with-headers", "with_headers", Flag(), "Include /opt/tritonserver/include."),
    Option("selection.base", "--base", "base", Text(check_base, "min or pruned"),
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
    Option("selection.device", "--device", "device", Text(check_device, "gpu or cpu"),
           "gpu (default) or cpu: an image for hosts with no GPU (a pruned base, ONNX Runtime's CPU provider "
           "only, the pinned memory pool off by default, smoke-tested with no GPU)."),
    Option("selection.flavour", "--flavour", "flavour", Text(check_flavour, "a flavour"),
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


# -- checks across fields -------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """A spec that cannot be built as a whole; `key` is the set key it is reported at."""

    key: str
    in_set: str
    on_command_line: str


def problems(spec: CompositionSpec, command: str | None = BUILD) -> list[Problem]:
    """What is wrong with the spec as a whole (each field was checked when it was read)."""
    found = []
    if command == MIRROR and not spec.images.version:
        found.append(Problem("version", 'missing: give version: "YY.MM"',
                             "--version is required: the release to mirror, YY.MM (e.g. 24.09)"))
    elif command not in (MIRROR, SMOKE) and not spec.images.version and not spec.images.full:
        found.append(Problem(
            "version", 'missing: give version: "YY.MM" (or images: {full: REF})',
            "give --version YY.MM (or --image full=REF), or a backend set with --set"))
    if spec.mirror.to_engine and spec.mirror.platform:
        found.append(Problem("platform", "to_engine copies the engine's own platform only: leave out platform",
                             f"--to-engine --platform {spec.mirror.platform}: the engine pulls its own platform's "
                             "image only; leave out --platform (or --to-engine to copy registry to registry)"))
    s = spec.selection
    if command in (None, BUILD, RENDER, BUNDLE, WHEELS) and not (s.backends or s.custom_backends or s.backend_images):
        found.append(Problem(
            "backends", "select at least one backend (backends: [NAME, ...] or custom_backends)",
            "select at least one backend with --backend NAME (composer backends lists them)"))
    taken = sorted(({n for n, _ in s.custom_backends} | {n for n, _ in s.backend_images}) & set(s.backends))
    if taken:
        found.append(Problem(
            "custom_backends", f"{taken[0]} is both an NGC backend of backends: and your own: to use yours in its "
            f"place, leave {taken[0]} out of backends",
            f"--backend {taken[0]} and --custom-backend/--backend-image {taken[0]}=... name one backend twice: to "
            f"use yours in place of NGC's, leave out --backend {taken[0]}"))
    clash = sorted({n for n, _ in s.custom_backends} & {n for n, _ in s.backend_images})
    if clash:
        found.append(Problem("custom_backends", f"{clash[0]} is both a custom backend and a backend image",
                             f"{clash[0]} is given by both --custom-backend and --backend-image: keep one"))
    if s.model_envs and "python" not in s.backends:
        found.append(Problem(
            "model_envs", "model_envs are python models' environments: add python to backends",
            f"--model-env {s.model_envs[0][0]}=...: environments are for python models; select --backend python too"))
    if s.device == "cpu":
        found += _cpu_problems(spec, command)
    if s.flavour != DEFAULT_FLAVOUR:
        found += _flavour_problems(spec)
    if s.keep_tensorrt_builder and s.base_of != "pruned":
        found.append(Problem(
            "keep_tensorrt_builder", "keep_tensorrt_builder applies to a pruned base: add base: pruned",
            "--keep-tensorrt-builder applies to a pruned base: add --base pruned"))
    r = spec.result
    if command == BUILD and r.smoke_test and not r.samples and not (r.model_repository or s.bake_models):
        found.append(Problem(
            "samples", "samples: false leaves the smoke test nothing to serve: add model_repository or bake_models",
            "--no-samples leaves the smoke test nothing to serve: add --model-repository DIR or --bake-models DIR"))
    p = spec.packages
    # A set may name a wheelhouse that `composer wheels` is about to fill: checked for builds only.
    if command in (BUILD, RENDER, BUNDLE) and p.wheelhouse is not None and not p.wheelhouse.is_dir():
        found.append(Problem("packages.wheelhouse", f"no such folder {p.wheelhouse}",
                             f"--wheelhouse {p.wheelhouse}: no such folder (composer wheels -o DIR fills one)"))
    if (p.wheelhouse or p.index_url or p.extra_index_urls or p.ca_cert) and not (p.specs or s.model_envs or s.bake_models):
        found.append(Problem(
            "packages", "package sources are given but no package: add pip: [SPEC] or requirements: [FILE]",
            "package sources were given but no package: add --pip SPEC or --requirements FILE"))
    return found


def _flavour_problems(spec: CompositionSpec) -> list[Problem]:
    """What a composition on a flavour's image (--flavour) cannot be yet."""
    s, found = spec.selection, []
    if s.device == "cpu":
        found.append(Problem("flavour", f"flavour: {s.flavour} is a GPU image: device: cpu does not apply",
                             f"--flavour {s.flavour} --device cpu: the {s.flavour} image is for GPU hosts; "
                             "leave out --device cpu"))
    return found


def _cpu_problems(spec: CompositionSpec, command: str | None) -> list[Problem]:
    """What a CPU-only image (--device cpu) cannot be."""
    s, r, found = spec.selection, spec.result, []
    if "tensorrt" in s.backends:
        found.append(Problem("backends", "device: cpu: the tensorrt backend runs only on a GPU; leave tensorrt out",
                             "--device cpu -b tensorrt: the tensorrt backend runs only on a GPU; leave it out"))
    if s.base == "min":
        found.append(Problem("base", "device: cpu needs base: pruned (a CPU image on the whole min image would "
                             "carry every GPU library); leave base out or give pruned",
                             "--device cpu needs a pruned base (the whole min image carries every GPU library): "
                             "leave out --base min"))
    gpu_only = [p for p in s.ort_providers if p not in CPU_PROVIDERS and p != CPU_PROVIDER]
    if gpu_only:
        found.append(Problem("ort_providers", f"device: cpu keeps only ONNX Runtime's CPU provider (and "
                             f"{', '.join(CPU_PROVIDERS)}): {gpu_only[0]} needs a GPU",
                             f"--device cpu --ort-provider {gpu_only[0]}: a CPU-only image keeps only ONNX Runtime's "
                             f"CPU provider (and {', '.join(CPU_PROVIDERS)}); {gpu_only[0]} needs a GPU"))
    if command in (None, BUILD, SMOKE) and r.gpus not in ("auto", "none"):
        found.append(Problem("gpus", f"device: cpu: the smoke test runs with no GPU; gpus: {r.gpus} does not apply",
                             f"--device cpu --gpus {r.gpus}: a CPU-only image is smoke-tested with no GPU "
                             "(give --gpus none or leave it out)"))
    if command in (None, BUILD, SMOKE) and r.strict:
        found.append(Problem("strict", "device: cpu: strict checks GPU SKIPs, which a CPU-only image does not have",
                             "--device cpu --strict: --strict is for GPU images (it fails each GPU check "
                             "skipped); a CPU-only image is smoke-tested with no GPU"))
    return found


def check(spec: CompositionSpec, command: str = BUILD) -> CompositionSpec:
    """The spec, or a UsageError for the first problem (as the command line names it): the one
    place a whole spec is checked, the release's existence in the catalog included."""
    found = problems(spec, command)
    if found:
        raise UsageError(found[0].on_command_line)
    if spec.images.version:
        catalog = Catalog.load()
        release = catalog.release(spec.images.version)  # unknown: refused before any work
        problem = catalog.flavour_problem(spec.selection.flavour, release)
        if problem:
            raise UsageError(f"--flavour {spec.selection.flavour}: {problem}")
    if command in (BUILD, RENDER, BUNDLE):
        problem = models_problem(spec, command)
        if problem:
            raise UsageError(problem)
    if command in (BUILD, RENDER, BUNDLE, WHEELS):
        envs = spec.model_envs()  # a model named twice, a config naming one: refused here
        if envs and command == BUNDLE:
            raise UsageError(f"model {envs[0].model} has its own python environment, which bundles do not carry yet: "
                             "build it where the index is reachable (or leave out --model-env and the models' "
                             "requirements.txt)")
    return spec


def kept_providers(selection: Selection) -> tuple[str, ...] | None:
    """ONNX Runtime's providers a composition keeps beside CPU (None: every one its backend holds)."""
    if selection.ort_providers or selection.device == "cpu":
        return tuple(sorted(p for p in selection.ort_providers if p != CPU_PROVIDER))
    return None


def models_problem(spec: CompositionSpec, command: str = BUILD) -> str | None:
    """The first model (of --bake-models, and of --model-repository for a build) that needs what the
    composition leaves out (--device cpu, --ort-provider), in one line naming it and the need."""
    s = spec.selection
    cpu, providers = s.device == "cpu", kept_providers(s)
    if not cpu and providers is None:
        return None
    sources = [("--bake-models", s.bake_models)]
    if command == BUILD:
        sources.append(("--model-repository", spec.result.model_repository))
    for flag, repository in sources:
        if repository is None:
            continue
        problem = repository_needs_problem(model_folders(repository), cpu, providers)
        if problem:
            return f"{flag} {repository}: {problem}"
    return None


# -- helpers ---------------------------------------------------------------------------


def _local(base: Path, text: Any) -> Path:
    return (base / Path(str(text)).expanduser()).resolve()


def _text(raw: Any, what: str) -> str:
    """A text value: not empty, not longer than MAX_VALUE (a label of 100 KB is a mistake)."""
    if not isinstance(raw, (str, Path)):
        raise Invalid(f"expected {what}, got {type(raw).__name__}")
    value = str(raw).strip()
    if not value:
        raise Invalid(f"expected {what}, got an empty string")
    if len(value) > MAX_VALUE:
        raise Invalid(f"expected {what} of at most {MAX_VALUE} characters, got {len(value)}")
    return value

