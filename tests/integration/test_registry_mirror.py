"""`composer mirror` registry to registry against real registries (Debian's docker-registry):
hand-made two-platform OCI indexes with SBOMs beside each image, pushed with the composer's own
registry client; the engine is only watched (it must gain nothing)."""

from __future__ import annotations

import hashlib
import json
import os
import time

import docker
import pytest

from composer.core.refs import ImageRef
from composer.publish.artifacts import fallback_tag, push_sbom
from composer.sources.mirror import mirror_release
from composer.registry.client import Registries, RegistryApi
from tests.cli import composer
from tests.integration.conftest import TestRegistry, _free_port, _need, _serve

pytestmark = pytest.mark.integration

RELEASE = "24.09"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
PLATFORMS = (("linux", "amd64", None), ("linux", "arm64", "v8"))


def _api(reg: TestRegistry) -> RegistryApi:
    return RegistryApi(reg.host, reg.auth, insecure=True)


def _descriptor(media_type: str, body: bytes) -> dict:
    return {"mediaType": media_type, "digest": "sha256:" + hashlib.sha256(body).hexdigest(), "size": len(body)}


def _image(api: RegistryApi, repo: str, os_: str, arch: str, variant, layers: list[bytes]) -> tuple[bytes, set]:
    """A tiny image manifest (config + layers) pushed by digest; its bytes and its blobs."""
    config = json.dumps({"os": os_, "architecture": arch, **({"variant": variant} if variant else {}),
                         "rootfs": {"type": "layers", "diff_ids": []}}, sort_keys=True).encode()
    blobs = {api.upload_blob(repo, data): len(data) for data in [config, *layers]}
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": _descriptor("application/vnd.oci.image.config.v1+json", config),
        "layers": [_descriptor("application/vnd.oci.image.layer.v1.tar", data) for data in layers],
    }, sort_keys=True).encode()
    api.put_manifest(repo, "sha256:" + hashlib.sha256(manifest).hexdigest(), manifest, OCI_MANIFEST)
    return manifest, set(blobs.items())


def _release(reg: TestRegistry, prefix: str) -> dict:
    """24.09-py3 and -py3-min under PREFIX/tritonserver: each an index of two platforms, the
    two images sharing a layer, an SBOM tag beside each image. What was pushed, for the checks."""
    api, repo = _api(reg), f"{prefix}/tritonserver"
    shared = os.urandom(300_000)  # in both images of each platform, as full and min share layers
    out = {"blobs": {}, "tags": {}, "sboms": [], "children": {}}
    for suffix, extra in (("-py3", 400_000), ("-py3-min", 200_000)):
        descriptors = []
        for os_, arch, variant in PLATFORMS:
            manifest, blobs = _image(api, repo, os_, arch, variant, [shared + arch.encode(), os.urandom(extra)])
            out["blobs"].update(blobs)
            digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
            out["children"].setdefault(suffix, []).append(digest)
            push_sbom(api, repo, digest, json.dumps({"bomFormat": "CycloneDX", "image": digest}))
            out["sboms"].append(fallback_tag(digest))
            platform = {"os": os_, "architecture": arch, **({"variant": variant} if variant else {})}
            descriptors.append({**_descriptor(OCI_MANIFEST, manifest), "platform": platform})
        index = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": descriptors},
                           sort_keys=True).encode()
        out["tags"][suffix] = api.put_manifest(repo, f"{RELEASE}{suffix}", index, OCI_INDEX)
    # The SBOMs' own blobs: the empty config (one for all) and each document.
    for tag in out["sboms"]:
        _, _, data, _ = api.document(repo, tag)
        out["blobs"].update({d["digest"]: d["size"] for d in [data["config"], *data["layers"]]})
    return out


@pytest.fixture
def other_registry(tmp_path_factory, engine):
    """A second registry, the target of copies between two registries."""
    _need("htpasswd", "docker-registry", "curl")
    yield from _serve(TestRegistry(root=tmp_path_factory.mktemp("registry"), port=_free_port()), engine)


