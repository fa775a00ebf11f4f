"""Registry-to-registry copies without a network: a blob's bytes verified on their way, platform
choice, the plan, and the order of a copy. The boundary faked is the registry's HTTP API (an
in-memory registry with RegistryApi's methods); the real one is in tests/integration/test_registry_mirror.py."""

from __future__ import annotations

import hashlib
import json

import pytest

from composer.core.errors import RegistryError, UsageError
from composer.core.platforms import Platform, platform_problem
from composer.core.refs import ImageRef
from composer.registry.blobs import VerifiedBlob
from composer.registry.retries import RetryPolicy
from composer.registry.copy import CopyStats, choose, copy_image, plan_copy
from composer.config.options import MIRROR, given_on_command_line
from composer.config.rules import validate as check
from composer.config.types import CompositionSpec

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


# -- a blob's bytes on their way --------------------------------------------------------------


def test_a_blob_passes_whole_and_is_counted():
    data = [b"a" * 10, b"b" * 10, b"c" * 5]
    counted: list[int] = []
    blob = VerifiedBlob(iter(data), sha(b"".join(data)), 25, "blob X", counted.append)
    assert len(blob) == 25
    assert list(blob) == data and sum(counted) == 25


def test_a_wrong_digest_is_an_error_naming_the_blob_before_its_last_chunk_is_sent():
    data = [b"a" * 10, b"b" * 10]
    blob = VerifiedBlob(iter(data), sha(b"something else"), 20, "blob sha256:123 of r/x:1")
    sent = []
    with pytest.raises(RegistryError) as caught:
        for chunk in blob:
            sent.append(chunk)
    assert sent == [b"a" * 10]  # the last chunk is held back: the target never gets the whole blob
    assert caught.value.message.startswith("blob sha256:123 of r/x:1: the bytes the source sent hash to sha256:")
    assert "nothing was tagged" in caught.value.message


@pytest.mark.parametrize("size, says", [(15, "sent more than the 15 bytes"), (30, "sent 20 of the 30 bytes")])
def test_a_wrong_size_is_an_error(size, says):
    data = [b"a" * 10, b"b" * 10]
    with pytest.raises(RegistryError, match=says):
        list(VerifiedBlob(iter(data), sha(b"".join(data)), size, "blob X"))


def test_an_unknown_digest_algorithm_is_refused():
    with pytest.raises(RegistryError, match="cannot verify a md5 digest"):
        VerifiedBlob(iter([]), "md5:abc", 0, "blob X")


# -- platforms ------------------------------------------------------------------------------


@pytest.mark.parametrize("text, problem", [
    ("linux/amd64", None), ("linux/arm64/v8", None), ("windows/amd64", None),
    ("linux", "not a platform: expected os/arch[/variant]"), ("linux/amd64/v8/x", "not a platform"),
    ("linux//v8", "not a platform"), ("linus/amd64", "unknown os 'linus' (one of linux,"),
    ("linux/amd65", "unknown architecture 'amd65' (one of amd64,"), ("linux/arm/7", "unknown variant '7'"),
])
def test_platform_strings(text, problem):
    found = platform_problem(text)
    assert (found is None) if problem is None else found.startswith(problem), found


def test_a_bad_platform_is_refused_by_its_flag_and_to_engine_refuses_platform():
    with pytest.raises(UsageError, match=r"^--platform linux/amd65: unknown architecture"):
        given_on_command_line(MIRROR, {"platform": "linux/amd65"})
    given = given_on_command_line(MIRROR, {"platform": "linux/amd64", "to_engine": True, "version": "24.09",
                                           "to": "harbor.example/nvidia"})
    with pytest.raises(UsageError, match=r"^--to-engine --platform linux/amd64: the engine pulls"):
        check(CompositionSpec().with_fields(given), MIRROR)


@pytest.mark.parametrize("to, registry", [
    ("localhost/standin", "localhost/standin"),
    ("LOCALHOST/standin/", "localhost/standin"),
    ("nvcr.io/nvidia", None),  # the default source
])
def test_a_mirror_onto_its_own_source_is_refused(to, registry):
    flags = {"version": "24.09", "to": to, **({"registry": registry} if registry else {})}
    with pytest.raises(UsageError, match=r"is the registry it copies from .*give another prefix to copy into"):
        check(CompositionSpec().with_fields(given_on_command_line(MIRROR, flags)), MIRROR)
    with pytest.raises(UsageError, match=r"^--to is required"):
        check(CompositionSpec().with_fields(given_on_command_line(MIRROR, {"version": "24.09"})), MIRROR)


