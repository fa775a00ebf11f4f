"""Backend sets, several images in one run, locks and moved tags, JUnit output."""

from __future__ import annotations

import json
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.cli import composer, image_json

pytestmark = pytest.mark.integration

REGISTRY = "localhost/standin"


def write_set(folder: Path, name: str, body: str) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(body)
    return path


def test_two_sets_one_run_with_junit(engine, standin_images, tmp_path, names):
    suffix = uuid.uuid4().hex[:8]
    a = write_set(tmp_path, "onnx", f'version: "24.09"\nregistry: {REGISTRY}\nbackends: [onnxruntime, python]\n'
                                    f"tag: triton-composer-test/sets:onnx-{suffix}\n")
    b = write_set(tmp_path, "python", f'version: "24.09"\nregistry: {REGISTRY}\nbackends: [python]\n'
                                      f"tag: triton-composer-test/sets:python-{suffix}\n")
    names += [f"triton-composer-test/sets:onnx-{suffix}", f"triton-composer-test/sets:python-{suffix}"]
    junit = tmp_path / "smoke.xml"
    run = composer("build", "--set", str(a), "--set", str(b), "--json", "--junit", str(junit))
    assert run.returncode == 0, run.stderr
    images = json.loads(run.stdout)["images"]
    assert [i["backends"] for i in images] == [["onnxruntime", "python"], ["python"]]
    # They share their common layers: the core copied from the full image is one layer.
    first, second = (engine.image(n).layers for n in names)
    assert len(set(first) & set(second)) >= 4
    root = ET.parse(junit).getroot()
    assert [s.get("name") for s in root.iter("testsuite")] == names
    assert root.get("failures") == "0" and int(root.get("tests")) >= 6


def test_cli_overrides_set(engine, standin_images, tmp_path, names):
    tag = f"triton-composer-test/sets:override-{uuid.uuid4().hex[:8]}"
    names.append(tag)
    path = write_set(tmp_path, "base", f'version: "24.09"\nregistry: {REGISTRY}\nbackends: [onnxruntime, python]\n')
    run = composer("build", "--set", str(path), "--backend", "python", "--tag", tag, "--no-smoke-test", "--json")
    assert run.returncode == 0, run.stderr
    assert image_json(run.stdout)["backends"] == ["python"]


def test_wrong_set_names_file_line_and_key(tmp_path):
    path = write_set(tmp_path, "bad", 'version: "24.09"\nregistry: x\nbackend: [python]\n')
    run = composer("build", "--set", str(path))
    assert run.returncode != 0
    last = run.stderr.strip().splitlines()[-1]
    assert "bad.yaml:3" in last and "backend" in last and "backends" in last
    assert "Traceback" not in run.stderr


def test_lock_then_moved_tag(engine, standin_images, tmp_path, names):
    """Lock a set on a tag, move the tag, and --locked refuses; same lock, same Dockerfile."""
    suffix = uuid.uuid4().hex[:8]
    full, minimal = f"triton-composer-test/full:{suffix}", f"triton-composer-test/min:{suffix}"
    engine.tag(standin_images.full_id, full)
    engine.tag(standin_images.min_id, minimal)
    names += [full, minimal]
    path = write_set(tmp_path, "locked", f"images: {{full: {full}, min: {minimal}}}\nbackends: [python]\n"
                                         f"tag: triton-composer-test/sets:locked-{suffix}\n")
    names.append(f"triton-composer-test/sets:locked-{suffix}")
    run = composer("lock", "--set", str(path))
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "locked.lock.yaml").is_file()

    ok = composer("build", "--set", str(path), "--locked", "--no-smoke-test")
    assert ok.returncode == 0, ok.stderr

    engine.tag(standin_images.min_id, full)  # the tag moves
    moved = composer("build", "--set", str(path), "--locked")
    assert moved.returncode != 0
    last = moved.stderr.strip().splitlines()[-1]
    assert full in last and "moved" in last and "composer lock" in last
