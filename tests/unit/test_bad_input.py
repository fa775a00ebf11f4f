"""Bad input is refused before any work starts: exit code 2 and one line naming the input.

The real command runs with DOCKER_HOST pointing nowhere, so a check that came after connecting to
an engine would show up as "no Docker engine answers" instead of the expected message.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

DIGEST = "sha256:" + "a" * 64
V = ("--version", "24.09")
B = ("-b", "python")


def _cases(tmp: Path) -> list[tuple[tuple[str, ...], str]]:
    (tmp / "busy").mkdir()
    (tmp / "busy" / "Dockerfile").write_text("mine\n")
    (tmp / "afile").write_text("x")
    (tmp / "req-with-option.txt").write_text("six\n--index-url https://x.example/simple\n")
    (tmp / "broken.yaml").write_text('version: "24.09"\nbackends: [python\n')
    (tmp / "deep.yaml").write_text("a: " + "[" * 20000 + "]" * 20000 + "\n")
    (tmp / "big.yaml").write_text("# " + "x" * (1 << 21) + "\n")
    (tmp / "one.yaml").write_text('version: "24.09"\nbackends: [python]\n')
    (tmp / "two.yaml").write_text('version: "24.09"\nbackends: [python]\n')
    (tmp / "nover.yaml").write_text('backends: [python]\n')
    (tmp / "badkey.yaml").write_text('version: "24.09"\nbackends: [python]\nlabels: {"bad key": x}\n')
    one, two = str(tmp / "one.yaml"), str(tmp / "two.yaml")
    return [
        # releases and images
        (("build", "--version", "24.9", *B), "--version 24.9: '24.9' is not a release"),
        (("build", "--version", "99.99", *B), "unknown Triton release '99.99'"),
        (("build", *B), "give --version YY.MM"),
        (("build", *V), "select at least one backend"),
        (("build", *V, *B, "--image", "fulll=x"), "--image fulll=x: takes full=REF or min=REF"),
        (("build", *V, *B, "--image", "full"), "--image full: takes NAME=VALUE"),
        (("build", *V, *B, "--image", "full=::bad::"), "--image full=::bad::: not a valid image reference"),
        (("build", *V, *B, "--image", "min=x y"), "not a valid image reference"),
        (("build", *V, *B, "--image", "full=x/UPPER:1"), "not a valid image reference"),
        (("build", *V, *B, "--registry", "x\nRUN echo pwned"), "--registry x\\nRUN echo pwned: not a valid registry prefix"),
        (("build", *V, *B, "--registry", "Bad Prefix"), "not a valid registry prefix"),
        (("build", *V, *B, "--registry", f"h/x@{DIGEST}"), "not a valid registry prefix"),
        (("build", *V, *B, "--registry", ""), "--registry"),
        # selection
        (("build", *V, "-b", "a b"), "--backend a b: 'a b' is not a name"),
        (("build", *V, "-b", "python", "-b", "python"), "'python' is listed twice"),
        (("build", *V, *B, "--repoagent", "bad name"), "--repoagent bad name: 'bad name' is not a name"),
        (("build", *V, *B, "--cache", "-x"), "is not a name"),
        (("build", *V, *B, "--custom-backend", "x=/nonexistent"), "--custom-backend x=/nonexistent: no such folder"),
        (("build", *V, *B, "--custom-backend", "=dir"), "takes NAME=VALUE"),
        (("build", *V, *B, "--custom-backend", "bad name=/tmp"), "'bad name' is not a name"),
        (("build", *V, *B, "--backend-image", "pytorch=::bad::"), "--backend-image pytorch=::bad::: not a valid image"),
        (("build", *V, *B, "--backend-image", "noequals"), "--backend-image noequals: takes NAME=VALUE"),
        # result
        (("build", *V, *B, "--tag", "Bad Tag"), "--tag Bad Tag: not a valid image reference"),
        (("build", *V, *B, "--tag", "x:y:z"), "--tag x:y:z: not a valid image reference"),
        (("build", *V, *B, "--tag", "x:"), "--tag x:: not a valid image reference"),
        (("build", *V, *B, "--tag", "a" * 300), "not a valid image reference"),
        (("build", *V, *B, "--push", "Bad Ref"), "--push Bad Ref: not a valid image reference"),
        (("build", *V, *B, "--push", f"r.example/t@{DIGEST}"), "names a digest"),
        (("build", *V, *B, "--label", "bad key=v"), "'bad key' is not a label key"),
        (("build", *V, *B, "--label", "novalue"), "--label novalue: takes NAME=VALUE"),
        (("build", *V, *B, "--label", "org.opencontainers.image.created=x"), "is set by the composer itself"),
        (("build", *V, *B, "--label", "k=a\nb"), "a label value is one line"),
        (("build", *V, *B, "--model-repository", "/nonexistent"), "--model-repository /nonexistent: no such folder"),
        (("build", *V, *B, "--model-repository", str(tmp / "afile")), "no such folder"),
        (("build", *V, *B, "--gpus", "lots"), "--gpus lots: 'lots' is not a GPU request"),
        (("build", *V, *B, "--gpus", "0"), "is not a GPU request"),
        (("build", *V, *B, "--junit", "/proc/x.xml"), "--junit /proc/x.xml: cannot be written"),
        (("build", *V, *B, "--junit", str(tmp)), "is a folder"),
        # packages
        (("build", *V, *B, "--pip", "--extra-index-url=https://u:tok@x.example"), "are not packages"),
        (("build", *V, *B, "--pip", "-r other.txt"), "pip options (-r) are not packages"),
        (("build", *V, *B, "--requirements", "/nonexistent.txt"), "--requirements /nonexistent.txt: no such file"),
        (("build", *V, *B, "-r", str(tmp / "req-with-option.txt")), "req-with-option.txt:2: pip options (--index-url)"),
        (("build", *V, *B, "--pip", "six", "--pip-index-url", "ftp://x"), "--pip-index-url ftp://x: 'ftp://x' is not an http(s) URL"),
        (("build", *V, *B, "--pip", "six", "--pip-index-url", "https://u:tok@bad host/s"), "https://***@bad host/s"),
        (("build", *V, *B, "--pip", "six", "--pip-extra-index-url", "notaurl"), "is not an http(s) URL"),
        (("build", *V, *B, "--pip", "six", "--pip-trusted-host", "bad host"), "'bad host' is not a host name"),
        (("build", *V, *B, "--pip", "six", "--wheelhouse", "/nonexistent"), "--wheelhouse /nonexistent: no such folder"),
        (("build", *V, *B, "--wheelhouse", str(tmp)), "package sources were given but no package"),
        (("build", *V, *B, "--pip", "six", "--ca-cert", "/nonexistent.pem"), "--ca-cert /nonexistent.pem: no such file"),
        # run options
        (("build", "--set", "nope.yaml"), "nope.yaml: no such set file"),
        (("build", "--set", "onnx-pyton"), "unknown backend set 'onnx-pyton' (did you mean 'onnx-python'?)"),
        (("build", "--set", str(tmp / "broken.yaml")), "broken.yaml:3: invalid YAML"),
        (("build", "--set", str(tmp / "deep.yaml")), "deep.yaml:1:"),
        (("build", "--set", str(tmp / "big.yaml")), "a set file is at most"),
        (("build", "--set", str(tmp / "nover.yaml")), "nover.yaml:1: version: missing"),
        (("build", "--set", str(tmp / "badkey.yaml")), "badkey.yaml:3: labels: 'bad key' is not a label key"),
        (("build", "--set", one, "--set", two, "--tag", "a/b:1"), "--tag and --push name one image"),
        (("build", *V, *B, "--locked"), "--locked needs a backend set"),
        (("build", "--bundle", "/nonexistent.tar"), "--bundle /nonexistent.tar: no such file"),
        (("build", "--bundle", str(tmp / "afile"), *B), "--bundle carries its own selection"),
        (("build", *V, *B, "--registry-auth", "file:/nonexistent"), "cannot read the credentials file /nonexistent"),
        (("build", *V, *B, "--registry-auth", "env:COMPOSER_TEST_UNSET_VARIABLE"), "COMPOSER_TEST_UNSET_VARIABLE is not set"),
        (("build", *V, *B, "--registry-auth", "bogus:xx"), "registry credentials are given as file:PATH or env:NAME"),
        (("build", *V, *B, "--registry-ca", "/nonexistent.pem"), "--registry-ca /nonexistent.pem: no such file"),
        # render
        (("render", "-o", str(tmp / "busy"), *V, *B, "--offline"), "the folder holds files the composer did not write"),
        (("render", "-o", "/", *V, *B, "--offline"), "-o /: the folder holds files"),
        (("render", "-o", str(tmp / "afile"), *V, *B, "--offline"), "exists and is not a folder"),
        (("render", "-o", str(tmp / "out1"), *V, *B, "--offline", "--pip", "six"), "installed from a wheelhouse"),
        (("render", "-o", str(tmp / "out2"), "--set", one, "--set", two), "composer render takes one --set"),
        (("render", "-o", str(tmp / "out3"), *V, "-b", "nosuch", "--offline"), "unknown backend 'nosuch'"),
        (("render", "-o", str(tmp / "out4"), *V, "-b", "onnx", "--offline"), "(did you mean 'onnxruntime'?)"),
        # other commands
        (("wheels", "-o", str(tmp / "w"), *V), "name the packages with --pip SPEC or --requirements FILE"),
        (("wheels", "-o", str(tmp / "w"), *V, "--pip", "numpy>=2"), None),  # needs the image: engine (not bad input)
        (("bundle", "-o", str(tmp / "b.tar"), *V), "select at least one backend"),
        (("smoke-test", "img:1", "--gpus", "many"), "--gpus many: 'many' is not a GPU request"),
        (("smoke-test", "img:1", "--model-repository", "/nonexistent"), "no such folder"),
        (("mirror", "--version", "24.9", "--to", "x.example/n"), "unknown Triton release '24.9'"),
        (("mirror", *V, "--to", "Bad Prefix"), "'Bad Prefix' is not a valid registry prefix"),
        (("mirror", *V, "--to", "x.example/n", "--registry", "bad prefix"), "is not a valid registry prefix"),
        (("mirror", *V, "--to", "x.example/n", "--registry-ca", "/nonexistent.pem"), "--registry-ca /nonexistent.pem: no such file"),
        (("lock", "--set", "nope.yaml"), "no such set file"),
        (("standin", "--version", "24.9"), "unknown Triton release '24.9'"),
        (("standin", "--scale", "huge"), "--scale 'huge' is not a stand-in scale; use small or ngc"),
        (("standin", "--scale", "ngc", "--version", "25.01"), "no NGC-scale stand-in recipe for release 25.01; releases with one: 24.09"),
        (("backends", "--version", "24.9"), "'24.9' is not a release"),
        (("backends", "--image", "full=::bad::"), "not a valid image reference"),
    ]


def _run(args: tuple[str, ...], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock", "COMPOSER_PIP_INDEX_URL": ""}
    env.pop("COMPOSER_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "composer", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=120)


def test_every_bad_input_is_one_line_and_exit_2(tmp_path):
    cases = [(args, expected) for args, expected in _cases(tmp_path) if expected is not None]
    assert len(cases) >= 60
    with ThreadPoolExecutor(max_workers=4) as pool:
        runs = list(pool.map(lambda case: _run(case[0], tmp_path), cases))
    problems = []
    for (args, expected), run in zip(cases, runs):
        lines = [line for line in run.stderr.splitlines() if line.strip()]
        if run.returncode != 2 or len(lines) != 1 or expected not in lines[0] or not lines[0].startswith("error: "):
            problems.append(f"{args!r}: exit {run.returncode}, stderr {run.stderr!r}")
    assert not problems, "\n".join(problems)
    assert not (tmp_path / "out1").exists() and (tmp_path / "busy" / "Dockerfile").read_text() == "mine\n"
    assert not (tmp_path / "b.tar").exists()


def test_secrets_in_bad_input_are_not_echoed(tmp_path):
    run = _run(("build", *V, *B, "--pip", "six", "--pip-index-url", "https://u:tok-99@bad host/s"), tmp_path)
    assert run.returncode == 2 and "tok-99" not in run.stderr + run.stdout


def test_json_answers_bad_input_too(tmp_path):
    import json

    run = _run(("build", "--version", "24.9", *B, "--json"), tmp_path)
    assert run.returncode == 2
    assert json.loads(run.stdout) == {"error": "--version 24.9: '24.9' is not a release: releases are named YY.MM, "
                                      "e.g. 24.09", "exit_code": 2}


@pytest.mark.parametrize("args", [("--version",), ("version",)])
def test_version(args, tmp_path):
    from composer import __version__

    run = _run(args, tmp_path)
    assert run.returncode == 0 and run.stdout.strip() == __version__


def test_credentials_in_any_url_of_an_error_are_not_echoed(tmp_path):
    for args in [("build", *V, *B, "--pip", "--x=https://u:tok-77@h.example/x"),
                 ("build", *V, *B, "--pip", "six", "--pip-extra-index-url", "https://u:tok-77@bad host/s")]:
        run = _run(args, tmp_path)
        assert run.returncode == 2 and "tok-77" not in run.stderr + run.stdout and "***@" in run.stderr
