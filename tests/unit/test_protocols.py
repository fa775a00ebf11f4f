"""The stream and sequence readers on exchanges recorded from a real Triton 2.50 server (the
24.09 stand-in, serving tests/integration/models/protocols; data/protocols/record.py made them):
responses replayed as the server sent them, through tritonclient's own InferResult, with a
fake clock, so a stream that never ends is read to its deadline in no time."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from tritonclient.grpc import InferResult, service_pb2
from tritonclient.utils import InferenceServerException

from composer.config.cases import TensorData, parse_cases
from composer.verify.grpc_client import event_of, infer_input, outputs_of, sequence_arguments
from composer.verify.protocols import (
    RESPONSE_TIMEOUT, Event, ModelProtocol, SequenceFlags, SequenceIds, StreamAnswer, default_verdict, joined,
    model_verdict, needs_protocol, protocol_of, read_stream, request_label,
)
from composer.verify.triton_client import InferenceError

RECORDED = json.loads((Path(__file__).parent / "data" / "protocols" / "exchanges.json").read_text())
CONFIGS = RECORDED["configs"]


def result_of(entry) -> InferResult:
    return InferResult(service_pb2.ModelInferResponse.FromString(base64.b64decode(entry["response"])))


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def replay(entries, clock: Clock):
    """receive(wait) over recorded stream entries: each comes at its time; silence lets `wait` pass."""
    pending = list(entries)

    def receive(wait: float):
        if not pending or "silence" in pending[0]:
            clock.now += wait  # nothing more came: the whole wait passes
            return None
        entry = pending.pop(0)
        clock.now = max(clock.now, entry["after"])
        if "error" in entry:
            return event_of(None, InferenceServerException(entry["error"]))
        return event_of(result_of(entry), None)

    return receive


def read(name, timeout=RESPONSE_TIMEOUT) -> tuple[StreamAnswer, Clock]:
    clock = Clock()
    return read_stream(replay(RECORDED["streams"][name], clock), timeout, clock), clock


# -- streams -------------------------------------------------------------------------------


def test_a_stream_is_read_to_its_final_flag():
    answer, clock = read("counter 3")
    assert answer.final and answer.problem() is None and clock.now < 1
    assert [r["OUT"].data for r in answer.responses] == [(0,), (1,), (2,)]  # the empty final response is not one
    assert answer.responses[1]["TEXT"] == TensorData("TEXT", "BYTES", (1,), ("token 1",))  # strings, as over HTTP
    assert answer.responses[0]["OUT"].datatype == "INT32" and answer.responses[0]["OUT"].shape == (1,)


def test_a_stream_that_never_sends_its_final_flag_ends_at_the_deadline():
    answer, clock = read("endless")
    assert not answer.final and len(answer.responses) == 1
    assert clock.now == pytest.approx(RESPONSE_TIMEOUT)  # bounded: read no longer than the deadline
    assert answer.problem() == "no final flag within 30 s (1 response before)"


def test_a_streams_error_ends_it_with_the_servers_words():
    answer, _ = read("counter bad input")
    assert answer.problem() == "the stream ended with an error: unexpected inference input 'NOPE' for model 'counter'"


class Recorded:
    """A transport answering with the recorded exchanges: streams by name, one after another."""

    def __init__(self, streams=(), steps=()):
        self.streams = list(streams)
        self.steps = list(steps)
        self.sent: list[tuple[str, tuple, SequenceFlags | None, str]] = []

    def stream(self, model, inputs, sequence=None, timeout=RESPONSE_TIMEOUT):
        self.sent.append((model, tuple(inputs), sequence, "stream"))
        clock = Clock()
        return read_stream(replay(RECORDED["streams"][self.streams.pop(0)], clock), timeout, clock)

    def infer(self, model, inputs, sequence=None, timeout=RESPONSE_TIMEOUT):
        self.sent.append((model, tuple(inputs), sequence, "infer"))
        recorded, number = self.steps.pop(0)
        entry = RECORDED["sequences"][recorded][number]
        if "error" in entry:
            raise InferenceError(f"gRPC ModelInfer {model}: {entry['error']}")
        return outputs_of(result_of(entry))


def verdict(name, transport, cases=()):
    protocol = protocol_of(name, CONFIGS.__getitem__)
    return model_verdict(transport, name, CONFIGS[name], protocol, list(cases), SequenceIds())


def test_the_default_request_streams_and_passes_with_every_output():
    transport = Recorded(streams=["counter 3"])
    result = verdict("counter", transport)
    assert (result.status, result.request) == ("PASS", "stream: COUNT INT32 [1]")
    assert result.detail == "streamed 3 responses to the final flag, holding every configured output"
    ((model, (count,), sequence, how),) = transport.sent
    assert (model, count.data, sequence, how) == ("counter", (0,), None, "stream")


@pytest.mark.parametrize("name, recorded, detail", [
    ("endless", "endless", "default request: stream: no final flag within 30 s (1 response before)"),
    ("empty_stream", "empty_stream",
     "default request: stream: empty stream: the final flag came with no response holding outputs"),
    ("wrong_type_stream", "wrong_type_stream", "default request: stream: no response holds every configured "
                                               "output (response 1: OUT has datatype INT64, the configuration says INT32)"),
])
def test_a_broken_stream_fails_with_one_line(name, recorded, detail):
    result = verdict(name, Recorded(streams=[recorded]))
    assert (result.status, result.detail, result.request) == ("FAIL", detail, "stream: COUNT INT32 [1]")


def test_an_ensemble_with_a_decoupled_step_is_a_stream():
    assert protocol_of("counter_ensemble", CONFIGS.__getitem__) == ModelProtocol(stream=True)
    result = verdict("counter_ensemble", Recorded(streams=["counter_ensemble 2"]))
    assert result.status == "PASS" and result.detail.startswith("streamed 2 responses")


def test_stream_cases_in_order_and_by_count():
    (ordered, counted) = parse_cases([
        {"model": "counter", "name": "in order", "inputs": [{"name": "COUNT", "datatype": "INT32", "shape": [1],
                                                              "data": [3]}],
         "responses": [[{"name": "OUT", "datatype": "INT32", "shape": [1], "data": [i]},
                        {"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": [f"token {i}"]}] for i in range(3)]},
        {"model": "counter", "name": "four", "inputs": [{"name": "COUNT", "datatype": "INT32", "shape": [1],
                                                          "data": [3]}], "response_count": 4}], "cases.yaml")
    result = verdict("counter", Recorded(streams=["counter 3", "counter 3"]), [ordered, counted])
    assert (result.status, result.cases, result.request) == ("FAIL", "1/2", "stream, 2 cases")
    assert result.detail == "wrong answer: case four: 3 responses with outputs, expected 4"
    assert verdict("counter", Recorded(streams=["counter 3"]), [ordered]).status == "PASS"


# -- sequences -----------------------------------------------------------------------------


def test_a_sequence_models_configuration_is_read():
    running = protocol_of("running_sum", CONFIGS.__getitem__).sequencing
    assert (running.strategy, running.id_type, running.string_id) == ("direct", "TYPE_UINT64", False)
    assert running.controls == ("CONTROL_SEQUENCE_START", "CONTROL_SEQUENCE_END", "CONTROL_SEQUENCE_CORRID")
    assert running.filled_inputs == {"START", "END", "CORRID"}
    assert protocol_of("running_sum_batched", CONFIGS.__getitem__).sequencing.strategy == "oldest"
    assert protocol_of("string_corrid", CONFIGS.__getitem__).sequencing.string_id
    both = protocol_of("streamed_sum", CONFIGS.__getitem__)
    assert both.stream and both.sequencing.model == "streamed_sum"
    # An ensemble with a sequence step has no sequence_batching of its own: its step's is used.
    assert "sequence_batching" not in CONFIGS["sum_ensemble"]
    assert protocol_of("sum_ensemble", CONFIGS.__getitem__).sequencing.model == "running_sum"


def test_the_default_sequence_is_two_steps_with_one_id_start_and_end():
    transport = Recorded(steps=[("running_sum", 0), ("running_sum", 1)])
    result = verdict("running_sum", transport)
    assert (result.status, result.request) == ("PASS", "sequence (2 steps): X INT32 [1]")
    assert result.detail == "2 steps in sequence 1 (START to END), each answered with every configured output"
    flags = [sent[2] for sent in transport.sent]
    assert flags == [SequenceFlags(1, True, False), SequenceFlags(1, False, True)]
    assert [sent[1][0].data for sent in transport.sent] == [(0,), (0,)]  # zeros; START, END, CORRID not sent


def test_a_default_sequence_step_refused_by_the_server_fails_naming_the_step():
    result = verdict("running_sum", Recorded(steps=[("running_sum", 0), ("running_sum unrelated", 1)]))
    assert result.status == "FAIL"
    assert result.detail == ("default request: sequence 1: step 2 of 2: gRPC ModelInfer running_sum: inference request "
                             "for sequence 11 to model 'running_sum' must specify the START flag on the first request "
                             "of the sequence")


SUM_CASE = {"model": "running_sum", "name": "adds up", "steps": [
    {"inputs": [{"name": "X", "datatype": "INT32", "shape": [1], "data": [3]}],
     "expected": [{"name": "SUM", "datatype": "INT32", "shape": [1], "data": [3]}]},
    {"inputs": [{"name": "X", "datatype": "INT32", "shape": [1], "data": [4]}],
     "expected": [{"name": "SUM", "datatype": "INT32", "shape": [1], "data": [7]}]}]}


def test_sequence_steps_are_checked_each_a_running_sum_proves_the_state():
    (case,) = parse_cases([SUM_CASE], "cases.yaml")
    result = verdict("running_sum", Recorded(steps=[("running_sum", 0), ("running_sum", 1)]), [case])
    assert (result.status, result.request, result.cases) == ("PASS", "sequence (2 steps), 1 case", "1/1")
    # Had the two been sent apart (two sequences), the second answer would have been 4, not 7.
    unrelated = verdict("running_sum", Recorded(steps=[("running_sum unrelated", 0), ("running_sum", 0)]), [case])
    assert unrelated.detail == "wrong answer: case adds up: step 2: SUM[0] is 3, expected 7"


def test_an_ensemble_with_a_sequence_step_is_sent_a_sequence():
    (case,) = parse_cases([{**SUM_CASE, "model": "sum_ensemble"}], "cases.yaml")
    transport = Recorded(steps=[("sum_ensemble", 0), ("sum_ensemble", 1)])
    result = verdict("sum_ensemble", transport, [case])
    assert result.status == "PASS", result.detail
    assert [s[2].start for s in transport.sent] == [True, False] and [s[2].end for s in transport.sent] == [False, True]


def test_a_decoupled_sequence_streams_each_step():
    transport = Recorded(streams=["streamed_sum 3", "streamed_sum 4"])
    result = verdict("streamed_sum", transport)
    assert (result.status, result.request) == ("PASS", "stream, sequence (2 steps): X INT32 [1]")
    assert result.detail == ("2 steps in sequence 1 (START to END), each streamed 2/2 responses to the final flag, "
                             "holding every configured output")
    assert [s[3] for s in transport.sent] == ["stream", "stream"]


def test_string_correlation_ids_where_the_config_asks_for_them():
    transport = Recorded(steps=[("string_corrid string id", 0), ("string_corrid string id", 0)])
    result = verdict("string_corrid", transport)
    assert [s[2].sequence_id for s in transport.sent] == ["composer-smoke-1", "composer-smoke-1"]
    # Triton 2.50 itself refuses every request of such a model (the recorded answer): the row says so.
    assert result.status == "FAIL" and "unexpected number of string elements 2 for inference input 'CORRID'" in result.detail
    (numbered,) = parse_cases([{"model": "string_corrid", "name": "numbered", "sequence_id": 5,
                                "inputs": [{"name": "X", "datatype": "INT32", "shape": [1], "data": [1]}],
                                "expected": [{"name": "SUM", "datatype": "INT32", "shape": [1]}]}], "c.yaml")
    refused = verdict("string_corrid", Recorded(), [numbered])
    assert refused.detail == ("wrong answer: case numbered: sequence_id 5 is a number, and string_corrid's "
                              "CONTROL_SEQUENCE_CORRID is TYPE_STRING: give a string")


def test_a_plain_case_to_a_sequence_model_is_a_one_step_sequence():
    (plain,) = parse_cases([{"model": "running_sum", "name": "one", "inputs": SUM_CASE["steps"][0]["inputs"],
                             "expected": SUM_CASE["steps"][0]["expected"]}], "c.yaml")
    transport = Recorded(steps=[("running_sum", 0)])
    result = verdict("running_sum", transport, [plain])
    assert (result.status, result.request) == ("PASS", "sequence (1 step), 1 case")
    assert transport.sent[0][2] == SequenceFlags(1, True, True)


def test_which_models_need_the_protocols():
    (plain_case,) = parse_cases([{"model": "m", "inputs": SUM_CASE["steps"][0]["inputs"],
                                  "expected": SUM_CASE["steps"][0]["expected"]}], "c.yaml")
    (steps_case,) = parse_cases([{**SUM_CASE, "model": "m"}], "c.yaml")
    assert not needs_protocol(ModelProtocol(), [plain_case])
    assert needs_protocol(ModelProtocol(), [steps_case])
    assert needs_protocol(ModelProtocol(stream=True), [])
    assert request_label(ModelProtocol(stream=True), 1, 3) == "stream, 3 cases"


def test_a_default_request_leaves_out_what_the_server_fills():
    """The completed configuration of an ONNX model with implicit state lists the state tensors as
    inputs and outputs (seen on the stand-in): they are the server's to fill, never sent or required."""
    config = {"name": "acc", "max_batch_size": 0,
              "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [1]},
                        {"name": "SUM_IN", "data_type": "TYPE_FP32", "dims": [1]},
                        {"name": "START", "data_type": "TYPE_INT32", "dims": [1]}],
              "output": [{"name": "SUM", "data_type": "TYPE_FP32", "dims": [1]},
                         {"name": "SUM_OUT", "data_type": "TYPE_FP32", "dims": [1]}],
              "sequence_batching": {"oldest": {"max_candidate_sequences": 2},
                                    "control_input": [{"name": "START", "control": [
                                        {"kind": "CONTROL_SEQUENCE_START", "int32_false_true": [0, 1]}]}],
                                    "state": [{"input_name": "SUM_IN", "output_name": "SUM_OUT",
                                               "data_type": "TYPE_FP32", "dims": [1]}]}}

    class Summing:
        sent = []

        def infer(self, model, inputs, sequence=None, timeout=RESPONSE_TIMEOUT):
            self.sent.append([t.name for t in inputs])
            return {"SUM": TensorData("SUM", "FP32", (1,), (0.0,))}

    protocol = protocol_of("acc", {"acc": config}.__getitem__)
    result = default_verdict(Summing(), "acc", config, protocol, SequenceIds())
    assert result.status == "PASS", result.detail
    assert Summing.sent == [["X"], ["X"]]


