"""The smoke test's exchanges with models that do not answer one request with one response.

A decoupled model (`model_transaction_policy { decoupled: true }`: token-streaming LLM wrappers,
NGC's vLLM backend) refuses HTTP inference (501); its answer is a stream of responses ending with
a final flag, read here over gRPC ModelStreamInfer. A sequence model (`sequence_batching`) keeps a
state per correlation ID; a request without one is refused (400), so it gets a sequence: one ID,
START on the first step, END on the last. The server fills the control inputs (START, END, READY,
CORRID) and the implicit state itself from those flags; the client never sends them.

An ensemble behaves as its steps do: Triton 2.50 marks an ensemble with a decoupled step
decoupled in the configuration it serves, but gives an ensemble with a sequence step no
sequence_batching while still refusing it a request without a correlation ID; both are read here
from the steps' own configurations.

Every read has a deadline (RESPONSE_TIMEOUT per request): a model that never sends its final flag
fails in bounded time. The reading and checking is pure (unit-tested on recorded exchanges); the
transport (composer.verify.grpc_client) only sends and delivers events.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Protocol, Sequence

from composer.core.errors import ComposerError
from composer.config.cases import (
    Case, CaseError, ProtocolCase, Step, TensorData, check_against_config, default_request, describe_request,
)

RESPONSE_TIMEOUT = 30.0  # seconds one request may take to its answer (a stream: to its final flag)
DEFAULT_STEPS = 2  # a default sequence: the least that proves a second request is taken as part of the first's
ENSEMBLE_DEPTH = 8  # how deep ensembles of ensembles are followed

CONTROL_KINDS = ("CONTROL_SEQUENCE_START", "CONTROL_SEQUENCE_END", "CONTROL_SEQUENCE_READY", "CONTROL_SEQUENCE_CORRID")


# -- what a model's configuration asks of a client ------------------------------------------


@dataclass(frozen=True)
class Sequencing:
    """What a model's sequence_batching asks of a client: one correlation ID per sequence (a string
    where CONTROL_SEQUENCE_CORRID is TYPE_STRING), START and END flags; the tensors the server fills
    itself (control inputs, implicit state) are never sent, even where the served configuration
    lists them (the completed configuration of an ONNX model does)."""

    model: str  # the model whose sequence_batching this is (the model itself, or an ensemble's step)
    strategy: str = "direct"  # direct or oldest
    controls: tuple[str, ...] = ()  # the control kinds the server fills
    id_type: str | None = None  # CONTROL_SEQUENCE_CORRID's data type, when the model takes one
    filled_inputs: frozenset[str] = frozenset()  # control and state inputs: the server's to fill
    state_outputs: frozenset[str] = frozenset()

    @property
    def string_id(self) -> bool:
        return self.id_type == "TYPE_STRING"

    def id_problem(self, sequence_id: int | str) -> str | None:
        """Why `sequence_id` does not fit the model's CORRID control (None: it fits)."""
        if self.id_type is None:
            return None
        if self.string_id and not isinstance(sequence_id, str):
            return (f"sequence_id {sequence_id} is a number, and {self.model}'s CONTROL_SEQUENCE_CORRID is "
                    "TYPE_STRING: give a string")
        if not self.string_id and isinstance(sequence_id, str):
            return (f"sequence_id {sequence_id!r} is a string, and {self.model}'s CONTROL_SEQUENCE_CORRID is "
                    f"{self.id_type}: give a number")
        return None


def sequencing_of(name: str, config: Mapping) -> Sequencing | None:
    """The sequencing of a model's own configuration (None: it has no sequence_batching)."""
    batching = config.get("sequence_batching")
    if not isinstance(batching, Mapping):
        return None
    strategy = "oldest" if batching.get("oldest") is not None else "direct"
    controls, filled, id_type = [], set(), None
    for entry in batching.get("control_input") or []:
        filled.add(str(entry.get("name", "")))
        for control in entry.get("control") or []:
            kind = str(control.get("kind", ""))
            controls.append(kind)
            if kind == "CONTROL_SEQUENCE_CORRID":
                id_type = str(control.get("data_type") or "TYPE_UINT64")
    states = batching.get("state") or []
    filled |= {str(s.get("input_name", "")) for s in states}
    return Sequencing(name, strategy, tuple(controls), id_type, frozenset(filled - {""}),
                      frozenset(str(s.get("output_name", "")) for s in states) - {""})


@dataclass(frozen=True)
class ModelProtocol:
    """How a model is spoken to: over a stream (decoupled), in sequences, both, or neither."""

    stream: bool = False
    sequencing: Sequencing | None = None

    @property
    def plain(self) -> bool:
        return not self.stream and self.sequencing is None


