"""The smoke test: serve models from the composed image and check real inference answers.

A composed image is only worth its tag if it serves. The container runs with its HTTP port
published where only the engine's host reaches it (127.0.0.1 for a local engine) and is removed
in every case, Ctrl-C included. Where the engine offers GPUs the server gets them, and must then
report GPU metrics (DCGM works); `strict` turns every SKIP into a failure. What it expects and
what it reports are in composer.verify.smoke_plan.
"""

from __future__ import annotations

import base64
import json
import re
import time
from importlib import resources
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import requests

from composer.config.cases import (
    CASE_FILES, Case, CaseError, by_model, cases_from_text, check_against_config, default_request,
    describe_request, model_folders, read_cases_file, repository_cases, repository_problem,
)
from composer.engine.interface import Container, Engine, gpu_request
from composer.core.errors import ComposerError, UsageError
from composer.core import interrupts
from composer.verify.samples import Sample, samples_for
from composer.verify.triton_client import TritonHTTP
from composer.verify.grpc_client import TritonGRPC
from composer.verify.protocols import Exchanges
from composer.verify import reads
from composer.verify.plans import plan_images, with_built_plans
from composer.verify.smoke_plan import SmokePlan, SmokeReport, SmokeRow, read_record, resolve_gpus
from composer.core.progress import LineSink, quiet

HTTP_PORT = 8000
GRPC_PORT = 8001  # streams (decoupled models) and sequences: composer.verify.protocols
METRICS_PORT = 8002
GPU_METRIC = "nv_gpu_"  # the prefix of the metrics DCGM feeds (nv_gpu_utilization, ...)
SMOKE_LABEL = "org.triton-composer.smoke"
MODELS = "/models"  # where a composed image holds baked models, and where its CMD serves them from
SAMPLES = "/composer-smoke/samples"  # the composer's own models (samples, package check)
USER_MODELS = "/composer-smoke/models"  # a --model-repository, copied in for the smoke test
COPIED_IN = "/composer-smoke/"  # what the smoke test copies in: no file of the image
PACKAGE_CHECK = "composer_package_check"
POLL = 0.1  # seconds between asks of a server on loopback: each wait is the user's

# Backends with no sample that runs on a CPU here, and what to do instead.
NO_SAMPLE: dict[str, str] = {}
NO_SAMPLE_DEFAULT = "no portable sample for this backend: smoke-test your own models with --model-repository"


@dataclass(frozen=True)
class Served:
    """What one smoke run serves, and from where (container path -> host file or folder)."""

    samples: tuple[Sample, ...]
    user: tuple[str, ...]  # models of --model-repository
    baked: tuple[str, ...]  # models baked into the image
    cases: tuple[Case, ...]
    files: dict
    repositories: tuple[str, ...]
    notes: tuple[str, ...] = ()
    left_out: tuple[tuple[str, str], ...] = ()  # (backend, why its sample is not served): a SKIP row

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(sorted(set(self.user) | set(self.baked)))


