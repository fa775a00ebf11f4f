"""Registry loss: the retry policy (composer.registry.retries.RetryPolicy), requests retried by the
client, blobs retried whole by a copy (HEAD first), and no manifest put while a blob is missing."""

from __future__ import annotations

import json

import pytest
import requests

from composer.core.errors import RegistryError, RegistryUnavailable
from composer.registry.client import RegistryApi
from composer.registry.retries import MAX_DELAY, RetryPolicy
from composer.registry.copy import copy_image, plan_copy
from composer.core.refs import ImageRef

from tests.unit.test_mirror_copy import OCI_MANIFEST, FakeRegistry, image, sha


def _policy(tries: int, backoff: float = 1.0):
    slept: list[float] = []
    return RetryPolicy(tries, backoff, sleep=slept.append), slept


def test_the_policy_backs_off_exponentially_and_says_one_line_when_spent():
    policy, slept = _policy(4, 0.5)
    calls = []

    def down():
        calls.append(1)
        raise RegistryUnavailable("cannot read r/x:1: registry r does not answer")

    lines: list[str] = []
    with pytest.raises(RegistryError) as caught:
        policy.run("r:5000", down, lines.append)
    assert len(calls) == 4
    assert slept == [0.5, 1.0, 2.0]
    assert caught.value.message == "r:5000: unreachable after 4 tries (cannot read r/x:1: registry r does not answer)"
    assert not isinstance(caught.value, RegistryUnavailable)  # spent: an outer policy does not try it again
    assert lines[0] == "r:5000: cannot read r/x:1: registry r does not answer; try 2 of 4 in 0.5 s"


def test_the_delay_is_capped():
    assert RetryPolicy(20, 4).delay(10) == MAX_DELAY


def test_one_try_keeps_the_failure_as_it_was():
    policy, slept = _policy(1)
    with pytest.raises(RegistryUnavailable, match="^cannot read"):
        policy.run("r", lambda: (_ for _ in ()).throw(RegistryUnavailable("cannot read r/x")))
    assert slept == []


def test_a_refusal_is_not_retried():
    policy, slept = _policy(5)
    calls = []

    def refused():
        calls.append(1)
        raise RegistryError("cannot write r/x: the registry refused the credentials")

    with pytest.raises(RegistryError, match="refused the credentials"):
        policy.run("r", refused)
    assert calls == [1] and slept == []


class _Answer:
    def __init__(self, status: int, body: bytes = b"{}", headers: dict | None = None):
        self.status_code, self.content, self.headers = status, body, headers or {}

    def json(self):
        return json.loads(self.content)


class FlakySession:
    """A registry that refuses the connection, then answers 503, then 200: what a restart looks like."""

    def __init__(self, script: list):
        self.script = list(script)
        self.sent = 0

    def _next(self):
        self.sent += 1
        step = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(step, Exception):
            raise step
        return step

    def get(self, url, headers=None, auth=None, timeout=None, params=None, stream=False):
        return self._next()

    def request(self, method, url, headers=None, auth=None, data=None, timeout=None, allow_redirects=False):
        return self._next()


MANIFEST = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": {"digest": "sha256:" + "a" * 64},
                       "layers": []}).encode()


def test_a_request_is_tried_again_after_a_refused_connection_and_a_503():
    session = FlakySession([requests.ConnectionError("refused"), _Answer(503), _Answer(200, MANIFEST)])
    policy, slept = _policy(6, 0.25)
    api = RegistryApi("127.0.0.1:5000", session=session, retry=policy)
    api._base = "http://127.0.0.1:5000"
    found = api.manifest("team/x", "1")
    assert found is not None and found.config_digest == "sha256:" + "a" * 64
    assert session.sent == 3 and slept == [0.25, 0.5]


def test_a_registry_that_stays_down_is_one_line_after_the_tries():
    session = FlakySession([requests.ConnectionError("refused")])
    api = RegistryApi("127.0.0.1:5000", session=session, retry=_policy(3)[0])
    api._base = "http://127.0.0.1:5000"
    with pytest.raises(RegistryError) as caught:
        api.put_manifest("team/x", "1", MANIFEST, OCI_MANIFEST)
    assert session.sent == 3
    assert caught.value.message == ("127.0.0.1:5000: unreachable after 3 tries (cannot read 127.0.0.1:5000/team/x:1: "
                                    "registry 127.0.0.1:5000 does not answer)")


