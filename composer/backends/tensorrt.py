"""The TensorRT backend: runs only on a GPU; a pruned base drops TensorRT's builder resource
library unless asked to keep it; libnvinfer loads its plugin library by name (the catalog)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from composer.backends.base import Backend, Refusal
from composer.core.files import printable

PLAN_PLATFORM = "tensorrt_plan"
PACKAGES = re.compile(r"nvinfer|tensorrt|nvonnxparser|nvparsers")  # TensorRT's packages, by name


@dataclass(frozen=True)
class TensorRT(Backend):
    def cpu_image_refusal(self, cpu_only: bool, selected: tuple[str, ...]) -> Refusal | None:
        if cpu_only and self.name in selected:
            return Refusal("backends", "device: cpu: the tensorrt backend runs only on a GPU; leave tensorrt out",
                           "--device cpu -b tensorrt: the tensorrt backend runs only on a GPU; leave it out")
        return None

    def builder_refusal(self, keep_builder: bool, pruned: bool) -> Refusal | None:
        """Only a pruned base drops the builder, so only there is keeping it a choice."""
        if keep_builder and not pruned:
            return Refusal("keep_tensorrt_builder", "keep_tensorrt_builder applies to a pruned base: add base: pruned",
                           "--keep-tensorrt-builder applies to a pruned base: add --base pruned")
        return None

    def model_refusal(self, model: str, platform: str | None) -> str:
        """What a CPU-only image says of a model TensorRT serves."""
        why = f"platform {platform}" if platform == PLAN_PLATFORM else f"backend {self.name}"
        return (f"model {printable(model)} needs TensorRT ({why}), which runs only on a GPU: a CPU-only image "
                "cannot serve it")


UNIT = TensorRT("tensorrt", platforms=(PLAN_PLATFORM,), gpu_only=True, loads=("libnvinfer.so.10",),
                samples=("tensorrt_plan",))
