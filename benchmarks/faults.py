"""Faults at NGC scale (issue 38): what a fault leaves behind, and whether the next run passes.

Each row runs the real command line (`python -m composer build ...`) against the 24.09 stand-ins,
injects one fault when the command's progress reaches a phase, and then reads the engine, the
registry and /tmp:

  fault      SIGINT or SIGTERM to the composer; the registry stopped (and started again, or not)
  phase      the progress line that triggered it (probe, pruned base, engine build, layers, smoke
             test, push)
  exit       the composer's exit code (130 SIGINT, 143 SIGTERM, 1 a registry that stays away, 0 a
             registry back in time) and whether it ended with one line (no traceback)
  tag moved  the target tag is set to a sentinel image before the row: a failed run must leave it
             there; a row that recovers must move it to an image that serves; a push row: the
             registry's tag (the local one moves when the smoke test passed, before the push)
  leftovers  images and containers carrying the run's id (its stages, run images, pruned-base
             stages, the smoke test's container), and whatever is left in the temporary folder the
             row gives it (TMPDIR): read by the run's id, so other work on the engine is not counted
  re-run     the same command again with no fault: exit 0 (a push row also checks every blob the
             manifest names is in the registry)

On a second engine of the benchmark's own (its data root a 3 GB loop-mounted filesystem, the small
stand-ins loaded): the engine restarted in the middle of a build (leftovers read after the next
run, which removes what a dead run left), and the disk filled in the middle of one (the re-run
after the filler is removed). Then `composer mirror` registry to registry (small stand-ins): SIGINT
in the middle of a blob, the target registry restarted, and gone; no target tag may name a
missing blob, and the re-run moves only what is missing.

Then three builds at once on the one engine (two NGC-scale pruned selections and one small),
against the same three one after another, each mode starting with their pruned bases removed.

    .venv/bin/python benchmarks/faults.py                       (needs `triton-standin --scale ngc`)
    .venv/bin/python benchmarks/faults.py --source localhost/standin   (the small stand-ins: a check)
    ... --only interrupts,registry,engine,mirror,concurrency   --json faults.json

Checks free space first and says what it needs; removes what it made: its tags, the registry's
storage, the pruned bases it made, and what its builds left untagged (benchmarks/_leftovers.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

import docker
import requests


if __package__ in (None, ""):  # run as a script (python benchmarks/X.py): the project root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.fleet_images import _start_registry_on, _stop
from benchmarks._leftovers import remove_new_untagged, untagged
from composer.core.units import human_size

ROOT = Path(__file__).resolve().parent.parent
NGC_SOURCE = "localhost/standin-ngc"
SMALL_SOURCE = "localhost/standin"
BENCH_KEY = "triton-composer.bench"  # the user label the benchmark gives its builds
# Label keys the composer puts on what it leaves on an engine (stages, run images, pruned-base stages).
COMPOSER_KEYS = ("org.triton-composer.run", "org.triton-composer.stage")  # cached stages are build cache, by content
PRUNED_REPO = "triton-composer/pruned-base"
NEEDED = {NGC_SOURCE: 25e9, SMALL_SOURCE: 5e9}
GROUPS = ("interrupts", "registry", "engine", "mirror", "concurrency", "races")
RUN_LINE = re.compile(r"\(run ([0-9a-f]{16}):")  # the build's progress names its run id


@dataclass
class Row:
    fault: str
    phase: str
    exit: int | None = None
    one_line: bool = False
    last_line: str = ""
    tag_moved: str = ""  # "no" (right for a failure), "yes" (right for a recovery), or what went wrong
    leftovers: list[str] = field(default_factory=list)
    rerun: str = ""
    seconds: float = 0.0
    clean: bool = False
    scale: str = "ngc"  # "small" for the rows this machine cannot hold at NGC scale (a second engine)
    left_until_next_run: int | None = None  # what a dead run left for the next one to remove


# -- what the engine and /tmp hold --------------------------------------------------------------


def _left_by(client, run: str | None, tmp: Path) -> list[str]:
    """What the run left: images and containers carrying its run id (its stages, its run images, its
    smoke test's container), and anything in the temporary folder it was given (TMPDIR). Read by the
    run's id, not by difference, so other work on the engine at the same time is not counted."""
    left: list[str] = []
    if run:
        for key in COMPOSER_KEYS:
            for image in client.api.images(all=True, filters={"label": key}):
                value = (image.get("Labels") or {}).get(key, "")
                if value == run or value.endswith(f" {run}"):
                    left.append(f"image {image['Id'][:19]} ({key}={value})")
        for container in client.api.containers(all=True, filters={"label": f"org.triton-composer.run={run}"}):
            left.append(f"container {container['Id'][:12]}")
        for image in client.api.images():  # its hold on the image it made
            left += [f"hold {tag}" for tag in image.get("RepoTags") or [] if tag.endswith(f"triton-composer/hold:{run}")]
    left += [f"temp {p}" for p in sorted(tmp.iterdir())] if tmp.exists() else []
    return sorted(set(left))


def _image_id(client, ref: str) -> str | None:
    try:
        return client.images.get(ref).id
    except docker.errors.ImageNotFound:
        return None


# -- one row -------------------------------------------------------------------------------------


def _composer(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "composer", *args]


def _run(command: list[str], trigger: re.Pattern | None, action, delay: float, log,
         tmp: Path | None = None, env: dict | None = None) -> tuple[int, list[str], bool]:
    """Run `command` (its TMPDIR `tmp`, `env` added); when a line matches `trigger`, wait `delay` s
    and call action(process) once."""
    env = {**os.environ, **(env or {}), **({"TMPDIR": str(tmp)} if tmp else {})}
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               bufsize=1, start_new_session=True, env=env)
    lines: list[str] = []
    fired, firing = False, None
    for line in process.stdout:
        line = line.rstrip("\n")
        lines.append(line)
        log(f"    | {line}")
        if not fired and trigger is not None and trigger.search(line):
            fired = True

            def fire():
                time.sleep(delay)
                if process.poll() is None:
                    log(f"    >> fault: {action.__doc__}")
                    action(process)
            firing = threading.Thread(target=fire, daemon=True)
            firing.start()
    code = process.wait()
    if firing is not None:  # the fault done (an engine back up) before anything is read
        firing.join()
    return code, lines, fired


