"""Answer checks for the user's own models: test cases, and a default request from the config.

A model proves it serves only by answering. Cases come from a file given with --smoke-cases,
or from `smoke_cases.json` (or `.yaml`) next to a model's config.pbtxt, which Triton ignores:

    cases:
      - model: my_model            # optional in a model's own file
        name: doubles              # optional; names the case in a failure
        inputs:
          - {name: INPUT0, datatype: FP32, shape: [4], data: [1, 2, 3, 4]}
        expected:
          - {name: OUTPUT0, datatype: FP32, shape: [4], data: [2, 4, 6, 8], tolerance: 1.0e-5}
          - {name: OUTPUT1, datatype: INT64, shape: [4]}   # shape and datatype only

A model without cases still gets a real request built from its configuration as the server
reports it, and the answer must hold every configured output with its datatype and a shape
consistent with the configuration.

Streams (decoupled models) and sequences (stateful models) take more keys: responses,
response_count, steps, sequence_id (see "streams and sequences" below).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from composer.core.errors import Invalid
from composer.core.files import load_structured, read_text
from composer.config.pbtxt import config_problem, field_names, scalar_fields


@dataclass(frozen=True)
class TensorData:
    """A named tensor as the JSON protocol carries it: flat data in row-major order."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    data: tuple

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape), "data": list(self.data)}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> "TensorData":
        return cls(
            name=str(raw["name"]),
            datatype=str(raw["datatype"]),
            shape=tuple(int(d) for d in raw.get("shape", ())),
            data=tuple(_flatten(raw.get("data", ()))),
        )


def _flatten(data: Any) -> list:
    """The server may answer nested lists; the composer compares flat ones."""
    if not isinstance(data, (list, tuple)):
        return [data]
    flat: list = []
    for item in data:
        flat.extend(_flatten(item) if isinstance(item, (list, tuple)) else [item])
    return flat


CASE_FILES = ("smoke_cases.json", "smoke_cases.yaml", "smoke_cases.yml")
FLOAT_TYPES = frozenset({"FP16", "FP32", "FP64", "BF16"})
DATATYPES = frozenset({"BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
                       "FP16", "FP32", "FP64", "BF16", "BYTES"})
DEFAULT_TOLERANCE = 1e-5  # relative, for floating-point outputs when a case names none


class CaseError(ValueError):
    """A case file that cannot be used; the message names the file and what is wrong."""


@dataclass(frozen=True)
class Expected:
    """An output a case expects: its data within a tolerance, or only its shape and datatype."""

    name: str
    datatype: str
    shape: tuple[int, ...] | None = None
    data: tuple | None = None
    tolerance: float = DEFAULT_TOLERANCE


@dataclass(frozen=True)
class Case:
    model: str
    name: str
    inputs: tuple[TensorData, ...]
    expected: tuple[Expected, ...]
    source: str = ""  # the file it came from

    def check(self, outputs: Mapping[str, TensorData]) -> str | None:
        """None when `outputs` hold the expected answer, else one line naming the case."""
        for want in self.expected:
            problem = _mismatch(want, outputs.get(want.name), outputs)
            if problem:
                return f"case {self.name}: {problem}"
        return None


def _mismatch(want: Expected, got: TensorData | None, outputs: Mapping[str, TensorData]) -> str | None:
    if got is None:
        return f"no output {want.name} (got {', '.join(sorted(outputs)) or 'none'})"
    if got.datatype != want.datatype:
        return f"{want.name} has datatype {got.datatype}, expected {want.datatype}"
    if want.shape is not None and tuple(got.shape) != want.shape:
        return f"{want.name} has shape {list(got.shape)}, expected {list(want.shape)}"
    if want.data is None:
        return None
    if len(got.data) != len(want.data):
        return f"{want.name} has {len(got.data)} values, expected {len(want.data)}"
    tolerance = want.tolerance if want.datatype in FLOAT_TYPES else 0.0
    for index, (g, w) in enumerate(zip(got.data, want.data)):
        if not close(g, w, tolerance):
            return f"{want.name}[{index}] is {g!r}, expected {w!r}" + (f" (tolerance {tolerance:g})" if tolerance else "")
    return None


def close(got: Any, want: Any, tolerance: float) -> bool:
    """Equal, or within `tolerance` relative to the expected value (absolute below 1)."""
    if isinstance(want, (bool, str)) or isinstance(got, (bool, str)):
        return got == want
    try:
        g, w = float(got), float(want)
    except (TypeError, ValueError):
        return got == want
    if math.isnan(w):
        return math.isnan(g)
    return abs(g - w) <= tolerance * max(1.0, abs(w)) if tolerance else g == w


