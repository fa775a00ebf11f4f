"""composer inspect's reading of an image's facts, the comparison of two, and the SBOM artifact
next to an image (an in-memory registry at the RegistryApi boundary)."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from composer.publish.artifacts import fallback_tag, find_sbom, push_sbom
from composer.core.errors import UsageError
from composer.publish.inspect import Difference, ImageReport
from composer.verify.sbom import PythonPackage, make_sbom, parse_facts
from tests.unit.fake_engine import recorded_facts

NGC_ENV = {"NVIDIA_TRITON_SERVER_VERSION": "24.09", "TRITON_SERVER_VERSION": "2.50.0", "CUDA_VERSION": "12.6.1",
           "CUDNN_VERSION": "9.4.0.58", "TRT_VERSION": "10.4.0.26", "NCCL_VERSION": "2.22.3"}


def test_versions_come_from_ngcs_environment_and_the_composers_labels():
    report = ImageReport.of("r/t:1", "registry", None, NGC_ENV, {"org.opencontainers.image.ref.name": "ubuntu",
                                                                 "org.opencontainers.image.version": "22.04"},
                            [10, 20], None)
    assert report.versions == {"release": "24.09", "triton server": "2.50.0", "os": "ubuntu 22.04",
                               "cuda": "12.6.1", "cudnn": "9.4.0.58", "tensorrt": "10.4.0.26", "nccl": "2.22.3",
                               "python": None, "numpy": None}
    assert report.parts() == {"backends": None, "repoagents": None, "caches": None}
    assert "size           30 B in 2 layers (compressed)" in report.table()
    with pytest.raises(UsageError, match="r/t:1 is not a Triton image"):
        ImageReport.of("r/t:1", "registry", None, {"PATH": "/bin"}, {}, [], None)


def test_two_images_differ_by_packages_added_removed_and_changed(ngc_plan):
    facts = parse_facts(recorded_facts())
    newer = dataclasses.replace(
        facts, debs=tuple(d for d in facts.debs if d.name != "dpkg"),
        python=tuple(dataclasses.replace(p, version="1.26.3") if p.name == "numpy" else p for p in facts.python)
        + (PythonPackage("six", "1.16.0", "/usr/local/lib/python3.11/dist-packages/six-1.16.0.dist-info"),))
    plan = ngc_plan("onnxruntime", "python")
    a, b = (ImageReport.of(ref, "engine", None, NGC_ENV, {"org.triton-composer.backends": "onnxruntime,python"}, [1],
                           json.loads(make_sbom(plan, f))) for ref, f in (("a", facts), ("b", newer)))
    difference = Difference(a, b)
    packages = difference.packages()
    dpkg = next(d.version for d in facts.debs if d.name == "dpkg")
    assert packages == {"added": {"pypi:six": "1.16.0"}, "removed": {"deb:dpkg": dpkg},
                        "changed": {"pypi:numpy": ["1.26.4", "1.26.3"]}}
    assert difference.versions() == {"numpy": ("1.26.4", "1.26.3")} and difference.parts() == {}
    assert "changed  pypi:numpy 1.26.4 -> 1.26.3" in difference.table()
    assert b.versions["numpy"] == "1.26.3" and b.versions["os"] == "debian 12"


class MemoryRegistry:
    """The RegistryApi calls artifacts.py makes, over dicts."""

    host = "r.example"

    def __init__(self, referrers_api: bool):
        self.referrers_api, self.blobs, self.manifests = referrers_api, {}, {}
        self.put_manifest("team/triton", "1", b'{"schemaVersion":2}', "application/vnd.oci.image.manifest.v1+json")

    def document(self, name, reference):
        body = self.manifests.get((name, reference))
        if body is None:
            return None
        return "sha256:" + hashlib.sha256(body).hexdigest(), "application/vnd.oci.image.manifest.v1+json", \
            json.loads(body), len(body)

    def raw_manifest(self, name, reference):
        found = self.document(name, reference)
        return None if found is None else (found[0], found[1], self.manifests[(name, reference)])

    def blob(self, name, digest, limit):
        return self.blobs[digest]

    def upload_blob(self, name, data):
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        self.blobs[digest] = data
        return digest

    def put_manifest(self, name, reference, body, media_type):
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        self.manifests[(name, reference)] = self.manifests[(name, digest)] = body
        return digest

    def referrers(self, name, digest):
        if not self.referrers_api:
            return None
        found = {r: json.loads(b) for (n, r), b in self.manifests.items() if r.startswith("sha256:")}
        return [{"digest": r, "artifactType": m.get("artifactType")} for r, m in found.items()
                if (m.get("subject") or {}).get("digest") == digest]


@pytest.mark.parametrize("referrers_api", [True, False])
def test_the_sbom_is_pushed_next_to_the_image_and_found_again(referrers_api):
    api = MemoryRegistry(referrers_api)
    digest = api.document("team/triton", "1")[0]
    assert find_sbom(api, "team/triton", digest) is None
    where = push_sbom(api, "team/triton", digest, '{"bomFormat": "CycloneDX"}\n')
    # Under cosign's tag always, and listed under the referrers tag (OCI 1.1 fallback) either way.
    assert ("team/triton", fallback_tag(digest)) in api.manifests
    assert where.startswith("r.example/team/triton@sha256:")
    index = json.loads(api.manifests[("team/triton", digest.replace(":", "-"))])
    assert [(m["digest"], m["artifactType"]) for m in index["manifests"]] == [
        (where.rsplit("@", 1)[1], "application/vnd.cyclonedx+json")]
    assert find_sbom(api, "team/triton", digest) == '{"bomFormat": "CycloneDX"}\n'
    assert find_sbom(api, "team/triton", "sha256:" + "0" * 64) is None


def test_an_estargz_layer_is_told_by_its_toc_and_says_what_a_node_fetches_first():
    from composer.publish.inspect import _layer_kind, _prefetched
    from composer.registry import estargz

    gzip = "application/vnd.oci.image.layer.v1.tar+gzip"
    layers = [{"mediaType": gzip, "size": 1000},
              {"mediaType": gzip, "size": 3000, "annotations": {
                  estargz.TOC_DIGEST_ANNOTATION: "sha256:" + "1" * 64, estargz.PREFETCH_BYTES_ANNOTATION: "1500",
                  estargz.PREFETCH_FILES_ANNOTATION: "7"}}]
    report = ImageReport.of("r/t:1", "registry", None, NGC_ENV, {}, [1000, 3000], None,
                            compressions=tuple(_layer_kind(layer) for layer in layers),
                            prefetched=tuple(_prefetched(layer) for layer in layers))
    table = report.table()
    assert "layer 1   " in table and "(gzip)" in table
    assert "(estargz, 1.5 KB of 7 file(s) prefetched)" in table
    assert "1.5 KB of 7 file(s) before the container starts (0.38x of the compressed size)" in table
    assert report.to_dict()["prefetched"] == [{"bytes": 0, "files": 0}, {"bytes": 1500, "files": 7}]
