"""The composer against a compose.py-style composition, on the NGC-scale stand-ins (24.09; 26.07, CUDA 13).

For onnxruntime+python and the four-backend selection (onnxruntime, python, tensorrt, pytorch):
the full and min images' sizes, the composed image's, and the size of a composition made the way
NGC's compose.py makes it (TRITON-FACTS section 4: FROM the min image, apt packages, the python
backend's packages, then the selected folders copied whole from the full image); each phase's
time (probe, build, smoke test), the peak disk used while it ran, and the ratios; and the same
selection on a pruned base (--base pruned), with its size and base, and two build times against
the min base's: the first build, which makes the base (right after the min-base one, so it finds
the collect stage in the build cache), and a build once the base is made (both images removed
first, then the min-base build and the pruned one again, each writing its layers anew).

The compose.py-style Dockerfile is the benchmark's own. Its apt-get steps install the same
packages from Debian's mirror (the stand-ins are Debian); its network steps outside Debian are
left out and said so: pip's upgrade and installs from PyPI (containers here cannot reach PyPI)
and DCGM from NVIDIA's repository. So its size is a lower bound of compose.py's.

    .venv/bin/python benchmarks/ngc_scale.py     (needs `triton-standin --scale ngc` first)
    .venv/bin/python benchmarks/ngc_scale.py --only flavours   (issue 27's rows only)
    .venv/bin/python benchmarks/ngc_scale.py --version 26.07 --only selections   (the CUDA 13 generation)
    .venv/bin/python benchmarks/ngc_scale.py --only vllm       (issue 28's rows: needs --flavour vllm too)
    .venv/bin/python benchmarks/ngc_scale.py --only vllm-pruned   (its pruned rows alone, by ONNX Runtime provider)

It removes every image it makes.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

from composer.catalog.catalog import Catalog
from composer.engine.connect import connect
from composer.core.errors import ComposerError
from composer.pipeline import build_image
from composer.assembly.pruning import sweep_stages
from composer.resolve.resolve import resolve
from composer.verify.smoke import smoke_test
from composer.verify.smoke_plan import SmokePlan
from composer.config.types import CompositionSpec
from triton_standins import ngc, ngc_vllm

SELECTIONS = (("onnxruntime", "python"), ("onnxruntime", "python", "tensorrt", "pytorch"))
# Issue 27's flavours: (backends, spec fields, what it is, goal as a fraction of the compose.py-style image).
FLAVOURS = (
    (("onnxruntime", "python"), {"selection.ort_providers": ("cuda",), "selection.base": "pruned"},
     "--ort-provider cuda --base pruned", 0.22),
    (("onnxruntime", "python"), {"selection.device": "cpu"}, "--device cpu", 0.08),
    (("python",), {"selection.device": "cpu"}, "--device cpu", None),
    (("onnxruntime", "python", "pytorch"), {"selection.device": "cpu"}, "--device cpu", None),
)
LABEL = {"triton-composer.benchmark": "ngc-scale"}
ROOT = "/opt/tritonserver"
# compose.py's apt packages for every image (section 4), by their Debian names.
APT_ALWAYS = ("clang", "curl", "dirmngr", "git", "gperf", "libb64-0d", "libcurl4-openssl-dev",
              "libgoogle-perftools-dev", "libjemalloc-dev", "libnuma-dev", "libre2-9",
              "software-properties-common", "wget")
APT_PYTHON = ("python3", "libarchive-dev", "python3-pip", "libpython3-dev")
LEFT_OUT = ("pip install --upgrade pip; pip install wheel setuptools 'numpy<2' virtualenv (PyPI: unreachable "
            "from containers here)", "DCGM 3.2.6 from NVIDIA's apt repository (not reachable here)")


def compose_py_dockerfile(full: str, minimal: str, backends: tuple[str, ...], release=None) -> str:
    """A Dockerfile made as compose.py makes it (section 4), without its non-Debian network steps;
    from 26.06 its copies are owned by root (section 7)."""
    server, name = (release.server, release.name) if release is not None else ("2.50.0", "24.09")
    chown = "" if name >= "26.06" else "--chown=1000:1000 "
    apt = list(APT_ALWAYS)
    if {"onnxruntime", "pytorch"} & set(backends):
        apt.append("libgomp1")
    lines = [f"FROM {full} AS full", f"FROM {minimal}",
             f"ENV TRITON_SERVER_VERSION={server} NVIDIA_TRITON_SERVER_VERSION={name} TRITON_SERVER_USER=triton-server",
             "RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends " + " ".join(apt)
             + " >/dev/null && rm -rf /var/lib/apt/lists/*"]
    if "python" in backends:
        lines.append("RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends "
                     + " ".join(APT_PYTHON) + " >/dev/null && rm -rf /var/lib/apt/lists/*")
    if "pytorch" in backends:
        lines.append("ENV LD_LIBRARY_PATH=/opt/hpcx/ucc/lib/:/opt/hpcx/ucx/lib/:${LD_LIBRARY_PATH}")
    lines.append(f"RUN rm -rf {ROOT} && mkdir -p {ROOT}" + (" && chown 1000:1000 " + ROOT if chown else ""))
    for part in ("LICENSE", "TRITON_VERSION", "bin", "lib"):
        lines.append(f"COPY {chown}--from=full {ROOT}/{part} {ROOT}/{part}")
    for backend in backends:
        lines.append(f"COPY {chown}--from=full {ROOT}/backends/{backend} {ROOT}/backends/{backend}")
    return "\n".join(lines) + "\n"


class PeakDisk:
    """The most disk used above the start while it runs (sampled every second)."""

    def __init__(self, path: str = "/"):
        self.path = path
        self.start = self.peak = shutil.disk_usage(path).used
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(1.0):
            self.peak = max(self.peak, shutil.disk_usage(self.path).used)

    def __enter__(self) -> "PeakDisk":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def used(self) -> int:
        return self.peak - self.start


def gb(n: float) -> str:
    return f"{n / 1e9:6.2f} GB"


def timed(call):
    started = time.monotonic()
    value = call()
    return value, time.monotonic() - started


def run(engine, catalog, version: str, backends: tuple[str, ...]) -> None:
    release = catalog.release(version)
    full_ref, min_ref = release.full_ref(ngc.REGISTRY), release.min_ref(ngc.REGISTRY)
    full, minimal = engine.require_image(full_ref), engine.require_image(min_ref)
    tag = f"triton-composer-bench/tritonserver:ngc-{'-'.join(backends)}"
    spec = CompositionSpec().with_fields({"selection.backends": backends, "images.version": version,
                                          "images.registry": ngc.REGISTRY, "result.tag": tag})
    style_tag = f"triton-composer-bench/tritonserver:compose-py-{'-'.join(backends)}"
    pruned_tag = f"triton-composer-bench/tritonserver:pruned-{'-'.join(backends)}"
    base_made = None
    with PeakDisk() as disk:
        try:
            resolved, probe_s = timed(lambda: resolve(engine, spec, catalog))
            plan = replace(resolved.plan, smoke=None)  # smoke-tested apart below, timed on its own
            result, build_s = timed(lambda: build_image(engine, plan, labels=LABEL))
            report, smoke_s = timed(lambda: smoke_test(engine, tag, SmokePlan(backends=backends), labels=LABEL))
            pruned_spec = spec.with_fields({"selection.base": "pruned", "result.tag": pruned_tag})
            pruned_plan = replace(resolve(engine, pruned_spec, catalog).plan, smoke=None)
            try:
                pruned, first_s = timed(lambda: build_image(engine, pruned_plan, labels=LABEL))
                base_made = pruned.pruned_base if pruned.pruned_base.made else None
                pruned_report = smoke_test(engine, pruned_tag, SmokePlan(backends=backends), labels=LABEL)
                # Again, once the base is made: both images and the pruned build's stages removed
                # (its proof stage would keep the image's layers in the build cache), so that each
                # build writes its layers anew.
                engine.remove_image(tag, force=True)
                engine.remove_image(pruned_tag, force=True)
                sweep_stages(engine)
                _, again_s = timed(lambda: build_image(engine, plan, labels=LABEL))
                again, reused_s = timed(lambda: build_image(engine, pruned_plan, labels=LABEL))
                assert not again.pruned_base.made
            finally:
                sweep_stages(engine)
            with tempfile.TemporaryDirectory(prefix="compose-py-") as tmp:
                (Path(tmp) / "Dockerfile").write_text(compose_py_dockerfile(full.id, minimal.id, backends, release))
                _, style_s = timed(lambda: engine.build(Path(tmp), tag=style_tag, labels=LABEL, network_mode="host"))
            style = engine.require_image(style_tag).size
        finally:
            engine.remove_image(tag, force=True)
            engine.remove_image(style_tag, force=True)
            engine.remove_image(pruned_tag, force=True)
            if base_made is not None:  # the base this run made (none is there when it failed)
                engine.remove_image(base_made.tag, force=True)
    counts = report.to_dict()["counts"]
    print(f"== {'+'.join(backends)}")
    print(f"  full {gb(full.size)}   min {gb(minimal.size)}   composed {gb(result.size)}   "
          f"compose.py-style {gb(style)}")
    print(f"  composed/full {result.size / full.size:.2f}   composed/compose.py-style {result.size / style:.2f}   "
          f"composed - min {gb(result.size - minimal.size)}")
    print(f"  probe {probe_s:.0f} s   build {build_s:.0f} s   smoke test {smoke_s:.0f} s "
          f"(passed {counts['passed']}, skipped {counts['skipped']}, failed {counts['failed']})   "
          f"compose.py-style build {style_s:.0f} s")
    base = next(p.size for p in pruned.sizes.parts if p.kind == "base")
    pruned_counts = pruned_report.to_dict()["counts"]
    goal = " (goal <= 0.40)" if version >= "26.01" and backends == SELECTIONS[0] else ""
    print(f"  --base pruned  {gb(pruned.size)}   pruned/compose.py-style {pruned.size / style:.2f}   "
          f"pruned/min-based {pruned.size / result.size:.2f}{goal}   "
          f"pruned base {gb(base)} (min {gb(minimal.size)})   smoke test passed {pruned_counts['passed']}, "
          f"skipped {pruned_counts['skipped']}, failed {pruned_counts['failed']}")
    made = f"making the base in {base_made.seconds:.0f} s" if base_made else "the base was there already"
    print(f"    first build {first_s:.0f} s ({made}; {first_s / build_s:.1f}x the min-base build)   "
          f"with the base made {reused_s:.0f} s against {again_s:.0f} s on the min base "
          f"({reused_s / again_s:.2f}x; goal <= 1.3x)")
    print(f"  peak disk used {gb(disk.used)}")


def run_flavours(engine, catalog, version: str) -> None:
    """Each flavour of issue 27 (a choice of ONNX Runtime's providers, CPU-only images), built with
    its smoke test, beside the compose.py-style image of the same backends."""
    release = catalog.release(version)
    full = engine.require_image(release.full_ref(ngc.REGISTRY))
    minimal = engine.require_image(release.min_ref(ngc.REGISTRY))
    styles: dict[tuple[str, ...], int] = {}
    for number, (backends, fields, what, goal) in enumerate(FLAVOURS):
        name = "-".join(backends)
        tag = f"triton-composer-bench/tritonserver:flavour-{number}-{name}"
        spec = CompositionSpec().with_fields({"selection.backends": backends, "images.version": version,
                                              "images.registry": ngc.REGISTRY, "result.tag": tag, **fields})
        made = None
        with PeakDisk() as disk:
            try:
                plan = resolve(engine, spec, catalog).plan
                result, build_s = timed(lambda: build_image(engine, plan, labels=LABEL))
                made = result.pruned_base if result.pruned_base and result.pruned_base.made else None
                if backends not in styles:
                    style_tag = f"triton-composer-bench/tritonserver:compose-py-{name}"
                    try:
                        with tempfile.TemporaryDirectory(prefix="compose-py-") as tmp:
                            (Path(tmp) / "Dockerfile").write_text(compose_py_dockerfile(full.id, minimal.id, backends, release))
                            engine.build(Path(tmp), tag=style_tag, labels=LABEL, network_mode="host")
                        styles[backends] = engine.require_image(style_tag).size
                    finally:
                        engine.remove_image(style_tag, force=True)
            finally:
                engine.remove_image(tag, force=True)
                sweep_stages(engine)
                if made is not None:
                    engine.remove_image(made.tag, force=True)
        style = styles[backends]
        counts = result.smoke.to_dict()["counts"] if result.smoke else {"passed": 0, "skipped": 0, "failed": 0}
        base = next((p.size for p in result.sizes.parts if p.kind == "base"), 0) if result.sizes else 0
        ratio = result.size / style
        verdict = "" if goal is None else f" (goal <= {goal}: {'met' if ratio <= goal else 'NOT met'})"
        print(f"== {'+'.join(backends)} {what}")
        print(f"  image {gb(result.size)}   compose.py-style {gb(style)}   image/compose.py-style {ratio:.3f}{verdict}")
        print(f"  base {gb(base)}   build {build_s:.0f} s   smoke test passed {counts['passed']}, skipped "
              f"{counts['skipped']}, failed {counts['failed']} (device {plan.device})   peak disk used {gb(disk.used)}")
        if result.pruning is not None:  # where a pruned base's bytes are, and which kept file asks for them
            largest = sorted(result.pruning.kept, key=lambda p: -p["size"])[:6]
            print("  largest kept packages: " + "; ".join(f"{p['package']} {gb(p['size'])} ({p['why']})" for p in largest))


def run_vllm(engine, catalog, version: str) -> None:
    """Issue 28: the vLLM stand-in, and vllm+onnxruntime composed on it (smoke test included)
    against the goal: at most the vLLM image plus 5% over the onnxruntime backend's folder."""
    release = catalog.release(version)
    vllm = engine.require_image(ngc_vllm.flavour_ref(release))
    print(f"== vLLM stand-in {vllm.ref}")
    print(f"  {gb(vllm.size)} (NGC's 24.09-vllm-python-py3: 19 GB)   min {gb(engine.require_image(release.min_ref(ngc.REGISTRY)).size)}")
    tag = "triton-composer-bench/tritonserver:vllm-onnxruntime"
    spec = CompositionSpec().with_fields({"selection.backends": ("vllm", "onnxruntime"), "images.version": version,
                                          "images.registry": ngc.REGISTRY, "selection.flavour": "vllm",
                                          "result.tag": tag})
    with PeakDisk() as disk:
        try:
            plan, probe_s = timed(lambda: resolve(engine, spec, catalog).plan)
            result, build_s = timed(lambda: build_image(engine, plan, labels=LABEL))
        finally:
            engine.remove_image(tag, force=True)
            sweep_stages(engine)
    ort = next(p.size for p in result.sizes.parts if p.name == "onnxruntime")
    goal = vllm.size + 1.05 * ort
    counts = result.smoke.to_dict()["counts"]
    print("== vllm+onnxruntime --flavour vllm")
    print(f"  image {gb(result.size)}   vLLM image {gb(vllm.size)}   onnxruntime folder {gb(ort)}   "
          f"over the vLLM image {gb(result.size - vllm.size)} = {(result.size - vllm.size) / ort:.3f}x the folder "
          f"(goal <= vLLM image + 1.05x the folder = {gb(goal)}: {'met' if result.size <= goal else 'NOT met'})")
    print(f"  probe {probe_s:.0f} s   build {build_s:.0f} s   smoke test passed {counts['passed']}, skipped "
          f"{counts['skipped']}, failed {counts['failed']}   peak disk used {gb(disk.used)}")
    run_vllm_pruned(engine, catalog, version, vllm)


VLLM_PRUNED_PROVIDERS = ((), ("cuda",), ("cpu",))  # ONNX Runtime's providers kept: every one, CUDA, CPU only


def run_vllm_pruned(engine, catalog, version: str, vllm) -> None:
    """Issue 28 item 4: vllm+onnxruntime on a pruned vLLM base (python distributions pruned too)
    against the goal: at most half the vLLM image; with every ONNX Runtime provider (the default),
    the CUDA provider alone, and the CPU provider alone (ONNX models on the CPU beside vLLM on the
    GPU). Each base is made anew (removed after)."""
    for providers in VLLM_PRUNED_PROVIDERS:
        tag = "triton-composer-bench/tritonserver:vllm-onnxruntime-pruned"
        spec = CompositionSpec().with_fields({"selection.backends": ("vllm", "onnxruntime"), "images.version": version,
                                              "images.registry": ngc.REGISTRY, "selection.flavour": "vllm",
                                              "selection.base": "pruned", "selection.ort_providers": providers,
                                              "result.tag": tag})
        result = None
        with PeakDisk() as disk:
            try:
                plan = resolve(engine, spec, catalog).plan
                result, build_s = timed(lambda: build_image(engine, plan, labels=LABEL))
            finally:
                engine.remove_image(tag, force=True)
                if result is not None and result.pruned_base is not None and result.pruned_base.made:
                    engine.remove_image(result.pruned_base.tag, force=True)
                sweep_stages(engine)
        goal = 0.5 * vllm.size
        counts = result.smoke.to_dict()["counts"]
        pruning = result.pruning
        removed = pruning.removed_by_family() if pruning else {}
        kept_dists = sum(d["size"] for d in (pruning.python or {}).get("kept", ())) if pruning else 0
        kept_packages = sorted(pruning.kept, key=lambda p: -p["size"])[:6] if pruning else []
        asked = " --ort-provider " + " --ort-provider ".join(providers) if providers else ""
        print(f"== vllm+onnxruntime --flavour vllm --base pruned{asked}")
        print(f"  image {gb(result.size)} = {result.size / vllm.size:.2f}x the vLLM image {gb(vllm.size)} "
              f"(goal <= 0.5x = {gb(goal)}: {'met' if result.size <= goal else 'NOT met'})   build {build_s:.0f} s   "
              f"smoke test passed {counts['passed']}, skipped {counts['skipped']}, failed {counts['failed']}   "
              f"peak disk used {gb(disk.used)}")
        print(f"  python distributions kept {gb(kept_dists)} = {kept_dists / vllm.size:.2f}x the vLLM image "
              "(vLLM's Requires-Dist closure)")
        print("  largest kept packages: " + ", ".join(f"{p['package']} {gb(p['size'])}" for p in kept_packages))
        print("  removed: " + ", ".join(f"{family} {gb(size)}" for family, size in removed.items()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default="24.09")
    parser.add_argument("--only", choices=("all", "selections", "flavours", "vllm", "vllm-pruned"), default="all",
                        help="the min-base/pruned selections, issue 27's flavours (providers, CPU-only), issue 28's "
                             "vLLM rows, or all")
    args = parser.parse_args()
    try:
        engine = connect()
        catalog = Catalog.load()
        print("compose.py-style images leave out: " + "; ".join(LEFT_OUT))
        if args.only in ("all", "selections"):
            for backends in SELECTIONS:
                run(engine, catalog, args.version, backends)
        if args.only in ("all", "flavours"):
            run_flavours(engine, catalog, args.version)
        if args.only in ("all", "vllm"):
            run_vllm(engine, catalog, args.version)
        if args.only == "vllm-pruned":
            run_vllm_pruned(engine, catalog, args.version, engine.require_image(
                ngc_vllm.flavour_ref(catalog.release(args.version))))
    except ComposerError as error:
        print(f"error: {error.message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
