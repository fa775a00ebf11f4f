"""Backend sets: one YAML file that fully describes one composed image.

A set is reviewed and versioned like code, so every mistake in it is reported as one line that
names the file, the line and the key. The YAML is read as a node tree (yaml.compose) to keep
those line numbers. A set never holds secrets: the package index URL is read from an
environment variable the set names. Which backends exist is not checked here; the full image
decides that later, as it does for the command line.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Mapping
from urllib.parse import urlsplit

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from composer.catalog import RELEASE_PATTERN
from composer.errors import UsageError
from composer.plan import DEFAULT_REGISTRY, NAME_PATTERN, BuildOptions, PackageOptions

PRESET_PACKAGE = "composer.backend_sets"
ENV_NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

TOP_KEYS = (
    "version", "registry", "images", "backends", "repoagents", "caches", "custom_backends",
    "backend_images", "with_headers", "tag", "packages", "smoke_test", "model_repository", "push",
)
IMAGE_KEYS = ("full", "min")
PACKAGE_KEYS = ("pip", "requirements", "index_url_env", "extra_index_urls", "trusted_hosts", "wheelhouse", "ca_cert")

_STR = "tag:yaml.org,2002:str"
_BOOL = "tag:yaml.org,2002:bool"
_NULL = "tag:yaml.org,2002:null"


@dataclass(frozen=True)
class BackendSet:
    """A loaded set: the build options it stands for, plus what happens after the build."""

    path: Path
    name: str  # the file's stem, e.g. "onnx-python"
    options: BuildOptions
    smoke_test: bool = True
    model_repository: Path | None = None
    push: str | None = None

    @property
    def backend_images(self) -> tuple[tuple[str, str], ...]:
        """Backend name -> the full image to take it from (kept in options, where the plan reads it)."""
        return self.options.backend_images


def load_set(path: Path, environ: Mapping[str, str] = os.environ) -> BackendSet:
    """Read and check the set file at `path`; relative paths in it resolve against its folder."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such set file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read the set file: {exc}") from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        problem = " ".join(str(exc.problem or exc.context or "syntax error").split())
        raise UsageError(f"{path}:{line}: invalid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"{path}:1: invalid YAML: {' '.join(str(exc).split())}") from None
    return _Reader(path, environ).read(root)


def override(base: BackendSet, **cli: Any) -> BackendSet:
    """The set with values given on the command line in place of its own.

    Keywords and what "not given" is for each (given values replace the set's, lists included;
    nothing is merged):

    - scalars, not given when None: version, registry, full_image, min_image, tag, index_url,
      wheelhouse, ca_cert, model_repository, push, smoke_test (False from --no-smoke-test).
    - with_headers: True (--with-headers) turns headers on; False or None leaves the set's value,
      since a flag cannot say "off" apart from "not given".
    - tuples, not given when empty: backends, repoagents, caches, custom_backends
      (((name, Path), ...)), backend_images (((name, ref), ...)), specs (the requirement lines
      from --pip and --requirements together: they replace the set's pip and requirements),
      extra_index_urls, trusted_hosts.

    Pass registry=None, not DEFAULT_REGISTRY, when --registry was not given, or the set's
    registry is lost. An unknown keyword is a TypeError (a bug in the caller).
    """
    unknown = sorted(set(cli) - set(_OVERRIDES))
    if unknown:
        raise TypeError(f"override() got unknown keyword(s): {', '.join(unknown)}")
    options = base.options
    option_changes: dict[str, Any] = {}
    package_changes: dict[str, Any] = {}
    set_changes: dict[str, Any] = {}
    for key, value in cli.items():
        target, field, convert = _OVERRIDES[key]
        if not _given(key, value):
            continue
        changes = {"options": option_changes, "packages": package_changes, "set": set_changes}[target]
        changes[field] = convert(value)
    if package_changes:
        option_changes["packages"] = dataclasses.replace(options.packages, **package_changes)
    if option_changes:
        set_changes["options"] = dataclasses.replace(options, **option_changes)
    return dataclasses.replace(base, **set_changes) if set_changes else base


def preset_path(name: str) -> Path:
    """A shipped preset by name (e.g. "onnx-python"), or the path of a set file."""
    candidate = Path(name)
    looks_like_path = os.sep in name or "/" in name or candidate.suffix in (".yaml", ".yml")
    if candidate.is_file():
        return candidate
    if looks_like_path:
        raise UsageError(f"{name}: no such set file")
    shipped = shipped_presets()
    if name in shipped:
        return presets_dir() / f"{name}.yaml"
    hint = difflib.get_close_matches(name, shipped, n=1, cutoff=0.5)
    did_you_mean = f" (did you mean '{hint[0]}'?)" if hint else ""
    raise UsageError(
        f"unknown backend set '{name}'{did_you_mean}: give a set file, or one of the shipped presets: "
        + (", ".join(shipped) or "none")
    )


def shipped_presets() -> list[str]:
    """Names of the presets that ship with the composer, sorted."""
    folder = presets_dir()
    return sorted(p.stem for p in folder.glob("*.yaml") if not p.name.endswith(".lock.yaml"))


def presets_dir() -> Path:
    """The folder of the shipped presets (backend_sets/ in the repository, inside the wheel)."""
    return Path(str(resources.files(PRESET_PACKAGE)))


# -- override table ---------------------------------------------------------------


def _same(value):
    return value


def _tuple(value):
    return tuple(value)


def _path(value):
    return Path(value).resolve()


_OVERRIDES: dict[str, tuple[str, str, Callable[[Any], Any]]] = {
    "version": ("options", "version", _same),
    "registry": ("options", "registry", _same),
    "full_image": ("options", "full_image", _same),
    "min_image": ("options", "min_image", _same),
    "tag": ("options", "tag", _same),
    "with_headers": ("options", "with_headers", bool),
    "backends": ("options", "backends", _tuple),
    "repoagents": ("options", "repoagents", _tuple),
    "caches": ("options", "caches", _tuple),
    "custom_backends": ("options", "custom_backends", lambda v: tuple((n, Path(p)) for n, p in v)),
    "specs": ("packages", "specs", _tuple),
    "index_url": ("packages", "index_url", _same),
    "extra_index_urls": ("packages", "extra_index_urls", _tuple),
    "trusted_hosts": ("packages", "trusted_hosts", _tuple),
    "wheelhouse": ("packages", "wheelhouse", _path),
    "ca_cert": ("packages", "ca_cert", _path),
    "backend_images": ("options", "backend_images", lambda v: tuple(sorted((n, r) for n, r in v))),
    "smoke_test": ("set", "smoke_test", bool),
    "model_repository": ("set", "model_repository", _path),
    "push": ("set", "push", _same),
}


def _given(key: str, value: Any) -> bool:
    if key == "with_headers":
        return bool(value)
    if isinstance(value, (tuple, list)):
        return len(value) > 0
    return value is not None


# -- reading ----------------------------------------------------------------------


class _Reader:
    """Turns the node tree of one set file into a BackendSet, or one precise UsageError."""

    def __init__(self, path: Path, environ: Mapping[str, str]):
        self.path = path
        self.folder = path.resolve().parent
        self.environ = environ

    def fail(self, node: Node | None, key: str, message: str) -> UsageError:
        line = node.start_mark.line + 1 if node is not None else 1
        where = f"{key}: " if key else ""
        return UsageError(f"{self.path}:{line}: {where}{message}")

    # structure

    def mapping(self, node: Node, key: str, allowed: tuple[str, ...] | None) -> dict[str, tuple[Node, Node]]:
        """key -> (key node, value node); unknown and duplicate keys are errors."""
        what = "a mapping" if key else "a mapping of settings (version, backends, ...)"
        if not isinstance(node, MappingNode):
            raise self.fail(node, key, f"expected {what}, got {_kind(node)}")
        entries: dict[str, tuple[Node, Node]] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag not in (_STR,):
                raise self.fail(key_node, key, f"keys are names, got {_kind(key_node)}")
            name = key_node.value
            full = f"{key}.{name}" if key else name
            if allowed is not None and name not in allowed:
                raise self.fail(key_node, full, "unknown key" + _did_you_mean(name, allowed))
            if name in entries:
                raise self.fail(key_node, full, f"duplicate key (first on line {entries[name][0].start_mark.line + 1})")
            entries[name] = (key_node, value_node)
        return entries

    def string(self, node: Node, key: str, what: str = "a string") -> str:
        if not isinstance(node, ScalarNode) or node.tag != _STR:
            raise self.fail(node, key, f"expected {what}, got {_kind(node)}")
        value = node.value.strip()
        if not value:
            raise self.fail(node, key, f"expected {what}, got an empty string")
        return value

    def boolean(self, node: Node, key: str) -> bool:
        if not isinstance(node, ScalarNode) or node.tag != _BOOL:
            raise self.fail(node, key, f"expected true or false, got {_kind(node)}")
        return node.value.lower() in ("true", "yes", "on")

    def strings(self, node: Node, key: str, what: str = "a list of strings") -> list[tuple[Node, str]]:
        if isinstance(node, ScalarNode) and node.tag == _NULL:
            return []
        if not isinstance(node, SequenceNode):
            raise self.fail(node, key, f"expected {what}, got {_kind(node)}")
        result = []
        for item in node.value:
            if not isinstance(item, ScalarNode) or item.tag != _STR:
                raise self.fail(item, key, f"expected {what}, one item is {_kind(item)}")
            result.append((item, self.string(item, key, what)))
        return result

    def names(self, node: Node, key: str) -> tuple[str, ...]:
        items = self.strings(node, key, "a list of names")
        for item, name in items:
            if not NAME_PATTERN.match(name):
                raise self.fail(item, key, f"'{name}' is not a name (letters, digits, '.', '_' or '-')")
        seen: set[str] = set()
        for item, name in items:
            if name in seen:
                raise self.fail(item, key, f"'{name}' is listed twice")
            seen.add(name)
        return tuple(name for _item, name in items)

    def named_values(self, node: Node, key: str, what: str) -> list[tuple[Node, str, str]]:
        """A mapping of names to strings, e.g. custom_backends: {mine: ./path}."""
        if isinstance(node, ScalarNode) and node.tag == _NULL:
            return []
        result = []
        for name, (key_node, value_node) in self.mapping(node, key, None).items():
            if not NAME_PATTERN.match(name):
                raise self.fail(key_node, key, f"'{name}' is not a name (letters, digits, '.', '_' or '-')")
            result.append((value_node, name, self.string(value_node, f"{key}.{name}", what)))
        return result

    def local_path(self, node: Node, key: str, text: str, kind: str | None) -> Path:
        """`text` resolved against the set's folder; `kind` ("file"/"folder") must exist, None: not checked."""
        path = (self.folder / Path(text).expanduser()).resolve()
        if kind == "file" and not path.is_file():
            raise self.fail(node, key, f"no such file {text} (relative to {self.folder})")
        if kind == "folder" and not path.is_dir():
            raise self.fail(node, key, f"no such folder {text} (relative to {self.folder})")
        return path

    def reference(self, node: Node, key: str) -> str:
        ref = self.string(node, key, "an image reference")
        if any(c.isspace() for c in ref):
            raise self.fail(node, key, f"'{ref}' is not an image reference (it holds spaces)")
        return ref

    # the set

    def read(self, root: Node | None) -> BackendSet:
        if root is None:
            raise self.fail(None, "", "the set is empty: give at least version and backends")
        entries = self.mapping(root, "", TOP_KEYS)
        value = {name: pair[1] for name, pair in entries.items()}

        version = None
        if "version" in value:
            node = value["version"]
            if isinstance(node, ScalarNode) and node.tag != _STR and node.tag != _NULL:
                raise self.fail(
                    node, "version",
                    f"quote the release, as in version: \"{node.value}\" (unquoted, YAML reads a number "
                    "and 24.10 would become 24.1)",
                )
            version = self.string(node, "version", "a release YY.MM in quotes")
            if not RELEASE_PATTERN.match(version):
                raise self.fail(node, "version", f"'{version}' is not a release: releases are named YY.MM, e.g. \"24.09\"")

        registry = self.reference(value["registry"], "registry") if "registry" in value else DEFAULT_REGISTRY
        images: dict[str, str] = {}
        if "images" in value:
            for name, (_k, node) in self.mapping(value["images"], "images", IMAGE_KEYS).items():
                images[name] = self.reference(node, f"images.{name}")
        if version is None and "full" not in images:
            raise self.fail(root, "version", "missing: give version: \"YY.MM\" (or images: {full: REF})")

        backends = self.names(value["backends"], "backends") if "backends" in value else ()
        repoagents = self.names(value["repoagents"], "repoagents") if "repoagents" in value else ()
        caches = self.names(value["caches"], "caches") if "caches" in value else ()
        customs: list[tuple[str, Path]] = []
        if "custom_backends" in value:
            for node, name, text in self.named_values(value["custom_backends"], "custom_backends", "a folder"):
                customs.append((name, self.local_path(node, f"custom_backends.{name}", text, "folder")))
        backend_images: list[tuple[str, str]] = []
        if "backend_images" in value:
            for node, name, _text in self.named_values(value["backend_images"], "backend_images", "an image reference"):
                backend_images.append((name, self.reference(node, f"backend_images.{name}")))
        if not backends and not customs and not backend_images:
            node = value.get("backends", root)
            raise self.fail(node, "backends", "select at least one backend (backends: [NAME, ...] or custom_backends)")

        with_headers = self.boolean(value["with_headers"], "with_headers") if "with_headers" in value else False
        smoke_test = self.boolean(value["smoke_test"], "smoke_test") if "smoke_test" in value else True
        tag = self.reference(value["tag"], "tag") if "tag" in value else None
        push = self.reference(value["push"], "push") if "push" in value else None
        model_repository = None
        if "model_repository" in value:
            node = value["model_repository"]
            model_repository = self.local_path(node, "model_repository", self.string(node, "model_repository", "a folder"), "folder")
        packages = self.packages(*entries["packages"]) if "packages" in entries else PackageOptions()

        options = BuildOptions(
            backends=backends,
            repoagents=repoagents,
            caches=caches,
            version=version,
            registry=registry,
            full_image=images.get("full"),
            min_image=images.get("min"),
            custom_backends=tuple(sorted(customs)),
            backend_images=tuple(sorted(backend_images)),
            with_headers=with_headers,
            tag=tag,
            packages=packages,
        )
        return BackendSet(
            path=self.path,
            name=_stem(self.path),
            options=options,
            smoke_test=smoke_test,
            model_repository=model_repository,
            push=push,
        )

    def packages(self, key_node: Node, node: Node) -> PackageOptions:
        from composer.packages import read_requirements

        if isinstance(node, ScalarNode) and node.tag == _NULL:
            return PackageOptions()
        entries = self.mapping(node, "packages", PACKAGE_KEYS + ("index_url",))
        value = {name: pair[1] for name, pair in entries.items()}
        if "index_url" in value:
            raise self.fail(
                entries["index_url"][0], "packages.index_url",
                "a set never holds an index URL (it may carry credentials): put it in an environment "
                "variable and name that variable with index_url_env",
            )
        specs = [spec for _n, spec in self.strings(value["pip"], "packages.pip")] if "pip" in value else []
        for item, text in self.strings(value.get("requirements"), "packages.requirements") if "requirements" in value else []:
            specs += read_requirements(self.local_path(item, "packages.requirements", text, "file"))
        index_url = None
        if "index_url_env" in value:
            node = value["index_url_env"]
            name = self.string(node, "packages.index_url_env", "the name of an environment variable")
            if not ENV_NAME_PATTERN.match(name):
                raise self.fail(
                    node, "packages.index_url_env",
                    "name the environment variable that holds the index URL, not the URL itself"
                    if "://" in name else f"'{name}' is not an environment variable name",
                )
            index_url = self.environ.get(name)
            if not index_url:
                raise self.fail(node, "packages.index_url_env", f"environment variable {name} is not set (it should hold the package index URL)")
        extra = []
        if "extra_index_urls" in value:
            for item, url in self.strings(value["extra_index_urls"], "packages.extra_index_urls", "a list of URLs"):
                if urlsplit(url).password or urlsplit(url).username:
                    raise self.fail(
                        item, "packages.extra_index_urls",
                        "a URL in a set must not carry credentials: use an index without them, "
                        "or index_url_env for one that needs them",
                    )
                extra.append(url)
        trusted = [h for _n, h in self.strings(value["trusted_hosts"], "packages.trusted_hosts", "a list of host names")] if "trusted_hosts" in value else []
        wheelhouse = None
        if "wheelhouse" in value:
            node = value["wheelhouse"]
            # Not checked here: `composer wheels` may be about to fill it; the build checks it.
            wheelhouse = self.local_path(node, "packages.wheelhouse", self.string(node, "packages.wheelhouse", "a folder"), None)
        ca_cert = None
        if "ca_cert" in value:
            node = value["ca_cert"]
            ca_cert = self.local_path(node, "packages.ca_cert", self.string(node, "packages.ca_cert", "a file"), "file")
        if (index_url or extra or wheelhouse or ca_cert) and not specs:
            raise self.fail(key_node, "packages", "package sources are given but no package: add pip: [SPEC] or requirements: [FILE]")
        return PackageOptions(
            specs=tuple(specs),
            index_url=index_url,
            extra_index_urls=tuple(extra),
            trusted_hosts=tuple(trusted),
            wheelhouse=wheelhouse,
            ca_cert=ca_cert,
        )


def _stem(path: Path) -> str:
    return path.name.rsplit(".", 1)[0] if path.suffix in (".yaml", ".yml") else path.name


def _kind(node: Node | None) -> str:
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    if isinstance(node, ScalarNode):
        return {
            _STR: "a string",
            _BOOL: f"a boolean ({node.value})",
            _NULL: "nothing",
            "tag:yaml.org,2002:int": f"a number ({node.value})",
            "tag:yaml.org,2002:float": f"a number ({node.value})",
        }.get(node.tag, f"'{node.value}'")
    return "nothing"


def _did_you_mean(name: str, allowed: tuple[str, ...]) -> str:
    """A close key (`backend` -> `backends`), else the list of known keys."""
    close = difflib.get_close_matches(name, allowed, n=1, cutoff=0.6)
    if close:
        return f" (did you mean '{close[0]}'?)"
    return ": known keys are " + ", ".join(allowed)
