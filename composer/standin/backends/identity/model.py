"""The identity backend as a Python-based Triton backend: each INPUTn comes back as OUTPUTn.

Needs nothing beyond the python backend and the image's numpy.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        inputs = [i["name"] for i in config.get("input", [])]
        outputs = [o["name"] for o in config.get("output", [])]
        by_name = {name.replace("INPUT", "OUTPUT", 1): name for name in inputs}
        # OUTPUTn answers INPUTn; otherwise the n-th output answers the n-th input.
        self.pairs = [
            (by_name.get(out, inputs[i] if i < len(inputs) else None), out) for i, out in enumerate(outputs)
        ]
        missing = [out for src, out in self.pairs if src is None]
        if missing:
            raise pb_utils.TritonModelException(f"identity: no input for outputs {missing}")

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                tensors = []
                for src, out in self.pairs:
                    tensor = pb_utils.get_input_tensor_by_name(request, src)
                    if tensor is None:
                        raise ValueError(f"missing input {src}")
                    tensors.append(pb_utils.Tensor(out, np.ascontiguousarray(tensor.as_numpy())))
                responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            except Exception as exc:  # one bad request must not take the model down
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"identity: {exc}")))
        return responses
