"""DockerEngine at the Docker SDK boundary: errors translated, ports published where they are
reached, GPUs requested as device requests. The SDK's APIClient is faked; nothing runs."""

from __future__ import annotations

import io
import os

import docker.errors
import pytest
import requests

from composer.engine.connect import connect
from composer.engine.docker import DockerEngine
from composer.engine.endpoints import Endpoint
from composer.engine.interface import ContainerEngine, gpu_request
from composer.core.errors import ComposerError, EngineError, EngineUnavailable, ImageNotFound, RegistryError
from tests.unit.fake_engine import FakeEngine


class FakeResponse:
    status_code = 500
    reason = "Internal Server Error"
    url = "http+docker://localhost/v1.41/x"

    def json(self):
        return {"message": "boom"}


def api_error(message="driver failed\nsecond line", status=500):
    response = FakeResponse()
    response.status_code = status
    cls = docker.errors.NotFound if status == 404 else docker.errors.APIError
    return cls("500 Server Error", response=response, explanation=message)


class FakeAPI:
    """The calls DockerEngine makes; each raises what it is told to."""

    def __init__(self, raises=None, ports=None, info=None, push_events=()):
        self.raises = raises
        self.created = {}
        self.ports = ports or {}
        self.info_answer = info or {}
        self.push_events = push_events
        self.credstore_env = None

    def _maybe_raise(self):
        if self.raises is not None:
            raise self.raises

    def __getattr__(self, name):
        def call(*args, **kwargs):
            self._maybe_raise()
            return {}
        return call

    def create_host_config(self, **kwargs):
        return kwargs

    def create_container(self, image, **kwargs):
        self._maybe_raise()
        self.created = kwargs
        return {"Id": "c1"}

    def start(self, cid):
        self._maybe_raise()

    def inspect_container(self, cid):
        self._maybe_raise()
        return {"NetworkSettings": {"Ports": {f"{p}/tcp": [{"HostIp": "0.0.0.0", "HostPort": str(h)}]
                                              for p, h in self.ports.items()}}, "State": {"Running": True}}

    def remove_container(self, cid, **kwargs):
        self._maybe_raise()

    def info(self):
        self._maybe_raise()
        return self.info_answer

    def push(self, repo, **kwargs):
        self._maybe_raise()
        return iter(self.push_events)


class FakeClient:
    def __init__(self, api):
        self.api = api


def docker_engine(url="unix:///var/run/docker.sock", **api) -> tuple[DockerEngine, FakeAPI]:
    fake = FakeAPI(**api)
    return DockerEngine(FakeClient(fake), Endpoint(url)), fake


def test_the_fake_is_a_complete_engine():
    assert isinstance(FakeEngine(), ContainerEngine)  # abstract methods all implemented, or this fails


@pytest.mark.parametrize("call", [
    lambda e: e.tag("sha256:1", "x:1"),
    lambda e: e.remove_image("x:1"),
    lambda e: e.history("x:1"),
    lambda e: e.images_labelled("k=v"),
    lambda e: e.image_names(),
    lambda e: e.containers_labelled("k"),
    lambda e: e.remove_container("c1"),
    lambda e: e.run_once("img", ["true"]),
    lambda e: e.start("img", ["serve"], ports=[8000]),
    lambda e: e.push("127.0.0.1:5000/x:1"),
    lambda e: e.runtimes(),
    lambda e: e.registry_config(),
    lambda e: e.pull("x:1"),
])
@pytest.mark.parametrize("error", [api_error(), requests.ConnectionError("refused\nmore"), docker.errors.DockerException("x")])
def test_sdk_errors_never_leave_the_engine_untranslated(call, error):
    engine, _ = docker_engine(raises=error)
    with pytest.raises(ComposerError) as caught:
        call(engine)
    assert "\n" not in caught.value.message and caught.value.message
    if isinstance(error, docker.errors.APIError):
        assert "driver failed" in caught.value.message and "second line" not in caught.value.message
    else:
        assert isinstance(caught.value, EngineUnavailable)


