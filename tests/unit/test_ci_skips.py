"""Under CI a skip fails (tests/conftest.py): the hook is tried on a test that skips, in a pytest
run of its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, ci: bool) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
    (tmp_path / "test_skipping.py").write_text(
        "import pytest\n\n"
        "def test_skips_in_its_body():\n    pytest.skip('no engine here')\n\n"
        "@pytest.mark.skipif(True, reason='marked')\ndef test_skips_by_mark():\n    pass\n\n"
        "@pytest.mark.xfail(reason='known')\ndef test_expected_to_fail():\n    assert False\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **({"CI": "true"} if ci else {})}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)


def test_under_ci_every_skip_fails_and_an_expected_failure_stays_one(tmp_path):
    run = _run(tmp_path, ci=True)
    assert run.returncode == 1, run.stdout
    assert "1 failed" in run.stdout and "1 error" in run.stdout and "1 xfailed" in run.stdout, run.stdout  # the mark skips in setup: an error
    assert "under CI a skip fails: Skipped: no engine here" in run.stdout


def test_without_ci_a_skip_stays_a_skip(tmp_path):
    run = _run(tmp_path, ci=False)
    assert run.returncode == 0 and "2 skipped" in run.stdout, run.stdout
