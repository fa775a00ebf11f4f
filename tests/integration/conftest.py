"""Integration fixtures: a real registry (Debian's docker-registry) with htpasswd auth, over plain
http or over TLS with a certificate from a CA the test makes (trusted by the engine through
/etc/docker/certs.d/<host>/ca.crt, as a site's private registry would be)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from composer.registry.client import MANIFEST_TYPES
from composer.registry.credentials import RegistryAuth

REPO = Path(__file__).resolve().parents[2]
REGISTRY_SCRIPT = REPO / "scripts" / "registry"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as fh:
            return not any(line.startswith("State:") and "Z" in line.split()[1] for line in fh)
    except FileNotFoundError:
        return False


@dataclass
class TestRegistry:
    """A docker-registry on 127.0.0.1:port that the test owns; stop()/start() keep its storage."""

    __test__ = False  # not a test class, despite the name

    root: Path
    port: int
    username: str = "composer"
    password: str = "not-a-real-secret-7f3b"
    pid: int | None = None
    tls: bool = False  # serve https with a certificate signed by ca_cert
    _started: list[int] = field(default_factory=list)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}"

    @property
    def ca_cert(self) -> Path:
        return self.root / "tls" / "ca.crt"

    @property
    def verify(self) -> str | bool:
        return str(self.ca_cert) if self.tls else True

    def make_certificates(self) -> None:
        """A CA of the test's own and a server certificate for 127.0.0.1 signed by it (openssl)."""
        tls = self.root / "tls"
        tls.mkdir(exist_ok=True)
        (tls / "server.ext").write_text(
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
        )
        for command in (
            ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=triton-composer test CA",
             "-keyout", "ca.key", "-out", "ca.crt"],
            ["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", "server.key",
             "-out", "server.csr"],
            ["x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-extfile", "server.ext", "-out", "server.crt"],
        ):
            subprocess.run(["openssl", *command], cwd=tls, check=True, capture_output=True, timeout=60)

    @property
    def auth(self) -> RegistryAuth:
        return RegistryAuth(self.username, self.password)

    @property
    def config(self) -> Path:
        return self.root / "config.yml"

    def write_config(self) -> None:
        htpasswd = self.root / "htpasswd"
        line = subprocess.run(
            ["htpasswd", "-Bbn", self.username, self.password], check=True, capture_output=True, text=True
        ).stdout.strip()
        htpasswd.write_text(line + "\n")
        tls = self.root / "tls"
        serve_tls = f"  tls:\n    certificate: {tls / 'server.crt'}\n    key: {tls / 'server.key'}\n"
        self.config.write_text(
            "version: 0.1\n"
            "log:\n  level: warn\n"
            f"storage:\n  filesystem:\n    rootdirectory: {self.root / 'data'}\n  delete:\n    enabled: true\n"
            f"http:\n  addr: {self.host}\n{serve_tls if self.tls else ''}"
            f"auth:\n  htpasswd:\n    realm: triton-composer-test\n    path: {htpasswd}\n"
        )

    def start(self) -> None:
        if self.pid is not None and _alive(self.pid):
            return
        done = subprocess.run(
            [str(REGISTRY_SCRIPT), str(self.port), str(self.config)], capture_output=True, text=True, timeout=120
        )
        if done.returncode != 0:
            raise RuntimeError(f"scripts/registry failed: {done.stderr.strip()}")
        self.pid = int(done.stdout.strip().splitlines()[-1])
        self._started.append(self.pid)

    def stop(self) -> None:
        """Stop the registry this fixture started (by its PID) and wait until it is gone."""
        pid, self.pid = self.pid, None
        if pid is None or not _alive(pid):
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)

    def manifest(self, name: str, reference: str) -> requests.Response:
        """GET /v2/NAME/manifests/REFERENCE as the registry's user (for checks in tests)."""
        return requests.get(
            f"{self.url}/v2/{name}/manifests/{reference}",
            headers={"Accept": ", ".join(MANIFEST_TYPES)},
            auth=(self.username, self.password),
            timeout=10,
            verify=self.verify,
        )

    def tags(self, name: str) -> list[str]:
        response = requests.get(
            f"{self.url}/v2/{name}/tags/list", auth=(self.username, self.password), timeout=10, verify=self.verify
        )
        if response.status_code == 404:
            return []
        response.raise_for_status()
        return response.json().get("tags") or []


