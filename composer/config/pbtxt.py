"""A model's config.pbtxt, checked before any work: Triton's protobuf text format, lightly.

Not a full protobuf parser (the schema is Triton's, and the server reads the file): a syntactic
check that catches what is plainly not a model configuration (binary junk, a NUL byte, text that
is not UTF-8, JSON or YAML, unbalanced braces or brackets, an unterminated string), so a broken
file is refused with one line naming it instead of failing a build or a smoke test later. The
grammar taken: fields `name: value`, `name { ... }` (or `name: { ... }`, `< ... >`), lists
`name: [ v, ... ]` and `name [ { ... }, ... ]`, values that are strings (adjacent ones
concatenated), numbers or identifiers, `,` or `;` after a field, and `#` comments.
"""

from __future__ import annotations

import re
from pathlib import Path

from composer.core.errors import Invalid
from composer.core.files import printable, read_text
from composer.config.model_envs import CONFIG

MAX_CONFIG_BYTES = 1 << 20  # a model configuration is a few KB; an ensemble's, a few dozen
MAX_NESTING = 64  # Triton's configurations nest a handful of levels

_TOKEN = re.compile(r"""
    (?P<space>[ \t\r\n\f\v]+|\#[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<number>-?(?:0[xX][0-9a-fA-F]+|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFuUlL]?))
  | (?P<ident>-?[A-Za-z_][A-Za-z0-9_]*)
  | (?P<punct>[{}\[\]<>:,;])
""", re.VERBOSE)

_CLOSE = {"{": "}", "<": ">"}


class _Bad(Exception):
    def __init__(self, line: int, why: str):
        super().__init__(why)
        self.line, self.why = line, why


def syntax_problem(text: str) -> tuple[int, str] | None:
    """(line, why) where `text` is not protobuf text format; None when it reads as such."""
    if "\x00" in text:
        return text.count("\n", 0, text.index("\x00")) + 1, "it holds a NUL byte"
    try:
        _Parser(_tokens(text)).message(None, 0)
    except _Bad as bad:
        return bad.line, bad.why
    return None


def config_problem(folder: Path) -> str | None:
    """Why the config.pbtxt of the model folder `folder` is no model configuration (None: it
    reads as one, or the folder has none, which some backends allow): the one check of a
    model's configuration, for --bake-models and --model-repository alike."""
    path = Path(folder) / CONFIG
    if not path.exists() and not path.is_symlink():
        return None
    try:
        text = read_text(path, "model configuration", MAX_CONFIG_BYTES)
    except Invalid as problem:
        return str(problem)
    found = syntax_problem(text)
    if found is None:
        return None
    line, why = found
    return f"{printable(str(path))}:{line}: not a model configuration in protobuf text format ({why})"


def _tokens(text: str) -> list[tuple[str, str, int]]:
    """(kind, text, line) of every token; an unexpected character is a problem at its line."""
    tokens, pos, line = [], 0, 1
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            char = text[pos]
            why = "an unterminated string" if char in "\"'" else f"unexpected character {printable(repr(char))}"
            raise _Bad(line, why)
        kind, value = match.lastgroup, match.group()
        if kind != "space":
            tokens.append((kind, value, line))
        line += value.count("\n")
        pos = match.end()
    return tokens


def scalar_fields(text: str) -> list[tuple[str, str]]:
    """(path, value) of every scalar of a configuration that reads as protobuf text, in order: e.g.
    ("platform", "onnxruntime_onnx"), ("instance_group.kind", "KIND_GPU"),
    ("optimization.execution_accelerators.gpu_execution_accelerator.name", "tensorrt"); strings
    unquoted (escapes as written). Raises ValueError (with the line) where the text is not one."""
    if "\x00" in text:
        raise ValueError("it holds a NUL byte")
    parser = _Parser(_tokens_or_value_error(text))
    parser.found = []
    try:
        parser.message(None, 0)
    except _Bad as bad:
        raise ValueError(f"line {bad.line}: {bad.why}") from None
    return parser.found


def _tokens_or_value_error(text: str) -> list[tuple[str, str, int]]:
    try:
        return _tokens(text)
    except _Bad as bad:
        raise ValueError(f"line {bad.line}: {bad.why}") from None


def field_names(text: str) -> set[str]:
    """Every field name a configuration writes (sequence_batching, dynamic_batching, ...), nested
    ones included. Raises ValueError (with the line) where the text does not read as protobuf text."""
    return {value for kind, value, _line in _tokens_or_value_error(text) if kind == "ident"}


class _Parser:
    def __init__(self, tokens: list[tuple[str, str, int]]):
        self.tokens, self.at = tokens, 0
        self.path: list[str] = []  # the field names down to the value being read
        self.found: list[tuple[str, str]] | None = None  # scalars read, when asked (scalar_fields)

    def peek(self) -> tuple[str, str, int]:
        if self.at < len(self.tokens):
            return self.tokens[self.at]
        return ("end", "the end of the file", self.tokens[-1][2] if self.tokens else 1)

    def take(self) -> tuple[str, str, int]:
        token = self.peek()
        self.at += 1
        return token

    def fail(self, expected: str) -> _Bad:
        kind, value, line = self.peek()
        shown = value if kind == "end" else f"'{printable(value)[:40]}'"
        return _Bad(line, f"expected {expected}, got {shown}")

    def message(self, close: str | None, depth: int) -> None:
        """Fields up to `close` (None: the end of the file)."""
        if depth > MAX_NESTING:
            raise _Bad(self.peek()[2], f"nested deeper than {MAX_NESTING} levels")
        while True:
            kind, value, _ = self.peek()
            if (close is None and kind == "end") or (kind == "punct" and value == close):
                return
            if kind != "ident" or value.startswith("-"):
                raise self.fail("a field name" if close is None else f"a field name or '{close}'")
            self.take()
            self.path.append(value)
            self.field(depth)
            self.path.pop()
            if self.peek()[1] in (",", ";") and self.peek()[0] == "punct":
                self.take()

    def field(self, depth: int) -> None:
        kind, value, _ = self.peek()
        if kind == "punct" and value == ":":
            self.take()
            kind, value, _ = self.peek()
            if kind == "punct" and value == "[":
                self.list(depth)
            elif kind == "punct" and value in _CLOSE:
                self.block(depth)
            else:
                self.scalar()
        elif kind == "punct" and value in _CLOSE:
            self.block(depth)
        elif kind == "punct" and value == "[":  # a list of messages: name [ { ... }, { ... } ]
            self.list(depth)
        else:
            raise self.fail("':' or '{' after a field name")

    def block(self, depth: int) -> None:
        opening = self.take()[1]
        self.message(_CLOSE[opening], depth + 1)
        self.take()

    def list(self, depth: int) -> None:
        self.take()
        if self.peek()[0:2] == ("punct", "]"):
            self.take()
            return
        while True:
            kind, value, _ = self.peek()
            if kind == "punct" and value in _CLOSE:
                self.block(depth)
            else:
                self.scalar()
            kind, value, _ = self.take()
            if kind == "punct" and value == "]":
                return
            if not (kind == "punct" and value == ","):
                self.at -= 1
                raise self.fail("',' or ']' in a list")

    def scalar(self) -> None:
        kind, _, _ = self.peek()
        if kind == "string":
            parts = []
            while self.peek()[0] == "string":  # "a" "b": one string
                parts.append(self.take()[1][1:-1])
            value = "".join(parts)
        elif kind in ("number", "ident"):
            value = self.take()[1]
        else:
            raise self.fail("a value")
        if self.found is not None:
            self.found.append((".".join(self.path), value))
