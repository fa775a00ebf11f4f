"""Backend sets: one YAML file that fully describes one composed image.

A set is reviewed and versioned like code, so every mistake in it is reported as one line that
names the file, the line and the key. The YAML is read as a node tree (yaml.compose) to keep
those line numbers. Which keys exist, and how each value is read and checked, comes from the
declarations in composer.config.options: a set and the command line give the same CompositionSpec. A set
never holds secrets: the package index URL is read from an environment variable the set names.
Which backends exist is not checked here; the full image decides that later.
"""

from __future__ import annotations

import difflib
import os
from importlib import resources
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from composer.core.errors import UsageError
from composer.core.files import check_nodes, path_problem, printable, read_text
from composer.config.options import OPTIONS, Option, REFUSED_KEYS
from composer.config.rules import Invocation, problems
from composer.config.types import CompositionSpec
from composer.config.values import Flag, Named
from composer.core.errors import Invalid

PRESET_PACKAGE = "composer.backend_sets"
# Limits on what a set file may be, so a hostile or broken one fails in one line.
MAX_SET_BYTES = 1 << 20
MAX_DEPTH = 8

_STR = "tag:yaml.org,2002:str"
_BOOL = "tag:yaml.org,2002:bool"
_NULL = "tag:yaml.org,2002:null"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"


def _keys() -> tuple[list[str], dict[str, list[str]]]:
    """Top-level keys and each group's keys, in declaration order."""
    top: list[str] = []
    groups: dict[str, list[str]] = {}
    for key in [o.key for o in OPTIONS if o.key] + list(REFUSED_KEYS):
        head, _, rest = key.partition(".")
        if head not in top:
            top.append(head)
        if rest and rest not in groups.setdefault(head, []):
            groups[head].append(rest)
    return top, groups


def load_set(path: Path, environ: Mapping[str, str] = os.environ) -> CompositionSpec:
    """Read and check the set file at `path`; relative paths in it resolve against its folder."""
    path = Path(path)
    try:  # a regular file of text only: a FIFO or /dev/zero is refused, never read
        text = read_text(path, "set file", MAX_SET_BYTES)
    except Invalid as problem:
        if "larger than" in str(problem):
            raise UsageError(f"{printable(str(path))}: a set file is at most {MAX_SET_BYTES} bytes") from None
        raise UsageError(f"--set: {problem}") from None  # a folder, a FIFO, a device: the flag and what it is
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        problem = " ".join(str(exc.problem or exc.context or "syntax error").split())
        raise UsageError(f"{path}:{line}: invalid YAML: {problem}") from None
    except (yaml.YAMLError, RecursionError) as exc:
        raise UsageError(f"{path}:1: invalid YAML: {' '.join(str(exc).split()) or 'nested too deeply'}") from None
    _check_depth(path, root)
    return _Reader(path, environ).read(root)


def override(base: CompositionSpec, given: Mapping[str, Any]) -> CompositionSpec:
    """The set's spec with the fields given on the command line in place of its own.

    The one rule: a field the command line gives replaces the set's value of that field, lists
    included (nothing is merged); --pip and --requirements together give one field, the
    requirement lines. Flags that are off (--with-headers not given) say nothing.
    """
    return base.with_fields(given)


def specs_from_sets(names: Sequence[str], given: Mapping[str, Any],
                    environ: Mapping[str, str] = os.environ) -> list[CompositionSpec]:
    """A spec per set file (or shipped preset), command-line fields in place of the set's."""
    return [override(load_set(preset_path(name), environ), given) for name in names]


def _check_depth(path: Path, root: Node | None) -> None:
    """No set nests deeper than a few levels, nor expands aliases far: refused before reading it."""
    try:
        check_nodes(root, str(path), MAX_DEPTH)
    except Invalid as problem:
        raise UsageError(str(problem).replace(f"deeper than {MAX_DEPTH} levels",
                                              f"deeper than a set ever is ({MAX_DEPTH} levels)")) from None


