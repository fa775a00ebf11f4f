"""Shared fixtures: the Docker engine, the 24.09 stand-in images, cleanup of test containers."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import uuid
from pathlib import Path

import pytest

from composer.catalog.catalog import Catalog
from composer.engine.connect import connect
from composer.engine.interface import Engine
from composer.core.errors import EngineUnavailable

# Every container (and image) a test makes carries this label, so the session can sweep them.
# The value names this run, so two test runs sharing one engine never sweep each other's; the
# workers of one run (pytest -n, xdist) inherit it from the controller through the environment.
TEST_LABEL_KEY = "triton-composer.test"
TEST_RUN = os.environ.setdefault("COMPOSER_TEST_RUN", uuid.uuid4().hex[:12])
# An xdist worker: its end is not the run's, whose other workers may still build on the engine;
# the controller sweeps once they all ended (pytest_sessionfinish below).
WORKER = os.environ.get("PYTEST_XDIST_WORKER")
TEST_LABEL = {TEST_LABEL_KEY: TEST_RUN}
STANDIN_RELEASE = "24.09"


@pytest.fixture(scope="session")
def engine() -> Engine:
    """The Docker engine; on CI (env CI set) a missing engine fails the run instead of skipping."""
    try:
        connected = connect(timeout=600)
    except EngineUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set and no Docker engine answers: {exc.message}", pytrace=False)
        pytest.skip(f"no Docker engine: {exc.message}")
    if not WORKER:
        _STAGES_BEFORE.update(_stage_images(connected))
    yield connected
    if not WORKER:
        _remove_test_containers(connected)
        _remove_stage_images(connected, _STAGES_BEFORE)


_STAGES_BEFORE: set[str] = set()  # stage images the engine held when the session started: not ours


def _xdist_controller(config) -> bool:
    return not WORKER and bool(getattr(config.option, "numprocesses", None))


def pytest_sessionstart(session):
    """Under xdist, the controller notes the stage images the engine held before any worker began."""
    if not WORKER:
        _remove_files_of_ended_runs()
    if _xdist_controller(session.config):
        try:
            _STAGES_BEFORE.update(_stage_images(connect(timeout=60)))
        except EngineUnavailable:
            pass  # the workers' engine fixture says so (and fails under CI)


def pytest_sessionfinish(session, exitstatus):
    """Under xdist, the sweep of the whole run, once every worker ended."""
    _write_durations()
    if not WORKER:
        shutil.rmtree(RUN_FILES, ignore_errors=True)
    if _xdist_controller(session.config):
        try:
            engine = connect(timeout=60)
        except EngineUnavailable:
            return
        _remove_test_containers(engine)
        _remove_stage_images(engine, _STAGES_BEFORE)


def free_session_build_cache(engine: Engine) -> None:
    """Remove the stage images this session made so far (room for a test that needs it); not in an
    xdist worker, whose neighbours' builds may stand on them."""
    if not WORKER:
        _remove_stage_images(engine, _STAGES_BEFORE)


def _remove_test_containers(engine: Engine) -> None:
    """Containers and images the tests labelled, whatever became of the tests."""
    from composer.core.errors import ComposerError

    for cid in engine.containers_labelled(f"{TEST_LABEL_KEY}={TEST_RUN}"):
        try:
            engine.remove_container(cid)
        except ComposerError:
            pass
    # In passes: an image that others stand on (a pruned base under a composition's first steps) is
    # only untagged by its name; it goes with the prune of the last image on it, in a later pass.
    seen: list[str] | None = None
    for _ in range(4):
        left = engine.images_labelled(f"{TEST_LABEL_KEY}={TEST_RUN}")
        if not left or left == seen:
            break
        seen = left
        for image_id in left:
            info = engine.image(image_id)
            for ref in [*(info.tags if info else ()), image_id]:
                try:
                    engine.remove_image(ref, force=ref == image_id)
                except ComposerError:
                    pass  # a layer of another image: it goes with that one


def _stage_images(engine: Engine) -> list[str]:
    """Untagged images built on the stand-ins: the stages of multi-stage builds (collect, packages,
    a pruned base's), which the build cache keeps and no test label reaches (the engine puts a
    build's labels on its last image only); and the build steps on a pruned base (FROM scratch: no
    stand-in label) that stay once a test removed the base (CI found one, 107 MB, after a run)."""
    from composer.assembly.pruning import BASE_LABEL
    from triton_standins import LABEL_STANDIN

    return engine.images_labelled(LABEL_STANDIN, untagged=True) + engine.images_labelled(BASE_LABEL, untagged=True)


def _remove_stage_images(engine: Engine, before: set[str]) -> None:
    """The stage images that appeared during the session (GBs over a run), not those it found. Only
    build cache: a run sharing the engine may lose some of its own, never a tagged image."""
    from composer.assembly.pruning import run_of
    from composer.core.errors import ComposerError
    from composer.engine.locks import live_runs

    live = live_runs()  # a build at work on this host (another session's) keeps its stages
    for image_id in _stage_images(engine):
        info = engine.image(image_id)
        if info is not None and run_of(info.labels) in live:
            continue
        if image_id not in before:
            try:
                engine.remove_image(image_id)
            except ComposerError:
                pass  # a parent of another image: it goes with that one


