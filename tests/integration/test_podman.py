"""The composer against Podman's Docker-compatible service, for real (Debian's podman package).

scripts/podman-service runs `podman system service` on a unix socket with storage of its own,
records its PID and stops it by that PID; the stand-ins move in through the engines' APIs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from composer.assembly import records
from composer.engine.connect import connect
from composer.engine.interface import ContainerEngine
from composer.core.errors import BuildFailed, ComposerError
from tests.integration.test_build import REGISTRY, composer
from tests.cli import image_json
from tests.integration.conftest import bases_made

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "podman-service"
STANDINS = ("localhost/standin/tritonserver:24.09-py3", "localhost/standin/tritonserver:24.09-py3-min")


@dataclass
class PodmanService:
    folder: Path
    host: str = ""
    engine: ContainerEngine | None = None

    def start(self, *insecure_registries: str) -> None:
        done = subprocess.run([str(SCRIPT), "start", str(self.folder), *insecure_registries],
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "podman-service failed")
        self.host = done.stdout.strip()
        self.engine = connect(timeout=600, host=self.host)

    def stop(self) -> None:
        subprocess.run([str(SCRIPT), "stop", str(self.folder)], capture_output=True, timeout=120)

    def pid(self) -> int | None:
        pidfile = self.folder / "podman.pid"
        return int(pidfile.read_text()) if pidfile.exists() else None

    def containers(self) -> list[str]:
        done = subprocess.run(["docker", "ps", "-aq"], capture_output=True, text=True,
                              env={**os.environ, "DOCKER_HOST": self.host}, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()


@pytest.fixture(scope="module")
def podman(standins_archive):
    if shutil.which("podman") is None:
        why = "podman is not installed (scripts/bootstrap installs it)"
        if os.environ.get("CI"):
            pytest.fail(f"CI is set and {why}", pytrace=False)
        pytest.skip(why)
    # A short folder of its own: runc refuses a runroot longer than 50 characters, which
    # tmp_path_factory's folders are under pytest -n (/tmp/pytest-of-root/pytest-N/popen-gwN/...).
    service = PodmanService(Path(tempfile.mkdtemp(prefix="tc-podman-", dir="/tmp")))
    try:
        try:
            service.start()
        except RuntimeError as exc:
            if os.environ.get("CI"):
                pytest.fail(f"CI is set and the podman service cannot start: {exc}", pytrace=False)
            pytest.skip(f"the podman service cannot start: {exc}")
        assert service.engine.is_podman
        service.engine.load(standins_archive)
        yield service
    finally:
        pid = service.pid()
        service.stop()
        stopped = pid is None or not Path(f"/proc/{pid}").exists() or "Z" in _state(pid)
        # Podman's storage is root-owned and holds read-only layers: podman itself removes it
        # (and its overlay mount), whatever became of the service; the check comes after.
        subprocess.run(["podman", "--root", str(service.folder / "storage"), "--runroot", str(service.folder / "run"),
                        "system", "reset", "--force"], capture_output=True, timeout=300)
        shutil.rmtree(service.folder, ignore_errors=True)
        assert stopped, f"the podman service (pid {pid}) still runs after scripts/podman-service stop"


def _state(pid: int) -> str:
    try:
        return next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("State:"))
    except (FileNotFoundError, StopIteration):
        return "Z"


def test_build_smoke_test_tag_and_push_through_podman(engine, podman, registry):
    podman.stop()  # the registry speaks plain http: Podman is told so, as Docker assumes for 127.0.0.0/8
    podman.start(registry.host)
    tag = f"triton-composer-test/podman:{uuid.uuid4().hex[:10]}"
    push = f"{registry.host}/composer-test/podman:{uuid.uuid4().hex[:8]}"
    try:
        run = composer("build", "--registry", REGISTRY, "--version", "24.09", "-b", "python", "--tag", tag,
                       "--push", push, "--registry-auth", "env:PODMAN_TEST_AUTH", "--json",
                       env={"DOCKER_HOST": podman.host, "PODMAN_TEST_AUTH": f"{registry.username}:{registry.password}"})
        assert run.returncode == 0, run.stderr
        record = image_json(run.stdout)
        assert record["smoke_test"]["passed"]
        assert {(r["subject"], r["status"]) for r in record["smoke_test"]["rows"]} >= {("python", "PASS")}
        image = podman.engine.image(tag)
        assert image is not None and engine.image(tag) is None  # on Podman, not on the Docker engine
        assert image.labels.get("org.triton-composer.backends") == "python"
        name, reference = push.split("/", 1)[1].rsplit(":", 1)
        answer = registry.manifest(name, reference)
        assert answer.status_code == 200
        assert podman.containers() == []  # probe, collect and smoke containers all gone
        # The same selection through the Docker engine gives the same layers, the system stage's
        # too (Podman's archive names every file root's: the server's home and /etc/shadow's group
        # come from the stage's own list of owners). Not the record and the SBOM: they name the
        # bases' digests, and Podman gives an image it loaded one of its own making, Docker none
        # (from a registry both give the registry's, and so one image id).
        docker = composer("build", "--registry", REGISTRY, "--version", "24.09", "-b", "python", "--tag", tag,
                          "--no-smoke-test", "--json")
        assert docker.returncode == 0, docker.stderr
        assert record["base_images"]["min"]["digest"] and not image_json(docker.stdout)["base_images"]["min"]["digest"]
        assert image.layers[:-2] == engine.image(tag).layers[:-2]
    finally:
        try:
            engine.remove_image(tag, force=True)
        except ComposerError:
            pass
        for ref in (tag, push):
            try:
                podman.engine.remove_image(ref, force=True)
            except ComposerError:
                pass
    # The base images are still there: a build never removes what it was built from.
    assert all(podman.engine.image(ref) is not None for ref in STANDINS)


def test_builds_on_podman_have_no_network(podman, tmp_path):
    (tmp_path / "Dockerfile").write_text(f"FROM {STANDINS[1]}\nRUN cut -d: -f1 /proc/net/dev | tail -n +3 | tr -d ' '\n")
    lines: list[str] = []
    image = podman.engine.build(tmp_path, network_mode="none", nocache=True, on_line=lines.append)
    try:
        interfaces = [line.strip() for line in lines if line.strip() and not line.startswith(("STEP", "COMMIT", "-->"))
                      and len(line.strip()) < 20]
        assert interfaces == ["lo"], lines
    finally:
        podman.engine.remove_image(image, force=True)


@pytest.fixture(scope="module")
def two_at_once(podman, tmp_path_factory):
    """Two runs of one pruned selection at once on one Podman service (their outputs, tags and the
    base one of them made); the images and the base removed after the module's tests."""
    import sys

    from tests.integration.test_shared_engines import _runs_of

    state = tmp_path_factory.mktemp("podman-state")
    env = {**os.environ, "DOCKER_HOST": podman.host, "COMPOSER_STATE_DIR": str(state)}
    tags = [f"triton-composer-test/podman-shared:{uuid.uuid4().hex[:8]}" for _ in range(2)]
    before = set(_runs_of(podman.engine))
    bases_before = {name for name in podman.engine.image_names() if "triton-composer/pruned-base:" in name}
    runs = [subprocess.Popen([sys.executable, "-m", "composer", "build", "--registry", REGISTRY, "--version", "24.09",
                              "-b", "python", "--base", "pruned", "--no-smoke-test", "--tag", tag],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for tag in tags]
    made: list[str] = []
    try:
        outputs = [run.communicate(timeout=1800) for run in runs]
        made = [base for _out, err in outputs for base in bases_made(err)]
        named = [base for _out, err in outputs for base in bases_made(err, reused=True)]
        yield {"runs": runs, "outputs": outputs, "tags": tags, "before": before, "env": env, "state": state,
               "base": named[0] if named else None}
    finally:
        for run in runs:
            if run.poll() is None:
                run.kill()
        for ref in [*tags, *(base for base in made if base not in bases_before)]:
            try:
                podman.engine.remove_image(ref, force=True)
            except ComposerError:
                pass


def test_two_builds_at_once_on_podman_make_one_pruned_base_and_leave_nothing(podman, two_at_once):
    """Shared engines under Podman: two runs of one pruned selection at once on one service. The
    base is made once (the other run waits for it or finds it), both tags are set, and neither
    run's stages nor containers stay (each run removes its own, as on Docker)."""
    import sys

    from tests.integration.test_shared_engines import _runs_of

    runs, outputs, tags = two_at_once["runs"], two_at_once["outputs"], two_at_once["tags"]
    for run, (_out, err) in zip(runs, outputs):
        assert run.returncode == 0, err[-3000:]
    made = [err for _out, err in outputs if "pruned base: making " in err]
    assert len(made) == 1, [err[-1500:] for _out, err in outputs]
    base = bases_made(made[0])[0]
    other = next(err for _out, err in outputs if err is not made[0])
    assert "pruned base: reusing " in other or "pruned base: waiting for another run" in other, other[-1500:]
    images = [podman.engine.image(tag) for tag in tags]
    assert all(images) and images[0].layers[:len(podman.engine.image(base).layers)] == \
        images[1].layers[:len(podman.engine.image(base).layers)]
    # no run's image stays (cached stages, by content, name no run: build cache for the next build)
    before = two_at_once["before"]
    assert {i: r for i, r in _runs_of(podman.engine).items() if i not in before and r is not None} == {}
    assert not [name for name in podman.engine.image_names() if records.is_hold(name)]
    assert podman.containers() == []
    assert not list((two_at_once["state"] / "runs").glob("*.json"))
    # The base is the composer's to list (Podman names it localhost/...), with both images on it.
    listed = subprocess.run([sys.executable, "-m", "composer", "cache", "list", "--json"], capture_output=True,
                            text=True, env=two_at_once["env"], timeout=300)
    assert listed.returncode == 0, listed.stderr
    entries = json.loads(listed.stdout)["entries"]
    bases = [e for e in entries if e["kind"] == "pruned base" and base in " ".join(e["tags"])]
    assert len(bases) == 1 and len(bases[0]["used_by"]) == 2, entries
    ours = {line.split("(run ", 1)[1].split(":")[0] for _out, err in outputs for line in err.splitlines()
            if "build context: " in line and "(run " in line}
    assert len(ours) == 2 and not [e for e in entries if e.get("run") in ours], entries  # (other tests' stay)


def test_a_rendered_pruned_context_runs_its_proof_under_a_builder_that_skips_stages(podman, two_at_once, tmp_path):
    """Podman's builder (buildah) builds only the stages the image needs, as BuildKit does: the
    image copies the proof's verdict, so a failing proof fails the build of the final target. The
    control, a file whose failing first stage nothing copies from, builds: this builder does skip
    such a stage, so the copy is what makes the proof run. (The control was the rendered context
    with the copy taken out: a whole composition built again on Podman, 60-80 s, to show the same.)
    The context stands on the pruned base the two runs above made (the render's is the same)."""
    base = two_at_once["base"]
    assert base and podman.engine.image(base) is not None, base
    out = tmp_path / "context"
    run = composer("render", "-o", str(out), "--registry", REGISTRY, "--version", "24.09", "-b", "python",
                   "--base", "pruned")
    assert run.returncode == 0, run.stderr
    (out / "prove.sh").write_text('#!/bin/sh\necho "proof failed: /nowhere/libx.so.1 is missing (test)" >&2\nexit 1\n')
    made: list[str] = []
    try:
        with pytest.raises(BuildFailed) as failed:
            podman.engine.build(out, buildargs={"PRUNED_BASE": base}, network_mode="none")
        assert "proof failed: /nowhere/libx.so.1 is missing" in failed.value.log_tail
        copy = "COPY --from=proof /composer-proof/proved.txt /opt/tritonserver/proved.txt\n"
        assert copy in (out / "Dockerfile").read_text()
        control = tmp_path / "control"
        control.mkdir()
        (control / "Dockerfile").write_text(f"FROM {STANDINS[1]} AS proof\nRUN exit 1\n"
                                            f"FROM {STANDINS[1]}\nLABEL org.triton-composer.test=control\n")
        made.append(podman.engine.build(control, network_mode="none"))
    finally:
        for image in reversed(made):
            try:
                podman.engine.remove_image(image, force=True)
            except ComposerError:
                pass
