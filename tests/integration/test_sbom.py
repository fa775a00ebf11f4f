"""The SBOM of a composed image, against the image itself: one image composed once for the module
(the CLI, as a user runs it), its document read back from the image, the engine and the files."""

from __future__ import annotations

import json
import uuid

import pytest

from composer.sbom import SBOM_PATH, validate
from tests.cli import composer

pytestmark = pytest.mark.integration

EPOCH = "1700000000"
BUILD = ("build", "--registry", "localhost/standin", "--version", "24.09", "-b", "onnxruntime", "-b", "python")


@pytest.fixture(scope="module")
def composed(engine, standin_images, tmp_path_factory):
    """One composed image (smoke-tested), its --json answer and its --sbom file."""
    folder = tmp_path_factory.mktemp("sbom")
    tag = f"triton-composer-test/sbom:{uuid.uuid4().hex[:10]}"
    run = composer(*BUILD, "--tag", tag, "--sbom", folder / "first.cdx.json", "--json",
                   env={"SOURCE_DATE_EPOCH": EPOCH})
    try:
        assert run.returncode == 0, run.stderr[-2000:]
        yield tag, json.loads(run.stdout), folder
    finally:
        engine.remove_image(tag, force=True)


def _in_image(engine, tag: str, script: str) -> str:
    done = engine.run_once(tag, ["sh", "-c", script], entrypoint=[])
    assert done.exit_code == 0, done.output
    return done.output


def test_the_image_holds_a_valid_sbom_that_the_file_and_json_repeat(engine, composed):
    tag, payload, folder = composed
    held = _in_image(engine, tag, f"cat {SBOM_PATH}")
    assert validate(held) is None
    assert (folder / "first.cdx.json").read_text() == held
    assert payload["sbom"] == json.loads(held) and payload["sbom_path"] == SBOM_PATH
    assert payload["smoke_test"]["passed"] is True  # the image with its SBOM layer serves
    labels = engine.image(tag).labels
    assert labels["org.triton-composer.sbom"] == SBOM_PATH
    numpy = _in_image(engine, tag, "python3 -c 'import numpy; print(numpy.__version__)'").strip()
    assert labels["org.triton-composer.numpy.version"] == numpy


def test_the_sbom_names_every_installed_package_and_nothing_absent(engine, composed):
    tag, payload, _ = composed
    listed = _in_image(engine, tag, "dpkg-query -W -f '${db:Status-Abbrev} ${Package}\\n'")
    installed = {line.split()[1] for line in listed.splitlines() if line.startswith("ii")}
    components = payload["sbom"]["components"]
    named = {c["name"] for c in components if c.get("purl", "").startswith("pkg:deb/")}
    assert installed and named == installed


def test_the_sbom_names_numpy_as_installed_and_exactly_the_selected_backends(engine, composed):
    tag, payload, _ = composed
    components = payload["sbom"]["components"]
    numpy = _in_image(engine, tag, "python3 -c 'import numpy; print(numpy.__version__)'").strip()
    assert [c["version"] for c in components if c["name"] == "numpy"] == [numpy]
    folders = set(_in_image(engine, tag, "ls -1 /opt/tritonserver/backends").split())
    backends = {c["name"] for c in components if c.get("group") == "triton.backend"}
    assert backends == folders == {"onnxruntime", "python"}


def test_two_builds_of_one_composition_give_the_same_bytes(engine, composed):
    tag, _, folder = composed
    again = composer(*BUILD, "--tag", tag, "--sbom", folder / "second.cdx.json", "--no-smoke-test",
                     env={"SOURCE_DATE_EPOCH": EPOCH})
    assert again.returncode == 0, again.stderr[-2000:]
    assert (folder / "second.cdx.json").read_bytes() == (folder / "first.cdx.json").read_bytes()
    # An existing file the composer did not write is refused before any work.
    foreign = folder / "notes.json"
    foreign.write_text("{}")
    refused = composer(*BUILD, "--tag", tag, "--sbom", foreign, "--no-smoke-test")
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "--sbom" in refused.stderr and "did not write" in refused.stderr and foreign.read_text() == "{}"
