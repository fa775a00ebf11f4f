"""What a full Triton image offers and what its parts need.

The full image is read by running composer/in_image/probe.py inside it (files, not package lists, are
the truth). What the min image lacks is decided inside the build, by composer/in_image/collect.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Iterable, Mapping

from composer.backends import PYTHON
from composer.core.errors import ComposerError
from composer.engine import locks

PROBE_PATH = "/tmp/composer_probe.py"
PROBE_SIBLINGS = ("elfdeps.py",)  # the modules the probe imports from its own folder


def probe_source() -> bytes:
    """The probe script, copied into the full image (with its siblings: probe_files)."""
    return resources.files("composer.in_image").joinpath("probe.py").read_bytes()


def probe_files() -> dict[str, bytes]:
    """What is copied into the full image to run the probe: the script at PROBE_PATH and the
    modules it imports beside it (container path -> content)."""
    folder = PROBE_PATH.rsplit("/", 1)[0]
    package = resources.files("composer.in_image")
    siblings = {f"{folder}/{name}": package.joinpath(name).read_bytes() for name in PROBE_SIBLINGS}
    return {PROBE_PATH: probe_source(), **siblings}


@dataclass(frozen=True)
class LibraryNeed:
    """A library file outside /opt/tritonserver that some part needs at run time."""

    soname: str
    path: str
    realpath: str
    size: int
    # Symlinks from `path` to `realpath` in order (path first when it is one); copy them too.
    links: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "LibraryNeed":
        return cls(
            str(d["soname"]),
            str(d["path"]),
            str(d.get("realpath") or d["path"]),
            int(d.get("size") or 0),
            tuple(d.get("links") or ()),
        )

    def to_dict(self) -> dict:
        return {"soname": self.soname, "path": self.path, "realpath": self.realpath, "size": self.size, "links": list(self.links)}


def _needs(items: Iterable[Mapping[str, Any]]) -> tuple[LibraryNeed, ...]:
    return tuple(LibraryNeed.from_dict(i) for i in items or ())


@dataclass(frozen=True)
class Component:
    """One folder of backends/, repoagents/ or caches/ in the full image."""

    kind: str
    name: str
    path: str
    size: int
    library: str | None
    python_based: bool
    requires: tuple[str, ...]
    needs: tuple[LibraryNeed, ...]
    missing: tuple[str, ...]
    # ONNX Runtime's provider libraries in the folder (libonnxruntime_providers_NAME.so), "shared" included
    providers: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Component":
        python_based = bool(d.get("python_based"))
        requires = d.get("requires")
        if requires is None:
            requires = [PYTHON.name] if python_based else []
        return cls(
            kind=str(d["kind"]),
            name=str(d["name"]),
            path=str(d["path"]),
            size=int(d.get("size") or 0),
            library=d.get("library"),
            python_based=python_based,
            requires=tuple(requires),
            needs=_needs(d.get("needs")),
            missing=tuple(d.get("missing") or ()),
            providers=tuple(d.get("providers") or ()),
        )


@dataclass(frozen=True)
class PythonRuntime:
    """The python the python backend stub runs on, as found in the full image."""

    version: str
    executable: str
    stdlib: str
    numpy_version: str | None
    numpy_paths: tuple[str, ...]
    site_dirs: tuple[str, ...]
    has_pip: bool
    needs: tuple[LibraryNeed, ...]
    missing: tuple[str, ...]
    size: int
    executable_realpath: str = ""
    libpython: str = ""
    externally_managed: bool = False  # the PEP 668 marker: pip needs PIP_BREAK_SYSTEM_PACKAGES

    @classmethod
    def from_probe(cls, d: Mapping[str, Any]) -> "PythonRuntime":
        numpy = d.get("numpy") or {}
        return cls(
            version=str(d["version"]),
            executable=str(d["executable"]),
            stdlib=str(d["stdlib"]),
            numpy_version=numpy.get("version"),
            numpy_paths=tuple(numpy.get("paths") or ()),
            site_dirs=tuple(d.get("site_dirs") or ()),
            has_pip=bool(d.get("pip")),
            needs=_needs(d.get("needs")),
            missing=tuple(d.get("missing") or ()),
            size=int(d.get("size") or 0),
            executable_realpath=str(d.get("executable_realpath") or ""),
            libpython=str(d.get("libpython") or ""),
            externally_managed=bool(d.get("externally_managed")),
        )


@dataclass(frozen=True)
class FullImageContents:
    """What a full Triton image offers (see composer/in_image/probe.py for how it is found)."""

    image: str
    core_paths: tuple[str, ...]
    core_size: int
    include_size: int
    core_needs: tuple[LibraryNeed, ...]
    components: tuple[Component, ...]
    python: PythonRuntime | None
    stub_python: str | None
    core_missing: tuple[str, ...] = ()
    root: str = "/opt/tritonserver"
    ld_library_path: tuple[str, ...] = field(default=())
    owner: tuple[int, int] | None = None  # uid, gid of the Triton tree
    shared_writable: bool = False  # some of the tree is writable by group or others
    entrypoint_d: bool = False  # /opt/nvidia/entrypoint.d (scripts NGC's entrypoint runs first)
    serve: bool = False  # /usr/bin/serve (SageMaker-enabled images)
    machine: str = ""  # e.g. x86_64: with libc, which wheels fit the image's python
    libc: str = ""  # glibc version, e.g. 2.35 ("" when the probe found none)
    cudart: tuple[str, ...] = ()  # libcudart.so.N the loader finds, in its search order (none: no CUDA)

    @property
    def cuda_major(self) -> str | None:
        """The CUDA major of the image, as its runtime library's soname says (libcudart.so.12: 12)."""
        return self.cudart[0].rsplit(".", 1)[-1] if self.cudart else None

    def component(self, kind: str, name: str) -> Component | None:
        for c in self.components:
            if c.kind == kind and c.name == name:
                return c
        return None

    def names(self, kind: str) -> list[str]:
        return sorted(c.name for c in self.components if c.kind == kind)

    @property
    def stub_python_version(self) -> str | None:
        """The python the python backend runs models on, which packages and environments are for: the
        stub's (named by the folder it was built for), else the image's own python3. The one reading
        of it (the plan's Offer and the wheels' target take it from here)."""
        return self.stub_python or (self.python.version if self.python else None)

    def python_mismatch(self) -> str | None:
        """Why the image's python3 cannot install the stub's packages (None: it is the stub's)."""
        if self.python is None:
            return "it has no python"
        if self.stub_python and self.python.version != self.stub_python:
            return (f"it has python {self.python.version} but its python backend stub is built for python "
                    f"{self.stub_python}")
        return None

    def to_dict(self) -> dict:
        need = LibraryNeed.to_dict
        python = None
        if self.python is not None:
            p = self.python
            python = {
                "version": p.version,
                "executable": p.executable,
                "executable_realpath": p.executable_realpath,
                "stdlib": p.stdlib,
                "libpython": p.libpython,
                "numpy": None if p.numpy_version is None and not p.numpy_paths else {"version": p.numpy_version, "paths": list(p.numpy_paths)},
                "site_dirs": list(p.site_dirs),
                "pip": p.has_pip,
                "externally_managed": p.externally_managed,
                "needs": [need(n) for n in p.needs],
                "missing": list(p.missing),
                "size": p.size,
            }
        return {
            "image": self.image,
            "root": self.root,
            "machine": self.machine,
            "libc": self.libc,
            **({"cudart": list(self.cudart)} if self.cudart else {}),
            "ld_library_path": list(self.ld_library_path),
            "core": {
                "paths": list(self.core_paths),
                "size": self.core_size,
                "include_size": self.include_size,
                "needs": [need(n) for n in self.core_needs],
                "missing": list(self.core_missing),
            },
            "components": [
                {
                    "kind": c.kind,
                    "name": c.name,
                    "path": c.path,
                    "size": c.size,
                    "library": c.library,
                    "python_based": c.python_based,
                    "requires": list(c.requires),
                    "needs": [need(n) for n in c.needs],
                    "missing": list(c.missing),
                    **({"providers": list(c.providers)} if c.providers else {}),
                }
                for c in self.components
            ],
            "python": python,
            "stub_python": self.stub_python,
            "facts": {"owner": list(self.owner) if self.owner else None, "shared_writable": self.shared_writable,
                      "entrypoint_d": self.entrypoint_d, "serve": self.serve},
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], image: str | None = None) -> "FullImageContents":
        """Read to_dict() output, or the probe's own JSON (then `image` names the image)."""
        core = d.get("core") or {}
        facts = d.get("facts") or {}
        components = sorted((Component.from_dict(c) for c in d.get("components") or ()), key=lambda c: (c.kind, c.name))
        return cls(
            image=str(image if image is not None else d.get("image", "")),
            core_paths=tuple(core.get("paths") or ()),
            core_size=int(core.get("size") or 0),
            include_size=int(core.get("include_size") or 0),
            core_needs=_needs(core.get("needs")),
            components=tuple(components),
            python=PythonRuntime.from_probe(d["python"]) if d.get("python") else None,
            stub_python=d.get("stub_python"),
            core_missing=tuple(core.get("missing") or ()),
            root=str(d.get("root") or "/opt/tritonserver"),
            ld_library_path=tuple(d.get("ld_library_path") or ()),
            owner=tuple(facts["owner"]) if facts.get("owner") else None,
            shared_writable=bool(facts.get("shared_writable")),
            entrypoint_d=bool(facts.get("entrypoint_d")),
            serve=bool(facts.get("serve")),
            machine=str(d.get("machine") or ""),
            libc=str(d.get("libc") or ""),
            cudart=tuple(d.get("cudart") or ()),
        )


