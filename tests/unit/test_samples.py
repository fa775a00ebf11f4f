"""The sample catalog: it loads, its model files are there, and check() tells right from wrong."""

from __future__ import annotations

import dataclasses

import pytest

from composer.verify.samples import load_samples, samples_for
from composer.config.cases import TensorData

MODEL_FILE = {"python": "model.py", "onnxruntime": "model.onnx", "pytorch": "model.pt"}


def _answer(sample):
    return {t.name: t for t in sample.expected}


def test_catalog_has_one_sample_per_backend():
    samples = load_samples()
    assert [s.backend for s in samples] == ["python", "onnxruntime", "pytorch", "identity", "tensorrt", "vllm"]
    assert len({s.model for s in samples}) == len(samples)
    for sample in samples:
        assert sample.backend in sample.needs
        assert sample.inputs and sample.expected
        for tensor in sample.inputs + sample.expected:
            size = 1
            for dim in tensor.shape:
                size *= dim
            assert len(tensor.data) == size, (sample.model, tensor.name)


@pytest.mark.parametrize("sample", load_samples(), ids=lambda s: s.model)
def test_sample_files_exist(sample):
    config = sample.path / "config.pbtxt"
    assert config.is_file()
    text = config.read_text()
    assert f'name: "{sample.model}"' in text
    # Every sample runs on a CPU, but those that need a GPU (their instance kind is left to the server).
    assert "max_batch_size: 0" in text and ("KIND_CPU" in text) != sample.gpu
    assert (sample.path / "1").is_dir()
    if sample.backend in MODEL_FILE:
        model = sample.path / "1" / MODEL_FILE[sample.backend]
        assert model.is_file() and model.stat().st_size > 0
    if sample.backend == "pytorch":
        assert 'platform: "pytorch_libtorch"' in text
    elif sample.backend == "vllm":  # NGC's vllm model: engine arguments in <version>/model.json
        assert f'backend: "vllm"' in text and (sample.path / "1" / "model.json").is_file()
    elif sample.backend == "tensorrt":
        assert 'platform: "tensorrt_plan"' in text and (sample.path / "1" / "model.plan").is_file()
    else:
        assert f'backend: "{sample.backend}"' in text


@pytest.mark.parametrize("sample", load_samples(), ids=lambda s: s.model)
def test_check_accepts_the_expected_answer(sample):
    assert sample.check(_answer(sample)) is None


def test_check_catches_wrong_answers():
    sample = next(s for s in load_samples() if s.model == "add_sub")
    right = _answer(sample)
    out0 = right["OUTPUT0"]

    wrong_value = dict(right, OUTPUT0=dataclasses.replace(out0, data=(out0.data[0] + 1,) + out0.data[1:]))
    problem = sample.check(wrong_value)
    assert problem and "OUTPUT0[0]" in problem and "\n" not in problem

    assert "no output OUTPUT1" in sample.check({"OUTPUT0": out0})
    assert "datatype" in sample.check(dict(right, OUTPUT0=dataclasses.replace(out0, datatype="FP64")))
    assert "shape" in sample.check(dict(right, OUTPUT0=dataclasses.replace(out0, shape=(2, 2))))

    within = dict(right, OUTPUT0=dataclasses.replace(out0, data=tuple(v + 1e-8 for v in out0.data)))
    assert sample.check(within) is None


def test_check_is_exact_for_integers():
    sample = next(s for s in load_samples() if s.backend == "identity")
    out = sample.expected[0]
    off_by_one = TensorData(out.name, out.datatype, out.shape, (out.data[0] + 1,) + out.data[1:])
    assert sample.check({out.name: off_by_one}) is not None


def test_samples_for_selects_by_needs():
    assert [s.model for s in samples_for(["python"])] == ["add_sub"]
    assert {s.backend for s in samples_for(["python", "onnxruntime", "pytorch", "identity", "tensorrt"])} == {
        "python", "onnxruntime", "pytorch", "identity", "tensorrt",
    }
    assert [s.model for s in load_samples() if s.gpu] == ["tensorrt_plan", "vllm_tiny"]
    assert samples_for([]) == []
