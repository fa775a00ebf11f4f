"""cosign, and the OCI 1.1 clients, take what the composer pushes; the composer takes what cosign signs.

Real parts: cosign v3.1.2 and v2.6.4 (the line most clusters' Kyverno and policy-controller carry)
and oras v1.3.6, built from the Go module proxy by scripts/go-tools into the machine's cache;
Debian's registry (distribution 2.8: no referrers API, so the referrers tag) with htpasswd auth and
go-containerregistry's registry with its referrers API on (tests/integration/tools/referrers-registry),
both on loopback; the engine and the 24.09 stand-ins.
cosign runs offline: keys, no Rekor (`--insecure-ignore-tlog`), plain http on loopback.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import requests

from tests.cli import composer, image_json
from tests.conftest import TEST_LABEL_KEY, TEST_RUN
from tests.integration.conftest import TestRegistry, _free_port, _serve

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = "localhost/standin"
PASSWORD = "cosign-pass-7"
INSECURE = ("--allow-insecure-registry", "--allow-http-registry")
OFFLINE_SIGN = ("--use-signing-config=false", "--tlog-upload=false", "--new-bundle-format=false", "-y")


def _tool(name: str) -> str:
    done = subprocess.run([str(ROOT / "scripts" / "go-tools"), name], capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        pytest.fail(f"scripts/go-tools {name} failed: {done.stderr[-2000:]}", pytrace=False)
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def tools() -> dict[str, str]:
    return {name: _tool(name) for name in ("cosign", "cosign2", "oras", "referrers-registry")}


@pytest.fixture(scope="module")
def reg(tmp_path_factory, engine):
    """Debian's registry with htpasswd auth, for this module's tests."""
    yield from _serve(TestRegistry(root=tmp_path_factory.mktemp("cosign-registry"), port=_free_port()), engine)


@pytest.fixture(scope="module")
def folder(tmp_path_factory, reg, tools) -> Path:
    """Keys made by cosign itself (encrypted: its own format), a docker config for cosign and oras."""
    here = tmp_path_factory.mktemp("cosign")
    for name, password in (("cosign", PASSWORD), ("other", "other-pass-3")):
        subprocess.run([tools["cosign"], "generate-key-pair", "--output-key-prefix", name], cwd=here, check=True,
                       capture_output=True, env={**os.environ, "COSIGN_PASSWORD": password}, timeout=120)
    (here / "docker").mkdir()
    login = base64.b64encode(f"{reg.username}:{reg.password}".encode()).decode()
    (here / "docker" / "config.json").write_text(json.dumps({"auths": {reg.host: {"auth": login}}}))
    (here / "auth").write_text(f"{reg.username}:{reg.password}")
    return here


def _env(folder: Path, **extra: str) -> dict:
    return {**os.environ, "DOCKER_CONFIG": str(folder / "docker"), **extra}


def _push(folder: Path, target: str, *extra: str, env: dict | None = None) -> dict:
    run = composer("build", "--registry", REGISTRY, "--version", "24.09", "-b", "identity", "--no-smoke-test",
                   "--tag", f"triton-composer-test/cosign:{uuid.uuid4().hex[:8]}", "--label",
                   f"{TEST_LABEL_KEY}={TEST_RUN}", "--push", target, "--registry-auth", f"file:{folder / 'auth'}",
                   "--json", *extra, env=env, timeout=1200)
    assert run.returncode == 0, run.stderr[-3000:]
    return image_json(run.stdout)


@pytest.fixture(scope="module")
def signed(engine, standin_images, reg, folder) -> dict:
    """One image pushed and signed by the composer with cosign's own encrypted key (COSIGN_PASSWORD), twice."""
    target = f"{reg.host}/team/signed:1"
    # One SOURCE_DATE_EPOCH for both, as a pipeline pins it: the same inputs, the same digest.
    env = {"COSIGN_PASSWORD": PASSWORD, "SOURCE_DATE_EPOCH": "1764201600"}
    first = _push(folder, target, "--sign-key", f"file:{folder / 'cosign.key'}", env=env)
    second = _push(folder, target, "--sign-key", f"file:{folder / 'cosign.key'}", env=env)
    yield {"ref": target, "digest": first["pushed"]["digest"], "second": second["pushed"]["digest"]}
    engine.remove_image(first["tag"], force=True)
    engine.remove_image(second["tag"], force=True)


