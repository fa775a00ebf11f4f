"""Triton's square backend (a test backend NGC's full image carries): nothing beyond its folder."""

from composer.backends.base import Backend

UNIT = Backend("square")
