"""Decoupled: for COUNT n (3 when n <= 0), responses OUT = 0..n-1 and TEXT = "token i", then the final flag alone."""
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            n = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy().reshape(-1)[0])
            for i in range(n if n > 0 else 3):
                sender.send(pb_utils.InferenceResponse([
                    pb_utils.Tensor("OUT", np.array([i], dtype=np.int32)),
                    pb_utils.Tensor("TEXT", np.array([f"token {i}".encode()], dtype=np.object_)),
                ]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
