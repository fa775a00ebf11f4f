"""A pruned base (--base pruned), host side: its proof's verdict and its report.

The decision (which packages and files of the min image stay) is made inside the build by
in_image/prune.py, and the proof by in_image/prove.sh in a stage of its own, so a miss fails the
build before anything is tagged. This module turns the proof's failure into one line and reads
the report the decision left in the image ({ROOT}/pruned.json) for `--explain` and `--json`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from composer.engine import Engine
from composer.errors import ComposerError
from composer.output import human_size
from composer.plan import ROOT

REPORT = f"{ROOT}/pruned.json"
PROOF_FAILED = "proof failed: "
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")  # the engine colours a step's stderr


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
    loaded_at_run_time: tuple[dict, ...]
    dropped_files: dict

    @classmethod
    def read(cls, engine: Engine, image: str) -> "PruningReport":
        result = engine.run_once(image, ["cat", REPORT], entrypoint=[])
        try:
            raw = json.loads(result.output)
            return cls(tuple(raw["kept"]), tuple(raw["dropped"]), tuple(raw["loaded_at_run_time"]),
                       dict(raw["dropped_files_of_kept_packages"]))
        except (ValueError, KeyError, TypeError):
            raise ComposerError(f"the image holds no readable {REPORT}") from None

    def to_dict(self) -> dict:
        return {"kept": list(self.kept), "dropped": list(self.dropped),
                "loaded_at_run_time": list(self.loaded_at_run_time),
                "dropped_files_of_kept_packages": self.dropped_files}

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
        return "\n".join(lines)


class BuildStages:
    """A line sink that remembers the last image of each stage of a classic build, so the stage
    images no tag keeps can be swept: on a pruned base the `pruned` stage holds a copy of the
    whole base (GBs) that stays in the build cache, like every stage of a multi-stage build."""

    SWEPT = ("decide", "pruned", "proof")  # the pruned base's own stages; collect's cache is shared

    def __init__(self, on_line=lambda _line: None):
        self.on_line = on_line
        self.ends: list[tuple[str, str]] = []  # (stage name, its last image)
        self._stage, self._last = "", None

    def __call__(self, line: str) -> None:
        self.on_line(line)
        stage = re.match(r"\s*Step \d+/\d+ : FROM \S+(?: AS (\S+))?", line)
        if stage:
            if self._last:
                self.ends.append((self._stage, self._last))
            self._stage, self._last = stage.group(1) or "", None
        found = re.match(r"\s*---> ([0-9a-f]{12})$", line)
        if found:
            self._last = found.group(1)

    def sweep(self, engine: Engine) -> None:
        """Remove the pruned base's stage images and the build's last one, unless named (a tag stays)."""
        last = [self._last] if self._last else []
        for image in [i for name, i in self.ends if name in self.SWEPT] + last:
            engine.discard_untagged(image)