# -- reading cases -------------------------------------------------------------------


def read_cases_file(path: Path, model: str | None = None) -> tuple[Case, ...]:
    """The cases of one file (JSON or YAML); `model` is the default for a model's own file."""
    try:
        text = read_text(Path(path), "case file")
    except Invalid as problem:
        raise CaseError(str(problem)) from None
    return cases_from_text(text, str(path), model)


def cases_from_text(text: str, source: str, model: str | None = None) -> tuple[Case, ...]:
    """The cases of a file's text: JSON when `source` ends in .json, else YAML."""
    as_json = source.endswith(".json")
    try:  # depth, alias expansion and string keys checked: a bomb is refused, not expanded
        raw = load_structured(text, source, as_json)
    except Invalid as problem:
        raise CaseError(str(problem)) from None
    return parse_cases(raw, source, model)


def parse_cases(raw: Any, source: str, model: str | None = None) -> tuple[Case, ...]:
    """Cases from a loaded document: {cases: [...]} or a list of cases."""
    items = raw.get("cases") if isinstance(raw, dict) else raw
    if not isinstance(items, list) or not items:
        raise CaseError(f"{source}: expected a list of cases under 'cases:'")
    cases = []
    for number, item in enumerate(items, 1):
        where = f"{source}: case {number}"
        if not isinstance(item, dict):
            raise CaseError(f"{where}: expected a mapping with inputs and expected")
        unknown = sorted(set(item) - {"model", "name", "inputs", "expected"} - PROTOCOL_KEYS)
        if unknown:
            raise CaseError(f"{where}: unknown key {unknown[0]} (model, name, inputs, expected, "
                            f"{', '.join(sorted(PROTOCOL_KEYS))})")
        name_of_model = str(item.get("model") or model or "")
        if not name_of_model:
            raise CaseError(f"{where}: names no model (model: NAME)")
        if model and name_of_model != model:
            raise CaseError(f"{where}: names model {name_of_model}, but the file is in model {model}'s folder")
        name = str(item.get("name") or f"{name_of_model}#{number}")
        if PROTOCOL_KEYS & set(item):
            cases.append(protocol_case(item, where, name_of_model, name, source))
            continue
        inputs = tuple(_input(t, f"{where} ({name})") for t in _list(item.get("inputs"), "inputs", where))
        expected = tuple(_expected(t, f"{where} ({name})") for t in _list(item.get("expected"), "expected", where))
        cases.append(Case(name_of_model, name, inputs, expected, source))
    names = [(c.model, c.name) for c in cases]
    for pair in names:
        if names.count(pair) > 1:
            raise CaseError(f"{source}: case {pair[1]} of model {pair[0]} is given twice")
    return tuple(cases)


def model_cases(model_dir: Path) -> tuple[Case, ...]:
    """The cases a model folder carries by the convention (none when it has no such file)."""
    found = [model_dir / f for f in CASE_FILES if (model_dir / f).is_file()]
    if len(found) > 1:
        raise CaseError(f"{model_dir}: give one of {', '.join(CASE_FILES)}, not {len(found)}")
    return read_cases_file(found[0], model_dir.name) if found else ()


def model_folders(repository: Path) -> dict[str, Path]:
    """Model name -> folder, for every folder of a model repository (hidden ones left out)."""
    return {p.name: p for p in sorted(Path(repository).iterdir()) if p.is_dir() and not p.name.startswith(".")}


def repository_cases(repository: Path) -> tuple[Case, ...]:
    """Every case the model folders of a repository carry."""
    cases: list[Case] = []
    for folder in model_folders(repository).values():
        cases += model_cases(folder)
    return tuple(cases)


def repository_problem(repository: Path) -> str | None:
    """What makes `repository` unusable as a model repository (None: it is fine). Checked before
    any work, so a bad configuration or case file is refused before a build starts."""
    if not repository.is_dir():
        return "no such folder"
    try:
        folders = model_folders(repository)
        if not folders:
            return "no model folders in it (a model repository holds one folder per model)"
        for folder in folders.values():
            problem = config_problem(folder)
            if problem:
                return problem
        repository_cases(repository)
    except CaseError as error:
        return str(error)
    except OSError as exc:
        return f"cannot read it ({exc.strerror or exc})"
    return None


