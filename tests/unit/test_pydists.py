"""The python distributions a pruned vLLM base keeps (in_image/pydists.py, prune.py --python).

Fabricated dist-info folders in a site folder: the closure follows Requires-Dist with markers
evaluated for this python and platform, follows an extra only when a kept requirement asks for it,
ends on a cycle, and names an unconditional requirement that is not installed; prune.py keeps every
file of a kept distribution (with what its ELF files need, resolved as the loader would) and drops
the files of the others and the files nothing owns under the site folders.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from composer.in_image import prune, pydists
from tests.unit.test_probe import make_elf

ENV = {"python_version": "3.11", "python_full_version": "3.11.2", "sys_platform": "linux",
       "platform_machine": "x86_64", "platform_system": "Linux", "implementation_name": "cpython",
       "os_name": "posix", "platform_python_implementation": "CPython"}


def dist(site: Path, name: str, version: str, requires=(), files=(), extras=(), top_level=None) -> None:
    """A dist-info folder as pip leaves it: METADATA, RECORD (listing every file) and the files."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = [f"Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Provides-Extra: {e}" for e in extras] + [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n\n")
    if top_level is not None:
        (info / "top_level.txt").write_text(top_level + "\n")
    record = [f"{info.name}/METADATA,,", f"{info.name}/RECORD,,"]
    for relative in files:
        path = site / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            path.write_text("x = 1\n")
        record.append(f"{relative},sha256=abc,6")
    (info / "RECORD").write_text("\n".join(record) + "\n")


@pytest.fixture
def site(tmp_path):
    site = tmp_path / "dist-packages"
    dist(site, "vllm", "0.5.3.post1", ["torch (==2.3.1)", "Fancy_Lib[speed] >=1", "pywin32; sys_platform == 'win32'",
                                        "uvloop; sys_platform != 'win32' and python_version >= '3.8'",
                                        "docs-tool; extra == 'docs'", "not-installed-at-all",
                                        "also-absent; python_version < '4'"],
         ["vllm/__init__.py"], extras=["docs"])
    dist(site, "torch", "2.3.1", ["nvidia-cudnn-cu12 ==9.1.0.70; platform_system == \"Linux\" and "
                                  "platform_machine == \"x86_64\"", "sympy"], ["torch/__init__.py"])
    dist(site, "nvidia-cudnn-cu12", "9.1.0.70", [], ["nvidia/cudnn/__init__.py"])
    dist(site, "fancy-lib", "1.0", ["speedups; extra == \"speed\"", "slowpath; extra == \"slow\""],
         ["fancy_lib/__init__.py"], extras=["speed", "slow"])
    dist(site, "speedups", "1.0", ["fancy.lib"], ["speedups.py"])  # a cycle back to fancy-lib
    dist(site, "slowpath", "1.0", [], ["slowpath.py"])
    dist(site, "sympy", "1.13", [], ["sympy/__init__.py"])
    dist(site, "uvloop", "0.19", [], ["uvloop/__init__.py"])
    dist(site, "docs-tool", "1.0", [], ["docs_tool/__init__.py"])
    dist(site, "pywin32", "306", [], ["win32/__init__.py"])
    dist(site, "unused", "1.0", [], ["unused/__init__.py"], top_level="unused")
    return site


def closure(site, roots=("vllm",)):
    found = pydists.Closure(pydists.installed([str(site)]), ENV)
    for root in roots:
        found.add(root, f"{root} (asked for)")
    found.settle()
    return found


def test_requirements_markers_and_extras_are_followed_until_nothing_changes(site):
    kept = closure(site)
    assert sorted(kept.why) == ["fancy-lib", "nvidia-cudnn-cu12", "speedups", "sympy", "torch", "uvloop", "vllm"]
    assert kept.why["nvidia-cudnn-cu12"] == "vllm (asked for) -> torch -> nvidia-cudnn-cu12"
    assert kept.why["speedups"] == "vllm (asked for) -> fancy-lib -> speedups"  # the extra vllm asks for
    assert kept.extras["fancy-lib"] == {"speed"}  # not "slow": nothing kept asks for it
    assert "docs-tool" not in kept.why and "pywin32" not in kept.why  # an extra not asked; another platform


def test_a_missing_distribution_is_named_when_unconditional(site):
    kept = closure(site)
    assert kept.missing == [("not-installed-at-all", "vllm requires it")]
    assert kept.absent == [("also-absent; python_version < '4'", "vllm requires it")]


@pytest.mark.parametrize("marker, expected", [
    ("python_version >= '3.8'", True), ("python_version < '3.10'", False), ("python_full_version == '3.11.*'", True),
    ("python_version ~= '3.9'", True), ("'linux' in sys_platform", True), ("sys_platform not in 'win32 cygwin'", True),
    ("(os_name == 'nt' or platform_machine == 'x86_64') and implementation_name == \"cpython\"", True),
    ("extra == 'Speed_Up'", False), ("platform_machine == 'aarch64' or platform_machine == 'arm64'", False),
])
def test_markers(marker, expected):
    assert pydists.evaluate(marker, dict(ENV, extra="")) is expected
    assert pydists.evaluate("extra == 'Speed_Up'", dict(ENV, extra="speed-up")) is True


