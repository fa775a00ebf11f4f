"""The README stays short and the docs stay whole: every relative link lands on a file (and a
heading) that exists, every docs page can be reached from the README or docs/index.md, and the
README keeps its two commands. Read from the Markdown files themselves, as GitHub renders them.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 250

OPTIONS_PAGE = DOCS / "reference" / "options.md"  # written from the flag table (composer.config.reference)

_LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_INLINE_CODE = re.compile(r"`[^`]*`")


def _pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def _prose_lines(path: Path) -> list[str]:
    """The file's lines outside fenced code blocks (a `# x` in a code block is no heading)."""
    lines, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its rendered text lowercased, punctuation dropped, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link shows its text
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor GitHub makes for the headings of `path` (a repeated one gets -1, -2, ...)."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in _prose_lines(path):
        match = _HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> list[str]:
    """The link targets of `path`'s prose (not those shown as code)."""
    targets = []
    for line in _prose_lines(path):
        targets += _LINK.findall(_INLINE_CODE.sub("", line))
    return targets


def _relative(target: str) -> bool:
    return not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) and not target.startswith("//")


def _resolve(source: Path, target: str) -> tuple[Path, str]:
    """The file a relative link lands on, and its anchor ('' for none)."""
    where, _, anchor = target.partition("#")
    file = (source.parent / unquote(where)).resolve() if where else source
    return file, unquote(anchor)


def _broken(source: Path) -> list[str]:
    problems = []
    for target in links(source):
        if not _relative(target):
            continue
        file, anchor = _resolve(source, target)
        if not file.exists():
            problems.append(f"{source.relative_to(ROOT)}: {target}: no such file")
            continue
        if anchor and file.suffix == ".md" and anchor not in anchors(file):
            problems.append(f"{source.relative_to(ROOT)}: {target}: no heading #{anchor} in {file.relative_to(ROOT)}")
    return problems


def test_readme_is_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines (at most {MAX_README_LINES})"


@pytest.mark.parametrize("path", [README] + _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_land_on_a_file_and_a_heading(path):
    assert _broken(path) == []


def test_the_options_reference_is_what_the_flag_table_writes():
    """docs/reference/options.md is generated: a new or changed option changes the page, or this fails
    with the command that writes it."""
    from composer.config.options import OPTIONS
    from composer.config.reference import markdown

    written = markdown()
    assert OPTIONS_PAGE.read_text(encoding="utf-8") == written, (
        "docs/reference/options.md is not current: python -m composer.config.reference > docs/reference/options.md")
    for option in OPTIONS:  # every flag and key is on the page
        assert (option.key is None or f"`{option.key}`" in written) and (option.flag is None or f"`{option.flag}" in written)


def test_every_docs_page_is_reachable_from_the_readme_or_the_index():
    reached, todo = set(), [README, DOCS / "index.md"]
    while todo:
        page = todo.pop()
        if page in reached or not page.exists():
            continue
        reached.add(page)
        for target in links(page):
            if _relative(target):
                file = _resolve(page, target)[0]
                if file.suffix == ".md" and file.is_relative_to(ROOT):
                    todo.append(file)
    unreached = [str(p.relative_to(ROOT)) for p in _pages() if p.resolve() not in reached]
    assert unreached == []


def test_readme_keeps_the_two_commands():
    lines = README.read_text(encoding="utf-8").splitlines()
    section = lines[lines.index("## The two commands"):]
    section = section[: next((i for i, line in enumerate(section[1:], 1) if line.startswith("## ")), len(section))]
    setup = [line for line in section if line.startswith("scripts/bootstrap && ")]
    assert len(setup) == 1 and ".venv/bin/composer build " in setup[0] and "triton-standin" in setup[0]
    assert "scripts/test" in section


@pytest.mark.parametrize("heading, anchor", [
    ("26.07, the CUDA 13 generation", "2607-the-cuda-13-generation"),
    ("Where each value is worked out, the one place", "where-each-value-is-worked-out-the-one-place"),
    ("CPU-only images: `--device cpu`", "cpu-only-images---device-cpu"),
    ("What is inside: the SBOM", "what-is-inside-the-sbom"),
    ("See [the guide](guides/x.md)", "see-the-guide"),
])
def test_anchors_follow_githubs_rules(heading, anchor):
    assert slug(heading) == anchor


def test_a_broken_link_and_a_missing_heading_are_found(tmp_path, monkeypatch):
    """The check itself: a page with a bad target and a bad anchor gives two problems."""
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "b.md").write_text("# Only heading\n")
    page = tmp_path / "a.md"
    page.write_text("[x](missing.md) [y](b.md#other) [z](b.md#only-heading) [w](https://example.com/n)\n"
                    "```\n[code](not-a-link.md)\n```\n")
    assert len(_broken(page)) == 2