def test_a_manifest_refused_for_a_blob_another_push_is_committing_is_sent_again(monkeypatch):
    """distribution rewrites a blob's link in place when a second push commits the same blob: a
    manifest checked meanwhile names an unknown blob. Sent again after a pause; one that stays
    refused is refused in one line, and another refusal is not repeated."""
    import composer.registry.client as client

    slept: list[float] = []
    monkeypatch.setattr(client.time, "sleep", slept.append)
    unknown = _Answer(400, json.dumps({"errors": [
        {"code": "DIGEST_INVALID", "message": "provided digest did not match uploaded content"},
        {"code": "MANIFEST_BLOB_UNKNOWN", "message": "blob unknown to registry"}]}).encode())
    created = _Answer(201, b"", {"Docker-Content-Digest": "sha256:" + "c" * 64})

    def api(script):
        session = FlakySession(script)
        made = RegistryApi("127.0.0.1:5000", session=session, retry=_policy(3)[0])
        made._base = "http://127.0.0.1:5000"
        return made, session

    made, session = api([unknown, unknown, created])
    assert made.put_manifest("team/x", "1", MANIFEST, OCI_MANIFEST) == "sha256:" + "c" * 64
    assert session.sent == 3 and slept == [0.2, 0.5]
    slept.clear()
    made, session = api([unknown])
    with pytest.raises(RegistryError, match="HTTP 400: provided digest did not match uploaded content; blob unknown"):
        made.put_manifest("team/x", "1", MANIFEST, OCI_MANIFEST)
    assert session.sent == 4 and slept == [0.2, 0.5, 1.0]
    slept.clear()
    invalid = _Answer(400, json.dumps({"errors": [{"code": "MANIFEST_INVALID", "message": "manifest invalid"}]}).encode())
    made, session = api([invalid])
    with pytest.raises(RegistryError, match="manifest invalid"):
        made.put_manifest("team/x", "1", MANIFEST, OCI_MANIFEST)
    assert session.sent == 1 and slept == []


def test_a_streamed_request_is_sent_once():
    session = FlakySession([requests.ConnectionError("refused")])
    api = RegistryApi("127.0.0.1:5000", session=session, retry=_policy(3)[0])
    api._base = "http://127.0.0.1:5000"
    with pytest.raises(RegistryUnavailable):
        api._request("PUT", "/v2/x/blobs/uploads/1", "x", "x", {}, data=iter([b"a"]), stream=True)
    assert session.sent == 1  # a stream can be sent once: the blob is retried whole, by its caller


class LossyRegistry(FakeRegistry):
    """Drops the connection in the middle of the first `drops` blob uploads (it kept nothing of them)."""

    def __init__(self, host: str, drops: int, policy: RetryPolicy):
        super().__init__(host)
        self.drops = drops
        self.retry = policy
        self.heads: list[str] = []

    def upload_stream(self, name, digest, body):
        if self.drops:
            self.drops -= 1
            next(iter(body), None)
            raise RegistryUnavailable(f"cannot read {self.host}/{name}@{digest}: registry {self.host} does not answer")
        super().upload_stream(name, digest, body)

    def blob_size(self, name, digest):
        self.heads.append(digest)
        return super().blob_size(name, digest)


def _plan(source: FakeRegistry, target: FakeRegistry):
    body = image(source, "src", "amd64", [b"layer-one" * 10, b"layer-two" * 10])
    source.manifests[("src", "1")] = (OCI_MANIFEST, body)
    return plan_copy(source, ImageRef.parse("s.example/src:1"), ImageRef.parse("t.example/dst:1")), body


def test_a_copy_resumes_after_the_registry_dropped_blobs():
    source = FakeRegistry("s.example")
    policy, slept = _policy(6, 0.1)
    target = LossyRegistry("t.example", drops=2, policy=policy)
    plan, body = _plan(source, target)
    copy_image(plan, source, target)
    assert target.manifests[("dst", "1")] == (OCI_MANIFEST, body)
    assert all(("dst", b.digest) in target.blobs for b in plan.blobs)
    assert len(slept) == 2
    uploaded = [c for c in target.calls if c[0] == "upload"]
    assert len(uploaded) == len(plan.blobs)  # each blob once whole; a blob already there is skipped (HEAD)


def test_a_copy_to_a_registry_that_stays_down_puts_no_manifest():
    source = FakeRegistry("s.example")
    target = LossyRegistry("t.example", drops=10**6, policy=_policy(3, 0.1)[0])
    plan, _ = _plan(source, target)
    with pytest.raises(RegistryError, match=r"^t\.example: unreachable after 3 tries \("):
        copy_image(plan, source, target)
    assert not [c for c in target.calls if c[0] == "put_manifest"]


def test_no_manifest_while_the_registry_lacks_a_blob_it_took():
    class Forgetful(FakeRegistry):
        def upload_stream(self, name, digest, body):  # says yes, keeps nothing (a restart lost it)
            b"".join(body)

    source, target = FakeRegistry("s.example"), Forgetful("t.example")
    plan, _ = _plan(source, target)
    with pytest.raises(RegistryError, match="lacks 3 blob"):
        copy_image(plan, source, target)
    assert not [c for c in target.calls if c[0] == "put_manifest"]


