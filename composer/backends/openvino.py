"""The OpenVINO backend: what its folder needs is found by the probe."""

from composer.backends.base import Backend

UNIT = Backend("openvino")
