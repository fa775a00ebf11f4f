"""The real `composer` command, run as a user would, for the tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def composer(*args: str, env: dict | None = None, cwd: Path | str | None = None,
             timeout: float = 1800) -> subprocess.CompletedProcess:
    """Run `composer ARGS` (this checkout's) with `env` added to this environment."""
    return subprocess.run([sys.executable, "-m", "composer", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=cwd, timeout=timeout)


def image_json(stdout: str) -> dict:
    """The one image of a command's --json answer (build, smoke-test, render...), after checking the
    shape every command answers in: command, exit_code, images (one here), summary."""
    import json

    payload = json.loads(stdout)
    assert {"command", "exit_code", "images", "summary"} <= set(payload), payload
    assert len(payload["images"]) == 1, payload["images"]
    return payload["images"][0]
