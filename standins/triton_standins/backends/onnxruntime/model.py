"""onnxruntime as a Python-based Triton backend: serves <model>/<version>/model.onnx on CPU.

Self-contained: onnxruntime lives in ./site-packages next to this file; numpy is the
image's own (numpy<2), never bundled, so the server gets outputs it accepts.
Like NGC's onnxruntime backend, it completes a missing configuration from the model itself
(inputs, outputs, and batching when every tensor's first dimension is variable).
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "site-packages"))

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
import triton_python_backend_utils as pb_utils  # noqa: E402


# ONNX tensor element types (as onnxruntime names them) -> Triton configuration datatypes.
CONFIG_TYPES = {
    "tensor(bool)": "TYPE_BOOL",
    "tensor(uint8)": "TYPE_UINT8",
    "tensor(uint16)": "TYPE_UINT16",
    "tensor(uint32)": "TYPE_UINT32",
    "tensor(uint64)": "TYPE_UINT64",
    "tensor(int8)": "TYPE_INT8",
    "tensor(int16)": "TYPE_INT16",
    "tensor(int32)": "TYPE_INT32",
    "tensor(int64)": "TYPE_INT64",
    "tensor(float16)": "TYPE_FP16",
    "tensor(float)": "TYPE_FP32",
    "tensor(double)": "TYPE_FP64",
    "tensor(bfloat16)": "TYPE_BF16",
    "tensor(string)": "TYPE_STRING",
}
# What Triton's --backend-config default-max-batch-size defaults to.
DEFAULT_MAX_BATCH_SIZE = 4


def _dims(shape):
    """ONNX shape -> configuration dims: symbolic or unknown dimensions are -1."""
    return [d if isinstance(d, int) and d >= 0 else -1 for d in shape]


def completed_config(config, inputs, outputs):
    """The configuration a model gets when config.pbtxt leaves parts out.

    inputs/outputs: (name, onnx type, onnx shape). With no max_batch_size and no tensors
    configured, a model whose every tensor has a variable first dimension batches
    (max_batch_size 4, the first dimension left out of dims, dynamic batching), as NGC's
    onnxruntime backend decides. Returns (max_batch_size, dynamic batching, inputs, outputs).
    """
    tensors = [*inputs, *outputs]
    unconfigured = not config.get("input") and not config.get("output")
    batching = int(config.get("max_batch_size") or 0) > 0
    dynamic = False
    if not batching and unconfigured and tensors and all(_dims(shape)[:1] == [-1] for _n, _t, shape in tensors):
        batching, dynamic = True, True
    max_batch = int(config.get("max_batch_size") or 0) or (DEFAULT_MAX_BATCH_SIZE if batching else 0)

    def entry(name, onnx_type, shape):
        if onnx_type not in CONFIG_TYPES:
            raise ValueError(f"tensor {name} has type {onnx_type}, which Triton cannot carry")
        dims = _dims(shape)[1:] if batching else _dims(shape)
        return {"name": name, "data_type": CONFIG_TYPES[onnx_type], "dims": dims}

    return max_batch, dynamic, [entry(*t) for t in inputs], [entry(*t) for t in outputs]


def _session(path):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        config = auto_complete_model_config.as_dict()
        filename = config.get("default_model_filename") or "model.onnx"
        session = _session(os.path.join(pb_utils.get_model_dir(), filename))
        max_batch, dynamic, inputs, outputs = completed_config(
            config,
            [(t.name, t.type, t.shape) for t in session.get_inputs()],
            [(t.name, t.type, t.shape) for t in session.get_outputs()],
        )
        if max_batch:
            auto_complete_model_config.set_max_batch_size(max_batch)
        if dynamic:
            auto_complete_model_config.set_dynamic_batching()
        for tensor in inputs:
            auto_complete_model_config.add_input(tensor)
        for tensor in outputs:
            auto_complete_model_config.add_output(tensor)
        return auto_complete_model_config

    def initialize(self, args):
        config = json.loads(args["model_config"])
        filename = config.get("default_model_filename") or "model.onnx"
        path = os.path.join(args["model_repository"], args["model_version"], filename)
        self.session = _session(path)
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.outputs = [
            (o["name"], pb_utils.triton_string_to_numpy(o["data_type"])) for o in config.get("output", [])
        ] or [(o.name, None) for o in self.session.get_outputs()]

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                feeds = {}
                for name in self.inputs:
                    tensor = pb_utils.get_input_tensor_by_name(request, name)
                    if tensor is None:
                        raise ValueError(f"missing input {name}")
                    feeds[name] = tensor.as_numpy()
                results = self.session.run([n for n, _ in self.outputs], feeds)
                tensors = [
                    pb_utils.Tensor(name, np.ascontiguousarray(value if dtype is None else value.astype(dtype)))
                    for (name, dtype), value in zip(self.outputs, results)
                ]
                responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            except Exception as exc:  # one bad request must not take the model down
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"onnxruntime: {exc}")))
        return responses

    def finalize(self):
        self.session = None
