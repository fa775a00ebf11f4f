"""The smoke test: serve models from the composed image and check real inference answers.

A composed image is only worth its tag if it serves. The container runs with its HTTP port
published on 127.0.0.1 only and is removed in every case, Ctrl-C included.
"""

from __future__ import annotations

import json
import time
from importlib import resources
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from composer.engine import Container, Engine
from composer.errors import ComposerError, UsageError
from composer.samples import Sample, samples_for
from composer.triton_client import TritonHTTP
from composer.progress import LineSink, quiet

HTTP_PORT = 8000
SMOKE_LABEL = "org.triton-composer.smoke"
MODELS = "/models"
PACKAGE_CHECK = "composer_package_check"

# Backends with no sample that runs on a CPU here, and what to do instead.
NO_SAMPLE = {
    "tensorrt": "needs a GPU and an engine plan built for it: smoke-test your own plans on a GPU "
    "machine with --model-repository",
}
NO_SAMPLE_DEFAULT = "no portable sample for this backend: smoke-test your own models with --model-repository"


@dataclass(frozen=True)
class SmokeRow:
    """One line of the smoke table: a backend (or a check) and how it fared."""

    subject: str
    status: str  # PASS, FAIL or SKIP
    detail: str
    model: str | None = None


@dataclass(frozen=True)
class SmokeReport:
    image: str
    rows: tuple[SmokeRow, ...]
    server_version: str | None = None
    log_tail: str = ""

    @property
    def passed(self) -> bool:
        return all(row.status != "FAIL" for row in self.rows)

    def failures(self) -> list[SmokeRow]:
        return [row for row in self.rows if row.status == "FAIL"]

    def to_dict(self) -> dict:
        return {
            "image": self.image,
            "passed": self.passed,
            "server_version": self.server_version,
            "rows": [
                {"subject": r.subject, "model": r.model, "status": r.status, "detail": r.detail} for r in self.rows
            ],
        }


@dataclass(frozen=True)
class SmokeOptions:
    """What to expect of the image, and how long to wait for it."""

    backends: tuple[str, ...]  # the backends that must be (exactly) in the image
    server_version: str | None = None
    model_repository: Path | None = None
    timeout: float = 240.0
    shm_size: str = "512m"


def smoke_test(
    engine: Engine,
    image: str,
    options: SmokeOptions,
    *,
    on_line: LineSink = quiet,
    labels: dict[str, str] | None = None,
) -> SmokeReport:
    """Start the server from `image` on sample (or the user's) models and check each answer."""
    rows: list[SmokeRow] = []
    present = _backends_in(engine, image)
    rows.append(_presence_row(present, set(options.backends)))

    if options.model_repository is not None:
        models = _user_models(options.model_repository)
        samples: list[Sample] = []
    else:
        samples = [s for s in samples_for(present) if s.backend in options.backends]
        models = {f"{MODELS}/{s.model}": s.path for s in samples}
    packages = _installed_packages(engine, image) if "python" in present else []
    files: dict = dict(models)
    if packages:
        files.update(_package_check_files(packages))

    on_line(f"starting tritonserver from {image} with {len(models)} model(s)")
    container = engine.start(
        image,
        ["tritonserver", f"--model-repository={MODELS}", "--exit-on-error=false", "--allow-metrics=false"],
        ports=[HTTP_PORT],
        files=files,
        labels={SMOKE_LABEL: "1", **(labels or {})},
        shm_size=options.shm_size,
    )
    try:
        return _check_server(container, image, options, samples, packages, rows, on_line)
    finally:
        container.remove()


def _check_server(container: Container, image, options, samples, packages, rows, on_line) -> SmokeReport:
    client = TritonHTTP(f"http://127.0.0.1:{container.host_port(HTTP_PORT)}")
    deadline = time.monotonic() + options.timeout
    if not _wait(lambda: client.live(), deadline, container):
        why = "exited" if not container.running() else f"not live after {options.timeout:.0f} s"
        rows.append(SmokeRow("server", "FAIL", f"tritonserver {why}"))
        return SmokeReport(image, tuple(rows), log_tail=container.logs(tail=40))

    version = client.server_metadata().get("version")
    if options.server_version and version != options.server_version:
        rows.append(SmokeRow("server", "FAIL", f"server {version} answers, expected {options.server_version}"))
    else:
        rows.append(SmokeRow("server", "PASS", f"Triton {version} live"))

    on_line("waiting for models to load")
    _wait(lambda: all(m.get("state") in ("READY", "UNAVAILABLE") for m in client.model_index()) or None,
          deadline, container)
    index = {m["name"]: m for m in client.model_index()}

    if options.model_repository is not None:
        rows += _user_model_rows({k: v for k, v in index.items() if k != PACKAGE_CHECK})
    else:
        rows += _sample_rows(client, samples, index, on_line)
        tested = {s.backend for s in samples}
        for backend in sorted(set(options.backends) - tested):
            reason = NO_SAMPLE.get(backend, NO_SAMPLE_DEFAULT)
            rows.append(SmokeRow(backend, "SKIP", reason))

    if packages:
        rows += _package_rows(packages, index)
    report_rows = tuple(rows)
    failed = any(r.status == "FAIL" for r in report_rows)
    return SmokeReport(image, report_rows, version, log_tail=container.logs(tail=40) if failed else "")


