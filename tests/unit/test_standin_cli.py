"""triton-standin (the stand-ins' own command, standins/) refuses bad input before any work:
one line on stderr, exit 2, no traceback; --json answers too. The engine is never reached."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def standin(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    env.pop("COMPOSER_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "triton_standins", *args], capture_output=True, text=True,
                          env=env, timeout=120)


@pytest.mark.parametrize("args, says", [
    (("--version", "99.99"), "unknown Triton release '99.99'"),
    (("-v", "24.9"), "unknown Triton release '24.9'"),
    (("--scale", "huge"), "--scale 'huge' is not a stand-in scale; use small or ngc"),
    (("--scale", "ngc", "--version", "25.01"), "no NGC-scale stand-in recipe for release 25.01; releases with one: 24.09"),
    (("--flavour", "vllm"), "--flavour vllm is built at NGC scale only: add --scale ngc"),
    (("--flavour", "trtllm", "--scale", "ngc"), "--flavour 'trtllm' is not a stand-in flavour; use py3 or vllm"),
    (("--versio", "24.09"), "No such option"),
])
def test_bad_input_is_one_line_and_exit_2(args, says):
    run = standin(*args)
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert run.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], run.stderr
    assert "Traceback" not in run.stderr + run.stdout


def test_bad_input_answers_json_too():
    run = standin("--version", "99.99", "--json")
    assert run.returncode == 2 and json.loads(run.stdout)["exit_code"] == 2, run.stdout + run.stderr


def test_the_product_has_no_standin_command_and_no_recipe():
    import composer.cli.main as cli

    names = {getattr(c, "name", None) or c.callback.__name__ for c in cli.app.registered_commands}
    assert "standin" not in names
    with pytest.raises(ModuleNotFoundError):
        __import__("composer.standin")
