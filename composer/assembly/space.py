"""Disk space: what a build will write on the engine's disk, against what is free there.

The check refuses a build that cannot fit, before any work; it is not a reservation. An estimate
counting every copy three times over refused NGC-scale builds that had room (42.6 GB asked of 22.5
GB free for a CPU-only pruned image that builds in about 10 GB; 17.6 GB asked of 14.6 GB for the
four-backend pruned image, which built with 12 GB free before), so this one counts the bytes the
build keeps at its end. What it counts:

- the selected parts: the server core (and its headers when kept), each selected backend,
  repository agent and cache, and the python runtime when the image gets one, as the probe of the
  full image measured them; without a probe (a plan made offline), the full image's size less the
  min image's;
- the build context (wheels, custom backends, models), twice over: wheels unpack to about that;
- the parts once: the composer's image of them (the engine's stages that copy them are build cache,
  mostly there from an earlier build of the release; the engine's own image of them goes as the
  composer's is written). The parts as the probe measured them are more than the image holds when
  the plan keeps less (a CPU-only image, fewer providers), which leaves room for the stages;
- the pruned base, when it must be made: a third of the min image (what the selection keeps of it:
  3.4 GB of the 24.09 NGC-scale min image's 9.2 GB for onnxruntime+python, 6.0 GB with four
  backends, parts included; the parts, counted above, are most of the difference).
- a margin of 512 MiB for the engine's own bookkeeping.

Free space is that of the filesystem holding the engine's data root (docker info DockerRootDir),
read with statvfs: only when the engine is on this machine (a unix socket). Otherwise nothing is
checked and a note says so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from composer.core.errors import NoSpace
from composer.core.units import human_size

MARGIN = 512 * 1024 * 1024
NO_SPACE = "no space left on device"


@dataclass(frozen=True)
class Estimate:
    """What a build will write on the engine's disk, and of what."""

    parts: int  # the selected parts, as the image holds them
    context: int  # the build context's files
    base: int  # the pruned base, when it must be made (0 otherwise)

    @property
    def needed(self) -> int:
        return self.parts + 2 * self.context + self.base // 3 + MARGIN

    def to_dict(self) -> dict:
        return {"parts": self.parts, "context": self.context, "base": self.base, "margin": MARGIN,
                "needed": self.needed}


def selected_bytes(plan, contents) -> int | None:
    """The bytes of the parts `plan` copies from the full image, as the probe measured them; None
    without a probe."""
    if contents is None:
        return None
    total = contents.core_size + (contents.include_size if plan.with_headers else 0)
    wanted = {("backend", b) for b in plan.backends} | {("repoagent", r) for r in plan.repoagents} | \
        {("cache", c) for c in plan.caches}
    total += sum(c.size for c in contents.components if (c.kind, c.name) in wanted)
    if plan.python_runtime and contents.python is not None:
        total += contents.python.size
    return total


def folder_bytes(folder: Path | None) -> int:
    """The bytes of the files under `folder` (links not followed)."""
    if folder is None:
        return 0
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


def estimate(engine, plan, contents, context: Path | None, base_to_make: bool) -> Estimate:
    """What building `plan` writes on the engine's disk (see the module's docstring)."""
    parts = selected_bytes(plan, contents)
    full = engine.image(plan.full.id or plan.full.ref)
    small = engine.image(plan.min.id or plan.min.ref)
    if parts is None:
        parts = max((full.size if full else 0) - (small.size if small else 0), 0)
    base = (small.size if small else 0) if base_to_make else 0
    return Estimate(parts, folder_bytes(context), base)


def check(engine, estimate: Estimate) -> str:
    """Refuse (NoSpace, one line) a build that does not fit on the engine's disk; the line to show
    when it fits, or why nothing was checked."""
    found = engine.storage()
    name = engine.identity() if hasattr(engine, "identity") else "engine"
    where = getattr(getattr(engine, "endpoint", None), "url", "") or name
    if found is None:
        return (f"note: free space not checked: the disk of engine {where} is not on this machine "
                f"(this build writes about {human_size(estimate.needed)})")
    root, usage = found
    if usage.free < estimate.needed:
        raise NoSpace(f"{human_size(estimate.needed)} needed, {human_size(usage.free)} free at {root} "
                      f"(engine {where}): free some space (composer cache list) and run again")
    return f"disk: about {human_size(estimate.needed)} needed, {human_size(usage.free)} free at {root}"


def no_space(message: str, log_tail: str = "") -> bool:
    """Whether an engine's error says its disk is full."""
    return NO_SPACE in f"{message}\n{log_tail}".lower()


def disk_full(engine, tag: str, builder: str | None = None) -> NoSpace:
    """The one line of a build that ran out of space on the engine's disk, or on the disk of the
    builder that said so (`builder`: "BuildKit at ADDR", whose disk is not the engine's)."""
    if builder:
        return NoSpace(f"no space left on device on {builder} during the build; {tag} was not moved: free some "
                       f"space there (composer cache clear --builder buildkit://{builder.split(' at ', 1)[-1]}) "
                       "and run again")
    found = engine.storage()
    where = getattr(getattr(engine, "endpoint", None), "url", "") or "engine"
    disk = found[0] if found else "the engine's data root"
    return NoSpace(f"no space left on device at {disk} (engine {where}) during the build; {tag} was not moved: "
                   "free some space (composer cache list) and run again")
