"""onnxruntime as a Python-based Triton backend: serves <model>/<version>/model.onnx on CPU.

Self-contained: onnxruntime lives in ./site-packages next to this file; numpy is the
image's own (numpy<2), never bundled, so the server gets outputs it accepts.
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "site-packages"))

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
import triton_python_backend_utils as pb_utils  # noqa: E402


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        filename = config.get("default_model_filename") or "model.onnx"
        path = os.path.join(args["model_repository"], args["model_version"], filename)
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])
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
