"""Requirement lines for python models, in pip's grammar: checked once when read, and shown or
installed without the credentials a URL may carry (records, renders and bundles hold none)."""

from __future__ import annotations

import re
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from composer.core.errors import Invalid
from composer.core.files import MAX_VALUE, printable, read_text
from composer.core.redaction import redact_url, strip_url

MAX_REQUIREMENT_FILE = 1 << 20


def check_requirement(value: str) -> str | None:
    """pip's requirement grammar (PEP 508, read by `packaging`), or a URL of a wheel."""
    if value.startswith("-"):
        return (f"pip options ({printable(redact_url(value.split()[0]))}) are not packages: use --pip-index-url, "
                "--pip-extra-index-url or --wheelhouse")
    if any(ord(c) < 32 for c in value):
        return f"'{printable(redact_url(value))}' holds control characters"
    if _is_bare_url(value):
        try:
            parse_wheel_filename(value.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1])
        except InvalidWheelFilename:
            return (f"'{printable(redact_url(value))}' is a URL but not of a wheel: "
                    "give NAME @ URL (pip's requirement syntax)")
        return None
    try:
        Requirement(value)
    except InvalidRequirement:
        return (f"'{printable(redact_url(value))}' is not a pip requirement: expected NAME, NAME[extras], "
                "NAME==VERSION (or another specifier), or NAME @ URL")
    return None


def _is_bare_url(value: str) -> bool:
    return "://" in value.split("@", 1)[0] and not re.match(r"^[A-Za-z0-9._-]+\s*(\[[^\]]*\])?\s*@", value)


def read_requirement_file(path: Path) -> list[str]:
    """Requirement lines of a file; pip options belong on the command line, not in it."""
    specs = []
    text = read_text(path, "requirements file", MAX_REQUIREMENT_FILE)  # a regular file of text only
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-"):
            raise Invalid(
                f"{path}:{number}: pip options ({printable(redact_url(line.split()[0]))}) go on the command line "
                "(--pip-index-url, --pip-extra-index-url, --wheelhouse)"
            )
        problem = check_requirement(line) if len(line) <= MAX_VALUE else f"a line is longer than {MAX_VALUE}"
        if problem:
            raise Invalid(f"{path}:{number}: {problem}")
        specs.append(line)
    return specs


def requirement_url(line: str) -> str | None:
    """The URL of a requirement line (NAME @ URL, or a bare URL), else None."""
    if "://" not in line:
        return None
    name, at, url = line.partition("@")
    if at and "://" not in name:
        return url.strip()
    return line.strip()


def public_requirement(line: str) -> str:
    """A requirement line as it may be recorded: credentials and query removed from its URL."""
    url = requirement_url(line)
    if url is None:
        return line
    if url == line.strip():
        return strip_url(url)
    return f"{line.partition('@')[0].strip()} @ {strip_url(url)}"


def installable_requirement(line: str) -> str:
    """A requirement line as the build installs it from a wheelhouse: a direct URL becomes its
    name (the wheel was fetched on the host; the build reaches no URL), a bare wheel URL the
    name and version its file name says."""
    url = requirement_url(line)
    if url is None:
        return line
    if url != line.strip():
        return line.split("@", 1)[0].strip()
    name, version, _, _ = parse_wheel_filename(url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1])
    return f"{name}=={version}"
