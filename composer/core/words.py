"""The name a user most likely meant, for refusals that list what is offered."""

from __future__ import annotations

import difflib
from typing import Iterable


def suggest(name: str, offered: Iterable[str]) -> str | None:
    """The offered name the user most likely meant (`onnx` -> `onnxruntime`, `cudaa` -> `cuda`)."""
    offered = tuple(offered)
    prefixed = [o for o in offered if o.startswith(name) or name.startswith(o)]
    if len(prefixed) == 1:
        return prefixed[0]
    close = difflib.get_close_matches(name, offered, n=1, cutoff=0.5)
    return close[0] if close else None


def did_you_mean(name: str, offered: Iterable[str]) -> str:
    """' (did you mean 'x'?)', or '' when nothing offered is close."""
    hint = suggest(name, offered)
    return f" (did you mean '{hint}'?)" if hint else ""
