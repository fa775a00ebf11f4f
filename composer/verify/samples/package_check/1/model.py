"""Imports every module named in modules.json beside this file; fails to load if one does not."""

import importlib
import json
import os


class TritonPythonModel:
    def initialize(self, args):
        with open(os.path.join(os.path.dirname(__file__), "modules.json")) as fh:
            modules = json.load(fh)
        failed = []
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception as exc:  # any failure to import counts, not only ImportError
                failed.append(f"[{name}] {type(exc).__name__}: {exc}")
        if failed:
            raise RuntimeError("cannot import " + "; ".join(failed))

    def execute(self, requests):
        return []
