"""Publish what a pipeline can verify (issue 36), end to end on the small stand-ins: the same command
on two clean engines (their own data roots and sockets, no cache) gives the same image id and pushes
the same manifest digest; skopeo's sigstoreSigned policy (Debian 13's skopeo, the independent
implementation) accepts the signed image and refuses it once the tag names another image or the
signature is altered; a signature skopeo makes verifies with composer verify; the provenance names
the pushed digest and every base by digest; --rebuild says "same"; the key is nowhere it must not be.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from tests.conftest import TEST_LABEL_KEY, TEST_RUN
from tests.integration.conftest import TestRegistry, _free_port
from tests.cli import image_json

ROOT = Path(__file__).resolve().parents[2]
STANDINS = ["localhost/standin/tritonserver:24.09-py3", "localhost/standin/tritonserver:24.09-py3-min"]
SKOPEO_IMAGE = "localhost/triton-composer-tools/skopeo:trixie"
TAG = "supply/triton:1"


def composer(*args: str, host: str | None = None, env: dict | None = None, timeout: float = 1800):
    environ = {**os.environ, **(env or {})}
    if host:
        environ["DOCKER_HOST"] = host
    return subprocess.run([sys.executable, "-m", "composer", *args], capture_output=True, text=True,
                          env=environ, timeout=timeout)


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """A plain PEM key (file:), the same key encrypted (env: with a passphrase), and a cosign-format
    encrypted key of another pair for skopeo (scrypt + NaCl secretbox, as cosign writes it)."""
    import hashlib

    import nacl.secret
    import nacl.utils
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    folder = tmp_path_factory.mktemp("keys")
    key = ec.generate_private_key(ec.SECP256R1())
    plain = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption())
    (folder / "key.pem").write_bytes(plain)
    (folder / "key.pub").write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    encrypted = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.BestAvailableEncryption(b"test-passphrase-41"))
    other = ec.generate_private_key(ec.SECP256R1())
    der = other.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption())
    salt, nonce = os.urandom(32), nacl.utils.random(24)
    secret = hashlib.scrypt(b"pw", salt=salt, n=32768, r=8, p=1, maxmem=64 << 20, dklen=32)
    sealed = nacl.secret.SecretBox(secret).encrypt(der, nonce).ciphertext
    document = {"kdf": {"name": "scrypt", "params": {"N": 32768, "r": 8, "p": 1},
                        "salt": base64.b64encode(salt).decode()},
                "cipher": {"name": "nacl/secretbox", "nonce": base64.b64encode(nonce).decode()},
                "ciphertext": base64.b64encode(sealed).decode()}
    (folder / "cosign.key").write_bytes(b"-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\n"
                                        + base64.encodebytes(json.dumps(document).encode())
                                        + b"-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n")
    (folder / "cosign.pub").write_bytes(other.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    (folder / "cosign.pass").write_text("pw\n")
    # The key's body, base64 of its DER: what must appear nowhere (a line of the PEM is enough to find it).
    body = plain.decode().splitlines()[2]
    return {"folder": folder, "encrypted": encrypted.decode(), "body": body}


@pytest.fixture(scope="module")
def target(tmp_path_factory, engine):
    """An authenticated registry for the whole module, and the credentials file of its user."""
    registry = TestRegistry(root=tmp_path_factory.mktemp("registry"), port=_free_port())
    registry.write_config()
    registry.start()
    auth = registry.root / "auth"
    auth.write_text(f"{registry.username}:{registry.password}\n")
    authfile = registry.root / "auth.json"  # skopeo's, for the same user (never on its command line)
    token = base64.b64encode(f"{registry.username}:{registry.password}".encode()).decode()
    authfile.write_text(json.dumps({"auths": {registry.host: {"auth": token}}}))
    try:
        yield {"registry": registry, "auth": auth, "authfile": authfile}
    finally:
        registry.stop()


@pytest.fixture(scope="module")
def skopeo(engine, standin_images, tmp_path_factory):
    """Run Debian 13's skopeo in a container on this machine's network namespace (it reaches the
    registry on 127.0.0.1, nothing else), with the test's folders mounted."""
    if engine.image(SKOPEO_IMAGE) is None:
        done = subprocess.run(["docker", "build", "-q", "-t", SKOPEO_IMAGE, "-f", str(ROOT / "tests/integration/tools/"
                               "skopeo.Dockerfile"), str(ROOT / "tests/integration/tools")],
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-2000:]

    def run(*args: str, mounts: tuple[Path, ...] = ()) -> subprocess.CompletedProcess:
        volumes = [item for path in mounts for item in ("-v", f"{path}:{path}")]
        return subprocess.run(["docker", "run", "--rm", "--network", "host", "--label", f"{TEST_LABEL_KEY}={TEST_RUN}",
                               *volumes, SKOPEO_IMAGE, "skopeo", *args], capture_output=True, text=True, timeout=600)

    return run


