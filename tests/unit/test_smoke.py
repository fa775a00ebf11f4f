"""The smoke test's verdicts, with the engine and the server faked at their boundary."""

from __future__ import annotations

import pytest

from composer.verify import smoke, smoke_plan
from composer.engine.interface import RunResult
from composer.verify.smoke import smoke_test
from composer.verify.smoke_plan import SmokePlan
from composer.core.errors import EngineError, UsageError
from composer.config.cases import TensorData
from tests.unit.fake_engine import FakeEngine


def serving(backends, **kwargs) -> FakeEngine:
    """An engine whose images hold `backends` and no composition record."""

    def answer(image, command):
        if command[0] == "ls":
            return RunResult(0, "\n".join(backends))
        return RunResult(1, "")  # no composition record

    return FakeEngine(answer=answer, **kwargs)


class FakeClient:
    answers: dict = {}

    def __init__(self, url, timeout=10.0):
        pass

    def live(self):
        return True

    def server_metadata(self):
        return {"version": "2.50.0"}

    def model_index(self):
        return [{"name": name, "state": "READY"} for name in self.answers]

    def infer(self, model, inputs):
        return self.answers[model]

    def model_config(self, model):
        return {"name": model, "instance_group": [{"kind": "KIND_CPU", "count": 1}]}


@pytest.fixture
def client(monkeypatch):
    monkeypatch.setattr(smoke, "TritonHTTP", FakeClient)
    return FakeClient


def add_sub_answer(correct=True):
    total = (1.5, 2.25, 5.0, 3.0) if correct else (0.0, 0.0, 0.0, 0.0)
    return {"OUTPUT0": TensorData("OUTPUT0", "FP32", (4,), total),
            "OUTPUT1": TensorData("OUTPUT1", "FP32", (4,), (0.5, 1.75, 1.0, 5.0))}


def test_tensorrt_is_skipped_with_the_next_step(client):
    client.answers = {"add_sub": add_sub_answer()}
    engine = serving(["python", "tensorrt"])
    report = smoke_test(engine, "img", SmokePlan(backends=("python", "tensorrt"), server_version="2.50.0"))
    rows = {r.subject: r for r in report.rows}
    assert report.passed
    assert rows["tensorrt"].status == "SKIP" and "--model-repository" in rows["tensorrt"].detail
    assert rows["tensorrt"].detail.startswith("needs a GPU")
    assert rows["python"].status == "PASS"
    assert engine.removed == ["container-1"] and not engine.running
    assert engine.starts[0]["shm_size"] and engine.starts[0]["ports"] == [8000, 8001]  # HTTP, gRPC (streams)


def test_wrong_answer_fails_and_keeps_the_log(client):
    client.answers = {"add_sub": add_sub_answer(correct=False)}
    report = smoke_test(serving(["python"]), "img", SmokePlan(backends=("python",)))
    assert not report.passed
    assert [r.subject for r in report.failures()] == ["python"]
    assert report.log_tail == "server log line"


def test_unselected_backend_present_fails(client):
    client.answers = {"add_sub": add_sub_answer()}
    report = smoke_test(serving(["python", "pytorch"]), "img", SmokePlan(backends=("python",)))
    presence = next(r for r in report.rows if r.subject == "backends")
    assert presence.status == "FAIL" and "pytorch" in presence.detail


def test_wrong_server_version_fails(client):
    client.answers = {"add_sub": add_sub_answer()}
    report = smoke_test(serving(["python"]), "img", SmokePlan(backends=("python",), server_version="2.49.0"))
    assert any(r.subject == "server" and r.status == "FAIL" for r in report.rows)


def test_container_removed_on_interrupt(client, monkeypatch):
    engine = serving(["python"])

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(smoke, "_check_server", interrupted)
    with pytest.raises(KeyboardInterrupt):
        smoke_test(engine, "img", SmokePlan(backends=("python",)))
    assert engine.removed == ["container-1"] and not engine.running


# -- GPUs, metrics, strict ---------------------------------------------------------

GPU_METRICS = "# HELP nv_gpu_utilization GPU utilization\nnv_gpu_utilization{gpu_uuid=\"GPU-1\"} 0\n"