def test_no_more_tries_once_the_command_is_interrupted():
    from composer.core import interrupts

    policy, slept = _policy(6)
    calls = []

    def down():
        calls.append(1)
        raise RegistryUnavailable("cannot read r/x: registry r does not answer")

    interrupts.STOPPING.set()
    try:
        with pytest.raises(RegistryUnavailable):
            policy.run("r", down)
    finally:
        interrupts.STOPPING.clear()
    assert calls == [1] and slept == []  # the cleanup does not wait for a back-off


def test_a_host_that_never_answered_gets_two_tries_at_a_silence_not_six():
    from composer.core.errors import RegistryError, RegistryUnavailable
    from composer.registry.retries import RetryPolicy

    calls = []

    def silent():
        calls.append(1)
        raise RegistryUnavailable("cannot read r:1/x: registry r:1 did not answer in 5 s")

    policy = RetryPolicy(6, 0, sleep=lambda s: None)
    with pytest.raises(RegistryError, match="has not answered once: it takes connections and says nothing"):
        policy.run("r:1", silent)
    assert len(calls) == 2

    calls.clear()
    policy.run("r:1", lambda: "ok")  # it answered once: a later silence gets every try
    with pytest.raises(RegistryError, match="unreachable after 6 tries"):
        policy.run("r:1", silent)
    assert len(calls) == 6


def test_a_refused_connection_is_tried_every_time_even_before_a_first_answer():
    """A registry restarting refuses connections for a moment: that is no proof it is not one."""
    from composer.core.errors import RegistryError, RegistryUnavailable
    from composer.registry.retries import RetryPolicy

    calls = []

    def refused():
        calls.append(1)
        raise RegistryUnavailable("cannot read r:1/x: registry r:1 does not answer")

    with pytest.raises(RegistryError, match="unreachable after 4 tries"):
        RetryPolicy(4, 0, sleep=lambda s: None).run("r:1", refused)
    assert len(calls) == 4


class _Consuming(FlakySession):
    """Reads a streamed body to its end before answering, as an HTTP client sends it."""

    def request(self, method, url, headers=None, auth=None, data=None, timeout=None, allow_redirects=False):
        if data is not None and not isinstance(data, bytes):
            b"".join(data)
        return self._next()


def test_a_digest_refused_for_bytes_checked_on_the_way_is_tried_again():
    """A registry that answers DIGEST_INVALID to a blob whose bytes the composer checks as they go
    out got them wrong on the way or in its store: a retry (the copy sends the blob whole again), not
    a refusal. So is one answered before the body was all read (the registry hashed a part of it: a
    mirror met it twice in the suite, both times with `proven` False under the rule before); a blob
    whose bytes do not match fails in the composer first (VerifiedBlob), never reaching the registry."""
    from composer.registry.blobs import VerifiedBlob

    data = b"layer" * 700
    digest = sha(data)
    started = _Answer(202, b"", {"Location": "/v2/team/x/blobs/uploads/u?_state=s"})
    refused = _Answer(400, json.dumps({"errors": [{"code": "DIGEST_INVALID",
                                                    "message": "provided digest did not match uploaded content"}]}).encode())

    def put(session_type, script):
        session = session_type(script)
        api = RegistryApi("127.0.0.1:5000", session=session, retry=_policy(1)[0])
        api._base = "http://127.0.0.1:5000"
        body = VerifiedBlob(iter([data[:1000], data[1000:]]), digest, len(data), "blob")
        api.upload_stream("team/x", digest, body)

    with pytest.raises(RegistryUnavailable, match="HTTP 400 .* to bytes checked against that digest on the way"):
        put(_Consuming, [started, refused])
    with pytest.raises(RegistryUnavailable, match="HTTP 400 .* to bytes checked against that digest on the way"):
        put(FlakySession, [started, refused])  # answered before the body was read
    with pytest.raises(RegistryError, match="hash to .*not to the blob's digest") as caught:  # wrong bytes: ours
        api = RegistryApi("127.0.0.1:5000", session=_Consuming([started, refused]), retry=_policy(1)[0])
        api._base = "http://127.0.0.1:5000"
        api.upload_stream("team/x", digest, VerifiedBlob(iter([b"other" * 700]), digest, len(data), "blob"))
    assert not isinstance(caught.value, RegistryUnavailable)
    put(_Consuming, [started, _Answer(201)])
    # A blob whose digest is known once written (a layer recompressed on the way): its digest is
    # that of the bytes sent, so the same refusal is tried again too.
    patched = _Answer(202, b"", {"Location": "/v2/team/x/blobs/uploads/u?_state=t"})
    session = _Consuming([started, patched, refused])
    api = RegistryApi("127.0.0.1:5000", session=session, retry=_policy(1)[0])
    api._base = "http://127.0.0.1:5000"

    def write(send):
        send(data)
        return digest, len(data)

    with pytest.raises(RegistryUnavailable, match="to bytes checked against that digest on the way"):
        api.upload_unknown("team/x", write)
