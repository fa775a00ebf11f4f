"""Rebuilds (issue 44): what a build costs when little or nothing changed, beside the cold build, in
one run on one machine.

Each row runs the real command line (`python -m composer build ...`) against the 24.09 stand-ins,
with a state folder of the benchmark's own (COMPOSER_STATE_DIR: its records, locks and probe
reports start empty), and reads its wall time:

  cold        the selection built from nothing: --no-cache (no step of the engine's build cache,
              no recorded image, smoke test or layer) and an empty state folder
  unchanged   the same command again, nothing changed (median of --repeat runs): the recorded
              image is on the engine, its smoke test's PASS recorded
  one pin     the same selection with one --pip pin added (median of three pins, each new):
              only the packages stage runs, only the packages, record and SBOM layers are written
  one model   --bake-models with one model added to the repository: only the models layer is new
  two at once two builds of one new selection at the same time (a label makes it new): both pass,
              the same image id, nothing of either run left (holds, run-labelled images, records)

    .venv/bin/python benchmarks/rebuild.py                              (small stand-ins)
    .venv/bin/python benchmarks/rebuild.py --source localhost/standin-ngc --base pruned   (NGC scale)
    ... --repeat 5 --json rebuild.json

Removes what it made: its tags, and the cached stages of its builds (by their keys; only while no
other build on this host is at work on the engine, as `composer cache clear`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

if __package__ in (None, ""):  # run as a script (python benchmarks/X.py): the project root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import docker

from benchmarks._leftovers import remove_new_untagged, untagged
from composer.core.units import human_size

ROOT = Path(__file__).resolve().parent.parent
BENCH_KEY = "triton-composer.bench"
PINS = ("six==1.16.0", "idna==3.10", "certifi==2024.8.30")
GOALS = {"unchanged_small": 3.0, "unchanged_ngc": 10.0, "pin_ratio": 0.4}


KEYS: set[str] = set()  # the composition keys of the benchmark's builds: their cached stages go at its end
KEY_LINE = re.compile(r"=<stage> ([0-9a-f]{16})\)")


def _run(args: list[str], env: dict) -> tuple[float, int, str]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "composer", *args], cwd=ROOT, env=env, capture_output=True, text=True)
    KEYS.update(KEY_LINE.findall(done.stderr))
    return time.monotonic() - started, done.returncode, done.stdout + done.stderr


def _remove_cached_stages() -> None:
    """The build cache the benchmark's builds made (by their keys), as `composer cache clear` removes
    it: only while no build on this host is at work on the engine (the default state's lock)."""
    from composer.assembly.cache import clear
    from composer.engine.connect import connect

    os.environ.pop("COMPOSER_STATE_DIR", None)
    done = clear(connect(), only=lambda e: e.kind == "cached stage" and (e.key or "").rpartition(" ")[2] in KEYS)
    kept = [why for _, why in done.kept]
    print(f"removed {len(done.removed)} cached stages of its own ({human_size(done.freed)})"
          + (f"; kept {len(kept)}: {kept[0]}" if kept else ""), flush=True)


def _check(what: str, code: int, output: str) -> None:
    if code != 0:
        tail = "\n    | ".join(output.strip().splitlines()[-8:])
        raise SystemExit(f"{what} failed (exit {code}):\n    | {tail}")


MODEL_PY = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() + 1)])
                for r in requests]
