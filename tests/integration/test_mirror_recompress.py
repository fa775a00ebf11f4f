"""`composer mirror --compression zstd|estargz` against real registries (Debian's docker-registry):
gzip layers of a Docker schema 2 image become zstd layers of an OCI image, each still the tar its
configuration's diff id names; the SBOM beside the image follows it to the new digest; a second
run compresses nothing again; Podman pulls the result and reads a file from its layers. eStargz
layers of a real image pass the reference reader, Docker runs it and a stargz node mounts it."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

import pytest
import zstandard

from composer.publish.artifacts import fallback_tag, push_sbom
from composer.registry.client import RegistryApi
from tests.integration.conftest import TestRegistry
from tests.integration.test_estargz import check  # noqa: F401
from tests.integration.test_registry_mirror import RELEASE, _mirror, auth_files, other_registry  # noqa: F401

pytestmark = pytest.mark.integration

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"


def _tar(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _push_release(reg: TestRegistry, repo: str) -> dict:
    """-py3 and -py3-min: each an index of one linux/amd64 Docker schema 2 image of two gzip layers
    (real tars), an SBOM beside the image. The tars' digests and the files, for the checks."""
    api = RegistryApi(reg.host, reg.auth, insecure=True)
    out: dict = {"diff_ids": {}, "files": {}, "images": {}}
    for suffix in ("-py3", "-py3-min"):
        files = [{"etc/release": f"tritonserver {RELEASE}{suffix}\n".encode()},
                 {f"opt/tritonserver/payload-{i}": hashlib.sha512(f"{suffix}{i}".encode()).digest() * 2000
                  for i in range(3)}]
        tars = [_tar(f) for f in files]
        config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Cmd": ["/bin/true"]},
                             "rootfs": {"type": "layers", "diff_ids": [_sha(t) for t in tars]}}).encode()
        blobs = [gzip.compress(t, mtime=0) for t in tars]
        for data in [config, *blobs]:
            api.upload_blob(repo, data)
        manifest = json.dumps({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST,
                               "config": {"mediaType": DOCKER_CONFIG, "digest": _sha(config), "size": len(config)},
                               "layers": [{"mediaType": DOCKER_GZIP, "digest": _sha(b), "size": len(b)}
                                          for b in blobs]}).encode()
        image = api.put_manifest(repo, _sha(manifest), manifest, DOCKER_MANIFEST)
        push_sbom(api, repo, image, json.dumps({"bomFormat": "CycloneDX", "image": image}))
        index = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
            {"mediaType": DOCKER_MANIFEST, "digest": image, "size": len(manifest),
             "platform": {"os": "linux", "architecture": "amd64"}}]}).encode()
        api.put_manifest(repo, f"{RELEASE}{suffix}", index, OCI_INDEX)
        out["diff_ids"][suffix] = [_sha(t) for t in tars]
        out["files"][suffix] = files[0]["etc/release"]
        out["images"][suffix] = image
    return out


