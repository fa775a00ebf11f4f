"""A 24.09 server with a backend taken from the 24.08 stand-in (--backend-image)."""

from __future__ import annotations

import json
import uuid

import pytest

from composer.catalog.catalog import Catalog
from composer.pipeline import build_image
from composer.resolve.resolve import resolve
from tests.specs import spec
from triton_standins import build_standins

pytestmark = pytest.mark.integration

REGISTRY = "localhost/standin"


@pytest.fixture(scope="module")
def standin_24_08(engine):
    return build_standins(engine, Catalog.load().release("24.08"))


def test_backend_from_another_release(engine, standin_images, standin_24_08):
    tag = f"triton-composer-test/tritonserver:mixed-{uuid.uuid4().hex[:8]}"
    options = spec(backends=("python",), version="24.09", registry=REGISTRY, tag=tag,
                           backend_images=(("identity", standin_24_08.full_ref),))
    notes = []
    plan = resolve(engine, options, Catalog.load(), on_line=notes.append).plan
    assert any("release 24.08" in n and "24.09" in n for n in plan.notes)  # the user is warned
    try:
        result = build_image(engine, plan, labels={"triton-composer.test": "1"})
        rows = {(r.subject, r.status) for r in result.smoke.rows}
        assert ("identity", "PASS") in rows and ("python", "PASS") in rows
        record = json.loads(engine.run_once(tag, ["cat", "/opt/tritonserver/composition.json"], entrypoint=[]).output)
        assert record["backend_images"]["identity"]["release"] == "24.08"
        assert record["server_version"] == "2.50.0"
    finally:
        engine.remove_image(tag, force=True)


def test_backend_image_must_offer_the_backend(engine, standin_images, standin_24_08):
    options = spec(backends=("python",), version="24.09", registry=REGISTRY,
                           backend_images=(("tensorrt", standin_24_08.full_ref),))
    with pytest.raises(Exception) as err:
        resolve(engine, options, Catalog.load())
    assert "unknown backend 'tensorrt'" in err.value.message and "24.08" in err.value.message
