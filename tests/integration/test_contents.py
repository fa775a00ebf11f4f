"""The probe in a real full image (the stand-in), through the real engine: no skip when the
engine is missing on CI (tests/conftest.py's engine fixture fails the run there)."""

from __future__ import annotations

import pytest

from composer.resolve.contents import inspect_full

pytestmark = pytest.mark.integration


def test_the_probe_reads_the_standin_full_image(engine, standin_images):
    c = inspect_full(engine, standin_images.full_ref)
    assert c.stub_python == "3.11" and c.python_mismatch() is None
    assert {"identity", "onnxruntime", "python", "pytorch"} <= set(c.names("backend"))
    assert "local" in c.names("cache")
    assert c.python.numpy_version and c.python.numpy_version.startswith("1.")
    assert any(p.endswith("/numpy") for p in c.python.numpy_paths)
    assert "libpython3.11.so.1.0" in {n.soname for n in c.python.needs}
    assert not c.component("backend", "python").missing
    assert c.machine and c.libc.count(".") == 1  # what the wheels' platform is made of (no second container)
