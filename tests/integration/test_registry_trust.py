"""Registries as sites run them: TLS with a CA of their own, credentials on every request, and
images known under more than one repository. Real docker-registry, real engine, the real CLI."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.cli import composer as run_composer, image_json
from tests.integration.conftest import credentials_file
import yaml

from composer.core.refs import ImageRef
from composer.publish.push import push_image
from composer.registry.client import Registries

pytestmark = pytest.mark.integration

RELEASE = "24.09"
STANDIN = "localhost/standin"
FULL_STANDIN = f"{STANDIN}/tritonserver:{RELEASE}-py3"
MIN_STANDIN = f"{STANDIN}/tritonserver:{RELEASE}-py3-min"
LOCKED_OK = "every base image is where it was locked"


def composer(*args: str, docker_config: Path, cwd=None) -> subprocess.CompletedProcess:
    """The CLI with its own docker config folder (which holds the engine's login, or none)."""
    return run_composer(*args, env={"DOCKER_CONFIG": str(docker_config)}, cwd=cwd)


def last_line(run: subprocess.CompletedProcess) -> str:
    lines = run.stderr.strip().splitlines()
    return lines[-1] if lines else ""


def login(folder: Path, registry) -> Path:
    """A docker config folder holding a `docker login` for the registry."""
    import base64

    folder.mkdir(parents=True, exist_ok=True)
    pair = base64.b64encode(f"{registry.username}:{registry.password}".encode()).decode()
    (folder / "config.json").write_text(json.dumps({"auths": {registry.host: {"auth": pair}}}))
    return folder


def test_tls_registry_with_its_own_ca_mirror_lock_build_push_pull(engine, standin_images, upstream, tls_registry,
                                                                  tmp_path, names):
    reg = tls_registry
    suffix = uuid.uuid4().hex[:8]
    docker_config = login(tmp_path / "docker", reg)
    prefix = f"{reg.host}/nvidia"

    mirrored = composer("mirror", "--version", RELEASE, "--registry", upstream.prefix, "--to", prefix,
                        "--source-auth", f"file:{upstream.credentials}", "--json", docker_config=docker_config)
    assert mirrored.returncode == 0, mirrored.stderr
    images = json.loads(mirrored.stdout)["images"]
    assert [i["moved"] for i in images] == [True, True]
    for image in images:
        tag = image["dest"].rsplit(":", 1)[1]
        assert reg.manifest("nvidia/tritonserver", tag).headers["Docker-Content-Digest"] == image["digest"]
    digests = {i["dest"].rsplit("-", 1)[1]: i["digest"] for i in images}  # "py3" / "min"

    tag, target = f"triton-composer-test/tls:{suffix}", f"{reg.host}/composed/triton:{suffix}"
    names += [tag, target]
    set_file = tmp_path / "tls.yaml"
    set_file.write_text(f'version: "{RELEASE}"\nregistry: {prefix}\nbackends: [python]\ntag: {tag}\npush: {target}\n')
    locked = composer("lock", "--set", str(set_file), docker_config=docker_config)
    assert locked.returncode == 0, locked.stderr
    lock = yaml.safe_load((tmp_path / "tls.lock.yaml").read_text())
    assert {i["role"]: i["digest"] for i in lock["images"]} == {"full": digests["py3"], "min": digests["min"]}
    assert not any(i.get("local") for i in lock["images"])

    built = composer("build", "--set", str(set_file), "--locked", "--no-smoke-test", "--json",
                     docker_config=docker_config)
    assert built.returncode == 0, built.stderr
    assert LOCKED_OK in built.stderr
    result = image_json(built.stdout)
    assert result["base_images"]["min"]["digest"] == digests["min"]
    pushed = result["pushed"]["digest"]
    assert reg.manifest("composed/triton", suffix).headers["Docker-Content-Digest"] == pushed

    # Pull it back by digest, with no local name left for it in the registry.
    engine.remove_image(target)
    by_digest = f"{reg.host}/composed/triton@{pushed}"
    pulled = engine.pull(by_digest, auth=reg.auth.as_config())
    assert pulled.id == result["image_id"]
    names.append(by_digest)
    # The build pulled the bases from the mirror: the stand-ins now have its digests too.
    _builds_from_their_own_name_with_no_digest_of_another_repository(engine, set(digests.values()), reg.host,
                                                                     docker_config, names)

    # The composer's own client trusts that CA because the engine does (certs.d) ...
    (Path("/etc/docker/certs.d") / reg.host / "ca.crt").unlink()
    untrusted = composer("lock", "--set", str(set_file), docker_config=docker_config)
    assert untrusted.returncode != 0
    assert last_line(untrusted).startswith("error: cannot verify the TLS certificate of registry " + reg.host)
    assert "--registry-ca" in last_line(untrusted) and "Traceback" not in untrusted.stderr
    # ... or because it is given the CA file itself.
    registries = Registries(engine, reg.auth, ca_file=reg.ca_cert)
    assert registries.digest(ImageRef.parse(f"{prefix}/tritonserver:{RELEASE}-py3-min")) == digests["min"]


def test_lock_against_an_authenticated_registry_whose_tag_moved(engine, standin_images, registry, tmp_path):
    prefix = f"{registry.host}/base"
    full_ref, min_ref = f"{prefix}/tritonserver:{RELEASE}-py3", f"{prefix}/tritonserver:{RELEASE}-py3-min"
    # The lock reads digests and the builds stop before any work: a small image stands in for the
    # full one (its 1.6 GB pushed would test nothing more), another moves its tag.
    full_digest = push_image(engine, MIN_STANDIN, full_ref, auth=registry.auth)
    min_digest = push_image(engine, MIN_STANDIN, min_ref, auth=registry.auth)
    no_login = tmp_path / "no-login"
    no_login.mkdir()
    creds = credentials_file(tmp_path, registry)
    set_file = tmp_path / "base.yaml"
    set_file.write_text(f'version: "{RELEASE}"\nregistry: {prefix}\nbackends: [python]\n')
    lock_file = tmp_path / "base.lock.yaml"

    refused = composer("lock", "--set", str(set_file), docker_config=no_login)
    assert refused.returncode != 0
    assert last_line(refused) == (
        f"error: cannot read {full_ref}: the registry asks for credentials and none were given "
        f"(--registry-auth, or docker login {registry.host})"
    )
    assert not lock_file.exists()

    locked = composer("lock", "--set", str(set_file), "--registry-auth", f"file:{creds}", docker_config=no_login)
    assert locked.returncode == 0, locked.stderr
    lock = yaml.safe_load(lock_file.read_text())
    assert {i["role"]: i["digest"] for i in lock["images"]} == {"full": full_digest, "min": min_digest}
    assert registry.password not in lock_file.read_text() + locked.stdout + locked.stderr

    moved = push_image(engine, f"{STANDIN}/debian-minbase:bookworm", full_ref, auth=registry.auth)
    assert moved != full_digest  # the tag moves in the registry
    # The engine's local copy of full_ref still carries the locked digest: only the registry knows.

    without = composer("build", "--set", str(set_file), "--locked", "--no-smoke-test", docker_config=no_login)
    assert without.returncode != 0
    assert LOCKED_OK not in without.stderr + without.stdout
    assert last_line(without) == (
        f"error: cannot read {full_ref}: the registry asks for credentials and none were given "
        f"(--registry-auth, or docker login {registry.host})"
    )

    wrong = tmp_path / "wrong"
    wrong.write_text(f"{registry.username}:not-the-password\n")
    refused = composer("build", "--set", str(set_file), "--locked", "--no-smoke-test",
                       "--registry-auth", f"file:{wrong}", docker_config=no_login)
    assert refused.returncode != 0 and LOCKED_OK not in refused.stderr
    assert last_line(refused) == f"error: cannot read {full_ref}: the registry refused the credentials"

    with_creds = composer("build", "--set", str(set_file), "--locked", "--no-smoke-test",
                          "--registry-auth", f"file:{creds}", docker_config=no_login)
    assert with_creds.returncode != 0
    assert LOCKED_OK not in with_creds.stderr
    message = last_line(with_creds)
    assert full_ref in message and "moved since the lock" in message and "composer lock" in message
    assert "\n" not in message


def _builds_from_their_own_name_with_no_digest_of_another_repository(engine, other: set[str], host: str,
                                                                     docker_config: Path, names) -> None:
    """Once the stand-ins are also pulled from another repository (the mirror above), their own
    name has no digest: a build from that name must not take the other repository's (FROM
    name@<that digest> fails). Checked here, on the mirror the test makes anyway (a mirror of its
    own took 2.5 minutes)."""
    full = engine.image(FULL_STANDIN)
    assert any(d.startswith(f"{host}/nvidia/") for d in full.repo_digests)
    assert full.digest is None  # no digest of its own repository

    tag = f"triton-composer-test/mirrored:{uuid.uuid4().hex[:8]}"
    names.append(tag)
    built = composer("build", "--registry", STANDIN, "--version", RELEASE, "--backend", "python",
                     "--no-smoke-test", "--tag", tag, "--json", docker_config=docker_config)
    assert built.returncode == 0, built.stderr
    bases = image_json(built.stdout)["base_images"]
    assert {bases["full"]["digest"], bases["min"]["digest"]}.isdisjoint(other)
    assert not any(digest in built.stderr for digest in other)
    assert engine.image(tag) is not None
