#!/usr/bin/env python3
"""Proves the NGC-scale stand-in backends (onnxruntime, pytorch, tensorrt) standalone, for real.

Builds a throw-away image FROM the small 24.09 stand-in (a real Triton 2.50.0): a build stage
runs each build.sh (TensorRT stand-in libraries, pad.sh, the three backends, each proving the
server exports what it calls); the final stage lays the results out as NGC does (TensorRT in
/usr/lib/x86_64-linux-gnu, CUDA's libraries in /usr/local/cuda/lib64, ONNX Runtime and libtorch
in their backend folders). Then it runs tritonserver on the test models of
tests/integration/models/ngc (and the samples onnx_affine, torchscript_affine), with ports on 127.0.0.1 only,
and checks over HTTP (KServe v2) that:
- every model answers as onnxruntime / torch computed on the host (expected.json);
- the ONNX model without config.pbtxt gets its completed configuration;
- the tensorrt plan model is refused with the reason (no GPU);
- the log states TensorRT 10.4.0, ONNX Runtime 1.19.2 and libtorch 2.5.1.
Removes its image, container and build stage when done (label org.triton-composer.test=ngc-backends).

Usage: check-backends.py [--wheels DIR] [--base IMAGE] [--keep]
Needs the wheels of TRITON-FACTS section 9 in DIR (torch 2.5.1, onnxruntime-gpu 1.19.2, nvidia-*)
and about 8 GB of free disk while it runs. Python's standard library only. Exit 0 when all pass.
"""

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
MODELS = ROOT / "tests" / "integration" / "models" / "ngc"
SAMPLES = [ROOT / "composer" / "samples" / "models" / name for name in ("onnx_affine", "torchscript_affine")]
LABEL = "org.triton-composer.test=ngc-backends"
TAG = "localhost/triton-composer-test/ngc-backends:latest"

# The CUDA libraries libtorch (libtorch_cpu.so, libtorch_cuda.so) and libnvinfer need to load
# (their NEEDED closure), per nvidia-* wheel. cuDNN's sub-libraries load only on use.
CUDA_WHEELS = {
    "nvidia_cuda_runtime_cu12": ["libcudart.so.12"],
    "nvidia_cuda_cupti_cu12": ["libcupti.so.12"],
    "nvidia_cublas_cu12": ["libcublas.so.12", "libcublasLt.so.12"],
    "nvidia_cudnn_cu12": ["libcudnn.so.9"],
    "nvidia_cufft_cu12": ["libcufft.so.11"],
    "nvidia_curand_cu12": ["libcurand.so.10"],
    "nvidia_cusparse_cu12": ["libcusparse.so.12"],
    "nvidia_nvjitlink_cu12": ["libnvJitLink.so.12"],
    "nvidia_nccl_cu12": ["libnccl.so.2"],
}

DOCKERFILE = """\
FROM {base} AS build
LABEL {label}
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends \\
      gcc g++ libc6-dev libstdc++-12-dev binutils openssl >/dev/null && rm -rf /var/lib/apt/lists/*
COPY ngc /src
COPY deps/cuda/libcudart.so.12 /deps/cuda/
COPY deps/ort /deps/ort
COPY deps/torch/include /deps/torch/include
COPY deps/torch/lib/libtorch.so deps/torch/lib/libtorch_cpu.so deps/torch/lib/libc10.so /deps/torch/lib/
RUN set -e; server=/opt/tritonserver/lib/libtritonserver.so; \\
    sh /src/tensorrt_libs/build.sh /src/tensorrt_libs /out/trt /deps/cuda; \\
    sh /src/pad.sh /out/trt/libnvinfer.so.10.4.0 4000000 libnvinfer.so.10.4.0; \\
    sh /src/backends/tensorrt/build.sh /src/backends/tensorrt /out/backends/tensorrt $server /out/trt; \\
    sh /src/backends/onnxruntime/build.sh /src/backends/onnxruntime /out/backends/onnxruntime $server /deps/ort; \\
    sh /src/backends/pytorch/build.sh /src/backends/pytorch /out/backends/pytorch $server /deps/torch

FROM {base}
LABEL {label}
COPY deps/cuda /usr/local/cuda/lib64
COPY --from=build /out/trt /usr/lib/x86_64-linux-gnu
RUN set -e; cd /usr/lib/x86_64-linux-gnu; \\
    for lib in libnvinfer libnvinfer_plugin libnvonnxparser; do ln -s $lib.so.10.4.0 $lib.so.10; done; \\
    echo /usr/local/cuda/lib64 >/etc/ld.so.conf.d/000-cuda.conf; ldconfig; \\
    rm -rf /opt/tritonserver/backends/onnxruntime /opt/tritonserver/backends/pytorch
COPY --from=build /out/backends /opt/tritonserver/backends
COPY deps/ort /opt/tritonserver/backends/onnxruntime
COPY deps/torch/lib /opt/tritonserver/backends/pytorch
RUN set -e; cd /opt/tritonserver/backends/onnxruntime; \\
    ln -s libonnxruntime.so.1.19.2 libonnxruntime.so.1; ln -s libonnxruntime.so.1 libonnxruntime.so
"""


