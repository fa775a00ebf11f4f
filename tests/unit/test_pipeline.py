"""The pipeline at the engine boundary: resolution once, tags that never move on failure, pushes
that keep the smoke result, base images built by their own repository's digest or by id."""

from __future__ import annotations

from pathlib import Path

import pytest

from composer import pipeline
from composer.assembly import records
from composer.assembly.assemble import Assembled, Sources
from composer.catalog.catalog import Catalog
from composer.resolve.contents import Component, FullImageContents
from composer.engine.interface import ImageInfo, RunResult
from composer.core.errors import RegistryError, UsageError
from composer.resolve import resolve as resolving
from composer.pipeline import Run, build_image, compose
from composer.resolve.resolve import Inspection, plan_from_inspection, resolve_targets
from composer.verify.smoke_plan import SmokeReport, SmokeRow
from composer.config.rules import validate as check
from tests.specs import spec
from tests.unit.fake_engine import FakeEngine, recorded_facts

BUILT = "sha256:" + "b" * 64  # the engine's image: build cache only
COMPOSED = "sha256:" + "c" * 64  # the image the composer writes from the build's parts
OLD = "sha256:" + "0" * 64


class BuildingEngine(FakeEngine):
    """The fake engine, able to 'build': every build gives the image BUILT."""

    def build(self, context: Path, **kwargs) -> str:
        assert (Path(context) / "Dockerfile").is_file()
        self.builds = (self.builds or []) + [kwargs]
        self.images[BUILT] = BUILT
        return BUILT


def _report(passed: bool, image: str = BUILT) -> SmokeReport:
    row = SmokeRow("python", "PASS" if passed else "FAIL", "correct answer" if passed else "wrong", "add_sub")
    return SmokeReport(image=image, rows=(row,), log_tail="")


@pytest.fixture
def engine(monkeypatch):
    # An existing tag, which must not move on failure; the built image's contents as recorded from a
    # real build (for its SBOM). The composer's own writing of the image (composer.assembly.assemble,
    # tested on its own) gives COMPOSED.
    def assembled(engine, plan, built, base, context, layers, key, run, labels, on_line, reuse=False):
        assert built == BUILT and (context.directory / "Dockerfile").is_file()
        engine.images[COMPOSED] = COMPOSED
        engine.images[records.hold_tag(run)] = COMPOSED  # loaded with the run's hold, as the real one is
        return Assembled(COMPOSED, b"{}", OLD, (), (), ()), "{}"

    monkeypatch.setattr(pipeline, "_assemble", assembled)
    return BuildingEngine.with_images("team/triton:1", answer=RunResult(0, recorded_facts()))


def test_the_tag_moves_only_after_the_smoke_test_passed(engine, ngc_plan, monkeypatch):
    engine.images["team/triton:1"] = OLD
    plan = ngc_plan("python", tag="team/triton:1")
    monkeypatch.setattr(pipeline, "smoke_test", lambda *a, **k: _report(False))
    with pytest.raises(pipeline.SmokeTestFailed, match="team/triton:1 was not moved"):
        build_image(engine, plan)
    assert engine.images["team/triton:1"] == OLD and COMPOSED not in engine.images  # discarded
    assert engine.builds[0]["network_mode"] == "none"
    assert set(engine.builds[0]["buildargs"]) == {"SOURCE_DATE_EPOCH"}  # the stages' key is in the Dockerfile

    monkeypatch.setattr(pipeline, "smoke_test", lambda *a, **k: _report(True))
    result = build_image(engine, plan)
    assert result.tag == "team/triton:1" and engine.images["team/triton:1"] == COMPOSED


def test_ctrl_c_during_the_smoke_test_leaves_no_image_and_every_tag(engine, ngc_plan, monkeypatch):
    engine.images["team/triton:1"] = OLD

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "smoke_test", interrupted)
    with pytest.raises(KeyboardInterrupt):
        build_image(engine, ngc_plan("python", tag="team/triton:1"))
    # the new image and the run's hold are gone; the engine's own image stays, as build cache
    assert {ref: image for ref, image in engine.images.items() if image != BUILT} == {"team/triton:1": OLD}


