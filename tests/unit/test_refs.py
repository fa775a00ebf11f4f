"""Image references: Docker's grammar, docker.io normalisation, printing, digests of a repository."""

from __future__ import annotations

import pytest

from composer.core.errors import UsageError
from composer.core.refs import (
    ImageRef,
    build_source,
    check_registry_prefix,
    check_tag,
    digest_for,
    parse_tag_ref,
)

D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64
ID = "sha256:" + "9" * 64


@pytest.mark.parametrize(
    "text, host, repository, tag, digest",
    [
        ("ubuntu", "docker.io", "library/ubuntu", None, None),
        ("ubuntu:22.04", "docker.io", "library/ubuntu", "22.04", None),
        ("docker.io/ubuntu", "docker.io", "library/ubuntu", None, None),
        ("docker.io/library/ubuntu:22.04", "docker.io", "library/ubuntu", "22.04", None),
        ("index.docker.io/library/ubuntu", "docker.io", "library/ubuntu", None, None),
        ("someone/thing", "docker.io", "someone/thing", None, None),
        ("someone/thing:v1.0_rc-2", "docker.io", "someone/thing", "v1.0_rc-2", None),
        ("localhost/x", "localhost", "x", None, None),
        ("localhost/standin/tritonserver:24.09-py3", "localhost", "standin/tritonserver", "24.09-py3", None),
        ("localhost:5000/x:1", "localhost:5000", "x", "1", None),
        ("127.0.0.1:5000/tritonserver:24.09-py3", "127.0.0.1:5000", "tritonserver", "24.09-py3", None),
        ("nvcr.io/nvidia/tritonserver:24.09-py3", "nvcr.io", "nvidia/tritonserver", "24.09-py3", None),
        ("nvcr.io/nvidia/tritonserver:24.09-py3-min", "nvcr.io", "nvidia/tritonserver", "24.09-py3-min", None),
        ("harbor.example:8443/ml/a/b/c:x", "harbor.example:8443", "ml/a/b/c", "x", None),
        ("[::1]:5000/x:y", "[::1]:5000", "x", "y", None),
        (f"nvcr.io/nvidia/tritonserver@{D1}", "nvcr.io", "nvidia/tritonserver", None, D1),
        (f"nvcr.io/nvidia/tritonserver:24.09-py3@{D1}", "nvcr.io", "nvidia/tritonserver", "24.09-py3", D1),
        (f"ubuntu@{D2}", "docker.io", "library/ubuntu", None, D2),
        ("a__b/c--d/e.f_g:T", "docker.io", "a__b/c--d/e.f_g", "T", None),
        ("Registry.Example/x", "Registry.Example", "x", None, None),
        ("my-host/x", "docker.io", "my-host/x", None, None),  # no dot, colon or localhost: a namespace
    ],
)
def test_valid_references(text, host, repository, tag, digest):
    ref = ImageRef.parse(text)
    assert (ref.host, ref.repository, ref.tag, ref.digest) == (host, repository, tag, digest)
    assert ImageRef.parse(str(ref)) == ref  # printing round-trips
    assert ImageRef.parse(ref.canonical()) == ref


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Bad Ref",
        "UPPER",
        "ubuntu:",
        "x:y:z",
        "::bad::",
        "a//b",
        "/a",
        "a/",
        "-a",
        "a-",
        "a:-b",
        "a:.b",
        "a:" + "t" * 129,
        "a@sha256:12",
        "a@md5:" + "1" * 32,
        f"a@{D1}@{D2}",
        "x\nRUN echo pwned",
        "x\tb",
        "x:1\r",
        "nvcr.io:port/x",
        "bad_host.example/x",
        "localhost/Upper",
        ID,
        "9" * 64,
        "a/" + "b" * 260,
        "a b:1",
        "é/x",
    ],
)
def test_invalid_references_are_one_line_usage_errors_naming_the_input(text):
    with pytest.raises(UsageError) as caught:
        ImageRef.parse(text, "--image full")
    message = caught.value.message
    assert message.startswith("--image full ")
    assert "\n" not in message and "\r" not in message
    assert "expected [HOST[:PORT]/]PATH" in message
    assert repr(text)[:60] in message


def test_printing_is_the_familiar_form_and_canonical_spells_out_docker_hub():
    ref = ImageRef.parse("docker.io/library/ubuntu:22.04")
    assert str(ref) == "ubuntu:22.04" and ref.familiar_name == "ubuntu"
    assert ref.canonical() == "docker.io/library/ubuntu:22.04" and ref.name == "docker.io/library/ubuntu"
    assert str(ImageRef.parse("someone/thing")) == "someone/thing"
    assert str(ImageRef.parse("localhost:5000/x:1")) == "localhost:5000/x:1"