def _podman(root, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(["podman", "--root", str(root / "storage"), "--runroot", str(root / "run"), *args],
                          capture_output=True, text=True, timeout=300)
    assert not check or done.returncode == 0, done.stderr
    return done


def test_mirror_recompresses_gzip_to_zstd_and_podman_pulls_it(registry, other_registry, auth_files, tmp_path):
    pushed = _push_release(registry, "src/tritonserver")
    target = RegistryApi(other_registry.host, other_registry.auth, insecure=True)

    done = _mirror(f"{registry.host}/src", f"{other_registry.host}/nv", auth_files, "--compression", "zstd")

    assert done.returncode == 0, done.stderr
    assert "recompressing its layers zstd" in done.stderr
    result = json.loads(done.stdout)
    for image, suffix in zip(result["images"], ("-py3", "-py3-min")):
        assert image["moved"]
        index = json.loads(other_registry.manifest("nv/tritonserver", f"{RELEASE}{suffix}").content)
        assert index["mediaType"] == OCI_INDEX and image["digest"] != pushed["images"][suffix]
        (child,) = index["manifests"]
        assert child["platform"] == {"os": "linux", "architecture": "amd64"}
        manifest = json.loads(other_registry.manifest("nv/tritonserver", child["digest"]).content)
        assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
        assert manifest["config"]["mediaType"] == "application/vnd.oci.image.config.v1+json"
        assert [layer["mediaType"] for layer in manifest["layers"]] == [ZSTD, ZSTD]
        for layer, diff_id in zip(manifest["layers"], pushed["diff_ids"][suffix]):
            blob = target.blob("nv/tritonserver", layer["digest"], 64 << 20)
            assert _sha(zstandard.ZstdDecompressor().decompressobj().decompress(blob)) == diff_id
        # The SBOM beside the source image now names the recompressed image.
        tag = fallback_tag(child["digest"])
        sbom = json.loads(other_registry.manifest("nv/tritonserver", tag).content)
        assert sbom["subject"]["digest"] == child["digest"]

    again = _mirror(f"{registry.host}/src", f"{other_registry.host}/nv", auth_files, "--compression", "zstd")
    assert again.returncode == 0, again.stderr
    assert " -> sha256:" not in again.stderr  # no layer compressed again
    assert json.loads(again.stdout)["totals"]["manifests_put"] == 0

    if shutil.which("podman") is None:
        pytest.fail("podman is not installed (scripts/bootstrap installs it)", pytrace=False)
    root = Path(tempfile.mkdtemp(prefix="tc-podman-"))  # Podman wants a runroot of < 50 characters
    authfile = tmp_path / "auth.json"
    authfile.write_text(json.dumps({"auths": {other_registry.host: {"auth": base64.b64encode(
        f"{other_registry.username}:{other_registry.password}".encode()).decode()}}}))
    ref = f"{other_registry.host}/nv/tritonserver:{RELEASE}-py3-min"
    try:
        _podman(root, "pull", "--tls-verify=false", "--authfile", str(authfile), ref)
        mounted = _podman(root, "image", "mount", ref).stdout.strip()
        assert (Path(mounted) / "etc/release").read_bytes() == pushed["files"]["-py3-min"]
        _podman(root, "image", "unmount", ref)
    finally:
        _podman(root, "system", "reset", "--force", check=False)
        shutil.rmtree(root, ignore_errors=True)


def test_mirror_writes_estargz_the_reference_reads_docker_runs_and_a_stargz_node_mounts_lazily(
        engine, standin_images, registry, other_registry, auth_files, check, tmp_path):
    """`composer mirror --compression estargz` (issue 46) of a real image (the min stand-in under both
    names of a release): every layer passes the reference reader with no prefetch list (a mirror
    runs no server), the configuration names the new tars, a second run moves nothing, Docker pulls
    it as gzip and runs it, and a stargz node mounts every layer from the registry."""
    from composer.publish.push import push_image
    from composer.registry import estargz
    from tests.integration.test_estargz import MIN_STANDIN, ROOT, STARGZ_NODE_TOOLS
    from triton_standins.nodes import Containerd2Node

    for suffix in ("-py3", "-py3-min"):
        push_image(engine, MIN_STANDIN, f"{registry.host}/esrc/tritonserver:{RELEASE}{suffix}", auth=registry.auth)
    done = _mirror(f"{registry.host}/esrc", f"{other_registry.host}/esgz", auth_files, "--compression", "estargz")
    assert done.returncode == 0, done.stderr
    assert "estargz, no prefetch list: a mirror runs no server" in done.stderr
    target = RegistryApi(other_registry.host, other_registry.auth, insecure=True)
    manifest = json.loads(other_registry.manifest("esgz/tritonserver", f"{RELEASE}-py3-min").content)
    config = json.loads(target.blob("esgz/tritonserver", manifest["config"]["digest"], 64 << 20))
    assert len(manifest["layers"]) == len(config["rootfs"]["diff_ids"]) >= 1
    for n, (layer, diff_id) in enumerate(zip(manifest["layers"], config["rootfs"]["diff_ids"])):
        blob = tmp_path / f"layer{n}"
        blob.write_bytes(target.blob("esgz/tritonserver", layer["digest"], 1 << 30))
        read = subprocess.run([check, str(blob), layer["annotations"][estargz.TOC_DIGEST_ANNOTATION]],
                              capture_output=True, text=True, timeout=600)
        assert read.returncode == 0, read.stderr
        assert json.loads(read.stdout)["landmark"] == estargz.NO_PREFETCH_LANDMARK
        # (gzip itself: Python's gzip module copies the rest of the blob at each of its thousands of members)
        inside = subprocess.run(f"gzip -dc {blob} | sha256sum", shell=True, capture_output=True, text=True, timeout=600)
        assert inside.returncode == 0 and "sha256:" + inside.stdout.split()[0] == diff_id, inside.stderr
        blob.unlink()

    again = _mirror(f"{registry.host}/esrc", f"{other_registry.host}/esgz", auth_files, "--compression", "estargz")
    assert again.returncode == 0, again.stderr
    assert " -> sha256:" not in again.stderr and json.loads(again.stdout)["totals"]["manifests_put"] == 0

    ref = f"{other_registry.host}/esgz/tritonserver:{RELEASE}-py3-min"
    by_digest = f"{other_registry.host}/esgz/tritonserver@{json.loads(done.stdout)['images'][1]['digest']}"
    try:
        engine.pull(by_digest, auth=other_registry.auth.as_config())
        ran = engine.run_once(by_digest, ["cat", "/etc/debian_version"], entrypoint=[])
        assert ran.exit_code == 0 and ran.output == engine.run_once(MIN_STANDIN, ["cat", "/etc/debian_version"],
                                                                    entrypoint=[]).output
    finally:
        subprocess.run(["docker", "image", "rm", by_digest], capture_output=True)

    tools = subprocess.run([str(ROOT / "scripts" / "go-tools"), *STARGZ_NODE_TOOLS], capture_output=True, text=True,
                           timeout=3600)
    assert tools.returncode == 0, tools.stderr[-2000:]
    node = Containerd2Node(tmp_path / "node", lazy=True, background_fetch=False).start()
    try:
        node.rpull(ref, user=f"{other_registry.username}:{other_registry.password}")
        assert node.remote_snapshots() == (len(manifest["layers"]), 0), node.stargz_log.read_text()[-2000:]
    finally:
        node.stop()
