"""Python packages for python models: wheelhouse builds with no network, pins, secrets."""

from __future__ import annotations

import io
import json
import os
import tarfile
import uuid
from pathlib import Path

import pytest

from tests.cli import composer

from composer.catalog.catalog import Catalog
from composer.pipeline import build_image
from composer.resolve.resolve import resolve
from composer.config.types import Packages
from tests.specs import spec
from composer.config.cases import TensorData
from composer.verify.triton_client import TritonHTTP
from composer.verify.samples import load_samples

pytestmark = pytest.mark.integration

REGISTRY = "localhost/standin"
from tests.conftest import TEST_LABEL  # swept by the engine fixture at session end
TOKEN = "s3cr3t-" + uuid.uuid4().hex  # planted in the index URL; must show up nowhere
CA_MARK = "ca-key-material-" + uuid.uuid4().hex
MODELS = Path(__file__).parent / "models"
# pip settings of this machine (extra indexes, find-links) would otherwise find the wheel anyway.
ONLY_THE_GIVEN_INDEX = {"PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": " ", "PIP_EXTRA_INDEX_URL": " ",
                        "PIP_RETRIES": "0", "PIP_TIMEOUT": "3"}


@pytest.fixture(scope="module")
def wheelhouse(standin_images, tmp_path_factory):
    """Made by `composer wheels` on the host: the only source the builds below may use."""
    folder = tmp_path_factory.mktemp("wheelhouse")
    run = composer("wheels", "-o", str(folder), "--registry", REGISTRY, "--version", "24.09",
                   "--pip", "packaging", "--pip", "six", "--json")
    assert run.returncode == 0, run.stderr
    names = json.loads(run.stdout)["wheels"]
    assert any(n.startswith("packaging-") for n in names) and any(n.startswith("pip-") for n in names)
    return folder


@pytest.fixture
def tag(engine):
    name = f"triton-composer-test/tritonserver:pkg-{uuid.uuid4().hex[:10]}"
    yield name
    engine.remove_image(name, force=True)


def test_wheelhouse_build_serves_bls_model_using_added_package(engine, wheelhouse, tag):
    options = spec(
        backends=("python",), version="24.09", registry=REGISTRY, tag=tag,
        packages=Packages(specs=("packaging", "six"), wheelhouse=wheelhouse),
    )
    plan = resolve(engine, options, Catalog.load()).plan
    result = build_image(engine, plan, labels=TEST_LABEL)  # the build has no network

    rows = {(r.subject, r.model): r for r in result.smoke.rows}
    assert rows[("package", "packaging")].status == "PASS"
    assert rows[("package", "six")].status == "PASS"

    record = json.loads(engine.run_once(tag, ["cat", "/opt/tritonserver/composition.json"], entrypoint=[]).output)
    assert {p["name"] for p in record["packages"]} == {"packaging", "six"}
    assert all(p["version"] for p in record["packages"])

    leftovers = engine.run_once(
        tag, ["sh", "-c", "find / -xdev \\( -name '*.whl' -o -path '*/.cache/pip*' -o -name 'pip' \\) "
                          "-not -path '/proc/*' 2>/dev/null; python3 -c 'import pip' 2>/dev/null && echo pip-module; true"],
        entrypoint=[],
    )
    assert leftovers.output.strip() == ""

    add_sub = next(s for s in load_samples() if s.model == "add_sub")
    container = engine.start(
        tag, ["tritonserver", "--model-repository=/models"], ports=[8000], labels=TEST_LABEL, shm_size="512m",
        files={"/models/add_sub": add_sub.path, "/models/bls_scaled": MODELS / "bls_scaled"},
    )
    try:
        client = TritonHTTP(f"http://127.0.0.1:{container.host_port(8000)}")
        assert client.wait_ready(120, container.running), container.logs(tail=30)
        a = TensorData("INPUT0", "FP32", (4,), (1.0, 2.0, 3.0, 4.0))
        b = TensorData("INPUT1", "FP32", (4,), (0.5, 0.5, 0.5, 0.5))
        out = client.infer("bls_scaled", [a, b])["OUTPUT0"]
        assert list(out.data) == [4.5, 7.5, 10.5, 13.5]  # (a + b) * Version("3.1").major
    finally:
        container.remove()


