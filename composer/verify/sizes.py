"""The size report: what each part of a composed image costs, measured from the built image.

Every step of the final stage adds one layer, and the rendered Dockerfile copies each part in a
step of its own (the server core, each backend, repo agent and cache, the collected libraries,
the python runtime, added packages, baked models). So the image's history, read through the
engine, says exactly what each part weighs: the min image is the layers the image shares with
it, a part is the layers that copied it, and whatever else the build added (the loader cache,
the server's user, the composition record) is the overhead over the lower bound.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from composer.engine.engine import Engine, Layer
from composer.core.units import human_size
from composer.resolve.plan import MODELS_ROOT, ROOT, CompositionPlan
from composer.config.types import Device
from composer.verify.sbom import SBOM_PATH

# "/bin/sh -c #(nop) COPY dir:<hash> in /opt/tritonserver/backends/python " (the classic builder,
# Podman alike); BuildKit records "COPY <src> <dest> # buildkit".
_COPY_DEST = re.compile(r"#\(nop\)\s+(?:COPY|ADD)\s+\S+\s+in\s+(\S+)")
_BUILDKIT_COPY = re.compile(r"^(?:COPY|ADD)\b.*\s(\S+)\s+# buildkit$")
FOLDER_KINDS = {"backends": "backend", "repoagents": "repoagent", "caches": "cache", "model_envs": "model env"}
SERVER_ENTRY = ("/opt/nvidia/", "/usr/bin/serve")
ROOT_TREES = (("libraries", "collected libraries"), ("python", "python runtime"))  # in the template's order
PRUNED_BASE = ("base", "pruned base")  # the first trees copied to / on a pruned base: its family layers


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


def destination(created_by: str) -> str | None:
    """Where a COPY step put its files, from the step's history entry (None: not a copy)."""
    text = created_by.strip()
    found = _COPY_DEST.search(text) or _BUILDKIT_COPY.match(text)
    return found.group(1).rstrip("/") or "/" if found else None


def measure(engine: Engine, image: str, plan: CompositionPlan) -> SizeReport:
    """The size report of `image`, built from `plan`, read from its history and its base's."""
    layers = engine.layers(image)
    base = engine.layers(plan.min.id or plan.min.ref)
    shared = len(base)
    if [l.created_by for l in layers[:shared]] != [l.created_by for l in base]:
        shared = 0  # not built on this min image (or on a pruned base): every layer counts as added
    report = report_from(layers, shared, plan)
    if plan.pruning:
        report = replace(report, pruned_from=sum(l.size for l in base))
    if not plan.flavour.on_min_image:
        report = replace(report, base=f"{plan.flavour} image ({plan.min.ref})")
    return replace(report, device=plan.device)


def report_from(layers: list[Layer], shared: int, plan: CompositionPlan) -> SizeReport:
    """The report from an image's layers (oldest first), the first `shared` being the min image's."""
    # A flavour's image brings the server core and its own backends: they are part of the base.
    sizes: dict[tuple[str, str], int] = {} if not plan.flavour.on_min_image else {("server", "server core"): 0}
    backends = [b for b in plan.all_backends if b not in plan.base_backends]
    for kind, names in (("backend", backends), ("repoagent", plan.repoagents), ("cache", plan.caches),
                        ("model env", [e.model for e in plan.model_envs])):
        sizes.update({(kind, n): 0 for n in names})
    slots = list(plan.pruning.slots) if plan.pruning else []
    base_layers = []
    trees = iter(ROOT_TREES)
    if plan.pruning:
        sizes[PRUNED_BASE] = 0  # the first trees copied to /, one a slot of the base's
    for layer in layers[shared:]:
        where = destination(layer.created_by)
        if where == "/" and len(base_layers) < len(slots):
            base_layers.append(Part("layer", slots[len(base_layers)].name, layer.size))
            sizes[PRUNED_BASE] += layer.size
            continue
        key = _part_of(where, plan, trees) if where else None
        if key is not None:
            sizes[key] = sizes.get(key, 0) + layer.size
    sizes.setdefault(ROOT_TREES[0], 0)
    if plan.python_runtime:
        sizes.setdefault(ROOT_TREES[1], 0)
    if plan.packages:
        sizes.setdefault(("packages", "added packages"), 0)
    if plan.baked_models:
        sizes.setdefault(("models", "baked models"), 0)
    total = sum(l.size for l in layers)
    parts = tuple(Part(kind, name, size) for (kind, name), size in sizes.items())
    return SizeReport(total, sum(l.size for l in layers[:shared]), parts, base_layers=tuple(base_layers))


def _part_of(where: str, plan: CompositionPlan, trees) -> tuple[str, str] | None:
    if where == "/":  # the collect stage's trees, in the template's order
        return next(trees, None)
    if plan.site_packages and where == plan.site_packages.rstrip("/"):
        return ("packages", "added packages")
    if where == MODELS_ROOT:
        return ("models", "baked models")
    if where.startswith(SERVER_ENTRY):
        return ("server", "server core")  # the entrypoint's scripts and SageMaker's serve, as NGC's
    if where in (f"{ROOT}/composition.json", f"{ROOT}/pruned.json", SBOM_PATH) or not where.startswith(ROOT + "/"):
        return None  # the record and anything else the build adds: overhead
    head, _, name = where[len(ROOT) + 1:].partition("/")
    if head in FOLDER_KINDS and name:
        return (FOLDER_KINDS[head], name)
    return ("server", "server core")
