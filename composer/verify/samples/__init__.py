"""Sample models, shipped with the composer, that prove an image serves its backends.

Each sample is a model folder under models/ plus an entry in catalog.yaml giving the
inputs to send and the outputs to expect.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Iterable

import yaml

from composer.config.cases import close
from composer.config.cases import TensorData

FLOAT_TYPES = frozenset({"FP16", "FP32", "FP64", "BF16"})


@dataclass(frozen=True)
class Sample:
    """One sample model and the answer it must give."""

    model: str  # model name == folder name under composer/verify/samples/models/
    backend: str  # the backend it exercises
    needs: tuple[str, ...]  # every backend that must be in the image
    inputs: tuple[TensorData, ...]
    expected: tuple[TensorData, ...]
    tolerance: float
    path: Path  # the model folder
    gpu: bool = False  # runs only on a GPU: without one, its refusal to load is a SKIP, not a FAIL
    stream: bool = False  # decoupled: streamed over gRPC, its responses' outputs joined (composer.verify.protocols)
    match: str = "exact"  # "prefix": a BYTES output need only start with the expected text (generated text follows)
    plan_source: Path | None = None  # an ONNX model its TensorRT plan is built from on a GPU (composer.verify.plans)

    def check(self, outputs: dict[str, TensorData]) -> str | None:
        """None when `outputs` hold the expected answer, else a one-line description."""
        for want in self.expected:
            got = outputs.get(want.name)
            if got is None:
                return f"{self.model}: no output {want.name} (got {', '.join(sorted(outputs)) or 'none'})"
            if got.datatype != want.datatype:
                return f"{self.model}: {want.name} has datatype {got.datatype}, expected {want.datatype}"
            if tuple(got.shape) != tuple(want.shape):
                return f"{self.model}: {want.name} has shape {list(got.shape)}, expected {list(want.shape)}"
            if len(got.data) != len(want.data):
                return f"{self.model}: {want.name} has {len(got.data)} values, expected {len(want.data)}"
            for index, (g, w) in enumerate(zip(got.data, want.data)):
                if self.match == "prefix" and want.datatype == "BYTES":
                    if not str(g).startswith(str(w)):
                        return f"{self.model}: {want.name}[{index}] is {_short(g)!r}, expected it to start with {w!r}"
                    continue
                if not close(g, w, self.tolerance if want.datatype in FLOAT_TYPES else 0.0):
                    return (
                        f"{self.model}: {want.name}[{index}] is {g!r}, expected {w!r}"
                        + (f" (tolerance {self.tolerance:g})" if want.datatype in FLOAT_TYPES else "")
                    )
        return None


def _short(text: Any, limit: int = 60) -> str:
    text = str(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _tensor(raw: dict[str, Any]) -> TensorData:
    return TensorData(
        name=str(raw["name"]),
        datatype=str(raw["datatype"]),
        shape=tuple(int(d) for d in raw["shape"]),
        data=tuple(raw["data"]),
    )


def _plan_source(entry: dict[str, Any]) -> Path | None:
    source = entry.get("plan_source")
    return Path(str(resources.files("composer.verify.samples").joinpath(str(source)))) if source else None


def models_dir() -> Path:
    """The folder holding every sample model (a Triton model repository)."""
    return Path(str(resources.files("composer.verify.samples").joinpath("models")))


def load_samples() -> list[Sample]:
    """Every sample of catalog.yaml, in catalog order."""
    raw = yaml.safe_load(resources.files("composer.verify.samples").joinpath("catalog.yaml").read_text())
    root = models_dir()
    return [
        Sample(
            model=str(entry["model"]),
            backend=str(entry["backend"]),
            needs=tuple(str(b) for b in entry["needs"]),
            inputs=tuple(_tensor(t) for t in entry["inputs"]),
            expected=tuple(_tensor(t) for t in entry["expected"]),
            tolerance=float(entry.get("tolerance", 0.0)),
            path=root / str(entry["model"]),
            gpu=bool(entry.get("gpu", False)),
            stream=bool(entry.get("stream", False)),
            match=str(entry.get("match", "exact")),
            plan_source=_plan_source(entry),
        )
        for entry in raw["samples"]
    ]


def samples_for(backends: Iterable[str]) -> list[Sample]:
    """Samples whose `needs` are all among `backends`."""
    present = set(backends)
    return [s for s in load_samples() if set(s.needs) <= present]