def _sigint(process):
    """SIGINT to the composer"""
    process.send_signal(signal.SIGINT)


def _sigterm(process):
    """SIGTERM to the composer"""
    process.send_signal(signal.SIGTERM)


class Registry:
    """Debian's docker-registry on 127.0.0.1, its storage in a folder of ours; stopped and started again."""

    def __init__(self, root: Path):
        self.root = root
        self.port = 0
        self.pid: int | None = None
        root.mkdir(parents=True, exist_ok=True)
        (root / "config.yml").write_text(
            "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: " + str(root / "data") +
            "\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:0\n")

    def start(self) -> None:
        if not self.port:
            import socket
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                self.port = sock.getsockname()[1]
        self.port, self.pid = _start_registry_on(self.root, self.port)

    def stop(self) -> None:
        if self.pid is not None:
            _stop(self.pid)
            self.pid = None

    def wipe(self) -> None:
        self.stop()
        shutil.rmtree(self.root / "data", ignore_errors=True)
        self.start()

    def missing_blobs(self, repository: str, tag: str) -> list[str] | None:
        """The blobs the tag's manifest names that the registry lacks; None when the tag is absent."""
        url = f"http://127.0.0.1:{self.port}/v2/{repository}"
        accept = ", ".join(("application/vnd.oci.image.manifest.v1+json",
                            "application/vnd.docker.distribution.manifest.v2+json"))
        got = requests.get(f"{url}/manifests/{tag}", headers={"Accept": accept}, timeout=30)
        if got.status_code == 404:
            return None
        got.raise_for_status()
        manifest = got.json()
        digests = [manifest["config"]["digest"], *(layer["digest"] for layer in manifest["layers"])]
        return [d for d in digests if requests.head(f"{url}/blobs/{d}", timeout=30).status_code != 200]