@pytest.fixture
def auth_files(tmp_path, registry, other_registry):
    """Credentials files for both registries (file:PATH, never on the command line)."""
    paths = {}
    for name, reg in (("source", registry), ("target", other_registry)):
        path = tmp_path / f"{name}.creds"
        path.write_text(f"{reg.username}:{reg.password}\n")
        paths[name] = f"file:{path}"
    return paths


def _mirror(source: str, to: str, auth: dict, *extra: str):
    done = composer("mirror", "--version", RELEASE, "--registry", source, "--to", to,
                    "--source-auth", auth["source"], "--registry-auth", auth["target"], "--json", *extra, timeout=300)
    return done


def _engine_state():
    client = docker.from_env()
    try:
        # One listing call (other builds on the engine may remove an image between list and inspect).
        return {image["Id"]: tuple(image.get("RepoTags") or ()) + tuple(image.get("RepoDigests") or ())
                for image in client.api.images(all=True)}
    finally:
        client.close()


def _image_events(since: float, hosts: tuple[str, ...]) -> list[dict]:
    client = docker.from_env()
    try:
        events = client.events(since=int(since) - 1, until=int(time.time()) + 1, decode=True,
                               filters={"type": "image"})
        return [e for e in events if any(h in json.dumps(e) for h in hosts)]
    finally:
        client.close()


def test_mirror_between_registries_keeps_every_platform_and_sbom_and_leaves_the_engine_alone(
        registry, other_registry, auth_files):
    pushed = _release(registry, "src")
    before, started = _engine_state(), time.time()

    done = _mirror(f"{registry.host}/src", f"{other_registry.host}/nv", auth_files)

    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["via"] == "registry"
    for image, suffix in zip(result["images"], ("-py3", "-py3-min")):
        assert image["dest"] == f"{other_registry.host}/nv/tritonserver:{RELEASE}{suffix}"
        assert image["digest"] == pushed["tags"][suffix]  # the index itself, not a platform's image
        assert image["platforms"] == ["linux/amd64", "linux/arm64/v8"]
        assert len(image["referrers"]) == 2 and image["bytes_mounted"] == 0
        answer = other_registry.manifest("nv/tritonserver", f"{RELEASE}{suffix}")
        assert answer.headers["Docker-Content-Digest"] == pushed["tags"][suffix]
        for child in pushed["children"][suffix]:
            assert other_registry.manifest("nv/tritonserver", child).status_code == 200
    assert sorted(t for t in other_registry.tags("nv/tritonserver") if t.endswith(".sbom")) == sorted(pushed["sboms"])
    for tag in pushed["sboms"]:
        assert other_registry.manifest("nv/tritonserver", tag).content == registry.manifest("src/tritonserver", tag).content
    every_blob = sum(pushed["blobs"].values())
    assert result["totals"]["bytes_moved"] == every_blob  # each blob once: the shared ones skipped the 2nd time
    assert result["totals"]["bytes_skipped"] > 0
    assert registry.password not in done.stdout + done.stderr
    assert other_registry.password not in done.stdout + done.stderr

    # The engine gained no image and pulled or pushed nothing of either registry.
    after = _engine_state()
    hosts = (registry.host, other_registry.host)
    new = {i: names for i, names in after.items() if i not in before}
    assert not [n for names in new.values() for n in names if n.startswith(hosts)], new
    assert not [n for names in after.values() for n in names if n.startswith(hosts)]
    assert _image_events(started, hosts) == []

    again = _mirror(f"{registry.host}/src", f"{other_registry.host}/nv", auth_files)
    assert again.returncode == 0, again.stderr
    redo = json.loads(again.stdout)
    assert redo["totals"]["bytes_moved"] == 0 and redo["totals"]["manifests_put"] == 0
    assert [i["moved"] for i in redo["images"]] == [False, False]