def _sample_rows(client: TritonHTTP, samples: list[Sample], index: dict, on_line) -> list[SmokeRow]:
    rows = []
    for sample in samples:
        entry = index.get(sample.model, {})
        if entry.get("state") != "READY":
            reason = entry.get("reason") or entry.get("state") or "not loaded"
            rows.append(SmokeRow(sample.backend, "FAIL", f"model not ready: {reason}", sample.model))
            continue
        try:
            outputs = client.infer(sample.model, sample.inputs)
        except ComposerError as exc:
            rows.append(SmokeRow(sample.backend, "FAIL", exc.message, sample.model))
            continue
        mismatch = sample.check(outputs)
        if mismatch:
            rows.append(SmokeRow(sample.backend, "FAIL", mismatch, sample.model))
        else:
            on_line(f"{sample.model}: correct answer")
            rows.append(SmokeRow(sample.backend, "PASS", "ready, correct answer", sample.model))
    return rows


def _package_check_files(packages: list[dict]) -> dict[str, bytes]:
    """The package-check model, told which modules to import."""
    folder = resources.files("composer.samples").joinpath("package_check")
    modules = sorted({m for p in packages for m in p.get("modules") or []})
    base = f"{MODELS}/{PACKAGE_CHECK}"
    return {
        f"{base}/config.pbtxt": folder.joinpath("config.pbtxt").read_bytes(),
        f"{base}/1/model.py": folder.joinpath("1", "model.py").read_bytes(),
        f"{base}/1/modules.json": json.dumps(modules).encode(),
    }


def _package_rows(packages: list[dict], index: dict) -> list[SmokeRow]:
    """One row per added package: do its modules import in the stub's python?"""
    entry = index.get(PACKAGE_CHECK, {})
    ready = entry.get("state") == "READY"
    reason = entry.get("reason") or entry.get("state") or "not loaded"
    rows = []
    for package in packages:
        modules = package.get("modules") or []
        label = f"{package['name']} {package['version']}"
        broken = [m for m in modules if f"[{m}]" in reason]
        if ready or (modules and not broken and "cannot import" in reason):
            rows.append(SmokeRow("package", "PASS", f"{label}: import {', '.join(modules) or '-'}", package["name"]))
        else:
            rows.append(SmokeRow("package", "FAIL", f"{label}: {reason}", package["name"]))
    return rows


def _installed_packages(engine: Engine, image: str) -> list[dict]:
    """Packages the composition record of `image` lists as added (none without a record)."""
    result = engine.run_once(image, ["cat", "/opt/tritonserver/composition.json"], entrypoint=[])
    if result.exit_code != 0:
        return []
    try:
        return list(json.loads(result.output).get("packages") or [])
    except ValueError:
        return []


def _user_model_rows(index: dict) -> list[SmokeRow]:
    if not index:
        return [SmokeRow("models", "FAIL", "the model repository holds no model the server found")]
    rows = []
    for name, entry in sorted(index.items()):
        if entry.get("state") == "READY":
            rows.append(SmokeRow("model", "PASS", "ready", name))
        else:
            rows.append(SmokeRow("model", "FAIL", entry.get("reason") or entry.get("state") or "not loaded", name))
    return rows


def _presence_row(present: set[str], expected: set[str]) -> SmokeRow:
    extra, missing = sorted(present - expected), sorted(expected - present)
    if extra or missing:
        parts = []
        if extra:
            parts.append(f"not selected yet present: {', '.join(extra)}")
        if missing:
            parts.append(f"selected yet absent: {', '.join(missing)}")
        return SmokeRow("backends", "FAIL", "; ".join(parts))
    return SmokeRow("backends", "PASS", f"exactly the selected ones: {', '.join(sorted(present))}")


def _backends_in(engine: Engine, image: str) -> set[str]:
    result = engine.run_once(image, ["ls", "-1", "/opt/tritonserver/backends"], entrypoint=[])
    if result.exit_code != 0:
        return set()
    return {line.strip() for line in result.output.splitlines() if line.strip()}


def _user_models(repository: Path) -> dict[str, Path]:
    repository = Path(repository)
    if not repository.is_dir():
        raise UsageError(f"--model-repository {repository}: no such folder")
    models = {f"{MODELS}/{p.name}": p for p in sorted(repository.iterdir()) if p.is_dir()}
    if not models:
        raise UsageError(f"--model-repository {repository}: no model folders in it")
    return models


def _wait(ready: Callable[[], object], deadline: float, container: Container) -> bool:
    """Poll `ready` until it is true, the deadline passes or the container dies."""
    while time.monotonic() < deadline:
        try:
            if ready():
                return True
        except ComposerError:
            pass
        if not container.running():
            return False
        time.sleep(0.5)
    return False
