"""The stand-in onnxruntime backend completes a missing configuration as NGC's does.

The backend's model.py runs inside the python backend; here its pure part (completed_config)
is loaded with the two in-image modules it imports replaced by empty ones.
"""

from __future__ import annotations

import importlib.util
import sys
import types

import pytest

from triton_standins import _standin_file


@pytest.fixture(scope="module")
def backend():
    saved = {name: sys.modules.get(name) for name in ("onnxruntime", "triton_python_backend_utils")}
    sys.modules["onnxruntime"] = types.ModuleType("onnxruntime")
    sys.modules["triton_python_backend_utils"] = types.ModuleType("triton_python_backend_utils")
    try:
        spec = importlib.util.spec_from_file_location(
            "standin_onnxruntime_model", _standin_file("backends", "onnxruntime", "model.py")
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        for name, value in saved.items():
            if value is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = value


EMPTY = {"name": "m", "max_batch_size": 0, "input": [], "output": []}


def test_variable_first_dimension_everywhere_means_batching(backend):
    max_batch, dynamic, inputs, outputs = backend.completed_config(
        EMPTY,
        [("x", "tensor(float)", ["batch", 3]), ("ids", "tensor(int64)", [None, "seq"])],
        [("y", "tensor(float)", ["batch", 3])],
    )
    assert (max_batch, dynamic) == (4, True)
    assert inputs == [{"name": "x", "data_type": "TYPE_FP32", "dims": [3]},
                      {"name": "ids", "data_type": "TYPE_INT64", "dims": [-1]}]
    assert outputs == [{"name": "y", "data_type": "TYPE_FP32", "dims": [3]}]


def test_a_fixed_first_dimension_means_no_batching(backend):
    max_batch, dynamic, inputs, outputs = backend.completed_config(
        EMPTY, [("INPUT0", "tensor(float)", [4])], [("OUTPUT0", "tensor(string)", [4, "n"])]
    )
    assert (max_batch, dynamic) == (0, False)
    assert inputs == [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}]
    assert outputs == [{"name": "OUTPUT0", "data_type": "TYPE_STRING", "dims": [4, -1]}]


def test_a_configured_max_batch_size_is_kept_and_strips_the_batch_dimension(backend):
    config = dict(EMPTY, max_batch_size=16)
    max_batch, dynamic, inputs, _outputs = backend.completed_config(
        config, [("x", "tensor(double)", [-1, 2])], [("y", "tensor(double)", [-1, 2])]
    )
    assert (max_batch, dynamic) == (16, False)
    assert inputs == [{"name": "x", "data_type": "TYPE_FP64", "dims": [2]}]


def test_configured_tensors_keep_a_model_without_batching(backend):
    config = dict(EMPTY, input=[{"name": "x", "data_type": "TYPE_FP32", "dims": [-1, 2]}])
    max_batch, dynamic, inputs, _outputs = backend.completed_config(
        config, [("x", "tensor(float)", [-1, 2])], [("y", "tensor(float)", [-1, 2])]
    )
    assert (max_batch, dynamic) == (0, False)
    assert inputs == [{"name": "x", "data_type": "TYPE_FP32", "dims": [-1, 2]}]


def test_a_type_triton_cannot_carry_is_an_error_naming_the_tensor(backend):
    with pytest.raises(ValueError, match="seq.*tensor\\(complex64\\)"):
        backend.completed_config(EMPTY, [("seq", "tensor(complex64)", [2])], [])
