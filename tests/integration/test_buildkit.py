"""BuildKit as the builder, for real: a buildkitd v0.32.2 (built from the module proxy by
scripts/go-tools) started by scripts/buildkit-service with state, socket and config of its own,
its OCI worker on runc. The composer solves the rendered Dockerfile there, the engine's stand-ins
handed over as an OCI layout; the image serves in the engine's smoke test and has the very image
id and pushed digest of the same selection built by the engine's own builder."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from tests.cli import composer, image_json
from tests.conftest import TEST_LABEL_KEY, TEST_RUN

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "buildkit-service"
SMALL = ("--registry", "localhost/standin", "--version", "24.09", "--label", f"{TEST_LABEL_KEY}={TEST_RUN}")
# A selection no other test builds on a pruned base, so this test makes its own base from scratch.
PRUNED_SELECTION = ("-b", "identity", "-b", "onnxruntime")


@contextlib.contextmanager
def _buildkitd(*plain_http: str, container: bool = False):
    """A buildkitd of the test's own (a short folder: a unix socket's path is at most 107 bytes),
    told that `plain_http` registries speak http; stopped by its PID after. `container`: it runs in
    a container of the engine, as buildx's docker-container driver runs it (docker-container://NAME)."""
    folder = Path(tempfile.mkdtemp(prefix="tc-bk-", dir="/tmp"))
    name = f"tc-buildkitd-{folder.name.removeprefix('tc-bk-')}" if container else None
    try:
        started = subprocess.run([str(SCRIPT), "start", str(folder), *(("--container", name) if name else ()),
                                  *plain_http], capture_output=True, text=True, timeout=900)
        if started.returncode != 0:
            why = (started.stderr.strip().splitlines() or ["buildkit-service failed"])[-1]
            if os.environ.get("CI"):
                pytest.fail(f"CI is set and buildkitd cannot start: {why}", pytrace=False)
            pytest.skip(f"buildkitd cannot start: {why}")
        yield started.stdout.strip()
    finally:
        subprocess.run([str(SCRIPT), "stop", str(folder)], capture_output=True, timeout=120)
        pid = folder / "buildkitd.pid"
        if pid.exists():
            assert not Path(f"/proc/{pid.read_text().strip()}").exists(), "buildkitd still runs after stop"
        if name:
            left = subprocess.run(["docker", "ps", "-aq", "--filter", f"name=^{name}$"], capture_output=True, text=True)
            assert left.stdout.strip() == "", f"the builder's container {name} is still there after stop"
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def shared(engine, standin_images, tmp_path_factory):
    """A registry for the module's pushes and BuildKit's registry cache, a docker config holding its
    login (how buildctl finds credentials), and what the first test's builds gave."""
    from tests.integration.conftest import TestRegistry, _free_port, _need, _serve

    _need("htpasswd", "docker-registry", "curl")
    served = _serve(TestRegistry(root=tmp_path_factory.mktemp("registry"), port=_free_port()), engine)
    registry = next(served)
    try:
        config = tmp_path_factory.mktemp("docker-config")
        token = base64.b64encode(f"{registry.username}:{registry.password}".encode()).decode()
        (config / "config.json").write_text(json.dumps({"auths": {registry.host: {"auth": token}}}))
        yield {"registry": registry, "config": config, "cache": f"{registry.host}/team/buildcache"}
    finally:
        served.close()


@pytest.fixture(scope="module")
def buildkit(shared):
    with _buildkitd(shared["registry"].host) as address:
        yield address


@pytest.fixture(scope="module")
def states(tmp_path_factory):
    """State folders of the module's own (each run's records start empty)."""
    root = tmp_path_factory.mktemp("states")
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _env(state: Path, **more: str) -> dict[str, str]:
    return {"COMPOSER_STATE_DIR": str(state), **more}


def _build(shared, state: Path, address: str, *extra: str) -> subprocess.CompletedProcess:
    """onnxruntime+python on BuildKit at `address`, its cache exported to (and imported from) the registry."""
    return composer("build", *SMALL, "-b", "onnxruntime", "-b", "python", "--builder", f"buildkit://{address}",
                    "--builder-cache", shared["cache"], "--json", "--verbose", *extra,
                    env=_env(state, DOCKER_CONFIG=str(shared["config"])))