def protocol_of(name: str, config_of: Callable[[str], Mapping], config: Mapping | None = None,
                _depth: int = 0) -> ModelProtocol:
    """The protocol of model `name` (its configuration as served, `config_of` for an ensemble's steps)."""
    config = config_of(name) if config is None else config
    stream = bool((config.get("model_transaction_policy") or {}).get("decoupled"))
    sequencing = sequencing_of(name, config)
    steps = (config.get("ensemble_scheduling") or {}).get("step") or []
    if steps and _depth < ENSEMBLE_DEPTH:
        for step in steps:
            inner = protocol_of(str(step.get("model_name", "")), config_of, _depth=_depth + 1)
            stream = stream or inner.stream
            if sequencing is None or (inner.sequencing is not None and inner.sequencing.string_id):
                sequencing = inner.sequencing or sequencing
    return ModelProtocol(stream, sequencing)


def _served(config: Mapping, sequencing: Sequencing | None) -> Mapping:
    """The configuration without the tensors the server fills (control inputs, implicit state)."""
    if sequencing is None:
        return config
    return {**config,
            "input": [i for i in config.get("input") or [] if i.get("name") not in sequencing.filled_inputs],
            "output": [o for o in config.get("output") or [] if o.get("name") not in sequencing.state_outputs]}


# -- reading a stream --------------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """What a stream delivered: a response (its outputs, and whether it carries the final flag) or an error."""

    outputs: Mapping[str, TensorData] | None = None
    final: bool = False
    error: str | None = None


@dataclass(frozen=True)
class StreamAnswer:
    """Every response a stream gave up to the final flag, the error that ended it, or the deadline."""

    responses: tuple[Mapping[str, TensorData], ...]  # those that carried outputs, in order
    final: bool
    error: str | None = None
    timeout: float = RESPONSE_TIMEOUT

    def problem(self) -> str | None:
        """One line on why the stream did not end well (None: the final flag came)."""
        if self.error is not None:
            before = f" after {_count(len(self.responses))}" if self.responses else ""
            return f"the stream ended with an error{before}: {self.error}"
        if not self.final:
            return f"no final flag within {self.timeout:g} s ({_count(len(self.responses))} before)"
        return None


def _count(n: int) -> str:
    return f"{n} response{'s' if n != 1 else ''}"


def read_stream(receive: Callable[[float], Event | None], timeout: float = RESPONSE_TIMEOUT,
                clock: Callable[[], float] = time.monotonic) -> StreamAnswer:
    """Read events until the final flag, an error or `timeout` seconds; `receive(wait)` gives the next
    event or None when `wait` seconds passed without one."""
    deadline = clock() + timeout
    responses: list[Mapping[str, TensorData]] = []
    while True:
        left = deadline - clock()
        if left <= 0:
            return StreamAnswer(tuple(responses), final=False, timeout=timeout)
        event = receive(left)
        if event is None:
            continue  # the wait ran out: the loop checks the deadline
        if event.error is not None:
            return StreamAnswer(tuple(responses), final=False, error=event.error, timeout=timeout)
        if event.outputs:
            responses.append(dict(event.outputs))
        if event.final:
            return StreamAnswer(tuple(responses), final=True, timeout=timeout)


def joined(responses: Sequence[Mapping[str, TensorData]]) -> dict[str, TensorData]:
    """Each output's data across the responses, in order: a text streamer's pieces (BYTES) as one
    text, other values one after another in a flat tensor."""
    names = list(dict.fromkeys(name for response in responses for name in response))
    outputs = {}
    for name in names:
        parts = [r[name] for r in responses if name in r]
        data = tuple(v for part in parts for v in part.data)
        if parts[0].datatype == "BYTES":
            data = ("".join(str(v) for v in data),)
        outputs[name] = TensorData(name, parts[0].datatype, (len(data),), data)
    return outputs


# -- sending -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SequenceFlags:
    """A request's place in a sequence."""

    sequence_id: int | str
    start: bool
    end: bool


class Transport(Protocol):
    """What sends requests to the server (composer.verify.grpc_client.TritonGRPC; fakes in tests)."""

    def infer(self, model: str, inputs: Sequence[TensorData], sequence: SequenceFlags | None = None,
              timeout: float = RESPONSE_TIMEOUT) -> dict[str, TensorData]: ...

    def stream(self, model: str, inputs: Sequence[TensorData], sequence: SequenceFlags | None = None,
               timeout: float = RESPONSE_TIMEOUT) -> StreamAnswer: ...


