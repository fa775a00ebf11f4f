"""Triton's identity backend: outputs its inputs (the smoke test's cheapest C++ sample)."""

from composer.backends.base import Backend

UNIT = Backend("identity", samples=("identity_int32",))
