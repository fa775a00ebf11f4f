"""The TensorFlow backend: carried by full images up to 25.03, with its own environment."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from composer.backends.base import Backend


@dataclass(frozen=True)
class TensorFlow(Backend):
    def in_release(self, release) -> bool:
        return release.tensorflow

    def image_env(self, catalog) -> Mapping[str, str]:
        """NGC's final stage sets these on an image whose full image offers tensorflow (selected or not)."""
        return catalog.tensorflow_env


UNIT = TensorFlow("tensorflow", platforms=("tensorflow_graphdef", "tensorflow_savedmodel"))