def test_same_registry_mirror_mounts_every_blob(registry, auth_files):
    pushed = _release(registry, "src")
    auth = {"source": auth_files["source"], "target": auth_files["source"]}

    done = _mirror(f"{registry.host}/src", f"{registry.host}/mirror", auth)

    assert done.returncode == 0, done.stderr
    totals = json.loads(done.stdout)["totals"]
    assert totals["bytes_moved"] == 0
    assert totals["bytes_mounted"] == sum(pushed["blobs"].values())
    assert "mounted from src/tritonserver" in done.stderr
    for suffix, digest in pushed["tags"].items():
        assert registry.manifest("mirror/tritonserver", f"{RELEASE}{suffix}").headers["Docker-Content-Digest"] == digest


def test_an_interrupted_mirror_resumes_and_moves_only_the_rest(engine, registry, other_registry, auth_files):
    pushed = _release(registry, "src")
    lines: list[str] = []

    def interrupt_after_first_blob(line: str) -> None:
        lines.append(line)
        if line.startswith("blob ") and "copied" in line:
            raise KeyboardInterrupt  # as Ctrl-C would, once one blob is in the target

    with pytest.raises(KeyboardInterrupt):
        mirror_release(RELEASE, source=f"{registry.host}/src", dest=f"{other_registry.host}/nv",
                       registries=Registries(engine, other_registry.auth),
                       source_registries=Registries(engine, registry.auth), on_line=interrupt_after_first_blob)
    # Blobs copied at the same time as the first finish too; the rest stop or never start.
    copied = {line.split()[1] for line in lines if line.startswith("blob ") and "copied" in line}
    moved = [d for d in pushed["blobs"] if d[:19] in copied]
    assert 1 <= len(moved) < len(pushed["blobs"]) - 4
    assert other_registry.tags("nv/tritonserver") == []  # no tag before every blob is there

    done = _mirror(f"{registry.host}/src", f"{other_registry.host}/nv", auth_files)

    assert done.returncode == 0, done.stderr
    totals = json.loads(done.stdout)["totals"]
    assert totals["bytes_moved"] == sum(pushed["blobs"].values()) - sum(pushed["blobs"][d] for d in moved)
    assert totals["blobs_moved"] == len(pushed["blobs"]) - len(moved)
    assert totals["bytes_skipped"] >= sum(pushed["blobs"][d] for d in moved)


def test_platform_choice_copies_one_image_and_refuses_a_missing_one(registry, other_registry, auth_files):
    pushed = _release(registry, "src")

    missing = _mirror(f"{registry.host}/src", f"{other_registry.host}/nv", auth_files, "--platform", "linux/s390x")
    assert missing.returncode == 2
    message = missing.stderr.strip().splitlines()[-1]
    assert message.startswith("error: --platform linux/s390x: ") and "linux/amd64, linux/arm64/v8" in message
    assert "Traceback" not in missing.stderr and other_registry.tags("nv/tritonserver") == []

    done = _mirror(f"{registry.host}/src", f"{other_registry.host}/nv", auth_files, "--platform", "linux/arm64")
    assert done.returncode == 0, done.stderr
    for image, suffix in zip(json.loads(done.stdout)["images"], ("-py3", "-py3-min")):
        arm = pushed["children"][suffix][1]
        assert image["digest"] == arm and image["platforms"] == ["linux/arm64/v8"]
        assert other_registry.manifest("nv/tritonserver", f"{RELEASE}{suffix}").headers["Docker-Content-Digest"] == arm
        assert len(image["referrers"]) == 1


@pytest.mark.parametrize("args, says", [
    (("--platform", "linux/amd65"), "--platform linux/amd65: unknown architecture 'amd65' (one of amd64, arm64"),
    (("--platform", "linux"), "--platform linux: not a platform: expected os/arch[/variant]"),
    (("--to-engine", "--platform", "linux/amd64"), "--to-engine --platform linux/amd64: the engine pulls"),
    (("--to-engine", "--compression", "zstd"), "--to-engine --compression zstd: the engine pushes as it compresses"),
    (("--compression", "lz4"), "--compression"),
])
def test_bad_mirror_input_is_refused_before_any_work(args, says):
    done = composer("mirror", "--version", RELEASE, "--registry", "127.0.0.1:9/src", "--to", "127.0.0.1:9/nv",
                    *args, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().startswith(f"error: {says}"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and done.stdout == ""