def test_absent_things_are_values_not_errors():
    engine, _ = docker_engine(raises=api_error(status=404))
    assert engine.image("x:1") is None
    engine.remove_image("x:1")
    engine.remove_container("c1")
    assert engine.container_running("c1") is False
    with pytest.raises(ImageNotFound):
        engine.tag("sha256:1", "x:1")


def test_a_command_missing_from_the_image_is_exit_127_other_start_failures_are_errors():
    engine, _ = docker_engine(raises=None)
    engine._api.start = lambda cid: (_ for _ in ()).throw(api_error('exec: "python3": executable file not found in $PATH'))
    assert engine.run_once("img", ["python3"]).exit_code == 127
    engine._api.start = lambda cid: (_ for _ in ()).throw(api_error("unable to apply cgroup configuration"))
    with pytest.raises(EngineError, match="cgroup"):
        engine.run_once("img", ["python3"])


@pytest.mark.parametrize("url, publish_ip, reach", [
    ("unix:///var/run/docker.sock", "127.0.0.1", "127.0.0.1"),
    ("tcp://127.0.0.2:2375", None, "127.0.0.2"),
    ("tcp://docker:2376", None, "docker"),
    ("ssh://me@build-host", "127.0.0.1", "127.0.0.1"),
])
def test_ports_are_published_where_the_engine_is_reached(url, publish_ip, reach):
    engine, api = docker_engine(url, ports={8000: 41001})
    container = engine.start("img", ["serve"], ports=[8000]) if not url.startswith("ssh") else None
    endpoint = Endpoint(url)
    assert (endpoint.publish_ip, endpoint.reach_host) == (publish_ip, reach)
    if container is not None:
        assert api.created["host_config"]["port_bindings"] == {8000: (publish_ip, None) if publish_ip else None}
        assert container.url(8000) == f"http://{reach}:41001"