# -- the gRPC client's conversions -----------------------------------------------------------


def test_tensors_go_out_as_tritonclient_inputs():
    text = infer_input(TensorData("T", "BYTES", (2,), ("héllo", "x")))
    assert text.datatype() == "BYTES" and text.shape() == [2]
    numbers = infer_input(TensorData("N", "FP32", (1, 2), (1.5, 2.0)))
    assert numbers.shape() == [1, 2] and numbers.datatype() == "FP32"
    flag = infer_input(TensorData("B", "BOOL", (1,), (True,)))
    assert flag.datatype() == "BOOL"
    assert sequence_arguments(SequenceFlags("s", True, False)) == {
        "sequence_id": "s", "sequence_start": True, "sequence_end": False}
    assert sequence_arguments(None) == {}


def test_an_event_without_the_final_parameter_is_final():
    response = service_pb2.ModelInferResponse(model_name="m", id="1")
    assert event_of(InferResult(response), None) == Event(outputs={}, final=True)


def test_a_streams_outputs_joined_as_a_streamed_sample_is_checked():
    answer, _ = read("counter 3")
    outputs = joined(answer.responses)
    assert outputs["OUT"] == TensorData("OUT", "INT32", (3,), (0, 1, 2))
    assert outputs["TEXT"] == TensorData("TEXT", "BYTES", (1,), ("token 0token 1token 2",))  # one text


def test_without_tritonclient_a_model_that_needs_grpc_fails_saying_so(monkeypatch):
    import builtins

    from composer.verify.grpc_client import TritonGRPC
    from composer.verify.protocols import Exchanges

    real_import = builtins.__import__

    def no_tritonclient(name, *args, **kwargs):
        if name.startswith("tritonclient"):
            raise ImportError("No module named 'tritonclient'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tritonclient)
    result = Exchanges(TritonGRPC("127.0.0.1:1")).verdict(CONFIGS.__getitem__, "counter", [])
    assert result.status == "FAIL" and "pip install 'tritonclient[grpc]'" in result.detail
