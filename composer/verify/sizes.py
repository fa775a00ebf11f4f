"""The size report: what each part of a composed image costs, measured from the built image.

The composer writes the image one layer a part (composer.assembly.assemble: the server core, each
backend, repo agent and cache, the collected libraries, the python runtime, added packages, each
model environment, baked models, the system layer: loader cache, user, byte-code), so the layers,
read through the engine, say exactly what each part weighs: the base is the layers below the
composition's, a part is its layer, and whatever else the composition writes (the records, the
SBOM) is the overhead over the lower bound.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from composer.engine.interface import Engine, Layer
from composer.core.units import human_size
from composer.resolve.plan_types import CompositionPlan, LayerPart
from composer.config.types import Device

FOLDER_KINDS = {"backends": "backend", "repoagents": "repoagent", "caches": "cache", "model_envs": "model env"}
SERVER = ("server", "server core")
LIBRARIES = ("libraries", "collected libraries")
PYTHON = ("python", "python runtime")
PACKAGES = ("packages", "added packages")
MODELS = ("models", "baked models")
SYSTEM = ("system", "loader cache, user, byte-code")  # what the image's own tools write (system.sh)
PRUNED_BASE = ("base", "pruned base")  # the base's family layers, as one part (each listed under it)


@dataclass(frozen=True)
class Part:
    kind: str  # min-image, server, backend, repoagent, cache, model env, libraries, python, packages, models
    name: str
    size: int

    def to_dict(self) -> dict:
        return {"kind": self.kind, "name": self.name, "size": self.size}


@dataclass(frozen=True)
class SizeReport:
    """The image's size, its parts, and how far it is above the sum of them."""

    total: int
    min_image: int  # 0 on a pruned base: the image shares no layer with the min image
    parts: tuple[Part, ...]  # the selected parts, each measured from the layers that added it
    pruned_from: int = 0  # on a pruned base: the min image's size, of which the base is a part
    device: Device = Device.GPU  # CPU: a CPU-only image (--device cpu)
    base: str = "min image"  # what the image is built on: "vllm image (REF)" for a flavour's image
    base_layers: tuple[Part, ...] = ()  # on a pruned base: its layers in order (kind "layer", name the family's)

    @property
    def pruning_saved(self) -> int:
        """What the pruned base saves over the min image (0 on the min base)."""
        base = sum(p.size for p in self.parts if p.kind == "base")
        return self.pruned_from - base if self.pruned_from else 0

    @property
    def lower_bound(self) -> int:
        """The min image plus the parts: what an image holding just these parts must weigh."""
        return self.min_image + sum(p.size for p in self.parts)

    @property
    def overhead(self) -> int:
        return self.total - self.lower_bound

    def to_dict(self) -> dict:
        return {
            "total": self.total,
            "min_image": self.min_image,
            "parts": [p.to_dict() for p in self.parts],
            "lower_bound": self.lower_bound,
            "overhead": self.overhead,
            "overhead_percent": round(100.0 * self.overhead / self.lower_bound, 2) if self.lower_bound else 0.0,
            "pruned_from": self.pruned_from,
            "pruning_saved": self.pruning_saved,
            "device": str(self.device),
            "base": self.base,
            "base_layers": [p.to_dict() for p in self.base_layers],
        }

    def table(self) -> str:
        rows = [(self.base, self.min_image)] if not self.pruned_from else []
        for p in self.parts:
            rows.append((f"{p.kind} {p.name}" if p.kind in FOLDER_KINDS.values() else p.name, p.size))
            if p.kind == PRUNED_BASE[0]:
                rows += [(f"  layer {layer.name}", layer.size) for layer in self.base_layers]
        rows += [("lower bound", self.lower_bound), ("overhead", self.overhead), ("total", self.total)]
        if self.pruned_from:
            rows += [("min image (pruned from)", self.pruned_from), ("pruning saved", self.pruning_saved)]
        width = max(len(label) for label, _ in rows)
        lines = [f"{label.ljust(width)}  {human_size(size).rjust(9)}" for label, size in rows]
        if self.device.cpu_only:
            lines.insert(0, "CPU-only image (no GPU libraries but what a kept file needs)")
        return "\n".join(lines)


def measure(engine: Engine, image: str, plan: CompositionPlan, parts: tuple[LayerPart, ...]) -> SizeReport:
    """The size report of `image`, the composer's assembly of `plan` (composer.assembly.assemble): its
    history has one entry a layer, the base's first, then one for each of `parts`."""
    layers = engine.layers(image)
    report = report_from(layers, len(layers) - len(parts), plan, parts)
    if plan.pruning:
        report = replace(report, pruned_from=sum(l.size for l in engine.layers(plan.min.id or plan.min.ref)))
    if not plan.flavour.on_min_image:
        report = replace(report, base=f"{plan.flavour} image ({plan.min.ref})")
    return replace(report, device=plan.device)


def report_from(layers: list[Layer], base_count: int, plan: CompositionPlan,
                parts: tuple[LayerPart, ...]) -> SizeReport:
    """The report from an image's layers (oldest first): the first `base_count` are its base's (the
    min image, a flavour's image or a pruned base), then one layer for each of `parts`."""
    # A flavour's image brings the server core and its own backends: they are part of the base.
    sizes: dict[tuple[str, str], int] = {} if not plan.flavour.on_min_image else {SERVER: 0}
    backends = [b for b in plan.all_backends if b not in plan.base_backends]
    for kind, names in (("backend", backends), ("repoagent", plan.repoagents), ("cache", plan.caches),
                        ("model env", [e.model for e in plan.model_envs])):
        sizes.update({(kind, n): 0 for n in names})
    base = layers[:base_count]
    base_layers: tuple[Part, ...] = ()
    min_image = sum(l.size for l in base)
    if plan.pruning:
        slots = plan.pruning.slots
        names = [slot.name for slot in slots] if len(slots) == len(base) else [f"{i + 1:02d}" for i in range(len(base))]
        base_layers = tuple(Part("layer", name, layer.size) for name, layer in zip(names, base))
        sizes = {PRUNED_BASE: min_image, **sizes}
        min_image = 0  # the image shares no layer with the min image: its base is a part
    for part, layer in zip(parts, layers[base_count:]):
        key = _part_of(part)
        if key is not None:
            sizes[key] = sizes.get(key, 0) + layer.size
    sizes.setdefault(LIBRARIES, 0)
    if plan.python_runtime:
        sizes.setdefault(PYTHON, 0)
    if plan.packages:
        sizes.setdefault(PACKAGES, 0)
    if plan.baked_models:
        sizes.setdefault(MODELS, 0)
    total = sum(l.size for l in layers)
    return SizeReport(total, min_image, tuple(Part(kind, name, size) for (kind, name), size in sizes.items()),
                      base_layers=base_layers)


def _part_of(part: LayerPart) -> tuple[str, str] | None:
    """The report's row of a layer; None for what is overhead (the records, the SBOM). The system
    layer is a row: its byte-code weighs what the backends' python weighs (tens of MB where a backend
    carries its own site-packages)."""
    if part.kind == "server":
        return SERVER  # the core, its headers, the entrypoint's scripts and SageMaker's serve, as NGC's
    if part.kind == "record":
        return None
    if part.kind == "system":
        return SYSTEM
    return {"libraries": LIBRARIES, "python": PYTHON, "packages": PACKAGES, "models": MODELS}.get(
        part.kind, (part.kind, part.name))
