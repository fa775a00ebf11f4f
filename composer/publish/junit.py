"""JUnit XML of smoke reports, so CI systems (GitHub, GitLab, Jenkins) show each check as a test.

One <testsuite> per composed image, one <testcase> per smoke row. A build that failed before it
could be smoke-tested is one failing testcase named "build", so a red CI run always says why.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Sequence, Union

from composer.core.errors import Invalid, UsageError
from composer.core.files import check_output_file, make_folders, write_file
from composer.core.redaction import redact
from composer.verify.smoke_plan import SmokeReport

# An image's tag with its smoke report, or with None and the error that stopped its build.
Outcome = Union[tuple[str, SmokeReport], tuple[str, None, str]]

# Characters XML 1.0 cannot hold at all (build logs may carry terminal control codes).
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def is_junit(path: Path) -> bool:
    """A JUnit report this composer wrote (so a rerun may replace it, and nothing else)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(512)
    except OSError:
        return False
    return head.startswith(b"<?xml") and b'<testsuites name="triton-composer smoke tests"' in head


def check_junit_output(path: Path) -> Path:
    """--junit FILE, checked before any work; no folder is made for a run that may be refused."""
    try:
        return check_output_file(path, "--junit", ours=is_junit, makes_folders=True)  # made when written
    except Invalid as problem:
        raise UsageError(str(problem)) from None


def write_junit(reports: Sequence[Outcome], path: Path) -> None:
    """Write the JUnit XML of `reports` to `path` (its folder is created), never through a link."""
    root = junit_tree(reports)
    ET.indent(root)
    path = check_junit_output(path)
    try:
        make_folders(path.parent)
        write_file(path, redact(ET.tostring(root, encoding="unicode", xml_declaration=True)).encode())
    except OSError as exc:
        raise UsageError(f"cannot write the JUnit report {path}: {exc.strerror or exc}") from None


def junit_tree(reports: Sequence[Outcome]) -> ET.Element:
    """The <testsuites> element of `reports`."""
    root = ET.Element("testsuites", name="triton-composer smoke tests")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for outcome in reports:
        suite = _suite(*_unpack(outcome))
        root.append(suite)
        for key in totals:
            totals[key] += int(suite.get(key, "0"))
    for key, value in totals.items():
        root.set(key, str(value))
    return root


def _unpack(outcome) -> tuple[str, SmokeReport | None, str]:
    if len(outcome) == 2:
        tag, report = outcome
        message = ""
    else:
        tag, report, message = outcome
    if report is None and not message:
        message = "the build failed"
    return tag, report, message


def _suite(tag: str, report: SmokeReport | None, message: str) -> ET.Element:
    suite = ET.Element("testsuite", name=_clean(tag))
    if report is None:
        case = ET.SubElement(suite, "testcase", classname="build", name="build")
        failure = ET.SubElement(case, "failure", message=_line(message), type="BuildFailed")
        failure.text = _clean(message)
        counts = {"tests": 1, "failures": 1, "skipped": 0}
    else:
        if report.server_version:
            properties = ET.SubElement(suite, "properties")
            ET.SubElement(properties, "property", name="server_version", value=_clean(report.server_version))
        counts = {"tests": 0, "failures": 0, "skipped": 0}
        for row in report.rows:
            case = ET.SubElement(suite, "testcase", classname=_clean(row.subject), name=_clean(row.model or row.subject))
            counts["tests"] += 1
            _row_properties(case, row)
            if row.status == "FAIL":
                counts["failures"] += 1
                ET.SubElement(case, "failure", message=_line(row.detail), type="SmokeTestFailed").text = _clean(row.detail)
            elif row.status == "SKIP":
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=_line(row.detail))
            elif row.detail:
                ET.SubElement(case, "system-out").text = _clean(row.detail)
        if report.log_tail:
            ET.SubElement(suite, "system-out").text = _clean(report.log_tail)
    # Attribute order as CI tools print them: name, tests, failures, errors, skipped.
    for key in ("tests", "failures"):
        suite.set(key, str(counts[key]))
    suite.set("errors", "0")
    suite.set("skipped", str(counts["skipped"]))
    return suite


def _row_properties(case: ET.Element, row) -> None:
    """What was sent (`sample`, `N cases`, `stream`, `sequence (N steps)`, ...) and the cases passed,
    as the smoke table and --json say them (testcase properties, as pytest writes them)."""
    shown = [(key, value) for key, value in (("request", row.request), ("cases", row.cases)) if value and value != "-"]
    if shown:
        properties = ET.SubElement(case, "properties")
        for key, value in shown:
            ET.SubElement(properties, "property", name=key, value=_clean(value))


def _clean(text: str) -> str:
    return _NOT_XML.sub("?", text)


def _line(text: str) -> str:
    """A message attribute: one line, as CI tools show it in their summaries."""
    return " ".join(_clean(text).split())


def outcome_entries(outcomes) -> list[tuple]:
    """composer.pipeline.Outcome values as write_junit takes them: a failed build is a failing case."""
    entries: list[tuple] = []
    for outcome in outcomes:
        report = outcome.result.smoke if outcome.result else getattr(outcome.error, "report", None)
        if report is not None:
            entries.append((outcome.tag, report))
        elif outcome.error is not None:
            entries.append((outcome.tag, None, outcome.error.message))
        # built with --no-smoke-test: nothing to report
    return entries
