"""Host side of image contents: parsing, JSON round trip, probing through the engine."""

from __future__ import annotations

import json
import pytest

from composer.resolve import contents
from composer.resolve.contents import Component, FullImageContents, LibraryNeed, inspect_full
from composer.engine.interface import RunResult
from composer.core.errors import ComposerError, ImageNotFound
from tests.unit.fake_engine import FakeEngine

PROBE_DOC = {
    "root": "/opt/tritonserver",
    "machine": "x86_64",
    "libc": "2.36",
    "ld_library_path": ["/usr/local/cuda/compat/lib"],
    "core": {
        "paths": ["/opt/tritonserver/bin", "/opt/tritonserver/lib", "/opt/tritonserver/LICENSE",
                  "/opt/tritonserver/TRITON_VERSION", "/opt/tritonserver/include"],
        "size": 1000,
        "include_size": 50,
        "needs": [{"soname": "libz.so.1", "path": "/usr/lib/x86_64-linux-gnu/libz.so.1",
                   "realpath": "/usr/lib/x86_64-linux-gnu/libz.so.1.2.13", "size": 120000}],
        "missing": [],
    },
    "components": [
        {"kind": "repoagent", "name": "checksum", "path": "/opt/tritonserver/repoagents/checksum", "size": 5,
         "library": "libtritonrepoagent_checksum.so", "python_based": False, "requires": [], "needs": [], "missing": []},
        {"kind": "backend", "name": "python", "path": "/opt/tritonserver/backends/python", "size": 10,
         "library": "libtriton_python.so", "python_based": False, "requires": [],
         "needs": [{"soname": "libpython3.11.so.1.0", "path": "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0",
                    "realpath": "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0", "size": 7000000}],
         "missing": []},
        {"kind": "backend", "name": "vllm", "path": "/opt/tritonserver/backends/vllm", "size": 3,
         "library": None, "python_based": True, "requires": ["python"], "needs": [], "missing": []},
        {"kind": "cache", "name": "local", "path": "/opt/tritonserver/caches/local", "size": 4,
         "library": "libtritoncache_local.so", "python_based": False, "requires": [], "needs": [], "missing": []},
    ],
    "python": {
        "version": "3.11", "executable": "/usr/bin/python3.11", "executable_realpath": "/usr/bin/python3.11",
        "stdlib": "/usr/lib/python3.11", "libpython": "libpython3.11.so.1.0",
        "numpy": {"version": "1.24.2", "paths": ["/usr/lib/python3/dist-packages/numpy",
                                                  "/usr/lib/python3/dist-packages/numpy-1.24.2.egg-info"]},
        "site_dirs": ["/usr/local/lib/python3.11/dist-packages", "/usr/lib/python3/dist-packages"],
        "pip": False,
        "needs": [{"soname": "libpython3.11.so.1.0", "path": "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0",
                   "realpath": "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0", "size": 7000000},
                  {"soname": "libz.so.1", "path": "/usr/lib/x86_64-linux-gnu/libz.so.1",
                   "realpath": "/usr/lib/x86_64-linux-gnu/libz.so.1.2.13", "size": 120000}],
        "missing": [],
        "size": 40000000,
    },
    "stub_python": "3.11",
}


def probing(answer: RunResult | Exception, known: bool = True) -> FakeEngine:
    """An engine holding the images "ref" and "ref:1" (unless not `known`) that answers run_once so."""
    return FakeEngine.with_images(*(("ref", "ref:1") if known else ()), answer=answer)


def full() -> FullImageContents:
    return FullImageContents.from_dict(PROBE_DOC, image="standin:24.09-py3")


def test_from_probe_document():
    c = full()
    assert c.image == "standin:24.09-py3"
    assert c.names("backend") == ["python", "vllm"]
    assert c.names("cache") == ["local"]
    assert [(x.kind, x.name) for x in c.components] == [
        ("backend", "python"), ("backend", "vllm"), ("cache", "local"), ("repoagent", "checksum")]
    assert c.component("backend", "vllm").requires == ("python",)
    assert c.component("backend", "nope") is None
    assert c.python.numpy_version == "1.24.2"
    assert c.python.numpy_paths[0].endswith("/numpy")
    assert c.python_mismatch() is None and c.stub_python_version == c.python.version
    assert c.core_needs[0] == LibraryNeed("libz.so.1", "/usr/lib/x86_64-linux-gnu/libz.so.1",
                                          "/usr/lib/x86_64-linux-gnu/libz.so.1.2.13", 120000)


def test_json_round_trip():
    c = full()
    again = FullImageContents.from_dict(json.loads(json.dumps(c.to_dict())))
    assert again == c


def test_round_trip_without_python():
    doc = dict(PROBE_DOC, python=None, stub_python=None)
    c = FullImageContents.from_dict(doc, image="x")
    assert c.python is None and c.python_mismatch() == "it has no python"
    assert FullImageContents.from_dict(c.to_dict()) == c


def test_requires_defaults_from_python_based():
    comp = Component.from_dict({"kind": "backend", "name": "vllm", "path": "/p", "python_based": True})
    assert comp.requires == ("python",)


def test_inspect_full_runs_the_probe_without_network():
    engine = probing(RunResult(0, json.dumps(PROBE_DOC)))
    c = inspect_full(engine, "ref:1")
    assert c.image == "ref:1" and c.stub_python == "3.11"
    run = engine.runs[0]
    command, entrypoint, files = run["command"], run["entrypoint"], run["files"]
    assert command == ["python3", "/tmp/composer_probe.py"] and entrypoint == []
    assert files["/tmp/composer_probe.py"] == contents.probe_source()
    # The probe's sibling module goes beside it, where it imports it from.
    assert sorted(files) == ["/tmp/composer_probe.py", "/tmp/elfdeps.py"] and files == contents.probe_files()
    assert b"def read_elf" in files["/tmp/elfdeps.py"] and b"import elfdeps" in files["/tmp/composer_probe.py"]


def test_inspect_full_without_tritonserver():
    engine = probing(RunResult(2, json.dumps({"root": "/opt/tritonserver", "error": "/opt/tritonserver does not exist"})))
    with pytest.raises(ComposerError, match=r"^ref does not look like a full Triton image: /opt/tritonserver does not exist$"):
        inspect_full(engine, "ref")


@pytest.mark.parametrize("engine", [
    probing(RunResult(127, 'exec: "python3": executable file not found in $PATH')),
    probing(RunResult(127, 'OCI runtime create failed: exec: "python3": executable file not found in $PATH: unknown')),
])
def test_inspect_full_without_python3(engine):
    with pytest.raises(ComposerError, match="does not look like a full Triton image: it has no python3"):
        inspect_full(engine, "ref")


def test_inspect_full_garbage_and_unknown_image():
    with pytest.raises(ComposerError, match="cannot probe ref: boom"):
        inspect_full(probing(RunResult(1, "Traceback...\nboom\n")), "ref")
    with pytest.raises(ImageNotFound):
        inspect_full(probing(RunResult(0, ""), known=False), "ref")