def test_buildkit_builds_an_image_that_serves_with_the_id_and_digest_of_the_engines_build(
        engine, standin_images, shared, buildkit, states):
    registry = shared["registry"]
    tags = {way: f"triton-composer-test/buildkit:{way}-{uuid.uuid4().hex[:8]}" for way in ("buildkit", "engine")}
    pushes = {way: f"{registry.host}/team/t:{way}" for way in tags}
    auth = ("--registry-auth", "env:TEST_REGISTRY_AUTH")
    env = {"TEST_REGISTRY_AUTH": f"{registry.username}:{registry.password}"}
    from composer.assembly import records
    from composer.engine import locks, oci_layout

    # Held as a build holds it, until the layout is read: a `cache clear` of a test beside this one
    # removes the engine's layout once no build holds the engine's cache.
    holding = contextlib.ExitStack()
    holding.enter_context(locks.using_host(engine.identity(), records.CACHE_LOCK))
    try:
        built = composer("build", *SMALL, "-b", "onnxruntime", "-b", "python", "--builder", f"buildkit://{buildkit}",
                         "--builder-cache", shared["cache"], "--tag", tags["buildkit"], "--push", pushes["buildkit"],
                         *auth, "--json", "--verbose",
                         env=_env(states / "buildkit", DOCKER_CONFIG=str(shared["config"]), **env))
        assert built.returncode == 0, built.stderr[-3000:]
        # The engine's own builder, from scratch; the same id: no need to serve it twice.
        again = composer("build", *SMALL, "-b", "onnxruntime", "-b", "python", "--no-cache", "--no-smoke-test",
                         "--tag", tags["engine"], "--push", pushes["engine"], *auth, "--json",
                         env=_env(states / "engine", **env))
        assert again.returncode == 0, again.stderr[-3000:]
        record, engines = image_json(built.stdout), image_json(again.stdout)
        assert record["smoke_test"]["passed"]
        assert {(r["subject"], r["status"]) for r in record["smoke_test"]["rows"]} >= {("python", "PASS"),
                                                                                      ("onnxruntime", "PASS")}
        handed = (oci_layout.folder_for(engine) / "index.json").read_text()
        holding.close()
        assert standin_images.full_id in handed and standin_images.min_id in handed  # the engine's images, as a layout
        assert "exporting to oci image format" in built.stderr  # BuildKit's own line: BuildKit built it
        assert any(line.strip().startswith("collect:") for line in built.stderr.splitlines())  # it ran the steps
        assert record["image_id"] == engines["image_id"]
        assert record["pushed"]["digest"] == engines["pushed"]["digest"]
        assert registry.tags("team/buildcache"), "no cache was exported"
        shared["image_id"] = record["image_id"]
    finally:
        holding.close()
        for tag in tags.values():
            subprocess.run(["docker", "image", "rm", tag], capture_output=True)


def test_a_pruned_base_made_on_buildkit_is_the_engines_base_and_gives_the_same_image(
        engine, standin_images, buildkit, states):
    """--base pruned: the builder runs the steps that decide and split the base, the composer writes
    its layers. Made from scratch on BuildKit (served, its proof run there) and again on the engine's
    builder: one base id, the same 14 diff ids, one composed image id."""
    from composer.assembly.pruning import BASE_LABEL

    tags = {way: f"triton-composer-test/buildkit:pruned-{way}-{uuid.uuid4().hex[:8]}" for way in ("buildkit", "engine")}
    made = []
    try:
        built = composer("build", *SMALL, *PRUNED_SELECTION, "--base", "pruned", "--no-cache", "--builder",
                         f"buildkit://{buildkit}", "--tag", tags["buildkit"], "--json", "--verbose",
                         env=_env(states / "pruned-buildkit"))
        assert built.returncode == 0, built.stderr[-3000:]
        record = image_json(built.stdout)
        made.append(record["pruned_base"]["image"])
        assert record["smoke_test"]["passed"] and not record["pruned_base"]["reused"]
        assert "exporting to oci image format" in built.stderr and "pruned base: writing layer 14 of 14" in built.stderr
        on_buildkit = engine.image(record["pruned_base"]["image"])
        again = composer("build", *SMALL, *PRUNED_SELECTION, "--base", "pruned", "--no-cache", "--no-smoke-test",
                         "--tag", tags["engine"], "--json", env=_env(states / "pruned-engine"))
        assert again.returncode == 0, again.stderr[-3000:]
        engines = image_json(again.stdout)
        made.append(engines["pruned_base"]["image"])
        assert not engines["pruned_base"]["reused"] and "exporting to oci image format" not in again.stderr
        assert engines["pruned_base"]["image"] == record["pruned_base"]["image"]
        assert len(on_buildkit.layers) == 14 and engine.image(engines["pruned_base"]["image"]).layers == on_buildkit.layers
        assert on_buildkit.labels[BASE_LABEL] == engines["pruned_base"]["key"]
        assert engines["image_id"] == record["image_id"]
    finally:
        for tag in tags.values():
            subprocess.run(["docker", "image", "rm", tag], capture_output=True)
        if made:  # the base this test made (its tag first: an image built on it may hold it by id)
            subprocess.run(["docker", "image", "rm", record["pruned_base"]["tag"], *set(made)], capture_output=True)


