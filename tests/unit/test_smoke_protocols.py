"""The smoke test speaks each model's protocol: a decoupled model is streamed and a sequence model
sent a sequence over gRPC, every other model answers over HTTP as before, and no gRPC channel is
opened when no model needs one. Engine, HTTP server and gRPC transport are faked at their boundary."""

from __future__ import annotations

import json

import pytest

from composer.cli.output import smoke_table
from composer.config.cases import TensorData
from composer.verify import smoke
from composer.verify.protocols import RESPONSE_TIMEOUT, StreamAnswer
from composer.verify.smoke import smoke_test
from composer.verify.smoke_plan import SmokePlan
from tests.unit.test_smoke_models import AFFINE_CONFIG, Server, engine_for, repository, rows_of, times_three

COUNTER_CONFIG = {
    "name": "counter", "max_batch_size": 0, "model_transaction_policy": {"decoupled": True},
    "input": [{"name": "COUNT", "data_type": "TYPE_INT32", "dims": [1]}],
    "output": [{"name": "OUT", "data_type": "TYPE_INT32", "dims": [1]}],
}
SUM_CONFIG = {
    "name": "running_sum", "max_batch_size": 0,
    "sequence_batching": {"direct": {}, "control_input": [
        {"name": "START", "control": [{"kind": "CONTROL_SEQUENCE_START", "int32_false_true": [0, 1]}]}]},
    "input": [{"name": "X", "data_type": "TYPE_INT32", "dims": [1]}],
    "output": [{"name": "SUM", "data_type": "TYPE_INT32", "dims": [1]}],
}


class FakeGRPC:
    """The gRPC transport: counter streams 3 responses; running_sum keeps a sum per correlation ID."""

    made: list["FakeGRPC"] = []

    def __init__(self, url):
        self.url = url
        self.calls: list[tuple] = []
        self.closed = False
        self.sums: dict = {}
        FakeGRPC.made.append(self)

    streams: dict = {}  # model -> the StreamAnswer it gives (else counter's three responses)

    def stream(self, model, inputs, sequence=None, timeout=RESPONSE_TIMEOUT):
        self.calls.append(("stream", model, sequence))
        if model in self.streams:
            return self.streams[model]
        return StreamAnswer(tuple({"OUT": TensorData("OUT", "INT32", (1,), (i,))} for i in range(3)), final=True)

    def infer(self, model, inputs, sequence=None, timeout=RESPONSE_TIMEOUT):
        self.calls.append(("infer", model, sequence))
        (x,) = inputs
        total = x.data[0] + (0 if sequence.start else self.sums[sequence.sequence_id])
        self.sums[sequence.sequence_id] = total
        return {"SUM": TensorData("SUM", "INT32", (1,), (total,))}

    def close(self):
        self.closed = True


def run(monkeypatch, server, tmp_path, **models):
    FakeGRPC.made = []
    monkeypatch.setattr(smoke, "TritonHTTP", server)
    monkeypatch.setattr(smoke, "TritonGRPC", FakeGRPC)
    engine = engine_for()
    report = smoke_test(engine, "img", SmokePlan(backends=("pytorch",), model_repository=repository(tmp_path, **models),
                                                 samples=False))
    return report, engine, FakeGRPC.made[0]


def test_a_decoupled_model_is_streamed_and_a_sequence_model_sent_a_sequence(tmp_path, monkeypatch):
    server = Server({"counter": {"config": COUNTER_CONFIG, "answer": AssertionError("no HTTP for a stream")},
                     "running_sum": {"config": SUM_CONFIG, "answer": AssertionError("no HTTP for a sequence")},
                     "affine": {"config": AFFINE_CONFIG, "answer": times_three}})
    report, engine, grpc = run(monkeypatch, server, tmp_path, counter=None, running_sum=None, affine=None)
    assert report.passed, [(r.model, r.detail) for r in report.failures()]
    counter, summed, affine = rows_of(report, "counter")[0], rows_of(report, "running_sum")[0], rows_of(report, "affine")[0]
    assert (counter.request, summed.request) == ("stream: COUNT INT32 [1]", "sequence (2 steps): X INT32 [1]")
    assert affine.request == "default: input__0 FP32 [4]"  # a plain model: over HTTP, as before
    assert [name for name, _ in server.requests] == ["affine"]
    assert [c[:2] for c in grpc.calls] == [("stream", "counter"), ("infer", "running_sum"), ("infer", "running_sum")]
    assert grpc.url == "http://127.0.0.1:48001" and grpc.closed  # the published gRPC port; closed when done
    assert engine.starts[0]["ports"] == [8000, 8001]
    payload = {r["model"]: r for r in report.to_dict()["rows"]}
    assert payload["counter"]["request"] == "stream: COUNT INT32 [1]"  # --json carries the same
    table = {line.split()[1]: line for line in smoke_table(report).splitlines()[1:]}
    assert "  stream: COUNT INT32 [1]  " in table["counter"]
    assert "  sequence (2 steps): X INT32 [1]  " in table["running_sum"]


