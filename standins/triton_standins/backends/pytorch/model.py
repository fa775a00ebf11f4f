"""PyTorch (TorchScript) as a Python-based Triton backend, CPU only.

Serves <model>/<version>/model.pt for models configured the NGC way
(platform "pytorch_libtorch", inputs input__0.., outputs output__0..). torch lives in
./site-packages next to this file; numpy is the image's own (numpy<2).
"""

import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "site-packages"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton_python_backend_utils as pb_utils  # noqa: E402


def _by_index(entries):
    """NGC's libtorch backend binds tensors by the __<n> suffix, else by config order."""

    def key(pair):
        position, entry = pair
        match = re.search(r"__(\d+)$", entry["name"])
        return (int(match.group(1)) if match else position, position)

    return [entry for _, entry in sorted(enumerate(entries), key=key)]


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        filename = config.get("default_model_filename") or "model.pt"
        path = os.path.join(args["model_repository"], args["model_version"], filename)
        torch.set_num_threads(1)
        self.module = torch.jit.load(path, map_location="cpu")
        self.module.eval()
        self.inputs = [i["name"] for i in _by_index(config.get("input", []))]
        self.outputs = [
            (o["name"], pb_utils.triton_string_to_numpy(o["data_type"])) for o in _by_index(config.get("output", []))
        ]

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                args = []
                for name in self.inputs:
                    tensor = pb_utils.get_input_tensor_by_name(request, name)
                    if tensor is None:
                        raise ValueError(f"missing input {name}")
                    args.append(torch.from_numpy(np.array(tensor.as_numpy(), copy=True)))
                with torch.inference_mode():
                    result = self.module(*args)
                if isinstance(result, torch.Tensor):
                    result = (result,)
                if len(result) < len(self.outputs):
                    raise ValueError(f"the model returned {len(result)} tensors, the config names {len(self.outputs)}")
                tensors = [
                    pb_utils.Tensor(name, np.ascontiguousarray(value.detach().cpu().numpy().astype(dtype)))
                    for (name, dtype), value in zip(self.outputs, result)
                ]
                responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            except Exception as exc:  # one bad request must not take the model down
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"pytorch: {exc}")))
        return responses

    def finalize(self):
        self.module = None
