"""BuildKit as the builder (issue 45): the same selection built by the engine's builder and by a
buildkitd of the benchmark's own, in one run on one machine, with their image ids side by side.

Rows (each the real command line, `python -m composer build ...`, timed by its wall clock):

  engine cold     --no-cache on the engine's builder, an empty state folder
  buildkit cold   a fresh buildkitd (empty state), an empty state folder, --no-cache (a pruned base
                  made again, on BuildKit): the engine's base images handed over as an OCI layout
                  (written once per image id), every step solved
  buildkit warm   the same buildkitd, an empty state folder again (no recorded image): every step
                  from BuildKit's cache, the stages loaded into the engine again
  buildkit again  the same command and state as the warm row: the recorded image, nothing built
  cache export    a fresh buildkitd, the engine's side emptied (no composed image, pruned base,
                  cached stage or OCI layout of this selection: a fresh CI runner),
                  --builder-cache to a registry of the benchmark's own on 127.0.0.1
  cache import    another fresh buildkitd, the engine's side emptied again, --builder-cache from
                  that registry: the fleet's second runner; the bytes it pulled from the registry
                  (its log's GETs of blobs) beside the cache's size there
  farm, 1 builder four sets (python; onnxruntime+python; identity; identity+python), --no-cache, on a
                  fresh buildkitd, smoke tests included
  farm, 2 builders the same four sets over two fresh buildkitds (--builder twice)

    .venv/bin/python benchmarks/buildkit.py                               (small stand-ins)
    .venv/bin/python benchmarks/buildkit.py --source localhost/standin-ngc --base pruned   (NGC scale)
    .venv/bin/python benchmarks/buildkit.py --base pruned --no-farm       (the builders' rows only)

Starts and stops its buildkitds (scripts/buildkit-service, a folder each; each stopped and its
state removed once its rows are done: a cold builder's snapshots of the stand-ins take GBs);
removes its tags, its state folders (with their OCI layouts) and the cached stages of its builds
(before each farm row too, so both start cold on the engine's side).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the project root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ROOT = Path(__file__).resolve().parent.parent
SERVICE = ROOT / "scripts" / "buildkit-service"
KEY_LINE = re.compile(r"=<stage> ([0-9a-f]{16})\)")
KEYS: set[str] = set()


FARM = {"python": "[python]", "onnx": "[onnxruntime, python]", "identity": "[identity]",
        "identity-python": "[identity, python]"}


def _start(folder: Path, *plain_http: str) -> list[str]:
    started = subprocess.run([str(SERVICE), "start", str(folder), *plain_http], capture_output=True, text=True,
                             timeout=900)
    if started.returncode != 0:
        raise SystemExit(f"buildkitd did not start: {started.stderr.strip()[-500:]}")
    return ["--builder", "buildkit://" + started.stdout.strip()]


def _stop(folder: Path) -> None:
    """Stop a daemon of the benchmark's and remove its state (its snapshots of the stand-ins take GBs)."""
    subprocess.run([str(SERVICE), "stop", str(folder)], capture_output=True, timeout=120)
    shutil.rmtree(folder, ignore_errors=True)


CORES = os.cpu_count() or 1


def _busy_seconds() -> float:
    """CPU seconds the machine spent busy since boot, all cores (/proc/stat: all but idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def _registry(folder: Path) -> tuple[str, int, Path]:
    """Debian's docker-registry on 127.0.0.1 (scripts/registry), logging each response's bytes; its
    host, PID and log."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    folder.mkdir(parents=True)
    config = folder / "config.yml"
    config.write_text(f"version: 0.1\nlog:\n  level: info\n  formatter: json\nstorage:\n  filesystem:\n"
                      f"    rootdirectory: {folder / 'data'}\nhttp:\n  addr: 127.0.0.1:{port}\n")
    log = folder / "registry.log"
    done = subprocess.run([str(ROOT / "scripts" / "registry"), str(port), str(config), str(log)],
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"scripts/registry failed: {done.stderr.strip()[-500:]}")
    return f"127.0.0.1:{port}", int(done.stdout.strip().splitlines()[-1]), log


def _blob_bytes_served(log: Path, start: int) -> int:
    """The bytes of blobs the registry sent (GET) after offset `start` of its log."""
    served = 0
    with open(log, "rb") as lines:
        lines.seek(start)
        for line in lines:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("http.request.method") == "GET" and "/blobs/" in str(entry.get("http.request.uri", "")):
                served += int(entry.get("http.response.written") or 0)
    return served


def _stored(folder: Path) -> int:
    return sum(p.stat().st_size for p in (folder / "data").rglob("*") if p.is_file())


def _empty_engine_side(tags: list[str]) -> None:
    """What a fresh runner's engine lacks: the benchmark's images, the bases it made, the cached
    stages of its builds and BuildKit's copies of the engine's images (cache clear takes those)."""
    for name in reversed(tags):
        subprocess.run(["docker", "image", "rm", name], capture_output=True)
    _remove_cached_stages()