def test_resolution_from_the_release_or_the_full_image():
    catalog = Catalog.load()
    targets = resolve_targets(spec(backends=("python",), version="24.09", registry="mirror.example/nv"), catalog)
    assert (targets.release.name, targets.full, targets.min) == (
        "24.09", "mirror.example/nv/tritonserver:24.09-py3", "mirror.example/nv/tritonserver:24.09-py3-min")
    engine = FakeEngine(infos={"h.example/t/tritonserver:custom": ImageInfo(
        id=OLD, ref="h.example/t/tritonserver:custom", tags=(), repo_digests=(),
        env={"NVIDIA_TRITON_SERVER_VERSION": "24.08"}, labels={}, size=0)})
    targets = resolve_targets(spec(backends=("python",), full_image="h.example/t/tritonserver:custom"), catalog, engine)
    assert targets.release.name == "24.08" and targets.min == "h.example/t/tritonserver:24.08-py3-min"
    with pytest.raises(UsageError, match="render --offline needs --version YY.MM"):
        check(spec(backends=("python",), full_image="h.example/t/tritonserver:custom"), "render", offline=True)
    pinned = targets.pinned({"full": "h.example/t/tritonserver@sha256:" + "c" * 64})
    assert pinned.full.endswith("c" * 64) and pinned.min == targets.min


def _contents(image: str) -> FullImageContents:
    python = Component("backend", "python", "backends/python", 1, "libtriton_python.so", False, (), (), ())
    return FullImageContents(image=image, core_paths=("/opt/tritonserver/bin", "/opt/tritonserver/lib"),
                             core_size=1, include_size=0, core_needs=(), components=(python,), python=None,
                             stub_python=None)


def _info(ref: str, image_id: str, repo_digests=(), env=None) -> ImageInfo:
    return ImageInfo(id=image_id, ref=ref, tags=(ref,), repo_digests=tuple(repo_digests),
                     env=env or {"NVIDIA_TRITON_SERVER_VERSION": "24.09"}, labels={}, size=0)


def test_bases_are_built_from_their_own_repository_or_by_id():
    full = "localhost/standin/tritonserver:24.09-py3"
    minimal = "localhost/standin/tritonserver:24.09-py3-min"
    own = "sha256:" + "1" * 64
    inspection = Inspection(
        full=_info(full, "sha256:" + "e" * 64, [f"localhost/standin/tritonserver@{own}"]),
        min=_info(minimal, "sha256:" + "f" * 64, [f"127.0.0.1:5000/mirror/tritonserver@sha256:{'2' * 64}"]),
        contents=_contents(full),
    )
    plan = plan_from_inspection(spec(backends=("python",), version="24.09"), Catalog.load(),
                                Catalog.load().release("24.09"), inspection, created="2024-09-01T00:00:00Z")
    assert plan.full.from_ref == f"localhost/standin/tritonserver@{own}"
    assert plan.min.from_ref == "sha256:" + "f" * 64  # only another repository's digest: built by id
    assert any("building from image id" in note for note in plan.notes)


def test_a_failed_push_keeps_the_smoke_result(engine, monkeypatch):
    full = "localhost/standin/tritonserver:24.09-py3"
    minimal = "localhost/standin/tritonserver:24.09-py3-min"
    inspection = Inspection(full=_info(full, "sha256:" + "e" * 64), min=_info(minimal, "sha256:" + "f" * 64),
                            contents=_contents(full))
    monkeypatch.setattr(pipeline, "smoke_test", lambda *a, **k: _report(True))

    def refuse(*args, **kwargs):
        raise RegistryError("cannot push r.example/t:1: the registry refused the credentials")

    monkeypatch.setattr("composer.pipeline.push_assembled", refuse)
    outcome = compose(engine, spec(backends=("python",), version="24.09", tag="team/triton:2", push="r.example/t:1"),
                      Catalog.load(), Run(), inspection=inspection)
    assert outcome.result is not None and outcome.result.smoke.passed and outcome.pushed is None
    assert "refused the credentials" in outcome.error.message
    assert outcome.to_dict()["smoke_test"]["passed"] and outcome.to_dict()["error"]