@dataclass(frozen=True)
class Answer:
    """The responses with outputs to one request, or why there are none; `stopped`: the deadline
    passed, so a sequence sends no more steps."""

    responses: tuple[Mapping[str, TensorData], ...] = ()
    problem: str | None = None
    stopped: bool = False


def exchange(transport: Transport, model: str, stream: bool, inputs: Sequence[TensorData],
             sequence: SequenceFlags | None = None) -> Answer:
    """One request, over a stream for a decoupled model, else as one inference."""
    if stream:
        try:
            answer = transport.stream(model, inputs, sequence, RESPONSE_TIMEOUT)
        except ComposerError as error:
            return Answer(problem=error.message)
        return Answer(answer.responses, answer.problem(), stopped=not answer.final and answer.error is None)
    try:
        return Answer((transport.infer(model, inputs, sequence, RESPONSE_TIMEOUT),))
    except ComposerError as error:
        return Answer(problem=error.message, stopped="deadline" in error.message.lower())


class SequenceIds:
    """Correlation IDs for one smoke run: numbers, or strings where the model asks for them."""

    def __init__(self, start: int = 1):
        self._next = itertools.count(start)

    def new(self, string: bool = False) -> int | str:
        n = next(self._next)
        return f"composer-smoke-{n}" if string else n


# -- a model's verdict -------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """How a model fared: the smoke table's RESULT, DETAIL, REQUEST and CASES."""

    status: str  # PASS or FAIL
    detail: str
    request: str
    cases: str | None = None


def request_label(protocol: ModelProtocol, steps: int, cases: int = 0, sequence: bool | None = None) -> str:
    """The REQUEST column: `stream`, `sequence (N steps)`, both, with the number of cases."""
    sequence = protocol.sequencing is not None if sequence is None else sequence
    parts = (["stream"] if protocol.stream else []) + ([f"sequence ({steps} step{'s' if steps != 1 else ''})"]
                                                       if sequence else [])
    if cases:
        parts.append(f"{cases} case{'s' if cases != 1 else ''}")
    return ", ".join(parts) or "-"


def needs_protocol(protocol: ModelProtocol, cases: Iterable[Case]) -> bool:
    """A model the HTTP path cannot serve: decoupled, a sequence, or given a stream's or a sequence's cases."""
    return not protocol.plain or any(isinstance(c, ProtocolCase) for c in cases)


def model_verdict(transport: Transport, name: str, config: Mapping, protocol: ModelProtocol,
                  cases: Sequence[Case], ids: SequenceIds) -> Verdict:
    """A READY model's verdict: its cases, else a default request (a stream; a sequence of
    DEFAULT_STEPS steps) built from its configuration."""
    if cases:
        return _cases_verdict(transport, name, protocol, cases, ids)
    return default_verdict(transport, name, config, protocol, ids)


def default_verdict(transport: Transport, name: str, config: Mapping, protocol: ModelProtocol,
                    ids: SequenceIds) -> Verdict:
    """Zeros for every input the client sends; every step must answer with every configured output
    of its type and shape (a stream: in at least one response, then the final flag)."""
    sequencing = protocol.sequencing
    served = _served(config, sequencing if sequencing is not None and sequencing.model == name else None)
    steps = DEFAULT_STEPS if sequencing is not None else 1
    request = request_label(protocol, steps)
    try:
        inputs = default_request(served)
    except CaseError as error:
        return Verdict("FAIL", f"no request possible: {error}", request)
    request = f"{request}: {describe_request(inputs)}"
    sequence_id = ids.new(sequencing.string_id) if sequencing is not None else None
    first = None
    counts = []
    for number in range(1, steps + 1):
        flags = SequenceFlags(sequence_id, number == 1, number == steps) if sequence_id is not None else None
        answer = exchange(transport, name, protocol.stream, inputs, flags)
        problem = answer.problem or _default_problem(served, answer.responses, protocol.stream)
        counts.append(len(answer.responses))
        if problem and first is None:
            first = f"step {number} of {steps}: {problem}" if steps > 1 else problem
        if answer.stopped:
            break
    if first:
        return Verdict("FAIL", f"default request: {_said(protocol, sequence_id)}{first}", request)
    return Verdict("PASS", _passed(protocol, sequence_id, steps, counts), request)


def _default_problem(config: Mapping, responses: Sequence[Mapping[str, TensorData]], stream: bool) -> str | None:
    if not responses:
        return "empty stream: the final flag came with no response holding outputs" if stream else "no answer"
    problems = [check_against_config(config, r) for r in responses]
    if any(p is None for p in problems):
        return None
    return f"no response holds every configured output (response 1: {problems[0]})" if stream else problems[0]