def test_docker_host_wins_over_the_docker_context(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.2:1")
    assert Endpoint.from_environment().url == "tcp://127.0.0.2:1"


@pytest.mark.parametrize("gpus, count", [("all", -1), (2, 2), ("none", None), (None, None), (0, None)])
def test_gpus_become_a_device_request(gpus, count):
    engine, api = docker_engine(ports={8000: 1})
    engine.start("img", ports=[8000], gpus=gpus)
    requests_made = api.created["host_config"]["device_requests"]
    if count is None:
        assert requests_made is None
    else:
        assert [(r["Count"], r["Capabilities"]) for r in requests_made] == [(count, [["gpu"]])]
    assert gpu_request(gpus) == count


def test_nvidia_runtime_is_read_from_the_engine():
    assert docker_engine(info={"Runtimes": {"runc": {}, "nvidia": {}}})[0].offers_nvidia_runtime()
    assert not docker_engine(info={"Runtimes": {"runc": {}}})[0].offers_nvidia_runtime()


def test_pushed_digest_from_aux_or_from_podmans_status_line():
    digest = "sha256:" + "e" * 64
    docker_events = [{"status": "Pushed"}, {"aux": {"Tag": "1", "Digest": digest}}]
    podman_events = [{"status": f"1: digest: {digest} size: 1222"}]
    for events in (docker_events, podman_events):
        assert docker_engine(push_events=events)[0].push("127.0.0.1:5000/x:1") == digest
    with pytest.raises(RegistryError, match="reported no digest"):
        docker_engine(push_events=[{"status": "Pushed"}])[0].push("127.0.0.1:5000/x:1")
    with pytest.raises(RegistryError, match="^cannot push 127.0.0.1:5000/x:1: denied$"):
        docker_engine(push_events=[{"error": "denied\nmore"}])[0].push("127.0.0.1:5000/x:1")


def test_an_engine_that_answers_too_late_is_one_line_naming_the_step():
    engine, _ = docker_engine(raises=requests.ReadTimeout("read timed out\nmore"))
    with pytest.raises(EngineError, match=r"^cannot run true in img: the engine gave no answer in time$"):
        engine.run_once("img", ["true"])


@pytest.mark.parametrize("components, kind", [
    ([{"Name": "Engine", "Version": "20.10.24"}], "DockerEngine"),
    ([{"Name": "Podman Engine", "Version": "4.3.1"}], "PodmanEngine"),
])
def test_the_engine_kind_is_what_the_endpoint_says_it_is(monkeypatch, components, kind):
    import docker

    class Api:
        def version(self):
            return {"Components": components}

    class Client:
        def __init__(self, **kwargs):
            self.api = Api()

        def ping(self):
            return True

    monkeypatch.setattr(docker, "DockerClient", Client)
    engine = connect(host="tcp://127.0.0.1:2375")
    assert type(engine).__name__ == kind and engine.is_podman == (kind == "PodmanEngine")


def test_an_image_list_that_lost_an_image_midway_is_asked_again():
    """Podman fails a whole image list when another build removed one it had listed."""
    import docker

    engine, fake = docker_engine()
    answers = [docker.errors.APIError('reading image "a85a": image not known'), [{"Id": "sha256:x"}]]

    def images(**query):
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    fake.images = images
    assert engine.images_labelled("org.triton-composer.run") == ["sha256:x"] and answers == []


def test_an_image_list_that_keeps_failing_is_one_line_once_the_patience_is_spent(monkeypatch):
    import docker

    from composer.engine import errors as module

    engine, fake = docker_engine()
    calls = []

    def images(**query):
        calls.append(query)
        raise docker.errors.APIError('reading image "a85a": image not known')

    fake.images = images
    clock = iter(range(0, 1000, 7))
    monkeypatch.setattr(module.time, "monotonic", lambda: float(next(clock)))
    monkeypatch.setattr(module.time, "sleep", lambda seconds: None)
    with pytest.raises(EngineError, match="cannot list images: .*image not known"):
        engine.images_labelled("org.triton-composer.run")
    assert 5 <= len(calls) <= 12  # asked again for LIST_PATIENCE (60 s) of this clock's 7 s steps


def test_podmans_identity_is_its_storage_not_its_info_id_which_changes_on_every_request():
    """Locks are per engine: under Podman two runs at once both made one pruned base."""
    from composer.engine.podman import PodmanEngine

    fake = FakeAPI()
    ids = iter(["98da562d", "8207dc6c"])
    fake.info = lambda: {"ID": next(ids), "DockerRootDir": "/var/lib/containers/storage"}
    one = PodmanEngine(FakeClient(fake), Endpoint("unix:///run/podman/podman.sock"))
    other = PodmanEngine(FakeClient(fake), Endpoint("unix:///tmp/other.sock"))
    assert one.identity() == other.identity() == "podman:/var/lib/containers/storage"
    docker_one, api = docker_engine()
    api.info = lambda: {"ID": "ABCD:EFGH"}
    assert docker_one.identity() == "ABCD:EFGH"


def test_podman_names_one_image_at_a_time_across_processes():
    """Podman 4.3 writes an image's whole name list back on each tag and untag: two runs naming one
    image at once lost a change (CI: a run's removed hold came back after it ended). Each tag, untag
    and load holds the engine's names lock; while another process holds it, they wait."""
    import fcntl
    import threading

    from composer.engine import locks
    from composer.engine.podman import NAMES_LOCK, PodmanEngine

    fake = FakeAPI()
    fake.info = lambda: {"DockerRootDir": "/var/lib/containers/storage"}
    engine = PodmanEngine(FakeClient(fake), Endpoint("unix:///run/podman/podman.sock"))
    held_while = []
    fake.tag = lambda *a, **k: held_while.append(("tag", _names_held(engine)))
    fake.remove_image = lambda *a, **k: held_while.append(("untag", _names_held(engine)))
    fake.load_image = lambda archive: held_while.append(("load", _names_held(engine))) or iter(())
    engine.tag("sha256:abc", "triton-composer/hold:run1")
    engine.remove_image("triton-composer/hold:run1", prune=False)
    engine.load_stream(io.BytesIO(b""), "an image")
    assert held_while == [("tag", True), ("untag", True), ("load", True)]

    path = locks.host_lock_path(engine.identity(), NAMES_LOCK)
    other = os.open(path, os.O_RDWR)  # another process's hold (a second open file: flock sees two holders)
    fcntl.flock(other, fcntl.LOCK_EX)
    done = threading.Event()
    worker = threading.Thread(target=lambda: (engine.tag("sha256:abc", "team/t:1"), done.set()))
    worker.start()
    assert not done.wait(0.5)  # waits for the other's change
    os.close(other)
    assert done.wait(10)
    worker.join()


def _names_held(engine) -> bool:
    from composer.engine import locks
    from composer.engine.podman import NAMES_LOCK

    with locks.removable_host(engine.identity(), NAMES_LOCK) as free:
        return not free


def test_an_inspect_that_met_an_image_removed_midway_is_asked_again_but_an_absent_image_is_none():
    """Podman's inspect walks the image tree: another run's cleanup made it fail on an image that was
    not the one asked for (CI, two pruned builds at once); a 404 of the image itself is an answer."""
    import docker

    engine, fake = docker_engine()
    answers = [docker.errors.APIError('failed to convert ImageData to ImageInspect: reading image "6796": '
                                      'locating image with ID "6796": image not known'),
               {"Id": "sha256:x", "Config": {}}]

    def inspect_image(ref):
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    fake.inspect_image = inspect_image
    assert engine.image("sha256:x").id == "sha256:x" and answers == []

    calls = []

    def absent(ref):
        calls.append(ref)
        raise docker.errors.NotFound("image not known")

    fake.inspect_image = absent
    assert engine.image("sha256:gone") is None and calls == ["sha256:gone"]


class _BrokenPipeOnce:
    """put_archive as Podman's service answers under load: a broken pipe, then it works."""

    def __init__(self, failures: int):
        self.failures, self.calls = failures, 0

    def put_archive(self, cid, path, data):
        self.calls += 1
        if self.calls <= self.failures:
            raise docker.errors.APIError("500 Server Error: passing bulk input to subprocess: write |1: broken pipe")
        return True


@pytest.mark.parametrize("podman, failures, tries, passes", [
    (True, 1, 2, True),    # Podman's broken pipe: tried once more
    (True, 2, 2, False),   # twice: it stands
    (False, 1, 1, False),  # Docker's: no second try
])
def test_a_copy_into_a_container_podman_broke_is_tried_once_more(monkeypatch, podman, failures, tries, passes):
    from composer.core import interrupts
    from composer.engine.docker import DockerEngine
    from composer.engine.podman import PodmanEngine

    monkeypatch.setattr(interrupts, "pause", lambda seconds: None)
    engine = object.__new__(PodmanEngine if podman else DockerEngine)
    engine._api = _BrokenPipeOnce(failures)
    if passes:
        engine._put_files("c1", b"tar")
    else:
        with pytest.raises(docker.errors.APIError):
            engine._put_files("c1", b"tar")
    assert engine._api.calls == tries


def test_a_stage_two_builders_each_loaded_whole_is_found_either_way():
    """Two BuildKit builders made the same labelled stage (same steps, ids of their own) and each was
    loaded whole: no parents, and any of them serves; one built here (with a parent) goes first."""
    engine, fake = docker_engine()
    loaded = [{"Id": "sha256:b", "ParentId": "", "Created": 1}, {"Id": "sha256:a", "ParentId": "", "Created": 1}]
    fake.images = lambda **query: list(images)
    images = loaded
    assert engine.labelled_roots("stage=collected k") == ["sha256:a", "sha256:b"]
    images = [*loaded, {"Id": "sha256:c", "ParentId": "sha256:p", "Created": 1}]
    assert engine.labelled_roots("stage=collected k")[0] == "sha256:c"
    images = loaded[:1]
    fake.images = lambda **query: list(images)
    assert engine.labelled_roots("stage=collected k") == ["sha256:b"]
