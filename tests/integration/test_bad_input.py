"""Bad input is refused before any work starts: exit code 2, one line naming the input, quickly.

A table of cases (command, expected exit code, a phrase the one line must hold, an upper bound on
the time). The real command runs with DOCKER_HOST pointing nowhere, so a check that came after
connecting to an engine would show up as "no Docker engine answers" instead of the expected
message. The file cases (re-render, links) check that every user file is left as it was.
"""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.forked_cli import ForkedCli

pytestmark = pytest.mark.integration

DIGEST = "sha256:" + "a" * 64
V = ("--version", "24.09")
B = ("-b", "python")
BIG = "a" * 100_000  # a 100 KB argument: refused quickly (tests/unit/test_validators.py times the check itself)
TOKEN = "tok-bad-input-5f3a"
STANDIN = "triton-standin"  # a case's first word: the stand-ins' command (python -m triton_standins)


@dataclass(frozen=True)
class Case:
    args: tuple
    exit: int
    says: str | None  # a phrase the one line on stderr must hold (None: the exit code only)
    seconds: float = 20.0  # an upper bound for the whole process, on a machine loaded by builds
    env: dict = field(default_factory=dict)


def C(args, says, exit=2, seconds=20.0, env=None) -> Case:  # noqa: N802 (a table row)
    return Case(tuple(args), exit, says, seconds, env or {})


