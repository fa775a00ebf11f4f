"""Image platforms (os/architecture[/variant]): the one reading of `--platform` and of the
platforms an index's descriptors and an image's config state, so a platform means the same
when it is checked up front (spec) and when an index is searched for it (registry)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from composer.core.errors import UsageError

# OCI's platform values (Go's GOOS and GOARCH): the ones a --platform may name.
OSES = ("linux", "windows", "darwin", "freebsd", "netbsd", "openbsd", "solaris", "illumos", "aix", "android",
        "dragonfly", "ios", "js", "plan9", "wasip1")
ARCHITECTURES = ("amd64", "arm64", "arm", "386", "ppc64le", "ppc64", "s390x", "riscv64", "mips64le", "mips64",
                 "mipsle", "mips", "loong64", "wasm")
_VARIANT = re.compile(r"v[0-9]{1,2}")
SHAPE = "os/arch[/variant], e.g. linux/amd64 or linux/arm64/v8"


def platform_problem(text: str) -> str | None:
    """What is wrong with a platform string, naming what would be valid (None: nothing)."""
    parts = text.split("/")
    if len(parts) not in (2, 3) or not all(parts):
        return f"not a platform: expected {SHAPE}"
    if parts[0] not in OSES:
        return f"unknown os '{parts[0][:40]}' (one of {', '.join(OSES)})"
    if parts[1] not in ARCHITECTURES:
        return f"unknown architecture '{parts[1][:40]}' (one of {', '.join(ARCHITECTURES)})"
    if len(parts) == 3 and not _VARIANT.fullmatch(parts[2]):
        return f"unknown variant '{parts[2][:40]}' (v5, v6, v7, v8, ...)"
    return None


@dataclass(frozen=True)
class Platform:
    """os/architecture[/variant], as an index's descriptors and an image's config name it."""

    os: str
    architecture: str
    variant: str | None = None

    @classmethod
    def parse(cls, text: str, what: str = "--platform") -> "Platform":
        """`linux/amd64`, `linux/arm64/v8`; a UsageError names `what`, the input and what is valid."""
        problem = platform_problem(text)
        if problem:
            raise UsageError(f"{what} {text[:80]}: {problem}")
        parts = text.split("/")
        return cls(parts[0], parts[1], parts[2] if len(parts) == 3 else None)

    @classmethod
    def of(cls, data: object) -> "Platform | None":
        """From an index descriptor's `platform` or an image config (None: it names none)."""
        if not isinstance(data, dict) or not data.get("os") or not data.get("architecture"):
            return None
        return cls(str(data["os"]), str(data["architecture"]), str(data.get("variant") or "") or None)

    def matches(self, other: "Platform | None") -> bool:
        """Whether `other` is this platform; a variant left out matches any (arm64 is v8 when unsaid)."""
        if other is None or (self.os, self.architecture) != (other.os, other.architecture):
            return False
        theirs = other.variant or ("v8" if other.architecture == "arm64" else None)
        return self.variant is None or self.variant == theirs

    def __str__(self) -> str:
        return "/".join(p for p in (self.os, self.architecture, self.variant) if p)