@pytest.fixture(scope="module")
def engines(engine, standins_archive, tmp_path_factory):
    """Two clean engines (own data roots, exec roots, sockets, containerd namespaces), each holding the
    24.09 stand-ins and nothing else: no build cache."""
    from triton_standins.engines import Dockerd

    started = []

    def start(slot: int) -> Dockerd:  # both at once: each its own data root, disk and CPU shared
        node = Dockerd(tmp_path_factory.mktemp(f"engine{slot}"), slot=slot)
        started.append(node)
        node.start()
        node.load(standins_archive)
        return node

    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            nodes = list(pool.map(start, (241, 242)))
        yield nodes
    finally:
        for node in started:
            node.stop()


@pytest.fixture(scope="module")
def pushed(engines, target, keys):
    """The issue's command on each clean engine: build, smoke-test, push signed (the first with the key
    from a file, the second with the same key encrypted in a variable, its passphrase in another)."""
    registry = target["registry"]
    ref = f"{registry.host}/{TAG}"
    # With a python package: its byte-code must be the same too (compiled by hash, not by time).
    base = ["build", "--registry", "localhost/standin", "--version", "24.09", "-b", "onnxruntime", "-b", "python",
            "--pip", "six==1.16.0", "--registry-auth", f"file:{target['auth']}", "--label", f"{TEST_LABEL_KEY}={TEST_RUN}",
            "--json"]

    def build(index: int) -> subprocess.CompletedProcess:  # at once: two clean engines, nothing shared
        node = engines[index]
        if index == 0:
            return composer(*base, "--push", ref, "--sign-key", f"file:{keys['folder'] / 'key.pem'}", host=node.host)
        # under another tag (a tag per CI commit): the tag is no part of the image
        return composer(*base, "--push", f"{registry.host}/supply/triton:2", "--sign-key", "env:TC_TEST_KEY",
                        "--sign-passphrase", "env:TC_TEST_PASS",
                        host=node.host, env={"TC_TEST_KEY": keys["encrypted"], "TC_TEST_PASS": "test-passphrase-41"})

    # Both sign the same digest at once: each push reads cosign's signature tag, adds its signature
    # and writes it back (composer.publish.referrers.rewrite keeps both; the skopeo test reads them).
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = list(pool.map(build, range(len(engines))))
    runs = []
    for node, run in zip(engines, done):
        assert run.returncode == 0, run.stderr[-3000:]
        runs.append({"result": image_json(run.stdout), "stdout": run.stdout, "stderr": run.stderr, "engine": node})
    return {"ref": ref, "runs": runs}


def test_two_clean_engines_give_the_same_image_id_and_push_the_same_digest(pushed):
    first, second = (run["result"] for run in pushed["runs"])
    assert first["smoke_test"]["passed"] and second["smoke_test"]["passed"]
    assert first["image_id"] == second["image_id"]
    assert first["pushed"]["digest"] == second["pushed"]["digest"]
    assert first["pushed"]["signature"] and first["pushed"]["provenance"] and first["pushed"]["sbom"]


def _policy(folder: Path, registry: TestRegistry, key: Path) -> tuple[Path, Path]:
    policy = folder / "policy.json"
    policy.write_text(json.dumps({"default": [{"type": "reject"}], "transports": {
        "docker": {registry.host: [{"type": "sigstoreSigned", "keyPath": str(key)}]},
        "dir": {"": [{"type": "insecureAcceptAnything"}]}}}))
    registries_d = folder / "registries.d"
    registries_d.mkdir(exist_ok=True)
    (registries_d / "test.yaml").write_text(f"docker:\n  {registry.host}:\n    use-sigstore-attachments: true\n")
    return policy, registries_d