def test_a_fresh_builder_rebuilds_from_the_registry_cache_another_exported(engine, standin_images, shared, states):
    """The first test's builder exported its cache to the registry (--builder-cache); a fresh builder,
    which never saw the selection, imports it: no step runs again (the collect stage's RUN prints
    nothing), and the image is the same. The registry's password reaches BuildKit through the docker
    config, never argv. The first fresh builder runs in a container, as buildx's docker-container
    driver (docker/setup-buildx-action's default) runs one: buildctl reaches it through `docker exec`."""
    if "image_id" not in shared:
        pytest.fail("the first test's BuildKit build did not pass", pytrace=False)
    logs, ids = [], []

    def collected(log: str) -> bool:  # the collect stage's RUN ran (its lines), not taken from the cache
        return any(line.strip().startswith("collect:") for line in log.splitlines())

    for name in ("two", "three"):
        with _buildkitd(shared["registry"].host, container=name == "two") as address:
            assert address.startswith("docker-container://" if name == "two" else "unix://"), address
            run = _build(shared, states / f"cache-{name}", address, "--no-smoke-test")
        assert run.returncode == 0, run.stderr[-3000:]
        ids.append(image_json(run.stdout)["image_id"])
        logs.append(run.stderr)
        if not collected(run.stderr):
            break
        # Once in a loaded CI run a fresh builder's import came back empty (BuildKit takes a failed
        # import as a miss and builds): a third fresh builder must then take it all from the cache.
    assert set(ids) == {shared["image_id"]}
    ran = [line for line in logs[-1].splitlines() if "cache" in line.lower() or line.strip().startswith(
        ("ERROR", "WARN", "error"))]
    assert not collected(logs[-1]), "\n".join(ran[-60:])
    assert "CACHED" in logs[-1] and "importing cache manifest" in logs[-1]
    assert not [log for log in logs if shared["registry"].password in log]


def test_two_builders_share_a_runs_sets_and_one_stopped_mid_run_fails_only_its_set(
        engine, standin_images, buildkit, states, tmp_path):
    """--builder twice, three sets: both builders work at once; the second is stopped in the middle
    of its set, which fails in one line naming it; it takes no more sets, the first builds the rest,
    no tag moves for the failed one and no buildctl of the run is left."""
    tags = {}
    files = []
    for name, backends in (("one", "[python]"), ("two", "[onnxruntime, python]"), ("three", "[onnxruntime]")):
        tags[name] = f"triton-composer-test/buildkit:{name}-{uuid.uuid4().hex[:8]}"
        (tmp_path / f"{name}.yaml").write_text(f'version: "24.09"\nregistry: localhost/standin\n'
                                                f'backends: {backends}\ntag: "{tags[name]}"\n')
        files += ["--set", str(tmp_path / f"{name}.yaml")]
    answer = tmp_path / "answer.json"
    with _buildkitd() as second, open(answer, "w") as out:
        process = subprocess.Popen(  # three and two are one selection (onnxruntime takes python): one stage key
            [sys.executable, "-m", "composer", "build", *files, *SMALL, "--no-smoke-test", "--verbose",
             "--json", "--builder", f"buildkit://{buildkit}", "--builder", f"buildkit://{second}"],
            stdout=out, stderr=subprocess.PIPE, text=True, env={**os.environ, **_env(states / "two")})
        seen: list[str] = []
        on_second = None
        deadline = time.monotonic() + 900
        for line in process.stderr:
            seen.append(line)
            text = line.strip()
            if text.startswith("== ") and text.endswith(f" on buildkit://{second} =="):
                on_second = text.split()[1]
            if on_second and text.startswith(f"[{on_second}] ") and "collect:" in text or time.monotonic() > deadline:
                break  # the collect stage's RUN on the second builder: its solve is at work
        subprocess.run([str(SCRIPT), "stop", str(Path(second.removeprefix("unix://")).parent)], capture_output=True,
                       timeout=120)
        try:
            _, rest = process.communicate(timeout=1200)
        finally:
            process.kill()
    log = "".join(seen) + rest
    try:
        assert on_second, log[-3000:]
        assert process.returncode == 1, log[-3000:]
        images = {image["name"]: image for image in json.loads(answer.read_text())["images"]}
        failed = {name: images.pop(name) for name in list(images) if images[name]["status"] == "failed"}
        assert list(failed) == [on_second], failed  # the set at work when its builder went
        assert "\n" not in failed[on_second]["error"] and failed[on_second]["builder"] == f"buildkit://{second}"
        assert f"buildkit://{second} stopped answering: it takes no more sets" in log
        assert {image["status"] for image in images.values()} == {"built"}, images
        assert {image["builder"] for image in images.values()} == {f"buildkit://{buildkit}"}
        assert engine.image(tags[on_second]) is None  # the failed set moved no tag
        assert all(engine.image(tags[name]) is not None for name in images)
        left = subprocess.run(["pgrep", "-f", f"buildctl --addr unix://{second.removeprefix('unix://')}"],
                              capture_output=True, text=True)
        assert left.stdout.strip() == "", "a buildctl of the stopped builder still runs"
    finally:
        for tag in tags.values():
            subprocess.run(["docker", "image", "rm", tag], capture_output=True)


