"""The SBOM of a composed image, against the image itself: one image composed once for the module
(the CLI, as a user runs it), its document read back from the image, the engine and the files."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import requests

from composer.verify.sbom import SBOM_PATH, validate
from tests.cli import composer, image_json

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
        yield tag, image_json(run.stdout), folder
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


def test_push_publishes_the_sbom_and_inspect_reads_the_registry_without_pulling(engine, composed, tls_registry,
                                                                               tmp_path, names):
    tag, payload, _ = composed
    reg = tls_registry
    target = f"{reg.host}/composed/sbom:{uuid.uuid4().hex[:8]}"
    names.append(target)
    credentials = tmp_path / "credentials"
    credentials.write_text(f"{reg.username}:{reg.password}\n")
    credentials.chmod(0o600)
    no_login = {"DOCKER_CONFIG": str(tmp_path / "docker"), "SOURCE_DATE_EPOCH": EPOCH}
    pushed = composer(*BUILD, "--tag", tag, "--push", target, "--registry-auth", f"file:{credentials}",
                      "--no-smoke-test", "--json", env=no_login)
    assert pushed.returncode == 0, pushed.stderr[-2000:]
    digest = image_json(pushed.stdout)["pushed"]["digest"]
    sbom_ref = image_json(pushed.stdout)["pushed"]["sbom"]  # by its digest; also under cosign's .sbom tag (below)
    assert sbom_ref.startswith(f"{target.rsplit(':', 1)[0]}@sha256:")

    # Fetched straight from the registry (its API, not the composer's client): the image's own document.
    held = _in_image(engine, tag, f"cat {SBOM_PATH}")
    repository = target.split("/", 1)[1].rsplit(":", 1)[0]
    answer = requests.get(f"{reg.url}/v2/{repository}/manifests/{digest.replace(':', '-')}.sbom",
                          headers={"Accept": "application/vnd.oci.image.manifest.v1+json"},
                          auth=(reg.username, reg.password), verify=reg.verify, timeout=10)
    manifest = answer.json()
    assert manifest["subject"]["digest"] == digest and manifest["artifactType"] == "application/vnd.cyclonedx+json"
    assert answer.headers["Docker-Content-Digest"] == sbom_ref.rsplit("@", 1)[1]  # the same document, by tag or digest
    blob = requests.get(f"{reg.url}/v2/{repository}/blobs/{manifest['layers'][0]['digest']}",
                        auth=(reg.username, reg.password), verify=reg.verify, timeout=10)
    assert blob.content.decode() == held

    # inspect: the registry's copy, trusted through --registry-ca alone (the engine's trust removed),
    # with the credentials given; nothing pulled.
    (Path("/etc/docker/certs.d") / reg.host / "ca.crt").unlink()
    engine.remove_image(target)
    pulled = lambda: sorted(n for n in engine.image_names() if n.startswith(reg.host))  # noqa: E731 (other tests build meanwhile)
    before = pulled()
    inspected = composer("inspect", target, "--registry-ca", reg.ca_cert, "--registry-auth", f"file:{credentials}",
                         "--json", env=no_login)
    assert inspected.returncode == 0, inspected.stderr[-2000:]
    assert pulled() == before
    facts = json.loads(inspected.stdout)
    numpy = _in_image(engine, tag, "python3 -c 'import numpy; print(numpy.__version__)'").strip()
    assert facts["source"] == "registry" and facts["digest"] == digest
    assert facts["versions"]["triton server"] == "2.50.0" and facts["versions"]["release"] == "24.09"
    assert facts["versions"]["numpy"] == numpy and facts["versions"]["os"] == "debian 12"
    assert facts["backends"] == ["onnxruntime", "python"] and facts["sbom"] == json.loads(held)
    table = composer("inspect", target, "--registry-ca", reg.ca_cert, "--registry-auth", f"file:{credentials}",
                     env=no_login)
    assert table.returncode == 0 and f"numpy          {numpy}" in table.stdout
    assert pulled() == before

    # Without the CA or the credentials: one line each, no traceback.
    for args, says in (((), "cannot verify the TLS certificate"),
                       (("--registry-ca", str(reg.ca_cert)), "asks for credentials and none were given")):
        refused = composer("inspect", target, *args, env=no_login)
        assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert says in refused.stderr


def test_inspect_two_images_names_the_changed_package(engine, standin_images, tmp_path, names):
    tags = [f"triton-composer-test/sbom-six:{version}-{uuid.uuid4().hex[:6]}" for version in ("1.16.0", "1.17.0")]
    names.extend(tags)
    for tag in tags:
        version = tag.split(":")[1].split("-")[0]
        built = composer(*BUILD[:-4], "-b", "python", "--pip", f"six=={version}", "--tag", tag, "--no-smoke-test")
        assert built.returncode == 0, built.stderr[-2000:]
    compared = composer("inspect", *tags, "--json")
    assert compared.returncode == 0, compared.stderr[-2000:]
    assert json.loads(compared.stdout)["packages"]["changed"] == {"pypi:six": ["1.16.0", "1.17.0"]}
    table = composer("inspect", *tags)
    assert "changed  pypi:six 1.16.0 -> 1.17.0" in table.stdout


def test_inspect_refuses_an_unreachable_registry_and_an_image_not_tritons(engine, standin_images):
    for ref, says in (("127.0.0.1:9/team/triton:1", "registry 127.0.0.1:9 does not answer"),
                      (standin_images.min_ref.replace("tritonserver:24.09-py3-min", "debian-minbase:bookworm"),
                       "is not a Triton image")):
        run = composer("inspect", ref)
        lines = run.stderr.strip().splitlines()
        assert run.returncode != 0 and len(lines) == 1 and says in lines[0] and "Traceback" not in run.stderr, run.stderr
