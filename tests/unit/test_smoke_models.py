"""The smoke test on the user's models: cases, the default request, the server's reasons for a
model that did not load, and no waiting once the server said so. Engine and server are faked at
their boundary (ContainerEngine, TritonHTTP)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from composer.verify import smoke
from composer.engine.interface import RunResult
from composer.core.errors import UsageError
from composer.verify.smoke import server_reasons, smoke_test
from composer.verify.smoke_plan import SmokePlan
from composer.verify.triton_client import InferenceError, TensorData
from tests.unit.fake_engine import FakeEngine

AFFINE_CONFIG = {
    "name": "affine", "max_batch_size": 0,
    "input": [{"name": "input__0", "data_type": "TYPE_FP32", "dims": [4]}],
    "output": [{"name": "output__0", "data_type": "TYPE_FP32", "dims": [4]}],
    "instance_group": [{"kind": "KIND_CPU"}],
}
BROKEN_LOG = (
    'I1122 12:44:58.600000 1 server.cc:100] "starting"\n'
    'E1122 12:44:58.675793 1 model_repository_manager.cc:1460] "Poll failed for model directory \'broken\': '
    'failed to read text proto from /composer-smoke/models/broken/config.pbtxt"\n'
    'E1122 12:44:58.841451 1 model_lifecycle.cc:642] "failed to load \'raises\' version 1: Internal: '
    'RuntimeError: cannot load\\n\\nAt:\\n  /models/raises/1/model.py(1): <module>\\n"\n'
)


class Server:
    """A fake Triton: models by name with state, config and a function giving the answer."""

    def __init__(self, models: dict, index_states: list[dict] | None = None):
        self.models = models
        self.index_states = index_states or []  # successive answers of the model index
        self.requests: list[tuple[str, list]] = []
        self.index_calls = 0

    def __call__(self, url, timeout=10.0):
        return self

    def live(self):
        return True

    def server_metadata(self):
        return {"version": "2.50.0"}

    def model_index(self):
        self.index_calls += 1
        if self.index_states:
            return [dict(e) for e in self.index_states[min(self.index_calls, len(self.index_states)) - 1]]
        return [{"name": n, "state": m.get("state", "READY"), **({"reason": m["reason"]} if "reason" in m else {})}
                for n, m in self.models.items()]

    def model_config(self, name):
        return self.models[name]["config"]

    def infer(self, name, inputs):
        self.requests.append((name, list(inputs)))
        answer = self.models[name]["answer"]
        if isinstance(answer, Exception):
            raise answer
        return {t.name: t for t in answer(inputs)}


def times_three(inputs):
    (x,) = inputs
    return [TensorData("output__0", "FP32", x.shape, tuple(v * 3 for v in x.data))]


def engine_for(backends=("pytorch",), record=None, image_files=None, log="") -> FakeEngine:
    """An image holding `backends`, the composition `record`, and `image_files` under /models."""

    def answer(image, command):
        if command[0] == "ls":
            return RunResult(0, "\n".join(backends))
        if command[0] == "cat":
            return RunResult(0, json.dumps(record)) if record is not None else RunResult(1, "no record")
        if command[:2] == ["sh", "-c"] and "smoke_cases" in command[2]:
            lines = []
            for model, files in sorted((image_files or {}).items()):
                lines.append(f"model {model}")
                lines += [f"file {model}/{n} {base64.b64encode(t.encode()).decode()}" for n, t in files.items()]
            return RunResult(0, "\n".join(lines) + "\n")
        return RunResult(1, "")

    return FakeEngine(answer=answer, logs=log)


def repository(tmp_path, **models) -> Path:
    for name, cases in models.items():
        (tmp_path / name / "1").mkdir(parents=True)
        if cases is not None:
            (tmp_path / name / "smoke_cases.json").write_text(json.dumps({"cases": cases}))
    return tmp_path


def case(data, expected, name="triples"):
    return {"name": name, "inputs": [{"name": "input__0", "datatype": "FP32", "shape": [4], "data": data}],
            "expected": [{"name": "output__0", "datatype": "FP32", "shape": [4], "data": expected}]}


@pytest.fixture
def no_sleep(monkeypatch):
    sleeps = []
    monkeypatch.setattr(smoke.time, "sleep", sleeps.append)
    return sleeps


def run(monkeypatch, server, engine, **options):
    monkeypatch.setattr(smoke, "TritonHTTP", server)
    return smoke_test(engine, "img", SmokePlan(backends=("pytorch",), **options))


def rows_of(report, model):
    return [r for r in report.rows if r.model == model]


def test_cases_in_the_convention_are_sent_and_compared(tmp_path, monkeypatch):
    repo = repository(tmp_path, affine=[case([1, 2, 3, 4], [3, 6, 9, 12]), case([0, 0, 0, 0], [0, 0, 0, 0], "zeros")])
    server = Server({"affine": {"config": AFFINE_CONFIG, "answer": times_three}})
    report = run(monkeypatch, server, engine_for(), model_repository=repo, samples=False)
    (row,) = rows_of(report, "affine")
    assert (row.status, row.ready, row.request, row.cases) == ("PASS", "READY", "2 cases", "2/2")
    assert [name for name, _ in server.requests] == ["affine", "affine"]
    table = report.to_dict()["rows"][-1]
    assert table["cases"] == "2/2" and table["request"] == "2 cases"


def test_a_wrong_answer_names_the_model_and_the_case(tmp_path, monkeypatch):
    repo = repository(tmp_path, affine=[case([1, 2, 3, 4], [3, 6, 9, 12]), case([1, 1, 1, 1], [2, 2, 2, 2], "twos")])
    server = Server({"affine": {"config": AFFINE_CONFIG, "answer": times_three}})
    report = run(monkeypatch, server, engine_for(), model_repository=repo, samples=False)
    (row,) = rows_of(report, "affine")
    assert not report.passed and row.status == "FAIL" and row.cases == "1/2"
    assert row.detail.startswith("wrong answer: case twos: output__0[0] is 3, expected 2")


def test_a_case_file_given_outright_counts_too(tmp_path, monkeypatch):
    repo = repository(tmp_path / "repo", affine=None)
    cases_file = tmp_path / "cases.yaml"
    cases_file.write_text(json.dumps({"cases": [{**case([1, 1, 1, 1], [3, 3, 3, 3]), "model": "affine"},
                                                 {**case([1, 1, 1, 1], [3, 3, 3, 3]), "model": "ghost"}]}))
    server = Server({"affine": {"config": AFFINE_CONFIG, "answer": times_three}})
    report = run(monkeypatch, server, engine_for(), model_repository=repo, cases_file=cases_file, samples=False)
    assert rows_of(report, "affine")[0].status == "PASS"
    (ghost,) = rows_of(report, "ghost")
    assert ghost.status == "FAIL" and "which the server does not serve" in ghost.detail


def test_without_cases_a_default_request_from_the_config(tmp_path, monkeypatch):
    repo = repository(tmp_path, affine=None)
    server = Server({"affine": {"config": AFFINE_CONFIG, "answer": times_three}})
    report = run(monkeypatch, server, engine_for(), model_repository=repo, samples=False)
    (row,) = rows_of(report, "affine")
    assert row.status == "PASS" and row.request == "default: input__0 FP32 [4]"
    (sent,) = server.requests[0][1]
    assert sent.data == (0.0, 0.0, 0.0, 0.0)


def test_an_answer_missing_a_configured_output_fails(tmp_path, monkeypatch):
    repo = repository(tmp_path, affine=None)
    config = {**AFFINE_CONFIG, "output": AFFINE_CONFIG["output"] + [{"name": "extra", "data_type": "TYPE_INT64",
                                                                      "dims": [1]}]}
    server = Server({"affine": {"config": config, "answer": times_three}})
    (row,) = rows_of(run(monkeypatch, server, engine_for(), model_repository=repo, samples=False), "affine")
    assert row.status == "FAIL" and "no output extra in the answer" in row.detail


def test_a_model_without_inputs_in_its_config_fails_with_that_reason(tmp_path, monkeypatch):
    repo = repository(tmp_path, noconf=None)
    server = Server({"noconf": {"config": {"max_batch_size": 0, "input": [], "output": []},
                                "answer": InferenceError("HTTP 400")}})
    (row,) = rows_of(run(monkeypatch, server, engine_for(), model_repository=repo, samples=False), "noconf")
    assert row.status == "FAIL" and row.ready == "READY"
    assert "configuration has no inputs" in row.detail and not server.requests


def test_reasons_read_from_the_server_log():
    reasons = server_reasons(BROKEN_LOG)
    assert reasons == {
        "broken": "failed to read text proto from /composer-smoke/models/broken/config.pbtxt",
        "raises": "Internal: RuntimeError: cannot load",
    }


def test_a_broken_config_stops_the_wait_with_the_servers_reason(tmp_path, monkeypatch, no_sleep):
    """The index lists the model with no state; the log says why: no waiting for the deadline."""
    repo = repository(tmp_path, broken=None, raises=None)
    index = [{"name": "broken"},
             {"name": "raises", "state": "UNAVAILABLE", "reason": "Internal: RuntimeError: cannot load\n\nAt: ..."}]
    server = Server({}, index_states=[index])
    report = run(monkeypatch, server, engine_for(log=BROKEN_LOG), model_repository=repo, samples=False,
                 timeout=10_000)
    broken, raises = rows_of(report, "broken")[0], rows_of(report, "raises")[0]
    assert broken.status == "FAIL" and broken.detail == (
        "not loaded: failed to read text proto from /composer-smoke/models/broken/config.pbtxt")
    assert raises.detail == "not loaded: Internal: RuntimeError: cannot load" and raises.ready == "UNAVAILABLE"
    assert server.index_calls == 1 and no_sleep == []  # no polling at all


def test_a_loading_model_is_waited_for_until_the_server_says_it_failed(tmp_path, monkeypatch, no_sleep):
    repo = repository(tmp_path, slow=None)
    loading = [{"name": "slow", "state": "LOADING"}]
    failed = [{"name": "slow", "state": "UNAVAILABLE", "reason": "out of memory"}]
    server = Server({}, index_states=[loading, loading, failed])
    report = run(monkeypatch, server, engine_for(), model_repository=repo, samples=False, timeout=10_000)
    assert rows_of(report, "slow")[0].detail == "not loaded: out of memory"
    assert server.index_calls == 3 and len(no_sleep) == 2


def test_samples_are_served_beside_the_users_models_unless_no_samples(tmp_path, monkeypatch):
    repo = repository(tmp_path, affine=None)
    server = Server({"affine": {"config": AFFINE_CONFIG, "answer": times_three},
                     "torchscript_affine": {"config": AFFINE_CONFIG,
                                            "answer": lambda i: [TensorData("output__0", "FP32", (4,),
                                                                            (-0.5, 2.5, -6.5, 1.0))]}})
    engine = engine_for()
    report = run(monkeypatch, server, engine, model_repository=repo)
    command = engine.starts[0]["command"]
    assert "--model-repository=/composer-smoke/models" in command
    assert "--model-repository=/composer-smoke/samples" in command
    assert set(engine.starts[0]["files"]) == {"/composer-smoke/models/affine",
                                              "/composer-smoke/samples/torchscript_affine"}
    assert [r.status for r in report.rows if r.subject == "pytorch"] == ["PASS"]

    engine = engine_for()
    run(monkeypatch, server, engine, model_repository=repo, samples=False)
    assert set(engine.starts[0]["files"]) == {"/composer-smoke/models/affine"}


def test_no_samples_and_no_models_is_refused_before_a_container_starts(monkeypatch):
    engine = engine_for()
    with pytest.raises(UsageError, match="--no-samples leaves nothing to serve"):
        run(monkeypatch, Server({}), engine, samples=False)
    assert not engine.starts


def test_baked_models_are_served_from_the_image_with_their_cases(monkeypatch):
    cases = json.dumps({"cases": [case([1, 2, 3, 4], [3, 6, 9, 12])]})
    engine = engine_for(record={"baked_models": "/models"},
                        image_files={"affine": {"smoke_cases.json": cases}, "torchscript_affine": {}})
    server = Server({"affine": {"config": AFFINE_CONFIG, "answer": times_three},
                     "torchscript_affine": {"config": AFFINE_CONFIG, "answer": times_three}})
    report = run(monkeypatch, server, engine)
    start = engine.starts[0]
    assert "--model-repository=/models" in start["command"]
    assert not any(path.startswith("/models") for path in start["files"] or {})  # nothing put in /models
    assert rows_of(report, "affine")[0].cases == "1/1"
    # The image's own torchscript_affine takes the sample's place (a note says so).
    assert rows_of(report, "torchscript_affine")[0].request == "default: input__0 FP32 [4]"
    assert not any(path.endswith("torchscript_affine") for path in start["files"] or {})
