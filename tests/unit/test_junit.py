"""JUnit XML: parses back, one suite per image, one case per smoke row, right counts."""

import xml.etree.ElementTree as ET

import pytest

from composer.core.errors import UsageError
from composer.publish.junit import write_junit
from composer.verify.smoke_plan import SmokeReport, SmokeRow

REPORT = SmokeReport(
    image="team/triton:onnx",
    rows=(
        SmokeRow("backends", "PASS", "onnxruntime, python present"),
        SmokeRow("onnxruntime", "PASS", "answer matches", model="onnx_affine"),
        SmokeRow("python", "FAIL", "wrong answer:\n[1, 2] != [2, 3]", model="add_sub"),
        SmokeRow("tensorrt", "SKIP", "needs a GPU"),
    ),
    server_version="2.50.0",
    log_tail="I1122 server started\x1b[0m\n",
)


def test_suites_cases_and_counts(tmp_path):
    path = tmp_path / "out" / "junit.xml"
    write_junit([("team/triton:onnx", REPORT), ("team/triton:py", None, "build step 3 failed: pip")], path)
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("skipped"), root.get("errors")) == ("5", "2", "1", "0")

    smoke, build = root.findall("testsuite")
    assert smoke.get("name") == "team/triton:onnx"
    assert (smoke.get("tests"), smoke.get("failures"), smoke.get("skipped")) == ("4", "1", "1")
    cases = smoke.findall("testcase")
    assert [(c.get("classname"), c.get("name")) for c in cases] == [
        ("backends", "backends"), ("onnxruntime", "onnx_affine"), ("python", "add_sub"), ("tensorrt", "tensorrt")]
    failure = cases[2].find("failure")
    assert failure.get("message") == "wrong answer: [1, 2] != [2, 3]"
    assert "\n" in failure.text
    assert cases[3].find("skipped").get("message") == "needs a GPU"
    assert cases[1].find("failure") is None and cases[1].find("skipped") is None
    assert smoke.find("properties/property").get("value") == "2.50.0"
    assert "server started" in smoke.find("system-out").text  # control characters dropped: valid XML

    assert build.get("name") == "team/triton:py"
    (case,) = build.findall("testcase")
    assert case.get("name") == "build" and case.find("failure").get("message") == "build step 3 failed: pip"
    assert (build.get("tests"), build.get("failures")) == ("1", "1")


def test_all_passing(tmp_path):
    report = SmokeReport(image="x", rows=(SmokeRow("python", "PASS", "ok", model="add_sub"),))
    path = tmp_path / "j.xml"
    write_junit([("x", report)], path)
    root = ET.parse(path).getroot()
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == ("1", "0", "0")
    assert path.read_text().startswith("<?xml")


def test_failed_build_without_message(tmp_path):
    path = tmp_path / "j.xml"
    write_junit([("x", None)], path)
    assert ET.parse(path).getroot().find("testsuite/testcase/failure").get("message") == "the build failed"


def test_no_reports(tmp_path):
    path = tmp_path / "j.xml"
    write_junit([], path)
    assert ET.parse(path).getroot().get("tests") == "0"


def test_unwritable_path_is_a_usage_error(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match="--junit .*(Not a directory|not a folder)"):
        write_junit([("x", REPORT)], tmp_path / "file" / "j.xml")


def test_each_case_carries_the_request_and_cases_as_the_table_does(tmp_path):
    report = SmokeReport(image="x", rows=(
        SmokeRow("model", "PASS", "streamed", model="counter", request="stream, 2 cases", cases="2/2"),
        SmokeRow("model", "FAIL", "step 2", model="running_sum", request="sequence (2 steps): X INT32 [1]"),
        SmokeRow("model", "FAIL", "not loaded", model="broken", request="-"),
    ))
    path = tmp_path / "j.xml"
    write_junit([("x", report)], path)
    counter, running, broken = ET.parse(path).getroot().find("testsuite").findall("testcase")
    assert {p.get("name"): p.get("value") for p in counter.findall("properties/property")} == {
        "request": "stream, 2 cases", "cases": "2/2"}
    assert [p.get("value") for p in running.findall("properties/property")] == ["sequence (2 steps): X INT32 [1]"]
    assert running[0].tag == "properties" and running[1].tag == "failure"  # properties first, as JUnit readers expect
    assert broken.find("properties") is None  # nothing was sent