@pytest.fixture
def metrics(monkeypatch):
    """What the server's metrics endpoint answers; the URLs asked are recorded."""
    state = {"text": GPU_METRICS, "urls": []}

    def fetch(url):
        state["urls"].append(url)
        return state["text"]

    monkeypatch.setattr(smoke, "metrics_text", fetch)
    monkeypatch.setattr(smoke.time, "sleep", lambda _s: None)
    return state


def test_auto_asks_for_all_gpus_where_the_engine_offers_the_nvidia_runtime(client, metrics):
    client.answers = {"add_sub": add_sub_answer()}
    engine = serving(["python"], offered_runtimes=frozenset({"runc", "nvidia"}))
    report = smoke_test(engine, "img", SmokePlan(backends=("python",)))
    start = engine.starts[0]
    assert start["gpus"] == "all" and start["ports"] == [8000, 8001, 8002]
    assert "--allow-gpu-metrics=true" in start["command"] and "--allow-metrics=false" not in start["command"]
    assert report.passed and report.gpus == "all" and "nvidia runtime" in report.gpus_reason
    rows = {r.subject: r for r in report.rows}
    assert rows["metrics"].status == "PASS" and "nv_gpu_utilization" in rows["metrics"].detail
    assert metrics["urls"] == ["http://127.0.0.1:48002"]  # the published metrics port
    assert "GPUs: all" in rows["server"].detail
    assert report.to_dict()["gpus"] == "all"


def test_auto_asks_for_none_without_the_nvidia_runtime(client, metrics):
    client.answers = {"add_sub": add_sub_answer()}
    engine = serving(["python"])
    report = smoke_test(engine, "img", SmokePlan(backends=("python",)))
    start = engine.starts[0]
    assert start["gpus"] == "none" and start["ports"] == [8000, 8001]
    assert "--allow-metrics=false" in start["command"]
    assert report.gpus == "none" and "no nvidia runtime" in report.gpus_reason
    assert "metrics" not in {r.subject for r in report.rows} and metrics["urls"] == []


def test_gpus_without_gpu_metrics_fail_loudly(client, metrics):
    client.answers = {"add_sub": add_sub_answer()}
    metrics["text"] = "nv_inference_count{model=\"add_sub\"} 0\n"
    engine = serving(["python"], offered_runtimes=frozenset({"nvidia"}))
    report = smoke_test(engine, "img", SmokePlan(backends=("python",)))
    assert not report.passed
    assert [r.subject for r in report.failures()] == ["metrics"]
    assert "DCGM did not start" in report.failures()[0].detail and report.log_tail == "server log line"


@pytest.mark.parametrize("wanted, asked", [(2, 2), ("2", 2), (0, 0), ("none", "none"), ("all", "all")])
def test_explicit_gpus_override_auto(client, metrics, wanted, asked):
    client.answers = {"add_sub": add_sub_answer()}
    engine = serving(["python"], offered_runtimes=frozenset({"nvidia"}))
    report = smoke_test(engine, "img", SmokePlan(backends=("python",), gpus=wanted))
    assert engine.starts[0]["gpus"] == asked and report.gpus == str(asked) and report.gpus_reason == "as asked"


@pytest.mark.parametrize("bad", ["some", -1, "-2", 1.5, True])
def test_bad_gpus_refused_before_any_work(bad):
    with pytest.raises(UsageError, match="give auto, all, none or a number of GPUs"):
        SmokePlan(backends=("python",), gpus=bad)


def test_engine_refuses_a_bad_gpu_request():
    with pytest.raises(EngineError, match="give all, none or a positive number"):
        FakeEngine().start("img", gpus="several")


def test_strict_turns_every_skip_into_a_failure(client):
    client.answers = {"add_sub": add_sub_answer()}
    engine = serving(["python", "tensorrt"])
    report = smoke_test(engine, "img", SmokePlan(backends=("python", "tensorrt"), strict=True))
    assert not report.passed and report.strict
    assert [(r.subject, r.status) for r in report.failures()] == [("tensorrt", "FAIL")]
    assert report.failures()[0].detail.startswith("strict: ")
    assert report.to_dict()["counts"] == {"passed": 3, "failed": 1, "skipped": 0}


def test_skip_stays_skipped_never_passed(client):
    client.answers = {"add_sub": add_sub_answer()}
    report = smoke_test(serving(["python", "tensorrt"]), "img", SmokePlan(backends=("python", "tensorrt")))
    record = report.to_dict()
    assert record["passed"] and record["counts"] == {"passed": 3, "failed": 0, "skipped": 1}
    assert [r["status"] for r in record["rows"] if r["subject"] == "tensorrt"] == ["SKIP"]