def smoke_test(
    engine: Engine,
    image: str,
    options: SmokePlan,
    *,
    on_line: LineSink = quiet,
    labels: dict[str, str] | None = None,
    record: dict | None = None,
) -> SmokeReport:
    """Start the server from `image` on the samples, the user's models and the models baked into
    it, and check each answer. `record` is the image's composition record when already read."""
    rows: list[SmokeRow] = []
    present = _backends_in(engine, image)
    rows.append(_presence_row(present, set(options.backends)))
    record = read_record(engine, image) if record is None else record
    packages = list(record.get("packages") or []) if "python" in present else []
    served = _what_to_serve(engine, image, options, present, record, packages)
    for note in served.notes:
        on_line(f"note: {note}")

    gpus, why = resolve_gpus(engine, options.gpus, options.device)
    with_gpus = gpu_request(gpus) is not None
    if with_gpus and any(s.plan_source is not None for s in served.samples):  # the TensorRT sample's plan
        samples, files, left_out = with_built_plans(engine, plan_images(engine, image, record), list(served.samples),
                                                    served.files, SAMPLES, gpus, {SMOKE_LABEL: "1", **(labels or {})},
                                                    on_line)
        served = replace(served, samples=tuple(samples), files=files, left_out=tuple(left_out.items()))
    # Metrics stay off without GPUs, as the CPU-only server has nothing to report through DCGM.
    metrics = ["--allow-metrics=true", "--allow-gpu-metrics=true"] if with_gpus else ["--allow-metrics=false"]
    count = len(served.samples) + len(served.models)
    on_line(f"starting tritonserver from {image} with {count} model(s), GPUs: {gpus} ({why})")
    not_watched = reads.unavailable() if options.record_reads else None
    watch = options.record_reads and not_watched is None
    container, watching, files_read = None, None, ()
    try:
        with interrupts.holding():  # an interrupt waits until the container is known, so it goes
            container = engine.start(
                image,
                ["tritonserver", *(f"--model-repository={r}" for r in served.repositories), "--exit-on-error=false",
                 *metrics, *options.server_flags],
                ports=[HTTP_PORT, GRPC_PORT, METRICS_PORT] if with_gpus else [HTTP_PORT, GRPC_PORT],
                files=served.files,
                labels={SMOKE_LABEL: "1", **(labels or {})},
                shm_size=options.shm_size,
                gpus=gpus,
                entrypoint=reads.wait_entrypoint(_entrypoint(engine, image)) if watch else None,
            )
        if watch:
            watching, not_watched = _watch(engine, container)
        report = _check_server(container, image, options, served, packages, rows, on_line, with_gpus)
        if watching is not None:
            files_read = tuple(sorted(p for p in watching.stop() if not p.startswith(COPIED_IN)))
            watching = None
            on_line(f"the server opened {len(files_read)} file(s) of the image up to its last checked answer")
    finally:
        if watching is not None:
            watching.stop()
        if container is not None:
            container.remove()
    if not_watched:
        on_line(f"note: no list of the files the server reads: {not_watched}")
    rows = list(report.rows)
    if options.strict:
        rows = [replace(r, status="FAIL", detail=f"strict: {r.detail}") if r.status == "SKIP" else r for r in rows]
    said = (f"CPU-only image: no GPU, {' '.join(options.server_flags)}" if options.device.cpu_only
            else f"GPUs: {gpus} ({why})")
    rows = [replace(r, detail=f"{r.detail}; {said}") if r.subject == "server" else r for r in rows]
    failed = any(r.status == "FAIL" for r in rows)
    return SmokeReport(image, tuple(rows), report.server_version, report.log_tail if failed else "",
                       gpus=str(gpus), gpus_reason=why, strict=options.strict, device=options.device,
                       reads=files_read, reads_note=not_watched or "")


def _entrypoint(engine: Engine, image: str) -> tuple[str, ...]:
    info = engine.image(image)
    return info.entrypoint if info is not None else ()


def _watch(engine: Engine, container: Container) -> tuple[reads.Reads | None, str | None]:
    """Watch the waiting container's filesystem, then let it start (in every case: a container
    whose filesystem this machine does not see starts unwatched, and says why)."""
    root = engine.container_root(container.id)
    watching, why = None, None
    if root is None:
        why = "the engine's container filesystems are not mounted on this machine (a remote engine or storage)"
    else:
        try:
            watching = reads.Reads(root)
        except OSError as error:
            why = f"cannot watch the container's filesystem: {error.strerror or error}"
    engine.put_files(container.id, {reads.GO: b""})
    return watching, why


def _what_to_serve(engine: Engine, image: str, options: SmokePlan, present: set[str], record: dict,
                   packages: list[dict]) -> Served:
    """The repositories to serve: the image's baked models as they are, the user's models and the
    samples copied in. A sample whose name a user's model takes is left out (with a note)."""
    files: dict = {}
    repositories: list[str] = []
    cases: list[Case] = []
    baked: tuple[str, ...] = ()
    baked_at = record.get("baked_models")
    if baked_at:
        baked, baked_cases = baked_models(engine, image, str(baked_at))
        cases += baked_cases
        repositories.append(str(baked_at))
    user: tuple[str, ...] = ()
    if options.model_repository is not None:
        user_dirs = _user_models(options.model_repository)
        user = tuple(user_dirs)
        files.update({f"{USER_MODELS}/{name}": path for name, path in user_dirs.items()})
        cases += _checked(lambda: repository_cases(options.model_repository), "--model-repository")
        repositories.append(USER_MODELS)
    if options.cases_file is not None:
        cases += _checked(lambda: read_cases_file(options.cases_file), "--smoke-cases")
    taken = set(user) | set(baked)
    notes = []
    samples: list[Sample] = []
    if options.samples:
        for sample in samples_for(present):
            if sample.backend not in options.backends:
                continue
            if sample.model in taken:
                notes.append(f"sample {sample.model} left out: a model of yours has its name")
                continue
            samples.append(sample)
    elif not taken:
        raise UsageError("--no-samples leaves nothing to serve: give --model-repository DIR, or an image with "
                         "baked models (--bake-models)")
    own = {f"{SAMPLES}/{s.model}": s.path for s in samples}
    if packages:
        own.update(_package_check_files(packages))
    if own:
        files.update(own)
        repositories.append(SAMPLES)
    return Served(tuple(samples), user, baked, tuple(cases), files, tuple(repositories), tuple(notes))


