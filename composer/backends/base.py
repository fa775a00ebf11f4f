"""What every backend unit is: a backend's place in the full image, its needs, samples and rules.

A unit knows one backend; rules that look at one backend live on its unit, so the config rules,
the plan and rendering ask the unit instead of comparing its name. A rule returns a Refusal in
the two wordings composer.config.rules reports (at a set file's key, and naming the flags).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

ROOT = "/opt/tritonserver"  # the Triton tree, in the full image and in the composed one


@dataclass(frozen=True)
class Refusal:
    """Why a spec cannot be built, as composer.config.rules.Problem words it (`key`: the set key)."""

    key: str
    in_set: str
    on_command_line: str


@dataclass(frozen=True)
class Backend:
    """One backend: a folder of backends/ in the full image (or of the user's own: a generic unit)."""

    name: str
    platforms: tuple[str, ...] = ()  # the config.pbtxt platforms it serves
    gpu_only: bool = False  # runs only on a GPU
    python_based: bool = False  # a model.py served through the python backend (the probe says so of an image)
    loads: tuple[str, ...] = ()  # its libraries that load others by name (the catalog's loaded_at_run_time)
    samples: tuple[str, ...] = ()  # the sample models that exercise it (composer/verify/samples/catalog.yaml)
    fragment: str | None = None  # the template block that is its own, where one is

    @property
    def folder(self) -> str:
        """Its folder, relative to the Triton root."""
        return f"backends/{self.name}"

    @property
    def path(self) -> str:
        return f"{ROOT}/{self.folder}"

    @property
    def library(self) -> str:
        """The shared library a C++ backend is (Triton loads backends/NAME/libtriton_NAME.so)."""
        return f"libtriton_{self.name}.so"

    def holds_a_backend(self, folder: Path) -> bool:
        """A folder of the user's is a backend: its library, or a model.py (a Python-based one)."""
        return (folder / self.library).is_file() or (folder / "model.py").is_file()

    def python_based_folder(self, folder: Path) -> bool:
        """A folder of the user's served through the python backend: a model.py and no library."""
        return (folder / "model.py").is_file() and not (folder / self.library).is_file()

    def in_release(self, release) -> bool:
        """Whether the release's full image carries it (as catalogued)."""
        return True

    def env(self, catalog) -> Mapping[str, str]:
        """What it needs in the image's environment beyond its files (the catalog's backend_env)."""
        return catalog.backend_env.get(self.name, {})

    def serves(self, backend: str | None, platform: str | None) -> bool:
        """A model configuration naming this backend, or a platform it serves."""
        return backend == self.name or (platform is not None and platform in self.platforms)
