"""No secret outlives the command: a token planted in every channel (index URL, extra index URL,
a requirement URL, --registry-auth, a CA file) is found nowhere after build, push, render, lock,
bundle and a failed build: not in any image on the engine (layers, config, history, the
intermediate images that are the legacy builder's cache), the rendered folder, the outputs,
JSON, JUnit, the lock or the bundle."""

from __future__ import annotations

import base64
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from tests.cli import composer as run_composer, image_json

pytestmark = pytest.mark.integration

REGISTRY = "localhost/standin"
RUN = uuid.uuid4().hex
TOKENS = {name: f"{name}-{RUN}" for name in ("index", "extra", "requirement", "bare", "ca")}
# pip settings of this machine (extra indexes, find-links) must not fill gaps.
ONLY_THE_GIVEN_INDEX = {"PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": " ", "PIP_RETRIES": "0", "PIP_TIMEOUT": "5"}


def composer(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return run_composer(*args, env={**ONLY_THE_GIVEN_INDEX, **(env or {})})


class _Index(http.server.BaseHTTPRequestHandler):
    """A PEP 503 simple index and file server that wants Basic credentials with a known password."""

    folder: Path
    passwords: tuple[str, ...]

    def do_GET(self):  # noqa: N802 (the http.server API)
        auth = self.headers.get("Authorization", "")
        user_pass = base64.b64decode(auth[6:]).decode() if auth.startswith("Basic ") else ""
        if user_pass.partition(":")[2] not in self.passwords:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="index"')
            self.end_headers()
            return
        parts = [p for p in self.path.split("?")[0].split("/") if p]
        wheels = sorted(self.folder.glob("*.whl"))
        if parts[:1] == ["files"] and len(parts) == 2 and (self.folder / parts[1]).is_file():
            body, kind = (self.folder / parts[1]).read_bytes(), "application/octet-stream"
        elif parts[:1] in (["simple"], ["extra"]) and len(parts) == 2:
            project = parts[1].lower().replace("_", "-")
            links = [w.name for w in wheels if w.name.split("-")[0].lower().replace("_", "-") == project]
            if not links:
                self.send_response(404)
                self.end_headers()
                return
            body = "".join(f'<a href="/files/{n}">{n}</a>\n' for n in links).encode()
            kind = "text/html"
        else:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    """Two servers on loopback (index, and extra index + files), each wanting its own password."""
    folder = tmp_path_factory.mktemp("index")
    download = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--no-deps", "-d", str(folder),
         "six==1.16.0", "packaging==24.1", "pip==24.2"], capture_output=True, text=True)
    assert download.returncode == 0, download.stderr
    servers = []
    for passwords in ((TOKENS["index"],), (TOKENS["extra"], TOKENS["requirement"], TOKENS["bare"])):
        handler = type("Handler", (_Index,), {"folder": folder, "passwords": passwords})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
    yield [f"127.0.0.1:{s.server_address[1]}" for s in servers], folder
    for server in servers:
        server.shutdown()
        server.server_close()