@pytest.fixture(scope="session")
def standin_images(engine: Engine):
    """The 24.09 stand-in images (built once per machine; seconds when present)."""
    from triton_standins import build_standins

    # Progress is dropped: a failure raises BuildFailed carrying the build's last lines.
    return build_standins(engine, Catalog.load().release(STANDIN_RELEASE), on_line=lambda _line: None)


# The run's files that every worker shares (the stand-ins' archive, the upstream registry's storage):
# the controller removes them at the end, once every worker ended (a worker's end is not the run's),
# and a later run those of a run whose process is gone (killed: GBs).
RUN_FILES = Path(os.environ.get("TMPDIR", "/tmp")) / f"triton-composer-test-{TEST_RUN}"
OWNER = "owner.pid"  # in RUN_FILES: the run's main process (an xdist worker's parent)


def run_files() -> Path:
    RUN_FILES.mkdir(parents=True, exist_ok=True)
    (RUN_FILES / OWNER).write_text(str(os.getppid() if WORKER else os.getpid()))
    return RUN_FILES


def _remove_files_of_ended_runs() -> None:
    for folder in RUN_FILES.parent.glob("triton-composer-test-*"):
        try:
            owner = int((folder / OWNER).read_text())
        except (OSError, ValueError):
            continue  # not one of ours, or being made
        if owner != os.getpid() and not Path(f"/proc/{owner}").exists():
            shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def standins_archive(engine: Engine, standin_images) -> Path:
    """The 24.09 stand-ins as one `docker save` archive, for the tests that move them into another
    engine (Podman, the engine in a container, clean dockerds): written once per run, by whichever
    worker comes first (a lock), not once per test (each save reads and checks 1.6 GB: about 30 s
    of the engine's time on a loaded machine). Named by the images' ids: a rebuilt stand-in is
    saved again."""
    ids = [image_id.split(":")[-1][:12] for image_id in (standin_images.full_id, standin_images.min_id)]
    archive = run_files() / f"standins-{'-'.join(ids)}.tar"
    with open(RUN_FILES / "standins.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not archive.exists():
            partial = archive.with_suffix(".partial")
            engine.save([standin_images.full_ref, standin_images.min_ref], partial)
            partial.rename(archive)
    return archive


@pytest.fixture(scope="session")
def ngc_standins(engine: Engine):
    """The NGC-scale 24.09 stand-ins (scripts/test builds them first; seconds when present)."""
    from triton_standins import ngc

    return ngc.build_standins(engine, Catalog.load().release(STANDIN_RELEASE), on_line=lambda _line: None)


@pytest.fixture(scope="session")
def ngc_standins_cuda13(engine: Engine):
    """The NGC-scale 26.07 stand-ins: the CUDA 13 generation (scripts/test builds them first)."""
    from triton_standins import ngc

    return ngc.build_standins(engine, Catalog.load().release(CUDA13_RELEASE), on_line=lambda _line: None)


# The NGC-scale release of the CUDA 13 generation (Ubuntu 24.04 layout, root-owned tree).
CUDA13_RELEASE = "26.07"


@pytest.fixture(scope="session")
def vllm_standin(engine: Engine, ngc_standins):
    """The NGC-scale 24.09 vLLM stand-in (scripts/test builds it first; seconds when present)."""
    from triton_standins import ngc_vllm

    min_info = engine.image(ngc_standins.min_ref)
    assert min_info is not None
    info, _built = ngc_vllm.build_vllm(engine, Catalog.load().release(STANDIN_RELEASE), min_info,
                                       on_line=lambda _line: None)
    return info


# The Ubuntu 24.04 generation's stand-ins the tests use: 25.01 (tree owned by 1000:1000) and
# 26.07 (tree owned by root). scripts/test builds them before the run.
GENERATION_2404_RELEASES = ("25.01", "26.07")


@pytest.fixture(scope="session")
def standins(engine: Engine):
    """release -> its stand-in images (built once per machine; seconds when present)."""
    from triton_standins import build_standins

    built = {}

    def get(release: str):
        if release not in built:
            built[release] = build_standins(engine, Catalog.load().release(release), on_line=lambda _line: None)
        return built[release]

    return get


# -- the NGC-scale tier ------------------------------------------------------------------------
# A test needing an NGC-scale stand-in (9-17 GB images; 2-7 minutes a build) is marked `ngc`, by
# the fixtures it uses: the one rule for which tier a test is in. scripts/test runs the small tier
# (`-m "not ngc"`, every behaviour on the small stand-ins); scripts/test --ngc runs the NGC tier.

NGC_FIXTURES = frozenset({"ngc_standins", "ngc_standins_cuda13", "vllm_standin"})


def pytest_itemcollected(item):
    """`ngc` on each test as it is collected, before pytest's -m reads it."""
    if NGC_FIXTURES & set(getattr(item, "fixturenames", ())):
        item.add_marker(pytest.mark.ngc)


@pytest.fixture(scope="module", autouse=True)
def _ngc_module_leaves_no_build_cache(request):
    """After a module of NGC-scale tests, the stage images its builds left (the build cache by
    content: copies of backend trees of several GB each) go, so the next module has its room (the
    tier needs more than 20 GB besides its 40 GB of stand-ins). Set up before the module's own
    fixtures, so it ends after they removed their images."""
    ngc = any(item.module is request.module and item.get_closest_marker("ngc") for item in request.session.items)
    engine = request.getfixturevalue("engine") if ngc else None
    yield
    if engine is not None:
        free_session_build_cache(engine)  # (not in an xdist worker: its neighbour's builds stand on them)


# -- two workers (scripts/test: pytest -n 2 --dist loadfile --no-loadscope-reorder) --------------
# A worker takes whole files (a file's module fixtures are made once). Files making and removing
# the same small pruned bases share one worker: a neighbour at work would find them made, or gone,
# under it. (xdist's loadgroup would read marks for this, but under pytest 9 the group it puts in a
# test's id does not reach the scheduler: the files were spread test by test.)
WORKER_GROUPS = {
    "tests/integration/test_pruned_base.py": "small pruned bases",
    "tests/integration/test_family_layers.py": "small pruned bases",
    "tests/integration/test_shared_engines.py": "small pruned bases",
}


def _group_of_file(path: str) -> str:
    return WORKER_GROUPS.get(path, path)


def _group_of(item) -> str:
    return _group_of_file(_file_of(item.nodeid))


def pytest_xdist_make_scheduler(config, log):
    """Whole files to a worker, the files of one WORKER_GROUPS group to the same worker."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FileGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _group_of_file(_file_of(nodeid))

    return FileGroups(config, log)


def pytest_collection_modifyitems(config, items):
    groups = {item.nodeid: _group_of(item) for item in items}
    # Longest groups first (--no-loadscope-reorder: workers take groups in this order), so the last
    # group a worker takes is a short one and both end near together.
    estimate: dict[str, float] = {}
    for item in items:
        estimate[groups[item.nodeid]] = estimate.get(groups[item.nodeid], 0.0) + _estimate(item.nodeid)
    first = {}
    for index, item in enumerate(items):
        first.setdefault(groups[item.nodeid], index)
    items.sort(key=lambda item: (-estimate[groups[item.nodeid]], first[groups[item.nodeid]]))


# -- the order of the groups: seconds each file took in a measured run -----------------------------
# tests/durations.json holds the seconds each test file's tests took (setup and teardown included)
# in the last measured run of scripts/test; COMPOSER_TEST_DURATIONS=FILE writes a run's figures there.
DURATIONS_FILE = os.path.join(os.path.dirname(__file__), "durations.json")
_DURATIONS: dict[str, float] | None = None
_SPENT: dict[str, float] = {}


def _file_of(nodeid: str) -> str:
    return nodeid.split("::")[0].split("@")[0]


def _estimate(nodeid: str) -> float:
    """A test's share of its file's measured seconds; a file not measured: 60 s an integration test."""
    global _DURATIONS
    if _DURATIONS is None:
        try:
            with open(DURATIONS_FILE) as handle:
                _DURATIONS = {k: float(v["seconds"]) / max(int(v["tests"]), 1) for k, v in json.load(handle).items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            _DURATIONS = {}
    path = _file_of(nodeid)
    if path in _DURATIONS:
        return _DURATIONS[path]
    return 60.0 if "/integration/" in f"/{path}" else 0.05


def pytest_runtest_logreport(report):
    """Seconds spent per file (setup, call and teardown), for COMPOSER_TEST_DURATIONS."""
    if os.environ.get("COMPOSER_TEST_DURATIONS") and not WORKER:
        path = _file_of(report.nodeid)
        _SPENT[path] = _SPENT.get(path, 0.0) + float(getattr(report, "duration", 0.0) or 0.0)
        if report.when == "call" or (report.when == "setup" and not report.passed):
            _COUNTED[path] = _COUNTED.get(path, 0) + 1


_COUNTED: dict[str, int] = {}


def _write_durations() -> None:
    target = os.environ.get("COMPOSER_TEST_DURATIONS")
    if not target or WORKER or not _SPENT:
        return
    rows = {path: {"seconds": round(_SPENT[path], 1), "tests": _COUNTED.get(path, 0)} for path in sorted(_SPENT)}
    with open(target, "w") as handle:
        json.dump(rows, handle, indent=1, sort_keys=True)
        handle.write("\n")


# -- under CI, a skip is a failure --------------------------------------------------------------
# A skipped test proves nothing, and a run whose skips pass silently can hide the one check that
# matters (a missing engine, too little disk for the NGC-scale checks). Locally a skip stays a skip.


def _skips_fail() -> bool:
    return bool(os.environ.get("CI"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if _skips_fail() and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"CI is set, and under CI a skip fails: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    report = outcome.get_result()
    if _skips_fail() and report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"CI is set, and under CI a skip fails: {reason}"