def test_variants():
    ref = ImageRef.parse("nvcr.io/nvidia/tritonserver:24.09-py3")
    assert str(ref.without_tag().with_digest(D1)) == f"nvcr.io/nvidia/tritonserver@{D1}"
    assert str(ref.with_digest(D1)) == f"nvcr.io/nvidia/tritonserver:24.09-py3@{D1}"
    assert str(ref.with_digest(D1).without_digest()) == str(ref)
    assert ref.with_tag("24.10-py3").tag == "24.10-py3"
    assert ImageRef.parse("x").tag_or_latest == "latest"
    assert ref.same_repository(ImageRef.parse(f"nvcr.io/nvidia/tritonserver@{D2}"))
    assert not ref.same_repository(ImageRef.parse("nvcr.io/nvidia/other:24.09-py3"))
    with pytest.raises(UsageError):
        ref.with_digest("sha256:nothex")
    with pytest.raises(UsageError):
        ref.with_tag("Bad Tag")


@pytest.mark.parametrize("text", ["harbor.example/nvidia", "localhost/standin", "127.0.0.1:5000", "nvcr.io/nvidia",
                                  "someone", "harbor.example:8443/a/b"])
def test_registry_prefixes(text):
    assert check_registry_prefix(text) == text
    assert check_registry_prefix(text + "/") == text


@pytest.mark.parametrize("text", ["Bad Prefix", "", "/", "nvcr.io/nvidia:24.09", "x\nRUN echo", "nvcr.io/Nvidia",
                                  f"nvcr.io/x@{D1}", "a//b"])
def test_bad_registry_prefixes(text):
    with pytest.raises(UsageError) as caught:
        check_registry_prefix(text, "--to")
    assert caught.value.message.startswith(f"--to {text!r}: not a valid registry prefix")  # the one rule (spec too)
    assert "\n" not in caught.value.message


def test_tags_and_tag_references():
    assert check_tag("24.09-py3") == "24.09-py3"
    for bad in ("Bad Tag", "", ".x", "-x", "x" * 129, "a:b", "a/b"):
        with pytest.raises(UsageError, match="is not a valid tag"):
            check_tag(bad, "--tag")
    assert str(parse_tag_ref("triton-composer/x")) == "triton-composer/x:latest"
    assert parse_tag_ref("harbor.example/ml/triton:onnx").tag == "onnx"
    with pytest.raises(UsageError, match="names a digest"):
        parse_tag_ref(f"x@{D1}", "--push")
    with pytest.raises(UsageError, match=r"^--push 'Bad Ref' is not a valid image reference"):
        parse_tag_ref("Bad Ref", "--push")
    with pytest.raises(UsageError, match=r"^--tag 'x:y:z'"):
        parse_tag_ref("x:y:z")


# -- one definition of an image's digest ----------------------------------------------


def test_digest_is_the_one_recorded_for_the_refs_own_repository():
    recorded = ["127.0.0.1:5000/elsewhere/tritonserver@" + D2, "mirror.example/nvidia/tritonserver@" + D1]
    assert digest_for("mirror.example/nvidia/tritonserver:24.09-py3", recorded) == D1
    assert digest_for("localhost/standin/tritonserver:24.09-py3", recorded) is None
    assert digest_for("ubuntu:22.04", ["ubuntu@" + D1]) == D1
    assert digest_for("docker.io/library/ubuntu", ["ubuntu@" + D1]) == D1
    assert digest_for(f"x/y@{D2}", ["x/y@" + D1]) == D2  # a digest reference names its digest
    assert digest_for(ID, ["x@" + D1]) is None  # an image id is no reference
    assert digest_for("x", ["<none>@<none>", "garbage"]) is None


def test_an_image_known_only_under_another_repository_is_built_by_id_with_a_note():
    pinned = build_source("mirror.example/nvidia/tritonserver:24.09-py3", ID,
                          ["mirror.example/nvidia/tritonserver@" + D1])
    assert pinned.ref == f"mirror.example/nvidia/tritonserver@{D1}" and pinned.note is None

    other = build_source("localhost/standin/tritonserver:24.09-py3", ID, ["127.0.0.1:5000/tritonserver@" + D2])
    assert other.ref == ID
    assert "127.0.0.1:5000/tritonserver" in other.note and "image id" in other.note and D2 not in other.ref

    local = build_source("localhost/standin/tritonserver:24.09-py3", ID, [])
    assert local.ref == "localhost/standin/tritonserver:24.09-py3" and local.note is None