def _need(*tools: str) -> None:
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        why = f"needs {', '.join(missing)} (apt: apache2-utils, docker-registry, curl, openssl): run scripts/bootstrap"
        if os.environ.get("CI"):
            pytest.fail(f"CI is set and the registry tests cannot run: {why}", pytrace=False)
        pytest.skip(why)


@pytest.fixture
def registry(tmp_path_factory, engine):
    """A fresh authenticated registry on an ephemeral port; local tags naming it are removed after."""
    _need("htpasswd", "docker-registry", "curl")
    yield from _serve(TestRegistry(root=tmp_path_factory.mktemp("registry"), port=_free_port()), engine)


CERTS_D = Path("/etc/docker/certs.d")


@pytest.fixture
def tls_registry(tmp_path_factory, engine):
    """An authenticated registry over TLS with a CA of the test's own, which the engine (and so the
    composer) trusts through /etc/docker/certs.d/127.0.0.1:PORT/ca.crt, removed after."""
    _need("htpasswd", "docker-registry", "curl", "openssl")
    if not os.access(CERTS_D.parent, os.W_OK):
        why = f"needs write access to {CERTS_D.parent} to make the engine trust the test CA"
        if os.environ.get("CI"):
            pytest.fail(f"CI is set and the TLS registry tests cannot run: {why}", pytrace=False)
        pytest.skip(why)
    reg = TestRegistry(root=tmp_path_factory.mktemp("registry"), port=_free_port(), tls=True)
    reg.make_certificates()
    trusted = CERTS_D / reg.host
    trusted.mkdir(parents=True, exist_ok=True)
    try:
        shutil.copyfile(reg.ca_cert, trusted / "ca.crt")
        yield from _serve(reg, engine)
    finally:
        shutil.rmtree(trusted, ignore_errors=True)
        try:
            CERTS_D.rmdir()  # only when no one else keeps a CA there
        except OSError:
            pass


def _serve(reg: TestRegistry, engine):
    reg.write_config()
    try:
        reg.start()
        yield reg
    finally:
        reg.stop()
        for pid in reg._started:  # a start() the test did after a stop() is ours too
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        _remove_local_names(engine, reg.host)
        shutil.rmtree(reg.root, ignore_errors=True)


def _remove_local_names(engine, host: str) -> None:
    """Remove every local tag or digest reference naming the test registry (never the images'
    other names: an image that keeps another name is only untagged)."""
    from composer.core.errors import ComposerError

    for name in engine.image_names():
        if name.startswith(host + "/"):
            try:
                engine.remove_image(name)
            except ComposerError:
                pass


def credentials_file(folder: Path, registry: TestRegistry) -> Path:
    """The registry's user:password in a file of the owner's only (file:PATH, never on a command line)."""
    path = folder / "registry-credentials"
    path.write_text(f"{registry.username}:{registry.password}\n")
    path.chmod(0o600)
    return path


# -- upstream: the stand-ins in a registry, as NGC serves them to a site that mirrors it ------------

UPSTREAM_REPOSITORY = "nvidia/tritonserver"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


@dataclass
class Upstream:
    registry: TestRegistry
    credentials: Path  # the registry's user:password in a file (file:PATH for --source-auth)

    @property
    def prefix(self) -> str:
        return f"{self.registry.host}/nvidia"


def push_save_archive(archive: Path, api, repository: str, name_of) -> dict[str, str]:
    """Push the images of a `docker save` archive to `repository` of a registry, each under the tag
    `name_of(its local name)` gives (None: not pushed), its layers stored as the archive holds them
    (uncompressed OCI tar layers: no compression, and a layer's digest is its diff id); the tag ->
    manifest digest."""
    import json
    import tarfile

    from composer.registry.blobs import VerifiedBlob
    from composer.registry.client import CHUNK

    pushed = {}
    with tarfile.open(archive) as tar:
        for entry in json.load(tar.extractfile("manifest.json")):
            tags = [tag for tag in (name_of(local) for local in entry.get("RepoTags") or []) if tag]
            if not tags:
                continue
            config = tar.extractfile(entry["Config"]).read()
            layers = []
            for path, diff_id in zip(entry["Layers"], json.loads(config)["rootfs"]["diff_ids"]):
                member = tar.getmember(path)
                if api.blob_size(repository, diff_id) is None:
                    source = tar.extractfile(member)
                    api.upload_stream(repository, diff_id, VerifiedBlob(iter(lambda: source.read(CHUNK), b""),
                                                                        diff_id, member.size, path))
                layers.append({"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": diff_id,
                               "size": member.size})
            manifest = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                                   "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                              "digest": api.upload_blob(repository, config), "size": len(config)},
                                   "layers": layers}, sort_keys=True).encode()
            for tag in tags:
                pushed[tag] = api.put_manifest(repository, tag, manifest, OCI_MANIFEST)
    return pushed


