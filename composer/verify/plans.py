"""The TensorRT sample's plan, built on the smoke test's own GPU.

A TensorRT plan runs only on the GPU (and with the TensorRT version) it was built for, so the
sample cannot ship one: its model.plan is a placeholder. Where the smoke test has GPUs, the plan is
built at smoke time from the sample's ONNX source with what the images hold (trtexec, or TensorRT's
python builder; in_image/build_plan.sh), in the composed image, else in the full image it was
composed from (when the engine holds it; nothing is pulled). With no way to build it the sample is
left out and its row is a SKIP saying why: never a FAIL that comes from the sample itself. A
user's own plans (--model-repository, baked models) are served as they are.
"""

from __future__ import annotations

import base64
import binascii
import time
from dataclasses import dataclass
from importlib import resources

from composer.core.errors import ComposerError
from composer.engine.interface import Engine
from composer.verify.samples import Sample

SCRIPT = "/composer-plan/build_plan.sh"
SOURCE = "/composer-plan/model.onnx"
BUILD_TIMEOUT = 600.0  # seconds a plan build may take (trtexec tries tactics on the GPU)
PLAN_LABEL = "org.triton-composer.plan"


@dataclass(frozen=True)
class PlanBuild:
    """The plan built for a sample (`plan`), or why none could be (`reason`), and in which image."""

    plan: bytes | None
    reason: str
    image: str


def built_plan(engine: Engine, images: list[str], sample: Sample, gpus, labels: dict | None = None,
               on_line=lambda _line: None, timeout: float = BUILD_TIMEOUT) -> PlanBuild:
    """The sample's plan, built in the first of `images` that can build it (on `gpus`)."""
    source = sample.plan_source.read_bytes() if sample.plan_source is not None else b""
    script = resources.files("composer.in_image").joinpath("build_plan.sh").read_bytes()
    reasons = []
    for image in images:
        on_line(f"building the {sample.model} sample's TensorRT plan on this GPU in {image[:40]}")
        try:
            output = run_to_end(engine, image, ["sh", SCRIPT, SOURCE], {SCRIPT: script, SOURCE: source}, gpus,
                                {PLAN_LABEL: "1", **(labels or {})}, timeout)
        except ComposerError as error:
            reasons.append(f"{image[:40]}: {error.message}")
            continue
        plan, reason = read_plan(output)
        if plan is not None:
            return PlanBuild(plan, reason, image)
        reasons.append(f"{image[:40]}: {reason}")
    return PlanBuild(None, "; ".join(reasons) or "no image to build it in", images[0] if images else "")


def read_plan(output: str) -> tuple[bytes | None, str]:
    """The plan build_plan.sh printed (and how it was built), or why there is none."""
    lines = output.splitlines()
    for line in lines:
        if line.startswith("composer-plan-none:"):
            return None, line.partition(":")[2].strip()
    if "composer-plan-begin" not in lines or "composer-plan-end" not in lines:
        tail = " ".join(" ".join(lines[-3:]).split())[-200:]
        return None, f"the plan build printed no plan ({tail or 'no output'})"
    how = next((line.partition(":")[2].strip() for line in lines if line.startswith("composer-plan-by:")), "")
    encoded = "".join(lines[lines.index("composer-plan-begin") + 1: lines.index("composer-plan-end")])
    try:
        plan = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        return None, "the plan build printed a plan that is not base64"
    return (plan, f"built with {how}") if plan else (None, "the plan build printed an empty plan")


def run_to_end(engine: Engine, image: str, command: list[str], files: dict, gpus, labels: dict,
               timeout: float) -> str:
    """Run `command` in a container of `image` with `gpus` until it exits (at most `timeout`
    seconds); its output. The container is removed in every case."""
    container = engine.start(image, command, files=files, labels=labels, gpus=gpus)
    try:
        deadline = time.monotonic() + timeout
        while container.running():
            if time.monotonic() >= deadline:
                raise ComposerError(f"no plan within {timeout:g} s")
            time.sleep(1.0)
        return container.logs()
    finally:
        container.remove()


def plan_images(engine: Engine, image: str, record: dict) -> list[str]:
    """Where a plan may be built: the composed image, then the full image it was composed from
    (its id in the composition record), when the engine holds it."""
    full = ((record.get("base_images") or {}).get("full") or {}).get("id")
    return [image] + ([str(full)] if full and full != image and engine.image(str(full)) is not None else [])


def with_built_plans(engine: Engine, images: list[str], samples: list[Sample], files: dict, samples_root: str,
                     gpus, labels: dict | None = None, on_line=lambda _line: None) -> tuple[list[Sample], dict, dict]:
    """The samples to serve, their files (a built plan in the place of the placeholder) and, for each
    sample left out, why: {backend: reason}."""
    kept, left_out, files = [], {}, dict(files)
    for sample in samples:
        if sample.plan_source is None:
            kept.append(sample)
            continue
        build = built_plan(engine, images, sample, gpus, labels, on_line)
        if build.plan is None:
            files.pop(f"{samples_root}/{sample.model}", None)
            left_out[sample.backend] = (f"the {sample.model} sample's plan cannot be built on this GPU (a TensorRT "
                                        f"plan is specific to the GPU and TensorRT version): {build.reason}; "
                                        "smoke-test your own plans with --model-repository")
            continue
        on_line(f"{sample.model}: plan {build.reason} in {build.image[:40]}")
        files[f"{samples_root}/{sample.model}/config.pbtxt"] = (sample.path / "config.pbtxt").read_bytes()
        files[f"{samples_root}/{sample.model}/1/model.plan"] = build.plan
        files.pop(f"{samples_root}/{sample.model}", None)
        kept.append(sample)
    return kept, files, left_out
