"""triton-composer: compose slim Triton Inference Server images and prove they serve."""

__version__ = "0.1.0"