def _cosign(tools, name, folder, *args) -> subprocess.CompletedProcess:
    return subprocess.run([tools[name], *args], capture_output=True, text=True, env=_env(folder), timeout=300)


@pytest.mark.parametrize("cosign", ["cosign", "cosign2"])
def test_cosign_verifies_the_signature_and_the_slsa_provenance(tools, folder, signed, cosign):
    ref = f"{signed['ref'].rsplit(':', 1)[0]}@{signed['digest']}"
    verified = _cosign(tools, cosign, folder, "verify", "--key", str(folder / "cosign.pub"),
                       "--insecure-ignore-tlog", *INSECURE, ref)
    assert verified.returncode == 0, verified.stderr
    assert json.loads(verified.stdout)[0]["critical"]["image"]["docker-manifest-digest"] == signed["digest"]
    attested = _cosign(tools, cosign, folder, "verify-attestation", "--key", str(folder / "cosign.pub"),
                       "--insecure-ignore-tlog", *INSECURE, "--type", "slsaprovenance1", ref)
    assert attested.returncode == 0, attested.stderr
    statement = json.loads(base64.b64decode(json.loads(attested.stdout.splitlines()[0])["payload"]))
    assert statement["predicateType"] == "https://slsa.dev/provenance/v1"
    assert statement["subject"][0]["digest"]["sha256"] == signed["digest"].partition(":")[2]
    wrong = _cosign(tools, cosign, folder, "verify", "--key", str(folder / "other.pub"), "--insecure-ignore-tlog",
                    *INSECURE, ref)
    assert wrong.returncode != 0  # another key: refused


def test_two_pushes_give_one_subject_and_two_invocation_ids(tools, folder, signed):
    assert signed["second"] == signed["digest"]  # reproducible: the same image
    ref = f"{signed['ref'].rsplit(':', 1)[0]}@{signed['digest']}"
    attested = _cosign(tools, "cosign", folder, "verify-attestation", "--key", str(folder / "cosign.pub"),
                       "--insecure-ignore-tlog", *INSECURE, "--type", "slsaprovenance1", ref)
    statements = [json.loads(base64.b64decode(json.loads(line)["payload"])) for line in attested.stdout.splitlines()]
    ids = {s["predicate"]["runDetails"]["metadata"]["invocationId"] for s in statements}
    assert len(statements) == 2 and len(ids) == 2
    assert {s["subject"][0]["digest"]["sha256"] for s in statements} == {signed["digest"].partition(":")[2]}


