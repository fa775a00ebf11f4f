"""How the CLI shows things: progress on stderr, results on stdout (text or --json), tables."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import typer

from composer.core.interrupts import Phases
from composer.core.redaction import redact

if TYPE_CHECKING:
    from composer.verify.smoke_plan import SmokeReport


# What the running command is doing, as its progress says: an interrupt names it.
PHASES = Phases()


class Printer:
    """Where progress and results go; --json keeps stdout for the JSON document."""

    def __init__(self, as_json: bool = False, quiet: bool = False, verbose: bool = False, explain: bool = False):
        self.as_json = as_json
        self.quiet = quiet
        self.verbose = verbose  # the engine's own lines (its build steps) too
        self.explain = explain  # the pruned base's decision, line by line, too

    def step(self, line: str) -> None:
        PHASES.see(line)
        if not self.quiet:
            typer.echo(redact(line), err=True)

    def build_line(self, line: str) -> None:
        """A line of the engine's build output, shown with --verbose: steps stand out, the rest is
        indented under them; the pruned base's per-package decisions only with --explain."""
        PHASES.see(line)
        if self.quiet or not self.verbose or (line.startswith("prune: ") and not self.explain):
            return
        line = redact(line)
        if line.startswith("Step "):
            typer.secho(line, err=True, bold=True)
        else:
            typer.echo(f"  {line}", err=True)

    def result(self, payload: dict, human: str) -> None:
        # Every output passes the one redaction: no URL's credentials, whatever produced the text.
        typer.echo(redact(json.dumps(payload, indent=2, sort_keys=True) if self.as_json else human))

    def smoke_failure(self, report: "SmokeReport | None", log_tail: str) -> None:
        """The table and the server's last words, on stderr, when a smoke test failed."""
        if report is not None:
            typer.echo(smoke_table(report), err=True)
        if log_tail:
            typer.echo("--- server log (tail) ---\n" + redact(log_tail.rstrip()), err=True)


def smoke_table(report: "SmokeReport") -> str:
    """One line per check; models show their state, what was sent and how many cases passed."""
    rows = [("CHECK", "MODEL", "RESULT", "READY", "REQUEST", "CASES", "DETAIL")]
    rows += [(r.subject, r.model or "-", r.status, r.ready or "-", r.request or "-", r.cases or "-", r.detail)
             for r in report.rows]
    widths = [max(len(row[i]) for row in rows) for i in range(6)]
    lines = []
    for row in rows:
        cells = [row[i].ljust(widths[i]) for i in range(6)]
        if row is not rows[0] and sys.stdout.isatty():
            color = {"PASS": "green", "FAIL": "red", "SKIP": "yellow"}.get(row[2])
            cells[2] = typer.style(cells[2], fg=color)
        lines.append("  ".join(cells + [row[6]]))
    return "\n".join(lines)
