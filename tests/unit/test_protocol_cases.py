"""Cases for streams and sequences: read from the same files as plain cases, refused with the file,
the case and the reason; checked against the responses a stream or a step gave."""

from __future__ import annotations

import pytest

from composer.config.cases import Case, CaseError, Expected, TensorData, cases_from_text, parse_cases
from composer.config.cases import ProtocolCase, Step

OUT = {"name": "OUT", "datatype": "INT32", "shape": [1]}
COUNT3 = [{"name": "COUNT", "datatype": "INT32", "shape": [1], "data": [3]}]


def out(value):
    return {"OUT": TensorData("OUT", "INT32", (1,), (value,))}


YAML = """\
cases:
  - model: counter
    name: counts to three
    inputs: [{name: COUNT, datatype: INT32, shape: [1], data: [3]}]
    responses:
      - [{name: OUT, datatype: INT32, shape: [1], data: [0]}]
      - [{name: OUT, datatype: INT32, shape: [1], data: [1]}]
      - [{name: OUT, datatype: INT32, shape: [1], data: [2]}]
  - model: counter
    name: five of them
    inputs: [{name: COUNT, datatype: INT32, shape: [1], data: [5]}]
    response_count: 5
    expected: [{name: OUT, datatype: INT32, shape: [1]}]
  - model: running_sum
    name: adds up
    sequence_id: 42
    steps:
      - inputs: [{name: X, datatype: INT32, shape: [1], data: [3]}]
        expected: [{name: SUM, datatype: INT32, shape: [1], data: [3]}]
      - inputs: [{name: X, datatype: INT32, shape: [1], data: [4]}]
        expected: [{name: SUM, datatype: INT32, shape: [1], data: [7]}]
  - model: plain
    inputs: [{name: X, datatype: INT32, shape: [1], data: [3]}]
    expected: [{name: Y, datatype: INT32, shape: [1], data: [4]}]
"""


def test_the_documented_format_reads():
    ordered, counted, summed, plain = cases_from_text(YAML, "cases.yaml")
    assert isinstance(ordered, ProtocolCase) and not ordered.sequence
    (step,) = ordered.steps
    assert step.count == 3 and [r[0].data for r in step.responses] == [(0,), (1,), (2,)]
    assert ordered.inputs == step.inputs  # the first step's, for code that knows plain cases
    assert counted.steps[0].count == 5 and counted.steps[0].expected[0].shape == (1,)
    assert summed.sequence and summed.sequence_id == 42 and len(summed.steps) == 2
    assert [s.expected[0].data for s in summed.steps] == [(3,), (7,)]
    assert type(plain) is Case  # a file written before reads as before


def test_a_string_sequence_id_and_a_one_step_sequence():
    (case,) = parse_cases([{"model": "m", "sequence_id": "user-7", "inputs": COUNT3, "expected": [OUT]}], "c.yaml")
    assert case.sequence and case.sequence_id == "user-7" and len(case.steps) == 1