def by_model(cases: Iterable[Case]) -> dict[str, list[Case]]:
    grouped: dict[str, list[Case]] = {}
    for case in cases:
        grouped.setdefault(case.model, []).append(case)
    return grouped


def _list(value: Any, key: str, where: str) -> list:
    if not isinstance(value, list) or not value:
        raise CaseError(f"{where}: '{key}' must be a non-empty list of tensors")
    return value


def _tensor_head(raw: Any, where: str, need_data: bool) -> tuple[str, str, tuple[int, ...] | None]:
    if not isinstance(raw, dict):
        raise CaseError(f"{where}: a tensor is a mapping of name, datatype, shape, data")
    name, datatype = raw.get("name"), str(raw.get("datatype", "")).upper()
    if not name:
        raise CaseError(f"{where}: a tensor has no name")
    if datatype not in DATATYPES:
        raise CaseError(f"{where}: {name} has datatype {raw.get('datatype')!r}; valid: {', '.join(sorted(DATATYPES))}")
    shape = raw.get("shape")
    if shape is None and not need_data:
        return str(name), datatype, None
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise CaseError(f"{where}: {name} needs a shape, a list of sizes (e.g. [1, 4])")
    return str(name), datatype, tuple(shape)


def _flat(data: Any) -> list:
    if not isinstance(data, list):
        return [data]
    return [x for item in data for x in _flat(item)]


def _input(raw: Any, where: str) -> TensorData:
    name, datatype, shape = _tensor_head(raw, where, need_data=True)
    if "data" not in raw:
        raise CaseError(f"{where}: input {name} has no data")
    data = _flat(raw["data"])
    if len(data) != math.prod(shape):
        raise CaseError(f"{where}: input {name} has {len(data)} values for shape {list(shape)}")
    return TensorData(name, datatype, shape, tuple(data))


def _expected(raw: Any, where: str) -> Expected:
    name, datatype, shape = _tensor_head(raw, where, need_data="data" in (raw or {}))
    unknown = sorted(set(raw) - {"name", "datatype", "shape", "data", "tolerance"})
    if unknown:
        raise CaseError(f"{where}: output {name}: unknown key {unknown[0]}")
    data = tuple(_flat(raw["data"])) if "data" in raw else None
    if data is not None and shape is not None and len(data) != math.prod(shape):
        raise CaseError(f"{where}: output {name} has {len(data)} values for shape {list(shape)}")
    if data is None and shape is None:
        raise CaseError(f"{where}: output {name} needs data or a shape")
    try:
        tolerance = float(raw.get("tolerance", DEFAULT_TOLERANCE))
    except (TypeError, ValueError):
        raise CaseError(f"{where}: output {name}: tolerance must be a number") from None
    return Expected(name, datatype, shape, data, tolerance)


# -- a request from the configuration --------------------------------------------------


def datatype_of(config_type: str) -> str:
    """TYPE_FP32 -> FP32; TYPE_STRING -> BYTES (the protocol's name for strings)."""
    name = str(config_type).removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


def _zero(datatype: str) -> Any:
    if datatype == "BYTES":
        return ""
    if datatype == "BOOL":
        return False
    return 0.0 if datatype in FLOAT_TYPES else 0


def _batched(config: Mapping[str, Any]) -> bool:
    return int(config.get("max_batch_size") or 0) > 0


def default_request(config: Mapping[str, Any]) -> tuple[TensorData, ...]:
    """Zeros for every required input: variable dimensions 1, a batch of 1 where the model
    batches. Raises CaseError when the configuration has no inputs (nothing can be asked)."""
    inputs = [i for i in config.get("input") or [] if not i.get("optional")]
    if not inputs:
        raise CaseError("its configuration has no inputs, so no request can be made "
                        "(a model without a config.pbtxt whose backend did not complete one?)")
    tensors = []
    for entry in inputs:
        dims = [int(d) for d in entry.get("dims") or []]
        shape = ([1] if _batched(config) else []) + [1 if d < 0 else d for d in dims]
        datatype = datatype_of(entry.get("data_type", ""))
        tensors.append(TensorData(str(entry["name"]), datatype, tuple(shape),
                                  tuple(_zero(datatype) for _ in range(math.prod(shape)))))
    return tuple(tensors)