def step(message: str) -> None:
    print(f"check-backends: {message}", flush=True)


def run(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(args, check=True, text=True, **kwargs)


def wheel(wheels: Path, prefix: str) -> zipfile.ZipFile:
    found = sorted(wheels.glob(f"{prefix}-*.whl"))
    if not found:
        raise SystemExit(f"check-backends: no {prefix} wheel in {wheels}")
    return zipfile.ZipFile(found[-1])


def extract(archive: zipfile.ZipFile, member: str, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with archive.open(member) as src, open(dest, "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)


def make_context(wheels: Path, context: Path) -> None:
    """The build context: this folder's sources and the libraries unpacked from the wheels."""
    shutil.copytree(HERE, context / "ngc", ignore=shutil.ignore_patterns("__pycache__", "check-backends.py"))
    deps = context / "deps"
    for prefix, names in CUDA_WHEELS.items():
        archive = wheel(wheels, prefix)
        for member in archive.namelist():
            if member.rsplit("/", 1)[-1] in names:
                extract(archive, member, deps / "cuda" / member.rsplit("/", 1)[-1])
    # ONNX Runtime: the library and the shared provider; the CUDA and TensorRT providers load
    # only when a model asks for them, which a CPU check never does.
    archive = wheel(wheels, "onnxruntime_gpu")
    for name in ("libonnxruntime.so.1.19.2", "libonnxruntime_providers_shared.so"):
        extract(archive, f"onnxruntime/capi/{name}", deps / "ort" / name)
    archive = wheel(wheels, "torch")
    for member in archive.namelist():
        if member.startswith(("torch/include/", "torch/lib/")) and not member.endswith("/"):
            if "libtorch_python" not in member:
                extract(archive, member, deps / "torch" / member[len("torch/"):])
    (context / "Dockerfile").write_text(DOCKERFILE.format(base=BASE, label=LABEL))


def model_repository(repo: Path) -> None:
    for model in MODELS.iterdir():
        if model.is_dir():
            shutil.copytree(model, repo / model.name)
    for sample in SAMPLES:
        shutil.copytree(sample, repo / sample.name)


def http(port: str, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            text = response.read()
            return response.status, json.loads(text) if text else {}
    except urllib.error.HTTPError as error:
        text = error.read()
        return error.code, json.loads(text) if text else {}


def close(expected: list, got: list, tolerance: float) -> bool:
    return len(expected) == len(got) and all(
        (e == g) if isinstance(e, bool) or isinstance(g, bool) else abs(e - g) <= tolerance * max(1.0, abs(e))
        for e, g in zip(expected, got))


def check_case(port: str, case: dict) -> list[str]:
    body = {"inputs": case["inputs"], "outputs": [{"name": o["name"]} for o in case["outputs"]]}
    status, answer = http(port, "POST", f"/v2/models/{case['model']}/infer", body)
    if status != 200:
        return [f"{case['model']}: HTTP {status}: {answer.get('error', answer)}"]
    got = {o["name"]: o for o in answer.get("outputs", [])}
    problems = []
    for want in case["outputs"]:
        out = got.get(want["name"])
        if not out:
            problems.append(f"{case['model']}: no output {want['name']}")
        elif out["datatype"] != want["datatype"] or out["shape"] != want["shape"]:
            problems.append(f"{case['model']}.{want['name']}: {out['datatype']}{out['shape']}, want {want['datatype']}{want['shape']}")
        elif not close(want["data"], out["data"], case["tolerance"]):
            problems.append(f"{case['model']}.{want['name']}: {out['data'][:6]}..., want {want['data'][:6]}...")
    return problems


def check_server(port: str, log: str) -> list[str]:
    problems = []
    cases = json.loads((MODELS / "expected.json").read_text())["cases"]
    for case in cases:
        found = check_case(port, case)
        problems += found
        first = case["outputs"][0]
        step(f"{case['model']}: {'OK' if not found else 'FAILED'} (want {first['name']} {first['datatype']}{first['shape']} "
             f"starting {first['data'][:4]})")
    # Several requests at once: the dynamic batcher may hand them to one execute call.
    configless = next(c for c in cases if c["model"] == "ngc_onnx_configless")
    with ThreadPoolExecutor(8) as pool:
        concurrent = [p for found in pool.map(lambda _: check_case(port, configless), range(16)) for p in found]
    problems += concurrent
    step(f"16 concurrent requests to ngc_onnx_configless: {'OK' if not concurrent else 'FAILED'}")
    status, config = http(port, "GET", "/v2/models/ngc_onnx_configless/config")
    completed = (config.get("max_batch_size"), [(t["name"], t["data_type"], [int(d) for d in t["dims"]]) for t in
                 config.get("input", []) + config.get("output", [])], "dynamic_batching" in config)
    step(f"ngc_onnx_configless completed config: max_batch_size, tensors, dynamic batching = {completed}")
    if completed != (4, [("features", "TYPE_FP32", [3]), ("scores", "TYPE_FP32", [2])], True):
        problems.append(f"ngc_onnx_configless: completed config is {config}")
    status, index = http(port, "POST", "/v2/repository/index", {})
    plan = next((m for m in index if m.get("name") == "ngc_tensorrt_plan"), {}) if isinstance(index, list) else {}
    step(f"ngc_tensorrt_plan: state {plan.get('state')}, reason: {plan.get('reason')}")
    if plan.get("state") != "UNAVAILABLE" or "no GPU available (cudaGetDeviceCount:" not in plan.get("reason", ""):
        problems.append(f"ngc_tensorrt_plan: not refused with the GPU reason: {plan}")
    for needle in ("TensorRT version 10.4.0", "ONNX Runtime version 1.19.2", "libtorch 2.5.1"):
        line = next((line for line in log.splitlines() if needle in line), None)
        step(f"log: {line.strip() if line else needle + ' NOT FOUND'}")
        if not line:
            problems.append(f"the server log does not say {needle!r}")
    return problems


def serve_and_check(repo: Path) -> list[str]:
    name = f"ngc-backends-check-{int(time.time())}"
    run("docker", "run", "-d", "--name", name, "--label", LABEL, "--shm-size", "256m", "-p", "127.0.0.1::8000",
        "-v", f"{repo}:/models:ro", TAG, "tritonserver", "--model-repository=/models", "--exit-on-error=false",
        "--log-verbose=0", stdout=subprocess.DEVNULL)
    try:
        port = run("docker", "port", name, "8000/tcp", capture_output=True).stdout.split(":")[-1].strip()
        for _ in range(300):  # until every model has loaded or failed
            try:
                status, index = http(port, "POST", "/v2/repository/index", {})
                states = [m.get("state") for m in index] if status == 200 and isinstance(index, list) else []
                if len(states) == 7 and all(state in ("READY", "UNAVAILABLE") for state in states):
                    break
            except (urllib.error.URLError, ConnectionError, json.JSONDecodeError):
                pass
            time.sleep(1)
        log = subprocess.run(["docker", "logs", name], capture_output=True, text=True).stdout
        log += subprocess.run(["docker", "logs", name], capture_output=True, text=True).stderr
        return check_server(port, log)
    finally:
        subprocess.run(["docker", "logs", "--tail", "5", name], check=False)
        subprocess.run(["docker", "rm", "-f", name], check=False, stdout=subprocess.DEVNULL)


BASE = "localhost/standin/tritonserver:24.09-py3"


def main() -> int:
    global BASE
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--wheels", type=Path, default=Path.home() / ".cache" / "ngc-wheels-prefetch")
    parser.add_argument("--base", default=BASE)
    parser.add_argument("--keep", action="store_true", help="keep the test image")
    args = parser.parse_args()
    BASE = args.base
    with tempfile.TemporaryDirectory(prefix="ngc-backends-") as tmp:
        context, repo = Path(tmp) / "context", Path(tmp) / "models"
        step(f"unpacking the wheels of {args.wheels} into the build context")
        make_context(args.wheels, context)
        model_repository(repo)
        step(f"building {TAG} from {BASE} (compiles the pytorch backend: a few minutes)")
        started = time.time()
        try:
            run("docker", "build", "-t", TAG, str(context))
            step(f"built in {time.time() - started:.0f} s")
            problems = serve_and_check(repo)
        except subprocess.CalledProcessError as error:
            problems = [f"{' '.join(error.cmd[:3])} ... failed (exit {error.returncode})"]
        finally:
            if not args.keep:
                subprocess.run(["docker", "rmi", "-f", TAG], check=False, stdout=subprocess.DEVNULL)
            subprocess.run(["docker", "image", "prune", "-f", "--filter", f"label={LABEL}"], check=False,
                           stdout=subprocess.DEVNULL)
    for problem in problems:
        print(f"check-backends: FAIL {problem}", file=sys.stderr)
    step("all checks passed" if not problems else f"{len(problems)} checks failed")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
