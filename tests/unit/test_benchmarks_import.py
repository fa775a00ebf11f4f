"""Every benchmark imports: nothing runs them in the test suite (they take minutes to hours at NGC
scale), so a module that moved or a renamed function would otherwise break them unnoticed."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# A module whose name starts with "_" is a helper the benchmarks share (imported by them, no main).
BENCHMARKS = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py") if not p.stem.startswith("_"))


def test_there_are_benchmarks():
    assert len(BENCHMARKS) >= 5, BENCHMARKS


@pytest.mark.parametrize("name", BENCHMARKS)
def test_a_benchmark_imports_and_has_a_main(name, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))
    module = importlib.import_module(f"benchmarks.{name}")
    try:
        assert callable(getattr(module, "main", None)), f"benchmarks/{name}.py has no main()"
    finally:
        sys.modules.pop(f"benchmarks.{name}", None)