def test_a_builder_over_tcp_with_mutual_tls_answers_with_the_client_files_and_refuses_without(states):
    """buildkitd on tcp:// with mutual TLS (scripts/buildkit-service --tls): without --builder-tls a
    build stops before any work in one line; with the client's folder the composer reaches it (its
    buildctl calls, the build's included, carry one set of connection options)."""
    from tests.integration.conftest import _free_port

    port = _free_port()
    with _buildkitd("--tls", f"127.0.0.1:{port}") as addresses:
        unix, tcp = addresses.splitlines()
        assert tcp == f"tcp://127.0.0.1:{port}"
        client = Path(unix.removeprefix("unix://")).parent / "tls" / "client"
        refused = composer("build", *SMALL, "-b", "python", "--builder", f"buildkit://{tcp}",
                           env=_env(states / "tls-refused"))
        assert refused.returncode == 1, refused.stderr
        assert refused.stderr.strip().splitlines()[-1].startswith(f"error: no BuildKit answers at {tcp}")
        assert "looking inside" not in refused.stderr
        listed = composer("cache", "list", "--builder", f"buildkit://{tcp}", "--builder-tls", str(client), "--json",
                          env=_env(states / "tls"))
        assert listed.returncode == 0, listed.stderr
        entry = [e for e in json.loads(listed.stdout)["entries"] if e["kind"] == "builder cache"]
        assert entry and entry[0]["image"] == f"buildkit://{tcp}" and entry[0]["layers"] == 0  # a fresh builder
        wrong = composer("cache", "list", "--builder", f"buildkit://{tcp}", "--builder-tls", str(client.parent),
                         env=_env(states / "tls"))
        assert wrong.returncode == 2 and "holds neither ca.pem, cert.pem and key.pem" in wrong.stderr


def test_a_wrong_buildkit_address_is_refused_before_any_work(tmp_path):
    run = composer("build", *SMALL, "-b", "python", "--builder", f"buildkit://unix://{tmp_path}/none.sock",
                   env=_env(tmp_path / "state"))
    assert run.returncode == 1
    last = run.stderr.strip().splitlines()[-1]
    assert f"no BuildKit answers at unix://{tmp_path}/none.sock" in last, run.stderr
    assert "looking inside" not in run.stderr  # before the work


