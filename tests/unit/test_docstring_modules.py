"""Every composer module a docstring or comment under composer/ names exists.

A dotted name (`composer.registry.client.Registries`) must be a module or package, or a name
inside one (a function, class or value, or a name inside such a class); a path
(`composer/engine/tunnels.py`) must be a file or folder of the repository. Read from the source
with `ast` and `tokenize`: nothing is imported.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from functools import lru_cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOT = REPO / "composer"

DOTTED = re.compile(r"(?<![\w./-])composer(?:\.[A-Za-z_]\w*)+")
PATH = re.compile(r"(?<![\w./-])composer/[\w./-]*\w")



def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py")) if "__pycache__" not in p.parts}


@lru_cache(maxsize=None)
def _body(path: Path) -> list[ast.stmt]:
    return ast.parse(path.read_text()).body


def _names(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """The names a module or class body defines, each with its node (a class's, to look inside)."""
    found: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        found[name.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                found[(alias.asname or alias.name).split(".")[0]] = node
        elif isinstance(node, (ast.If, ast.Try)):  # names defined under `if TYPE_CHECKING` or a try
            for block in [node.body, node.orelse, *getattr(node, "handlers", ()), getattr(node, "finalbody", [])]:
                found.update(_names(block.body if isinstance(block, ast.ExceptHandler) else block))
    return found


def _exists(dotted: str, modules: dict[str, Path]) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        if module in modules:
            break
    else:
        return False
    body = _body(modules[module])
    for name in parts[cut:]:
        if f"{module}.{name}" in modules:  # a package's module not imported by its __init__
            module = f"{module}.{name}"
            body = _body(modules[module])
            continue
        node = _names(body).get(name)
        if node is None:
            return False
        body = node.body if isinstance(node, ast.ClassDef) else []
    return True


def _mentions(path: Path):
    """(line, text) of each docstring and comment of the file."""
    source = path.read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield node.body[0].lineno, doc
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


@lru_cache(maxsize=None)
def stale_names() -> dict[tuple[str, str], int]:
    """(file, name) -> line of each name that names nothing."""
    modules = _sources()
    stale: dict[tuple[str, str], int] = {}
    for path in modules.values():
        where = str(path.relative_to(REPO))
        for line, text in _mentions(path):
            for found in [*DOTTED.finditer(text), *PATH.finditer(text)]:
                name = found.group()
                if not (_exists(name, modules) if "/" not in name else (REPO / name).exists()):
                    stale.setdefault((where, name), line + text.count("\n", 0, found.start()))
    return stale


def test_every_module_a_docstring_names_exists():
    stale = {key: line for key, line in stale_names().items()}
    assert not stale, "docstrings and comments naming what does not exist:\n" + "\n".join(
        f"{where}:{line}: {name}" for (where, name), line in sorted(stale.items()))


def test_the_reader_tells_a_name_from_a_stale_one():
    modules = _sources()
    assert _exists("composer.resolve.resolve.resolve", modules)
    assert _exists("composer.registry.client.RegistryApi.digest", modules)
    assert _exists("composer.engine.interface", modules)
    assert not _exists("composer.registry.client.load_auth_again", modules)
    assert not _exists("composer.nowhere", modules)
    assert DOTTED.findall("see composer.verify.sbom.SBOM_PATH. Not triton-composer.x") == [
        "composer.verify.sbom.SBOM_PATH"]