def fault_row(client, fault: str, phase: str, command: list[str], tag: str, sentinel: str, trigger: str,
              action, *, delay: float = 0.0, recovers: bool = False, registry: Registry | None = None,
              repository: str = "", log=print, env: dict | None = None, expected: int | None = None,
              before_rerun=None, left_until_next_run: bool = False) -> Row:
    """One fault: the tag set to `sentinel`, the command run and `action` fired at `trigger`, then
    the tag, the registry, the engine and TMPDIR read, and the command run again. `expected` is the
    exit the fault must give (default: 130/143 for a signal, 0 for a recovery, else 1);
    `before_rerun()` frees what the fault took (a disk's filler); with `left_until_next_run` the
    leftovers are read after the re-run, whose start removes what a dead run left (an engine
    restart leaves its stages behind: nothing of the run is alive to remove them)."""
    row = Row(fault, phase)
    client.images.get(sentinel).tag(tag)
    before_id = _image_id(client, tag)
    tmp = Path(tempfile.mkdtemp(prefix="faults-row-"))
    started = time.monotonic()
    code, lines, fired = _run(command, re.compile(trigger), action, delay, log, tmp, env)
    runs = [m.group(1) for line in lines for m in [RUN_LINE.search(line)] if m]
    row.seconds = round(time.monotonic() - started, 1)
    row.exit = code
    tail = [line for line in lines if line.strip()]
    row.last_line = tail[-1] if tail else ""
    row.one_line = not any(line.startswith("Traceback") for line in lines)
    if not fired:
        row.tag_moved = "fault not injected: the phase never came"
    after_id = _image_id(client, tag)
    if registry is not None and registry.pid is None:
        registry.start()  # a registry stopped for good is read again, its storage as the fault left it
    if recovers:
        row.tag_moved = "yes" if code == 0 and after_id != before_id else f"no (exit {code})"
        if registry is not None and code == 0:
            missing = registry.missing_blobs(repository, "1")
            if missing:
                row.tag_moved += f"; the registry's tag names {len(missing)} missing blob(s)"
    elif registry is not None:
        # A push starts once the image passed its smoke test and was tagged here: the tag that must
        # not move is the registry's.
        missing = registry.missing_blobs(repository, "1")
        row.tag_moved = "no" if missing is None else \
            "MOVED: the registry's tag exists" + (f" naming {len(missing)} missing blob(s)" if missing else "")
    else:
        row.tag_moved = "no" if after_id == before_id else f"MOVED to {after_id}"
    time.sleep(1)
    run = runs[-1] if runs else None
    row.leftovers = _left_by(client, run, tmp)
    if left_until_next_run:
        row.left_until_next_run = len(row.leftovers)
    shutil.rmtree(tmp, ignore_errors=True)
    if before_rerun is not None:
        before_rerun()
    code, lines, _ = _run(command, None, None, 0, log, env=env)
    if left_until_next_run:
        row.leftovers = _left_by(client, run, tmp)
    row.rerun = "passes" if code == 0 else f"exit {code}: {lines[-1] if lines else ''}"
    if code == 0 and registry is not None:
        missing = registry.missing_blobs(repository, "1")
        if missing:
            row.rerun += f" (the tag names {len(missing)} missing blob(s))"
    if expected is None:
        expected = {"SIGINT": 130, "SIGTERM": 143}.get(fault.split()[0], 0 if recovers else 1)
    row.clean = (fired and code == 0 and row.exit == expected and row.one_line and not row.leftovers
                 and row.tag_moved in ("no", "yes"))
    client.images.get(sentinel).tag(tag)  # the next row starts from the sentinel again
    return row


# -- the groups ----------------------------------------------------------------------------------


def _build_args(source: str, tag: str, *, base: str = "pruned", backends=("onnxruntime", "python"),
                push: str | None = None) -> list[str]:
    args = ["build", "--registry", source, "--version", "24.09", "--base", base, "--tag", tag,
            "--label", f"{BENCH_KEY}=faults"]
    for backend in backends:
        args += ["--backend", backend]
    if push:
        args += ["--push", push, "--push-via", "composer"]
    return _composer(args)


def interrupt_rows(client, source: str, sentinel: str, log) -> list[Row]:
    tag = f"triton-composer-bench/faults:{uuid.uuid4().hex[:8]}"
    command = _build_args(source, tag)
    # The pruned base's row first: its base is made in it (unless the engine held it before the
    # benchmark, which the row then says); its re-run makes the base the later rows reuse.
    phases = [
        ("SIGINT", "pruned base", r"pruned base: making", _sigint, 5.0),
        ("SIGINT", "probe", r"looking inside", _sigint, 1.0),
        ("SIGINT", "engine build", r"build context:", _sigint, 8.0),
        ("SIGTERM", "engine build", r"build context:", _sigterm, 8.0),
        ("SIGINT", "image layers", r"writing layer", _sigint, 0.5),
        ("SIGINT", "smoke test", r"starting tritonserver", _sigint, 2.0),
    ]
    rows = []
    try:
        for fault, phase, trigger, action, delay in phases:
            log(f"== {fault} during {phase}")
            rows.append(fault_row(client, fault, phase, command, tag, sentinel, trigger, action, delay=delay, log=log))
    finally:
        _untag(client, tag)
    return rows


