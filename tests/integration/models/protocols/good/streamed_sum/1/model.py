"""Decoupled running sum: each step streams SUM (X + the sequence's previous SUM) twice, then the final flag."""
import numpy as np
import triton_python_backend_utils as pb_utils


def _first(request, name):
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0]


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            corrid, start, end = int(_first(request, "CORRID")), bool(_first(request, "START")), bool(_first(request, "END"))
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            total = (x + (0 if start else self.sums.get(corrid, 0))).astype(np.int32)
            self.sums[corrid] = total
            if end:
                self.sums.pop(corrid, None)
            for _ in range(2):
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("SUM", total)]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
