"""Sequence cases (steps, a sequence_id) sent to a model that keeps no state would each be answered
as a lone request and pass without testing anything: refused before any work."""

from __future__ import annotations

from pathlib import Path

import pytest

from composer.config.options import given_on_command_line
from composer.config.rules import validate
from composer.config.types import CompositionSpec
from composer.core.errors import UsageError

CASES = """cases:
  - model: {model}
    steps:
      - inputs: [{{name: X, datatype: INT32, shape: [1], data: [3]}}]
        expected: [{{name: SUM, datatype: INT32, shape: [1], data: [3]}}]
      - inputs: [{{name: X, datatype: INT32, shape: [1], data: [4]}}]
        expected: [{{name: SUM, datatype: INT32, shape: [1], data: [7]}}]
"""
IO = 'input [ { name: "X", data_type: TYPE_INT32, dims: [ 1 ] } ]\noutput [ { name: "SUM", data_type: TYPE_INT32, dims: [ 1 ] } ]\n'
CONFIGS = {
    "plain": 'backend: "python"\nmax_batch_size: 0\n' + IO,
    "stateful": 'backend: "python"\nmax_batch_size: 0\nsequence_batching { direct { } }\n' + IO,
    "streaming": 'backend: "python"\nmax_batch_size: 0\nmodel_transaction_policy { decoupled: true }\n' + IO,
    "through": 'platform: "ensemble"\nmax_batch_size: 0\n' + IO + 'ensemble_scheduling { step [ { model_name: '
               '"stateful" model_version: -1 input_map { key: "X" value: "X" } output_map { key: "SUM" value: "SUM" } } ] }\n',
}


def _repository(tmp_path: Path) -> Path:
    for name, config in CONFIGS.items():
        (tmp_path / "models" / name / "1").mkdir(parents=True)
        (tmp_path / "models" / name / "config.pbtxt").write_text(config)
    return tmp_path / "models"


@pytest.mark.parametrize("model, refused", [("plain", True), ("stateful", False), ("streaming", False),
                                            ("through", False)])
def test_sequence_cases_need_a_sequence_or_decoupled_model(tmp_path, model, refused):
    repository = _repository(tmp_path)
    cases = tmp_path / "cases.yaml"
    cases.write_text(CASES.format(model=model))
    given = given_on_command_line("smoke-test", {"model_repository": str(repository), "smoke_cases": str(cases)},
                                  tmp_path)
    spec = CompositionSpec().with_fields(given)
    if not refused:
        validate(spec, "smoke-test")
        return
    with pytest.raises(UsageError) as refusal:
        validate(spec, "smoke-test")
    assert refusal.value.message.startswith(f"--smoke-cases {cases}: case ")
    assert "model plain, whose config.pbtxt has no sequence_batching and is not decoupled" in refusal.value.message
