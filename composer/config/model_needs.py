"""What a model's configuration needs of the image: a GPU, a TensorRT engine, an ONNX Runtime
execution provider. Read from config.pbtxt before any work, so a model that needs what the
composition leaves out (--device cpu, --ort-provider) is refused naming the model and the need,
before an image is built and long before a tag could move.

The rules, as Triton reads a configuration:
- `instance_group [ { kind: KIND_GPU } ]` needs a GPU;
- `platform: "tensorrt_plan"` or `backend: "tensorrt"` needs TensorRT, which runs only on a GPU;
- `optimization { execution_accelerators { gpu_execution_accelerator: [ { name: "tensorrt" } ] } }`
  needs a GPU, and for an ONNX Runtime model the provider of that name (tensorrt, cuda);
  `cpu_execution_accelerator` (openvino) needs that provider.
A model without a config.pbtxt asks for nothing here (the server completes it for the host).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from composer.backends import ONNXRUNTIME, TENSORRT
from composer.core.errors import Invalid
from composer.core.files import printable, read_text
from composer.config.model_envs import CONFIG
from composer.config.pbtxt import MAX_CONFIG_BYTES, scalar_fields

ACCELERATORS = "optimization.execution_accelerators."


@dataclass(frozen=True)
class ModelNeeds:
    """What one model's configuration asks of the image."""

    model: str
    backend: str | None = None  # backend: "..." or what its platform is served by
    platform: str | None = None
    gpu_instances: bool = False  # a KIND_GPU instance group
    gpu_accelerators: tuple[str, ...] = ()
    cpu_accelerators: tuple[str, ...] = ()

    @property
    def tensorrt(self) -> bool:
        return TENSORRT.serves(self.backend, self.platform)

    @property
    def onnxruntime(self) -> bool:
        """Served by ONNX Runtime (or not said: a model.onnx the server completes)."""
        return ONNXRUNTIME.serves(self.backend, self.platform)

    @classmethod
    def of(cls, model: str, text: str) -> "ModelNeeds":
        fields = scalar_fields(text)
        first = {}
        for path, value in fields:
            first.setdefault(path, value)
        return cls(
            model=model,
            backend=first.get("backend"),
            platform=first.get("platform"),
            gpu_instances=any(p == "instance_group.kind" and v == "KIND_GPU" for p, v in fields),
            gpu_accelerators=tuple(v for p, v in fields if p == ACCELERATORS + "gpu_execution_accelerator.name"),
            cpu_accelerators=tuple(v for p, v in fields if p == ACCELERATORS + "cpu_execution_accelerator.name"),
        )

    def problem(self, cpu_only: bool, providers: tuple[str, ...] | None) -> str | None:
        """What of this model the image cannot serve, in one line (None: nothing). `providers`:
        ONNX Runtime's providers kept (None: every one the backend holds)."""
        name = f"model {printable(self.model)}"
        if cpu_only:
            if self.tensorrt:
                return TENSORRT.model_refusal(self.model, self.platform)
            if self.gpu_instances:
                return (f"{name} asks for a KIND_GPU instance group: a CPU-only image has no GPU (give it "
                        "instance_group [ { kind: KIND_CPU } ])")
            if self.gpu_accelerators:
                return (f"{name} asks for the GPU execution accelerator {printable(self.gpu_accelerators[0])}: a "
                        "CPU-only image has no GPU")
        if providers is not None and self.onnxruntime:
            return ONNXRUNTIME.model_refusal(self.model, self.gpu_accelerators + self.cpu_accelerators, providers)
        return None


def read_needs(model: str, folder: Path) -> ModelNeeds:
    """The needs of the model in `folder` (its config.pbtxt; none without one, or one that does not
    read, which composer.config.pbtxt.config_problem refuses on its own)."""
    path = Path(folder) / CONFIG
    if not path.is_file():
        return ModelNeeds(model)
    try:
        return ModelNeeds.of(model, read_text(path, "model configuration", MAX_CONFIG_BYTES))
    except (Invalid, ValueError):
        return ModelNeeds(model)


def repository_needs_problem(folders: dict[str, Path], cpu_only: bool,
                             providers: tuple[str, ...] | None) -> str | None:
    """The first model of `folders` (name -> folder) the image cannot serve, in one line."""
    for model, folder in sorted(folders.items()):
        problem = read_needs(model, folder).problem(cpu_only, providers)
        if problem:
            return problem
    return None
