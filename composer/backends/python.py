"""The python backend: its stub's python (its own layer in the image), the packages and model
environments that only it serves, the release's pins for it, and PEP 668's marker."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Mapping

from composer.backends.base import Backend, Refusal
from composer.catalog.catalog import Catalog, Flavour, Release
from composer.core.errors import UsageError

FIRST_SERVER_TAKING_FOLDERS = (2, 36, 0)  # its stub takes an environment folder as it is


@dataclass(frozen=True)
class Python(Backend):
    def held(self, selected: tuple[str, ...], flavour: Flavour, catalog: Catalog | None = None) -> bool:
        """The image will hold it: selected, or kept from the flavour's image."""
        if self.name in selected:
            return True
        if flavour.on_min_image:
            return False
        entry = (catalog or Catalog.load()).flavours.get(flavour.name) or {}
        return self.name in (entry.get("backends") or ())

    def model_envs_refusal(self, first_env: str) -> Refusal:
        """--model-env without the python backend (`first_env`: the first model named)."""
        return Refusal("model_envs", "model_envs are python models' environments: add python to backends",
                       f"--model-env {first_env}=...: environments are for python models; select --backend "
                       "python too")

    def baked_env_refusal(self, model: str) -> Refusal:
        """A baked model carrying a requirements.txt without the python backend."""
        return Refusal("bake_models", f"model {model} carries a requirements.txt (its own python "
                       "environment): add python to backends",
                       f"--bake-models: model {model} carries a requirements.txt, an environment for "
                       "a python model: select --backend python too")

    def packages_refusal(self) -> Refusal:
        return Refusal("packages", "python packages are for python models: add python to backends",
                       "--pip/--requirements add packages for python models: select --backend python too")

    def runtime_needed(self, all_backends: Iterable[str], base_backends: Iterable[str], custom_folders) -> bool:
        """The image gets the python the stub runs on (its own layer): the python backend, or a custom
        backend that is a model.py served through it (`custom_folders`: (unit, folder)). A flavour's
        image has its own."""
        if self.name in base_backends:
            return False
        return self.name in all_backends or any(unit.python_based_folder(folder) for unit, folder in custom_folders)

    def constraints(self, release: Release) -> tuple[str, ...]:
        """The pins pip must hold for the release's python backend (numpy<2 from 24.06 on)."""
        return (release.numpy,) if release.numpy else ()

    def check_server(self, server_version: str) -> None:
        """The release's python backend must take an environment folder as it is."""
        numbers = tuple(int(n) for n in re.findall(r"\d+", server_version)[:3])
        if numbers and numbers < FIRST_SERVER_TAKING_FOLDERS:
            raise UsageError(f"model environments need server 2.36.0 (23.07) or newer, whose python backend takes "
                             f"an environment folder; this image's server is {server_version}")

    def managed_env(self, catalog: Catalog, externally_managed: bool, backends) -> Mapping[str, str]:
        """Where the python is PEP 668 managed, what lets pip install for python models."""
        return catalog.externally_managed_env if externally_managed and self.name in backends else {}


UNIT = Python("python", platforms=(), samples=("add_sub",))