def _cases(tmp: Path) -> list[Case]:
    (tmp / "busy").mkdir()
    (tmp / "busy" / "Dockerfile").write_text("mine\n")
    (tmp / "afile").write_text("x")
    (tmp / "tls").mkdir()
    for name in ("ca.crt", "tls.crt", "tls.key"):
        (tmp / "tls" / name).write_text("x")
    (tmp / "req-with-option.txt").write_text("six\n--index-url https://x.example/simple\n")
    (tmp / "broken.yaml").write_text('version: "24.09"\nbackends: [python\n')
    (tmp / "deep.yaml").write_text("a: " + "[" * 20000 + "]" * 20000 + "\n")
    (tmp / "big.yaml").write_text("# " + "x" * (1 << 21) + "\n")
    (tmp / "one.yaml").write_text('version: "24.09"\nbackends: [python]\n')
    (tmp / "two.yaml").write_text('version: "24.09"\nbackends: [python]\n')
    (tmp / "nover.yaml").write_text('backends: [python]\n')
    (tmp / "badkey.yaml").write_text('version: "24.09"\nbackends: [python]\nlabels: {"bad key": x}\n')
    (tmp / "req.txt").write_text("six\n")
    (tmp / "req-bad-line.txt").write_text("six\nnot a requirement!\n")
    for name, config, requirements in (("named", "", "six\n"), ("pointed", 'parameters: { key: "EXECUTION_ENV_PATH" }\n', "six\n"),
                                       ("badreq", "", "six==\n")):
        (tmp / f"repo-{name}" / "m").mkdir(parents=True)
        (tmp / f"repo-{name}" / "m" / "config.pbtxt").write_text('backend: "python"\n' + config)
        (tmp / f"repo-{name}" / "m" / "requirements.txt").write_text(requirements)
    for name, config in (("junk", b"\x89PNG\r\n\x1a\n\xff\xfe\x00\x00"), ("braces", b"{{{ not a config"),
                         ("open", b'backend: "python"\ninput [ { name: "X" data_type: TYPE_FP32 \n'),
                         ("nul", b'backend: "python"\x00\n')):
        (tmp / f"repo-{name}" / "m").mkdir(parents=True)
        (tmp / f"repo-{name}" / "m" / "config.pbtxt").write_bytes(config)
    for name, model, config in (
            ("trt", "fast", 'platform: "onnxruntime_onnx"\noptimization { execution_accelerators { '
             'gpu_execution_accelerator : [ { name : "tensorrt" } ] } }\n'),
            ("gpu", "on_gpu", 'platform: "onnxruntime_onnx"\ninstance_group [ { kind: KIND_GPU } ]\n'),
            ("plan", "engine", 'platform: "tensorrt_plan"\n')):
        (tmp / f"repo-{name}" / model).mkdir(parents=True)
        (tmp / f"repo-{name}" / model / "config.pbtxt").write_text(config)
    _keys(tmp)
    one, two = str(tmp / "one.yaml"), str(tmp / "two.yaml")
    files = _files(tmp)
    return _new_cases(tmp, files, one) + [
        # releases and images
        C(("build", "--version", "24.9", *B), "--version 24.9: '24.9' is not a release"),
        C(("build", "--version", "99.99", *B), "unknown Triton release '99.99'"),
        C(("build", *B), "give --version YY.MM"),
        C(("build", *V), "select at least one backend"),
        C(("build", *V, *B, "--image", "fulll=x"), "--image fulll=x: takes full=REF or min=REF"),
        C(("build", *V, *B, "--image", "full"), "--image full: takes NAME=VALUE"),
        C(("build", *V, *B, "--image", "full=::bad::"), "--image full=::bad::: not a valid image reference"),
        C(("build", *V, *B, "--image", "min=x y"), "not a valid image reference"),
        C(("build", *V, *B, "--image", "full=x/UPPER:1"), "not a valid image reference"),
        C(("build", *V, *B, "--registry", "x\nRUN echo pwned"), "--registry x\\nRUN echo pwned: not a valid registry prefix"),
        C(("build", *V, *B, "--registry", "Bad Prefix"), "not a valid registry prefix"),
        C(("build", *V, *B, "--registry", f"h/x@{DIGEST}"), "not a valid registry prefix"),
        C(("build", *V, *B, "--registry", ""), "--registry"),
        # selection
        C(("build", *V, "-b", "a b"), "--backend a b: 'a b' is not a name"),
        C(("build", *V, "-b", "python", "-b", "python"), "'python' is listed twice"),
        C(("build", *V, *B, "--repoagent", "bad name"), "--repoagent bad name: 'bad name' is not a name"),
        C(("build", *V, *B, "--cache", "-x"), "is not a name"),
        C(("build", *V, *B, "--custom-backend", "x=/nonexistent"), "--custom-backend x=/nonexistent: no such folder"),
        C(("build", *V, *B, "--custom-backend", "=dir"), "takes NAME=VALUE"),
        C(("build", *V, *B, "--custom-backend", "bad name=/tmp"), "'bad name' is not a name"),
        C(("build", *V, *B, "--backend-image", "pytorch=::bad::"), "--backend-image pytorch=::bad::: not a valid image"),
        C(("build", *V, *B, "--backend-image", "noequals"), "--backend-image noequals: takes NAME=VALUE"),
        # devices and ONNX Runtime's providers (issue 27)
        C(("build", *V, "-b", "onnxruntime", "-b", "tensorrt", "--device", "cpu"),
          "--device cpu -b tensorrt: the tensorrt backend runs only on a GPU"),
        C(("build", *V, *B, "--device", "cpu", "--base", "min"), "--device cpu needs a pruned base"),
        C(("build", *V, *B, "--device", "cpu", "--gpus", "all"), "--device cpu --gpus all: a CPU-only image"),
        C(("build", *V, *B, "--device", "cpu", "--strict"), "--device cpu --strict: --strict is for GPU images"),
        C(("build", *V, "-b", "onnxruntime", "--device", "cpu", "--ort-provider", "cuda"),
          "--device cpu --ort-provider cuda: a CPU-only image keeps only ONNX Runtime's CPU provider"),
        C(("build", *V, *B, "--device", "tpu"), "--device tpu: 'tpu' is not a device"),
        # flavours (issue 28)
        C(("build", *V, "-b", "vllm", "--flavour", "trtllm"),
          "--flavour trtllm: the trtllm flavour is not yet supported: TensorRT-LLM cannot be installed here"),
        C(("build", *V, *B, "--flavour", "llm"), "--flavour llm: 'llm' is not a flavour; flavours: py3, vllm"),
        C(("build", *V, "-b", "onnxruntime", "--ort-provider", "shared"), "'shared' is not an execution provider"),
        C(("build", *V, "-b", "onnxruntime", "--ort-provider", "cuda", "--model-repository", f"{tmp}/repo-trt"),
          "model fast asks for the tensorrt execution accelerator, whose ONNX Runtime provider this image leaves out"),
        C(("build", *V, "-b", "onnxruntime", "--device", "cpu", "--model-repository", f"{tmp}/repo-gpu"),
          "model on_gpu asks for a KIND_GPU instance group: a CPU-only image has no GPU"),
        C(("build", *V, "-b", "onnxruntime", "--device", "cpu", "--bake-models", f"{tmp}/repo-plan"),
          "--bake-models"),
        # result
        C(("build", *V, *B, "--tag", "Bad Tag"), "--tag Bad Tag: not a valid image reference"),
        C(("build", *V, *B, "--tag", "x:y:z"), "--tag x:y:z: not a valid image reference"),
        C(("build", *V, *B, "--tag", "x:"), "--tag x:: not a valid image reference"),
        C(("build", *V, *B, "--tag", "a" * 300), "not a valid image reference"),
        C(("build", *V, *B, "--push", "Bad Ref"), "--push Bad Ref: not a valid image reference"),
        C(("build", *V, *B, "--push", f"r.example/t@{DIGEST}"), "names a digest"),
        C(("build", *V, *B, "--label", "bad key=v"), "'bad key' is not a label key"),
        C(("build", *V, *B, "--label", "novalue"), "--label novalue: takes NAME=VALUE"),
        C(("build", *V, *B, "--label", "org.opencontainers.image.created=x"), "is set by the composer itself"),
        C(("build", *V, *B, "--label", "k=a\nb"), "a label value is one line"),
        C(("build", *V, *B, "--model-repository", "/nonexistent"), "--model-repository /nonexistent: no such folder"),
        C(("build", *V, *B, "--model-repository", str(tmp / "afile")), "not a folder"),
        C(("build", *V, *B, "--gpus", "lots"), "--gpus lots: 'lots' is not a GPU request"),
        C(("build", *V, *B, "--base", "slim"), "--base slim: 'slim' is not a base: give min"),
        C(("build", *V, *B, "--keep-tensorrt-builder"), "--keep-tensorrt-builder applies to a pruned base"),
        C(("build", *V, *B, "--explain"), "--explain lists what a pruned base keeps and drops: add --base pruned"),
        C(("build", *V, *B, "--builder", "buildkit://ftp://x"), "is not a builder: give engine, buildkit"),
        C(("build", *V, *B, "--builder", "engine", "--builder", "engine"), "'engine' is listed twice"),
        C(("build", *V, *B, "--builder", "buildkit://tcp://127.0.0.1:1234", "--builder-tls", str(tmp)),
          "holds neither ca.pem, cert.pem and key.pem nor ca.crt, tls.crt and tls.key"),
        C(("build", *V, *B, "--builder-tls", str(tmp / "tls")), "--builder-tls is for a BuildKit at tcp://"),
        C(("build", *V, *B, "--compression", "brotli"), "'brotli' is not a compression: give gzip, zstd, estargz"),
        C(("build", *V, *B, "--gpus", "0"), "is not a GPU request"),
        C(("build", *V, *B, "--junit", "/proc/x.xml"), "--junit /proc/x.xml: cannot be written"),
        C(("build", *V, *B, "--junit", str(tmp)), "is a folder"),
        # model environments
        C(("build", *V, *B, "--model-env", "m"), "--model-env m: takes NAME=VALUE"),
        C(("build", *V, *B, "--model-env", "m=/nonexistent.txt"), "no such file /nonexistent.txt"),
        C(("build", *V, *B, "--model-env", f"bad name={tmp / 'req.txt'}"), "'bad name' is not a name"),
        C(("build", *V, *B, "--model-env", f"m={tmp / 'req-with-option.txt'}"), "pip options (--index-url) go on the command line"),
        C(("build", *V, *B, "--model-env", f"m={tmp / 'req-bad-line.txt'}"), "req-bad-line.txt:2: 'not a requirement!' is not a pip requirement"),
        C(("build", *V, *B, "--model-env", f"m={tmp / 'req.txt'}", "--model-env", f"m={tmp / 'req.txt'}"), "--model-env m is given twice"),
        C(("build", *V, "-b", "onnxruntime", "--model-env", f"m={tmp / 'req.txt'}"), "select --backend python too"),
        C(("build", *V, *B, "--bake-models", str(tmp / "repo-named"), "--model-env", f"m={tmp / 'req.txt'}"),
          "the baked model m carries its own requirements.txt"),
        C(("build", *V, *B, "--bake-models", str(tmp / "repo-pointed")), "its config.pbtxt already sets EXECUTION_ENV_PATH"),
        C(("build", *V, *B, "--bake-models", str(tmp / "repo-badreq")), "requirements.txt:1: 'six==' is not a pip requirement"),
        C(("bundle", "-o", str(tmp / "envs.tar"), *V, *B, "--bake-models", str(tmp / "repo-named")),
          "bundles do not carry yet"),
        # a model's config.pbtxt that is not protobuf text format: the model folder and file named
        C(("render", "-o", str(tmp / "cfg1"), *V, *B, "--offline", "--bake-models", str(tmp / "repo-braces")),
          f"{tmp}/repo-braces/m/config.pbtxt:1: not a model configuration in protobuf text format"),
        C(("render", "-o", str(tmp / "cfg2"), *V, *B, "--offline", "--bake-models", str(tmp / "repo-junk")),
          f"the model configuration {tmp}/repo-junk/m/config.pbtxt is not UTF-8 text"),
        C(("build", *V, *B, "--bake-models", str(tmp / "repo-open")), "repo-open/m/config.pbtxt:2:"),
        C(("build", *V, *B, "--bake-models", str(tmp / "repo-nul")), "repo-nul/m/config.pbtxt:1: not a model"),
        C(("build", *V, *B, "--model-repository", str(tmp / "repo-braces")),
          f"--model-repository {tmp}/repo-braces: {tmp}/repo-braces/m/config.pbtxt:1:"),
        C(("smoke-test", "img:1", "--model-repository", str(tmp / "repo-junk")), "config.pbtxt is not UTF-8 text"),
        # packages
        C(("build", *V, *B, "--pip", "--extra-index-url=https://u:tok@x.example"), "are not packages"),
        C(("build", *V, *B, "--pip", "-r other.txt"), "pip options (-r) are not packages"),
        C(("build", *V, *B, "--requirements", "/nonexistent.txt"), "--requirements /nonexistent.txt: no such file"),
        C(("build", *V, *B, "-r", str(tmp / "req-with-option.txt")), "req-with-option.txt:2: pip options (--index-url)"),
        C(("build", *V, *B, "--pip", "six", "--pip-index-url", "ftp://x"), "--pip-index-url ftp://x: 'ftp://x' is not an http(s) URL"),
        C(("build", *V, *B, "--pip", "six", "--pip-index-url", "https://u:tok@bad host/s"), "https://***@bad host/s"),
        C(("build", *V, *B, "--pip", "six", "--pip-extra-index-url", "notaurl"), "is not an http(s) URL"),
        C(("build", *V, *B, "--pip", "six", "--pip-trusted-host", "bad host"), "'bad host' is not a host name"),
        C(("build", *V, *B, "--pip", "six", "--wheelhouse", "/nonexistent"), "--wheelhouse /nonexistent: no such folder"),
        C(("build", *V, *B, "--wheelhouse", str(tmp)), "package sources were given but no package"),
        C(("build", *V, *B, "--pip", "six", "--ca-cert", "/nonexistent.pem"), "--ca-cert /nonexistent.pem: no such file"),
        # run options
        C(("build", "--set", "nope.yaml"), "nope.yaml: no such set file"),
        C(("build", "--set", "onnx-pyton"), "unknown backend set 'onnx-pyton' (did you mean 'onnx-python'?)"),
        C(("build", "--set", str(tmp / "broken.yaml")), "broken.yaml:3: invalid YAML"),
        C(("build", "--set", str(tmp / "deep.yaml")), "deep.yaml:1:"),
        C(("build", "--set", str(tmp / "big.yaml")), "a set file is at most"),
        C(("build", "--set", str(tmp / "nover.yaml")), "nover.yaml:1: version: missing"),
        C(("build", "--set", str(tmp / "badkey.yaml")), "badkey.yaml:3: labels: 'bad key' is not a label key"),
        C(("build", "--set", one, "--set", two, "--tag", "a/b:1"), "--tag and --push name one image"),
        C(("build", *V, *B, "--locked"), "--locked needs a backend set"),
        C(("build", "--bundle", "/nonexistent.tar"), "--bundle /nonexistent.tar: no such file"),
        C(("build", "--bundle", str(tmp / "afile"), *B), "--bundle carries its own selection"),
        C(("build", *V, *B, "--registry-auth", "file:/nonexistent"), "cannot read the credentials file /nonexistent"),
        C(("build", *V, *B, "--registry-auth", "env:COMPOSER_TEST_UNSET_VARIABLE"), "COMPOSER_TEST_UNSET_VARIABLE is not set"),
        C(("build", *V, *B, "--registry-auth", "bogus:xx"), "registry credentials are given as file:PATH or env:NAME"),
        C(("build", *V, *B, "--registry-ca", "/nonexistent.pem"), "--registry-ca /nonexistent.pem: no such file"),
        # render
        C(("render", "-o", str(tmp / "busy"), *V, *B, "--offline"), "the folder holds files the composer did not write"),
        C(("render", "-o", "/", *V, *B, "--offline"), "-o /: the folder holds files"),
        C(("render", "-o", str(tmp / "afile"), *V, *B, "--offline"), "exists and is not a folder"),
        C(("render", "-o", str(tmp / "out1"), *V, *B, "--offline", "--pip", "six"), "installed from a wheelhouse"),
        C(("render", "-o", str(tmp / "out2"), "--set", one, "--set", two), "composer render takes one --set"),
        C(("render", "-o", str(tmp / "out3"), *V, "-b", "nosuch", "--offline"), "unknown backend 'nosuch'"),
        C(("render", "-o", str(tmp / "out4"), *V, "-b", "onnx", "--offline"), "(did you mean 'onnxruntime'?)"),
        # other commands
        C(("wheels", "-o", str(tmp / "w"), *V), "name the packages with --pip SPEC or --requirements FILE"),
        C(("wheels", "-o", str(tmp / "w"), *V, "--pip", "numpy>=2"), "no Docker engine answers", exit=1),  # good input
        C(("bundle", "-o", str(tmp / "b.tar"), *V), "select at least one backend"),
        C(("smoke-test", "img:1", "--gpus", "many"), "--gpus many: 'many' is not a GPU request"),
        C(("smoke-test", "img:1", "--model-repository", "/nonexistent"), "no such folder"),
        C(("mirror", "--version", "24.9", "--to", "x.example/n"), "--version 24.9: '24.9' is not a release"),
        C(("mirror", *V, "--to", "Bad Prefix"), "--to Bad Prefix: not a valid registry prefix"),
        C(("mirror", *V, "--to", "x.example/n", "--to-engine", "--compression", "estargz"),
          "--to-engine --compression estargz: the engine pushes as it compresses"),
        C(("cache", "list", "--builder", "engine"), "--builder engine: the engine's own cache"),
        C(("cache", "clear", "--builder", "tcp://x:1"), "is not a builder"),
        C(("mirror", *V, "--registry", "localhost/standin", "--to", "localhost/standin/"),
          "is the registry it copies from (--registry localhost/standin): give another prefix to copy into"),
        C(("mirror", *V), "--to is required: the registry prefix to copy into"),
        C(("render", "--offline", "-o", str(tmp / "out-offline"), *V, "-b", "onnxruntime", "--ort-provider", "cudaa"),
          "--ort-provider cudaa: unknown ONNX Runtime provider 'cudaa' (did you mean 'cuda'?)"),
        C(("build", "--set", "/proc/self/mem"), "--set: cannot read the set file /proc/self/mem"),
        C(("mirror", *V, "--to", "x.example/n", "--registry", "bad prefix"), "--registry bad prefix: not a valid registry prefix"),
        C(("mirror", *V, "--to", "x.example/n", "--registry-ca", "/nonexistent.pem"), "--registry-ca /nonexistent.pem: no such file"),
        C(("lock", "--set", "nope.yaml"), "no such set file"),
        # the stand-ins' own command (standins/), and the product, which has none
        C((STANDIN, "--version", "24.9"), "unknown Triton release '24.9'"),
        C((STANDIN, "--scale", "huge"), "--scale 'huge' is not a stand-in scale; use small or ngc"),
        C((STANDIN, "--scale", "ngc", "--version", "25.01"), "no NGC-scale stand-in recipe for release 25.01; releases with one: 24.09"),
        C(("standin", "--version", "24.09"), "No such command 'standin'"),
        C(("backends", "--version", "24.9"), "'24.9' is not a release"),
        C(("backends", "--image", "full=::bad::"), "not a valid image reference"),
    ]


