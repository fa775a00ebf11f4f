"""One resolve step: a composition starts at most one container of the full image before its
build, whatever it asks for (packages fetched on the host, a wheelhouse checked, a render)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from composer.cli import main as cli
from composer.resolve import resolve
from composer.engine.interface import ImageInfo, RunResult
from tests.unit.fake_engine import FACTS_COMMAND, FakeEngine, recorded_facts
from tests.unit.test_contents import PROBE_DOC

FULL = "localhost/standin/tritonserver:24.09-py3"
MIN = "localhost/standin/tritonserver:24.09-py3-min"
BUILT = "sha256:" + "b" * 64
COMPOSED = "sha256:" + "c" * 64


class CountingEngine(FakeEngine):
    """The fake engine with the stand-in's two images; it 'builds' and answers the probe."""

    def build(self, context: Path, **kwargs) -> str:
        self.built_after = len(self.runs) + len(self.starts)  # containers started before the build
        self.images[BUILT] = BUILT
        return BUILT

    def full_containers_before_build(self) -> int:
        before = (self.runs + self.starts)[: getattr(self, "built_after", len(self.runs) + len(self.starts))]
        return sum(1 for run in before if run["image"] == FULL)


def _probe(image: str, command: list[str]) -> RunResult:
    if command[:2] == ["python3", "/tmp/composer_probe.py"]:
        return RunResult(0, json.dumps(PROBE_DOC))
    if command == FACTS_COMMAND:
        return RunResult(0, recorded_facts())
    return RunResult(0, "")


@pytest.fixture
def engine(monkeypatch, tmp_path):
    env = {"NVIDIA_TRITON_SERVER_VERSION": "24.09", "TRITON_SERVER_VERSION": "2.50.0"}
    engine = CountingEngine(
        infos={ref: ImageInfo(id=f"sha256:{i:064x}", ref=ref, tags=(ref,), repo_digests=(), env=env, labels={},
                              size=0) for i, ref in enumerate((FULL, MIN), 1)},
        answer=_probe,
    )
    monkeypatch.setattr(cli, "_engine", lambda: engine)

    def assembled(engine, plan, built, base, context, layers, key, run, labels, on_line, reuse=False):  # tested alone
        from composer.assembly import records
        from composer.assembly.assemble import Assembled

        engine.images[COMPOSED] = COMPOSED
        engine.images[records.hold_tag(run)] = COMPOSED
        return Assembled(COMPOSED, b"{}", "", (), (), ()), "{}"

    monkeypatch.setattr("composer.pipeline._assemble", assembled)

    def download(target, packages, constraints, out, on_line=None):  # the host's pip, without PyPI
        out.mkdir(parents=True, exist_ok=True)
        files = [out / "pip-24.2-py3-none-any.whl", out / "six-1.16.0-py2.py3-none-any.whl"]
        for f in files:
            f.write_bytes(b"wheel")
        return files

    monkeypatch.setattr(resolve, "download_wheels", download)
    monkeypatch.setattr(resolve, "check_wheelhouse", lambda target, packages, constraints: [("six", "1.16.0")])
    monkeypatch.chdir(tmp_path)
    return engine


BASE = ["--version", "24.09", "--registry", "localhost/standin", "--backend", "python"]


def test_build_with_packages_starts_one_full_image_container(engine):
    result = CliRunner().invoke(cli.app, ["build", *BASE, "--pip", "six", "--no-smoke-test", "--tag", "t/x:1"])
    assert result.exit_code == 0, result.output
    assert engine.full_containers_before_build() == 1
    assert engine.images["t/x:1"] == COMPOSED


