"""A smoke test's PASS, recorded per engine: a build that made the same image, to be served the same
models and cases on the same host, says when it passed instead of starting the server again.

The record is keyed by everything the verdict depends on: the image id (its content), the smoke
plan (backends, samples, GPUs asked, strictness, device), the models and cases by their bytes, the
engine (its identity and the runtimes it offers: a GPU host's nvidia runtime) and the composer's
version (the samples and the checks are its own). It lives with the engine's other state on this
machine (composer.engine.locks.state_dir), never trusted for another engine. Only a PASS is kept.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

from composer import __version__
from composer.config.types import Device
from composer.engine import locks
from composer.engine.interface import Engine
from composer.verify.smoke_plan import SmokePlan, SmokeReport, SmokeRow

FORMAT = 1


def _tree_digest(path: Path | None) -> str | None:
    """A folder's (or a file's) names, modes and bytes, through links as the server reads them."""
    if path is None:
        return None
    hashed = hashlib.sha256()
    paths = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for item in paths:
        hashed.update(f"{item.relative_to(path) if item != path else item.name}\0{item.stat().st_mode & 0o777:o}\0".encode())
        with open(item, "rb") as handle:
            while chunk := handle.read(1 << 20):
                hashed.update(chunk)
    return hashed.hexdigest()


def record_key(engine: Engine, image_id: str, plan: SmokePlan) -> str:
    what = {
        "format": FORMAT, "composer": __version__, "image": image_id, "engine": engine.identity(),
        "runtimes": sorted(engine.runtimes()),
        "plan": {"backends": sorted(plan.backends), "server_version": plan.server_version, "samples": plan.samples,
                 "shm_size": plan.shm_size, "gpus": str(plan.gpus), "strict": plan.strict, "device": str(plan.device),
                 **({"record_reads": True} if plan.record_reads else {})},
        "models": _tree_digest(plan.model_repository), "cases": _tree_digest(plan.cases_file),
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


def save(engine: Engine, image_id: str, plan: SmokePlan, report: SmokeReport) -> None:
    """Record a PASS (nothing else is reused)."""
    if not report.passed:
        return
    locks.write_record("smoke-records", record_key(engine, image_id, plan),
                       {"engine": engine.identity(), "passed_at": time.time(), "report": report.to_dict(),
                        "log_tail": report.log_tail, "reads": list(report.reads), "reads_note": report.reads_note})


def recorded(engine: Engine, image_id: str, plan: SmokePlan) -> SmokeReport | None:
    """The recorded PASS for this image, plan and engine, its rows saying when it passed; or None."""
    try:
        record = locks.read_record("smoke-records", record_key(engine, image_id, plan)) or {}
        if record["engine"] != engine.identity():
            return None
        report = record["report"]
        when = datetime.fromtimestamp(float(record["passed_at"]), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        rows = tuple(SmokeRow(subject=r["subject"], status=r["status"], model=r.get("model"), device=r.get("device"),
                              ready=r.get("ready"), request=r.get("request"), cases=r.get("cases"),
                              detail=f"recorded for this image on this engine at {when}: {r['detail']}")
                     for r in report["rows"])
        found = SmokeReport(image=report["image"], rows=rows, server_version=report.get("server_version"),
                            log_tail=str(record.get("log_tail") or ""), gpus=str(report.get("gpus") or "none"),
                            gpus_reason=str(report.get("gpus_reason") or ""), strict=bool(report.get("strict")),
                            device=Device(str(report.get("device") or "gpu")),
                            reads=tuple(str(p) for p in record.get("reads") or ()),
                            reads_note=str(record.get("reads_note") or ""))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not found.passed or found.image != image_id:
        return None
    return replace(found, recorded_at=when)
