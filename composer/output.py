"""How the CLI shows things: progress on stderr, results on stdout (text or --json), tables."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from composer.smoke import SmokeReport


class Printer:
    """Where progress and results go; --json keeps stdout for the JSON document."""

    def __init__(self, as_json: bool = False, quiet: bool = False):
        self.as_json = as_json
        self.quiet = quiet

    def step(self, line: str) -> None:
        if not self.quiet:
            typer.echo(line, err=True)

    def build_line(self, line: str) -> None:
        """A line of build output: steps stand out, the rest is indented under them."""
        if self.quiet:
            return
        if line.startswith("Step "):
            typer.secho(line, err=True, bold=True)
        else:
            typer.echo(f"  {line}", err=True)

    def result(self, payload: dict, human: str) -> None:
        if self.as_json:
            typer.echo(json.dumps(payload, indent=2, sort_keys=True))
        else:
            typer.echo(human)

    def smoke_failure(self, report: "SmokeReport | None", log_tail: str) -> None:
        """The table and the server's last words, on stderr, when a smoke test failed."""
        if report is not None:
            typer.echo(smoke_table(report), err=True)
        if log_tail:
            typer.echo("--- server log (tail) ---\n" + log_tail.rstrip(), err=True)


def smoke_table(report: "SmokeReport") -> str:
    rows = [("CHECK", "MODEL", "RESULT", "DETAIL")]
    rows += [(r.subject, r.model or "-", r.status, r.detail) for r in report.rows]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = []
    for row in rows:
        cells = [row[i].ljust(widths[i]) for i in range(3)]
        status = cells[2]
        if row is not rows[0] and sys.stdout.isatty():
            color = {"PASS": "green", "FAIL": "red", "SKIP": "yellow"}.get(row[2])
            status = typer.style(status, fg=color)
        lines.append(f"{cells[0]}  {cells[1]}  {status}  {row[3]}")
    return "\n".join(lines)


def human_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{size} B"
