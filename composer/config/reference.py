"""docs/reference/options.md, written from the flag table (composer.config.options): every
option's set key, flag, commands and help, so the reference cannot drift from the code.

    python -m composer.config.reference > docs/reference/options.md

tests/unit/test_docs.py checks that the page is what this writes.
"""

from __future__ import annotations

import sys

from composer.config.options import OPTIONS, REFUSED_KEYS, Option
from composer.config.values import Flag, Named, RequirementFiles, Strings

HEADER = """# Options of a composition

<!-- Written by `python -m composer.config.reference > docs/reference/options.md` from the flag
table (composer/config/options.py); tests/unit/test_docs.py fails when it is not current. -->

Every option is declared once and works the same on the command line and as a key of a backend
set ([sets](sets.md)). A flag given on the command line replaces the set's value of that key (lists
included; `--pip` and `--requirements` together give one value, `packages.pip` +
`packages.requirements`). How the values must fit together is the rule book,
`composer/config/rules.py` ([guarantees](guarantees.md)); the options of a run that are not part of
the image (`--set`, `--json`, `--registry-auth`, ...) are in [commands](commands.md).
"""


def _value(option: Option) -> str:
    kind = option.kind
    if isinstance(kind, Flag):
        return "on/off" if not kind.inverted else "on/off (set key: false)"
    if isinstance(kind, Named):
        return f"{kind.what}, repeatable"
    if isinstance(kind, (Strings, RequirementFiles)):
        return "repeatable"
    return "one value"


def _row(option: Option) -> str:
    flag = " ".join(f"`{name}`" for name in (option.flag, *option.aliases, option.short) if name) or "-"
    if option.flag_key:
        flag = f"`{option.flag} {option.flag_key}=REF`"
    key = f"`{option.key}`" if option.key else "-"
    commands = ", ".join(option.commands)
    help_text = " ".join(option.help.split()).replace("|", "\\|")
    notes = []
    if option.envvar:
        notes.append(f"env `{option.envvar}`")
    if not option.portable:
        notes.append("not carried in a bundle")
    extra = f" ({'; '.join(notes)})" if notes else ""
    return f"| {key} | {flag} | {_value(option)} | {commands} | {help_text}{extra} |"


def markdown() -> str:
    groups: dict[str, list[Option]] = {}
    for option in OPTIONS:
        groups.setdefault(option.field.split(".")[0], []).append(option)
    titles = {"images": "Base images", "mirror": "Mirroring (composer mirror)", "selection": "What goes in",
              "result": "The result and its smoke test", "packages": "Python packages"}
    parts = [HEADER]
    for group, options in groups.items():
        parts.append(f"## {titles.get(group, group)}\n")
        parts.append("| set key | flag | value | commands | what |")
        parts.append("|---|---|---|---|---|")
        parts += [_row(o) for o in options]
        parts.append("")
    parts.append("## Keys a set may not hold\n")
    parts += [f"- `{key}`: {why}." for key, why in REFUSED_KEYS.items()]
    return "\n".join(parts).rstrip("\n") + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown())
