"""The vLLM backend: a model.py run through the python backend, held by the vllm flavour's image
(the catalog's flavours), not by the full image."""

from composer.backends.base import Backend

UNIT = Backend("vllm", python_based=True, samples=("vllm_tiny",))
