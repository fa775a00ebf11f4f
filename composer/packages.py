"""Python packages for python-backend models, on the host side: requirements, wheelhouses, secrets.

Containers may not reach a package index (air gaps, proxies only the host trusts), so wheels can
be fetched on the host (`composer wheels`) and the build installs from that folder alone. The
host's pip also checks a wheelhouse before a build, so a missing wheel or a numpy-2 request is a
one-line error instead of a failed build step.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable
from urllib.parse import urlsplit

from composer.engine import Engine
from composer.errors import ComposerError, UsageError
from composer.spec import Packages
from composer.progress import LineSink, quiet



@dataclass(frozen=True)
class PythonTarget:
    """The python the packages are for: that of the image's python backend stub."""

    version: str  # "3.11"
    platform: str  # "manylinux_2_36_x86_64"

    def platforms(self) -> list[str]:
        """Every manylinux tag this C library runs, newest first (pip does not expand them)."""
        match = re.match(r"^manylinux_(\d+)_(\d+)_(\w+)$", self.platform)
        if not match:
            return [self.platform]
        major, minor, arch = int(match.group(1)), int(match.group(2)), match.group(3)
        tags = [f"manylinux_{major}_{m}_{arch}" for m in range(minor, 16, -1)]
        if minor >= 17:
            tags.append(f"manylinux2014_{arch}")
        if minor >= 12 and arch in ("x86_64", "i686"):
            tags.append(f"manylinux2010_{arch}")
        if minor >= 5 and arch in ("x86_64", "i686"):
            tags.append(f"manylinux1_{arch}")
        return tags

    def pip_args(self) -> list[str]:
        nodot = self.version.replace(".", "")
        args = ["--only-binary=:all:", "--python-version", self.version, "--implementation", "cp", "--abi", f"cp{nodot}"]
        for tag in self.platforms():
            args += ["--platform", tag]
        return args


def secrets_of(packages: Packages) -> list[str]:
    """The credential parts of the index URLs: what must never be shown or stored."""
    found = []
    for url in (packages.index_url, *packages.extra_index_urls):
        if not url:
            continue
        parts = urlsplit(url)
        for secret in (parts.password, parts.username):
            if secret:
                found.append(secret)
        if parts.query:
            found.append(parts.query)
    return sorted(set(found), key=len, reverse=True)


def redactor(secrets: Iterable[str]) -> Callable[[str], str]:
    secrets = [s for s in secrets if s]

    def redact(text: str) -> str:
        for secret in secrets:
            text = text.replace(secret, "***")
        return text

    return redact


def python_target(engine: Engine, full_ref: str, python_version: str) -> PythonTarget:
    """Read the full image's C library and machine, which decide which wheels fit it."""
    result = engine.run_once(
        full_ref,
        ["python3", "-c", "import platform; print(platform.libc_ver()[1]); print(platform.machine())"],
        entrypoint=[],
    )
    lines = result.output.split()
    if result.exit_code != 0 or len(lines) < 2 or not re.match(r"^\d+\.\d+", lines[0]):
        raise ComposerError(f"cannot tell the C library of {full_ref}: {result.output.strip()[:120]}")
    major, minor = lines[0].split(".")[:2]
    return PythonTarget(python_version, f"manylinux_{major}_{minor}_{lines[1]}")


