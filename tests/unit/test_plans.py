"""The TensorRT sample on a host with GPUs: its plan built at smoke time in the image (or the full
image) and served, or the sample left out with a SKIP saying why; never a FAIL from the placeholder.
No GPU here: the engine is faked at its boundary, the plan-building container's output scripted."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

from composer.engine.interface import RunResult
from composer.config.cases import TensorData
from composer.verify import smoke
from composer.verify.plans import read_plan
from composer.verify.samples import load_samples
from composer.verify.smoke import smoke_test
from composer.verify.smoke_plan import SmokePlan
from tests.unit.fake_engine import FakeEngine

PLAN = b"\x00serialized-engine\xff" * 8
BUILT = f"composer-plan-by: trtexec\ncomposer-plan-begin\n{base64.encodebytes(PLAN).decode()}composer-plan-end\n"
NONE = "composer-plan-none: the image holds neither trtexec nor TensorRT's python builder\n"
FULL_ID = "sha256:" + "f" * 64


def test_the_sample_names_its_onnx_source():
    (sample,) = [s for s in load_samples() if s.backend == "tensorrt"]
    assert sample.plan_source.name == "tensorrt_plan.onnx" and sample.plan_source.read_bytes()[:2]
    assert all(s.plan_source is None for s in load_samples() if s.backend != "tensorrt")


def test_what_the_plan_build_printed_is_read():
    assert read_plan(BUILT) == (PLAN, "built with trtexec")
    assert read_plan(NONE) == (None, "the image holds neither trtexec nor TensorRT's python builder")
    assert read_plan("Segmentation fault\n") == (None, "the plan build printed no plan (Segmentation fault)")
    assert read_plan("composer-plan-begin\n%%%\ncomposer-plan-end\n")[0] is None


@dataclass
class GpuEngine(FakeEngine):
    """Offers the nvidia runtime; a container of image X that runs the plan build prints outputs[X] and exits."""

    outputs: dict = field(default_factory=dict)
    offered_runtimes: frozenset = frozenset({"runc", "nvidia"})
    printed: dict = field(default_factory=dict)

    def start(self, image, command=None, **kwargs):
        container = super().start(image, command, **kwargs)
        if command and command[0] == "sh" and "build_plan.sh" in command[1]:
            self.running.discard(container.id)  # it ran to its end
            self.removed.append(container.id)
            self.printed[container.id] = self.outputs.get(image, "")
        return container

    def container_logs(self, container_id, tail="all"):
        return self.printed.get(container_id, self.logs)

    def image(self, ref):
        return super().image(ref) if ref != FULL_ID else super().image("img")


def engine_with(outputs, backends=("tensorrt",)):
    record = '{"base_images": {"full": {"id": "%s", "ref": "nvcr.io/nvidia/tritonserver:24.09-py3"}}}' % FULL_ID

    def answer(image, command):
        if command[0] == "ls":
            return RunResult(0, "\n".join(backends))
        if command[0] == "cat":
            return RunResult(0, record)
        return RunResult(1, "")

    return GpuEngine(images={"img": "sha256:" + "1" * 64}, answer=answer, outputs=outputs)


class Identity:
    """The server: the tensorrt sample READY (its plan loaded), answering as an identity; GPU metrics on."""

    def __init__(self, url, timeout=10.0):
        pass

    def live(self):
        return True

    def server_metadata(self):
        return {"version": "2.50.0"}

    listed = ["tensorrt_plan"]  # the models served

    def model_index(self):
        return [{"name": name, "state": "READY"} for name in self.listed]

    def model_config(self, name):
        return {"name": name, "instance_group": [{"kind": "KIND_GPU"}]}

    def infer(self, model, inputs):
        return {t.name.replace("INPUT", "OUTPUT"): TensorData(t.name.replace("INPUT", "OUTPUT"), t.datatype, t.shape,
                                                               t.data) for t in inputs}


def run(monkeypatch, engine, timeout=240.0):
    monkeypatch.setattr(smoke, "TritonHTTP", Identity)
    monkeypatch.setattr(smoke, "metrics_text", lambda url: "nv_gpu_utilization{gpu=\"0\"} 1\n")
    return smoke_test(engine, "img", SmokePlan(backends=("tensorrt",), timeout=timeout))


def test_with_gpus_the_plan_is_built_in_the_image_and_served(monkeypatch):
    engine = engine_with({"img": BUILT})
    report = run(monkeypatch, engine)
    builds, (server,) = engine.starts[:-1], engine.starts[-1:]
    assert [b["image"] for b in builds] == ["img"] and builds[0]["gpus"] == "all"
    assert builds[0]["files"]["/composer-plan/model.onnx"][:2]  # the sample's ONNX source went in
    assert server["files"]["/composer-smoke/samples/tensorrt_plan/1/model.plan"] == PLAN  # not the placeholder
    assert "/composer-smoke/samples/tensorrt_plan" not in server["files"]
    row = next(r for r in report.rows if r.model == "tensorrt_plan")
    assert report.passed and (row.status, row.request) == ("PASS", "sample"), row.detail


def test_the_full_image_builds_it_when_the_composed_one_cannot(monkeypatch):
    engine = engine_with({"img": NONE, FULL_ID: BUILT})
    report = run(monkeypatch, engine)
    assert [s["image"] for s in engine.starts[:-1]] == ["img", FULL_ID]
    assert engine.starts[-1]["files"]["/composer-smoke/samples/tensorrt_plan/1/model.plan"] == PLAN
    assert report.passed


def test_no_way_to_build_the_plan_is_a_skip_saying_why_never_a_fail(monkeypatch):
    engine = engine_with({"img": NONE, FULL_ID: NONE})
    monkeypatch.setattr(Identity, "listed", [])  # the sample is not served: an empty index, waited on briefly
    report = run(monkeypatch, engine, timeout=0.2)
    assert report.passed, [(r.subject, r.detail) for r in report.failures()]
    (row,) = [r for r in report.rows if r.subject == "tensorrt"]
    assert row.status == "SKIP" and row.detail.startswith("the tensorrt_plan sample's plan cannot be built on this GPU")
    assert "neither trtexec nor TensorRT's python builder" in row.detail and "--model-repository" in row.detail
    assert not any(p.startswith("/composer-smoke/samples/tensorrt_plan") for p in engine.starts[-1]["files"] or {})
    assert not engine.running  # the plan-building containers and the server are gone


def test_without_gpus_nothing_is_built(monkeypatch):
    engine = engine_with({"img": BUILT})
    monkeypatch.setattr(smoke, "TritonHTTP", Identity)
    smoke_test(engine, "img", SmokePlan(backends=("tensorrt",), gpus="none"))
    assert len(engine.starts) == 1  # the server alone
