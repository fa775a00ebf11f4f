"""Answers which tabulate (or none) and which numpy this model's python imports."""

import numpy as np
import triton_python_backend_utils as pb_utils

try:
    import tabulate

    TABULATE = tabulate.__version__
except ImportError:
    TABULATE = "none"


class TritonPythonModel:
    def execute(self, requests):
        tensors = [pb_utils.Tensor("TABULATE", np.array([TABULATE.encode()], dtype=np.object_)),
                   pb_utils.Tensor("NUMPY", np.array([np.__version__.encode()], dtype=np.object_))]
        return [pb_utils.InferenceResponse(tensors) for _ in requests]