@pytest.fixture(scope="session")
def upstream_data(standins_archive) -> Path:
    """A registry's storage holding the 24.09 stand-ins as NGC serves them (nvidia/tritonserver:
    24.09-py3 and -py3-min), written once per run (a lock: the xdist workers share it) for the tests
    whose pipeline starts by mirroring from upstream. Written from the stand-ins' archive with their
    layers uncompressed: an engine's push of the full image gzips 1.6 GB (about a minute of CPU on
    these machines) each time, and what these tests check (the copy, the pull from the mirror, the
    build, its push) is the same for every layer type."""
    import fcntl

    from composer.registry.client import RegistryApi
    from tests.conftest import RUN_FILES

    _need("htpasswd", "docker-registry", "curl")
    data = RUN_FILES / "upstream-data"
    with open(RUN_FILES / "upstream.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not data.exists():
            reg = TestRegistry(root=RUN_FILES / f"upstream-making-{os.getpid()}", port=_free_port())
            reg.root.mkdir()
            reg.write_config()
            reg.start()
            try:
                api = RegistryApi(reg.host, reg.auth, insecure=True)
                prefix = "localhost/standin/tritonserver:"
                pushed = push_save_archive(standins_archive, api, UPSTREAM_REPOSITORY,
                                           lambda local: local.removeprefix(prefix) if local.startswith(prefix) else None)
                assert set(pushed) == {"24.09-py3", "24.09-py3-min"}, pushed
            finally:
                reg.stop()
            (reg.root / "data").rename(data)
            shutil.rmtree(reg.root, ignore_errors=True)
    return data


@pytest.fixture(scope="module")
def upstream(engine, upstream_data, tmp_path_factory):
    """A registry of the module's own serving the upstream storage (a copy made of hard links: the
    registry never rewrites a blob it holds, it only adds)."""
    reg = TestRegistry(root=tmp_path_factory.mktemp("upstream"), port=_free_port())
    subprocess.run(["cp", "-al", str(upstream_data), str(reg.root / "data")], check=True, timeout=120)
    served = _serve(reg, engine)
    yield Upstream(next(served), credentials_file(reg.root, reg))
    served.close()


@pytest.fixture
def names(engine):
    """Image names a test makes: append them, and they are removed afterwards, pass or fail."""
    made: list[str] = []
    yield made
    for ref in made:
        engine.remove_image(ref, force=True)


def bases_made(text, *, reused: bool = False) -> list[str]:
    """The pruned bases a build's progress says it made ("pruned base: making TAG ..."; with `reused`,
    also "pruned base: reusing TAG, ..."), from its output (a string) or its lines: the base of a
    build that failed or ran in another process."""
    lines = text.splitlines() if isinstance(text, str) else text
    starts = ("pruned base: making ", "pruned base: reusing ") if reused else ("pruned base: making ",)
    return [line.split()[3].rstrip(",") for line in lines if line.strip().startswith(starts)]


def remove_made_base(engine, result) -> None:
    """The pruned base a test's build made, removed with the test: a later test of the same
    selection must make its own (a shared-engine test asserts that), and at NGC scale (2-6 GB) a
    later module needing room for its own builds must not find the disk held by it."""
    base = getattr(result, "pruned_base", None)
    if base is not None and base.made:
        for ref in (base.tag, base.image):  # by its tag first: an image that build steps stand on only
            try:                            # loses its tag (by id, force or not, the engine refuses)
                engine.remove_image(ref, force=ref == base.image)
            except Exception:  # in use by another image of this session: it goes with the session's sweep
                pass