def registry_rows(client, source: str, sentinel: str, scratch: Path, log) -> list[Row]:
    registry = Registry(scratch / "registry")
    registry.start()
    tag = f"triton-composer-bench/faults:{uuid.uuid4().hex[:8]}"
    repository = "faults/triton"
    rows = []

    def restart(process):
        """the registry stopped for 5 s, then started again"""
        registry.stop()
        time.sleep(5)
        registry.start()

    def gone(process):
        """the registry stopped for good"""
        registry.stop()

    try:
        for fault, phase, trigger, action, delay, recovers in (
                ("SIGINT", "push", r"blob .*: uploaded", _sigint, 0.0, False),
                ("registry restarted", "push", r"blob .*: uploaded", restart, 0.0, True),
                ("registry gone", "push", r"through the composer's registry client", gone, 0.5, False)):
            registry.wipe()
            log(f"== {fault} during {phase}")
            command = _build_args(source, tag, push=f"127.0.0.1:{registry.port}/{repository}:1")
            rows.append(fault_row(client, fault, phase, command, tag, sentinel, trigger, action, delay=delay,
                                  recovers=recovers, registry=registry, repository=repository, log=log))
    finally:
        registry.stop()
        _untag(client, tag)
    return rows


ENGINE_SLOT = 246  # the second engine's addresses (172.17.246.0/24; the tests' is 247)
DISK = "3G"  # its data root: room for the small stand-ins (1.3 GB) and one build, not two