def test_render_starts_one_full_image_container(engine, tmp_path):
    result = CliRunner().invoke(cli.app, ["render", *BASE, "--pip", "six", "-o", str(tmp_path / "ctx")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "ctx" / "Dockerfile").is_file()
    assert sum(1 for run in engine.runs + engine.starts if run["image"] == FULL) == 1


def _unavailable():
    from composer.core.errors import EngineUnavailable

    raise EngineUnavailable("no engine answers")


def test_render_without_an_engine_plans_from_the_catalog_when_a_release_is_named(tmp_path):
    from composer.catalog.catalog import Catalog
    from composer.core.errors import EngineUnavailable
    from composer.config.types import CompositionSpec

    catalog = Catalog.load()
    spec = CompositionSpec().with_fields({"images.version": "24.09", "selection.backends": ("python",)})
    lines: list[str] = []
    resolved = resolve.resolve_for_render(_unavailable, spec, catalog, wheels=tmp_path, on_line=lines.append)
    assert resolved.inspection is None and "python" in resolved.plan.all_backends
    assert "no Docker engine answers" in lines[0]
    without_release = CompositionSpec().with_fields({"images.full": "x/full:1", "images.min": "x/min:1",
                                                     "selection.backends": ("python",)})
    with pytest.raises(EngineUnavailable):  # nothing to plan from: the engine's absence is the answer
        resolve.resolve_for_render(_unavailable, without_release, catalog, wheels=tmp_path)


def test_render_with_missing_images_falls_back_to_the_catalog(engine, tmp_path):
    from composer.catalog.catalog import Catalog
    from composer.config.types import CompositionSpec

    spec = CompositionSpec().with_fields({"images.version": "24.09", "images.registry": "localhost/elsewhere",
                                          "selection.backends": ("python",)})
    lines: list[str] = []
    resolved = resolve.resolve_for_render(lambda: engine, spec, Catalog.load(), wheels=tmp_path,
                                          on_line=lines.append)
    assert resolved.inspection is None and "catalogued layout instead" in lines[-1]
    assert not engine.runs and not engine.starts  # no container for an image that is not there


def _bundle(tmp_path: Path, engine, spec: dict) -> Path:
    """A bundle of the shape `composer bundle` writes (its images archive empty: never loaded here)."""
    import io
    import tarfile

    from composer.resolve.contents import FullImageContents
    from composer.resolve.resolve import Inspection

    inspection = Inspection(engine.image(FULL), engine.image(MIN), FullImageContents.from_dict(PROBE_DOC, FULL))
    manifest = {"format": 1, "spec": spec, "custom_backends": [], "wheelhouse": False, "bake_models": False,
                "inspection": inspection.to_dict(), "tag": "t:1"}
    archive = tmp_path / "b.tar"
    with tarfile.open(archive, "w") as tar:
        for name, data in (("bundle.json", json.dumps(manifest).encode()), ("images.tar", b"")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return archive


@pytest.mark.parametrize("flags, says", [
    (["--no-samples"], "--no-samples leaves the smoke test nothing to serve"),
])
def test_build_from_a_bundle_is_checked_like_any_build_before_any_engine_call(engine, monkeypatch, tmp_path,
                                                                              flags, says):
    archive = _bundle(tmp_path, engine, {"images.version": "24.09", "images.registry": "localhost/standin",
                                         "selection.backends": ["python"]})
    monkeypatch.setattr(cli, "_engine", lambda: pytest.fail("the engine was asked before the check"))
    result = CliRunner().invoke(cli.app, ["build", "--bundle", str(archive), *flags])
    assert result.exit_code == 2, result.output
    assert says in result.output


@pytest.mark.parametrize("spec, says", [
    ({"images.version": "99.99", "selection.backends": ["python"]}, "unknown Triton release '99.99'"),
    ({"images.version": "24.09", "selection.backends": ["bad name!"]}, "bundle.json: backends[0]:"),
    ({"images.version": "24.09", "selection.backends": ["python"], "result.smoke_test": "yes"},
     "bundle.json: smoke_test: expected true or false"),
    ({"images.version": "24.09", "selection.backends": ["python"], "images.full": "UPPER/Case"},
     "bundle.json: images.full:"),
    ({"images.version": "24.09", "selection.whatever": 1}, "bundle.json: selection.whatever: not a key"),
])
def test_a_bundles_manifest_is_read_and_checked_as_a_set_file_is(engine, monkeypatch, tmp_path, spec, says):
    archive = _bundle(tmp_path, engine, spec)
    monkeypatch.setattr(cli, "_engine", lambda: pytest.fail("the engine was asked before the check"))
    result = CliRunner().invoke(cli.app, ["build", "--bundle", str(archive)])
    assert result.exit_code == 2, result.output
    assert says in result.output and len(result.output.strip().splitlines()) == 1, result.output
