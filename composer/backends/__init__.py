"""One unit per backend: a backend's folder, needs, rules, template fragment and samples in one
module. Adding a backend is a module here (listed in UNITS) plus catalog data; a backend of the
user's own (--custom-backend, --backend-image) is served by the generic unit.
"""

from __future__ import annotations

from composer.backends import (dali, fil, identity, onnxruntime, openvino, python, pytorch, repeat, square,
                               tensorflow, tensorrt, vllm)
from composer.backends.base import ROOT, Backend, Refusal
from composer.catalog.catalog import Catalog, Release

UNITS: dict[str, Backend] = {m.UNIT.name: m.UNIT for m in (
    dali, fil, identity, onnxruntime, openvino, python, pytorch, repeat, square, tensorflow, tensorrt, vllm)}

ONNXRUNTIME = onnxruntime.UNIT
PYTHON = python.UNIT
TENSORFLOW = tensorflow.UNIT
TENSORRT = tensorrt.UNIT

__all__ = ["ROOT", "Backend", "Refusal", "UNITS", "ONNXRUNTIME", "PYTHON", "TENSORFLOW", "TENSORRT", "unit", "units",
           "selectable"]


def unit(name: str) -> Backend:
    """The unit of backend `name`; one the composer has no unit for (the user's own) is generic."""
    return UNITS.get(name) or Backend(name)


def units() -> tuple[Backend, ...]:
    return tuple(UNITS[name] for name in sorted(UNITS))


def selectable(catalog: Catalog, release: Release) -> tuple[str, ...]:
    """The backends the catalog lets a user select for `release`: the full image's (as catalogued)
    and those of every flavour the release has and the composer supports."""
    names = {b for b in catalog.ngc_layout.backends if unit(b).in_release(release)}
    for name, entry in catalog.flavours.items():
        if "unsupported" not in entry and release.name >= entry["from"]:
            names.update(entry["backends"])
    return tuple(sorted(names))