def _not_full(ref: str, why: str) -> ComposerError:
    return ComposerError(f"{ref} does not look like a full Triton image: {why}")


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def _probe_key(image_id: str, files: Mapping[str, bytes]) -> str:
    """The report of the probe (these files) on the image `image_id` is kept by both: an image id
    names its content, so the report stands for any engine and any later build."""
    hashed = hashlib.sha256(image_id.encode())
    for name, content in sorted(files.items()):
        hashed.update(f"\0{name}\0".encode() + hashlib.sha256(content).digest())
    return hashed.hexdigest()


def inspect_full(engine, ref: str) -> FullImageContents:
    """Run the probe inside the full image `ref` (no network) and read its report (kept on this
    machine by the image's id: an unchanged build does not start the container again)."""
    info = engine.require_image(ref, pull=False)
    files = probe_files()
    key = _probe_key(info.id, files) if info.id.startswith("sha256:") else None
    recorded = locks.read_record("probes", key) if key else None
    if recorded is not None:
        try:
            return FullImageContents.from_dict(recorded, image=ref)
        except (ValueError, KeyError, TypeError):
            pass  # written by another version: probe again
    # The engine gives exit code 127 when the image has no python3 to start.
    result = engine.run_once(ref, ["python3", PROBE_PATH], entrypoint=[], files=files)
    if result.exit_code in (126, 127) or (result.exit_code != 0 and "python3" in result.output and "not found" in result.output):
        raise _not_full(ref, "it has no python3 to run the probe")
    try:
        doc = json.loads(result.output[result.output.index("{"):]) if "{" in result.output else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise ComposerError(f"cannot probe {ref}: {_first_line(result.output)}")
    if "error" in doc:
        raise _not_full(ref, str(doc["error"]))
    if result.exit_code != 0:
        raise ComposerError(f"cannot probe {ref}: {_first_line(result.output)}")
    contents = FullImageContents.from_dict(doc, image=ref)
    if key is not None:
        with contextlib.suppress(OSError, ComposerError):
            locks.write_record("probes", key, doc)
    return contents