def test_an_interrupt_mid_solve_cancels_it_and_moves_no_tag(engine, standin_images, buildkit, states, tmp_path):
    """SIGINT while BuildKit runs a step: buildctl cancels the solve, the composer exits, no tag."""
    tag = f"triton-composer-test/buildkit:interrupted-{uuid.uuid4().hex[:8]}"
    process = subprocess.Popen([sys.executable, "-m", "composer", "build", *SMALL, "-b", "python", "--no-cache",
                                "--builder", f"buildkit://{buildkit}", "--tag", tag, "--verbose"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, **_env(states / "interrupted")})
    seen: list[str] = []
    deadline = time.monotonic() + 600
    # BuildKit's line as the collect stage's RUN starts (its snapshot of the full image made, then
    # collect.py): the solve is at work for seconds after it. (The RUN's own last lines came too late
    # once the stage's export stopped sending the full image back: the solve had ended by then.)
    started = re.compile(r"\[collect \d+/\d+\] RUN ")
    for line in process.stderr:
        seen.append(line)
        if started.match(line.strip()) or time.monotonic() > deadline:
            break
    process.send_signal(signal.SIGINT)
    try:
        _out, rest = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode != 0, "".join(seen[-20:])
    assert any(started.match(line.strip()) for line in seen), "".join(seen[-20:])
    children = subprocess.run(["pgrep", "-f", f"buildctl --addr {buildkit}"], capture_output=True, text=True)
    assert children.stdout.strip() == "", "a buildctl of the run still runs"
    histories = subprocess.run([_buildctl(), "--addr", buildkit, "debug", "histories", "--format", "json"],
                               capture_output=True, text=True, timeout=60)
    assert histories.returncode == 0, histories.stderr
    records = [h.get("record", h) for h in _records(histories.stdout)]
    assert records, histories.stdout[:500]
    running = [r["Ref"] for r in records if not r.get("CompletedAt")]
    assert running == [], running  # every solve ended: the interrupted one too (cancelled)
    assert any((r.get("error") or {}).get("message") == "context canceled" for r in records), records[-1].get("error")
    assert engine.image(tag) is None


def _buildctl() -> str:
    from composer.engine.buildkit import buildctl

    return buildctl()


def _records(text: str) -> list[dict]:
    """buildctl debug histories --format json: one JSON document, or one per line."""
    text = text.strip()
    if not text:
        return []
    try:
        found = json.loads(text)
        return found if isinstance(found, list) else [found]
    except ValueError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_cache_lists_and_clears_the_composers_records_on_a_builder_and_leaves_the_others(
        engine, standin_images, buildkit, tmp_path):
    """composer cache --builder: the module's builder holds the composer's steps (its earlier tests
    built there) and a build of someone else's; list shows the composer's records, clear removes
    them and leaves the other build's."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "Dockerfile").write_text("FROM scratch\nCOPY note.txt /note.txt\n")
    (other / "note.txt").write_text(uuid.uuid4().hex)
    done = subprocess.run([_buildctl(), "--addr", buildkit, "build", "--frontend", "dockerfile.v0", "--local",
                           f"context={other}", "--local", f"dockerfile={other}"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]

    def records() -> list[dict]:
        du = subprocess.run([_buildctl(), "--addr", buildkit, "du", "--verbose", "--format", "{{json .}}"],
                            capture_output=True, text=True, timeout=120)
        return [r for line in du.stdout.splitlines() if line.strip() for r in json.loads(line) or []]

    def descriptions() -> list[str]:
        return [r["description"] for r in records()]

    assert any(d.startswith("[1/1] COPY note.txt") for d in descriptions())
    listed = composer("cache", "list", "--builder", f"buildkit://{buildkit}", "--json")
    assert listed.returncode == 0, listed.stderr
    entry = [e for e in json.loads(listed.stdout)["entries"] if e["kind"] == "builder cache"]
    assert len(entry) == 1 and entry[0]["image"] == f"buildkit://{buildkit}"
    assert entry[0]["layers"] > 5 and entry[0]["size"] > 0, entry
    from composer.assembly import records as cache_records
    from composer.engine import locks

    # The engine's build cache held as a build at work holds it: the builder's records go, the other
    # tests' stages (and the stand-ins' OCI layout) stay theirs.
    with locks.using_host(engine.identity(), cache_records.CACHE_LOCK):
        cleared = composer("cache", "clear", "--builder", f"buildkit://{buildkit}", "--json")
    assert cleared.returncode == 0, cleared.stderr
    assert json.loads(cleared.stdout)["builder_cache_removed"] > 0, cleared.stdout[-2000:]
    left = records()
    assert any(r["description"].startswith("[1/1] COPY note.txt") for r in left)  # not the composer's: it stays
    mine = [r for r in left if r["description"].startswith(("[collect ", "[composed ", "[system "))]
    # Only what BuildKit still uses stays: a record in use, or one such a record stands on.
    by_id = {r["id"]: r for r in left}
    needed: set[str] = set()
    stack = [r["id"] for r in left if r["inUse"]]
    while stack:
        record = by_id.get(stack.pop())
        if record and record["id"] not in needed:
            needed.add(record["id"])
            stack += record.get("parents") or []
    assert all(r["id"] in needed for r in mine), [r for r in mine if r["id"] not in needed]
    assert len(mine) < entry[0]["layers"]
    refused = composer("cache", "list", "--builder", "engine")
    assert refused.returncode == 2 and refused.stderr.strip().startswith("error: --builder engine:"), refused.stderr