def engine_rows(sentinel: str, scratch: Path, log) -> list[Row]:
    """The engine restarted in the middle of a build, and its disk filled in the middle of one:
    on a second engine of the benchmark's own, its data root a 3 GB loop-mounted filesystem, with
    the small 24.09 stand-ins loaded. (At NGC scale that engine would hold 26 GB of stand-ins beside
    the first engine's: more than this machine has free; these rows are small, and say so.)"""
    from triton_standins.engines import Dockerd, unmount_under

    image, mount = scratch / "disk.ext4", scratch / "disk"
    subprocess.run(["truncate", "-s", DISK, str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
    mount.mkdir()
    subprocess.run(["mount", "-o", "loop", str(image), str(mount)], check=True)
    dockerd, rows = None, []
    filler = mount / "filler"
    try:
        dockerd = Dockerd(mount / "dockerd", slot=ENGINE_SLOT).start()
        dockerd.load_from(None, [f"{SMALL_SOURCE}/tritonserver:24.09-py3", sentinel])
        client = docker.DockerClient(base_url=dockerd.host, timeout=600)
        env = {"DOCKER_HOST": dockerd.host}
        tag = f"triton-composer-bench/faults:{uuid.uuid4().hex[:8]}"
        command = _build_args(SMALL_SOURCE, tag, base="min", backends=("python",))

        def restart(process):
            """the engine stopped (SIGTERM to dockerd) and started again 3 s later"""
            dockerd.restart(pause=3.0)

        def fill(process):
            """the disk filled by another writer, 80 MB left"""
            stat = os.statvfs(mount)
            subprocess.run(["fallocate", "-l", str(stat.f_bavail * stat.f_frsize - 80 * 1000 ** 2), str(filler)],
                           check=True)

        log("== engine restarted during engine build (second engine, small stand-ins)")
        rows.append(fault_row(client, "engine restarted", "engine build", command, tag, sentinel, r"build context:",
                              restart, delay=8.0, log=log, env=env, expected=1, left_until_next_run=True))
        log("== disk full during engine build (second engine on a 3 GB filesystem, small stand-ins)")
        rows.append(fault_row(client, "disk full", "engine build", command, tag, sentinel, r"build context:", fill,
                              delay=2.0, log=log, env=env, expected=1,
                              before_rerun=lambda: filler.unlink(missing_ok=True)))
        for row in rows:
            row.scale = "small"
        _untag(client, tag)
    finally:
        filler.unlink(missing_ok=True)
        if dockerd is not None:
            dockerd.stop()
        unmount_under(mount)
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)
        image.unlink(missing_ok=True)
    return rows


MIRRORED = ("24.09-py3", "24.09-py3-min")
ALREADY = re.compile(r"([0-9.]+ [kMGT]?B) already there")


def mirror_rows(client, scratch: Path, log) -> list[Row]:
    """`composer mirror`, registry to registry: SIGINT in the middle of a blob, the target registry
    restarted, and gone. The small stand-ins (1.3 GB) in a registry of the benchmark's: the
    NGC-scale ones would take 26 GB in each of two registries, more than this machine has free."""
    source, target = Registry(scratch / "mirror-source"), Registry(scratch / "mirror-target")
    rows: list[Row] = []
    try:
        source.start()
        prefix = f"127.0.0.1:{source.port}/standin"
        for name in MIRRORED:
            ref = f"{prefix}/tritonserver:{name}"
            client.images.get(f"{SMALL_SOURCE}/tritonserver:{name}").tag(ref)
            try:
                for event in client.api.push(ref, stream=True, decode=True):
                    if "error" in event:
                        raise RuntimeError(f"cannot push {ref}: {event['error']}")
            finally:
                _untag(client, ref)
        command = _composer(["mirror", "--registry", prefix, "--version", "24.09",
                             "--to", f"127.0.0.1:{{port}}/mirror"])

        def restart(process):
            """the target registry stopped for 5 s, then started again"""
            target.stop()
            time.sleep(5)
            target.start()

        def gone(process):
            """the target registry stopped for good"""
            target.stop()

        for fault, action, delay, recovers in (("SIGINT", _sigint, 0.2, False),
                                               ("registry restarted", restart, 0.0, True),
                                               ("registry gone", gone, 0.0, False)):
            log(f"== {fault} during mirror (small stand-ins)")
            rows.append(mirror_row(fault, command, action, delay, recovers, target, log))
    finally:
        source.stop()
        target.stop()
    return rows


def mirror_row(fault: str, command: list[str], action, delay: float, recovers: bool, target: Registry,
               log) -> Row:
    """One mirror fault: the target wiped, the mirror run and the fault fired at its first blob;
    then no tag of the target may name a blob it lacks (a tag of an image copied whole before the
    fault is right: the re-run finds it there), nothing left in TMPDIR, and the re-run moves only
    what is missing."""
    row = Row(fault, "mirror", scale="small")
    target.wipe()
    command = [part.replace("{port}", str(target.port)) for part in command]
    tmp = Path(tempfile.mkdtemp(prefix="faults-row-"))
    started = time.monotonic()
    code, lines, fired = _run(command, re.compile(r"blob .*: copied"), action, delay, log, tmp)
    row.seconds = round(time.monotonic() - started, 1)
    row.exit = code
    tail = [line for line in lines if line.strip()]
    row.last_line = tail[-1] if tail else ""
    row.one_line = not any(line.startswith("Traceback") for line in lines)
    if target.pid is None:
        target.start()  # read again, its storage as the fault left it
    tags = {name: target.missing_blobs("mirror/tritonserver", name) for name in MIRRORED}
    broken = [name for name, missing in tags.items() if missing]
    present = [name for name, missing in tags.items() if missing is not None]
    if broken:
        row.tag_moved = f"MOVED: {', '.join(broken)} name(s) missing blobs"
    elif recovers:
        row.tag_moved = "yes" if code == 0 and len(present) == len(MIRRORED) else f"no (exit {code})"
    else:
        row.tag_moved = "no" if not present else "no" + f" (only {', '.join(present)}, copied whole first)"
    row.leftovers = [f"temp {p}" for p in sorted(tmp.iterdir())]
    shutil.rmtree(tmp, ignore_errors=True)
    code, lines, _ = _run(command, None, None, 0, log)
    there = [m.group(1) for line in lines for m in [ALREADY.search(line)] if m]
    row.rerun = ("passes (" + " + ".join(there) + " already there)") if code == 0 else \
        f"exit {code}: {lines[-1] if lines else ''}"
    tags = {name: target.missing_blobs("mirror/tritonserver", name) for name in MIRRORED}
    if code == 0 and any(missing is None or missing for missing in tags.values()):
        row.rerun += " but a tag is absent or names missing blobs"
    expected = {"SIGINT": 130}.get(fault.split()[0], 0 if recovers else 1)
    row.clean = (fired and code == 0 and row.exit == expected and row.one_line and not row.leftovers
                 and row.tag_moved.startswith(("no", "yes")) and not row.rerun.endswith("blobs"))
    return row


def concurrency(client, source: str, log) -> dict:
    """Three builds one after another, then at once, each mode from no pruned base of theirs."""
    selections = [(source, ("onnxruntime", "python"), "pruned"), (source, ("pytorch", "python"), "pruned"),
                  (SMALL_SOURCE, ("python",), "min")]
    figures: dict = {}
    bases_before = _bases(client)
    for mode in ("sequential", "concurrent"):
        _remove_new_bases(client, bases_before)
        tags = [f"triton-composer-bench/faults:{mode}-{i}" for i in range(3)]
        commands = [_build_args(src, tag, base=base, backends=backends)
                    for (src, backends, base), tag in zip(selections, tags)]
        log(f"== three builds, {mode}")
        started = time.monotonic()
        if mode == "sequential":
            codes = [subprocess.run(c, cwd=ROOT, capture_output=True, text=True).returncode for c in commands]
        else:
            processes = [subprocess.Popen(c, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                         for c in commands]
            outputs = [p.communicate()[0] for p in processes]
            codes = [p.returncode for p in processes]
            for code, output in zip(codes, outputs):
                if code:
                    log("    | " + "\n    | ".join(output.splitlines()[-5:]))
        seconds = time.monotonic() - started
        figures[mode] = {"seconds": round(seconds, 1), "exits": codes,
                         "tagged": [_image_id(client, t) is not None for t in tags]}
        log(f"   {mode}: {seconds:.0f} s, exits {codes}")
        for tag in tags:
            _untag(client, tag)
    _remove_new_bases(client, bases_before)
    figures["ratio"] = round(figures["concurrent"]["seconds"] / figures["sequential"]["seconds"], 3)
    return figures


def races(client, rounds: int, log) -> dict:
    """Issue 44: three builds at once on one engine (two of one pruned selection, one on the min
    base, small stand-ins), `rounds` times: their tags removed between rounds (each round composes
    again, two runs loading the very same image id at once), the build cache cleared before every
    fourth round (those rounds build their stages at once too). Every run must pass and leave no
    hold, no run record and no run-labelled image."""
    selections = [("-b", "identity", "-b", "python", "--base", "pruned")] * 2 + [("-b", "python")]
    tags = [f"triton-composer-bench/races:{i}" for i in range(3)]
    failures, leftovers, seconds = [], [], []
    bases_before = _bases(client)
    for round_ in range(rounds):
        if round_ % 4 == 0:
            subprocess.run([sys.executable, "-m", "composer", "cache", "clear"], cwd=ROOT, capture_output=True)
        started = time.monotonic()
        processes = [subprocess.Popen([sys.executable, "-m", "composer", "build", "--registry", SMALL_SOURCE,
                                       "--version", "24.09", *selection, "--tag", tag, "--label", f"{BENCH_KEY}=races"],
                                      cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                     for selection, tag in zip(selections, tags)]
        outputs = [process.communicate()[0] for process in processes]
        seconds.append(time.monotonic() - started)
        for index, (process, output) in enumerate(zip(processes, outputs)):
            if process.returncode != 0:
                failures.append(f"round {round_ + 1}, build {index + 1}: " + (output.strip().splitlines() or ["?"])[-1])
        holds = [t for image in client.api.images() for t in image.get("RepoTags") or [] if "triton-composer/hold:" in t]
        runs = client.api.images(filters={"label": "org.triton-composer.run", "dangling": True})
        leftovers += [f"round {round_ + 1}: hold {h}" for h in holds]
        leftovers += [f"round {round_ + 1}: run-labelled image {i['Id'][:19]}" for i in runs]
        log(f"   round {round_ + 1}: {seconds[-1]:.0f} s, exits {[p.returncode for p in processes]}")
        for tag in tags:
            _untag(client, tag)
    _remove_new_bases(client, bases_before)
    return {"rounds": rounds, "failures": failures, "leftovers": leftovers,
            "median_seconds": round(sorted(seconds)[len(seconds) // 2], 1) if seconds else None}


def _bases(client) -> set[str]:
    return {name for image in client.api.images(PRUNED_REPO) for name in (image.get("RepoTags") or ()) if name.startswith(PRUNED_REPO + ":")}


def _remove_new_bases(client, keep: set[str]) -> None:
    for name in _bases(client) - keep:
        try:
            client.images.remove(name)
        except docker.errors.APIError:
            pass


def _untag(client, tag: str) -> None:
    try:
        client.images.remove(tag)
    except docker.errors.APIError:
        pass


# -- report --------------------------------------------------------------------------------------


def table(rows: list[Row]) -> str:
    head = ("fault", "phase", "scale", "exit", "one line", "tag moved", "leftovers", "re-run", "clean")
    body = [(r.fault, r.phase, r.scale, str(r.exit), "yes" if r.one_line else "no (traceback)", r.tag_moved,
             str(len(r.leftovers)) + ("" if r.left_until_next_run is None else
                                      f" ({r.left_until_next_run} until the next run)"),
             r.rerun, "yes" if r.clean else "NO") for r in rows]
    widths = [max(len(x) for x in column) for column in zip(head, *body)]
    lines = ["  ".join(x.ljust(w) for x, w in zip(line, widths)) for line in (head, *body)]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default=NGC_SOURCE, help="where the 24.09 full and min images are")
    parser.add_argument("--only", default=",".join(GROUPS), help=f"comma-separated: {', '.join(GROUPS)}")
    parser.add_argument("--json", metavar="FILE", help="write the rows and figures as JSON too")
    parser.add_argument("--quiet", action="store_true", help="no command output, only the rows")
    parser.add_argument("--rounds", type=int, default=20, help="rounds of the races group (three builds at once)")
    args = parser.parse_args()
    groups = [g.strip() for g in args.only.split(",") if g.strip()]
    unknown = sorted(set(groups) - set(GROUPS))
    if unknown:
        print(f"--only {','.join(unknown)}: choose from {', '.join(GROUPS)}", file=sys.stderr)
        return 2
    client = docker.from_env(timeout=600)
    root = client.info()["DockerRootDir"]
    free = shutil.disk_usage(root if os.path.exists(root) else "/").free
    needed = NEEDED.get(args.source, 5e9)
    print(f"free at {root}: {human_size(free)}; this benchmark needs about {human_size(needed)}", flush=True)
    if free < needed:
        print("not enough room: free some space (docker image ls, composer's pruned bases)", file=sys.stderr)
        return 1
    sentinel = f"{args.source}/tritonserver:24.09-py3-min"
    log = (lambda line: None) if args.quiet else (lambda line: print(line, flush=True))
    rows: list[Row] = []
    figures: dict = {}
    bases_before = _bases(client)  # the pruned bases the engine held: never removed here
    untagged_before = untagged(client)  # nor the untagged images it held (stand-ins' recipe stages)
    scratch = Path(tempfile.mkdtemp(prefix="faults-bench-"))
    try:
        if "interrupts" in groups:
            rows += interrupt_rows(client, args.source, sentinel, log)
        if "registry" in groups:
            rows += registry_rows(client, args.source, sentinel, scratch, log)
        for row in rows:
            row.scale = "ngc" if args.source == NGC_SOURCE else "small"
        if "engine" in groups:
            rows += engine_rows(f"{SMALL_SOURCE}/tritonserver:24.09-py3-min", scratch, log)
        if "mirror" in groups:
            rows += mirror_rows(client, scratch, log)
        if "concurrency" in groups:
            figures["concurrency"] = concurrency(client, args.source, log)
        if "races" in groups:
            figures["races"] = races(client, args.rounds, log)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        _remove_new_bases(client, bases_before)
        remove_new_untagged(client, untagged_before)
    if rows:
        print(table(rows))
        for row in rows:
            for item in row.leftovers:
                print(f"  left by {row.fault} during {row.phase}: {item}")
            if not row.clean:
                print(f"  {row.fault} during {row.phase}: last line: {row.last_line}")
    if "concurrency" in figures:
        c = figures["concurrency"]
        print(f"three builds at once: {c['concurrent']['seconds']} s against {c['sequential']['seconds']} s one after "
              f"another: {c['ratio']}x (goal <= 1.1); exits {c['concurrent']['exits']}, tags {c['concurrent']['tagged']}")
    if "races" in figures:
        r = figures["races"]
        print(f"three builds at once (two of one selection), {r['rounds']} rounds: {len(r['failures'])} failed runs, "
              f"{len(r['leftovers'])} leftovers; median round {r['median_seconds']} s")
        for line in r["failures"] + r["leftovers"]:
            print(f"  {line}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": [asdict(r) for r in rows], **figures}, indent=1))
    raced = figures.get("races") or {"failures": [], "leftovers": []}
    return 0 if all(r.clean for r in rows) and not raced["failures"] and not raced["leftovers"] else 1


if __name__ == "__main__":
    sys.exit(main())
