"""The FIL backend (forest models, RAPIDS): what its folder needs is found by the probe."""

from composer.backends.base import Backend

UNIT = Backend("fil")
