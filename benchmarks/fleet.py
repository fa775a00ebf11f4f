"""A fleet's registry work, timed: `composer mirror` against `skopeo copy --all`.

The mirror part pushes the 24.09 stand-in pair (full and min, sharing layers) into a registry
started for the benchmark on 127.0.0.1 (Debian's docker-registry, through scripts/registry),
under one path; then times `composer mirror` of the pair to a second path of the same registry
(cross-repository mounts) and to a second registry, each a first run and a re-run, beside
`skopeo copy --all` of the same images to the same targets (the second registry emptied first,
so skopeo finds nothing there either); and prints the engine's disk use (`docker system df`)
before and after the mirrors. It removes what it made: the registries (stopped by their PID),
their storage, and the engine's names of the images it pushed.

    .venv/bin/python benchmarks/fleet.py                   NGC-scale stand-ins (17 + 9 GB)
    .venv/bin/python benchmarks/fleet.py --images small    the small stand-ins (1.2 GB + 0.1 GB)
    .venv/bin/python benchmarks/fleet.py --storage /dev/shm   registry storage in memory, not on disk

The registry storage must leave 5 GB of its filesystem free (a tmpfs: 2 GB); the benchmark
refuses to start otherwise. Parts are functions of a Bench (PARTS): the fleet of pruned
images is to be added beside `mirror_part`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from composer.core.errors import ComposerError
from composer.engine.connect import connect
from composer.engine.interface import Engine

REPO = Path(__file__).resolve().parents[1]
COMPOSER = [sys.executable, "-m", "composer"]
RELEASE = "24.09"
IMAGES = {  # scale -> the registry prefix of the stand-in pair on the engine
    "ngc": "localhost/standin-ngc",
    "small": "localhost/standin",
}
SUFFIXES = ("-py3", "-py3-min")
# Free bytes the registry storage must leave on a disk: the mirrors write nothing through the engine,
# whose own disk this often is, so room for its usual work is enough.
MARGIN_DISK = 5e9
MARGIN_TMPFS = 2e9  # ... and in memory


# -- the pieces a part is made of -------------------------------------------------------------


@dataclass
class Registry:
    """A docker-registry on 127.0.0.1:port, no auth, storage under `root`; the benchmark's own."""

    root: Path
    port: int
    pid: int | None = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        (self.root / "data").mkdir(parents=True, exist_ok=True)
        config = self.root / "config.yml"
        config.write_text(
            "version: 0.1\nlog:\n  level: warn\n"
            f"storage:\n  filesystem:\n    rootdirectory: {self.root / 'data'}\n  delete:\n    enabled: true\n"
            f"http:\n  addr: {self.host}\n"
        )
        done = subprocess.run([str(REPO / "scripts" / "registry"), str(self.port), str(config)],
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"scripts/registry failed: {done.stderr.strip()}")
        self.pid = int(done.stdout.strip().splitlines()[-1])

    def stop(self) -> None:
        """Stop the registry this benchmark started (by its PID)."""
        pid, self.pid = self.pid, None
        if pid is None:
            return
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)

    def empty(self) -> None:
        """Stop, remove every blob and manifest, start again (same port)."""
        self.stop()
        shutil.rmtree(self.root / "data", ignore_errors=True)
        self.start()

    def stored(self) -> int:
        return sum(p.stat().st_size for p in (self.root / "data").rglob("*") if p.is_file())