def _tamper(reg, repository: str, tag: str, change) -> None:
    """Rewrite the manifest at `tag`: its first layer's content replaced by change(content) (the
    annotations, the signature among them, kept), the blob uploaded as such a forger would."""
    auth = (reg.username, reg.password)
    accept = {"Accept": "application/vnd.oci.image.manifest.v1+json"}
    manifest = requests.get(f"{reg.url}/v2/{repository}/manifests/{tag}", headers=accept, auth=auth, timeout=30).json()
    layer = manifest["layers"][0]
    body = change(requests.get(f"{reg.url}/v2/{repository}/blobs/{layer['digest']}", auth=auth, timeout=30).content)
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    started = requests.post(f"{reg.url}/v2/{repository}/blobs/uploads/", auth=auth, timeout=30)
    location = started.headers["Location"]
    location = location if "://" in location else reg.url + location
    put = requests.put(location + ("&" if "?" in location else "?") + f"digest={digest}", data=body, auth=auth,
                       headers={"Content-Type": "application/octet-stream"}, timeout=30)
    assert put.status_code == 201, put.text
    manifest["layers"][0] = {**layer, "digest": digest, "size": len(body)}
    stored = requests.put(f"{reg.url}/v2/{repository}/manifests/{tag}", data=json.dumps(manifest), auth=auth,
                          headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"}, timeout=30)
    assert stored.status_code == 201, stored.text


def test_cosign_refuses_a_changed_signature_payload_or_attestation_envelope(engine, standin_images, reg, folder,
                                                                          tools):
    target = f"{reg.host}/team/tampered:1"
    pushed = _push(folder, target, "--sign-key", f"file:{folder / 'cosign.key'}", env={"COSIGN_PASSWORD": PASSWORD})
    try:
        digest = pushed["pushed"]["digest"]
        ref = f"{reg.host}/team/tampered@{digest}"
        base = ("--key", str(folder / "cosign.pub"), "--insecure-ignore-tlog", *INSECURE)
        assert _cosign(tools, "cosign", folder, "verify", *base, ref).returncode == 0
        # One byte of the signed payload: the docker-reference's tag 1 becomes 2.
        _tamper(reg, "team/tampered", digest.replace(":", "-") + ".sig", lambda b: b.replace(b":1\"", b":2\""))
        assert _cosign(tools, "cosign", folder, "verify", *base, ref).returncode != 0

        def envelope(body: bytes) -> bytes:  # the statement inside the envelope says another tag
            dsse = json.loads(body)
            statement = base64.b64decode(dsse["payload"]).replace(b"team/tampered", b"team/tamperex")
            return json.dumps({**dsse, "payload": base64.b64encode(statement).decode()}).encode()

        attested = ("verify-attestation", *base, "--type", "slsaprovenance1", ref)
        assert _cosign(tools, "cosign", folder, *attested).returncode == 0
        _tamper(reg, "team/tampered", digest.replace(":", "-") + ".att", envelope)
        assert _cosign(tools, "cosign", folder, *attested).returncode != 0
        verified = composer("verify", target, "--key", str(folder / "cosign.pub"), "--registry-auth",
                            f"file:{folder / 'auth'}")
        assert verified.returncode == 1 and "signature" in verified.stdout and "FAIL" in verified.stdout
    finally:
        engine.remove_image(pushed["tag"], force=True)


def test_composer_verifies_an_image_cosign_signed_and_attested(engine, standin_images, reg, folder, tools):
    target = f"{reg.host}/team/theirs:1"
    pushed = _push(folder, target)  # no key: the composer signs nothing here
    try:
        ref = f"{reg.host}/team/theirs@{pushed['pushed']['digest']}"
        predicate = folder / "predicate.json"
        predicate.write_text(json.dumps({"buildDefinition": {"buildType": "https://example.com/t",
                                                             "externalParameters": {}},
                                         "runDetails": {"builder": {"id": "https://example.com/b"}}}))
        env = _env(folder, COSIGN_PASSWORD=PASSWORD)
        for args in (("sign", "--key", str(folder / "cosign.key"), *OFFLINE_SIGN, *INSECURE, ref),
                     ("attest", "--key", str(folder / "cosign.key"), *OFFLINE_SIGN, *INSECURE, "--type",
                      "slsaprovenance1", "--predicate", str(predicate), ref)):
            done = subprocess.run([tools["cosign"], *args], capture_output=True, text=True, env=env, timeout=300)
            assert done.returncode == 0, done.stderr
        checked = composer("verify", target, "--key", str(folder / "cosign.pub"), "--registry-auth",
                           f"file:{folder / 'auth'}", "--json")
        assert checked.returncode == 0, checked.stdout + checked.stderr
        checks = {c["check"]: c for c in json.loads(checked.stdout)["verification"]["checks"]}
        assert checks["signature"]["passed"] and checks["provenance"]["passed"]
        assert "signed by the key" in checks["provenance"]["detail"]
    finally:
        engine.remove_image(pushed["tag"], force=True)


def test_verify_rebuild_refuses_a_provenance_the_key_did_not_sign(engine, standin_images, reg, folder):
    target = f"{reg.host}/team/resigned:1"
    pushed = _push(folder, target, "--sign-key", f"file:{folder / 'other.key'}",
                   env={"COSIGN_PASSWORD": "other-pass-3"})
    try:
        started = time.monotonic()
        done = composer("verify", target, "--rebuild", "--key", str(folder / "cosign.pub"), "--registry-auth",
                        f"file:{folder / 'auth'}")
        assert done.returncode == 1 and "none signed by the key" in done.stderr, done.stderr
        assert "composing" not in done.stderr and time.monotonic() - started < 120  # refused before a build
        unkeyed = composer("verify", target, "--rebuild", "--registry-auth", f"file:{folder / 'auth'}", timeout=1800)
        assert "the provenance is unverified" in unkeyed.stderr.splitlines()[0], unkeyed.stderr
    finally:
        engine.remove_image(pushed["tag"], force=True)


def _discovered(tools, folder, ref: str, *extra: str) -> list[dict]:
    done = subprocess.run([tools["oras"], "discover", "--plain-http", "--format", "json", *extra, ref],
                          capture_output=True, text=True, env=_env(folder), timeout=120)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    return list(found.get("referrers") or found.get("manifests") or [])


def _discover(tools, folder, ref: str, *extra: str) -> set[str]:
    return {r.get("artifactType") for r in _discovered(tools, folder, ref, *extra)}


EXPECTED = {"application/vnd.dev.cosign.artifact.sig.v1+json", "application/vnd.dev.cosign.artifact.att.v1+json",
            "application/vnd.cyclonedx+json"}


def test_oras_discovers_them_through_the_referrers_tag_on_debians_registry(tools, folder, signed):
    ref = f"{signed['ref'].rsplit(':', 1)[0]}@{signed['digest']}"
    assert _discover(tools, folder, ref, "--distribution-spec", "v1.1-referrers-tag") == EXPECTED


def test_oras_discovers_them_through_a_registrys_referrers_api(engine, standin_images, folder, tools, tmp_path):
    """go-containerregistry's registry, its referrers API on (tests/integration/tools/referrers-registry)."""
    port = _free_port()
    (tmp_path / "blobs").mkdir()
    server = subprocess.Popen([tools["referrers-registry"], f"127.0.0.1:{port}", str(tmp_path / "blobs")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                requests.get(f"http://127.0.0.1:{port}/v2/", timeout=2)
                break
            except requests.ConnectionError:
                assert time.monotonic() < deadline, "the registry did not start"
                time.sleep(0.2)
        pushed = _push(folder, f"127.0.0.1:{port}/team/api:1", "--sign-key", f"file:{folder / 'cosign.key'}",
                       env={"COSIGN_PASSWORD": PASSWORD})
        digest = pushed["pushed"]["digest"]
        base = f"http://127.0.0.1:{port}/v2/team/api"
        accept = {"Accept": "application/vnd.oci.image.manifest.v1+json"}
        mine = {requests.get(f"{base}/manifests/{digest.replace(':', '-')}{suffix}", headers=accept,
                             timeout=10).headers["Docker-Content-Digest"] for suffix in (".sig", ".att", ".sbom")}
        listed = requests.get(f"{base}/referrers/{digest}", timeout=10)
        assert listed.status_code == 200  # the registry has the API, and found the composer's manifests by their subject
        # (go-containerregistry's registry reports each by its config's type, not its artifactType)
        assert {m["digest"] for m in listed.json()["manifests"]} == mine
        found = _discovered(tools, folder, f"127.0.0.1:{port}/team/api@{digest}", "--distribution-spec",
                            "v1.1-referrers-api")
        assert {r["digest"] for r in found} == mine
        engine.remove_image(pushed["tag"], force=True)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
