"""What every command returns: one shape for people (text) and machines (--json).

Every command's JSON has the same top level, whatever the command and however many sets: its
`command`, its `exit_code`, `images` (one entry per image it worked on, each with its own
`status`), a `summary`, and, when it failed, `error`. What only one command has (a lock's files,
a mirror's totals) sits beside them under its own key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from composer.core.errors import ComposerError
from composer.core.redaction import redact


@dataclass
class Result:
    """A command's answer; `error` (set when it failed) is what the CLI exits with."""

    command: str
    images: list[dict] = field(default_factory=list)
    summary: dict = field(default_factory=dict)
    text: str = ""
    error: ComposerError | None = None
    extra: dict = field(default_factory=dict)
    outcomes: list = field(default_factory=list, repr=False)  # build's outcomes, for the CLI's tables
    parts: list[str] = field(default_factory=list)  # build: each image's text, after its smoke table

    @property
    def exit_code(self) -> int:
        return 0 if self.error is None else self.error.exit_code

    def to_dict(self) -> dict[str, Any]:
        payload: dict[str, Any] = {"command": self.command, "exit_code": self.exit_code, "images": self.images,
                                   "summary": self.summary, **self.extra}
        if self.error is not None:
            payload["error"] = redact(self.error.message)
        return payload


def refusal(command: str, error: ComposerError) -> dict[str, Any]:
    """The JSON of a command that stopped before it had a result (bad input, a service's no)."""
    payload: dict[str, Any] = Result(command, error=error).to_dict()
    report = getattr(error, "report", None)
    if report is not None:
        payload["smoke_test"] = report.to_dict()
    return payload
