"""Registry logic without an engine: credentials, failure classes, retries, tags, references."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from composer.engine.interface import ImageInfo
from composer.core.errors import ImageNotFound, RegistryError, UsageError
from composer.publish.push import Failure, classify, push_image
from composer.registry.client import Registries, RegistryApi
from composer.registry.credentials import RegistryAuth, load_auth
from composer.registry.trust import InsecureRegistries, ca_files, certs_dirs, check_ca_file, may_send_credentials
from tests.unit.fake_engine import FakeEngine

SECRET = "pa:ss-w0rd"


# -- credentials --------------------------------------------------------------


def test_no_spec_leaves_the_engines_credentials():
    assert load_auth(None) is None


def test_file_with_user_colon_password(tmp_path):
    path = tmp_path / "creds"
    path.write_text(f"alice:{SECRET}\n")
    assert load_auth(f"file:{path}") == RegistryAuth("alice", SECRET)


def test_file_with_json(tmp_path):
    path = tmp_path / "creds.json"
    path.write_text(json.dumps({"username": "alice", "password": SECRET}))
    assert load_auth(f"file:{path}") == RegistryAuth("alice", SECRET)


def test_env_variable():
    assert load_auth("env:REG", environ={"REG": f"alice:{SECRET}"}) == RegistryAuth("alice", SECRET)


@pytest.mark.parametrize(
    "content", ["", "alice", ":pw", "alice:", "{not json", json.dumps({"username": "alice"}), "[1, 2]"]
)
def test_bad_file_content_is_a_usage_error_that_does_not_echo_it(tmp_path, content):
    path = tmp_path / "creds"
    path.write_text(content)
    with pytest.raises(UsageError) as caught:
        load_auth(f"file:{path}")
    assert str(path) in caught.value.message
    assert "\n" not in caught.value.message
    if content:
        assert content not in caught.value.message


def test_missing_file_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="cannot read the credentials file .*nope"):
        load_auth(f"file:{tmp_path / 'nope'}")


def test_a_folder_or_special_file_is_named_with_the_flag(tmp_path):
    with pytest.raises(UsageError) as caught:
        load_auth(f"file:{tmp_path}")
    assert caught.value.message == f"--registry-auth: the credentials file {tmp_path} is a folder, not a regular file"
    with pytest.raises(UsageError, match="^--source-auth: the credentials file /dev/zero is a character device"):
        load_auth("file:/dev/zero", flag="--source-auth")


def test_unset_or_bad_env_variable():
    with pytest.raises(UsageError, match="REG is not set"):
        load_auth("env:REG", environ={})
    with pytest.raises(UsageError, match="REG does not hold user:password"):
        load_auth("env:REG", environ={"REG": "justapassword"})


@pytest.mark.parametrize("spec", [f"alice:{SECRET}", "file:", "env:", "vault:x", ""])
def test_unknown_spec_is_a_usage_error_that_does_not_echo_it(spec):
    with pytest.raises(UsageError) as caught:
        load_auth(spec)
    assert SECRET not in caught.value.message
    assert "file:PATH or env:NAME" in caught.value.message


def test_repr_and_str_hide_the_password():
    auth = RegistryAuth("alice", SECRET)
    for text in (repr(auth), str(auth), f"{auth}", repr([auth])):
        assert "alice" in text
        assert SECRET not in text


def test_redact_scrubs_password_and_its_base64():
    import base64

    auth = RegistryAuth("alice", SECRET)
    encoded = base64.b64encode(f"alice:{SECRET}".encode()).decode()
    assert auth.redact(f"x {SECRET} y {encoded}") == "x *** y ***"


# -- failure classes ------------------------------------------------------------


@pytest.mark.parametrize(
    "message, kind",
    [
        ("cannot push r: unauthorized: authentication required", Failure.AUTH),
        ("cannot push r: no basic auth credentials", Failure.AUTH),
        ("cannot push r: denied: requested access to the resource is denied", Failure.AUTH),
        ("cannot push r: received unexpected HTTP status: 403 Forbidden", Failure.AUTH),
        ('cannot push r: Get "http://127.0.0.1:5000/v2/": dial tcp 127.0.0.1:5000: connect: connection refused', Failure.NO_ANSWER),
        ("cannot push r: net/http: TLS handshake timeout", Failure.TRANSIENT),
        ("cannot push r: read tcp 127.0.0.1:1->127.0.0.1:5000: read: connection reset by peer", Failure.TRANSIENT),
        ("cannot push r: received unexpected HTTP status: 503 Service Unavailable", Failure.TRANSIENT),
        ("cannot push r: received unexpected HTTP status: 500 Internal Server Error", Failure.TRANSIENT),
        ("cannot push r: Patch http://127.0.0.1:5000/v2/x/blobs/uploads/abc: EOF", Failure.TRANSIENT),
        ("cannot push r: An image does not exist locally with the tag: 127.0.0.1:5000/x", Failure.OTHER),
        ("cannot push r: invalid reference format", Failure.OTHER),
    ],
)
def test_classify(message, kind):
    assert classify(message) is kind


def test_a_port_like_500x_is_not_a_server_error():
    assert classify("cannot push 127.0.0.1:5003/x: invalid reference format") is Failure.OTHER


# -- push with a fake engine ------------------------------------------------------


REF = "127.0.0.1:5000/x:1"
REFUSED = 'Get "http://127.0.0.1:5000/v2/": dial tcp 127.0.0.1:5000: connect: connection refused'


def _engine(**kwargs) -> FakeEngine:
    return FakeEngine(images={"sha256:aaa": "sha256:aaa", "src:1": "sha256:aaa"}, **kwargs)


def test_transient_failures_are_retried_with_exponential_backoff():
    engine = _engine(push_failures=[REFUSED, "received unexpected HTTP status: 502 Bad Gateway"])
    sleeps: list[float] = []
    lines: list[str] = []
    digest = push_image(engine, "src:1", REF, retries=3, backoff=0.5, sleep=sleeps.append, on_line=lines.append)
    assert digest == "sha256:" + "d" * 64
    assert sleeps == [0.5, 1.0]
    assert len(engine.pushes) == 3
    assert engine.images[REF] == "sha256:aaa"  # a successful push keeps the tag


def test_unreachable_after_retries_is_one_line_and_untags():
    engine = _engine(push_failures=[REFUSED] * 10)
    sleeps: list[float] = []
    with pytest.raises(RegistryError) as caught:
        push_image(engine, "src:1", REF, retries=3, backoff=1.0, sleep=sleeps.append)
    assert caught.value.message == f"cannot push {REF}: registry 127.0.0.1:5000 does not answer"
    assert sleeps == [1.0, 2.0, 4.0]
    assert len(engine.pushes) == 4
    assert REF not in engine.images


def test_server_errors_after_retries_say_so():
    engine = _engine(push_failures=["received unexpected HTTP status: 503 Service Unavailable"] * 10)
    with pytest.raises(RegistryError, match="kept failing after 2 tries: .*503") as caught:
        push_image(engine, "src:1", REF, retries=1, sleep=lambda _s: None)
    assert "\n" not in caught.value.message


def test_auth_failures_are_never_retried_and_restore_the_old_tag():
    engine = _engine(push_failures=["unauthorized: authentication required"] * 5)
    engine.images[REF] = "sha256:old"
    sleeps: list[float] = []
    auth = RegistryAuth("alice", SECRET)
    with pytest.raises(RegistryError) as caught:
        push_image(engine, "src:1", REF, auth=auth, sleep=sleeps.append)
    assert caught.value.message == f"cannot push {REF}: the registry refused the credentials"
    assert sleeps == []
    assert len(engine.pushes) == 1
    assert engine.pushes[0][1] == {"username": "alice", "password": SECRET}
    assert engine.images[REF] == "sha256:old"


def test_no_auth_passes_none_so_the_engine_uses_its_own():
    engine = _engine()
    push_image(engine, "src:1", REF)
    assert engine.pushes == [(REF, None)]


def test_no_retag_when_the_ref_already_names_the_image():
    engine = _engine(push_failures=["invalid reference format"])
    engine.images[REF] = "sha256:aaa"
    with pytest.raises(RegistryError):
        push_image(engine, "src:1", REF)
    assert engine.images[REF] == "sha256:aaa"


def test_the_only_name_of_an_image_is_kept_rather_than_deleting_the_image():
    engine = FakeEngine(images={"sha256:bbb": "sha256:bbb"}, push_failures=["invalid reference format"])
    lines: list[str] = []
    with pytest.raises(RegistryError):
        push_image(engine, "sha256:bbb", REF, on_line=lines.append)
    assert engine.images[REF] == "sha256:bbb"
    assert any("only name" in line for line in lines)


def test_engine_messages_are_scrubbed_of_the_password():
    engine = _engine(push_failures=[f"weird failure mentioning {SECRET}"])
    with pytest.raises(RegistryError) as caught:
        push_image(engine, "src:1", REF, auth=RegistryAuth("alice", SECRET))
    assert SECRET not in caught.value.message


def test_missing_image_and_digest_target():
    with pytest.raises(ImageNotFound):
        push_image(_engine(), "nope:1", REF)
    with pytest.raises(UsageError):
        push_image(_engine(), "src:1", "127.0.0.1:5000/x@sha256:" + "1" * 64)


# -- references and the HTTP API's address ----------------------------------------


def test_https_unless_the_engine_calls_the_registry_insecure():
    assert RegistryApi("127.0.0.1:5000", insecure=True, session=StubSession({})).base_url() == "http://127.0.0.1:5000"
    assert RegistryApi("localhost:5000", insecure=True, session=StubSession({})).base_url() == "http://localhost:5000"
    assert RegistryApi("127.0.0.1:5000").base_url() == "https://127.0.0.1:5000"
    assert RegistryApi("nvcr.io").base_url() == "https://nvcr.io"
    assert RegistryApi("docker.io").base_url() == "https://registry-1.docker.io"
    assert SECRET not in repr(RegistryApi("nvcr.io", RegistryAuth("a", SECRET)))


# -- what a registry holds, from its HTTP API (a stub session) -----------------------


class _Response:
    def __init__(self, status: int, body: dict | None = None, headers: dict | None = None):
        self.status_code = status
        self.content = json.dumps(body or {}).encode()
        self.headers = headers or {}

    def json(self):
        return json.loads(self.content)


@dataclass
class StubSession:
    """Answers GETs from a table of URL -> response; records what was sent."""

    answers: dict[str, list[_Response]]
    sent: list[tuple[str, dict, object]] = field(default_factory=list)

    def get(self, url, headers=None, auth=None, timeout=None, params=None):
        import requests

        self.sent.append((url, dict(headers or {}), auth))
        if url not in self.answers:
            raise requests.ConnectionError(f"nothing listens for {url}")
        queue = self.answers[url]
        return queue.pop(0) if len(queue) > 1 else queue[0]


IMAGE = ImageInfo(id="sha256:" + "c" * 64, ref="x", tags=(), repo_digests=(), env={}, labels={}, size=0)
BASE = "http://127.0.0.1:5000/v2/tritonserver/manifests/"
V2 = "application/vnd.docker.distribution.manifest.v2+json"


def _manifest(config: str) -> dict:
    return {"schemaVersion": 2, "mediaType": V2, "config": {"digest": config}, "layers": []}


def test_missing_tag_is_none_and_accept_headers_name_docker_and_oci():
    session = StubSession({BASE + "t": [_Response(404)]})
    api = RegistryApi("127.0.0.1:5000", RegistryAuth("a", SECRET), insecure=True, session=session)
    assert api.holds_image("tritonserver", "t", IMAGE) is None
    url, headers, auth = session.sent[-1]
    assert "application/vnd.oci.image.manifest.v1+json" in headers["Accept"]
    assert V2 in headers["Accept"]
    assert auth == ("a", SECRET)


def test_same_config_digest_means_held_and_another_means_not():
    held = _Response(200, _manifest(IMAGE.id), {"Docker-Content-Digest": "sha256:" + "1" * 64})
    other = _Response(200, _manifest("sha256:" + "9" * 64), {"Docker-Content-Digest": "sha256:" + "2" * 64})
    api = RegistryApi("127.0.0.1:5000", insecure=True, session=StubSession({BASE + "same": [held], BASE + "other": [other]}))
    assert api.holds_image("tritonserver", "same", IMAGE).digest == "sha256:" + "1" * 64
    assert api.holds_image("tritonserver", "other", IMAGE) is None


def test_recorded_repo_digest_means_held_without_reading_the_config():
    digest = "sha256:" + "1" * 64
    image = ImageInfo(IMAGE.id, "x", (), (f"127.0.0.1:5000/tritonserver@{digest}",), {}, {}, 0)
    answer = _Response(200, _manifest("sha256:" + "9" * 64), {"Docker-Content-Digest": digest})
    api = RegistryApi("127.0.0.1:5000", insecure=True, session=StubSession({BASE + "t": [answer]}))
    assert api.holds_image("tritonserver", "t", image) is not None


def test_an_index_is_held_when_one_of_its_images_is():
    child = "sha256:" + "5" * 64
    index = {"mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [{"digest": child}]}
    session = StubSession(
        {
            BASE + "t": [_Response(200, index, {"Docker-Content-Digest": "sha256:" + "6" * 64})],
            BASE + child: [_Response(200, _manifest(IMAGE.id))],
        }
    )
    assert RegistryApi("127.0.0.1:5000", insecure=True, session=session).holds_image("tritonserver", "t", IMAGE) is not None


def test_bearer_token_challenge_is_answered():
    challenge = 'Bearer realm="https://auth.example/token",service="reg.example"'
    session = StubSession(
        {
            "https://reg.example/v2/n/manifests/t": [
                _Response(401, headers={"WWW-Authenticate": challenge}),
                _Response(200, _manifest(IMAGE.id)),
            ],
            "https://auth.example/token": [_Response(200, {"token": "tok"})],
        }
    )
    api = RegistryApi("reg.example", RegistryAuth("a", SECRET), session=session)
    assert api.holds_image("n", "t", IMAGE) is not None
    assert session.sent[-1][1]["Authorization"] == "Bearer tok"


def test_refused_and_unreachable_registries_are_one_line_errors():
    import requests

    api = RegistryApi("127.0.0.1:5000", RegistryAuth("a", SECRET), insecure=True, session=StubSession({BASE + "t": [_Response(401)]}))
    with pytest.raises(RegistryError, match="cannot read 127.0.0.1:5000/tritonserver:t: the registry refused"):
        api.manifest("tritonserver", "t")

    class Down:
        def get(self, *args, **kwargs):
            raise requests.ConnectionError(f"refused, and here is {SECRET}")

    with pytest.raises(RegistryError) as caught:
        RegistryApi("127.0.0.1:5000", insecure=True, session=Down()).manifest("tritonserver", "t")
    assert caught.value.message == "cannot read 127.0.0.1:5000/tritonserver:t: registry 127.0.0.1:5000 does not answer"


# -- trust: token realms, insecure registries, CA files ---------------------------------


@pytest.mark.parametrize(
    "realm, host, sent",
    [
        ("https://auth.example/token", "reg.example", True),  # https anywhere
        ("https://reg.example/token", "reg.example", True),
        ("http://reg.example:5000/token", "reg.example:5000", True),  # the registry's own host
        ("http://REG.example:5000/token", "reg.example:5000", True),
        ("http://auth.example/token", "reg.example", False),  # plain http elsewhere
        ("http://reg.example:5001/token", "reg.example:5000", False),  # another port is another host
        ("http://reg.example/token", "reg.example:5000", False),
        ("ftp://reg.example/token", "reg.example", False),
    ],
)
def test_realm_rule(realm, host, sent):
    assert may_send_credentials(realm, host) is sent


def _challenge(realm: str) -> _Response:
    return _Response(401, headers={"WWW-Authenticate": f'Bearer realm="{realm}",service="reg"'})


def test_a_plain_http_realm_elsewhere_gets_no_credentials_and_the_error_says_why():
    base = "http://127.0.0.1:5000/v2/n/manifests/t"
    session = StubSession(
        {base: [_challenge("http://evil.example/token")], "http://evil.example/token": [_Response(200, {"token": "anon"})]}
    )
    api = RegistryApi("127.0.0.1:5000", RegistryAuth("a", SECRET), insecure=True, session=session)
    with pytest.raises(RegistryError) as caught:
        api.manifest("n", "t")
    realm_requests = [auth for url, _h, auth in session.sent if url.startswith("http://evil.example")]
    assert realm_requests == [None]
    assert "http://evil.example/token" in caught.value.message and "no credentials were sent" in caught.value.message
    assert SECRET not in caught.value.message


def test_an_https_realm_and_the_registrys_own_http_realm_get_credentials():
    base = "http://127.0.0.1:5000/v2/n/manifests/t"
    for realm in ("https://auth.example/token", "http://127.0.0.1:5000/token"):
        session = StubSession(
            {base: [_challenge(realm), _Response(200, _manifest(IMAGE.id))], realm: [_Response(200, {"token": "t"})]}
        )
        api = RegistryApi("127.0.0.1:5000", RegistryAuth("a", SECRET), insecure=True, session=session)
        assert api.manifest("n", "t") is not None
        assert [auth for url, _h, auth in session.sent if url == realm] == [("a", SECRET)]


def test_a_secure_registry_is_never_spoken_to_over_http():
    session = StubSession({})
    with pytest.raises(RegistryError, match="does not answer"):
        RegistryApi("reg.example", session=session).manifest("n", "t")
    assert session.sent and all(url.startswith("https://") for url, _h, _a in session.sent)


def test_missing_credentials_are_named():
    session = StubSession({"https://reg.example/v2/n/manifests/t": [_Response(401)]})
    with pytest.raises(RegistryError) as caught:
        RegistryApi("reg.example", session=session).manifest("n", "t")
    assert caught.value.message == (
        "cannot read reg.example/n:t: the registry asks for credentials and none were given "
        "(--registry-auth, or docker login reg.example)"
    )


ENGINE_CONFIG = {
    "IndexConfigs": {
        "docker.io": {"Name": "docker.io", "Secure": True},
        "build.internal:5000": {"Name": "build.internal:5000", "Secure": False},
    },
    "InsecureRegistryCIDRs": ["127.0.0.0/8", "10.20.0.0/16", "not-a-cidr"],
}


@pytest.mark.parametrize(
    "host, insecure",
    [
        ("127.0.0.1:5000", True),
        ("127.9.9.9", True),
        ("localhost", True),
        ("localhost:5000", True),
        ("build.internal:5000", True),  # the engine's --insecure-registry
        ("build.internal", False),  # that name on another port is not
        ("build.internal:5001", False),
        ("10.20.3.4:443", True),  # in an insecure CIDR
        ("10.21.3.4", False),
        ("docker.io", False),
        ("nvcr.io", False),
        ("harbor.example", False),
        ("[::1]:5000", False),  # the engine does not call ::1 insecure
    ],
)
def test_insecure_rule(host, insecure):
    assert InsecureRegistries.from_engine_config(ENGINE_CONFIG).allows_http(host) is insecure


def test_loopback_is_insecure_even_when_the_engine_lists_nothing():
    rule = InsecureRegistries.from_engine_config({})
    assert rule.allows_http("127.0.0.1:5000") and rule.allows_http("localhost:5000")
    assert not rule.allows_http("10.20.3.4")


def test_ca_files_are_the_engines_for_that_host_then_the_explicit_one(tmp_path):
    system, rootless, user = tmp_path / "etc", tmp_path / "xdg", tmp_path / "home"
    (system / "reg.example:5000").mkdir(parents=True)
    (system / "reg.example:5000" / "ca.crt").write_text("x")
    (system / "reg.example:5000" / "client.cert").write_text("x")  # a client certificate, no CA
    (system / "reg.example:5000" / "b.crt").write_text("x")
    (rootless / "reg.example:5000").mkdir(parents=True)
    (rootless / "reg.example:5000" / "ca.crt").write_text("x")
    (system / "reg.example").mkdir()
    (system / "reg.example" / "ca.crt").write_text("x")  # the same name on another port: not used
    explicit = tmp_path / "site-ca.pem"
    dirs = (system, rootless, user)

    assert ca_files("reg.example:5000", dirs=dirs) == (
        system / "reg.example:5000" / "b.crt",
        system / "reg.example:5000" / "ca.crt",
        rootless / "reg.example:5000" / "ca.crt",
    )
    assert ca_files("reg.example:5000", explicit=explicit, dirs=dirs)[-1] == explicit
    assert ca_files("other.example", dirs=dirs) == ()
    assert ca_files("other.example", explicit=explicit, dirs=dirs) == (explicit,)


def test_certs_dirs_follow_the_rootless_engine_and_the_user():
    assert certs_dirs({"HOME": "/home/u"}) == (
        Path("/etc/docker/certs.d"), Path("/home/u/.config/docker/certs.d"), Path("/home/u/.docker/certs.d"),
    )
    assert certs_dirs({"HOME": "/home/u", "XDG_CONFIG_HOME": "/x"})[1] == Path("/x/docker/certs.d")


def test_check_ca_file(tmp_path):
    good = tmp_path / "ca.pem"
    good.write_text("-----BEGIN CERTIFICATE-----\nMII\n-----END CERTIFICATE-----\n")
    assert check_ca_file(good) == good
    with pytest.raises(UsageError, match=r"--registry-ca .*nope: cannot read it"):
        check_ca_file(tmp_path / "nope")
    (tmp_path / "key.pem").write_text("-----BEGIN PRIVATE KEY-----\n")
    with pytest.raises(UsageError, match="not a PEM certificate file"):
        check_ca_file(tmp_path / "key.pem")


def test_registries_use_explicit_credentials_else_the_engines_login_per_host(tmp_path):
    import requests.certs

    engine = FakeEngine(registry_settings=ENGINE_CONFIG, logins={"reg.example": {"username": "bob", "password": SECRET}})
    bundle = Path(requests.certs.where())  # a real PEM file of CAs
    registries = Registries(engine, ca_file=bundle)
    client = registries.client("reg.example")
    assert client.auth == RegistryAuth("bob", SECRET) and client.insecure is False
    assert client.ca_files[-1] == bundle
    assert registries.client("reg.example") is client
    assert registries.client("127.0.0.1:5000").insecure is True
    assert registries.client("other.example").auth is None
    explicit = Registries(engine, RegistryAuth("alice", SECRET)).client("reg.example")
    assert explicit.auth == RegistryAuth("alice", SECRET)
    (tmp_path / "bad.pem").write_text("not a certificate")
    with pytest.raises(UsageError, match="bad.pem: not a readable PEM CA certificate"):
        Registries(engine, ca_file=tmp_path / "bad.pem").client("reg.example")


def test_a_certs_d_file_removed_after_it_was_listed_is_skipped_not_an_error(tmp_path):
    # Found by CI: another job's registry took its certs.d folder away while a push looked at it.
    import requests.certs

    gone = tmp_path / "certs.d" / "127.0.0.1:41781" / "ca.crt"
    api = RegistryApi("127.0.0.1:41781", ca_files=(Path(requests.certs.where()), gone))
    assert api.ca_files[-1] == gone
    (tmp_path / "bad.pem").write_text("not a certificate")
    with pytest.raises(UsageError, match="not a readable PEM CA certificate"):
        RegistryApi("127.0.0.1:41781", ca_files=(tmp_path / "bad.pem",))


@pytest.fixture
def silent_registry():
    """A port on 127.0.0.1 that accepts connections and never answers (closed at the end)."""
    import socket
    import threading

    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen(8)
    listening.settimeout(0.1)
    done, held = threading.Event(), []

    def accept() -> None:
        while not done.is_set():
            try:
                held.append(listening.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{listening.getsockname()[1]}"
    finally:
        done.set()
        thread.join(5)
        for connection in held:
            connection.close()
        listening.close()


def test_a_registry_that_takes_the_connection_and_never_answers_fails_in_its_timeout(silent_registry):
    """Once, not twice: an insecure registry's https that says nothing is not retried over http."""
    import time

    api = RegistryApi(silent_registry, insecure=True, timeout=0.5)
    started = time.monotonic()
    with pytest.raises(RegistryError) as caught:
        api.manifest("x", "1")
    # Without the timeout it waits for ever (the registry never answers); a bound far above 0.5 s
    # still catches that, and a retry loop, on a loaded machine.
    assert time.monotonic() - started < 30
    assert caught.value.message == f"cannot read {silent_registry}/x:1: registry {silent_registry} did not answer in 0.5 s"


def test_inspect_of_a_silent_registry_is_bounded_by_the_registry_timeout(silent_registry, monkeypatch):
    import time

    from composer.publish.inspect import inspect
    from composer.registry import client

    assert client.REGISTRY_TIMEOUT <= 5  # a few seconds for the whole command
    monkeypatch.setattr(client, "REGISTRY_TIMEOUT", 0.5)  # the default, shorter for the test
    started = time.monotonic()
    with pytest.raises(RegistryError, match=f"registry {silent_registry} did not answer in 0.5 s"):
        inspect(FakeEngine(), Registries(FakeEngine()), f"{silent_registry}/x:1")
    assert time.monotonic() - started < 30  # without REGISTRY_TIMEOUT: for ever
