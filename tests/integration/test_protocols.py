"""Streaming (decoupled) and sequence models, end to end on the 24.09 stand-ins, through the
`composer build` a user runs: a repository of a decoupled python model streaming several responses
per request, a running sum per correlation ID (its second answer depends on its first), both of
them at once, two of each again in ensembles, checked with cases (from the model folders and from
--smoke-cases) and with default requests; the same models baked with --bake-models; and broken
ones (a stream that never sends its final flag, an empty stream, a wrong output type, a string
correlation ID the server refuses) that fail with one line each, in bounded time, moving no tag.
The models: tests/integration/models/protocols."""

from __future__ import annotations

import json
import shutil
import time
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from composer.verify.protocols import RESPONSE_TIMEOUT
from tests.cli import composer, image_json
from tests.conftest import TEST_LABEL_KEY, TEST_RUN

pytestmark = pytest.mark.integration

MODELS = Path(__file__).parent / "models" / "protocols"
BUILD = ("build", "--registry", "localhost/standin", "--version", "24.09", "-b", "python")
CASES = """\
cases:
  - model: sum_ensemble             # an ensemble whose step is a sequence model: steps, one correlation ID
    name: through the ensemble
    sequence_id: 90001
    steps:
      - inputs: [{name: X, datatype: INT32, shape: [1], data: [5]}]
        expected: [{name: SUM, datatype: INT32, shape: [1], data: [5]}]
      - inputs: [{name: X, datatype: INT32, shape: [1], data: [6]}]
        expected: [{name: SUM, datatype: INT32, shape: [1], data: [11]}]
  - model: counter_ensemble         # an ensemble whose step is decoupled: a stream, by count
    name: four through the ensemble
    inputs: [{name: COUNT, datatype: INT32, shape: [1], data: [4]}]
    response_count: 4
    expected: [{name: OUT, datatype: INT32, shape: [1]}]
"""