INDEX = [
    {"digest": "sha256:" + "1" * 64, "platform": {"os": "linux", "architecture": "amd64"}},
    {"digest": "sha256:" + "2" * 64, "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}},
    {"digest": "sha256:" + "3" * 64, "platform": {"os": "linux", "architecture": "arm", "variant": "v6"}},
    {"digest": "sha256:" + "4" * 64, "platform": {"os": "linux", "architecture": "arm", "variant": "v7"}},
    {"digest": "sha256:" + "5" * 64, "platform": {"os": "unknown", "architecture": "unknown"}},  # attestations
]


@pytest.mark.parametrize("asked, digit", [("linux/amd64", "1"), ("linux/arm64", "2"), ("linux/arm64/v8", "2"),
                                          ("linux/arm/v7", "4")])
def test_choose_a_platform(asked, digit):
    assert choose(INDEX, Platform.parse(asked), "x")["digest"] == "sha256:" + digit * 64


def test_a_platform_the_index_lacks_lists_what_it_offers():
    with pytest.raises(UsageError) as caught:
        choose(INDEX, Platform.parse("linux/s390x"), "r.example/t:1")
    assert caught.value.message == ("--platform linux/s390x: r.example/t:1 has no such platform (it offers linux/amd64, "
                                    "linux/arm/v6, linux/arm/v7, linux/arm64/v8, unknown/unknown)")


def test_an_ambiguous_platform_asks_for_the_variant():
    with pytest.raises(UsageError, match="offers several \\(linux/arm/v6, linux/arm/v7\\): name the variant"):
        choose(INDEX, Platform.parse("linux/arm"), "x")


# -- an in-memory registry (the HTTP API's boundary) -------------------------------------------


class FakeRegistry:
    retry = RetryPolicy()  # one try: a fake registry never drops a connection unless a test says so

    def __init__(self, host: str):
        self.host = self.api_host = host
        self.manifests: dict[tuple[str, str], tuple[str, bytes]] = {}  # (repo, ref) -> (media type, body)
        self.blobs: dict[tuple[str, str], bytes] = {}
        self.calls: list[tuple] = []
        self.mounts = True

    # writes
    def put_manifest(self, name, reference, body, media_type):
        self.calls.append(("put_manifest", name, reference))
        for blob in json.loads(body).get("layers", []):
            assert (name, blob["digest"]) in self.blobs, "a manifest before its blobs"
        self.manifests[(name, reference)] = (media_type, body)
        self.manifests[(name, sha(body))] = (media_type, body)
        return sha(body)

    def upload_stream(self, name, digest, body):
        data = b"".join(body)
        self.calls.append(("upload", name, digest))
        self.blobs[(name, digest)] = data

    def mount_blob(self, name, digest, source):
        if not self.mounts or (source, digest) not in self.blobs:
            return False
        self.calls.append(("mount", name, digest))
        self.blobs[(name, digest)] = self.blobs[(source, digest)]
        return True

    # reads
    def raw_manifest(self, name, reference):
        found = self.manifests.get((name, reference))
        return (sha(found[1]), found[0], found[1]) if found else None

    def has_manifest(self, name, digest):
        return (name, digest) in self.manifests

    def document(self, name, reference):
        found = self.raw_manifest(name, reference)
        return None if found is None else (found[0], found[1], json.loads(found[2]), len(found[2]))

    def blob_size(self, name, digest):
        data = self.blobs.get((name, digest))
        return None if data is None else len(data)

    def referrers(self, name, digest):
        return None

    def blob(self, name, digest, limit=0):
        return self.blobs[(name, digest)]

    def open_blob(self, name, digest):
        return self.blobs[(name, digest)]

    def chunks(self, response, what):
        yield from (response[i:i + 4] for i in range(0, len(response), 4))


def image(reg: FakeRegistry, repo: str, arch: str, layers: list[bytes]) -> bytes:
    config = json.dumps({"os": "linux", "architecture": arch}).encode()
    for data in (config, *layers):
        reg.blobs[(repo, sha(data))] = data
    body = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                       "config": {"digest": sha(config), "size": len(config)},
                       "layers": [{"digest": sha(d), "size": len(d)} for d in layers]}).encode()
    reg.manifests[(repo, sha(body))] = (OCI_MANIFEST, body)
    return body


def index(reg: FakeRegistry, repo: str, tag: str, children: dict[str, bytes]) -> bytes:
    body = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
        {"digest": sha(b), "size": len(b), "platform": {"os": "linux", "architecture": a}} for a, b in children.items()
    ]}).encode()
    reg.manifests[(repo, tag)] = reg.manifests[(repo, sha(body))] = (OCI_INDEX, body)
    return body


