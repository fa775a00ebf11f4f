"""A --no-cache build on BuildKit: one solve per labelled stage, each stage run afresh once per run."""

from __future__ import annotations

from composer.engine.buildkit import fresh_options, needed, stages_of
from composer.render.render import write_context


def _solves(dockerfile: str, buildargs: dict) -> tuple[list, list[tuple[str, list[str]]]]:
    """The stages and what each solve of a --no-cache build would pass, as BuildKit.build orders them."""
    stages = stages_of(dockerfile, buildargs)
    targets = [s.name for s in stages[:-1] if s.labelled and s.name] + [stages[-1].name]
    made: set[str] = set()
    solves = []
    for target in targets:
        solves.append((target, fresh_options(stages, made)))
        made |= needed(stages, target)
    return stages, solves


def test_the_stages_a_solve_runs_follow_from_and_copy_from(ngc_plan, tmp_path):
    plan = ngc_plan("onnxruntime", "python", base="pruned")
    context = write_context(plan, tmp_path / "context")
    stages = stages_of((context.pruned_base / "Dockerfile").read_text(), {})
    layer = next(s.name for s in stages if s.name.startswith("layer-") and s.labelled)
    assert {"collect", "decide", "pruned", "split", layer} <= needed(stages, layer)
    assert not any(n.startswith("layer-") and n != layer for n in needed(stages, layer))
    made = next(s for s in stages if s.name == "layers-made")
    assert {n for n in needed(stages, "layers-made") if n.startswith("layer-")} == {
        s.name for s in stages if s.name.startswith("layer-")}
    assert made.uses and all(u.startswith("layer-") for u in made.uses)


def test_a_no_cache_build_runs_each_stage_once_whatever_the_number_of_solves(ngc_plan, tmp_path):
    plan = ngc_plan("onnxruntime", "python", base="pruned")
    context = write_context(plan, tmp_path / "context")
    for dockerfile, args in ((context.pruned_base / "Dockerfile", {}),
                             (context.directory / "Dockerfile", {"PRUNED_BASE": "sha256:" + "b" * 64})):
        stages, solves = _solves(dockerfile.read_text(), args)
        assert len(solves) > 3 and solves[0][1] == ["--no-cache"]  # the first solve: every step afresh
        made: set[str] = set()
        for target, options in solves:
            made_before = set(made)
            made |= needed(stages, target)
            if not made_before:
                continue
            listed = set(options[1].removeprefix("no-cache=").split(",")) if options else set()
            # Afresh: every stage this solve runs that no earlier solve ran; from the run's own
            # solves: the stages they ran (the same steps, just made).
            assert needed(stages, target) - made_before <= listed, (dockerfile.name, target)
            assert not listed & made_before, (dockerfile.name, target)


def test_every_run_of_a_pruned_base_exports_its_cache_to_one_tag(ngc_plan):
    """The registry cache's tag leaves the labels out (they name the run): a fresh builder finds the
    steps another run of the same base exported. A change to a step is a tag of its own."""
    from composer.engine.buildkit import cache_name
    from composer.render.render import render_pruned_base

    plan = ngc_plan("onnxruntime", "python", base="pruned")
    one, two = render_pruned_base(plan, "run1"), render_pruned_base(plan, "run2")
    assert one != two and cache_name(one, {}) == cache_name(two, {})
    assert cache_name(one, {}) != cache_name(one.replace("--all-folders", "--all"), {})
    assert cache_name(one, {}) != cache_name(one, {"PRUNED_BASE": "sha256:1"})
