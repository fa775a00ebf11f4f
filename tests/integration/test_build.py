"""`composer build` end to end: the real engine, the stand-in images, a real Triton server."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest

from tests.cli import composer, image_json

from composer.catalog.catalog import Catalog
from composer.core.errors import SmokeTestFailed
from composer.pipeline import build_image
from composer.resolve.resolve import resolve
from tests.specs import spec

pytestmark = pytest.mark.integration

REGISTRY = "localhost/standin"
from tests.conftest import TEST_LABEL  # swept by the engine fixture at session end


@pytest.fixture
def test_tag(engine):
    """A tag of this test's own; whatever it names at the end is removed."""
    tag = f"triton-composer-test/tritonserver:{uuid.uuid4().hex[:10]}"
    yield tag
    engine.remove_image(tag, force=True)


def test_build_onnxruntime_python_offline_and_smoke(engine, standin_images, test_tag):
    options = spec(backends=("onnxruntime", "python"), version="24.09", registry=REGISTRY, tag=test_tag)
    resolved = resolve(engine, options, Catalog.load())
    plan, inspection = resolved.plan, resolved.inspection
    assert {"identity", "pytorch"} <= set(inspection.contents.names("backend"))

    result = build_image(engine, plan, labels=TEST_LABEL)  # no network in the build

    assert result.tag == test_tag
    assert engine.image(test_tag).id == result.image_id
    assert result.smoke is not None and result.smoke.passed
    statuses = {(row.subject, row.status) for row in result.smoke.rows}
    assert ("onnxruntime", "PASS") in statuses and ("python", "PASS") in statuses
    assert ("backends", "PASS") in statuses

    listing = engine.run_once(test_tag, ["ls", "-1", "/opt/tritonserver/backends"], entrypoint=[])
    assert sorted(listing.output.split()) == ["onnxruntime", "python"]  # pytorch, identity absent
    record = json.loads(
        engine.run_once(test_tag, ["cat", "/opt/tritonserver/composition.json"], entrypoint=[]).output
    )
    assert record["release"] == "24.09" and record["backends"] == ["onnxruntime", "python"]
    assert record["base_images"]["full"]["id"] == standin_images.full_id
    # Nothing to compile with, no package manager caches, no pip in the result.
    probe = engine.run_once(
        test_tag,
        ["sh", "-c", "command -v gcc cc clang pip pip3; ls /var/cache/apt/archives/*.deb 2>/dev/null; "
                     "python3 -c 'import pip' 2>/dev/null && echo pip-module; true"],
        entrypoint=[],
    )
    assert probe.output.strip() == ""

    composed = engine.image(test_tag).size
    full = engine.image(standin_images.full_ref).size
    assert composed < full
    assert _written_at_start(engine, test_tag) == []


SAMPLES = Path(__file__).resolve().parents[2] / "composer" / "verify" / "samples" / "models"
START = r"""touch /tmp/before-start; sleep 1
tritonserver --model-repository=/tmp/models --log-verbose=0 >/tmp/server.log 2>&1 & server=$!
python3 - <<'PY'
import time, urllib.request
for _ in range(600):
    try:
        if urllib.request.urlopen("http://127.0.0.1:8000/v2/health/ready", timeout=1).status == 200:
            break
    except Exception:
        time.sleep(0.1)
else:
    raise SystemExit("not ready: " + open("/tmp/server.log").read()[-2000:])
PY
kill $server; wait $server
find / -xdev -path /tmp/models -prune -o -newer /tmp/before-start \( -name '*.pyc' -o -name 'ld.so.cache' \) -print
"""


def _written_at_start(engine, tag: str) -> list[str]:
    """What the server's start wrote that the image should have held already: python byte-code
    compiled at start (the stub imports numpy and the backend's utilities) or a loader cache. The
    models' own byte-code (a mounted repository) is the models', not the image's."""
    files = {f"/tmp/models/{name}/{path.relative_to(SAMPLES / name)}": path.read_bytes()
             for name in ("add_sub", "onnx_affine") for path in (SAMPLES / name).rglob("*") if path.is_file()}
    done = engine.run_once(tag, ["sh", "-c", START], entrypoint=[], files=files, labels=TEST_LABEL, timeout=300)
    assert done.exit_code == 0, done.output
    return done.output.split()