def _farm(folder: Path, source: str, builders: list[str], state: Path, tags: list[str]) -> tuple[float, list[dict]]:
    """The four sets on `builders` in one run: its wall clock and its images."""
    files = []
    for name, backends in FARM.items():
        tag = f"triton-composer-bench/buildkit:{name}-{uuid.uuid4().hex[:8]}"
        tags.append(tag)
        (folder / f"{name}.yaml").write_text(f'version: "24.09"\nregistry: {source}\nbackends: {backends}\n'
                                            f'tag: "{tag}"\n')
        files += ["--set", str(folder / f"{name}.yaml")]
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "composer", "build", *files, *builders, "--no-cache", "--json"],
                          cwd=ROOT, capture_output=True, text=True, env={**os.environ, "COMPOSER_STATE_DIR": str(state)})
    seconds = time.monotonic() - started
    KEYS.update(KEY_LINE.findall(done.stderr))
    if done.returncode != 0:
        tail = "\n    | ".join(done.stderr.strip().splitlines()[-8:])
        raise SystemExit(f"the farm's run failed (exit {done.returncode}):\n    | {tail}")
    return seconds, json.loads(done.stdout)["images"]


def _build(args: list[str], state: Path) -> tuple[float, dict]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "composer", "build", *args, "--json"], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, "COMPOSER_STATE_DIR": str(state)})
    seconds = time.monotonic() - started
    KEYS.update(KEY_LINE.findall(done.stderr))
    if done.returncode != 0:
        tail = "\n    | ".join(done.stderr.strip().splitlines()[-8:])
        raise SystemExit(f"composer build {' '.join(args)} failed (exit {done.returncode}):\n    | {tail}")
    return seconds, json.loads(done.stdout)["images"][0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default="localhost/standin", help="where the 24.09 full and min images are")
    parser.add_argument("--base", default="min", choices=("min", "pruned"))
    parser.add_argument("--no-farm", action="store_true", help="the builders' rows only, not the farm's")
    parser.add_argument("--farm-only", action="store_true", help="the farm's rows only")
    parser.add_argument("--json", metavar="FILE", help="write the figures as JSON too")
    options = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="tc-bkb-", dir="/tmp"))
    tag = f"triton-composer-bench/buildkit:{uuid.uuid4().hex[:8]}"
    selection = ["--registry", options.source, "--version", "24.09", "-b", "onnxruntime", "-b", "python",
                 "--base", options.base, "--tag", tag]
    rows: dict[str, dict] = {}
    tags: list[str] = []  # its tags, and the pruned bases it made (removed after)
    try:
        same = True
        if not options.farm_only:
            builder = _start(folder / "bk")
            plan = (("engine cold", ["--no-cache"], "engine"), ("buildkit cold", [*builder, "--no-cache"], "bk-cold"),
                    ("buildkit warm", builder, "bk-warm"), ("buildkit again", builder, "bk-warm"))
            for name, extra, state in plan:
                seconds, image = _build([*selection, *extra], folder / state)
                if (image.get("pruned_base") or {}).get("reused") is False:
                    tags.append(image["pruned_base"]["tag"])
                rows[name] = {"seconds": round(seconds, 1), "image_id": image["image_id"],
                              "smoke_test": image["smoke_test"]["passed"] if image.get("smoke_test") else None}
                print(f"{name:15} {seconds:7.1f} s  {image['image_id'][:19]}  smoke test passed: "
                      f"{rows[name]['smoke_test']}", flush=True)
            same = len({row["image_id"] for row in rows.values()}) == 1
            cold = rows["engine cold"]["seconds"]
            print(f"one image id from both builders: {same}; BuildKit cold {rows['buildkit cold']['seconds'] / cold:.2f}x "
                  f"the engine's, warm {rows['buildkit warm']['seconds'] / cold:.2f}x", flush=True)
            _stop(folder / "bk")
            host, registry_pid, log = _registry(folder / "registry")
            try:
                cache = ["--builder-cache", f"{host}/bench/buildkit-cache"]
                # Not --no-cache: a fresh daemon with the engine's side emptied is cold already, and BuildKit
                # exports no usable record of a solve's last step that ignored the cache.
                for name, daemon, extra in (("cache export", "c1", []), ("cache import", "c2", [])):
                    _empty_engine_side([tag, *tags])
                    started_at = log.stat().st_size if log.exists() else 0
                    builder = _start(folder / daemon, host)
                    seconds, image = _build([*selection, *builder, *cache, *extra], folder / daemon.replace("c", "state-"))
                    _stop(folder / daemon)
                    if (image.get("pruned_base") or {}).get("reused") is False:
                        tags.append(image["pruned_base"]["tag"])
                    rows[name] = {"seconds": round(seconds, 1), "image_id": image["image_id"],
                                  "smoke_test": image["smoke_test"]["passed"] if image.get("smoke_test") else None,
                                  "pulled_bytes": _blob_bytes_served(log, started_at)}
                    print(f"{name:15} {seconds:7.1f} s  {image['image_id'][:19]}  smoke test passed: "
                          f"{rows[name]['smoke_test']}  pulled from the registry: "
                          f"{rows[name]['pulled_bytes'] / 1e6:.1f} MB", flush=True)
                stored = _stored(folder / "registry")
            finally:
                os.kill(registry_pid, signal.SIGTERM)
            same = len({row["image_id"] for row in rows.values()}) == 1
            ratio = rows["cache import"]["seconds"] / rows["cache export"]["seconds"]
            print(f"a fresh builder from the registry cache: {ratio:.2f}x the first fresh builder's time, "
                  f"{rows['cache import']['pulled_bytes'] / 1e6:.1f} MB pulled of the {stored / 1e6:.1f} MB the cache "
                  f"holds in the registry; one image id from every row: {same}", flush=True)
            rows["cache import"]["registry_bytes"] = stored
        farm: dict[str, dict] = {}
        if options.no_farm:
            if options.json:
                Path(options.json).write_text(json.dumps({"source": options.source, "base": options.base,
                                                          "rows": rows, "same_image_id": same}, indent=2) + "\n")
            return 0 if same else 1
        # Each arm twice on the same builders: fresh (each builder takes in the stand-ins' layout first,
        # at once on this one disk) and warm (a farm's usual state: its builders hold the sources; every
        # step solved again, --no-cache).
        for name, daemons in (("farm, 1 builder", ["f1"]), ("farm, 2 builders", ["f2", "f3"])):
            builders = [flag for daemon in daemons for flag in _start(folder / daemon)]
            for row in (name, f"{name}, warm"):
                _remove_cached_stages()  # each row from scratch on the engine's side too
                busy = _busy_seconds()
                seconds, images = _farm(folder, options.source, builders, folder / row.replace(" ", ""), tags)
                busy = _busy_seconds() - busy
                farm[row] = {"seconds": round(seconds, 1), "images": {i["name"]: i["image_id"] for i in images},
                             "passed": all((i.get("smoke_test") or {}).get("passed") for i in images),
                             "busy_cpu_seconds": round(busy, 1)}
                print(f"{row:22} {seconds:7.1f} s  4 sets, smoke tests passed: {farm[row]['passed']}; the machine's "
                      f"CPUs busy {busy:.1f} s ({busy / seconds / CORES:.0%} of {CORES} cores)", flush=True)
            for daemon in daemons:
                _stop(folder / daemon)
        alike = len({json.dumps(row["images"], sort_keys=True) for row in farm.values()}) == 1
        ratios = {}
        for kind in ("", ", warm"):
            one = farm[f"farm, 1 builder{kind}"]
            ratios[kind] = farm[f"farm, 2 builders{kind}"]["seconds"] / one["seconds"]
            # However the sets are spread, this machine does the one-builder row's CPU work on its cores:
            # a lower bound of any arm's time here (the disk may bind sooner).
            floor = max(one["busy_cpu_seconds"] / CORES / one["seconds"], 0.5)
            farm[f"cpu_floor_ratio{kind.replace(', ', '_')}"] = round(floor, 2)
            print(f"four sets over two {'warm' if kind else 'fresh'} builders: {ratios[kind]:.2f}x one builder's "
                  f"time; this machine's CPU floor {floor:.2f}x (the one-builder row's busy CPU time over {CORES} "
                  f"cores)", flush=True)
        print(f"the same four image ids in every farm row: {alike}", flush=True)
        if options.json:
            Path(options.json).write_text(json.dumps({"source": options.source, "base": options.base,
                                                      "rows": rows, "same_image_id": same, "farm": farm,
                                                      "farm_ratio": round(ratios[""], 2),
                                                      "farm_ratio_warm": round(ratios[", warm"], 2)},
                                                     indent=2) + "\n")
        return 0 if same and alike else 1
    finally:
        for daemon in ("bk", "c1", "c2", "f1", "f2", "f3"):
            _stop(folder / daemon)
        for name in (tag, *tags):
            subprocess.run(["docker", "image", "rm", name], capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)
        _remove_cached_stages()


def _remove_cached_stages() -> None:
    from composer.assembly.cache import clear
    from composer.engine.connect import connect

    done = clear(connect(), only=lambda e: e.kind == "cached stage" and (e.key or "").rpartition(" ")[2] in KEYS)
    print(f"removed {len(done.removed)} cached stages of its own", flush=True)


if __name__ == "__main__":
    sys.exit(main())