@pytest.mark.parametrize("item, message", [
    ({"steps": []}, "'steps' must be a non-empty list"),
    ({"steps": [{"inputs": COUNT3}]}, "step 1: expects nothing: give expected, responses or response_count"),
    ({"steps": [{"inputs": COUNT3, "expected": [OUT], "sequence_id": 3}]}, "step 1: unknown key sequence_id"),
    ({"inputs": COUNT3, "steps": [{"inputs": COUNT3, "expected": [OUT]}]}, "inputs goes inside each of steps"),
    ({"inputs": COUNT3, "responses": []}, "'responses' must be a non-empty list"),
    ({"inputs": COUNT3, "responses": [[OUT]], "response_count": 1}, "give responses (each response's outputs"),
    ({"inputs": COUNT3, "responses": [[OUT]], "expected": [OUT]}, "or expected, not both"),
    ({"inputs": COUNT3, "responses": [[]]}, "response 1: 'responses' must be a non-empty list of tensors"),
    ({"inputs": COUNT3, "response_count": 0}, "response_count must be a whole number"),
    ({"inputs": COUNT3, "response_count": True}, "response_count must be a whole number"),
    ({"inputs": COUNT3, "expected": [OUT], "sequence_id": 0}, "sequence_id 0 is out of range"),
    ({"inputs": COUNT3, "expected": [OUT], "sequence_id": ""}, "sequence_id must not be empty"),
    ({"inputs": COUNT3, "expected": [OUT], "sequence_id": 1.5}, "sequence_id must be a whole number"),
    ({"inputs": COUNT3, "expected": [OUT], "stream": True}, "unknown key stream (model, name, inputs, expected, "
                                                            "response_count, responses, sequence_id, steps)"),
])
def test_bad_stream_and_sequence_cases_are_refused_naming_file_and_case(item, message):
    with pytest.raises(CaseError) as refused:
        parse_cases([{"model": "m", "name": "mine", **item}], "cases.yaml")
    assert str(refused.value).startswith("cases.yaml: case 1"), refused.value
    assert message in str(refused.value), refused.value
    assert "(mine)" in str(refused.value) or "unknown key" in message


def test_a_stream_step_checks_order_count_and_every_response():
    (ordered,) = parse_cases([{"model": "m", "inputs": COUNT3, "responses": [[{**OUT, "data": [v]}] for v in (0, 1, 2)]}],
                             "c.yaml")[0].steps
    assert isinstance(ordered, Step)
    assert ordered.check([out(0), out(1), out(2)]) is None
    assert ordered.check([out(0), out(2), out(1)]) == "response 2: OUT[0] is 2, expected 1"
    assert ordered.check([out(0), out(1)]) == "2 responses with outputs, expected 3"
    (counted,) = parse_cases([{"model": "m", "inputs": COUNT3, "response_count": 2, "expected": [OUT]}],
                             "c.yaml")[0].steps
    assert counted.check([out(5), out(6)]) is None
    assert counted.check([out(5)]) == "1 response with outputs, expected 2"
    assert counted.check([out(5), {"OTHER": out(1)["OUT"]}]) == "response 2: no output OUT (got OTHER)"
    each = Step((), expected=(Expected("OUT", "INT32", (1,), (1,)),))  # a plain case's, sent to a stream
    assert each.check([]) == "no response with outputs"
    assert each.check([out(1)]) is None and each.check([out(2)]) == "OUT[0] is 2, expected 1"


def test_a_protocol_case_checked_against_one_answer():
    (one,) = parse_cases([{"model": "m", "name": "one", "inputs": COUNT3, "response_count": 1, "expected": [OUT]}],
                         "c.yaml")
    assert one.check(out(3)) is None
    (two,) = parse_cases([{"model": "m", "name": "two", "steps": [{"inputs": COUNT3, "expected": [OUT]}] * 2}],
                         "c.yaml")
    assert two.check(out(3)) == "case two: 2 steps cannot be checked against one answer"


def test_every_example_in_the_guide_and_the_readme_reads():
    """The documented stream and sequence examples (README and docs/, wherever they sit, indented in
    a list or not) are valid case files; the guide holds one of each kind at least."""
    import re
    import textwrap
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    found: dict[str, int] = {}
    for doc in [root / "README.md", *sorted((root / "docs").rglob("*.md"))]:
        for block in re.findall(r"```yaml\n(.*?)```", doc.read_text(), re.S):
            text = textwrap.dedent(block)
            if not text.startswith("cases:") or not re.search(r"^\s*-? ?(steps|responses|response_count):", text, re.M):
                continue
            cases = cases_from_text(text, f"{doc.name}.yaml")
            assert cases and all(isinstance(c, ProtocolCase) for c in cases), (doc, text)
            found[doc.name] = found.get(doc.name, 0) + 1
    assert found.get("smoke-test-protocols.md", 0) >= 5, found  # in order, by count, a sequence, both, an ensemble
