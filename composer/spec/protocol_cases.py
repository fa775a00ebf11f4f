"""Cases for models that do not answer one request with one response: streams and sequences.

A decoupled model (`model_transaction_policy { decoupled: true }`) answers a request with any
number of responses, then a final flag; a sequence model (`sequence_batching`) keeps a state per
correlation ID across requests. A case in a smoke-cases file says what it expects of either with
keys beside the usual ones (composer.spec.cases), so every file written before still reads the same:

    cases:
      - model: counter                # a stream: the responses, in order, up to the final flag
        inputs: [{name: COUNT, datatype: INT32, shape: [1], data: [3]}]
        responses:
          - [{name: OUT, datatype: INT32, shape: [1], data: [0]}]
          - [{name: OUT, datatype: INT32, shape: [1], data: [1]}]
          - [{name: OUT, datatype: INT32, shape: [1], data: [2]}]
      - model: counter                # or only how many, each holding `expected` if given
        inputs: [{name: COUNT, datatype: INT32, shape: [1], data: [5]}]
        response_count: 5
        expected: [{name: OUT, datatype: INT32, shape: [1]}]
      - model: running_sum            # a sequence: one correlation ID, START first, END last
        sequence_id: 42               # optional; a string where the model's CORRID is TYPE_STRING
        steps:
          - inputs: [{name: X, datatype: INT32, shape: [1], data: [3]}]
            expected: [{name: SUM, datatype: INT32, shape: [1], data: [3]}]
          - inputs: [{name: X, datatype: INT32, shape: [1], data: [4]}]
            expected: [{name: SUM, datatype: INT32, shape: [1], data: [7]}]

A step takes `responses` or `response_count` too, for a decoupled sequence model. Only responses
that carry outputs count: a final flag may come alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from composer.spec.cases import Case, CaseError, Expected, TensorData, _expected, _input, _list, _mismatch

# The keys that make a case a stream's or a sequence's (the others: model, name, inputs, expected).
STREAM_KEYS = frozenset({"responses", "response_count"})
PROTOCOL_KEYS = STREAM_KEYS | {"steps", "sequence_id"}
STEP_KEYS = frozenset({"inputs", "expected"}) | STREAM_KEYS


@dataclass(frozen=True)
class Step:
    """One request and what its answer must hold: `expected` in every response that carries
    outputs, the `responses` in order, or `response_count` of them."""

    inputs: tuple[TensorData, ...]
    expected: tuple[Expected, ...] = ()
    responses: tuple[tuple[Expected, ...], ...] | None = None
    response_count: int | None = None

    @property
    def count(self) -> int | None:
        """How many responses with outputs the step expects (None: at least one)."""
        return len(self.responses) if self.responses is not None else self.response_count

    def check(self, responses: list[Mapping[str, TensorData]]) -> str | None:
        """None when the responses that carried outputs are the expected ones, else one line."""
        if self.count is not None and len(responses) != self.count:
            return f"{len(responses)} response{'s' if len(responses) != 1 else ''} with outputs, expected {self.count}"
        if not responses:
            return "no response with outputs"
        for number, outputs in enumerate(responses, 1):
            wanted = self.responses[number - 1] if self.responses is not None else self.expected
            for want in wanted:
                problem = _mismatch(want, outputs.get(want.name), outputs)
                if problem:
                    where = f"response {number}: " if len(responses) > 1 or self.count is not None else ""
                    return where + problem
        return None


@dataclass(frozen=True)
class ProtocolCase(Case):
    """A case with a stream's responses or a sequence's steps. `inputs` and `expected` hold the
    first step's, so code that knows only plain cases still sees what is sent first."""

    steps: tuple[Step, ...] = ()
    sequence_id: int | str | None = None
    sequence: bool = False  # given as steps: always sent with a correlation ID, START and END

    def check(self, outputs: Mapping[str, TensorData]) -> str | None:
        """One answer, as a one-response stream of a one-step case (a plain model's answer)."""
        if len(self.steps) != 1:
            return f"case {self.name}: {len(self.steps)} steps cannot be checked against one answer"
        problem = self.steps[0].check([outputs])
        return f"case {self.name}: {problem}" if problem else None


def protocol_case(item: Mapping[str, Any], where: str, model: str, name: str, source: str) -> ProtocolCase:
    """The case of `item`, one that gives responses, a response count, steps or a sequence ID."""
    label = f"{where} ({name})"
    sequence_id = _sequence_id(item, label) if "sequence_id" in item else None
    if "steps" in item:
        mixed = sorted((STEP_KEYS & set(item)))
        if mixed:
            raise CaseError(f"{label}: {mixed[0]} goes inside each of steps, not beside them")
        raw_steps = item["steps"]
        if not isinstance(raw_steps, list) or not raw_steps:
            raise CaseError(f"{label}: 'steps' must be a non-empty list of steps (inputs, expected)")
        steps = tuple(_step(raw, f"{label}: step {number}") for number, raw in enumerate(raw_steps, 1))
        sequence = True
    else:
        steps = (_step(item, label, keys_checked=True),)
        sequence = sequence_id is not None
    first = steps[0]
    return ProtocolCase(model, name, first.inputs, first.expected, source, steps=steps, sequence_id=sequence_id,
                        sequence=sequence)


def _step(raw: Any, where: str, keys_checked: bool = False) -> Step:
    if not isinstance(raw, dict):
        raise CaseError(f"{where}: a step is a mapping of inputs and expected (or responses, response_count)")
    if not keys_checked:
        unknown = sorted(set(raw) - STEP_KEYS)
        if unknown:
            raise CaseError(f"{where}: unknown key {unknown[0]} ({', '.join(sorted(STEP_KEYS))})")
    inputs = tuple(_input(t, where) for t in _list(raw.get("inputs"), "inputs", where))
    if "responses" in raw and ("response_count" in raw or "expected" in raw):
        other = "response_count" if "response_count" in raw else "expected"
        raise CaseError(f"{where}: give responses (each response's outputs, in order) or {other}, not both")
    responses = None
    if "responses" in raw:
        listed = raw["responses"]
        if not isinstance(listed, list) or not listed:
            raise CaseError(f"{where}: 'responses' must be a non-empty list, one list of expected outputs per response")
        responses = tuple(tuple(_expected(t, f"{where}: response {number}")
                                for t in _list(one, "responses", f"{where}: response {number}"))
                          for number, one in enumerate(listed, 1))
    count = None
    if "response_count" in raw:
        count = raw["response_count"]
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise CaseError(f"{where}: response_count must be a whole number of responses, 1 or more")
    expected: tuple[Expected, ...] = ()
    if "expected" in raw:
        expected = tuple(_expected(t, where) for t in _list(raw["expected"], "expected", where))
    if responses is None and count is None and not expected:
        raise CaseError(f"{where}: expects nothing: give expected, responses or response_count")
    return Step(inputs, expected, responses, count)


def _sequence_id(item: Mapping[str, Any], where: str) -> int | str:
    value = item["sequence_id"]
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise CaseError(f"{where}: sequence_id must be a whole number above 0 or a non-empty string")
    if isinstance(value, int) and not 0 < value < 2**64:
        raise CaseError(f"{where}: sequence_id {value} is out of range (1 to 2^64-1, or a string)")
    if isinstance(value, str) and not value:
        raise CaseError(f"{where}: sequence_id must not be empty")
    return value