def test_a_full_image_of_another_release_fails_before_anything_slow():
    catalog = Catalog.load()
    full = "localhost/standin/tritonserver:24.09-py3"
    engine = FakeEngine(infos={full: _info(full, OLD, env={"NVIDIA_TRITON_SERVER_VERSION": "24.08"})})
    targets = resolve_targets(spec(backends=("python",), version="24.09", registry="localhost/standin"), catalog)
    with pytest.raises(UsageError, match="--version 24.09 does not match the full image, which is release 24.08"):
        resolving.inspect_images(engine, targets)
    assert engine.runs == []  # no probe ran


def test_a_build_that_fills_the_disk_ends_in_one_line_naming_it_and_moves_no_tag(engine, ngc_plan, monkeypatch):
    from composer.core.errors import BuildFailed, NoSpace

    engine.images["team/triton:1"] = OLD

    def full(context, **kwargs):
        raise BuildFailed("the build failed", log_tail="write /var/lib/docker/overlay2/x: no space left on device")

    engine.build = full
    engine.storage = lambda: ("/var/lib/docker", None)
    with pytest.raises(NoSpace) as stopped:
        build_image(engine, ngc_plan("python", tag="team/triton:1"), check_space=False)
    assert stopped.value.message.startswith("no space left on device at /var/lib/docker")
    assert "team/triton:1 was not moved" in stopped.value.message and "\n" not in stopped.value.message
    assert engine.images == {"team/triton:1": OLD}


def test_a_run_is_on_record_while_it_builds_and_removes_what_a_dead_run_left(engine, ngc_plan, monkeypatch):
    import json
    import subprocess
    import sys

    from composer.engine import locks

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    left = locks.make_folder("layers")  # as a killed run leaves it
    dead = locks.RunRecord("deadrun", child.pid, "1", 0.0, engine.identity(), (str(left),))
    (locks.state_dir() / "runs").mkdir(parents=True, exist_ok=True)
    (locks.state_dir() / "runs" / "deadrun.json").write_text(json.dumps(dead.to_dict()))
    asked, during = [], []
    engine.containers_labelled = lambda label: asked.append(label) or []
    monkeypatch.setattr(pipeline, "smoke_test", lambda *a, **k: during.append(locks.live_runs()) or _report(True))
    lines = []
    build_image(engine, ngc_plan("python", tag="team/triton:1"), on_line=lines.append)
    assert "org.triton-composer.run=deadrun" in asked and locks.run_records() == []
    assert any(line.startswith("removed what run deadrun left") and line.endswith(", 1 temporary folder")
               for line in lines) and not left.exists()
    locks.drop_folder(left)
    assert len(during) == 1 and len(during[0]) == 1  # this run, at work during its smoke test


def test_a_cleanup_the_engine_fails_keeps_the_runs_record_but_never_its_folders(engine, ngc_plan, monkeypatch):
    """CI: Podman failed a run's cleanup (an image another run removed meanwhile); its record stayed,
    as it should, for the next run to remove what it left on the engine, but its context and layers
    folders stayed too: this machine's folders go whatever the engine does."""
    import tempfile

    from composer.core.errors import BuildFailed, EngineError
    from composer.engine import locks

    made = []
    real_make = locks.make_folder
    monkeypatch.setattr(locks, "make_folder", lambda purpose: made.append(real_make(purpose)) or made[-1])

    def failed(context, **kwargs):
        raise BuildFailed("the build failed")

    def no_cleanup(engine, run):
        raise EngineError("cannot list images: image not known")

    engine.build = failed
    monkeypatch.setattr(pipeline, "remove_run", no_cleanup)
    with pytest.raises(EngineError):
        build_image(engine, ngc_plan("python", tag="team/triton:1"))
    assert len(made) == 2 and not any(folder.exists() for folder in made)
    assert [record.folders for record in locks.run_records()] == [()]  # the record stays, naming no folder
    assert str(made[0]).startswith(tempfile.gettempdir())