def _checked(read, flag: str) -> tuple[Case, ...]:
    try:
        return read()
    except CaseError as error:
        raise UsageError(f"{flag}: {error}") from None


def baked_models(engine: Engine, image: str, where: str = MODELS) -> tuple[tuple[str, ...], tuple[Case, ...]]:
    """The model folders baked into `image` at `where`, and the cases they carry (read from the
    image itself, so the smoke test checks what was baked)."""
    script = (f'cd {where} 2>/dev/null || exit 0; for d in */; do m="${{d%/}}"; echo "model $m"; '
              f'for f in {" ".join(CASE_FILES)}; do [ -f "$m/$f" ] && echo "file $m/$f $(base64 -w0 "$m/$f")"; '
              'done; done; true')
    result = engine.run_once(image, ["sh", "-c", script], entrypoint=[])
    if result.exit_code != 0:
        raise ComposerError(f"cannot list the models baked into {image[:19]} at {where}: "
                            f"{' '.join(result.output.split())[-200:]}")
    names, cases = [], []
    for line in result.output.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "model" and rest and rest != "*":
            names.append(rest)
        elif kind == "file":
            path, _, encoded = rest.partition(" ")
            try:
                cases += cases_from_text(base64.b64decode(encoded).decode(), f"{where}/{path}", path.split("/")[0])
            except CaseError as error:
                raise ComposerError(f"baked models: {error}") from None
    return tuple(names), tuple(cases)


def _check_server(container: Container, image, options, served: Served, packages, rows, on_line,
                  with_gpus: bool = False) -> SmokeReport:
    client = TritonHTTP(container.url(HTTP_PORT))
    deadline = time.monotonic() + options.timeout
    if not _wait(lambda: client.live(), deadline, container):
        why = "exited" if not container.running() else f"not live after {options.timeout:.0f} s"
        rows.append(SmokeRow("server", "FAIL", f"tritonserver {why}"))
        reasons = server_reasons(container.logs())
        rows += [SmokeRow("model", "FAIL", f"not loaded: {reason}", name) for name, reason in sorted(reasons.items())]
        return SmokeReport(image, tuple(rows), log_tail=container.logs(tail=40))

    version = client.server_metadata().get("version")
    if options.server_version and version != options.server_version:
        rows.append(SmokeRow("server", "FAIL", f"server {version} answers, expected {options.server_version}"))
    else:
        rows.append(SmokeRow("server", "PASS", f"Triton {version} live"))
    if with_gpus:
        rows.append(_gpu_metrics_row(container))

    on_line("waiting for models to load")
    index, reasons = wait_for_models(client, container, deadline)

    exchanges = Exchanges(TritonGRPC(container.url(GRPC_PORT)))  # a gRPC channel only for a model that needs one
    try:
        rows += _sample_rows(client, list(served.samples), index, on_line, reasons, with_gpus, exchanges)
        if options.samples:
            tested = {s.backend for s in served.samples}
            for backend in sorted(set(options.backends) - tested):
                reason = dict(served.left_out).get(backend) or NO_SAMPLE.get(backend, NO_SAMPLE_DEFAULT)
                rows.append(SmokeRow(backend, "SKIP", reason))
        rows += _model_rows(client, served, index, reasons, on_line, exchanges)
    finally:
        exchanges.close()
    if packages:
        rows += _package_rows(packages, index)
    rows = [_with_device(client, r) for r in rows]
    return SmokeReport(image, tuple(rows), version, log_tail=container.logs(tail=40))


# -- what the server says of a model that did not load --------------------------------------