@pytest.fixture
def source():
    reg = FakeRegistry("src.example")
    amd = image(reg, "nv/t", "amd64", [b"shared layer", b"amd layer"])
    arm = image(reg, "nv/t", "arm64", [b"shared layer", b"arm layer"])
    top = index(reg, "nv/t", "1", {"amd64": amd, "arm64": arm})
    sbom = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "layers": [],
                       "subject": {"digest": sha(amd)}}).encode()
    reg.manifests[("nv/t", sha(amd).replace(":", "-") + ".sbom")] = (OCI_MANIFEST, sbom)
    reg.top, reg.amd, reg.arm, reg.sbom = top, amd, arm, sbom
    return reg


def sbom_tags(digest):
    return (digest.replace(":", "-") + ".sbom",)


def test_the_plan_names_every_platform_each_blob_once_and_the_referrers(source):
    plan = plan_copy(source, ImageRef.parse("src.example/nv/t:1"), ImageRef.parse("dst.example/m/t:1"),
                     referrer_tags=sbom_tags)
    assert plan.top.digest == sha(source.top) and plan.platforms == ("linux/amd64", "linux/arm64")
    assert [m.digest for m in plan.manifests] == [sha(source.amd), sha(source.arm), sha(source.top)]
    assert len(plan.blobs) == 5  # two configs, the shared layer once, two own layers
    assert [(r.subject, r.tag) for r in plan.referrers] == [(sha(source.amd), sbom_tags(sha(source.amd))[0])]


def test_the_plan_of_one_platform_names_its_image(source):
    plan = plan_copy(source, ImageRef.parse("src.example/nv/t:1"), ImageRef.parse("dst.example/m/t:1"),
                     platform=Platform.parse("linux/arm64"))
    assert plan.top.digest == sha(source.arm) and len(plan.manifests) == 1 and len(plan.blobs) == 3


def test_a_single_image_of_another_platform_is_refused(source):
    source.manifests[("nv/t", "amd")] = (OCI_MANIFEST, source.amd)
    with pytest.raises(UsageError, match="--platform linux/arm64: src.example/nv/t:amd is a single image of linux/amd64"):
        plan_copy(source, ImageRef.parse("src.example/nv/t:amd"), ImageRef.parse("dst.example/m/t:1"),
                  platform=Platform.parse("linux/arm64"))


def test_a_copy_puts_blobs_then_manifests_then_the_tag_and_skips_what_is_there(source):
    target = FakeRegistry("dst.example")
    plan = plan_copy(source, ImageRef.parse("src.example/nv/t:1"), ImageRef.parse("dst.example/m/t:1"),
                     referrer_tags=sbom_tags)
    held = plan.blobs[0]
    target.blobs[("m/t", held.digest)] = source.blobs[("nv/t", held.digest)]  # from an interrupted run

    stats = copy_image(plan, source, target)

    assert stats.blobs_skipped == 1 and stats.blobs_moved == 4 and stats.bytes_mounted == 0
    assert stats.bytes_moved == plan.size - held.size
    kinds = [c[0] for c in target.calls]
    assert kinds[:4] == ["upload"] * 4 and kinds[-1] == "put_manifest"
    assert target.calls[-1] == ("put_manifest", "m/t", "1")  # the tag goes last
    assert ("put_manifest", "m/t", sbom_tags(sha(source.amd))[0]) in target.calls

    target.calls.clear()
    assert copy_image(plan, source, target) == CopyStats(bytes_skipped=plan.size, blobs_skipped=5)
    assert target.calls == []


def test_a_copy_within_one_registry_mounts(source):
    plan = plan_copy(source, ImageRef.parse("src.example/nv/t:1"), ImageRef.parse("src.example/m/t:1"))
    stats = copy_image(plan, source, source)
    assert stats.blobs_mounted == 5 and stats.bytes_moved == 0 and stats.bytes_mounted == plan.size


def test_a_wrong_blob_tags_nothing(source):
    target = FakeRegistry("dst.example")
    plan = plan_copy(source, ImageRef.parse("src.example/nv/t:1"), ImageRef.parse("dst.example/m/t:1"))
    bad = plan.blobs[-1]
    source.blobs[("nv/t", bad.digest)] = b"X" * bad.size  # the source serves other bytes of that size

    with pytest.raises(RegistryError, match=f"blob {bad.digest} of src.example/nv/t:1: the bytes the source sent"):
        copy_image(plan, source, target)
    assert not [c for c in target.calls if c[0] == "put_manifest"]


def test_mirror_help_renders_every_flag():
    """Help texts are rendered as markup: a bracketed '[/variant]' once broke `composer mirror --help`."""
    from tests.cli import composer

    done = composer("mirror", "--help", timeout=60)
    assert done.returncode == 0, done.stderr
    assert "--platform" in done.stdout and "--to-engine" in done.stdout and "Traceback" not in done.stderr