def preset_path(name: str) -> Path:
    """A shipped preset by name (e.g. "onnx-python"), or the path of a set file."""
    candidate = Path(name)
    looks_like_path = os.sep in name or "/" in name or candidate.suffix in (".yaml", ".yml")
    problem = path_problem(candidate, "file")
    if problem is None or (looks_like_path and problem != "no such file"):
        return candidate  # load_set says what is wrong with it
    if looks_like_path:
        raise UsageError(f"{printable(name)}: no such set file")
    shipped = shipped_presets()
    if name in shipped:
        return presets_dir() / f"{name}.yaml"
    if problem != "no such file":
        return candidate  # a folder (or FIFO, ...) of that name and no such preset: load_set says what it is
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

    def named_values(self, node: Node, key: str, kind: Named) -> list[tuple[Node, str, str]]:
        """A mapping of names to strings, e.g. custom_backends: {mine: ./path}; names checked."""
        if isinstance(node, ScalarNode) and node.tag == _NULL:
            return []
        result = []
        for name, (key_node, value_node) in self.mapping(node, key, None).items():
            problem = kind.name_check(name)
            if problem:
                raise self.fail(key_node, key, problem)
            result.append((value_node, name, self.string(value_node, f"{key}.{name}", kind.value.what)))
        return result

    # the set

    def read(self, root: Node | None) -> CompositionSpec:
        if root is None:
            raise self.fail(None, "", "the set is empty: give at least version and backends")
        top, groups = _keys()
        entries = self.mapping(root, "", tuple(top))
        nodes: dict[str, Node] = {}  # set key -> its value node (group keys: their key node)
        for head, (key_node, value_node) in entries.items():
            if head in groups:
                nodes[head] = key_node
                if isinstance(value_node, ScalarNode) and value_node.tag == _NULL:
                    continue
                for rest, (_k, node) in self.mapping(value_node, head, tuple(groups[head])).items():
                    nodes[f"{head}.{rest}"] = node
            else:
                nodes[head] = value_node
        for key, why in REFUSED_KEYS.items():
            if key in nodes:
                raise self.fail(nodes[key], key, why)
        values: dict[str, Any] = {}
        for option in OPTIONS:
            if option.key in nodes:
                value = self.value(option, nodes[option.key])
                previous = values.get(option.field)
                values[option.field] = previous + value if isinstance(previous, tuple) else value
        spec = CompositionSpec(name=_stem(self.path), source=self.path).with_fields(values)
        for problem in problems(spec, Invocation(None)):
            node = nodes.get(problem.key, root)
            if problem.key in groups:  # a group is reported at its key's line
                node = entries[problem.key][0] if problem.key in entries else root
            raise self.fail(node, problem.key, problem.in_set)
        return spec

    def value(self, option: Option, node: Node) -> Any:
        """One option's value from its node, in the YAML shape its kind takes, read by the kind."""
        kind, key = option.kind, option.key
        try:
            if isinstance(kind, Flag):
                return self.boolean(node, key)
            if isinstance(kind, Named):
                pairs = []
                for value_node, name, text in self.named_values(node, key, kind):
                    try:
                        pairs.append((name, kind.value.read_set(text, self.folder, self.environ)))
                    except Invalid as problem:
                        raise self.fail(value_node, f"{key}.{name}", str(problem)) from None
                return tuple(sorted(pairs))
            if kind.yaml_shape == "list":
                one = getattr(kind, "one_or_many", False) and isinstance(node, ScalarNode) and node.tag == _STR
                items = ([(node, self.string(node, key, kind.what))] if one
                         else self.strings(node, key, getattr(kind, "what", "a list of strings")))
                try:
                    return kind.read_set([text for _item, text in items], self.folder, self.environ)
                except Invalid as problem:  # at the line of the item at fault
                    raise self.fail(items[problem.item][0] if problem.item is not None else node, key,
                                    str(problem)) from None
            if kind.yaml_shape == "number" and isinstance(node, ScalarNode) and node.tag in (_INT, _FLOAT):
                return kind.read_set(node.value, self.folder, self.environ)
            if isinstance(node, ScalarNode) and node.tag in (_INT, _FLOAT):
                raise self.fail(node, key, f"quote it, as in {key}: \"{node.value}\" (unquoted, YAML reads a "
                                           "number, and 24.10 would become 24.1)")
            return kind.read_set(self.string(node, key, getattr(kind, "what", "a string")), self.folder, self.environ)
        except Invalid as problem:
            raise self.fail(node, key, str(problem)) from None


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
            _INT: f"a number ({node.value})",
            _FLOAT: f"a number ({node.value})",
        }.get(node.tag, f"'{node.value}'")
    return "nothing"


def _did_you_mean(name: str, allowed: tuple[str, ...]) -> str:
    """A close key (`backend` -> `backends`), else the list of known keys."""
    close = difflib.get_close_matches(name, allowed, n=1, cutoff=0.6)
    if close:
        return f" (did you mean '{close[0]}'?)"
    return ": known keys are " + ", ".join(allowed)