def repository(root: Path, which: str) -> Path:
    """A copy of good/ or broken/, open to the server's user. An ensemble's version folder holds a
    placeholder (.gitkeep), as in NVIDIA's own repositories: git keeps no empty folder, and neither
    does --bake-models (render writes files only), so a truly empty 1/ would not reach the image."""
    repo = root / which
    shutil.copytree(MODELS / which, repo)
    for path in [repo, *repo.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return repo


def build(*args, tag: str):
    return composer(*BUILD, "--tag", tag, "--label", f"{TEST_LABEL_KEY}={TEST_RUN}", *args)


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("protocols")
    (root / "cases.yaml").write_text(CASES)
    return root


@pytest.fixture(scope="module")
def served(engine, standin_images, root):
    """`composer build ... --model-repository good/ --smoke-cases cases.yaml`, once for the module."""
    tag = f"triton-composer-test/tritonserver:protocols-{uuid.uuid4().hex[:10]}"
    junit = root / "junit.xml"
    started = time.monotonic()
    try:
        run = build("--model-repository", repository(root, "good"), "--smoke-cases", root / "cases.yaml",
                    "--json", "--junit", junit, tag=tag)
        yield {"run": run, "tag": tag, "junit": junit, "seconds": time.monotonic() - started}
    finally:
        engine.remove_image(tag, force=True)


def rows_of(payload: dict) -> dict:
    """The model rows of a --json result: build's (and a failure's) under smoke_test, smoke-test's at the top."""
    if "images" in payload:  # the whole answer: its one image
        payload = payload["images"][0]
    report = payload["smoke_test"]
    return {r["model"]: r for r in report["rows"] if r["subject"] == "model"}


def test_streaming_and_sequence_models_pass_and_the_tag_moves(engine, served):
    run = served["run"]
    assert run.returncode == 0, run.stderr[-3000:]
    payload = image_json(run.stdout)
    assert payload["smoke_test"]["passed"] is True and engine.image(served["tag"]) is not None
    rows = rows_of(payload)
    assert {name: row["status"] for name, row in rows.items()} == {
        name: "PASS" for name in ("counter", "counter_ensemble", "running_sum", "running_sum_batched", "streamed_sum",
                                  "sum_ensemble")}
    requests = {name: (row["request"], row["cases"]) for name, row in rows.items()}
    assert requests == {
        "counter": ("stream, 2 cases", "2/2"),  # its folder's cases: three responses in order, five by count
        "counter_ensemble": ("stream, 1 case", "1/1"),  # from --smoke-cases
        "running_sum": ("sequence (5 steps), 2 cases", "2/2"),  # 3 + 2 steps, each a running sum
        "running_sum_batched": ("sequence (2 steps): X INT32 [1, 1]", None),  # default; batched, oldest strategy
        "streamed_sum": ("stream, sequence (2 steps): X INT32 [1]", None),  # default; decoupled and a sequence
        "sum_ensemble": ("sequence (2 steps), 1 case", "1/1"),
    }
    assert rows["streamed_sum"]["detail"].startswith("2 steps in sequence ")
    assert "each streamed 2/2 responses to the final flag" in rows["streamed_sum"]["detail"]
    samples = [r for r in payload["smoke_test"]["rows"] if r["request"] == "sample"]
    assert [(r["model"], r["status"]) for r in samples] == [("add_sub", "PASS")]  # the HTTP path, as before


def test_junit_carries_the_same_requests(served):
    cases = {c.get("name"): c for c in ET.parse(served["junit"]).getroot().iter("testcase")}
    properties = {p.get("name"): p.get("value") for p in cases["streamed_sum"].iter("property")}
    assert properties == {"request": "stream, sequence (2 steps): X INT32 [1]"}
    assert {p.get("name"): p.get("value") for p in cases["counter"].iter("property")} == {
        "request": "stream, 2 cases", "cases": "2/2"}


def test_a_wrong_expectation_of_the_running_sum_fails_naming_the_step(engine, served, root):
    """The second answer depends on the first: expecting it as if the requests were unrelated fails."""
    unrelated = root / "unrelated.yaml"
    unrelated.write_text(
        "cases:\n  - model: running_sum\n    name: as if unrelated\n    steps:\n"
        "      - {inputs: [{name: X, datatype: INT32, shape: [1], data: [3]}], "
        "expected: [{name: SUM, datatype: INT32, shape: [1], data: [3]}]}\n"
        "      - {inputs: [{name: X, datatype: INT32, shape: [1], data: [4]}], "
        "expected: [{name: SUM, datatype: INT32, shape: [1], data: [4]}]}\n")
    run = composer("smoke-test", served["tag"], "--model-repository", root / "good", "--smoke-cases", unrelated,
                   "--no-samples", "--json")
    assert run.returncode == 1, run.stderr[-3000:]
    row = rows_of(json.loads(run.stdout))["running_sum"]
    assert row["status"] == "FAIL" and row["cases"] == "2/3", row  # its folder's two cases still pass
    assert row["detail"] == "wrong answer: case as if unrelated: step 2: SUM[0] is 7, expected 4"


def test_broken_streams_and_sequences_fail_with_one_line_each_in_bounded_time(engine, standin_images, root):
    tag = f"triton-composer-test/tritonserver:protocols-{uuid.uuid4().hex[:10]}"
    started = time.monotonic()
    try:
        run = build("--model-repository", repository(root, "broken"), "--json", tag=tag)
        waited = time.monotonic() - started
        assert run.returncode == 1, run.stderr[-3000:]
        assert engine.image(tag) is None  # a failed smoke test moves no tag
    finally:
        engine.remove_image(tag, force=True)
    rows = rows_of(json.loads(run.stdout))
    details = {name: (row["status"], row["request"], row["detail"]) for name, row in rows.items()}
    assert details == {
        "endless": ("FAIL", "stream: COUNT INT32 [1]",
                    "default request: stream: no final flag within 30 s (1 response before)"),
        "empty_stream": ("FAIL", "stream: COUNT INT32 [1]",
                         "default request: stream: empty stream: the final flag came with no response holding outputs"),
        "wrong_type_stream": ("FAIL", "stream: COUNT INT32 [1]",
                              "default request: stream: no response holds every configured output (response 1: OUT "
                              "has datatype INT64, the configuration says INT32)"),
        # A string correlation ID, as the config asks; Triton 2.50 refuses every request to such a model.
        "string_corrid": ("FAIL", "sequence (2 steps): X INT32 [1]",
                          "default request: sequence 'composer-smoke-1': step 1 of 2: gRPC ModelInfer string_corrid: "
                          "unexpected number of string elements 2 for inference input 'CORRID', expecting 1"),
    }
    failed = run.stderr.strip().splitlines()[-1]
    assert all(name in failed for name in details), failed
    # The stream that never ends costs its deadline once, not the smoke test's whole timeout.
    assert waited < 4 * RESPONSE_TIMEOUT, waited


def test_the_same_models_baked_answer_with_nothing_mounted(engine, standin_images, root):
    tag = f"triton-composer-test/tritonserver:protocols-baked-{uuid.uuid4().hex[:10]}"
    try:
        run = build("--bake-models", repository(root / "baked", "good"), "--smoke-cases", root / "cases.yaml",
                    "--no-samples", "--json", tag=tag)
        assert run.returncode == 0, run.stderr[-3000:]
        rows = rows_of(json.loads(run.stdout))
        assert {n: r["status"] for n, r in rows.items()} == {n: "PASS" for n in (
            "counter", "counter_ensemble", "running_sum", "running_sum_batched", "streamed_sum", "sum_ensemble")}
        # The folders' cases were read from the image itself.
        assert (rows["counter"]["cases"], rows["running_sum"]["cases"]) == ("2/2", "2/2")
        again = composer("smoke-test", tag, "--no-samples", "--json")  # the image's own record and models
        assert again.returncode == 0, again.stderr[-3000:]
        assert rows_of(json.loads(again.stdout))["streamed_sum"]["request"] == "stream, sequence (2 steps): X INT32 [1]"
    finally:
        engine.remove_image(tag, force=True)