"""
CONFIG = ('backend: "python"\nmax_batch_size: 0\ninput [ { name: "X" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
          'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 3 ] } ]\n')


def _model_repository(folder: Path, models: int) -> Path:
    """A repository of `models` python models (X + 1), named plus_one_N."""
    repo = folder / f"models-{models}"
    shutil.rmtree(repo, ignore_errors=True)
    for index in range(models):
        model = repo / f"plus_one_{index}"
        (model / "1").mkdir(parents=True)
        (model / "config.pbtxt").write_text(CONFIG)
        (model / "1" / "model.py").write_text(MODEL_PY)
    return repo


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default="localhost/standin", help="where the 24.09 full and min images are")
    parser.add_argument("--base", default="min", choices=("min", "pruned"))
    parser.add_argument("--repeat", type=int, default=5, help="unchanged rebuilds to take the median of")
    parser.add_argument("--json", metavar="FILE", help="write the figures as JSON too")
    args = parser.parse_args()
    client = docker.from_env(timeout=600)
    root = client.info()["DockerRootDir"]
    free = shutil.disk_usage(root if os.path.exists(root) else "/").free
    needed = 25e9 if "ngc" in args.source else 4e9
    print(f"free at {root}: {human_size(free)}; this benchmark needs about {human_size(needed)}", flush=True)
    if free < needed:
        print("not enough room: free some space (composer cache clear, docker image ls)", file=sys.stderr)
        return 1
    scale = "ngc" if "ngc" in args.source else "small"
    state = Path(tempfile.mkdtemp(prefix="rebuild-bench-state-"))
    scratch = Path(tempfile.mkdtemp(prefix="rebuild-bench-"))
    env = {**os.environ, "COMPOSER_STATE_DIR": str(state)}
    bench = f"{BENCH_KEY}={uuid.uuid4().hex[:12]}"
    tag = f"triton-composer-bench/rebuild:{uuid.uuid4().hex[:8]}"
    common = ["build", "--registry", args.source, "--version", "24.09", "-b", "onnxruntime", "-b", "python",
              "--base", args.base, "--label", bench, "--tag", tag]
    figures: dict = {"scale": scale, "base": args.base}
    before = untagged(client)
    tags = {tag}
    try:
        seconds, code, out = _run([*common, "--no-cache"], env)
        _check("the cold build", code, out)
        figures["cold"] = round(seconds, 1)
        print(f"cold build: {seconds:.1f} s", flush=True)
        times = []
        for _ in range(args.repeat):
            seconds, code, out = _run(common, env)
            _check("an unchanged rebuild", code, out)
            if "unchanged:" not in out:
                raise SystemExit("an unchanged rebuild built again:\n" + out[-2000:])
            times.append(seconds)
        figures["unchanged"] = {"median": round(statistics.median(times), 2), "runs": [round(t, 2) for t in times]}
        print(f"unchanged rebuild: median {statistics.median(times):.2f} s of {times}", flush=True)
        pins = []
        for pin in PINS:
            seconds, code, out = _run([*common, "--pip", pin], env)
            _check(f"a rebuild with --pip {pin}", code, out)
            written = sum(1 for line in out.splitlines() if line.startswith("writing layer"))
            held = sum(1 for line in out.splitlines() if "the engine holds it already" in line)
            pins.append({"pin": pin, "seconds": round(seconds, 1), "layers_written": written, "layers_held": held})
            print(f"one pin added ({pin}): {seconds:.1f} s, {written} layers written, {held} held", flush=True)
        figures["one_pin"] = {"median": statistics.median(p["seconds"] for p in pins), "runs": pins,
                              "ratio": round(statistics.median(p["seconds"] for p in pins) / figures["cold"], 3)}
        one = _model_repository(scratch, 1)
        two = _model_repository(scratch, 2)
        seconds, code, out = _run([*common, "--bake-models", str(one)], env)
        _check("a build with baked models", code, out)
        seconds, code, out = _run([*common, "--bake-models", str(two)], env)
        _check("a build with one model more", code, out)
        written = [line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("writing layer")]
        figures["one_model"] = {"seconds": round(seconds, 1), "layers_written": written}
        print(f"one model added: {seconds:.1f} s, layers written: {', '.join(written)}", flush=True)
        label = f"org.example.two-at-once={uuid.uuid4().hex[:8]}"  # a selection no build made before
        pair = [f"{tag}-pair-{i}" for i in range(2)]
        tags.update(pair)
        started = time.monotonic()
        processes = [subprocess.Popen([sys.executable, "-m", "composer", *common[:-2], "--tag", t, "--label", label,
                                       "--json"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True) for t in pair]
        outputs = [p.communicate() for p in processes]
        for _out, err in outputs:
            KEYS.update(KEY_LINE.findall(err))
        seconds = time.monotonic() - started
        codes = [p.returncode for p in processes]
        ids = [json.loads(out)["images"][0].get("image_id") if code == 0 else None
               for code, (out, _err) in zip(codes, outputs)]
        holds = [t for image in client.api.images() for t in image.get("RepoTags") or [] if "triton-composer/hold" in t]
        runs = list((state / "runs").glob("*.json")) if (state / "runs").is_dir() else []
        figures["two_at_once"] = {"seconds": round(seconds, 1), "exits": codes, "same_image": len(set(ids)) == 1,
                                  "holds_left": holds, "run_records_left": len(runs)}
        print(f"two builds of one new selection at once: {seconds:.1f} s, exits {codes}, the same image: "
              f"{len(set(ids)) == 1}, holds left {holds}, run records left {len(runs)}", flush=True)
    finally:
        for name in tags:
            try:
                client.images.remove(name)
            except docker.errors.APIError:
                pass
        _remove_cached_stages()
        remove_new_untagged(client, before)
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(state, ignore_errors=True)
    goal = GOALS[f"unchanged_{scale}"]
    print()
    print(f"{'row':<28}{'seconds':>9}  goal")
    print(f"{'cold build':<28}{figures['cold']:>9.1f}")
    print(f"{'unchanged rebuild (median)':<28}{figures['unchanged']['median']:>9.2f}  <= {goal:g} s")
    print(f"{'one --pip pin added':<28}{figures['one_pin']['median']:>9.1f}  <= {GOALS['pin_ratio']}x cold "
          f"({figures['one_pin']['ratio']}x)")
    print(f"{'one model added':<28}{figures['one_model']['seconds']:>9.1f}")
    print(f"{'two at once, one selection':<28}{figures['two_at_once']['seconds']:>9.1f}  both pass: "
          f"{figures['two_at_once']['exits'] == [0, 0]}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    met = (figures["unchanged"]["median"] <= goal and figures["one_pin"]["ratio"] <= GOALS["pin_ratio"]
           and figures["two_at_once"]["exits"] == [0, 0] and figures["two_at_once"]["same_image"]
           and not figures["two_at_once"]["holds_left"])
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