def _copy(skopeo, folder, policy, registries_d, authfile, source: str) -> subprocess.CompletedProcess:
    out = folder / f"out-{len(list(folder.glob('out-*')))}"
    return skopeo("--policy", str(policy), "--registries.d", str(registries_d), "copy", "--src-tls-verify=false",
                  "--src-authfile", str(authfile), f"docker://{source}", f"dir:{out}", mounts=(folder, authfile.parent))


def test_skopeo_accepts_the_signed_image_and_refuses_a_moved_tag_or_an_altered_signature(
        pushed, target, keys, skopeo, tmp_path, engine):
    registry = target["registry"]
    policy, registries_d = _policy(tmp_path, registry, tmp_path / "key.pub")
    (tmp_path / "key.pub").write_bytes((keys["folder"] / "key.pub").read_bytes())
    accepted = _copy(skopeo, tmp_path, policy, registries_d, target["authfile"], pushed["ref"])
    assert accepted.returncode == 0, accepted.stderr
    digest = pushed["runs"][0]["result"]["pushed"]["digest"]

    # The signatures altered: a character of each changed (both pushes', made at once, are there), skopeo refuses.
    session = requests.Session()
    session.auth = (registry.username, registry.password)
    sig_tag = digest.replace(":", "-") + ".sig"
    manifest = registry.manifest("supply/triton", sig_tag)
    assert manifest.status_code == 200
    original = manifest.content
    altered = json.loads(original)
    assert len(altered["layers"]) == 2, altered["layers"]  # one signature a push: neither lost
    for layer in altered["layers"]:
        value = layer["annotations"]["dev.cosignproject.cosign/signature"]
        layer["annotations"]["dev.cosignproject.cosign/signature"] = ("B" if value[0] != "B" else "C") + value[1:]
    put = session.put(f"{registry.url}/v2/supply/triton/manifests/{sig_tag}", data=json.dumps(altered),
                      headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"}, timeout=30)
    assert put.status_code == 201
    refused = _copy(skopeo, tmp_path, policy, registries_d, target["authfile"], pushed["ref"])
    assert refused.returncode != 0 and "signature" in refused.stderr.lower(), refused.stderr
    put = session.put(f"{registry.url}/v2/supply/triton/manifests/{sig_tag}", data=original,
                      headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"}, timeout=30)
    assert put.status_code == 201
    assert _copy(skopeo, tmp_path, policy, registries_d, target["authfile"], pushed["ref"]).returncode == 0

    # The tag moved to another image (pushed without a signature): skopeo refuses it.
    moved = composer("build", "--registry", "localhost/standin", "--version", "24.09", "-b", "python", "--no-smoke-test",
                     "--tag", "supply/other:1", "--push", pushed["ref"], "--registry-auth", f"file:{target['auth']}",
                     "--label", f"{TEST_LABEL_KEY}={TEST_RUN}")
    assert moved.returncode == 0, moved.stderr[-2000:]
    try:
        refused = _copy(skopeo, tmp_path, policy, registries_d, target["authfile"], pushed["ref"])
        assert refused.returncode != 0 and "signature" in refused.stderr.lower(), refused.stderr
    finally:
        engine.remove_image("supply/other:1")
        # The signed image back under its tag, for the tests after this one.
        again = composer(*pushed_command(pushed, target, keys), host=pushed["runs"][0]["engine"].host)
        assert again.returncode == 0, again.stderr[-2000:]


def pushed_command(pushed, target, keys) -> list[str]:
    return ["build", "--registry", "localhost/standin", "--version", "24.09", "-b", "onnxruntime", "-b", "python",
            "--pip", "six==1.16.0", "--push", pushed["ref"], "--registry-auth", f"file:{target['auth']}", "--label",
            f"{TEST_LABEL_KEY}={TEST_RUN}", "--no-smoke-test", "--sign-key", f"file:{keys['folder'] / 'key.pem'}"]


def test_composer_verify_accepts_the_image_and_a_signature_skopeo_makes(pushed, target, keys, skopeo, tmp_path):
    registry = target["registry"]
    ok = composer("verify", pushed["ref"], "--key", str(keys["folder"] / "key.pub"), "--registry-auth",
                  f"file:{target['auth']}", "--json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    checks = {c["check"]: c for c in json.loads(ok.stdout)["verification"]["checks"]}
    assert checks["signature"]["passed"] and checks["provenance"]["passed"]
    wrong = composer("verify", pushed["ref"], "--key", str(keys["folder"] / "cosign.pub"), "--registry-auth",
                     f"file:{target['auth']}")
    assert wrong.returncode == 1 and "signature   FAIL" in wrong.stdout, wrong.stdout + wrong.stderr

    # skopeo copies the image to another repository and signs it with a cosign key of its own.
    accept = tmp_path / "accept.json"
    accept.write_text(json.dumps({"default": [{"type": "insecureAcceptAnything"}]}))
    folder = keys["folder"]
    _, registries_d = _policy(tmp_path, registry, folder / "cosign.pub")  # where skopeo writes attachments
    signed = skopeo("--policy", str(accept), "--registries.d", str(registries_d), "copy", "--src-tls-verify=false", "--dest-tls-verify=false",
                    "--authfile", str(target["authfile"]), "--sign-by-sigstore-private-key", str(folder / "cosign.key"),
                    "--sign-passphrase-file", str(folder / "cosign.pass"), f"docker://{pushed['ref']}",
                    f"docker://{registry.host}/supply/skopeo:1", mounts=(tmp_path, folder, target["authfile"].parent))
    assert signed.returncode == 0, signed.stderr
    theirs = composer("verify", f"{registry.host}/supply/skopeo:1", "--key", str(folder / "cosign.pub"),
                      "--registry-auth", f"file:{target['auth']}", "--json")
    checks = {c["check"]: c for c in json.loads(theirs.stdout)["verification"]["checks"]}
    assert checks["signature"]["passed"], theirs.stdout


def test_the_provenance_names_the_pushed_digest_and_every_base_by_digest(pushed, target, engine):
    from composer.core.docker_config import HostDockerConfig
    from composer.publish.verify import provenance_of
    from composer.registry.client import Registries
    from composer.registry.credentials import load_auth

    digest, statement, verified = provenance_of(Registries(HostDockerConfig(), load_auth(f"file:{target['auth']}")),
                                                pushed["ref"])
    assert verified is False  # no key given: read, not trusted
    assert digest == pushed["runs"][0]["result"]["pushed"]["digest"]
    assert statement["subject"][0]["digest"] == {"sha256": digest.partition(":")[2]}
    assert statement["predicateType"] == "https://slsa.dev/provenance/v1"
    dependencies = {d["name"]: d for d in statement["predicate"]["buildDefinition"]["resolvedDependencies"]}
    for role, ref in (("full", STANDINS[0]), ("min", STANDINS[1])):
        image = engine.image(ref)
        assert dependencies[role]["uri"] == f"docker://{ref}"
        # A base only an engine held has no manifest digest: its config id is an annotation, not a digest.
        assert "digest" not in dependencies[role] and dependencies[role]["annotations"]["image_id"] == image.id
    composition = statement["predicate"]["buildDefinition"]["externalParameters"]["composition"]
    assert composition["selection.backends"] == ["onnxruntime", "python"] and composition["images.version"] == "24.09"
    assert None not in composition.values()  # as the user gave it: nothing unset
    wheels = [d for d in statement["predicate"]["buildDefinition"]["resolvedDependencies"] if d["name"].endswith(".whl")]
    assert wheels and all(d["uri"].startswith("pkg:pypi/") and "@" in d["uri"] for d in wheels)


def test_rebuilding_from_the_provenance_gives_the_same_digest(pushed, target):
    done = composer("verify", pushed["ref"], "--rebuild", "--registry-auth", f"file:{target['auth']}", "--json",
                    host=pushed["runs"][1]["engine"].host)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rebuilt = json.loads(done.stdout)["rebuild"]
    assert rebuilt["same"] and rebuilt["rebuilt"] == rebuilt["digest"]


def test_the_key_is_in_no_layer_registry_blob_log_or_build_cache(pushed, target, keys):
    body = keys["body"]
    encrypted_body = keys["encrypted"].splitlines()[2]
    for run in pushed["runs"]:
        assert body not in run["stdout"] + run["stderr"] and encrypted_body not in run["stdout"] + run["stderr"]
    for root in [target["registry"].root / "data", *(node.data_root for node in (r["engine"] for r in pushed["runs"]))]:
        found = subprocess.run(["grep", "-r", "-l", "-F", "-e", body, "-e", encrypted_body, str(root)],
                               capture_output=True, text=True, timeout=900)
        assert found.returncode == 1, f"the key is in {found.stdout[:500]}"  # 1: grep found nothing