def _all_image_ids() -> list[str]:
    out = subprocess.run(["docker", "image", "ls", "-a", "-q", "--no-trunc"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return sorted(set(out.stdout.split()))


def _engine_texts(engine, ids: list[str]) -> str:
    """History and inspect output of every image on the engine: where build arguments would show."""
    texts = []
    for image_id in ids:
        for read in (engine._api.history, engine._api.inspect_image):
            try:
                texts.append(json.dumps(read(image_id)))
            except Exception:  # noqa: BLE001 (removed meanwhile by another run: nothing left to hold a secret)
                pass
    return "\n".join(texts)


_STEP_IMAGE = re.compile(r"---> ([0-9a-f]{12})\b")  # the legacy builder's line for each step's image


def _images_of(outputs: list[str], new_images: list[str]) -> list[str]:
    """The new images the test's own commands made: each step's image the builder's log names (the
    build cache, a failed build's steps too) and each image id the composer printed. Saving every
    new image of the engine took minutes when another worker's builds were new too."""
    short = set(_STEP_IMAGE.findall("\n".join(outputs)))
    named = set(re.findall(r"sha256:[0-9a-f]{64}", "\n".join(outputs)))
    return [i for i in new_images if i in named or i.removeprefix("sha256:")[:12] in short]


def _scan_stream(stream, needles: list[bytes]) -> list[str]:
    """Needles found in a byte stream, read in chunks that overlap by the longest needle."""
    found = []
    overlap = max(len(n) for n in needles)
    tail = b""
    while chunk := stream.read(1 << 24):
        window = tail + chunk
        found += [n.decode() for n in needles if n in window]
        tail = window[-overlap:]
    return found


def _scan_file(path: Path, needles: list[bytes]) -> list[str]:
    """Needles found in a file (bundles are large: read in chunks)."""
    with open(path, "rb") as fh:
        return _scan_stream(fh, needles)


def _saved_and_scanned(images: list[str], needles: list[bytes]) -> list[str]:
    """Needles found in one `docker save` of `images`, those still on the engine. A save fails when
    one goes while it runs (another run's clean-up): then again with what is left, a few times."""
    error = ""
    for _ in range(5):
        present = [i for i in images if subprocess.run(["docker", "image", "inspect", i],
                                                        capture_output=True).returncode == 0]
        if not present:
            return []
        with subprocess.Popen(["docker", "save", *present], stdout=subprocess.PIPE, stderr=subprocess.PIPE) as save:
            found = _scan_stream(save.stdout, needles)
            error = save.stderr.read().decode(errors="replace")
        if save.returncode == 0:
            return found
        assert "No such image" in error or "does not exist" in error, error
    raise AssertionError(f"docker save failed five times as images went: {error}")


def test_planted_tokens_land_nowhere(engine, standin_images, registry, index, tmp_path):
    (index_host, files_host), wheels = index
    six = next(w.name for w in wheels.glob("six-*.whl"))
    packaging = next(w.name for w in wheels.glob("packaging-*.whl"))
    requirements = tmp_path / "requirements.txt"  # a bare URL with credentials, in a -r file
    requirements.write_text(f"http://ci:{TOKENS['bare']}@{files_host}/files/{packaging}\n")
    ca = tmp_path / "corporate-ca.pem"
    ca.write_text(f"-----BEGIN CERTIFICATE-----\n{TOKENS['ca']}\n-----END CERTIFICATE-----\n")
    packages = [
        "--pip", f"six @ http://ci:{TOKENS['requirement']}@{files_host}/files/{six}",
        "-r", str(requirements),
        "--pip-index-url", f"http://bot:{TOKENS['index']}@{index_host}/simple",
        "--pip-extra-index-url", f"http://bot:{TOKENS['extra']}@{files_host}/extra",
        "--pip-trusted-host", "127.0.0.1", "--ca-cert", str(ca),
    ]
    auth = {"TEST_REGISTRY_AUTH": f"{registry.username}:{registry.password}"}
    tag = f"triton-composer-test/secrets:{RUN[:10]}"
    target = f"{registry.host}/team/secrets:{RUN[:10]}"
    before = set(_all_image_ids())
    outputs = []
    try:
        build = composer("build", "--registry", REGISTRY, "--version", "24.09", "-b", "python", *packages,
                         "--tag", tag, "--push", target, "--registry-auth", "env:TEST_REGISTRY_AUTH",
                         "--json", "--verbose", "--junit", str(tmp_path / "junit.xml"), env=auth)
        assert build.returncode == 0, build.stderr
        payload = image_json(build.stdout)
        assert payload["smoke_test"]["passed"] and payload["pushed"]["digest"].startswith("sha256:")
        rows = {(r["subject"], r["status"]) for r in payload["smoke_test"]["rows"]}
        assert ("package six", "PASS") in rows or any(s.startswith("package") for s, _ in rows)
        record = json.loads(engine.run_once(tag, ["cat", "/opt/tritonserver/composition.json"], entrypoint=[]).output)
        assert f"six @ http://{files_host}/files/{six}" in record["requested_packages"]  # where from, no secret
        assert f"http://{files_host}/files/{packaging}" in record["requested_packages"]
        outputs += [build.stdout, build.stderr]

        failed = composer("build", "--registry", REGISTRY, "--version", "24.09", "-b", "python", *packages,
                          "--pip", "no-such-package-anywhere", "--tag", tag + "-failed", "--json", "--verbose",
                          "--junit", str(tmp_path / "junit-failed.xml"))
        assert failed.returncode != 0 and json.loads(failed.stdout)["error"]
        outputs += [failed.stdout, failed.stderr]

        render = composer("render", "-o", str(tmp_path / "context"), "--registry", REGISTRY, "--version", "24.09",
                          "-b", "python", *packages, "--json")
        assert render.returncode == 0, render.stderr
        outputs += [render.stdout, render.stderr]

        (tmp_path / "bundle.tar.staging").mkdir()  # a user's folder where bundles once staged
        (tmp_path / "bundle.tar.staging" / "mine.txt").write_text("mine")
        bundle = composer("bundle", "-o", str(tmp_path / "bundle.tar"), "--registry", REGISTRY, "--version",
                          "24.09", "-b", "python", *packages, "--json")
        assert bundle.returncode == 0, bundle.stderr
        outputs += [bundle.stdout, bundle.stderr]
        assert (tmp_path / "bundle.tar.staging" / "mine.txt").read_text() == "mine"

        set_file = tmp_path / "secrets.yaml"
        set_file.write_text(f'version: "24.09"\nregistry: {REGISTRY}\nbackends: [python]\n')
        lock = composer("lock", "--set", str(set_file), "--registry-auth", "env:TEST_REGISTRY_AUTH", env=auth)
        assert lock.returncode == 0, lock.stderr
        outputs += [lock.stdout, lock.stderr]

        secrets = list(TOKENS.values()) + [registry.password]
        needles = [s.encode() for s in secrets]
        for text in outputs:
            assert not [s for s in secrets if s in text]
        new_images = _images_of(outputs, sorted(set(_all_image_ids()) - before))
        assert len(new_images) > 5 and payload["image_id"] in new_images, new_images  # the steps and the image
        engine_text = _engine_texts(engine, _all_image_ids())
        assert not [s for s in secrets if s in engine_text]
        # Every layer and config of every image the commands left, streamed from one `docker save`
        # (it holds each layer once; the images share most of theirs). An image another run removed
        # meanwhile fails the save: saved again without it (it can hold no secret any more).
        assert _saved_and_scanned(new_images, needles) == [], new_images
        for path in [*tmp_path.rglob("*")]:
            if path.is_file() and path not in (ca, requirements):
                assert _scan_file(path, needles) == [], path
    finally:
        for name in (tag, target, tag + "-failed"):
            subprocess.run(["docker", "image", "rm", name], capture_output=True)
        shutil.rmtree(tmp_path / "context", ignore_errors=True)


MALFORMED = {name: f"{name}-{RUN}" for name in ("space", "at", "query", "find", "rfind", "bare", "named", "user")}


def test_refused_inputs_echo_no_planted_token(tmp_path):
    """Every requirement form and every malformed URL, refused: no token in the line or the JSON."""
    t = MALFORMED
    (tmp_path / "find-links.txt").write_text(f"--find-links https://u:{t['rfind']}@h.example/links\n")
    (tmp_path / "bad-line.txt").write_text(f"six @ https://u:{t['named']}@h.example/x y.whl\n")
    base = ("build", "--version", "24.09", "-b", "python", "--json")
    runs = [
        (*base, "--pip", "six", "--pip-index-url", f"https://u:pass {t['space']}@h.example/simple"),
        (*base, "--pip", "six", "--pip-index-url", f"https://u:p@{t['at']}@h.example:x/simple"),
        (*base, "--pip", "six", "--pip-extra-index-url", f"https://h.example:x/simple?token={t['query']}"),
        (*base, "--pip", f"--find-links=https://u:{t['find']}@h.example/links"),
        (*base, "-r", str(tmp_path / "find-links.txt")),
        (*base, "-r", str(tmp_path / "bad-line.txt")),
        (*base, "--pip", f"https://u:{t['bare']}@h.example/pkg.tar.gz"),
        (*base, "--pip", f"https://{t['user']}@h.example/x y-1.0-py3-none-any.whl"),
    ]
    for args in runs:
        run = run_composer(*args, env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
        assert run.returncode == 2 and json.loads(run.stdout)["exit_code"] == 2, (args, run.stderr)
        assert not [s for s in t.values() if s in run.stdout + run.stderr], (args, run.stdout, run.stderr)
