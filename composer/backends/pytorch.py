"""The PyTorch backend: libtorch, which loads HPC-X's UCC/UCX by name (the catalog's
loaded_at_run_time) and finds them through LD_LIBRARY_PATH (the catalog's backend_env)."""

from composer.backends.base import Backend

UNIT = Backend("pytorch", platforms=("pytorch_libtorch",), loads=("libtorch_cuda.so",), samples=("torchscript_affine",))
