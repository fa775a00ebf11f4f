"""A pruned base (--base pruned), host side: the base image, its proof's verdict and its report.

The decision (which packages and files of the min image stay) is made inside the build by
in_image/prune.py, and the proof by in_image/prove.sh in a stage of its own, so a miss fails the
build before anything is tagged. The base is a build of its own (the context's pruned-base/
folder) whose split stage the composer writes as family layers (composer.assembly.base_layers), made
once per min image and selection and reused after: writing GBs of fresh layer is most of a pruned
build's cost. This module makes or finds that base, turns the proof's failure
into one line and reads the report the decision left in the image ({ROOT}/pruned.json) for
`--explain` and `--json`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from composer.assembly.base_layers import write_base
from composer.engine import locks
from composer.engine.interface import Builder, Engine
from composer.core.errors import BuildFailed, ComposerError
from composer.core.units import human_size
from composer.backends import tensorrt
from composer.render.render import render_pruned_base
from composer.resolve.plan_types import BASE_LABEL, BASE_REPOSITORY, ROOT, CompositionPlan, RUN_LABEL
from composer.core.progress import LineSink, quiet

REPORT = f"{ROOT}/pruned.json"
LAYERS_REPORT = "/usr/share/triton-composer/pruned-base/layers.json"  # each family layer's files and bytes
# What a base is: a new format makes new bases (4: the family layers written by the composer from the
# split stage's one tree, by the families' lists; 3: from one stage a family; 2: written by the
# builder; 1 was one layer of everything).
BASE_FORMAT = "4 family layers the composer writes from one tree"
PROOF_FAILED = "proof failed: "
MADE_TARGET = "split"  # the base's stage the composer writes the families from (by hand: the last copies them)
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")  # the engine colours a step's stderr
# Families of what pruning removes, by package name (the size report's rows), first match wins.
FAMILIES = (
    ("TensorRT", tensorrt.PACKAGES),
    ("CUDA", re.compile(r"^(cuda-|libcu|libnccl|libnpp|libnvjpeg|libnvjitlink|libnvrtc|libnvtx|libnvptx|"
                        r"nsight|libcudnn|hpcx|nvidia-)")),
)


def base_tag_in(tags) -> str | None:
    """A pruned base's tag among an image's tags, as builds name (and lock) it: Podman lists
    triton-composer/pruned-base:KEY as localhost/triton-composer/pruned-base:KEY."""
    for tag in tags:
        name = tag.removeprefix("localhost/")
        if name.startswith(BASE_REPOSITORY + ":"):
            return name
    return None


@dataclass(frozen=True)
class PrunedBase:
    """The image a pruned composition is built FROM: made by this build, or found from an earlier one."""

    image: str
    tag: str
    key: str
    made: bool
    seconds: float  # spent making it; 0 when reused

    def to_dict(self) -> dict:
        return {"image": self.image, "tag": self.tag, "key": self.key, "reused": not self.made,
                "seconds": round(self.seconds, 1)}


def base_key(plan: CompositionPlan, context: Path) -> str:
    """What a pruned base is made from: the images its Dockerfile builds FROM (by id) and every file
    of its build context (its Dockerfile names the selection, the composer's version and the steps).
    The same key means the same base, so a base made before is used as it is; BASE_FORMAT keeps a
    base of an older layout (one layer of everything) from being taken for a new one."""
    digest = hashlib.sha256(f"format {BASE_FORMAT}\n".encode())
    for image in (plan.full, plan.min, *(other.image for other in plan.foreign_backends)):
        digest.update(f"image {image.role} {image.id or image.from_ref}\n".encode())
    for path in sorted(context.rglob("*")):
        name = path.relative_to(context).as_posix()
        if path.is_symlink():
            digest.update(f"link {name} {os.readlink(path)}\n".encode())
        elif path.is_file():
            content = hashlib.sha256(path.read_bytes()).hexdigest()
            digest.update(f"file {name} {path.stat().st_mode & 0o777:o} {content}\n".encode())
    return digest.hexdigest()


def pruned_base(
    engine: Engine, plan: CompositionPlan, context: Path, *,
    labels: Mapping[str, str] | None = None, on_line: LineSink = quiet, run: str = "render",
    hold: contextlib.ExitStack | None = None, on_engine_line: LineSink | None = None,
    builder: Builder | None = None, reuse: bool = True, steps: list[str] | None = None,
) -> PrunedBase:
    """The pruned base of `plan`: the image made before from the same inputs (its tag names their
    key, its label holds it whole), or one made now from `context` and tagged, so that later builds
    find it and `docker image prune` keeps it. The builder runs the steps to the split stage and
    the composer writes each family of its tree as a layer (composer.assembly.base_layers: the
    same base from any builder and engine).

    Made once per engine however many runs want it at once: the base's make lock (host-wide,
    composer.engine.locks) is held while it is looked for and made, so a second run waits, then
    finds it. `hold` (the build's) keeps the base's use lock until the build ends, so `composer
    cache clear` leaves it alone. Its stages carry `run` (their label "<stage> <run>"), so the run
    removes its own stages and no other run's (remove_run_stages): it is built from a copy of
    `context` whose Dockerfile names the run (render_pruned_base(plan, run)); the context's own names
    none, and so neither does the key. The engine's own lines go to
    `on_engine_line` (the CLI shows them with --verbose), the base's progress to `on_line`. With
    `reuse` False (--no-cache) the base is made again from scratch, no step from the build cache,
    and its tag moves to it (the one made before is then an old base `composer cache clear` takes);
    `steps` (an engine that takes_cache_from) gets the images of the steps it built, for the run's
    composition to take instead of running its collect and decide stages again."""
    key = base_key(plan, context)
    tag = base_tag(plan, key)
    engine_id = engine.identity()
    if hold is not None:
        hold.enter_context(locks.using(engine_id, tag))
    waiting = lambda: on_line(f"pruned base: waiting for another run making {tag}")  # noqa: E731
    with locks.making(engine_id, tag, on_wait=waiting):
        found = engine.image(tag)  # by its tag: images built on it inherit its label
        if reuse and found is not None and found.labels.get(BASE_LABEL) == key:
            locks.mark_used(engine_id, tag)
            on_line(f"pruned base: reusing {tag}, made before from the same min image for the same selection")
            return PrunedBase(found.id, tag, key, made=False, seconds=0.0)
        on_line(f"pruned base: making {tag} " + ("(once for this min image and selection; later builds reuse it)"
                                                 if reuse else "(--no-cache: from scratch, not the one made before)"))
        started = time.monotonic()
        folder = _run_context(context, render_pruned_base(plan, run))
        try:
            (builder or engine).build(folder, target=MADE_TARGET, labels=dict(labels or {}), network_mode="none",
                                      on_line=on_engine_line or on_line, **({} if reuse else {"nocache": True}),
                                      **({} if steps is None else {"steps": steps}))
        except BuildFailed as failure:
            raise BuildFailed(f"making the pruned base failed: {failure.message}", log_tail=failure.log_tail) from failure
        finally:
            locks.drop_folder(folder)
        image = _write(engine, plan, run, key, tag, labels, on_line)
    seconds = time.monotonic() - started
    locks.mark_used(engine_id, tag)
    on_line(f"pruned base: made {tag} in {seconds:.0f} s")
    return PrunedBase(image, tag, key, made=True, seconds=seconds)


def _run_context(context: Path, dockerfile: str) -> Path:
    """A copy of the base's context (a few scripts) whose Dockerfile is the run's."""
    folder = locks.make_folder("base-context")
    shutil.copytree(context, folder, symlinks=True, dirs_exist_ok=True)
    (folder / "Dockerfile").write_text(dockerfile)
    return folder


def _write(engine: Engine, plan: CompositionPlan, run: str, key: str, tag: str, labels, on_line: LineSink) -> str:
    """The base the composer writes from the split stage `run` built; its id."""
    folder = locks.make_folder("base-layers")
    try:
        return write_base(engine, plan.pruning.slots, run, key, tag, folder,
                          labels=labels, on_line=on_line)
    finally:
        locks.drop_folder(folder)


def base_tag(plan: CompositionPlan, key: str) -> str:
    return f"{BASE_REPOSITORY}:{plan.release.name}-{key[:16]}"


def pruned_base_made(engine: Engine, plan: CompositionPlan, context: Path) -> bool:
    """Whether the pruned base of `plan` is on the engine already (a build then reuses it)."""
    key = base_key(plan, context)
    found = engine.image(base_tag(plan, key))
    return found is not None and found.labels.get(BASE_LABEL) == key


def proof_failure(log_tail: str) -> str | None:
    """The proof's one line (file and library) from a failed build's log, or None."""
    for line in _COLOUR.sub("", log_tail).splitlines():
        if line.strip().startswith(PROOF_FAILED):
            return "pruned base: " + line.strip()[len(PROOF_FAILED):]
    return None


@dataclass(frozen=True)
class PruningReport:
    """Each kept package with why, each dropped package with its size (from prune.py)."""

    kept: tuple[dict, ...]
    dropped: tuple[dict, ...]
    loaded_at_run_time: tuple[dict, ...]  # each library loaded by name that the image holds (the proof requires it)
    dropped_files: dict
    named_not_in_image: tuple[dict, ...] = ()  # named by a kept file, but the image holds none (the driver's)
    layers: tuple[dict, ...] = ()  # the base's layers in order: layer, family, part, files, bytes
    python: dict | None = None  # on a flavour's image: the python distributions kept (why) and dropped

    @classmethod
    def read(cls, engine: Engine, image: str) -> "PruningReport":
        """From the image: the decision's report, and the base's layers (one container)."""
        result = engine.run_once(image, ["cat", REPORT, LAYERS_REPORT], entrypoint=[])
        try:
            decoder = json.JSONDecoder()
            text = result.output.strip()
            raw, end = decoder.raw_decode(text)
            layers = _layers(decoder, text[end:].strip())
            return cls(tuple(raw["kept"]), tuple(raw["dropped"]), tuple(raw["loaded_at_run_time"]),
                       dict(raw["dropped_files_of_kept_packages"]), tuple(raw.get("named_not_in_image", ())),
                       tuple(layers), raw.get("python"))
        except (ValueError, KeyError, TypeError):
            raise ComposerError(f"the image holds no readable {REPORT}") from None

    def to_dict(self) -> dict:
        return {"kept": list(self.kept), "dropped": list(self.dropped),
                "loaded_at_run_time": list(self.loaded_at_run_time),
                "dropped_files_of_kept_packages": self.dropped_files,
                "named_not_in_image": list(self.named_not_in_image),
                "layers": list(self.layers),
                **({"python": self.python} if self.python is not None else {}),
                "removed_by_family": self.removed_by_family()}

    def removed_by_family(self) -> dict[str, int]:
        """Bytes pruning removed: CUDA, TensorRT, python distributions, other packages, and files of
        kept packages (documentation, headers, static archives, TensorRT's builder resource)."""
        found = {"CUDA": 0, "TensorRT": 0, "python distributions": 0, "other packages": 0,
                 "files of kept packages": int(self.dropped_files.get("bytes", 0))}
        for package in self.dropped:
            family = next((name for name, pattern in FAMILIES if pattern.search(package["package"])), "other packages")
            found[family] += package["size"]
        if self.python is not None:
            found["python distributions"] = sum(d["size"] for d in self.python.get("dropped", ())) + \
                int(self.python.get("unowned_files_dropped", {}).get("bytes", 0))
        return found

    def explain(self) -> str:
        kept = sum(p["size"] for p in self.kept)
        dropped = sum(p["size"] for p in self.dropped)
        lines = [f"pruned base: kept {len(self.kept)} packages ({human_size(kept)}), "
                 f"dropped {len(self.dropped)} ({human_size(dropped)}) and {self.dropped_files.get('count', 0)} files "
                 f"of kept packages ({human_size(self.dropped_files.get('bytes', 0))}: documentation, headers, "
                 "static archives, TensorRT's builder resource)"]
        width = max([len(p["package"]) for p in self.kept + self.dropped] or [0])
        lines += [f"  kept     {p['package'].ljust(width)}  {human_size(p['size']).rjust(9)}  {p['why']}" for p in self.kept]
        lines += [f"  dropped  {p['package'].ljust(width)}  {human_size(p['size']).rjust(9)}"
                  for p in sorted(self.dropped, key=lambda p: -p["size"])]
        lines += [f"  run-time {item['library']}: {item['why']}" for item in self.loaded_at_run_time]
        lines += self._python_lines()
        lines.append("  removed: " + ", ".join(f"{family} {human_size(size)}"
                                             for family, size in self.removed_by_family().items()))
        if self.layers:
            lines.append(f"  layers of the base ({len(self.layers)}, in order; each holds one family, so images "
                         "keeping the same family share it):")
            lines += [f"  layer    {item['layer'].ljust(width)}  {human_size(item['bytes']).rjust(9)}  "
                      f"{item['files']} files" for item in self.layers]
        named = sorted({item["library"] for item in self.named_not_in_image})
        if named:
            lines.append(f"  named, not in the image ({len(named)}: the CUDA driver's, other platforms'): "
                         + ", ".join(named))
        return "\n".join(lines)

    def _python_lines(self) -> list[str]:
        """The python distributions kept (with the chain of Requires-Dist) and dropped (with sizes)."""
        if self.python is None:
            return []
        kept, dropped = self.python.get("kept", []), self.python.get("dropped", [])
        lines = [f"pruned base: kept {len(kept)} python distributions ({human_size(sum(d['size'] for d in kept))}), "
                 f"dropped {len(dropped)} ({human_size(sum(d['size'] for d in dropped))})"]
        width = max([len(d["distribution"]) for d in kept + dropped] or [0])
        lines += [f"  kept     {d['distribution'].ljust(width)}  {human_size(d['size']).rjust(9)}  {d['why']}" for d in kept]
        lines += [f"  dropped  {d['distribution'].ljust(width)}  {human_size(d['size']).rjust(9)}"
                  for d in sorted(dropped, key=lambda d: -d["size"])]
        lines += [f"  not installed: {m['requirement']} ({m['why']})" for m in self.python.get("missing", [])]
        return lines


def _layers(decoder: json.JSONDecoder, text: str) -> list:
    """The base's layers from LAYERS_REPORT's text; none from a base made before it had them."""
    try:
        return list(decoder.raw_decode(text)[0]["layers"])
    except (ValueError, KeyError, TypeError):
        return []


STAGE_LABEL = "org.triton-composer.stage"  # on the pruned base's stages no image keeps: pruned, layers, split, layer
# Its value is "<stage> <run>" (the run that built it; "render" by hand). A value of one word is from
# a version that named no run (its composition's proof stage said "proof"): swept as a dead run's.
# The composition's proof stage is build cache now, named by its key like the composed stage: it
# lost this label, which made every other run's sweep remove it between its build and its read.


def run_of(labels: Mapping[str, str]) -> str | None:
    """The run a stage image was built by, as its labels say; None when they name none."""
    words = str(labels.get(STAGE_LABEL, "")).split()
    if len(words) == 2:
        return words[1]
    return labels.get(RUN_LABEL) or None


def remove_stages(engine: Engine, wanted: Callable[[str | None], bool]) -> int:
    """Remove the untagged stage images (STAGE_LABEL) whose run `wanted` accepts; how many went.
    Leaves first, one by one (prune off): an image goes only once nothing is built on it, and the
    unlabelled stages they stand on (collect, shared by every run of the same images) stay as
    build cache."""
    removed: set[str] = set()
    for _ in range(256):  # each pass removes the leaves; a stage is tens of images deep at most
        chosen = []
        for image in engine.images_labelled(STAGE_LABEL, untagged=True):
            if image in removed:
                continue
            info = engine.image(image)
            if info is not None and not info.tags and wanted(run_of(info.labels)):
                chosen.append(image)
        if not chosen:
            break
        for image in chosen:
            removed.add(image)
            try:
                engine.remove_image(image, prune=False)
            except ComposerError:
                pass  # in use by a container, or a parent still: a later pass or run takes it
    return len(removed)


def remove_run_stages(engine: Engine, run: str) -> int:
    """Remove the stages `run` built (its pruned base's and decide stage), no other run's."""
    return remove_stages(engine, lambda owner: owner == run)


def sweep_stages(engine: Engine, run: str | None = None) -> None:
    """Remove the images of the pruned base's own stages (decide, pruned, layers, split, each layer's,
    proof) that no tag names: `run`'s, or (without it) those of every run that is not at work on
    this host (composer.engine.locks' run records), so a build running beside the sweep keeps its
    stages. Each such stage labels itself first thing, so every image of it carries the label, a
    failed step's last one included. Found by label, whatever builder made them."""
    if run is not None:
        remove_run_stages(engine, run)
        return
    live = locks.live_runs()
    remove_stages(engine, lambda owner: owner not in live)
