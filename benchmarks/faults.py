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

Then three builds at once on the one engine (two NGC-scale pruned selections and one small),
against the same three one after another, each mode starting with their pruned bases removed.

    .venv/bin/python benchmarks/faults.py                       (needs `triton-standin --scale ngc`)
    .venv/bin/python benchmarks/faults.py --source localhost/standin   (the small stand-ins: a check)
    ... --only interrupts,registry,concurrency   --json faults.json

Checks free space first and says what it needs; removes what it made: its tags, the registry's
storage, the pruned bases it made.
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
from composer.core.units import human_size

ROOT = Path(__file__).resolve().parent.parent
NGC_SOURCE = "localhost/standin-ngc"
SMALL_SOURCE = "localhost/standin"
BENCH_KEY = "triton-composer.bench"  # the user label the benchmark gives its builds
# Label keys the composer puts on what it leaves on an engine (stages, run images, pruned-base stages).
COMPOSER_KEYS = ("org.triton-composer.stage-of", "org.triton-composer.run", "org.triton-composer.stage")
PRUNED_REPO = "triton-composer/pruned-base"
NEEDED = {NGC_SOURCE: 25e9, SMALL_SOURCE: 5e9}
GROUPS = ("interrupts", "registry", "concurrency")
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
        for container in client.api.containers(all=True, filters={"label": f"{COMPOSER_KEYS[1]}={run}"}):
            left.append(f"container {container['Id'][:12]}")
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
         tmp: Path | None = None) -> tuple[int, list[str], bool]:
    """Run `command` (its TMPDIR `tmp`); when a line matches `trigger`, wait `delay` s and call
    action(process) once."""
    env = {**os.environ, **({"TMPDIR": str(tmp)} if tmp else {})}
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               bufsize=1, start_new_session=True, env=env)
    lines: list[str] = []
    fired = False
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
            threading.Thread(target=fire, daemon=True).start()
    return process.wait(), lines, fired


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
              repository: str = "", log=print) -> Row:
    row = Row(fault, phase)
    client.images.get(sentinel).tag(tag)
    before_id = _image_id(client, tag)
    tmp = Path(tempfile.mkdtemp(prefix="faults-row-"))
    started = time.monotonic()
    code, lines, fired = _run(command, re.compile(trigger), action, delay, log, tmp)
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
    row.leftovers = _left_by(client, runs[-1] if runs else None, tmp)
    shutil.rmtree(tmp, ignore_errors=True)
    code, lines, _ = _run(command, None, None, 0, log)
    row.rerun = "passes" if code == 0 else f"exit {code}: {lines[-1] if lines else ''}"
    if code == 0 and registry is not None:
        missing = registry.missing_blobs(repository, "1")
        if missing:
            row.rerun += f" (the tag names {len(missing)} missing blob(s))"
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
    head = ("fault", "phase", "exit", "one line", "tag moved", "leftovers", "re-run", "clean")
    body = [(r.fault, r.phase, str(r.exit), "yes" if r.one_line else "no (traceback)", r.tag_moved,
             str(len(r.leftovers)), r.rerun, "yes" if r.clean else "NO") for r in rows]
    widths = [max(len(x) for x in column) for column in zip(head, *body)]
    lines = ["  ".join(x.ljust(w) for x, w in zip(line, widths)) for line in (head, *body)]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default=NGC_SOURCE, help="where the 24.09 full and min images are")
    parser.add_argument("--only", default=",".join(GROUPS), help=f"comma-separated: {', '.join(GROUPS)}")
    parser.add_argument("--json", metavar="FILE", help="write the rows and figures as JSON too")
    parser.add_argument("--quiet", action="store_true", help="no command output, only the rows")
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
    scratch = Path(tempfile.mkdtemp(prefix="faults-bench-"))
    try:
        if "interrupts" in groups:
            rows += interrupt_rows(client, args.source, sentinel, log)
        if "registry" in groups:
            rows += registry_rows(client, args.source, sentinel, scratch, log)
        if "concurrency" in groups:
            figures["concurrency"] = concurrency(client, args.source, log)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        _remove_new_bases(client, bases_before)
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
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": [asdict(r) for r in rows], **figures}, indent=1))
    return 0 if all(r.clean for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
