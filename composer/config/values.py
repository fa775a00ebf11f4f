"""How one value of a user's input is read and checked: the kinds of option values, and the
checks of a single value (a release name, a reference, a URL, a label, a path).

Each check takes the value alone and returns what is wrong with it in words (None: nothing);
checks that need several fields, or the release catalog, are rules (composer.config.rules). A
kind reads what the command line or a set file gave into the spec's type, or raises Invalid.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence
from urllib.parse import urlsplit

from composer.catalog.catalog import RELEASE_PATTERN, Catalog, Flavour
from composer.config.cases import CaseError, read_cases_file, repository_problem
from composer.config.requirements import read_requirement_file
from composer.config.types import Base, Device, Providers
from composer.core.errors import Invalid, UsageError
from composer.core.files import MAX_VALUE, check_output_file, path_problem, printable, tree_problem
from composer.core.redaction import redact_url
from composer.core.refs import SHAPE, prefix_problem, reference_problem

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
ENV_NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Label keys: letters, digits and . _ - / (reverse-DNS style, as OCI recommends).
LABEL_KEY_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
# Labels the composer sets itself: a user's --label may not change them.
OWN_LABEL_PREFIXES = ("org.triton-composer.", "org.opencontainers.image.", "com.nvidia.")


# -- kinds: how one option's value is read and checked ----------------------------


class Kind:
    """How an option's values are read (command line, set file) and checked.

    `read` turns what the command line or YAML gave (strings, lists, mappings) into the typed
    value, raising Invalid; `read_set` is the same for a set file, where a kind may ask more
    (a set holds no secret); `cli_type` is what the typer parameter holds; `repeatable` makes
    the flag repeatable; `plain` gives the value as JSON holds it (bundle manifests, records).
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



class Text(Kind):
    """One string, checked; `make` turns it into the option's own type (Device, Base, Flavour)."""

    def __init__(self, check: Callable[[str], str | None] = lambda v: None, what: str = "a string",
                 make: Callable[[str], Any] = str):
        self.check, self.what, self.make = check, what, make

    def read(self, raw: Any, base: Path) -> Any:
        value = _text(raw, self.what)
        problem = self.check(value)
        if problem:
            raise Invalid(problem)
        return self.make(value)

    def plain(self, value: Any) -> Any:
        return None if value is None else str(value)


class Number(Kind):
    """A number between `low` and `high` (a whole one when `whole`): on the command line as text,
    in a set as a YAML number or a quoted one."""

    yaml_shape = "number"

    def __init__(self, low: float, high: float, whole: bool = False):
        self.low, self.high, self.whole = low, high, whole
        self.what = f"a {'whole ' if whole else ''}number from {low:g} to {high:g}"

    def read(self, raw: Any, base: Path) -> Any:
        if isinstance(raw, bool) or not isinstance(raw, (str, Path, int, float)):
            raise Invalid(f"expected {self.what}, got {type(raw).__name__}")
        text = _text(str(raw), self.what)
        try:
            value = int(text) if self.whole else float(text)
        except ValueError:
            raise Invalid(f"expected {self.what}, got {printable(text[:40])}") from None
        if not self.low <= value <= self.high:
            raise Invalid(f"expected {self.what}, got {text}")
        return value

    def plain(self, value: Any) -> Any:
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
                 unique: bool = False, set_check: Callable[[str], str | None] = lambda v: None,
                 one_or_many: bool = False):
        self.check, self.what, self.unique, self.set_check = check, what, unique, set_check
        self.one_or_many = one_or_many  # a set file may give one string for a list of one

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



class TlsFolder(LocalPath):
    """A folder of TLS files as buildctl's --tlsdir takes them: ca.pem, cert.pem and key.pem, or
    ca.crt, tls.crt and tls.key (a Kubernetes TLS secret mounted as is)."""

    NAMES = (("ca.pem", "cert.pem", "key.pem"), ("ca.crt", "tls.crt", "tls.key"))

    def __init__(self):
        super().__init__("folder")

    def read(self, raw: Any, base: Path) -> Path:
        path = super().read(raw, base)
        if not any(all((path / name).is_file() for name in names) for names in self.NAMES):
            raise Invalid(f"{path} holds neither ca.pem, cert.pem and key.pem nor ca.crt, tls.crt and tls.key")
        return path


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


def check_base(value: str) -> str | None:
    if value not in {b.value for b in Base}:
        return f"'{printable(value[:40])}' is not a base: give min (NGC's min image) or pruned (only what the selection needs of it)"
    return None


def check_device(value: str) -> str | None:
    if value not in {d.value for d in Device}:
        return f"'{printable(value[:40])}' is not a device: give gpu (NGC's GPU images) or cpu (hosts with no GPU)"
    return None


def check_flavour(value: str) -> str | None:
    problem = Catalog.load().flavour_problem(Flavour(value))
    return f"{problem[:200]}" if problem else None


def check_provider(value: str) -> str | None:
    problem = check_name(value)
    if problem:
        return problem
    if value == Providers.SHARED:
        return ("'shared' is not an execution provider: it is the library the other providers load through, "
                "kept with any of them")
    return None


PUSH_VIA = ("composer", "engine")
COMPRESSIONS = ("gzip", "zstd", "none", "estargz")


def check_push_via(value: str) -> str | None:
    if value not in PUSH_VIA:
        return (f"'{printable(value[:40])}' is not a way to push: give composer (its own registry client) or engine "
                "(the engine's push)")
    return None


SMOKE_MODES = ("recorded", "always")


def check_smoke_mode(value: str) -> str | None:
    if value not in SMOKE_MODES:
        return (f"'{printable(value[:40])}' is not a smoke-test mode: give recorded (a PASS recorded for the same "
                "image, models and host stands) or always")
    return None


def check_builder(value: str) -> str | None:
    """What builds: engine (the engine's own builder), buildkit (at BUILDKIT_HOST) or a buildkitd's
    address as buildctl takes it: buildkit://unix:///PATH, buildkit://tcp://HOST:PORT, or
    buildkit://docker-container://NAME (a daemon in a container, as buildx's docker-container driver
    runs one: buildx_buildkit_BUILDER0; buildctl reaches it through `docker exec`)."""
    if value in ("engine", "buildkit"):
        return None
    address = value[len("buildkit://"):] if value.startswith("buildkit://") else None
    if address and (re.fullmatch(r"unix:///[^\s\x00]+", address) or
                    re.fullmatch(r"tcp://[A-Za-z0-9.\-\[\]:]+:[0-9]{1,5}", address) or
                    re.fullmatch(r"docker-container://[A-Za-z0-9][A-Za-z0-9_.-]*", address)):
        return None
    return (f"'{printable(value[:80])}' is not a builder: give engine, buildkit (at BUILDKIT_HOST), "
            "buildkit://unix:///PATH, buildkit://tcp://HOST:PORT or buildkit://docker-container://NAME")


def check_compression(value: str) -> str | None:
    if value not in COMPRESSIONS:
        return f"'{printable(value[:40])}' is not a compression: give gzip, zstd, estargz or none"
    return None


def check_secret_source(value: str) -> str | None:
    """Where a secret is read from, never the secret itself: file:PATH or env:NAME."""
    scheme, _, where = value.partition(":")
    if scheme == "env" and ENV_NAME_PATTERN.match(where):
        return None
    if scheme == "file" and where:
        return None
    if value.lstrip().startswith("-----BEGIN"):
        return "give where the key is (file:PATH or env:NAME), never the key itself on a command line"
    # A secret given in place of its source: never shown back, not even in part.
    return "the value (not shown) is not file:PATH or env:NAME: give where the secret is, never the secret"


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