SETTLED = ("READY", "UNAVAILABLE")
_LOG_MESSAGE = re.compile(r'^[EW]\d{4} [\d:.]+\s+\d+ [^\]]+\] (.*)$')
_LOG_REASONS = (
    re.compile(r"^Poll failed for model directory '(?P<model>[^']+)': (?P<reason>.*)$", re.S),
    re.compile(r"^failed to load '(?P<model>[^']+)' version \d+: (?P<reason>.*)$", re.S),
)


def one_line(reason: str, limit: int = 240) -> str:
    """A server's reason in one line: its first paragraph (a python traceback follows it)."""
    head = str(reason).split("\n\n", 1)[0]
    head = " ".join(head.split())
    return head if len(head) <= limit else head[: limit - 3] + "..."


def server_reasons(log: str) -> dict[str, str]:
    """Model name -> why it did not load, from the server's own log lines (errors name the model)."""
    reasons: dict[str, str] = {}
    for line in log.splitlines():
        match = _LOG_MESSAGE.match(line.strip())
        if not match:
            continue
        message = match.group(1)
        if message.startswith('"'):
            try:
                message = json.loads(message)
            except ValueError:
                message = message.strip('"')
        for pattern in _LOG_REASONS:
            found = pattern.match(message)
            if found:
                reasons.setdefault(found.group("model"), one_line(found.group("reason")))
    return reasons


def wait_for_models(client: TritonHTTP, container: Container, deadline: float) -> tuple[dict, dict[str, str]]:
    """The model index once every model is READY or has failed, and why each failed.

    A model has failed as soon as the server says so: UNAVAILABLE in the index, or an error line
    naming it in the log (a config.pbtxt the server cannot parse leaves an index entry without a
    state). Only models still loading are waited for, up to `deadline`.
    """
    index: dict = {}
    while True:
        try:
            index = {m["name"]: m for m in client.model_index()}
        except ComposerError:
            pass
        unsettled = [n for n, m in index.items() if m.get("state") not in SETTLED]
        reasons = server_reasons(container.logs()) if unsettled or any(
            m.get("state") == "UNAVAILABLE" and not m.get("reason") for m in index.values()) else {}
        if index and not [n for n in unsettled if n not in reasons]:
            break
        if time.monotonic() >= deadline or not container.running():
            break
        interrupts.check()
        time.sleep(POLL)
    for name, entry in index.items():
        if entry.get("reason"):
            reasons[name] = one_line(entry["reason"])
    return index, reasons


def _not_ready(entry: dict, name: str, reasons: dict[str, str]) -> tuple[str, str]:
    """(state, one-line reason) of a model that is not READY."""
    state = entry.get("state") or ("absent" if not entry else "not loaded")
    reason = reasons.get(name) or ("the server does not list it" if not entry else
                                   "the server gave no reason (see the server log)")
    return state, reason


# -- the user's and the baked models ---------------------------------------------------------


def _model_rows(client: TritonHTTP, served: Served, index: dict, reasons: dict[str, str], on_line,
                exchanges: Exchanges | None = None) -> list[SmokeRow]:
    own = {s.model for s in served.samples} | {PACKAGE_CHECK}
    names = sorted(set(served.models) | {n for n in index if n not in own})
    cases = by_model(served.cases)
    rows = []
    for name in names:
        rows.append(model_row(client, name, index.get(name, {}), cases.get(name, []), reasons, exchanges))
        if rows[-1].status == "PASS":
            on_line(f"{name}: {rows[-1].detail}")
    for name in sorted(set(cases) - set(names) - own):
        shown = ", ".join(c.name for c in cases[name])
        rows.append(SmokeRow("model", "FAIL", f"cases {shown} name model {name}, which the server does not serve",
                             name, request="-", cases=f"0/{len(cases[name])}"))
    if not names and (served.user or served.baked):
        rows.append(SmokeRow("models", "FAIL", "the model repository holds no model the server found"))
    return rows


