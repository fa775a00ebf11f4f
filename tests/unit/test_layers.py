"""The layers of composer/ import one way only, read from the import graph of the code itself.

Each module's imports (those inside functions too) are read with `ast`; a module may import a
module of its own layer or of a layer below it, never one above, and no set of modules may
import each other in a circle. The order is the flow of a composition (README: Layout).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "composer"

# Bottom to top. A package not listed here is not allowed to hold Python code of the product.
LAYERS = ("core", "catalog", "backends", "config", "engine", "registry", "resolve", "render", "assembly", "verify",
          "publish", "sources", "pipeline", "app", "cli")
APART = ("in_image", "verify.samples.models", "verify.samples.package_check")  # run inside images: no composer imports


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in ROOT.rglob("*.py") if "__pycache__" not in p.parts}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The composer modules `name` imports, wherever in the file the import stands."""
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and target != "composer":
                found.add(target)
    return found


def _layer(module: str) -> str | None:
    rest = module.split(".")[1:]
    if not rest:
        return None
    for apart in APART:
        if ".".join(rest).startswith(apart):
            return "apart"
    return rest[0]


def graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, path, known) for name, path in modules.items()}


def test_every_module_is_in_a_layer():
    stray = sorted(m for m in _modules() if _layer(m) not in (*LAYERS, "apart", None, "__main__"))
    assert not stray, f"modules outside the layers {LAYERS}: {stray}"


def test_no_import_runs_up_the_layers():
    upward = []
    for module, targets in graph().items():
        layer = _layer(module)
        if layer in (None, "__main__"):
            continue
        for target in targets:
            other = _layer(target)
            if other is None:
                continue
            if "apart" in (layer, other):
                upward.append(f"{module} -> {target} (code run inside images neither imports nor is imported)")
                continue
            if LAYERS.index(other) > LAYERS.index(layer):
                upward.append(f"{module} ({layer}) -> {target} ({other})")
    assert not upward, "imports that run up the layers:\n" + "\n".join(sorted(upward))


def test_no_import_cycle():
    edges = graph()
    # Tarjan's strongly connected components: any component of more than one module is a circle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    assert not circles, f"import cycles: {circles}"


def test_the_checker_sees_an_upward_import(tmp_path):
    """The reader finds imports inside functions and relative ones (so the tests above can fail)."""
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from composer.cli.main import main\n\nfrom ..verify import smoke\n")
    found = _imports("composer.config.m", module, {"composer.cli.main", "composer.verify.smoke", "composer.config.m"})
    assert found == {"composer.cli.main", "composer.verify.smoke"}
