"""Server start time with two model environments: unpacked folders (what the composer stores)
against the .tar.gz archives the python backend also takes (and unpacks into /tmp at every start).

Composes one image on the stand-ins whose two baked python models pin their own numpy (a
realistic environment of some tens of MB each), then derives from it an image holding the same
environments as relocatable archives, with the models' configurations pointed at them. Each
image is started ROUNDS times; the time from the container's start until the server is ready
(both models loaded) is reported, with the environments' sizes on disk.

    .venv/bin/python benchmarks/model_envs.py [--version 24.09] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from composer.catalog.catalog import Catalog
from composer.engine.connect import connect
from composer.engine.interface import Engine
from composer.config.model_envs import ENVS_ROOT
from composer.pipeline import build_image
from composer.resolve.resolve import resolve
from composer.config.types import CompositionSpec
from composer.verify.triton_client import TensorData, TritonHTTP

LABEL = {"triton-composer.benchmark": "1"}
PINS = {"env_a": "numpy==1.26.3", "env_b": "numpy==1.26.2"}
MODEL = '''import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = np.array([np.__version__.encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("NUMPY", out)]) for _ in requests]
'''
CONFIG = '''name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "NUMPY" data_type: TYPE_STRING dims: [ 1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
'''
# The archive form: each environment packed with an activate script that finds its own folder
# (the python backend unpacks it under /tmp), the folder removed, the configuration re-pointed.
ARCHIVE_DOCKERFILE = '''FROM {image}
USER root
RUN set -e; for env in {envs}; do \\
      dir={root}/$env; \\
      sed -i 's|^VIRTUAL_ENV=.*|VIRTUAL_ENV="$(cd "$(dirname "${{BASH_SOURCE[0]}}")/.." \\&\\& pwd)"|' $dir/bin/activate; \\
      tar -C $dir -czf $dir.tar.gz .; rm -rf $dir; \\
      sed -i "s|$dir\\"|$dir.tar.gz\\"|" /models/$env/config.pbtxt; \\
    done
'''


def repository(folder: Path) -> Path:
    repo = folder / "models"
    for name, pin in PINS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.py").write_text(MODEL)
        (repo / name / "config.pbtxt").write_text(CONFIG.format(name=name))
        (repo / name / "requirements.txt").write_text(pin + "\n")
    return repo


def start_seconds(engine: Engine, image: str, check: bool = False) -> float:
    """From starting the container until the server is ready with every model loaded; `check`:
    each model answers with the numpy its environment pins (the form works, no fallback)."""
    began = time.monotonic()
    container = engine.start(image, ["tritonserver", "--model-repository=/models"], ports=[8000], labels=LABEL,
                             shm_size="256m")
    try:
        client = TritonHTTP(f"http://127.0.0.1:{container.host_port(8000)}")
        if not client.wait_ready(300, container.running):
            raise SystemExit(f"{image} did not get ready: {container.logs(tail=20)}")
        seconds = time.monotonic() - began
        for name, pin in PINS.items() if check else ():
            answer = client.infer(name, [TensorData("IN", "FP32", (1,), (0.0,))])["NUMPY"].data[0]
            answer = answer.decode() if isinstance(answer, bytes) else str(answer)
            if answer != pin.split("==")[1]:
                raise SystemExit(f"{image}: model {name} runs numpy {answer}, its environment pins {pin}")
        return seconds
    finally:
        container.remove()


def env_sizes(engine: Engine, image: str) -> str:
    out = engine.run_once(image, ["sh", "-c", f"du -sh {ENVS_ROOT}/* | sed 's|{ENVS_ROOT}/||'"], entrypoint=[])
    return ", ".join(" ".join(line.split()[::-1]) for line in out.output.strip().splitlines())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--registry", default="localhost/standin")
    parser.add_argument("--version", default="24.09")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    engine = connect()
    run = uuid.uuid4().hex[:8]
    folder_image = f"triton-composer-benchmark/model-envs:folders-{run}"
    archive_image = f"triton-composer-benchmark/model-envs:archives-{run}"
    with tempfile.TemporaryDirectory(prefix="triton-composer-bench-") as tmp:
        tmp = Path(tmp)
        spec = CompositionSpec().with_fields({
            "images.version": args.version, "images.registry": args.registry, "selection.backends": ("python",),
            "selection.bake_models": repository(tmp), "result.tag": folder_image, "result.samples": False,
        })
        try:
            plan = resolve(engine, spec, Catalog.load(), wheels=tmp / "wheels", on_line=print).plan
            build_image(engine, plan, labels=LABEL)
            (tmp / "archive").mkdir()
            (tmp / "archive" / "Dockerfile").write_text(
                ARCHIVE_DOCKERFILE.format(image=folder_image, envs=" ".join(PINS), root=ENVS_ROOT))
            engine.build(tmp / "archive", tag=archive_image, labels=LABEL)
            results = {}
            for form, image in (("folders (unpacked)", folder_image), ("archives (.tar.gz)", archive_image)):
                start_seconds(engine, image, check=True)  # warms the page cache for both forms alike
                results[form] = [start_seconds(engine, image) for _ in range(args.rounds)]
                print(f"{form:20}  environments: {env_sizes(engine, image)}")
            for form, times in results.items():
                print(f"{form:20}  server ready in  median {statistics.median(times):5.2f} s  "
                      f"min {min(times):5.2f} s  max {max(times):5.2f} s  ({args.rounds} starts, 2 environments)")
        finally:
            for image in (archive_image, folder_image):
                engine.remove_image(image, force=True)


if __name__ == "__main__":
    main()
