"""The size report, from the composed image's layers: the base's, then one a part."""

from __future__ import annotations

from composer.engine.interface import Layer
from composer.verify.sizes import measure, report_from

MIN_LAYERS = [Layer("base layer 1", 100_000_000), Layer("base layer 2", 50_000)]


def _layers(plan, sizes: dict[str, int]) -> list[Layer]:
    """One layer for each part of the plan (as the composer writes them), sized by part name."""
    return [Layer(part.description, sizes.get(part.name, 0)) for part in plan.all_parts()]


def test_parts_add_up_to_the_image(ngc_plan, tmp_path):
    from tests.unit.fake_engine import FakeEngine

    plan = ngc_plan("onnxruntime", "python", repoagents=("checksum",), bake_models=tmp_path)
    added = _layers(plan, {"server core": 24_002_000, "collected libraries": 7_000_000, "python runtime": 30_000_000,
                           "onnxruntime": 60_000_000, "python": 3_000_000, "checksum": 500_000,
                           "composition record": 1_000, "loader cache, user, byte-code": 40_000, "baked models": 9_000_000})
    engine = FakeEngine(histories={"built": MIN_LAYERS + added, plan.min.id: MIN_LAYERS})
    report = measure(engine, "built", plan, plan.all_parts())
    parts = {(p.kind, p.name): p.size for p in report.parts}
    assert parts == {
        ("server", "server core"): 24_002_000, ("libraries", "collected libraries"): 7_000_000,
        ("python", "python runtime"): 30_000_000, ("backend", "onnxruntime"): 60_000_000,
        ("backend", "python"): 3_000_000, ("repoagent", "checksum"): 500_000, ("models", "baked models"): 9_000_000,
        ("system", "loader cache, user, byte-code"): 40_000,
    }
    assert report.min_image == 100_050_000 and report.total == sum(l.size for l in MIN_LAYERS + added)
    assert report.overhead == 1_000 and report.lower_bound + report.overhead == report.total
    payload = report.to_dict()
    assert payload["overhead"] == 1_000 and payload["lower_bound"] == report.lower_bound
    table = report.table()
    assert "backend onnxruntime" in table and "baked models" in table and "overhead" in table


def test_the_size_report_names_the_pruned_base_and_what_it_saved(ngc_plan):
    from dataclasses import replace

    plan = ngc_plan("python", base="pruned")
    slots = plan.pruning.slots  # the base's family layers, then the composition's
    base = [Layer(f"base layer {slot.name}", 1_000_000_000 if slot.family == "core" else 100) for slot in slots]
    layers = base + _layers(plan, {"server core": 4_000_000, "collected libraries": 7_000_000,
                                   "python runtime": 30_000_000, "python": 3_000_000})
    report = report_from(layers, len(base), plan, plan.all_parts())
    parts = {(p.kind, p.name): p.size for p in report.parts}
    assert parts[("base", "pruned base")] == 1_000_000_000 + 100 * (len(slots) - 1)
    assert parts[("python", "python runtime")] == 30_000_000 and parts[("libraries", "collected libraries")] == 7_000_000
    assert [(p.name, p.size) for p in report.base_layers][:2] == [("00-core", 1_000_000_000), ("01-python", 100)]
    assert report.base_layers[-1].name == f"{len(slots) - 1:02d}-dpkg" and report.min_image == 0
    report = replace(report, pruned_from=9_000_000_000)
    saved = 9_000_000_000 - parts[("base", "pruned base")]
    assert report.pruning_saved == saved and report.to_dict()["pruning_saved"] == saved
    table = report.table()
    assert "pruning saved" in table and "min image  " not in table and "  layer 03-cublas" in table
    assert report.to_dict()["base_layers"][0] == {"kind": "layer", "name": "00-core", "size": 1_000_000_000}