def check_against_config(config: Mapping[str, Any], outputs: Mapping[str, TensorData]) -> str | None:
    """None when the answer holds every configured output with its datatype and a shape
    consistent with the configuration (batch of 1 first where the model batches)."""
    configured = config.get("output") or []
    if not configured:
        return "its configuration has no outputs"
    batch = [1] if _batched(config) else []
    for entry in configured:
        name = str(entry["name"])
        got = outputs.get(name)
        if got is None:
            return f"no output {name} in the answer (got {', '.join(sorted(outputs)) or 'none'})"
        want_type = datatype_of(entry.get("data_type", ""))
        if got.datatype != want_type:
            return f"{name} has datatype {got.datatype}, the configuration says {want_type}"
        shapes = [batch + [int(d) for d in entry.get("dims") or []]]
        reshape = (entry.get("reshape") or {}).get("shape")
        if reshape is not None:
            shapes.append(batch + [int(d) for d in reshape])
        if not any(_fits(got.shape, shape) for shape in shapes):
            return f"{name} has shape {list(got.shape)}, the configuration says {shapes[0]} (-1: any)"
        if len(got.data) != math.prod(got.shape):
            return f"{name} holds {len(got.data)} values for shape {list(got.shape)}"
    return None


def _fits(shape: Iterable[int], configured: list[int]) -> bool:
    shape = list(shape)
    return len(shape) == len(configured) and all(c < 0 or s == c for s, c in zip(shape, configured))


def describe_request(inputs: Iterable[TensorData]) -> str:
    return ", ".join(f"{t.name} {t.datatype} {list(t.shape)}" for t in inputs)


# -- streams and sequences -----------------------------------------------------------
#
# Cases for models that do not answer one request with one response: streams and sequences.
#
# A decoupled model (`model_transaction_policy { decoupled: true }`) answers a request with any
# number of responses, then a final flag; a sequence model (`sequence_batching`) keeps a state per
# correlation ID across requests. A case in a smoke-cases file says what it expects of either with
# keys beside the usual ones (above), so every file written before still reads the same:
#
#     cases:
#       - model: counter                # a stream: the responses, in order, up to the final flag
#         inputs: [{name: COUNT, datatype: INT32, shape: [1], data: [3]}]
#         responses:
#           - [{name: OUT, datatype: INT32, shape: [1], data: [0]}]
#           - [{name: OUT, datatype: INT32, shape: [1], data: [1]}]
#           - [{name: OUT, datatype: INT32, shape: [1], data: [2]}]
#       - model: counter                # or only how many, each holding `expected` if given
#         inputs: [{name: COUNT, datatype: INT32, shape: [1], data: [5]}]
#         response_count: 5
#         expected: [{name: OUT, datatype: INT32, shape: [1]}]
#       - model: running_sum            # a sequence: one correlation ID, START first, END last
#         sequence_id: 42               # optional; a string where the model's CORRID is TYPE_STRING
#         steps:
#           - inputs: [{name: X, datatype: INT32, shape: [1], data: [3]}]
#             expected: [{name: SUM, datatype: INT32, shape: [1], data: [3]}]
#           - inputs: [{name: X, datatype: INT32, shape: [1], data: [4]}]
#             expected: [{name: SUM, datatype: INT32, shape: [1], data: [7]}]
#
# A step takes `responses` or `response_count` too, for a decoupled sequence model. Only responses
# that carry outputs count: a final flag may come alone.

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


def sequence_case_problem(cases: Iterable[Case], folders: Mapping[str, Path]) -> str | None:
    """The first case sent as a sequence (steps, a sequence_id) to a model of `folders` that keeps
    no state (no sequence_batching) and is not decoupled: Triton would answer each step as a lone
    request and the case would pass without testing what it says."""
    for case in cases:
        if not (isinstance(case, ProtocolCase) and case.sequence) or case.model not in folders:
            continue
        try:
            text = read_text(folders[case.model] / "config.pbtxt", "config.pbtxt")
            words = field_names(text)
            fields = scalar_fields(text)
            decoupled = ("model_transaction_policy.decoupled", "true") in fields
            if ("platform", "ensemble") in fields or "ensemble_scheduling" in words:
                continue  # an ensemble passes the sequence on to the models it holds
        except (Invalid, ValueError):  # an unreadable configuration is refused by its own check
            continue
        if "sequence_batching" not in words and not decoupled:
            return (f"case {case.name} sends a sequence (steps or a sequence_id) to model {case.model}, whose "
                    "config.pbtxt has no sequence_batching and is not decoupled: give it plain inputs and "
                    "expected outputs, or test a sequence model")
    return None