def test_an_unchanged_build_takes_its_recorded_image_and_smoke_test_and_no_cache_does_neither(engine, ngc_plan,
                                                                                          monkeypatch):
    served = []
    monkeypatch.setattr(pipeline, "smoke_test", lambda *a, **k: served.append(a[1]) or _report(True, a[1]))
    plan = ngc_plan("python", tag="team/triton:1")
    first = build_image(engine, plan)
    assert len(engine.builds) == 1 and served == [COMPOSED] and first.smoke.recorded_at is None
    lines = []
    again = build_image(engine, plan, on_line=lines.append)
    assert len(engine.builds) == 1 and served == [COMPOSED]  # nothing built, nothing served again
    assert again.image_id == COMPOSED and again.smoke.recorded_at and again.tag == "team/triton:1"
    assert any(line.startswith("unchanged: ") for line in lines)
    assert not [ref for ref in engine.images if records.is_hold(ref)]  # the run let go of its hold
    build_image(engine, plan, smoke_always=True)
    assert len(engine.builds) == 1 and served == [COMPOSED] * 2  # served again, not built again
    build_image(engine, plan, cache=False)
    assert len(engine.builds) == 2 and engine.builds[-1]["nocache"] and served == [COMPOSED] * 3
    other = ngc_plan("python", tag="team/triton:1", labels=(("a", "b"),))  # another input: built again
    build_image(engine, other)
    assert len(engine.builds) == 3


@pytest.mark.parametrize("takes_cache_from", [True, False])
def test_a_no_cache_build_runs_the_steps_its_pruned_base_shares_once_where_the_builder_can(engine, ngc_plan, monkeypatch,
                                                                                          takes_cache_from):
    """--no-cache with a pruned base: the base's build takes no step of the build cache and reports
    the images of its steps; on Docker's builder the composition's build then takes only those
    (cache_from, not nocache), so the collect and decide stages both files hold run once. An engine
    whose cache-from means something else (Podman's: a registry repository) takes no cache twice."""
    from composer.assembly.pruning import PrunedBase

    base_image = "sha256:" + "d" * 64
    asked = []

    def made(engine, plan, context, *, reuse=True, steps=None, **_kwargs):
        asked.append((reuse, steps))
        if steps is not None:
            steps.extend(["1aea9bb71c56", "dcb432d6c834"])  # what the base's build reported
        engine.images[base_image] = base_image
        return PrunedBase(base_image, "triton-composer/pruned-base:24.09-test", "key", made=True, seconds=1.0)

    def assembled(engine, plan, built, base, context, layers, key, run, labels, on_line, reuse=False, **_kwargs):
        engine.images[COMPOSED] = COMPOSED
        engine.images[records.hold_tag(run)] = COMPOSED
        return Assembled(COMPOSED, b"{}", OLD, (), (), ()), "{}"

    class Files:  # the base's parts the composer wrote and loaded (composer.assembly.assemble.assemble_files)
        image_id, config, layers, hold = "sha256:" + "f" * 64, b"{}", (), None

    monkeypatch.setattr(pipeline, "pruned_base", made)
    monkeypatch.setattr(pipeline, "_assemble", assembled)
    monkeypatch.setattr(pipeline, "_sources", lambda *a, **k: Sources({}, "full", {}, Path("context")))
    monkeypatch.setattr(pipeline, "assemble_files", lambda *a, **k: Files())
    monkeypatch.setattr(pipeline, "smoke_test", lambda *a, **k: _report(True, a[1]))
    engine.takes_cache_from = takes_cache_from
    plan = ngc_plan("python", tag="team/triton:1", base="pruned")
    build_image(engine, plan, cache=False, check_space=False)
    assert asked[0][0] is False  # the base made again, from scratch
    if takes_cache_from:  # in two around the files, each taking what the run's builds made before it
        assert asked[0][1][:2] == ["1aea9bb71c56", "dcb432d6c834"]
        parts, rest = engine.builds[-2:]
        assert not parts["nocache"] and parts["cache_from"] == ("1aea9bb71c56", "dcb432d6c834")
        assert not rest["nocache"] and rest["cache_from"][:2] == ("1aea9bb71c56", "dcb432d6c834")
        assert rest["dockerfile"] == pipeline.ON_FILES_DOCKERFILE and parts["steps"] is rest["steps"] is asked[0][1]
    else:
        assert asked[0][1] is None and len(engine.builds) == 1
        assert engine.builds[-1]["nocache"] and "cache_from" not in engine.builds[-1]


