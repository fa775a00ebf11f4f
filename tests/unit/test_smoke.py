"""The smoke test's verdicts, with the engine and the server faked at their boundary."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from composer import smoke
from composer.engine import RunResult
from composer.smoke import SmokeOptions, smoke_test
from composer.triton_client import TensorData


@dataclass
class FakeContainer:
    removed: bool = False
    ports: dict = field(default_factory=lambda: {8000: 1})

    def host_port(self, port):
        return self.ports[port]

    def running(self):
        return True

    def logs(self, tail="all"):
        return "server log line"

    def remove(self):
        self.removed = True


class FakeEngine:
    def __init__(self, backends):
        self.backends = backends
        self.container = FakeContainer()
        self.started_with = None

    def run_once(self, image, command, entrypoint=None, **_):
        if command[0] == "ls":
            return RunResult(0, "\n".join(self.backends))
        return RunResult(1, "")  # no composition record

    def start(self, image, command=None, **kwargs):
        self.started_with = kwargs
        return self.container


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
    engine = FakeEngine(["python", "tensorrt"])
    report = smoke_test(engine, "img", SmokeOptions(backends=("python", "tensorrt"), server_version="2.50.0"))
    rows = {r.subject: r for r in report.rows}
    assert report.passed
    assert rows["tensorrt"].status == "SKIP" and "--model-repository" in rows["tensorrt"].detail
    assert rows["python"].status == "PASS"
    assert engine.container.removed
    assert engine.started_with["shm_size"] and engine.started_with["ports"] == [8000]


def test_wrong_answer_fails_and_keeps_the_log(client):
    client.answers = {"add_sub": add_sub_answer(correct=False)}
    report = smoke_test(FakeEngine(["python"]), "img", SmokeOptions(backends=("python",)))
    assert not report.passed
    assert [r.subject for r in report.failures()] == ["python"]
    assert report.log_tail == "server log line"


def test_unselected_backend_present_fails(client):
    client.answers = {"add_sub": add_sub_answer()}
    report = smoke_test(FakeEngine(["python", "pytorch"]), "img", SmokeOptions(backends=("python",)))
    presence = next(r for r in report.rows if r.subject == "backends")
    assert presence.status == "FAIL" and "pytorch" in presence.detail


def test_wrong_server_version_fails(client):
    client.answers = {"add_sub": add_sub_answer()}
    report = smoke_test(FakeEngine(["python"]), "img", SmokeOptions(backends=("python",), server_version="2.49.0"))
    assert any(r.subject == "server" and r.status == "FAIL" for r in report.rows)


def test_container_removed_on_interrupt(client, monkeypatch):
    engine = FakeEngine(["python"])

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(smoke, "_check_server", interrupted)
    with pytest.raises(KeyboardInterrupt):
        smoke_test(engine, "img", SmokeOptions(backends=("python",)))
    assert engine.container.removed