def download_wheels(
    target: PythonTarget,
    packages: Packages,
    constraints: Iterable[str],
    out: Path,
    *,
    on_line: LineSink = quiet,
) -> list[Path]:
    """Fetch on the host every wheel the requirements need (and pip itself) into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    redact = redactor(secrets_of(packages))
    with tempfile.TemporaryDirectory() as tmp:
        requirements, constraint_file = _files(Path(tmp), packages.specs, constraints)
        common = target.pip_args() + _index_args(packages) + ["--dest", str(out)]
        _pip(["download", *common, "--requirement", str(requirements), "--constraint", str(constraint_file)],
             constraints, redact, on_line)
        _pip(["download", *common, "--no-deps", "pip"], constraints, redact, on_line)
    return sorted(out.glob("*.whl"))


def check_wheelhouse(
    target: PythonTarget, packages: Packages, constraints: Iterable[str], *, on_line: LineSink = quiet
) -> list[tuple[str, str]]:
    """Resolve the requirements against the wheelhouse alone, on the host; (name, version) pairs."""
    assert packages.wheelhouse is not None
    with tempfile.TemporaryDirectory() as tmp:
        requirements, constraint_file = _files(Path(tmp), packages.specs, constraints)
        report = Path(tmp) / "report.json"
        _pip(
            ["install", "--dry-run", "--ignore-installed", "--target", str(Path(tmp) / "target"),
             "--no-index", "--find-links", str(packages.wheelhouse),
             *target.pip_args(), "--report", str(report),
             "--requirement", str(requirements), "--constraint", str(constraint_file)],
            constraints, redactor([]), on_line, isolated=True, where=f"the wheelhouse {packages.wheelhouse}",
        )
        chosen = json.loads(report.read_text()).get("install", [])
    return sorted((item["metadata"]["name"], item["metadata"]["version"]) for item in chosen)


def explain_pip_failure(output: str, constraints: Iterable[str], where: str = "the index") -> str:
    """One line saying why pip failed: a pin conflict names the package that wanted it."""
    constraints = list(constraints)
    for line in output.splitlines():
        match = re.match(r"^\s*(\S+) (\S+) depends on (numpy\S*)", line)
        if match and constraints:
            return (f"{match.group(1)} {match.group(2)} needs {match.group(3)}, but this release's python "
                    f"backend needs {', '.join(constraints)}")
    for line in output.splitlines():
        match = re.match(r"^\s*The user requested (numpy\S+)$", line.strip())
        if match and constraints:
            return (f"the requested {match.group(1)} conflicts with this release's pin {', '.join(constraints)} "
                    "(the python backend breaks with numpy 2)")
    unreachable = re.search(r"(Failed to establish a new connection|Could not fetch URL|ProxyError|"
                            r"Name or service not known|SSLError)", output)
    for line in output.splitlines():
        match = re.search(r"No matching distribution found for (\S+)", line)
        if match and unreachable:
            return f"cannot reach {where} for {match.group(1)} ({unreachable.group(1)})"
        if match:
            return f"{where} has no wheel for {match.group(1)} that fits the image's python"
    errors = [line.strip() for line in output.splitlines() if line.strip().startswith("ERROR")]
    return errors[-1] if errors else (output.strip().splitlines() or ["pip failed"])[-1]


def _files(tmp: Path, specs, constraints) -> tuple[Path, Path]:
    requirements = tmp / "requirements.txt"
    requirements.write_text("".join(f"{s}\n" for s in specs))
    constraint_file = tmp / "constraints.txt"
    constraint_file.write_text("".join(f"{c}\n" for c in constraints))
    return requirements, constraint_file


def _index_args(packages: Packages) -> list[str]:
    args = []
    if packages.index_url:
        args += ["--index-url", packages.index_url]
    for url in packages.extra_index_urls:
        args += ["--extra-index-url", url]
    for host in packages.trusted_hosts:
        args += ["--trusted-host", host]
    if packages.ca_cert:
        args += ["--cert", str(packages.ca_cert)]
    return args


def _pip(args, constraints, redact, on_line, *, isolated: bool = False, where: str = "the index") -> None:
    env = dict(os.environ)
    if isolated:  # the host's own pip settings (find-links, indexes) must not fill gaps
        env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    run = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, env=env)
    for line in run.stdout.splitlines():
        if line.startswith(("Saved", "Collecting", "Would install")):
            on_line(redact(line))
    if run.returncode != 0:
        raise UsageError(redact(explain_pip_failure(run.stdout + "\n" + run.stderr, constraints, where)))