def test_sequence_cases_from_the_model_folder(tmp_path, monkeypatch):
    steps = [{"inputs": [{"name": "X", "datatype": "INT32", "shape": [1], "data": [x]}],
              "expected": [{"name": "SUM", "datatype": "INT32", "shape": [1], "data": [total]}]}
             for x, total in ((3, 3), (4, 7), (1, 9))]
    server = Server({"running_sum": {"config": SUM_CONFIG, "answer": AssertionError("no HTTP")}})
    report, _, grpc = run(monkeypatch, server, tmp_path, running_sum=[{"name": "adds up", "steps": steps}])
    (row,) = rows_of(report, "running_sum")
    assert (row.status, row.request, row.cases) == ("FAIL", "sequence (3 steps), 1 case", "0/1")
    assert row.detail == "wrong answer: case adds up: step 3: SUM[0] is 8, expected 9"
    assert [c[2].sequence_id for c in grpc.calls] == [1, 1, 1]


def test_no_model_needs_grpc_so_no_channel_is_used(tmp_path, monkeypatch):
    server = Server({"affine": {"config": AFFINE_CONFIG, "answer": times_three}})
    report, _, grpc = run(monkeypatch, server, tmp_path, affine=None)
    assert report.passed and grpc.calls == []


def test_the_real_transport_opens_no_channel_until_asked():
    from composer.verify.grpc_client import TritonGRPC

    transport = TritonGRPC("http://127.0.0.1:48001")
    assert transport.address == "127.0.0.1:48001" and not transport.opened
    transport.close()  # closing what was never opened is fine
    assert json.dumps(transport.address)


def test_a_failed_smoke_tests_rows_are_in_the_json_result():
    """--json of a build whose smoke test failed carries the rows (requests included), as --junit does."""
    from composer.core.errors import SmokeTestFailed
    from composer.pipeline import Outcome
    from composer.config.types import CompositionSpec
    from composer.verify.smoke_plan import SmokeReport, SmokeRow

    report = SmokeReport("img", (SmokeRow("model", "FAIL", "no final flag within 30 s", "endless", request="stream"),))
    payload = Outcome(CompositionSpec(), error=SmokeTestFailed("smoke test failed (model/endless)", report)).to_dict()
    assert payload["error"] == "smoke test failed (model/endless)"
    assert payload["smoke_test"]["rows"][0]["request"] == "stream" and payload["smoke_test"]["passed"] is False


def text(*pieces):
    return tuple({"text_output": TensorData("text_output", "BYTES", (1,), (p,))} for p in pieces)


VLLM_CONFIG = {"name": "vllm_tiny", "max_batch_size": 0, "model_transaction_policy": {"decoupled": True},
               "input": [{"name": "text_input", "data_type": "TYPE_STRING", "dims": [1]}],
               "output": [{"name": "text_output", "data_type": "TYPE_STRING", "dims": [-1]}]}


def vllm_sample_row(monkeypatch, answer: StreamAnswer):
    """The vllm sample, READY (as on a GPU host), streamed: what its row says."""
    FakeGRPC.made = []
    monkeypatch.setattr(FakeGRPC, "streams", {"vllm_tiny": answer})
    monkeypatch.setattr(smoke, "TritonHTTP", Server({"vllm_tiny": {"config": VLLM_CONFIG,
                                                                   "answer": AssertionError("HTTP 501")}}))
    monkeypatch.setattr(smoke, "TritonGRPC", FakeGRPC)
    report = smoke_test(engine_for(backends=("vllm",)), "img", SmokePlan(backends=("vllm",)))
    (row,) = [r for r in report.rows if r.subject == "vllm"]
    return row, FakeGRPC.made[0]


def test_the_vllm_sample_is_streamed_and_its_text_checked(monkeypatch):
    row, grpc = vllm_sample_row(monkeypatch, StreamAnswer(text("Hello", " wor", "ld"), final=True))
    assert (row.status, row.request, row.cases) == ("PASS", "stream, sample", "1/1"), row.detail
    ((how, model, _),) = grpc.calls
    assert (how, model) == ("stream", "vllm_tiny")


@pytest.mark.parametrize("answer, detail", [
    (StreamAnswer(text("Goodbye"), final=True),
     "vllm_tiny: text_output[0] is 'Goodbye', expected it to start with 'Hello'"),
    (StreamAnswer(text("Hello"), final=False), "vllm_tiny: stream: no final flag within 30 s (1 response before)"),
    (StreamAnswer((), final=True), "vllm_tiny: empty stream: the final flag came with no response holding outputs"),
])
def test_a_vllm_sample_that_streams_wrong_fails_with_one_line(monkeypatch, answer, detail):
    row, _ = vllm_sample_row(monkeypatch, answer)
    assert (row.status, row.detail) == ("FAIL", detail)