@dataclass
class Bench:
    """What a part works with: the engine, the benchmark's registries and its lines of figures."""

    engine: Engine
    storage: Path
    scale: str
    registries: list[Registry] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    pushed: list[str] = field(default_factory=list)  # engine names made by push_pair

    def say(self, line: str) -> None:
        self.lines.append(line)
        print(line, flush=True)

    def registry(self) -> Registry:
        reg = Registry(Path(tempfile.mkdtemp(prefix="fleet-registry-", dir=self.storage)), _free_port())
        self.registries.append(reg)
        reg.start()
        return reg

    def source_images(self) -> list[str]:
        return [f"{IMAGES[self.scale]}/tritonserver:{RELEASE}{s}" for s in SUFFIXES]

    def push_pair(self, prefix: str) -> None:
        """Put the stand-in pair under PREFIX/tritonserver (through the engine: setup, not timed)."""
        for image, suffix in zip(self.source_images(), SUFFIXES):
            ref = f"{prefix}/tritonserver:{RELEASE}{suffix}"
            self.engine.tag(self.engine.image(image).id, ref)
            self.pushed.append(ref)
            self.engine.push(ref)

    def clean(self) -> None:
        for reg in self.registries:
            reg.stop()
            shutil.rmtree(reg.root, ignore_errors=True)
        hosts = tuple(f"{r.host}/" for r in self.registries)
        for name in self.engine.image_names():  # the tags and digests the pushes left, never the images
            if name.startswith(hosts):
                try:
                    self.engine.remove_image(name)
                except ComposerError:
                    pass


def timed(command: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=4 * 3600)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:4])} ... failed: {done.stderr.strip()[-2000:]}")
    return seconds, done


def mirror(source: str, to: str) -> tuple[float, dict]:
    seconds, done = timed([*COMPOSER, "mirror", "--version", RELEASE, "--registry", source, "--to", to, "--json"])
    return seconds, json.loads(done.stdout)


def skopeo(source: str, to: str) -> float:
    total = 0.0
    for suffix in SUFFIXES:
        seconds, _ = timed(["skopeo", "copy", "--all", "--quiet", "--src-tls-verify=false", "--dest-tls-verify=false",
                            f"docker://{source}/tritonserver:{RELEASE}{suffix}",
                            f"docker://{to}/tritonserver:{RELEASE}{suffix}"])
        total += seconds
    return total


def engine_disk() -> str:
    """`docker system df`'s Images line: what the engine's disk holds in images."""
    done = subprocess.run(["docker", "system", "df", "--format", "{{.Type}} {{.Size}} {{.Reclaimable}}"],
                          capture_output=True, text=True, timeout=300)
    images = [line for line in done.stdout.splitlines() if line.startswith("Images")]
    return images[0] if images else done.stdout.strip()


def engine_events(since: float, hosts: tuple[str, ...]) -> int:
    """How many image events (pull, push, tag, ...) naming `hosts` the engine had since `since`:
    the engine's disk is shared with other builds, so its events say what the mirrors did to it."""
    done = subprocess.run(["docker", "events", "--since", f"{since - 1:.0f}", "--until", f"{time.time() + 1:.0f}",
                           "--filter", "type=image", "--format", "{{json .}}"],
                          capture_output=True, text=True, timeout=300)
    count = 0
    for line in done.stdout.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if int(event.get("timeNano") or 0) >= since * 1e9 and any(h in line for h in hosts):
            count += 1
    return count


def gb(n: float) -> str:
    return f"{n / 1e9:6.2f} GB"


# -- parts ------------------------------------------------------------------------------------


