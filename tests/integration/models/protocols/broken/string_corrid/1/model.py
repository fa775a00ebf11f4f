"""SUM = X + the previous SUM of the same (string) correlation ID."""
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            corrid = pb_utils.get_input_tensor_by_name(request, "CORRID").as_numpy().reshape(-1)[0]
            start = bool(pb_utils.get_input_tensor_by_name(request, "START").as_numpy().reshape(-1)[0])
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            total = (x + (0 if start else self.sums.get(corrid, 0))).astype(np.int32)
            self.sums[corrid] = total
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUM", total)]))
        return responses