def model_row(client: TritonHTTP, name: str, entry: dict, cases: list[Case], reasons: dict[str, str],
              exchanges: Exchanges | None = None) -> SmokeRow:
    """One model: READY, then its cases (or a default request from its configuration) answered;
    over a stream or in a sequence where the model needs it (`exchanges`)."""
    if entry.get("state") != "READY":
        state, reason = _not_ready(entry, name, reasons)
        total = f"0/{len(cases)}" if cases else None
        return SmokeRow("model", "FAIL", f"not loaded: {reason}", name, ready=state, request="-", cases=total)
    verdict = exchanges.verdict(client.model_config, name, cases) if exchanges is not None else None
    if verdict is not None:
        return SmokeRow("model", verdict.status, verdict.detail, name, ready="READY", request=verdict.request,
                        cases=verdict.cases)
    if cases:
        passed, problems = 0, []
        for case in cases:
            try:
                problem = case.check(client.infer(name, case.inputs))
            except ComposerError as error:
                problem = f"case {case.name}: {error.message}"
            if problem:
                problems.append(problem)
            else:
                passed += 1
        counted = f"{passed}/{len(cases)}"
        request = f"{len(cases)} case{'s' if len(cases) > 1 else ''}"
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            return SmokeRow("model", "FAIL", f"wrong answer: {problems[0]}{more}", name, ready="READY",
                            request=request, cases=counted)
        return SmokeRow("model", "PASS", "correct answers", name, ready="READY", request=request, cases=counted)
    try:
        config = client.model_config(name)
        inputs = default_request(config)
    except CaseError as error:
        return SmokeRow("model", "FAIL", f"no request possible: {error}", name, ready="READY", request="-")
    except ComposerError as error:
        return SmokeRow("model", "FAIL", error.message, name, ready="READY", request="-")
    request = f"default: {describe_request(inputs)}"
    try:
        problem = check_against_config(config, client.infer(name, list(inputs)))
    except ComposerError as error:
        problem = error.message
    if problem:
        return SmokeRow("model", "FAIL", f"default request: {problem}", name, ready="READY", request=request)
    return SmokeRow("model", "PASS", "answer holds every configured output", name, ready="READY", request=request)


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
    return replace(row, detail=f"{row.detail} ({device})", device=device)


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


def _sample_rows(client: TritonHTTP, samples: list[Sample], index: dict, on_line,
                 reasons: dict[str, str] | None = None, with_gpus: bool = False,
                 exchanges: Exchanges | None = None) -> list[SmokeRow]:
    rows = []
    for sample in samples:
        entry = index.get(sample.model, {})
        if entry.get("state") != "READY":
            state, reason = _not_ready(entry, sample.model, reasons or {})
            if sample.gpu and not with_gpus:
                rows.append(SmokeRow(sample.backend, "SKIP", f"needs a GPU (the smoke test ran without one; smoke-test "
                                     f"your own models on a GPU machine with --model-repository): {reason}",
                                     sample.model, ready=state, request="-", cases="0/1"))
                continue
            rows.append(SmokeRow(sample.backend, "FAIL", f"model not ready: {reason}", sample.model, ready=state,
                                 request="-", cases="0/1"))
            continue
        streamed = sample.stream and exchanges is not None  # a decoupled sample (vllm): its responses, joined
        done = {"ready": "READY", "request": "stream, sample" if streamed else "sample"}
        try:
            outputs = exchanges.sample_outputs(sample) if streamed else client.infer(sample.model, sample.inputs)
        except ComposerError as exc:
            rows.append(SmokeRow(sample.backend, "FAIL", exc.message, sample.model, cases="0/1", **done))
            continue
        mismatch = sample.check(outputs)
        if mismatch:
            rows.append(SmokeRow(sample.backend, "FAIL", mismatch, sample.model, cases="0/1", **done))
        else:
            on_line(f"{sample.model}: correct answer")
            rows.append(SmokeRow(sample.backend, "PASS", "ready, correct answer", sample.model, cases="1/1", **done))
    return rows


def _package_check_files(packages: list[dict]) -> dict[str, bytes]:
    """The package-check model, told which modules to import."""
    folder = resources.files("composer.verify.samples").joinpath("package_check")
    modules = sorted({m for p in packages for m in p.get("modules") or []})
    base = f"{SAMPLES}/{PACKAGE_CHECK}"
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
    """Model name -> folder of a --model-repository (checked again here for smoke-test IMAGE)."""
    problem = repository_problem(Path(repository))
    if problem:
        raise UsageError(f"--model-repository {repository}: {problem}")
    return model_folders(Path(repository))


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
        interrupts.check()
        time.sleep(POLL)
    return False