def mirror_part(bench: Bench) -> None:
    """composer mirror (same registry, another registry; first run and re-run) beside skopeo."""
    a, b = bench.registry(), bench.registry()
    source = f"{a.host}/bench/{bench.scale}"
    started = time.monotonic()
    bench.push_pair(source)
    bench.say(f"== mirror: {', '.join(bench.source_images())} pushed to {source} in "
              f"{time.monotonic() - started:.0f} s ({gb(a.stored())} stored)")
    disk_before, mirrors_began = engine_disk(), time.time()

    def row(what: str, seconds: float, result: dict | None = None) -> None:
        figures = ""
        if result is not None:
            t = result["totals"]
            figures = (f"   moved {gb(t['bytes_moved'])}   mounted {gb(t['bytes_mounted'])}   "
                       f"skipped {gb(t['bytes_skipped'])}")
        bench.say(f"  {what:<44} {seconds:7.1f} s{figures}")

    first, result = mirror(source, f"{a.host}/copy")
    row("composer mirror, same registry", first, result)
    again, result = mirror(source, f"{a.host}/copy")
    row("  re-run", again, result)
    row("skopeo copy --all, same registry", skopeo(source, f"{a.host}/skopeo"))

    composer_first, result = mirror(source, f"{b.host}/nv")
    row("composer mirror, second registry", composer_first, result)
    composer_again, again_result = mirror(source, f"{b.host}/nv")
    row("  re-run", composer_again, again_result)
    disk_after = engine_disk()
    events = engine_events(mirrors_began, (a.host, b.host))
    b.empty()  # skopeo starts from an empty target, as composer did
    skopeo_first = skopeo(source, f"{b.host}/nv")
    row("skopeo copy --all, second registry", skopeo_first)
    skopeo_again = skopeo(source, f"{b.host}/nv")
    row("  re-run", skopeo_again)

    bench.say(f"  engine disk before the composer mirrors: {disk_before}")
    bench.say(f"  engine disk after the composer mirrors:  {disk_after}   (the engine is shared: other builds count)")
    bench.say(f"  engine image events naming the benchmark's registries during the composer mirrors: {events}")
    ratio = composer_first / skopeo_first if skopeo_first else float("nan")
    bench.say(f"  composer/skopeo to a second registry: {ratio:.2f}x (goal <= 1.2x); re-run moved "
              f"{again_result['totals']['bytes_moved']} blob bytes in {composer_again:.1f} s (goal 0 in < 10 s); "
              f"engine {'unchanged' if disk_before == disk_after and not events else 'untouched by the mirrors (no image event), its disk changed by others' if not events else 'CHANGED BY THE MIRRORS'}")


# The fleet-of-pruned-images part goes here beside the mirror (a function of a Bench).
PARTS: dict[str, Callable[[Bench], None]] = {"mirror": mirror_part}


# -- running ------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as fh:
            return not any(line.startswith("State:") and "Z" in line.split()[1] for line in fh)
    except FileNotFoundError:
        return False


def room(storage: Path, need: float) -> str | None:
    """Why the storage cannot take `need` bytes and keep its margin (None: it can)."""
    free = shutil.disk_usage(storage).free
    tmpfs = _filesystem(storage) in ("tmpfs", "ramfs")
    margin = MARGIN_TMPFS if tmpfs else MARGIN_DISK
    if free - need < margin:
        return (f"{storage} has {gb(free).strip()} free; the registries may take up to {gb(need).strip()} and "
                f"{gb(margin).strip()} must stay free")
    return None


def _filesystem(path: Path) -> str:
    best, kind = "", ""
    for line in Path("/proc/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) > 2 and str(path.resolve()).startswith(parts[1]) and len(parts[1]) > len(best):
            best, kind = parts[1], parts[2]
    return kind


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", choices=sorted(IMAGES), default="ngc")
    parser.add_argument("--storage", type=Path, default=Path("/var/tmp"), help="where the registries keep blobs")
    parser.add_argument("--part", action="append", choices=sorted(PARTS), help="default: every part")
    args = parser.parse_args()
    for tool in ("skopeo", "docker-registry"):
        if shutil.which(tool) is None:
            print(f"fleet: needs {tool} (scripts/bootstrap installs it)", file=sys.stderr)
            return 2
    engine = connect()
    bench = Bench(engine, args.storage, args.images)
    sizes = []
    for image in bench.source_images():
        info = engine.image(image)
        if info is None:
            print(f"fleet: {image} is not on the engine (triton-standin --version {RELEASE}"
                  f"{' --scale ngc' if args.images == 'ngc' else ''})", file=sys.stderr)
            return 2
        sizes.append(info.size)
    # Two registries each holding the pair at most: the full image holds the min image's layers, and
    # compressed layers are smaller than the images.
    problem = room(args.storage, 2 * max(sizes))
    if problem:
        print(f"fleet: not run: {problem}", file=sys.stderr)
        return 3
    try:
        for name in args.part or list(PARTS):
            PARTS[name](bench)
    finally:
        bench.clean()
    return 0


if __name__ == "__main__":
    sys.exit(main())
