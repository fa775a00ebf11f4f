"""Test cases for the user's models: reading them, the default request, checking answers."""

from __future__ import annotations

import json

import pytest

from composer.config.cases import (
    CaseError, check_against_config, default_request, model_cases, parse_cases, read_cases_file,
    repository_problem,
)
from composer.config.cases import TensorData

CASE = {
    "model": "affine",
    "name": "triples",
    "inputs": [{"name": "input__0", "datatype": "FP32", "shape": [2], "data": [1.0, 2.0]}],
    "expected": [{"name": "output__0", "datatype": "FP32", "shape": [2], "data": [2.5, 5.5], "tolerance": 1e-4}],
}


def answer(*tensors) -> dict:
    return {t.name: t for t in tensors}


def test_a_case_checks_data_within_its_tolerance_and_names_itself():
    (case,) = parse_cases({"cases": [CASE]}, "cases.yaml")
    assert case.check(answer(TensorData("output__0", "FP32", (2,), (2.50001, 5.5)))) is None
    wrong = case.check(answer(TensorData("output__0", "FP32", (2,), (2.5, 6.0))))
    assert wrong == "case triples: output__0[1] is 6.0, expected 5.5 (tolerance 0.0001)"
    assert "has shape [1, 2], expected [2]" in case.check(answer(TensorData("output__0", "FP32", (1, 2), (2.5, 5.5))))
    assert "no output output__0 (got other)" in case.check(answer(TensorData("other", "FP32", (2,), (0, 0))))


def test_shape_and_datatype_only():
    raw = {**CASE, "expected": [{"name": "output__0", "datatype": "FP32", "shape": [2]}]}
    (case,) = parse_cases([raw], "cases.json")
    assert case.check(answer(TensorData("output__0", "FP32", (2,), (9.0, 9.0)))) is None
    assert "datatype FP64, expected FP32" in case.check(answer(TensorData("output__0", "FP64", (2,), (9.0, 9.0))))


def test_a_model_folder_carries_its_cases_by_convention(tmp_path):
    folder = tmp_path / "affine"
    folder.mkdir()
    (folder / "smoke_cases.json").write_text(json.dumps({"cases": [{k: v for k, v in CASE.items() if k != "model"}]}))
    (case,) = model_cases(folder)
    assert case.model == "affine" and case.name == "triples"
    (folder / "smoke_cases.json").write_text(json.dumps({"cases": [{**CASE, "model": "other"}]}))
    with pytest.raises(CaseError, match="names model other, but the file is in model affine's folder"):
        model_cases(folder)


@pytest.mark.parametrize("raw, message", [
    ({"cases": []}, "expected a list of cases"),
    ([{**CASE, "inputs": []}], "'inputs' must be a non-empty list"),
    ([{**CASE, "extra": 1}], "unknown key extra"),
    ([{k: v for k, v in CASE.items() if k != "model"}], "names no model"),
    ([{**CASE, "inputs": [{"name": "x", "datatype": "FLOAT", "shape": [1], "data": [1]}]}], "datatype 'FLOAT'"),
    ([{**CASE, "inputs": [{"name": "x", "datatype": "FP32", "shape": [3], "data": [1]}]}], "1 values for shape [3]"),
    ([{**CASE, "expected": [{"name": "y", "datatype": "FP32"}]}], "needs data or a shape"),
    ([CASE, CASE], "case triples of model affine is given twice"),
])
def test_bad_cases_are_refused_with_the_reason(raw, message):
    with pytest.raises(CaseError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")):
        parse_cases(raw, "cases.yaml")


def test_a_file_that_is_not_yaml_names_itself(tmp_path):
    path = tmp_path / "cases.json"
    path.write_text("{not json")
    with pytest.raises(CaseError, match=r"cases.json: not valid JSON"):
        read_cases_file(path)


def test_repository_problems(tmp_path):
    assert repository_problem(tmp_path / "nope") == "no such folder"
    assert "no model folders" in repository_problem(tmp_path)
    (tmp_path / "m").mkdir()
    assert repository_problem(tmp_path) is None
    (tmp_path / "m" / "smoke_cases.yaml").write_text("cases: 3\n")
    assert "smoke_cases.yaml: expected a list of cases" in repository_problem(tmp_path)


CONFIG = {
    "max_batch_size": 8,
    "input": [
        {"name": "IMAGE", "data_type": "TYPE_UINT8", "dims": [-1, 3]},
        {"name": "TEXT", "data_type": "TYPE_STRING", "dims": [2]},
        {"name": "MASK", "data_type": "TYPE_BOOL", "dims": [1], "optional": True},
    ],
    "output": [{"name": "SCORES", "data_type": "TYPE_FP32", "dims": [-1, 4]}],
}


def test_default_request_from_the_configuration():
    image, text = default_request(CONFIG)  # the optional input is left out
    assert (image.name, image.datatype, image.shape, image.data) == ("IMAGE", "UINT8", (1, 1, 3), (0, 0, 0))
    assert (text.datatype, text.shape, text.data) == ("BYTES", (1, 2), ("", ""))
    unbatched = default_request({"max_batch_size": 0, "input": [{"name": "x", "data_type": "TYPE_FP16", "dims": [2]}]})
    assert unbatched[0].shape == (2,) and unbatched[0].data == (0.0, 0.0)


def test_no_inputs_is_a_failure_with_that_reason():
    with pytest.raises(CaseError, match="configuration has no inputs"):
        default_request({"max_batch_size": 0, "input": [], "output": []})


def test_answer_against_the_configuration():
    good = TensorData("SCORES", "FP32", (1, 5, 4), tuple([0.0] * 20))
    assert check_against_config(CONFIG, answer(good)) is None
    assert "no output SCORES" in check_against_config(CONFIG, {})
    assert "datatype FP64, the configuration says FP32" in check_against_config(
        CONFIG, answer(TensorData("SCORES", "FP64", (1, 5, 4), tuple([0.0] * 20))))
    assert "shape [1, 5, 3], the configuration says [1, -1, 4]" in check_against_config(
        CONFIG, answer(TensorData("SCORES", "FP32", (1, 5, 3), tuple([0.0] * 15))))
    assert "shape [2, 5, 4]" in check_against_config(  # a batch of one was sent
        CONFIG, answer(TensorData("SCORES", "FP32", (2, 5, 4), tuple([0.0] * 40))))
    assert "holds 3 values for shape [1, 1, 4]" in check_against_config(
        CONFIG, answer(TensorData("SCORES", "FP32", (1, 1, 4), (0.0, 0.0, 0.0))))
    assert check_against_config({"output": []}, {}) == "its configuration has no outputs"