def test_missing_wheel_is_one_line(wheelhouse):
    run = composer("build", "--registry", REGISTRY, "--version", "24.09", "-b", "python",
                   "--pip", "idna", "--wheelhouse", str(wheelhouse))
    assert run.returncode != 0
    last = run.stderr.strip().splitlines()[-1]
    assert "no wheel for idna" in last and str(wheelhouse) in last
    assert "Traceback" not in run.stderr


def test_numpy_2_is_refused_on_24_09(standin_images, tmp_path):
    run = composer("wheels", "-o", str(tmp_path), "--registry", REGISTRY, "--version", "24.09",
                   "--pip", "numpy==2.0.0")
    assert run.returncode != 0
    last = run.stderr.strip().splitlines()[-1]
    assert "numpy==2.0.0" in last and "numpy<2" in last


def test_unversioned_numpy_is_held_to_the_pin(standin_images, tmp_path):
    run = composer("wheels", "-o", str(tmp_path), "--registry", REGISTRY, "--version", "24.09",
                   "--pip", "numpy", "--json")
    assert run.returncode == 0, run.stderr
    numpy = [n for n in json.loads(run.stdout)["wheels"] if n.startswith("numpy-")]
    assert numpy and numpy[0].split("-")[1].startswith("1.")


def test_planted_token_lands_nowhere(engine, wheelhouse, tag, tmp_path):
    index = f"https://build-bot:{TOKEN}@127.0.0.1:9/simple"
    ca = tmp_path / "corporate-ca.pem"  # trusted by the install step only: must not reach the image
    ca.write_text(f"-----BEGIN CERTIFICATE-----\n{CA_MARK}\n-----END CERTIFICATE-----\n")
    context = tmp_path / "context"
    render = composer("render", "-o", str(context), "--registry", REGISTRY, "--version", "24.09", "-b", "python",
                      "--pip", "six", "--wheelhouse", str(wheelhouse), "--pip-index-url", index, "--json")
    assert render.returncode == 0, render.stderr
    build = composer("build", "--registry", REGISTRY, "--version", "24.09", "-b", "python", "--pip", "six",
                     "--wheelhouse", str(wheelhouse), "--ca-cert", str(ca), "--tag", tag, "--no-smoke-test", "--json",
                     env={"COMPOSER_PIP_INDEX_URL": index})
    assert build.returncode == 0, build.stderr

    texts = [render.stdout, render.stderr, build.stdout, build.stderr]
    texts += [p.read_text(errors="replace") for p in context.rglob("*") if p.is_file() and p.suffix != ".whl"]
    for text in texts:
        assert TOKEN not in text

    # Every layer and the config of the composed image.
    engine.save([tag], tmp_path / "image.tar")
    with tarfile.open(tmp_path / "image.tar") as outer:
        for member in outer.getmembers():
            if not member.isfile():
                continue
            data = outer.extractfile(member).read()
            assert TOKEN.encode() not in data, member.name
            assert CA_MARK.encode() not in data, member.name
            if member.name.endswith(".tar"):
                with tarfile.open(fileobj=io.BytesIO(data)) as layer:
                    for item in layer.getmembers():
                        if item.isfile():
                            content = layer.extractfile(item).read()
                            assert TOKEN.encode() not in content, item.name
                            assert CA_MARK.encode() not in content, item.name
    history = json.dumps(engine.history(tag))
    assert TOKEN not in history


def test_token_in_failed_download_is_redacted(standin_images, tmp_path):
    index = f"http://build-bot:{TOKEN}@127.0.0.1:9/simple"
    run = composer("wheels", "-o", str(tmp_path), "--registry", REGISTRY, "--version", "24.09", "--pip", "six",
                   "--pip-index-url", index, env=ONLY_THE_GIVEN_INDEX)
    assert run.returncode != 0
    assert TOKEN not in run.stderr + run.stdout