def _files(tmp: Path) -> dict[str, str]:
    """The bad files of the table: special files, bombs, loops, archives."""
    f = {}
    os.mkfifo(tmp / "fifo")
    f["fifo"] = str(tmp / "fifo")
    (tmp / "bomb.yaml").write_text("a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(5)))
    f["bomb"] = str(tmp / "bomb.yaml")
    (tmp / "cases-bomb.yaml").write_text((tmp / "bomb.yaml").read_text())
    (tmp / "deep-cases.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp / "mixed.yaml").write_text('version: "24.09"\nbackends: [python]\nlabels: {1: a, b: c}\n')
    (tmp / "mixed-cases.yaml").write_text("cases: [{model: m, 1: x, inputs: [], expected: []}]\n")
    (tmp / "deep-auth.json").write_text("[" * 30_000 + "]" * 30_000)
    (tmp / "loop-models" / "m").mkdir(parents=True)
    (tmp / "loop-models" / "m" / "config.pbtxt").write_text('name: "m"\n')
    (tmp / "loop-models" / "m" / "up").symlink_to(tmp / "loop-models")
    (tmp / "self-loop").symlink_to(tmp / "self-loop")
    (tmp / "backend-with-fifo").mkdir()
    os.mkfifo(tmp / "backend-with-fifo" / "pipe")
    (tmp / "reqs-url.txt").write_text(f"--find-links https://u:{TOKEN}@h.example/links\n")
    (tmp / "reqs-bad.txt").write_text("six\nnumpy>>>=2\n")
    f["long"] = str(tmp / ("n" * 300))
    with socket.socket(socket.AF_UNIX) as listening:  # the file stays, a socket no one listens on
        listening.bind(str(tmp / "sock"))
    f["sock"] = str(tmp / "sock")
    # bundle archives: truncated, no manifest, a manifest of the wrong shape, a member leaving the tree
    good = io.BytesIO()
    with tarfile.open(fileobj=good, mode="w") as tar:
        _add(tar, "bundle.json", json.dumps({"format": 1, "spec": [], "inspection": "x"}).encode())
        _add(tar, "images.tar", b"x" * 4096)
    (tmp / "truncated.tar").write_bytes(good.getvalue()[:700])
    (tmp / "shape.tar").write_bytes(good.getvalue())
    for name, member in (("nomanifest.tar", "other.txt"), ("escape.tar", "../escape.txt")):
        with tarfile.open(tmp / name, "w") as tar:
            _add(tar, member, b"x")
    (tmp / "lockless.yaml").write_text('version: "24.09"\nbackends: [python]\n')
    (tmp / "garbage.yaml").write_text('version: "24.09"\nbackends: [python]\n')
    (tmp / "garbage.lock.yaml").write_text("{{{\n")
    (tmp / "theirs.yaml").write_text('version: "24.09"\nbackends: [python]\n')
    (tmp / "theirs.lock.yaml").write_text("my own notes\n")
    (tmp / "user.tar").write_text("not a bundle: the user's own file\n")
    return f


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _new_cases(tmp: Path, f: dict[str, str], one: str) -> list[Case]:
    """The categories of issue 15: each is refused with one line, exit 2, quickly."""
    t = str(tmp)
    return [
        # paths: length, type, loops, special files
        C(("build", *V, *B, "--model-repository", f["long"]), "longer than the system allows"),
        C(("build", *V, *B, "--ca-cert", f["long"], "--pip", "six"), "longer than the system allows"),
        C(("build", "--set", f["long"] + ".yaml"), "longer than the system allows"),
        C(("render", "-o", f["long"], *V, *B, "--offline"), "longer than the system allows"),
        C(("build", *V, *B, "--junit", f["long"] + ".xml"), "longer than the system allows"),
        C(("build", *V, *B, "--pip", "six", "--wheelhouse", f["long"]), "longer than the system allows"),
        C(("build", *V, *B, "--registry-auth", "file:" + f["long"]), "longer than the system allows"),
        C(("build", "--bundle", f["long"]), "longer than the system allows"),
        C(("mirror", *V, "--to", "x.example/n", "--registry-ca", f["long"]), "longer than the system allows"),
        C(("build", *V, *B, "--model-repository", f"{t}/self-loop"), "symbolic links loop"),
        C(("build", *V, *B, "--model-repository", f"{t}/loop-models"), "symbolic links loop"),
        C(("build", *V, *B, "--custom-backend", f"mine={t}/backend-with-fifo"), "not a regular file"),
        C(("build", *V, *B, "--smoke-cases", f["fifo"]), "not a regular file"),
        C(("build", *V, *B, "--ca-cert", "/dev/zero", "--pip", "six"), "not a regular file"),
        # structured files: size, depth, alias expansion, regular files, keys as strings
        C(("build", "--set", f["bomb"]), "aliases expand", seconds=10),
        C(("build", *V, *B, "--smoke-cases", f"{t}/cases-bomb.yaml"), "aliases expand", seconds=10),
        C(("build", *V, *B, "--smoke-cases", f"{t}/deep-cases.json"), "nested deeper"),
        C(("build", "--set", f"{t}/mixed.yaml"), "mixed.yaml:3"),
        C(("build", *V, *B, "--smoke-cases", f"{t}/mixed-cases.yaml"), "is not a string"),
        C(("build", "--set", f["fifo"]), "not a regular file", seconds=10),
        C(("build", "--set", "/dev/zero"), "not a regular file"),
        C(("build", *V, *B, "--registry-auth", f"file:{f['fifo']}"), "not a regular file", seconds=10),
        C(("build", *V, *B, "--registry-auth", "file:/dev/zero"), "not a regular file", seconds=10),
        C(("build", *V, *B, "--registry-auth", f"file:{t}/deep-auth.json"), "holds neither user:password"),
        # a folder or a special file where a structured file is read: the flag, the path and what it is
        C(("build", "--set", t), f"--set: the set file {t} is a folder, not a regular file"),
        C(("lock", "--set", t), f"--set: the set file {t} is a folder, not a regular file"),
        C(("build", "--set", f["sock"]), "is a socket, not a regular file"),
        C(("build", "--set", f["fifo"]), "is a FIFO, not a regular file", seconds=10),
        C(("build", "--set", "/dev/zero"), "--set: the set file /dev/zero is a character device, not a regular file"),
        C(("build", *V, *B, "--registry-auth", f"file:{t}"),
          f"--registry-auth: the credentials file {t} is a folder, not a regular file"),
        C(("build", *V, *B, "--registry-auth", f"file:{f['sock']}"), "--registry-auth: the credentials file"),
        C(("build", *V, *B, "--registry-auth", f"file:{f['fifo']}"), "is a FIFO, not a regular file", seconds=10),
        C(("inspect", "h.example/t:1", "--registry-auth", f"file:{t}"), "--registry-auth: the credentials file"),
        C(("mirror", *V, "--to", "x.example/n", "--source-auth", f"file:{t}"),
          f"--source-auth: the credentials file {t} is a folder"),
        # numbers: ASCII digits and range
        C(("build", *V, *B, "--gpus", "\u0663"), "is not a GPU request"),
        C(("build", *V, *B, "--gpus", "\u00b2"), "is not a GPU request"),
        C(("build", *V, *B, "--gpus", "99999999999999999999999"), "is not a GPU request"),
        C(("smoke-test", "img:1", "--gpus", "-1"), "is not a GPU request"),
        C(("render", "-o", f"{t}/epoch1", *V, *B, "--offline"), "SOURCE_DATE_EPOCH", env={"SOURCE_DATE_EPOCH": "\u0661\u0662"}),
        C(("render", "-o", f"{t}/epoch2", *V, *B, "--offline"), "out of range", env={"SOURCE_DATE_EPOCH": "9" * 18}),
        C(("build", *V, *B), "SOURCE_DATE_EPOCH", env={"SOURCE_DATE_EPOCH": "-5"}),
        # references, tags, labels: Docker's ASCII grammar, OCI label rules, a size limit
        C(("build", *V, *B, "--tag", "triton:\u00e9t\u00e9"), "outside ASCII"),
        C(("build", *V, *B, "--tag", "tr\u00eften:1"), "outside ASCII"),
        C(("build", *V, *B, "--push", "r.example/x:\u0661"), "outside ASCII"),
        C(("build", *V, *B, "--label", "a\nb=c"), "is not a label key"),
        C(("build", *V, *B, "--label", f"k={BIG}"), "at most 4096 characters", seconds=10),
        C(("build", *V, *B, "--label", f"{BIG}=v"), "is not a label key", seconds=10),
        C(("build", *V, *B, "--custom-backend", f"a\nb={t}"), "is not a name"),
        C(("build", *V, "-b", "py\nthon"), "is not a name"),
        C(("smoke-test", "Bad Image"), "IMAGE Bad Image: not a valid image reference"),
        C(("smoke-test", "img:\u00e9"), "outside ASCII"),
        C(("smoke-test", "img:1", "--backend", "a b"), "is not a name"),
        # requirements: pip's grammar
        C(("render", "-o", f"{t}/r1", *V, *B, "--offline", "--pip", "!!!"), "is not a pip requirement"),
        C(("render", "-o", f"{t}/r2", *V, *B, "--offline", "--pip", "numpy>>>=2"), "is not a pip requirement"),
        C(("build", *V, *B, "-r", f"{t}/reqs-bad.txt"), "reqs-bad.txt:2: 'numpy>>>=2' is not a pip requirement"),
        C(("build", *V, *B, "-r", "/proc/self/environ"), "not a regular file"),
        C(("build", *V, *B, "-r", f["fifo"]), "not a regular file", seconds=10),
        C(("build", *V, *B, "-r", "/dev/zero"), "not a regular file"),
        C(("build", *V, *B, "-r", f"{t}/reqs-url.txt"), "pip options (--find-links) go on the command line"),
        C(("build", *V, *B, "--pip", "https://h.example/not-a-wheel.tar.gz"), "give NAME @ URL"),
        C(("build", *V, *B, "--pip", BIG), "at most 4096 characters", seconds=10),
        C(("build", *V, *B, "--pip", "x" * 4000 + "://"), "give NAME @ URL", seconds=10),
        C(("build", *V, *B, "--pip", "six", "--pip-index-url", "https://x" + "a" * 100_000), "at most 4096",
          seconds=10),
        C(("build", *V, *B, "--pip", "six", "--pip-extra-index-url", "a" * 4000 + "://"), "not an http(s) URL",
          seconds=10),
        # a custom backend named like a selected NGC backend
        C(("build", *V, *B, "--custom-backend", f"python={t}/busy"), "leave out --backend python"),
        C(("build", *V, "-b", "onnxruntime", "--backend-image", "onnxruntime=r.example/t:1"), "name one backend twice"),
        # a single-valued option given twice with different values
        C(("build", "--version", "24.09", "--version", "24.10", *B), "--version is given twice"),
        C(("build", *V, *B, "--tag", "a:1", "-t", "a:2"), "is given twice"),
        C(("render", "-o", f"{t}/x1", "-o", f"{t}/x2", *V, *B, "--offline"), "is given twice"),
        # ... and so is the same KEY of a KEY=VALUE option (--image full=, --label k=, ...)
        C(("build", *V, *B, "--image", "full=a:1", "--image", "full=b:1"), "--image full is given twice (a:1 and b:1)"),
        C(("build", *V, *B, "--image", "min=a:1", "--image", "full=f:1", "--image", "min=a:1"),
          "--image min is given twice"),
        C(("backends", "--image", "full=a:1", "--image", "full=b:1"), "--image full is given twice"),
        C(("build", *V, *B, "--label", "k=1", "--label", "k=2"), "--label k is given twice"),
        C(("build", *V, *B, "--custom-backend", f"mine={t}/busy", "--custom-backend", f"mine={t}"),
          "--custom-backend mine is given twice"),
        # the command-line library's own usage errors: one line, exit 2
        C(("build", "--versio", "24.09"), "No such option: --versio"),
        C(("build", *V, *B, "--gpus"), "requires an argument"),
        C(("render", "-o", f"{t}/x3", *V, *B, "--offline", "extra"), "unexpected extra argument"),
        C(("no-such-command",), "No such command"),
        C(("build", *V, *B, "--bundle"), "requires an argument"),
        # DOCKER_HOST and non-UTF-8 arguments
        C(("backends", *V), "DOCKER_HOST tcp://[bad: not an engine address", env={"DOCKER_HOST": "tcp://[bad"}),
        C(("backends", *V), "DOCKER_HOST foo://x: not an engine address", env={"DOCKER_HOST": "foo://x"}),
        C(("build", *V, b"-b", b"py\xffthon"), "-b: the argument is not UTF-8 text"),
        C(("build", "--version", b"\xff", *B), "--version: the argument is not UTF-8 text"),
        C(("build", b"--version=\xff", *B), "--version: the argument is not UTF-8 text"),
        C(("build", *V, *B, "--json", "--label", b"k=\xfe"), "--label: the argument is not UTF-8 text"),
        C(("inspect", b"h.example/t\xff:1"), "REF: the argument is not UTF-8 text"),
        C(("build", *V, b"--ver\xffsion"), "argument 4 is not UTF-8 text"),
        # bundle archives and output paths: refused before any engine is asked
        C(("build", "--bundle", f"{t}/truncated.tar"), "not a readable bundle"),
        C(("build", "--bundle", f"{t}/shape.tar"), "is not one this composer wrote"),
        C(("build", "--bundle", f"{t}/nomanifest.tar"), "no readable bundle.json"),
        C(("build", "--bundle", f"{t}/escape.tar"), "which no bundle holds"),
        C(("build", "--bundle", f["fifo"]), "not a regular file"),
        C(("bundle", "-o", "/proc/x.tar", *V, *B), "-o /proc/x.tar: cannot be written"),
        C(("bundle", "-o", f"{t}/user.tar", *V, *B), "the composer did not write it"),
        C(("bundle", "-o", t, *V, *B), "is a folder"),
        C(("wheels", "-o", f"{t}/afile", *V, "--pip", "six"), "exists and is not a folder"),
        C(("wheels", "-o", "/proc/w", *V, "--pip", "six"), "cannot be written"),
        C(("build", *V, *B, "--junit", f"{t}/new/sub/x.xml", "--gpus", "lots"), "is not a GPU request"),
        C(("build", *V, *B, "--junit", f"{t}/afile"), "the composer did not write it"),
        # lock files
        C(("build", "--set", f"{t}/lockless.yaml", "--locked"), "no lock file"),
        C(("build", "--set", f"{t}/garbage.yaml", "--locked"), "not a composer lock file"),
        C(("lock", "--set", f"{t}/theirs.yaml"), "the composer did not write it"),
        # a malformed URL echoes neither its userinfo nor its query
        C(("build", *V, *B, "--pip", "six", "--pip-index-url", f"https://u:{TOKEN}@bad host/s"), "https://***@bad host/s"),
        C(("build", *V, *B, "--pip", "six", "--pip-index-url", f"https://u:to {TOKEN}@h/s"), "https://***@h/s"),
        C(("build", *V, *B, "--pip", "six", "--pip-index-url", f"https://u:p@{TOKEN}@h:x/s"), "***@h:x/s"),
        C(("build", *V, *B, "--pip", "six", "--pip-extra-index-url", f"https://h:x/s?token={TOKEN}"), "?***"),
        C(("build", *V, *B, "--pip", f"six @ https://u:{TOKEN}@h/x y.whl"), "***@h"),
        C(("build", *V, *B, "--pip", f"--find-links=https://u:{TOKEN}@h/"), "are not packages"),
        # ... nor does a reference written with user:password@ and no scheme
        C(("inspect", f"user:{TOKEN}@localhost:5999/x:1"), "REF ***@localhost:5999/x:1: not a valid image reference"),
        C(("inspect", f"https://user:{TOKEN}@h.example/x"), "REF https://***@h.example/x:"),
        C(("inspect", "--json", f"user:{TOKEN}@localhost:5999/x:1"), "REF ***@localhost:5999/x:1"),
        C(("smoke-test", f"u:{TOKEN}@h.example/x:1"), "IMAGE ***@h.example/x:1"),
        C(("build", *V, *B, "--tag", f"u:{TOKEN}@h.example/x:1"), "--tag ***@h.example/x:1"),
        C(("build", *V, *B, "--image", f"full=u:{TOKEN}@h/x:1", "--image", "full=b:1"),
          "--image full is given twice (***@h/x:1 and b:1)"),
        # --sbom and composer inspect (unreachable registries and images not Triton's: tests/integration/test_sbom.py)
        C(("build", *V, *B, "--sbom", f"{t}/afile"), "--sbom"),
        C(("build", *V, *B, "--sbom", t), "is a folder"),
        C(("build", *V, *B, "--sbom", "/proc/sbom.json"), "cannot be written"),
        C(("build", *V, *B, "--sbom", f"{t}/nofolder/sbom.json"),
          f"--sbom {t}/nofolder/sbom.json: the folder {t}/nofolder does not exist"),
        C(("build", *V, *B, "--sbom", "nofolder/sbom.json"), f"the folder {t}/nofolder does not exist"),
        C(("bundle", "-o", f"{t}/nofolder/b.tar", *V, *B), f"-o {t}/nofolder/b.tar: the folder {t}/nofolder does not exist"),
        C(("inspect", "Not A/ref"), "REF Not A/ref: not a valid image reference"),
        C(("inspect", "h.example/Team/triton:1"), "not a valid image reference"),
        C(("inspect", "h.example/t:1", "h.example/t:2", "h.example/t:3"), "one image, or two to compare"),
        C(("inspect", "h.example/t:1", "--registry-ca", f"{t}/absent.crt"), "--registry-ca"),
        C(("inspect",), "Missing argument"),
        # An engine's name given as a registry: said at once, not after every try at it.
        C(("mirror", *V, "--registry", "localhost/standin", "--to", "127.0.0.1:5999/x"),
          "nothing listens at localhost, so it is no registry", exit=1, seconds=10),
        C(("cache",), "composer cache needs a command: list or clear"),
        # Secrets are loaded by the preflight, before the engine is asked (it is not here: a check after it
        # would say so), and a refused one is never shown back (TOKEN).
        *_key_cases(t),
    ]


def _keys(tmp: Path) -> None:
    """Keys of the kinds --sign-key and verify --key must refuse, and an encrypted one to unlock."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    private = serialization.PrivateFormat.PKCS8
    for name, key in (("p384", ec.generate_private_key(ec.SECP384R1())), ("rsa", rsa.generate_private_key(65537, 2048)),
                      ("p256", ec.generate_private_key(ec.SECP256R1()))):
        (tmp / f"{name}.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, private,
                                                             serialization.NoEncryption()))
        (tmp / f"{name}.pub").write_bytes(key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        if name == "p256":
            (tmp / "enc.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, private,
                                                             serialization.BestAvailableEncryption(b"right-one")))


def _key_cases(t: str) -> list[Case]:
    push = ("build", *V, *B, "--push", "127.0.0.1:5999/team/x:1")
    ref = ("verify", "127.0.0.1:5999/team/x:1")
    return [
        C((*push, "--sign-key", "env:TC_NO_SUCH_KEY_VAR"), "--sign-key: the variable TC_NO_SUCH_KEY_VAR is not set"),
        C((*push, "--sign-key", f"file:{t}/absent.pem"), "--sign-key"),
        C((*push, "--sign-key", f"file:{t}/p384.pem"), "an ECDSA P-256 key is needed"),
        C((*push, "--sign-key", f"file:{t}/rsa.pem"), "an ECDSA P-256 key is needed"),
        C((*push, "--sign-key", f"file:{t}/p256.pub"), "not a PEM private key"),
        C((*push, "--sign-key", f"file:{t}/enc.pem"), "is encrypted: give its passphrase"),
        C((*push, "--sign-key", f"file:{t}/enc.pem", "--sign-passphrase", "env:TC_WRONG_PASS"),
          "or the passphrase is wrong", env={"TC_WRONG_PASS": "wrong-one"}),
        C((*push, "--sign-key", f"file:{t}/p256.pem", "--sign-passphrase", TOKEN), "--sign-passphrase: the value "
          "(not shown) is not file:PATH or env:NAME"),
        C((*push, "--sign-key", TOKEN), "--sign-key: the value (not shown) is not file:PATH or env:NAME"),
        C((*ref, "--key", f"{t}/absent.pub"), f"--key {t}/absent.pub: no such file"),
        C((*ref, "--key", t), "a folder, not a PEM public key file"),
        C((*ref, "--key", f"{t}/p384.pub"), "an ECDSA P-256 public key is needed"),
        C((*ref, "--key", f"{t}/rsa.pub"), "an ECDSA P-256 public key is needed"),
        C((*ref, "--key", f"{t}/afile"), "not a PEM public key"),
    ]


def _environment(env: dict | None) -> dict:
    whole = {**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock", "COMPOSER_PIP_INDEX_URL": "",
             **(env or {})}
    whole.pop("COMPOSER_DEBUG", None)
    whole.pop("SOURCE_DATE_EPOCH", None) if "SOURCE_DATE_EPOCH" not in (env or {}) else None
    return whole


def _run(args: tuple, cwd: Path, env: dict | None = None, forked: ForkedCli | None = None) -> subprocess.CompletedProcess:
    """`python -m composer ARGS` (the stand-ins' command for STANDIN); with `forked`, the same main()
    in a process forked from one that imported it (tests/forked_cli.py): no interpreter start."""
    if forked is not None and not (args and args[0] == STANDIN):
        return forked.run(args, _environment(env), cwd)
    env = _environment(env)
    module = b"composer"
    if args and args[0] == STANDIN:
        module, args = b"triton_standins", args[1:]
    command = [sys.executable.encode(), b"-m", module,
               *(a if isinstance(a, bytes) else a.encode("utf-8", "surrogateescape") for a in args)]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd, timeout=120,
                          errors="replace")


def _timed(case: Case, cwd: Path, forked: ForkedCli | None = None) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    run = _run(case.args, cwd, case.env, forked)
    return run, time.monotonic() - start


def test_every_bad_input_is_one_line_and_exit_2(tmp_path):
    cases = _cases(tmp_path)
    assert len(cases) >= 150
    root = Path(__file__).resolve().parents[2]
    servers = [ForkedCli(root), ForkedCli(root)]  # one per thread: each a process per case, forked
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            runs = list(pool.map(lambda item: _timed(item[1], tmp_path, servers[item[0] % 2]), enumerate(cases)))
    finally:
        for server in servers:
            server.close()
    problems = []
    for case, (run, seconds) in zip(cases, runs):
        lines = [line for line in run.stderr.splitlines() if line.strip()]
        if run.returncode != case.exit or len(lines) != 1 or not lines[0].startswith("error: ") \
                or (case.says is not None and case.says not in lines[0]) or seconds > case.seconds \
                or TOKEN in run.stdout + run.stderr:
            problems.append(f"{case.args!r}: exit {run.returncode}, {seconds:.1f} s, stderr {run.stderr[:400]!r}")
    assert not problems, "\n".join(problems)
    assert not [p for p in ("out1", "out-offline", "cfg1", "cfg2") if (tmp_path / p).exists()] and (tmp_path / "busy" / "Dockerfile").read_text() == "mine\n"
    assert not (tmp_path / "b.tar").exists() and not (tmp_path / "new").exists()  # no folder for a refused run
    assert not (tmp_path / "nofolder").exists()
    assert (tmp_path / "user.tar").read_text().startswith("not a bundle") and \
        (tmp_path / "theirs.lock.yaml").read_text() == "my own notes\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".") or p.name.endswith(".staging")]


def test_usage_errors_answer_json_too(tmp_path):
    for args in (("build", "--versio", "24.09", "--json"), ("build", "--json", *V, *B, "--gpus")):
        run = _run(args, tmp_path)
        assert run.returncode == 2 and json.loads(run.stdout)["exit_code"] == 2, run.stdout + run.stderr


def test_secrets_in_bad_input_are_not_echoed(tmp_path):
    run = _run(("build", *V, *B, "--pip", "six", "--pip-index-url", "https://u:tok-99@bad host/s"), tmp_path)
    assert run.returncode == 2 and "tok-99" not in run.stderr + run.stdout


def test_json_answers_bad_input_too(tmp_path):
    import json

    run = _run(("build", "--version", "24.9", *B, "--json"), tmp_path)
    assert run.returncode == 2
    assert json.loads(run.stdout) == {"command": "build", "exit_code": 2, "images": [], "summary": {},
                                      "error": "--version 24.9: '24.9' is not a release: releases are named YY.MM, "
                                      "e.g. 24.09"}


@pytest.mark.parametrize("args", [("--version",), ("version",)])
def test_version(args, tmp_path):
    from composer import __version__

    run = _run(args, tmp_path)
    assert run.returncode == 0 and run.stdout.strip() == __version__


def test_json_of_a_reference_with_credentials_is_redacted_too(tmp_path):
    run = _run(("inspect", "--json", "user:tok-55@localhost:5999/x:1"), tmp_path)
    assert run.returncode == 2 and "tok-55" not in run.stdout + run.stderr
    assert json.loads(run.stdout)["error"].startswith("REF ***@localhost:5999/x:1: not a valid image reference")


def test_credentials_in_any_url_of_an_error_are_not_echoed(tmp_path):
    for args in [("build", *V, *B, "--pip", "--x=https://u:tok-77@h.example/x"),
                 ("build", *V, *B, "--pip", "six", "--pip-extra-index-url", "https://u:tok-77@bad host/s")]:
        run = _run(args, tmp_path)
        assert run.returncode == 2 and "tok-77" not in run.stderr + run.stdout and "***@" in run.stderr


def test_render_leaves_every_user_file_as_it_was(tmp_path):
    """Re-rendering replaces only what render wrote; a changed rendered file or a link is refused."""
    out, outside = tmp_path / "ctx", tmp_path / "outside.txt"
    outside.write_text("precious\n")
    models = tmp_path / "repo" / "m"
    models.mkdir(parents=True)
    (models / "config.pbtxt").write_text('name: "m"\nbackend: "python"\n')
    render = ("render", "-o", str(out), *V, *B, "--offline")
    first = _run((*render, "--bake-models", str(tmp_path / "repo")), tmp_path)
    assert first.returncode == 0, first.stderr
    user_files = {out / "notes.txt": "a", out / "models" / "mine" / "config.pbtxt": "b",
                  out / "custom-backends" / "keep.txt": "c", out / "packages" / "notes.txt": "d"}
    for path, text in user_files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    again = _run(render, tmp_path)
    assert again.returncode == 0, again.stderr
    assert all(path.read_text() == text for path, text in user_files.items())
    assert not (out / "models" / "m").exists()  # rendered before, not now: removed

    (out / "Dockerfile").write_text("edited\n")
    changed = _run(render, tmp_path)
    assert changed.returncode == 2 and "Dockerfile was changed or replaced" in changed.stderr
    assert (out / "Dockerfile").read_text() == "edited\n"

    (out / "Dockerfile").unlink()
    (out / "Dockerfile").symlink_to(outside)
    linked = _run(render, tmp_path)
    assert linked.returncode == 2 and "Dockerfile" in linked.stderr
    assert outside.read_text() == "precious\n"