def test_several_builders_share_the_sets_and_one_that_goes_takes_no_more(monkeypatch):
    """--builder twice: each set is built once, on one of its builders, its lines marked with its name;
    a builder that fails a set and stops answering takes no more, and the others finish the run."""
    import dataclasses
    import threading
    import time

    from composer.core.errors import BuildFailed, EngineUnavailable
    from composer.pipeline import Outcome, compose_all

    a, b = "buildkit://unix:///run/a.sock", "buildkit://unix:///run/b.sock"
    specs = [dataclasses.replace(s, name=f"set{n}") for n, s in
             enumerate([spec(backends=("python",), version="24.09", builders=(a, b))] * 4)]
    taken, lines, lock = [], [], threading.Lock()

    def fake_compose(engine, one, catalog, run, *, inspection=None, builder=None):
        run.on_line("building")
        with lock:
            taken.append((builder, one.name))
        time.sleep(0.05)
        if builder == b:
            raise BuildFailed(f"the build failed on BuildKit at {builder}: connection refused")
        return Outcome(one)

    from composer.engine.buildkit import BuildKit

    class Checked(BuildKit):  # the real answers(), over a check() that says what the test wants
        def __init__(self, builder, engine, cache=None, tls=None):
            self.builder = builder

        def check(self):
            if self.builder == b:
                raise EngineUnavailable("no BuildKit answers at unix:///run/b.sock")

    monkeypatch.setattr(pipeline, "compose", fake_compose)
    monkeypatch.setattr(pipeline, "BuildKit", Checked)
    outcomes = compose_all(FakeEngine(), specs, Catalog.load(), Run(on_line=lines.append))
    assert [o.spec.name for o in outcomes] == ["set0", "set1", "set2", "set3"]
    assert sorted(name for _, name in taken) == ["set0", "set1", "set2", "set3"]  # each once
    assert [builder for builder, _ in taken].count(b) == 1  # b failed once, then stopped taking
    failed = [o for o in outcomes if o.error is not None]
    assert len(failed) == 1 and "connection refused" in failed[0].error.message
    assert f"{b} stopped answering: it takes no more sets" in lines
    assert any(line.startswith("[set") and line.endswith("] building") for line in lines)


def test_a_set_file_names_one_builder_or_several(tmp_path):
    from composer.config.sets import load_set

    one = tmp_path / "one.yaml"
    one.write_text('version: "24.09"\nbackends: [python]\nbuilder: buildkit://unix:///run/a.sock\n')
    two = tmp_path / "two.yaml"
    two.write_text('version: "24.09"\nbackends: [python]\nbuilder: [engine, "buildkit://tcp://10.0.0.2:1234"]\n')
    assert load_set(one, {}).result.builders == ("buildkit://unix:///run/a.sock",)
    assert load_set(two, {}).result.builders == ("engine", "buildkit://tcp://10.0.0.2:1234")
    bad = tmp_path / "bad.yaml"
    bad.write_text('version: "24.09"\nbackends: [python]\nbuilder: [engine, engine]\n')
    with pytest.raises(UsageError, match="bad.yaml:3: builder: 'engine' is listed twice"):
        load_set(bad, {})
    # buildx's docker-container builders, by their container's name (buildx_buildkit_BUILDER0).
    three = tmp_path / "three.yaml"
    three.write_text('version: "24.09"\nbackends: [python]\nbuilder: buildkit://docker-container://buildx_buildkit_ci0\n')
    assert load_set(three, {}).result.builders == ("buildkit://docker-container://buildx_buildkit_ci0",)
    for wrong in ("buildkit://docker-container://", "buildkit://docker-container://a b", "buildkit://docker-container://-x"):
        bad.write_text(f'version: "24.09"\nbackends: [python]\nbuilder: "{wrong}"\n')
        with pytest.raises(UsageError, match="bad.yaml:3: builder: .* is not a builder: give engine, .*"
                                             "buildkit://docker-container://NAME"):
            load_set(bad, {})


