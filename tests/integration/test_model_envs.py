"""Per-model python environments: two python models pinning different versions of one package
serve from one composed image, each with its own; a model without requirements sees the
image's python; a package with no wheel for the image fails before the build, named.

One image is composed for the module (24.09 stand-ins, about 40 s) and every assertion shares it.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from composer.catalog.catalog import Catalog
from composer.config.model_envs import ENVS_ROOT
from composer.pipeline import build_image
from composer.resolve.resolve import resolve
from composer.config.cases import TensorData
from composer.verify.triton_client import TritonHTTP
from tests.cli import composer, image_json
from tests.conftest import TEST_LABEL
from tests.specs import spec

pytestmark = pytest.mark.integration

REGISTRY = "localhost/standin"
MODELS = Path(__file__).parent / "models" / "model_envs"  # tabulate_old (0.8.10), tabulate_new (0.9.0), no_env
PINS = {"tabulate_old": "0.8.10", "tabulate_new": "0.9.0"}
EXTRA_PIN = "0.8.10"  # the environment of a model mounted at run time (--model-env)


@pytest.fixture(scope="module")
def composed(engine, standin_images, tmp_path_factory):
    """The image, its build result and plan: baked models with requirements, plus --model-env extra."""
    folder = tmp_path_factory.mktemp("model-envs")
    (folder / "extra-requirements.txt").write_text(f"tabulate=={EXTRA_PIN}\n")
    tag = f"triton-composer-test/tritonserver:envs-{uuid.uuid4().hex[:10]}"
    options = spec(backends=("python",), version="24.09", registry=REGISTRY, tag=tag, samples=False,
                   bake_models=MODELS).with_fields(
        {"selection.model_envs": (("extra", folder / "extra-requirements.txt"),)})
    try:
        plan = resolve(engine, options, Catalog.load(), wheels=folder / "wheels").plan
        result = build_image(engine, plan, labels=TEST_LABEL)  # the build reaches no network
        yield tag, result, plan
    finally:
        engine.remove_image(tag, force=True)


def _answers(engine, tag: str) -> dict[str, dict[str, str]]:
    container = engine.start(tag, ["tritonserver", "--model-repository=/models"], ports=[8000], labels=TEST_LABEL,
                             shm_size="256m")
    try:
        client = TritonHTTP(f"http://127.0.0.1:{container.host_port(8000)}")
        assert client.wait_ready(120, container.running), container.logs(tail=30)
        answers = {}
        for model in ("tabulate_old", "tabulate_new", "no_env"):
            out = client.infer(model, [TensorData("IN", "FP32", (1,), (0.0,))])
            answers[model] = {name: _text(out[name].data[0]) for name in ("TABULATE", "NUMPY")}
        return answers
    finally:
        container.remove()


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def test_each_model_serves_with_its_own_pin_and_the_image_python(engine, composed):
    tag, result, plan = composed
    rows = {r.model: r for r in result.smoke.rows if r.subject == "model"}
    assert {m: rows[m].status for m in ("tabulate_old", "tabulate_new", "no_env")} == dict.fromkeys(
        ("tabulate_old", "tabulate_new", "no_env"), "PASS")
    assert rows["tabulate_old"].request == "1 case"  # its smoke_cases.yaml checks its own version

    image_numpy = engine.run_once(tag, ["python3", "-c", "import numpy; print(numpy.__version__)"],
                                  entrypoint=[]).output.strip()
    answers = _answers(engine, tag)
    assert answers["tabulate_old"]["TABULATE"] == PINS["tabulate_old"]
    assert answers["tabulate_new"]["TABULATE"] == PINS["tabulate_new"]
    assert answers["no_env"]["TABULATE"] == "none"  # the image's python, which has no tabulate
    assert {a["NUMPY"] for a in answers.values()} == {image_numpy}  # numpy as the image has it


def test_environments_are_recorded_pointed_at_and_measured(engine, composed):
    tag, result, plan = composed
    record = json.loads(engine.run_once(tag, ["cat", "/opt/tritonserver/composition.json"], entrypoint=[]).output)
    envs = record["model_envs"]
    assert set(envs) == {"tabulate_old", "tabulate_new", "extra"}
    assert {e["form"] for e in envs.values()} == {"directory"}
    assert envs["tabulate_new"]["requirements"] == ["tabulate==0.9.0"]
    config = engine.run_once(tag, ["cat", "/models/tabulate_new/config.pbtxt"], entrypoint=[]).output
    assert f'string_value: "{ENVS_ROOT}/tabulate_new"' in config and "EXECUTION_ENV_PATH" in config
    listing = engine.run_once(tag, ["sh", "-c", f"ls {ENVS_ROOT}; test -f {ENVS_ROOT}/tabulate_new/bin/activate "
                                                "&& echo activate; find / -xdev -name '*.whl' | head -3"],
                              entrypoint=[]).output.split()
    assert listing == ["extra", "tabulate_new", "tabulate_old", "activate"]  # unpacked, no wheel left behind
    sizes = {p.name: p.size for p in result.sizes.parts if p.kind == "model env"}
    assert set(sizes) == {"tabulate_old", "tabulate_new", "extra"} and all(s > 10_000 for s in sizes.values())
    sbom = json.loads(result.sbom)  # each environment's packages under its model, as installed in it
    envs = {c["name"]: c for c in sbom["components"] if c.get("group") == "triton.model-env"}
    assert set(envs) == {"tabulate_old", "tabulate_new", "extra"}
    for model, version in {**PINS, "extra": EXTRA_PIN}.items():
        assert ("tabulate", version) in {(c["name"].lower(), c["version"]) for c in envs[model]["components"]}


def test_a_mounted_model_runs_in_its_env_by_the_printed_line_and_a_broken_one_names_its_error(
        engine, composed, tmp_path):
    tag, result, plan = composed
    hint = next(n for n in plan.notes if n.startswith("model extra:"))
    line = hint.split("add to its config.pbtxt: ", 1)[1]
    repository = tmp_path / "repository"
    for model, body in (("extra", ""), ("broken", "import docopt  # in no environment\n")):
        (repository / model / "1").mkdir(parents=True)
        source = (MODELS / "no_env" / "1" / "model.py").read_text()
        (repository / model / "1" / "model.py").write_text(body + source)
        config = (MODELS / "no_env" / "config.pbtxt").read_text().replace('"no_env"', f'"{model}"')
        (repository / model / "config.pbtxt").write_text(config + line + "\n")
    (repository / "extra" / "smoke_cases.yaml").write_text(
        "cases:\n  - inputs: [{name: IN, datatype: FP32, shape: [1], data: [0]}]\n"
        f"    expected: [{{name: TABULATE, datatype: BYTES, shape: [1], data: [\"{EXTRA_PIN}\"]}}]\n")
    run = composer("smoke-test", tag, "--model-repository", str(repository), "--no-samples", "--json")
    assert run.returncode != 0
    rows = {r["model"]: r for r in image_json(run.stdout)["smoke_test"]["rows"] if r["subject"] == "model"}
    assert rows["extra"]["status"] == "PASS", rows["extra"]
    assert rows["broken"]["status"] == "FAIL"
    assert "ModuleNotFoundError: No module named 'docopt'" in rows["broken"]["detail"]


def test_a_package_without_a_wheel_for_the_image_fails_before_the_build(standin_images, tmp_path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("docopt==0.6.2\n")  # published as a source distribution only
    run = composer("build", "--registry", REGISTRY, "--version", "24.09", "-b", "python", "--no-smoke-test",
                   "--model-env", f"needs_build={requirements}", "--tag", "triton-composer-test/never:built",
                   "--verbose")
    assert run.returncode == 2, run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert "model needs_build" in last and "docopt" in last and "Traceback" not in run.stderr
    assert "Step 1/" not in run.stdout + run.stderr  # no image work started


def test_composer_wheels_fills_one_wheelhouse_for_every_environment_and_build_checks_it(standin_images, tmp_path):
    """The air-gapped path: `composer wheels` outside, `build --wheelhouse` inside, checked on the
    host against each model's pins before any image work."""
    run = composer("wheels", "-o", str(tmp_path / "wheels"), "--registry", REGISTRY, "--version", "24.09",
                   "--bake-models", str(MODELS), "--json")
    assert run.returncode == 0, run.stderr
    names = json.loads(run.stdout)["wheels"]
    assert {n for n in names if n.startswith("tabulate-")} == {
        f"tabulate-{v}-py3-none-any.whl" for v in PINS.values()}
    (tmp_path / "wheels" / f"tabulate-{PINS['tabulate_old']}-py3-none-any.whl").unlink()
    run = composer("build", "--registry", REGISTRY, "--version", "24.09", "-b", "python", "--no-smoke-test",
                   "--bake-models", str(MODELS), "--wheelhouse", str(tmp_path / "wheels"),
                   "--tag", "triton-composer-test/never:built", "--verbose")
    assert run.returncode == 2, run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("error: model tabulate_old:") and f"tabulate=={PINS['tabulate_old']}" in last
    assert "Step 1/" not in run.stdout + run.stderr