def test_requirement_lines():
    r = pydists.Requirement("Fancy_Lib[Speed, slow] (>=1.0) ; python_version >= '3'")
    assert (r.name, sorted(r.extras), r.marker) == ("fancy-lib", ["slow", "speed"], "python_version >= '3'")
    assert pydists.Requirement("foo @ https://example.invalid/foo.whl").name == "foo"
    egg = pydists._requires_txt("a\n[speed]\nb\n[:sys_platform == 'win32']\nc\n")
    assert [(x.name, x.marker) for x in egg] == [("a", None), ("b", 'extra == "speed"'),
                                                   ("c", "(sys_platform == 'win32')")]


def test_imported_modules_map_to_distributions(site, tmp_path):
    code = tmp_path / "model.py"
    code.write_text("import json\nimport numpy as np\nfrom vllm.engine import x\nfrom . import y\n"
                    "def f():\n    import unused.sub\n")
    imported = pydists.imported_modules([str(code)])
    assert sorted(imported) == ["json", "numpy", "unused", "vllm"]
    by_module = pydists.Closure(pydists.installed([str(site)]), ENV).by_module
    assert by_module["vllm"] == "vllm" and by_module["fancy_lib"] == "fancy-lib" and by_module["speedups"] == "speedups"


def test_prune_keeps_kept_distributions_files_and_what_their_elf_files_need(site, tmp_path):
    """prune.py --python: roots from the kept code's imports, a kept distribution's ELF file keeps the
    distribution owning the library it needs (through its RUNPATH), the rest of the site goes."""
    torch_lib = site / "torch" / "lib" / "libtorch_cuda.so"
    make_elf(torch_lib, soname="libtorch_cuda.so", needed=["libcudnn.so.9"], runpath="$ORIGIN/../../nvidia/cudnn/lib")
    make_elf(site / "nvidia" / "cudnn" / "lib" / "libcudnn.so.9", soname="libcudnn.so.9")
    make_elf(site / "nvidia" / "cublas" / "lib" / "libcublas.so.12", soname="libcublas.so.12")
    info = next(site.glob("torch-*.dist-info"))
    (info / "RECORD").write_text((info / "RECORD").read_text() + "torch/lib/libtorch_cuda.so,,\n")
    info = next(site.glob("nvidia_cudnn*.dist-info"))
    (info / "RECORD").write_text((info / "RECORD").read_text() + "nvidia/cudnn/lib/libcudnn.so.9,,\n")
    dist(site, "nvidia-cublas-cu12", "12.1", [], ["nvidia/cublas/lib/libcublas.so.12"])
    (site / "stray.txt").write_text("no RECORD lists me\n")
    root = tmp_path / "opt" / "tritonserver"
    (root / "backends" / "llm").mkdir(parents=True)
    (root / "backends" / "llm" / "model.py").write_text("import vllm\nimport sympy\n")
    dpkg = tmp_path / "dpkg"
    (dpkg / "info").mkdir(parents=True)
    (dpkg / "status").write_text("")
    db = prune.Database(str(dpkg))
    resolver = prune.elfdeps.Resolver(str(root), [], [])
    keeper = prune.Keeper(db, resolver, str(root), {}, False, ["backends/llm"])
    imported = prune.python_roots(keeper, pydists.installed([str(site)]), str(root), ["backends/llm"], ["unused"])
    keeper = prune.decide(db, resolver, str(root), [], {}, False, ["backends/llm"], keeper)
    assert imported == {"sympy": "sympy", "vllm": "vllm"}
    assert keeper.dists.why["vllm"] == "vllm (imported by backends/llm/model.py)"
    assert keeper.dists.why["unused"] == "unused (asked for)"
    assert "nvidia-cublas-cu12" not in keeper.dists.why
    out = tmp_path / "out"
    result = prune.write_outputs(str(out), db, keeper, False, str(dpkg / "info"))
    result = prune.write_python_outputs(str(out), db, keeper, [str(site)], imported, result)
    drops = set((out / "drop.txt").read_text().split())
    base = str(site).lstrip("/")
    assert f"{base}/nvidia/cublas/lib/libcublas.so.12" in drops and f"{base}/stray.txt" in drops
    assert f"{base}/docs_tool/__init__.py" in drops and f"{base}/pywin32-306.dist-info/RECORD" in drops
    assert not any(d.startswith((f"{base}/torch/", f"{base}/nvidia/cudnn/", f"{base}/vllm/")) for d in drops)
    report = json.loads((out / "pruned.json").read_text())["python"]
    assert {d["distribution"] for d in report["dropped"]} == {"nvidia-cublas-cu12", "docs-tool", "pywin32", "slowpath"}
    assert report["missing"] == [{"requirement": "not-installed-at-all", "why": "vllm requires it"}]
    assert report["imports"] == ["sympy", "vllm"]
    elves = (out / "python" / "elf.txt").read_text().splitlines()
    assert f"{torch_lib}\t" in elves and (out / "python" / "imports.txt").read_text() == "sympy\nvllm\n"