def test_a_builder_that_runs_out_of_space_is_named_not_the_engine(engine, ngc_plan):
    """BuildKit's disk is not the engine's: a full one is one line naming the builder."""
    from composer.core.errors import BuildFailed, NoSpace

    class Full:
        def where(self):
            return "BuildKit at unix:///run/bk.sock"

        def build(self, context, **kwargs):
            raise BuildFailed("the build failed on BuildKit at unix:///run/bk.sock: write /var/lib/buildkit/x: "
                              "no space left on device")

    engine.images["team/triton:1"] = OLD
    with pytest.raises(NoSpace) as stopped:
        build_image(engine, ngc_plan("python", tag="team/triton:1"), check_space=False, builder=Full())
    assert stopped.value.message.startswith("no space left on device on BuildKit at unix:///run/bk.sock")
    assert "composer cache clear --builder buildkit://unix:///run/bk.sock" in stopped.value.message
    assert engine.images == {"team/triton:1": OLD}


def test_on_docker_the_build_is_in_two_around_the_files_the_composer_loads(ngc_plan, monkeypatch):
    """The stages the parts come from first (to parts_stage); then the composer's image of the base
    and the first parts (held by the run) and the stages after them FROM it (ON_FILES_DOCKERFILE,
    COMPOSED_FILES its id); the composed image takes its layers as they are. Its hold goes after;
    with --no-cache, one build of the Dockerfile as it is."""
    from composer.assembly.assemble import Files
    from composer.render.render import ON_FILES_DOCKERFILE, parts_stage

    files_id = "sha256:" + "f" * 64
    seen: dict = {}

    class OnFiles(BuildingEngine):
        builds_on_files = True

    engine = OnFiles.with_images("team/triton:1", answer=RunResult(0, recorded_facts()))
    plan = ngc_plan("onnxruntime", "python", tag="team/triton:1")
    engine.images[plan.min.id or plan.min.ref] = plan.min.id or "sha256:" + "9" * 64

    def files(engine, plan, base, sources, folder, **kwargs):
        hold = records.hold_tag(kwargs["run"], records.FILES)
        engine.images[hold] = engine.images[files_id] = files_id
        seen["run"] = kwargs["run"]
        return Files(files_id, b"{}", (), hold)

    def assembled(engine, plan, built, base, context, layers, key, run, labels, on_line, reuse=False, files=None,
                  stages=None):
        seen["files"], seen["stages"] = files, stages
        assert (context.directory / ON_FILES_DOCKERFILE).is_file()
        engine.images[COMPOSED] = engine.images[records.hold_tag(run)] = COMPOSED
        return Assembled(COMPOSED, b"{}", OLD, (), (), ()), "{}"

    monkeypatch.setattr(pipeline, "assemble_files", files)
    found = {"collected": "sha256:" + "c" * 64}
    monkeypatch.setattr(pipeline, "_sources", lambda *args, **kwargs: Sources(found, plan.full.id, {}, None))
    monkeypatch.setattr(pipeline, "_assemble", assembled)
    monkeypatch.setattr(pipeline, "smoke_test", lambda *a, **k: _report(True))
    result = build_image(engine, plan)
    first, second = engine.builds
    assert first["target"] == parts_stage(plan) == "collected" and first["dockerfile"] == "Dockerfile"
    assert second["dockerfile"] == ON_FILES_DOCKERFILE and second["buildargs"]["COMPOSED_FILES"] == files_id
    assert "target" not in second and seen["files"].image_id == files_id and result.image_id == COMPOSED
    assert seen["stages"] == found  # the stages found for the first layers are not looked up again
    assert records.hold_tag(seen["run"], records.FILES) not in engine.images  # the composed image holds its layers
    engine.builds = []
    monkeypatch.setattr(pipeline, "_assemble", lambda *args, **kwargs: (Assembled(COMPOSED, b"{}", OLD, (), (), ()),
                                                                         "{}"))
    build_image(engine, plan, cache=False)
    assert [b.get("dockerfile") for b in engine.builds] == ["Dockerfile"] and engine.builds[0]["nocache"]