def test_cli_build_python_only_json(engine, standin_images, test_tag):
    run = composer("build", "--registry", REGISTRY, "--version", "24.09", "--backend", "python",
                   "--tag", test_tag, "--json")
    assert run.returncode == 0, run.stderr
    payload = image_json(run.stdout)
    assert payload["tag"] == test_tag
    assert payload["backends"] == ["python"]
    assert payload["smoke_test"]["passed"] is True
    assert payload["base_images"]["min"]["ref"] == f"{REGISTRY}/tritonserver:24.09-py3-min"
    assert payload["size"] > 0
    assert payload["status"] == "built" and json.loads(run.stdout)["summary"] == {"images": 1, "failed": 0, "passed": 1}
    # Progress a person reads: no engine step lines without --verbose, and a layer count that adds up.
    assert not [line for line in run.stderr.splitlines() if line.lstrip().startswith(("Step ", "---> ", "prune: "))]
    # each layer written, or held by the engine already (the same parts as another image's: not written again);
    # or, when a test beside this one composed the selection first, the image taken as it is, in one line
    counts = re.findall(r"^(?:writing )?layer (\d+) of (\d+): (.*)", run.stderr, re.M)
    if not counts:
        assert re.search(r"^unchanged: sha256:\w+, composed before from the same inputs", run.stderr, re.M), run.stderr
        return
    # Another test's clean-up may take the image holding a layer the engine held (CI met it once): the
    # composer writes those layers after all, each in a line of its own, or loads the image whole.
    whole = "note: a layer the engine held went while the image loaded (another run removed it): loading it whole"
    if whole in run.stderr:
        counts = re.findall(r"^(?:writing )?layer (\d+) of (\d+): (.*)", run.stderr.rsplit(whole, 1)[1], re.M)
    again = [c for c in counts if c[2].endswith("(the image that held it was removed meanwhile)")]
    held = {n for n, _, what in counts if what.endswith("the engine holds it already")}
    assert {n for n, _, _ in again} <= held, run.stderr[-3000:]
    counts = [c for c in counts if c not in again]
    assert counts[-1][0] == counts[-1][1] and [int(n) for n, _, _ in counts] == list(range(1, len(counts) + 1)), \
        run.stderr[-3000:]
    assert not [what for _, _, what in counts if what.startswith("server server")]


def test_failed_smoke_test_keeps_previous_tag(engine, standin_images, test_tag, tmp_path):
    catalog = Catalog.load()
    good = resolve(  # (its own smoke test would tell nothing here: the tag is what counts)
        engine, spec(backends=("identity",), version="24.09", registry=REGISTRY, tag=test_tag, smoke_test=False),
        catalog).plan
    before = build_image(engine, good, labels=TEST_LABEL).image_id

    # An identity backend that answers wrong: the composition builds, but must not serve.
    broken = tmp_path / "identity"
    broken.mkdir()
    (broken / "model.py").write_text(
        "import numpy as np\n"
        "import triton_python_backend_utils as pb_utils\n"
        "class TritonPythonModel:\n"
        "    def execute(self, requests):\n"
        "        out = []\n"
        "        for r in requests:\n"
        "            x = pb_utils.get_input_tensor_by_name(r, 'INPUT0').as_numpy()\n"
        "            out.append(pb_utils.InferenceResponse([pb_utils.Tensor('OUTPUT0', x + 1)]))\n"
        "        return out\n"
    )
    bad = resolve(
        engine,
        spec(backends=("python",), custom_backends=(("identity", broken),), version="24.09",
                     registry=REGISTRY, tag=test_tag),
        catalog,
    ).plan
    with pytest.raises(SmokeTestFailed) as failure:
        build_image(engine, bad, labels=TEST_LABEL)
    assert "identity" in failure.value.message
    assert engine.image(test_tag).id == before


def test_tensorrt_is_not_in_the_standin(standin_images):
    run = composer("build", "--registry", REGISTRY, "--version", "24.09", "--backend", "tensorrt")
    assert run.returncode != 0
    lines = run.stderr.strip().splitlines()
    assert "unknown backend 'tensorrt'" in lines[-1]
    assert "localhost/standin/tritonserver:24.09-py3" in lines[-1]
    assert "Traceback" not in run.stderr


def test_unknown_backend_suggests(standin_images):
    run = composer("render", "-o", "/tmp/unused-ctx", "--registry", REGISTRY, "--version", "24.09", "-b", "onnx")
    assert run.returncode == 2
    assert "did you mean 'onnxruntime'" in run.stderr
    assert "Traceback" not in run.stderr


def test_engine_down_is_one_line(tmp_path):
    run = composer("build", "--version", "24.09", "-b", "python",
                   env={"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"})
    assert run.returncode != 0
    assert run.stderr.strip().count("\n") == 0, run.stderr
    assert "no Docker engine answers" in run.stderr and "ensure-docker" in run.stderr


def test_smoke_test_command_on_user_models(engine, standin_images, test_tag, tmp_path):
    plan = resolve(
        engine, spec(backends=("python",), version="24.09", registry=REGISTRY, tag=test_tag, smoke_test=False),
        Catalog.load(),
    ).plan
    build_image(engine, plan, labels=TEST_LABEL)
    repo = tmp_path / "models"
    model = repo / "broken" / "1"
    model.mkdir(parents=True)
    (repo / "broken" / "config.pbtxt").write_text('backend: "python"\nmax_batch_size: 0\n'
                                                   'input [{name: "X", data_type: TYPE_FP32, dims: [1]}]\n'
                                                   'output [{name: "Y", data_type: TYPE_FP32, dims: [1]}]\n')
    (model / "model.py").write_text("raise RuntimeError('cannot load')\n")
    run = composer("smoke-test", test_tag, "--model-repository", str(repo))
    assert run.returncode != 0
    assert "broken" in run.stderr and "FAIL" in run.stderr
