"""The ONNX Runtime backend and its execution providers (--ort-provider): which ones an image keeps,
the rules on them, and the collect stage's trimming of its folder (_collect.j2).

The CPU provider is built into libonnxruntime and always there; `shared` is the library every
other provider loads through (kept with any of them, never a choice); a CPU-only image may keep
the providers of CPU_IMAGE (OpenVINO runs on the CPU) and none that needs a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from composer.backends.base import Backend, Refusal
from composer.core.errors import UsageError
from composer.core.files import printable
from composer.core.words import did_you_mean

CPU = "cpu"
SHARED = "shared"
CPU_IMAGE = ("openvino",)
# Accelerator names of a model's configuration that are providers of the same name.
ACCELERATORS = ("tensorrt", "cuda", "openvino")
PROVIDER_PREFIX, PROVIDER_SUFFIX = "libonnxruntime_providers_", ".so"


@dataclass(frozen=True)
class OnnxRuntime(Backend):
    def serves(self, backend: str | None, platform: str | None) -> bool:
        """Served by ONNX Runtime (or not said: a model.onnx the server completes)."""
        if backend is not None:
            return backend == self.name
        return platform is None or platform in self.platforms

    # -- rules on the spec (composer.config.rules) --

    def providers_refusal(self, asked: tuple[str, ...], selected: tuple[str, ...], own: set[str]) -> Refusal | None:
        """Providers are chosen for NGC's onnxruntime backend, selected (`own`: the user's backends)."""
        if not asked:
            return None
        if self.name in own:
            return Refusal("ort_providers", "ort_providers are chosen for NGC's onnxruntime backend, not your own",
                           f"--ort-provider {asked[0]}: ONNX Runtime's providers are chosen for NGC's "
                           "onnxruntime backend of the full image, not one from --custom-backend or --backend-image")
        if self.name not in selected:
            return Refusal("ort_providers", "ort_providers are ONNX Runtime's: add onnxruntime to backends",
                           f"--ort-provider {asked[0]}: ONNX Runtime's providers are chosen for the "
                           "onnxruntime backend; select --backend onnxruntime too")
        return None

    def unknown_provider_refusal(self, asked: tuple[str, ...], offered: tuple[str, ...],
                                 version: str) -> Refusal | None:
        """A provider the release's backend does not build (the catalog's list) is a typo."""
        for name in asked:
            if name != CPU and name not in offered:
                hint = did_you_mean(name, offered)
                listing = ", ".join(offered)
                message = (f"unknown ONNX Runtime provider '{name}'{hint}: NGC's {version} onnxruntime "
                           f"backend holds {listing} (and CPU, always there)")
                return Refusal("ort_providers", message, f"--ort-provider {name}: {message}")
        return None

    def cpu_image_refusal(self, needing_a_gpu: tuple[str, ...]) -> Refusal | None:
        """A CPU-only image keeps no provider that needs a GPU."""
        if not needing_a_gpu:
            return None
        extras = ", ".join(CPU_IMAGE)
        first = needing_a_gpu[0]
        return Refusal("ort_providers", f"device: cpu keeps only ONNX Runtime's CPU provider (and {extras}): "
                       f"{first} needs a GPU",
                       f"--device cpu --ort-provider {first}: a CPU-only image keeps only ONNX Runtime's "
                       f"CPU provider (and {extras}); {first} needs a GPU")

    def model_refusal(self, model: str, accelerators: tuple[str, ...], kept: tuple[str, ...]) -> str | None:
        """A model (served by ONNX Runtime) asking for an accelerator whose provider is left out."""
        for accelerator in accelerators:
            wanted = accelerator.lower()
            if wanted in ACCELERATORS and wanted not in kept:
                listing = ", ".join(["CPU", *kept])
                return (f"model {printable(model)} asks for the {printable(accelerator)} execution accelerator, whose "
                        f"ONNX Runtime provider this image leaves out (kept: {listing}): add --ort-provider {wanted}, "
                        "or take the accelerator out of its config.pbtxt")
        return None

    # -- the plan (composer.resolve.plan) and rendering --

    def kept_providers(self, kept: tuple[str, ...] | None, backends, offered: tuple[str, ...] | None,
                       source: str) -> tuple[str, ...] | None:
        """The providers kept, or None for the backend's folder as it is; the names checked against
        the folder when the probe read it (`offered`, "shared" included; None: not known)."""
        if self.name not in backends or kept is None:
            return None
        if offered is not None:
            offered = tuple(p for p in offered if p != SHARED)
            for name in kept:
                if name not in offered:
                    raise UsageError(
                        f"unknown ONNX Runtime provider '{name}'{did_you_mean(name, offered)}: the onnxruntime "
                        f"backend of {source} holds {', '.join(offered) if offered else 'none'} (and CPU, always there)")
        return kept

    def trimmed(self, kept: tuple[str, ...] | None, backends) -> bool:
        """Its folder is trimmed in the collect stage (providers left out)."""
        return kept is not None and self.name in backends

    def dropped_provider_filter(self, kept: tuple[str, ...] | None) -> tuple[str, ...]:
        """find(1) arguments naming the provider libraries of its folder that go."""
        names = list(kept or ())
        if names:
            names.append(SHARED)
        args = ["-maxdepth", "1", "-name", f"{PROVIDER_PREFIX}*{PROVIDER_SUFFIX}"]
        for name in sorted(names):
            args += ["!", "-name", f"{PROVIDER_PREFIX}{name}{PROVIDER_SUFFIX}"]
        return tuple(args)


UNIT = OnnxRuntime("onnxruntime", platforms=("onnxruntime_onnx",), samples=("onnx_affine",),
                   fragment="_collect.j2: ONNX Runtime's providers left out")
