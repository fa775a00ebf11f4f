"""What a smoke test expects of an image (the smoke plan, from a composition plan or an image's
composition record; the GPUs it asks for) and what it found (the report). Kept apart from running
the server (composer.verify.smoke): the pipeline, the CLI and the JUnit report use these alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from composer.engine.interface import Engine, ImageInfo, gpu_request
from composer.core.errors import ComposerError, EngineError, UsageError
from composer.config.rules import smoke_settings_fit_the_device
from composer.config.types import Device
from composer.config.values import check_gpus

RECORD = "/opt/tritonserver/composition.json"


@dataclass(frozen=True)
class SmokeRow:
    """One line of the smoke table: a backend (or a check) and how it fared."""

    subject: str
    status: str  # PASS, FAIL or SKIP
    detail: str
    model: str | None = None
    device: str | None = None  # where the model's instances ran (CPU, GPU), when the server tells
    ready: str | None = None  # the model's state as the server reports it (READY, UNAVAILABLE, ...)
    request: str | None = None  # what was sent: "sample", "N cases", "default: <inputs>", "stream", "sequence (N steps)"
    cases: str | None = None  # cases passed of those sent, e.g. "2/3"


@dataclass(frozen=True)
class SmokeReport:
    image: str
    rows: tuple[SmokeRow, ...]
    server_version: str | None = None
    log_tail: str = ""
    gpus: str = "none"  # what the server was given: all, none or a count
    gpus_reason: str = ""
    strict: bool = False
    device: Device = Device.GPU  # CPU: a CPU-only image, served with no GPU
    recorded_at: str | None = None  # a PASS recorded before (composer.verify.smoke_record): when; not served now
    # The image's files the server opened from its start to its last checked answer, when the plan
    # asked (composer.verify.reads), sorted; or why there is no such list.
    reads: tuple[str, ...] = ()
    reads_note: str = ""

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
            "device": str(self.device),
            "recorded_at": self.recorded_at,
            **({"files_read": len(self.reads)} if self.reads else {}),
            **({"files_read_note": self.reads_note} if self.reads_note else {}),
            # A SKIP is neither passed nor failed: CI sees how much went unproven.
            "counts": {"passed": self.count("PASS"), "failed": self.count("FAIL"), "skipped": self.count("SKIP")},
            "rows": [
                {"subject": r.subject, "model": r.model, "status": r.status, "detail": r.detail, "device": r.device,
                 "ready": r.ready, "request": r.request, "cases": r.cases}
                for r in self.rows
            ],
        }


@dataclass(frozen=True)
class SmokePlan:
    """What the smoke test expects of the image and serves from it, and how long it waits. Made
    with the composition plan (composer.resolve.plan), or from an image's record for `smoke-test IMAGE`,
    so both commands test an image the same way."""

    backends: tuple[str, ...]  # the backends that must be (exactly) in the image
    server_version: str | None = None
    model_repository: Path | None = None
    cases_file: Path | None = None  # --smoke-cases: cases for any served model
    samples: bool = True  # serve the samples (beside the user's models); --no-samples turns them off
    timeout: float = 240.0
    shm_size: str = "512m"
    gpus: str | int = "auto"  # auto (all when the engine offers the nvidia runtime), all, none, or a count
    strict: bool = False  # every SKIP becomes a failure
    device: Device = Device.GPU  # CPU: a CPU-only image, served with no GPU and the server's CPU flags
    record_reads: bool = False  # list the files the server opens (an eStargz push's prefetch list)

    @property
    def server_flags(self) -> tuple[str, ...]:
        return self.device.server_flags

    def __post_init__(self):
        if isinstance(self.gpus, str):  # the one rule of --gpus (composer.config.options.check_gpus)
            problem = check_gpus(self.gpus)
            if problem:
                raise UsageError(f"gpus: {problem}")
            if self.gpus.isascii() and self.gpus.isdigit():  # "2" from a command line
                object.__setattr__(self, "gpus", int(self.gpus))
        if self.gpus == "auto":
            return
        try:
            gpu_request(self.gpus)
        except EngineError:
            raise UsageError(f"gpus {self.gpus!r}: give auto, all, none or a number of GPUs") from None


    @classmethod
    def of(cls, backends, server_version: str | None, settings, device: Device = Device.GPU) -> "SmokePlan":
        """The smoke plan for these backends with the user's smoke settings (a spec's Result, whose
        fit to the device composer.config.rules checked); a CPU-only image is served with no GPU."""
        return cls(backends=tuple(backends), server_version=server_version or None,
                   model_repository=settings.model_repository, cases_file=settings.smoke_cases,
                   samples=settings.samples, gpus=settings.gpus, strict=settings.strict, device=device)


def image_smoke_plan(engine: Engine, image: ImageInfo, name: str, backends: tuple[str, ...],
                     settings) -> tuple[SmokePlan, dict]:
    """The smoke plan of a built image, from its composition record (and the record itself):
    the backends it names (unless given) and the server version it states."""
    record = read_record(engine, image.id, name)
    backends = backends or tuple(record.get("backends") or ())
    if not backends:
        raise UsageError(f"{name} has no composition record: name its backends with --backend")
    server = record.get("server_version") or image.env.get("TRITON_SERVER_VERSION")
    try:
        device = Device(str(record.get("device") or Device.GPU))
    except ValueError:
        raise ComposerError(f"{name}: its composition record names device {record.get('device')!r}; rebuild the image "
                            "with composer build") from None
    problem = smoke_settings_fit_the_device(device, settings)
    if problem:
        raise UsageError(f"{name} is a CPU-only image (composed with --device cpu): {problem.on_command_line}")
    return SmokePlan.of(backends, server, settings, device=device), record


def resolve_gpus(engine: Engine, wanted: str | int, device: Device = Device.GPU) -> tuple[str | int, str]:
    """The GPUs to ask for, and why (said in the report)."""
    if device.cpu_only:
        return "none", "CPU-only image"
    if wanted != "auto":
        return wanted, "as asked"
    if engine.offers_nvidia_runtime():
        return "all", "auto: the engine offers the nvidia runtime"
    return "none", "auto: the engine offers no nvidia runtime"


def read_record(engine: Engine, image: str, name: str | None = None) -> dict:
    """The composition record of `image`: empty for an image the composer did not make (no
    record file), an error naming the image when the file is there but not a record."""
    result = engine.run_once(image, ["cat", RECORD], entrypoint=[])
    if result.exit_code != 0:
        return {}
    try:
        record = json.loads(result.output)
    except ValueError:
        record = None
    if not isinstance(record, dict):
        raise ComposerError(f"{name or image}: its composition record {RECORD} is not a JSON object; "
                            "rebuild the image with composer build")
    return record