def _said(protocol: ModelProtocol, sequence_id) -> str:
    parts = (["stream"] if protocol.stream else []) + ([f"sequence {sequence_id!r}"] if sequence_id is not None else [])
    return f"{', '.join(parts)}: " if parts else ""


def _passed(protocol: ModelProtocol, sequence_id, steps: int, counts: list[int]) -> str:
    """e.g. "2 steps in sequence 1 (START to END), each streamed 3/3 responses to the final flag, ..."."""
    if protocol.stream:
        plural = "s" if counts != [1] else ""
        said = f"streamed {'/'.join(map(str, counts))} response{plural} to the final flag, holding every configured output"
    else:
        said = "answered with every configured output"
    if sequence_id is None:
        return said
    return f"{steps} steps in sequence {sequence_id!r} (START to END), each {said}"


def _cases_verdict(transport: Transport, name: str, protocol: ModelProtocol, cases: Sequence[Case],
                   ids: SequenceIds) -> Verdict:
    problems, passed, steps, sequence = [], 0, 0, False
    for case in cases:
        problem, sent, in_sequence = case_problem(transport, name, protocol, case, ids)
        steps += sent
        sequence = sequence or in_sequence
        if problem:
            problems.append(problem)
        else:
            passed += 1
    counted = f"{passed}/{len(cases)}"
    request = request_label(protocol, steps, len(cases), sequence)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return Verdict("FAIL", f"wrong answer: {problems[0]}{more}", request, counted)
    return Verdict("PASS", "correct answers", request, counted)


def case_problem(transport: Transport, name: str, protocol: ModelProtocol, case: Case,
                 ids: SequenceIds) -> tuple[str | None, int, bool]:
    """(one line naming the case, or None when it passed; steps sent; sent as a sequence)."""
    protocol_case = case if isinstance(case, ProtocolCase) else None
    steps = protocol_case.steps if protocol_case else (Step(case.inputs, case.expected),)
    sequencing = protocol.sequencing
    in_sequence = sequencing is not None or bool(protocol_case and protocol_case.sequence)
    sequence_id = None
    if in_sequence:
        sequence_id = protocol_case.sequence_id if protocol_case and protocol_case.sequence_id is not None else None
        if sequence_id is None:
            sequence_id = ids.new(sequencing.string_id if sequencing else False)
        elif sequencing is not None and sequencing.id_problem(sequence_id):
            return f"case {case.name}: {sequencing.id_problem(sequence_id)}", 0, True
    first, sent = None, 0
    for number, step in enumerate(steps, 1):
        flags = SequenceFlags(sequence_id, number == 1, number == len(steps)) if sequence_id is not None else None
        answer = exchange(transport, name, protocol.stream, step.inputs, flags)
        sent += 1
        problem = answer.problem or step.check(list(answer.responses))
        if problem and first is None:
            first = f"step {number}: {problem}" if len(steps) > 1 else problem
        if answer.stopped:
            break
    return (f"case {case.name}: {first}" if first else None), sent, in_sequence


class Exchanges:
    """A smoke run's streams and sequences: the transport (its channel opened by the first model
    that needs it) and the run's correlation IDs."""

    def __init__(self, transport: Transport):
        self.transport = transport
        self.ids = SequenceIds()

    def verdict(self, config_of: Callable[[str], Mapping], name: str, cases: Sequence[Case]) -> Verdict | None:
        """The verdict of a READY model that needs a stream or a sequence; None for one the HTTP
        path serves (a plain model with plain cases), or whose configuration cannot be read here."""
        try:
            config = config_of(name)
            protocol = protocol_of(name, config_of, config)
        except ComposerError:
            return None
        if not needs_protocol(protocol, cases):
            return None
        return model_verdict(self.transport, name, config, protocol, cases, self.ids)

    def sample_outputs(self, sample) -> dict[str, TensorData]:
        """A decoupled sample's answer (composer.verify.samples.Sample with stream: true): its stream read
        to the final flag, each output joined across the responses. Raises ComposerError, one line."""
        answer = exchange(self.transport, sample.model, True, sample.inputs)
        if answer.problem:
            raise ComposerError(f"{sample.model}: stream: {answer.problem}")
        if not answer.responses:
            raise ComposerError(f"{sample.model}: empty stream: the final flag came with no response holding outputs")
        return joined(answer.responses)

    def close(self) -> None:
        close = getattr(self.transport, "close", None)
        if close is not None:
            close()
