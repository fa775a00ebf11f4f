"""The DALI backend: its python wheel is found through PYTHONPATH (the catalog's backend_env)."""

from composer.backends.base import Backend

UNIT = Backend("dali")
