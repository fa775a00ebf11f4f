"""Pushing and mirroring against a real registry (docker-registry with htpasswd auth)."""

from __future__ import annotations

import base64
import json
import uuid

import pytest

from composer.engine.connect import connect
from composer.core.errors import RegistryError
from composer.core.refs import ImageRef
from composer.sources.mirror import mirror_through_engine
from composer.publish.push import push_image
from composer.registry.credentials import RegistryAuth
from triton_standins import BASE_REF

pytestmark = pytest.mark.integration

RELEASE = "24.09"
STANDIN = "localhost/standin"
MIN_STANDIN = f"{STANDIN}/tritonserver:{RELEASE}-py3-min"
FULL_STANDIN = f"{STANDIN}/tritonserver:{RELEASE}-py3"
ROOT_STANDIN = BASE_REF  # the stand-ins' Debian root: the min stand-in's first layer


class Lines(list):
    def __call__(self, line: str) -> None:
        self.append(line)


def test_push_then_pull_back_by_digest(engine, standin_images, registry):
    source = engine.image(MIN_STANDIN)
    ref = f"{registry.host}/composer-test/min:push"
    lines = Lines()

    digest = push_image(engine, MIN_STANDIN, ref, auth=registry.auth, on_line=lines)

    assert digest.startswith("sha256:")
    answer = registry.manifest("composer-test/min", "push")
    assert answer.status_code == 200
    assert answer.headers["Docker-Content-Digest"] == digest
    assert any(digest in line for line in lines)
    assert engine.image(ref).id == source.id  # a successful push keeps the tag

    engine.remove_image(ref)
    assert engine.image(ref) is None
    by_digest = f"{registry.host}/composer-test/min@{digest}"
    pulled = engine.pull(by_digest, auth=registry.auth.as_config())
    assert pulled.id == source.id
    assert by_digest in pulled.repo_digests


def test_wrong_password_is_one_line_and_pushes_nothing(engine, standin_images, registry):
    ref = f"{registry.host}/composer-test/min:denied"
    wrong = RegistryAuth(registry.username, "wrong-password-4d1c")
    lines = Lines()

    with pytest.raises(RegistryError) as caught:
        push_image(engine, MIN_STANDIN, ref, auth=wrong, retries=3, backoff=5.0, on_line=lines)

    message = caught.value.message
    assert message == f"cannot push {ref}: the registry refused the credentials"
    assert "\n" not in message
    assert not any("wrong-password-4d1c" in line for line in lines)
    assert not any("try 2" in line for line in lines), "an auth failure must not be retried"
    assert registry.manifest("composer-test/min", "denied").status_code == 404
    assert registry.tags("composer-test/min") == []
    assert engine.image(ref) is None, "the temporary tag must not stay behind"


def test_failed_push_puts_an_existing_tag_back(engine, standin_images, registry):
    ref = f"{registry.host}/composer-test/min:kept"
    full = engine.image(FULL_STANDIN)
    engine.tag(full.id, ref)  # the tag names another image before the push

    with pytest.raises(RegistryError):
        push_image(engine, MIN_STANDIN, ref, auth=RegistryAuth("nobody", "nope"), retries=0)

    assert engine.image(ref).id == full.id


def test_stopped_registry_fails_after_retries_then_push_works_again(engine, standin_images, registry):
    ref = f"{registry.host}/composer-test/min:down"
    registry.stop()
    lines = Lines()
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    with pytest.raises(RegistryError) as caught:
        push_image(engine, MIN_STANDIN, ref, auth=registry.auth, retries=2, backoff=0.01, on_line=lines, sleep=sleep)

    assert caught.value.message == f"cannot push {ref}: registry {registry.host} does not answer"
    assert sleeps == [0.01, 0.02]
    assert sum("try " in line for line in lines) == 2
    assert engine.image(ref) is None

    registry.start()
    digest = push_image(engine, MIN_STANDIN, ref, auth=registry.auth, retries=2, backoff=0.01)
    assert registry.manifest("composer-test/min", "down").headers["Docker-Content-Digest"] == digest


def test_no_auth_uses_the_engines_own_credentials(monkeypatch, tmp_path, standin_images, registry):
    """auth=None leaves credentials to the Docker SDK, which reads DOCKER_CONFIG/config.json."""
    pair = base64.b64encode(f"{registry.username}:{registry.password}".encode()).decode()
    (tmp_path / "config.json").write_text(json.dumps({"auths": {registry.host: {"auth": pair}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    own = connect()
    ref = f"{registry.host}/composer-test/min:own"

    digest = push_image(own, MIN_STANDIN, ref)

    assert registry.manifest("composer-test/min", "own").headers["Docker-Content-Digest"] == digest
    assert own.credentials_for(registry.host) == {"username": registry.username, "password": registry.password}


@pytest.fixture
def small_release(engine, standin_images):
    """A release's two images under a source of the test's own, small ones (the min stand-in as the
    full image, its Debian root as the min): the engine's push is what the test reads, not the 1.6 GB
    full stand-in's gzip. Only the tags are the test's; they are removed after."""
    source = f"localhost/tc-mirror-{uuid.uuid4().hex[:8]}"
    pair = ((MIN_STANDIN, f"{source}/tritonserver:{RELEASE}-py3"),
            (ROOT_STANDIN, f"{source}/tritonserver:{RELEASE}-py3-min"))
    for image, ref in pair:
        engine.tag(engine.image(image).id, ref)
    try:
        yield source, [ref for _image, ref in pair]
    finally:
        for _image, ref in pair:
            engine.remove_image(ref, prune=False)


def test_mirror_moves_only_what_is_missing(engine, small_release, registry):
    source, refs = small_release
    lines = Lines()

    first = mirror_through_engine(engine, RELEASE, source=source, dest=registry.host, auth=registry.auth, on_line=lines)

    assert [(i.source, i.dest, i.moved) for i in first.images] == [
        (refs[0], f"{registry.host}/tritonserver:{RELEASE}-py3", True),
        (refs[1], f"{registry.host}/tritonserver:{RELEASE}-py3-min", True),
    ]
    for image in first.images:
        tag = image.dest.rsplit(":", 1)[1]
        assert registry.manifest("tritonserver", tag).headers["Docker-Content-Digest"] == image.digest
        assert image.digest in "\n".join(lines)
    assert ImageRef.parse(first.images[0].dest).host == registry.host
    assert registry.password not in "\n".join(lines)

    again = mirror_through_engine(engine, RELEASE, source=source, dest=registry.host, auth=registry.auth)
    assert again.moved == ()
    assert [i.digest for i in again.images] == [i.digest for i in first.images]

    # Without the local record of the push (RepoDigests), the content itself still matches.
    for image in first.images:
        engine.remove_image(image.dest)
    third = mirror_through_engine(engine, RELEASE, source=source, dest=registry.host, auth=registry.auth)
    assert third.moved == ()
    assert [i.digest for i in third.images] == [i.digest for i in first.images]


def test_mirror_with_refused_credentials_is_one_line(engine, standin_images, registry):
    with pytest.raises(RegistryError) as caught:
        mirror_through_engine(engine, RELEASE, source=STANDIN, dest=registry.host, auth=RegistryAuth("x", "bad-pw-91"))
    assert caught.value.message == (
        f"cannot read {registry.host}/tritonserver:{RELEASE}-py3: the registry refused the credentials"
    )
    assert "bad-pw-91" not in caught.value.message
