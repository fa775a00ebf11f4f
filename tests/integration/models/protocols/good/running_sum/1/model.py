"""SUM = X + the previous SUM of the same correlation ID (0 at START); the sum is dropped at END.
A request that is not part of a started sequence is refused: its answer would mean nothing."""
import numpy as np
import triton_python_backend_utils as pb_utils


def _first(request, name):
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0]


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            corrid, start, end = int(_first(request, "CORRID")), bool(_first(request, "START")), bool(_first(request, "END"))
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if not start and corrid not in self.sums:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    f"sequence {corrid} was never started (no START flag)")))
                continue
            total = (x + (0 if start else self.sums[corrid])).astype(np.int32)
            self.sums[corrid] = total
            if end:
                self.sums.pop(corrid, None)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUM", total)]))
        return responses