def test_each_model_says_its_device(client):
    client.answers = {"add_sub": add_sub_answer()}
    report = smoke_test(serving(["python"]), "img", SmokePlan(backends=("python",)))
    row = next(r for r in report.rows if r.model == "add_sub")
    assert row.device == "CPU" and row.detail.endswith("(CPU)")
    assert report.to_dict()["rows"][-1]["device"] == "CPU"


class GpuSampleClient(FakeClient):
    """The tensorrt sample did not load (no GPU); the server said why."""

    def model_index(self):
        return [{"name": "tensorrt_plan", "state": "UNAVAILABLE",
                 "reason": "tensorrt: cannot load plan model 'tensorrt_plan': no GPU available"}]


def test_a_gpu_sample_that_cannot_load_without_a_gpu_is_a_skip_with_the_reason(monkeypatch):
    monkeypatch.setattr(smoke, "TritonHTTP", GpuSampleClient)
    report = smoke_test(serving(["tensorrt"]), "img", SmokePlan(backends=("tensorrt",), gpus="none"))
    row = next(r for r in report.rows if r.model == "tensorrt_plan")
    assert report.passed and row.status == "SKIP"
    assert row.detail.startswith("needs a GPU") and "no GPU available" in row.detail
    strict = smoke_test(serving(["tensorrt"]), "img", SmokePlan(backends=("tensorrt",), gpus="none", strict=True))
    assert not strict.passed and next(r for r in strict.rows if r.model == "tensorrt_plan").status == "FAIL"


# -- the smoke plan of a built image, from its composition record --------------------------


def _recorded(output: str, exit_code: int = 0) -> FakeEngine:
    return FakeEngine(answer=lambda image, command: RunResult(exit_code, output))


def _image(env=None):
    from composer.engine.interface import ImageInfo

    return ImageInfo(id="sha256:" + "a" * 64, ref="team/t:1", tags=("team/t:1",), repo_digests=(), env=env or {},
                     labels={}, size=0)


def test_smoke_test_image_reads_the_plan_from_the_record():
    from composer.config.types import Result

    engine = _recorded('{"backends": ["onnxruntime", "python"], "server_version": "2.50.0"}')
    plan, record = smoke_plan.image_smoke_plan(engine, _image(), "team/t:1", (), Result(strict=True))
    assert plan == SmokePlan.of(("onnxruntime", "python"), "2.50.0", Result(strict=True))
    assert record["server_version"] == "2.50.0"
    given, _ = smoke_plan.image_smoke_plan(engine, _image(), "team/t:1", ("python",), Result())
    assert given.backends == ("python",)


def test_a_corrupt_record_is_an_error_naming_the_image():
    from composer.core.errors import ComposerError
    from composer.config.types import Result

    for output in ("{not json", '["a list"]'):
        with pytest.raises(ComposerError, match=r"^team/t:1: its composition record .* is not a JSON object"):
            smoke_plan.image_smoke_plan(_recorded(output), _image(), "team/t:1", (), Result())
    with pytest.raises(UsageError, match="team/t:1 has no composition record: name its backends with --backend"):
        smoke_plan.image_smoke_plan(_recorded("", exit_code=1), _image(), "team/t:1", (), Result())


def test_smoke_test_image_of_a_cpu_only_record_serves_with_no_gpu_and_refuses_gpu_flags():
    from composer.config.types import Device, Result

    engine = _recorded('{"backends": ["python"], "server_version": "2.50.0", "device": "cpu"}')
    plan, _ = smoke_plan.image_smoke_plan(engine, _image(), "team/t:1", (), Result())
    assert plan.device is Device.CPU and plan.server_flags == ("--pinned-memory-pool-byte-size=0",)
    assert smoke_plan.resolve_gpus(engine, plan.gpus, plan.device) == ("none", "CPU-only image")
    for settings, says in ((Result(gpus="all"), "leave out --gpus all"), (Result(strict=True), "leave out --strict")):
        with pytest.raises(UsageError, match=f"team/t:1 is a CPU-only image .*{says}"):
            smoke_plan.image_smoke_plan(engine, _image(), "team/t:1", (), settings)
