"""The smoke test: serve models from the composed image and check real inference answers.

A composed image is only worth its tag if it serves. The container runs with its HTTP port
published where only the engine's host reaches it (127.0.0.1 for a local engine) and is removed
in every case, Ctrl-C included. Where the engine offers GPUs the server gets them, and must then
report GPU metrics (DCGM works); `strict` turns every SKIP into a failure.
"""

from __future__ import annotations

import json
import time
from importlib import resources
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import requests

from composer.engine import Container, Engine, gpu_request
from composer.errors import ComposerError, EngineError, UsageError
from composer.samples import Sample, samples_for
from composer.triton_client import TritonHTTP
from composer.progress import LineSink, quiet

HTTP_PORT = 8000
METRICS_PORT = 8002
GPU_METRIC = "nv_gpu_"  # the prefix of the metrics DCGM feeds (nv_gpu_utilization, ...)
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
    device: str | None = None  # where the model's instances ran (CPU, GPU), when the server tells


@dataclass(frozen=True)
class SmokeReport:
    image: str
    rows: tuple[SmokeRow, ...]
    server_version: str | None = None
    log_tail: str = ""
    gpus: str = "none"  # what the server was given: all, none or a count
    gpus_reason: str = ""
    strict: bool = False

    @property
    def passed(self) -> bool:
        return all(row.status != "FAIL" for row in self.rows)

    def count(self, status: str) -> int:
        return sum(1 for row in self.rows if row.status == status)

    def failures(self) -> list[SmokeRow]:
        return [row for row in self.rows if row.status == "FAIL"]

    def to_dict(self) -> dict:
        return {
            "image": self.image,
            "passed": self.passed,
            "server_version": self.server_version,
            "gpus": self.gpus,
            "gpus_reason": self.gpus_reason,
            "strict": self.strict,
            # A SKIP is neither passed nor failed: CI sees how much went unproven.
            "counts": {"passed": self.count("PASS"), "failed": self.count("FAIL"), "skipped": self.count("SKIP")},
            "rows": [
                {"subject": r.subject, "model": r.model, "status": r.status, "detail": r.detail, "device": r.device}
                for r in self.rows
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
    gpus: str | int = "auto"  # auto (all when the engine offers the nvidia runtime), all, none, or a count
    strict: bool = False  # every SKIP becomes a failure

    def __post_init__(self):
        if isinstance(self.gpus, str) and self.gpus.isdigit():  # "2" from a command line
            object.__setattr__(self, "gpus", int(self.gpus))
        if self.gpus == "auto":
            return
        try:
            gpu_request(self.gpus)
        except EngineError:
            raise UsageError(f"gpus {self.gpus!r}: give auto, all, none or a number of GPUs") from None


def resolve_gpus(engine: Engine, wanted: str | int) -> tuple[str | int, str]:
    """The GPUs to ask for, and why (said in the report)."""
    if wanted != "auto":
        return wanted, "as asked"
    if engine.offers_nvidia_runtime():
        return "all", "auto: the engine offers the nvidia runtime"
    return "none", "auto: the engine offers no nvidia runtime"


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

    gpus, why = resolve_gpus(engine, options.gpus)
    with_gpus = gpu_request(gpus) is not None
    # Metrics stay off without GPUs, as the CPU-only server has nothing to report through DCGM.
    metrics = ["--allow-metrics=true", "--allow-gpu-metrics=true"] if with_gpus else ["--allow-metrics=false"]
    on_line(f"starting tritonserver from {image} with {len(models)} model(s), GPUs: {gpus} ({why})")
    container = engine.start(
        image,
        ["tritonserver", f"--model-repository={MODELS}", "--exit-on-error=false", *metrics],
        ports=[HTTP_PORT, METRICS_PORT] if with_gpus else [HTTP_PORT],
        files=files,
        labels={SMOKE_LABEL: "1", **(labels or {})},
        shm_size=options.shm_size,
        gpus=gpus,
    )
    try:
        report = _check_server(container, image, options, samples, packages, rows, on_line, with_gpus)
    finally:
        container.remove()
    rows = list(report.rows)
    if options.strict:
        rows = [SmokeRow(r.subject, "FAIL", f"strict: {r.detail}", r.model, r.device) if r.status == "SKIP" else r
                for r in rows]
    rows = [replace(r, detail=f"{r.detail}; GPUs: {gpus} ({why})") if r.subject == "server" else r for r in rows]
    failed = any(r.status == "FAIL" for r in rows)
    return SmokeReport(image, tuple(rows), report.server_version, report.log_tail if failed else "",
                       gpus=str(gpus), gpus_reason=why, strict=options.strict)


def _check_server(container: Container, image, options, samples, packages, rows, on_line,
                  with_gpus: bool = False) -> SmokeReport:
    client = TritonHTTP(container.url(HTTP_PORT))
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
    if with_gpus:
        rows.append(_gpu_metrics_row(container))

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
    rows = [_with_device(client, r) for r in rows]
    return SmokeReport(image, tuple(rows), version, log_tail=container.logs(tail=40))


def _with_device(client: TritonHTTP, row: SmokeRow) -> SmokeRow:
    """The row, with the kind of device its model's instances run on (model config instance_group)."""
    if row.model is None or row.subject == "package" or row.status == "FAIL":
        return row
    try:
        groups = client.model_config(row.model).get("instance_group") or []
    except ComposerError:
        return row
    kinds = sorted({str(g.get("kind", "")).removeprefix("KIND_") for g in groups if g.get("kind")})
    if not kinds:
        return row
    device = "+".join(kinds)
    return SmokeRow(row.subject, row.status, f"{row.detail} ({device})", row.model, device)


def _gpu_metrics_row(container: Container) -> SmokeRow:
    """With GPUs, the metrics endpoint must report GPU metrics: an image whose DCGM cannot start fails."""
    text = ""
    for _ in range(20):  # GPU metrics appear once DCGM has polled the devices
        text = metrics_text(container.url(METRICS_PORT))
        if GPU_METRIC in text:
            break
        time.sleep(0.5)
    names = sorted({line.split("{", 1)[0].split()[0] for line in text.splitlines()
                    if line.startswith(GPU_METRIC)})
    if names:
        return SmokeRow("metrics", "PASS", f"GPU metrics reported: {', '.join(names[:3])}")
    why = "no answer from the metrics endpoint" if not text else f"no {GPU_METRIC}* metrics"
    return SmokeRow("metrics", "FAIL", f"{why} with GPUs given: DCGM did not start in this image")


def metrics_text(url: str) -> str:
    """The Prometheus text of a server's metrics endpoint ("" when it does not answer)."""
    session = requests.Session()
    session.trust_env = False  # the server is reached directly, never through a proxy
    try:
        response = session.get(f"{url}/metrics", timeout=5)
    except requests.RequestException:
        return ""
    return response.text if response.status_code == 200 else ""


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
