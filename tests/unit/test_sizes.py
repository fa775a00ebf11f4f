"""The size report, from an image's history as the engine gives it."""

from __future__ import annotations


from composer.engine.engine import Layer
from composer.verify.sizes import destination, measure

NOP = "/bin/sh -c #(nop) "


def copy(dest: str, size: int) -> Layer:
    return Layer(f"{NOP}COPY dir:{'ab' * 32} in {dest} ", size)


MIN_LAYERS = [Layer("", 100_000_000), Layer(f"{NOP} ENV A=1", 0), Layer("/bin/sh -c apt-get install python3", 50_000)]


def test_destination_of_each_kind_of_step():
    assert destination(copy("/opt/tritonserver/backends/python", 1).created_by) == "/opt/tritonserver/backends/python"
    assert destination(copy("/", 1).created_by) == "/"
    assert destination(copy("/models/", 1).created_by) == "/models"
    assert destination("COPY models/ /models/ # buildkit") == "/models"
    assert destination("/bin/sh -c ldconfig") is None and destination(f"{NOP} LABEL a=b") is None


def test_parts_add_up_to_the_image(ngc_plan, tmp_path):
    from tests.unit.fake_engine import FakeEngine

    plan = ngc_plan("onnxruntime", "python", repoagents=("checksum",), bake_models=tmp_path)
    added = [
        copy("/opt/tritonserver/bin", 4_000_000), copy("/opt/tritonserver/lib", 20_000_000),
        copy("/opt/tritonserver/LICENSE", 2_000),
        copy("/", 7_000_000), copy("/", 30_000_000),  # libraries, then the python runtime
        copy("/opt/tritonserver/backends/onnxruntime", 60_000_000),
        copy("/opt/tritonserver/backends/python", 3_000_000),
        copy("/opt/tritonserver/repoagents/checksum", 500_000),
        Layer(f"{NOP}COPY file:{'cd' * 32} in /opt/tritonserver/composition.json ", 1_000),
        Layer("/bin/sh -c ldconfig && useradd triton-server", 40_000),
        copy("/models/", 9_000_000),
        Layer(f"{NOP} ENV PATH=/opt/tritonserver/bin", 0), Layer(f'{NOP} CMD ["tritonserver"]', 0),
    ]
    engine = FakeEngine(histories={"built": MIN_LAYERS + added, plan.min.id: MIN_LAYERS})
    report = measure(engine, "built", plan)
    parts = {(p.kind, p.name): p.size for p in report.parts}
    assert parts == {
        ("server", "server core"): 24_002_000, ("libraries", "collected libraries"): 7_000_000,
        ("python", "python runtime"): 30_000_000, ("backend", "onnxruntime"): 60_000_000,
        ("backend", "python"): 3_000_000, ("repoagent", "checksum"): 500_000, ("models", "baked models"): 9_000_000,
    }
    assert report.min_image == 100_050_000 and report.total == sum(l.size for l in MIN_LAYERS + added)
    assert report.overhead == 41_000 and report.lower_bound + report.overhead == report.total
    payload = report.to_dict()
    assert payload["overhead"] == 41_000 and payload["lower_bound"] == report.lower_bound
    table = report.table()
    assert "backend onnxruntime" in table and "baked models" in table and "overhead" in table


def test_an_image_not_on_the_min_image_counts_every_layer(ngc_plan):
    from tests.unit.fake_engine import FakeEngine

    plan = ngc_plan("python")
    engine = FakeEngine(histories={"built": [Layer("other base", 5), copy("/opt/tritonserver/bin", 7)],
                                   plan.min.id: MIN_LAYERS})
    report = measure(engine, "built", plan)
    assert report.min_image == 0 and report.total == 12
    assert {(p.kind, p.name): p.size for p in report.parts}[("server", "server core")] == 7
