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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable
from urllib.parse import urlsplit

from composer.resolve.contents import FullImageContents
from composer.core.errors import ComposerError, UsageError
from composer.config.types import Packages
from composer.core.progress import LineSink, quiet
from composer.core.redaction import redact
from composer.config.requirements import installable_requirement, requirement_url



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
    """Whole secrets in the index and requirement URLs: what must never be shown or stored.

    The password (or a token given as the user name), the whole user:password and the query
    string, in every requirement form pip takes (NAME @ URL, a bare URL); never a user name
    alone, so ordinary text is not scrambled. redact() removes URL credentials anywhere; these
    also catch a secret printed apart from its URL.
    """
    found = []
    urls = [packages.index_url, *packages.extra_index_urls] + [requirement_url(line) for line in packages.specs]
    for url in urls:
        if not url:
            continue
        try:
            parts = urlsplit(url)
            username, password = parts.username, parts.password
        except ValueError:  # a malformed URL: redact() hides its userinfo and query
            continue
        if password:
            found += [password, f"{username}:{password}"]
        elif username:
            found.append(username)  # a token in the user name's place
        if parts.query:
            found.append(parts.query)
    return sorted(set(found), key=len, reverse=True)


def redactor(secrets: Iterable[str]) -> Callable[[str], str]:
    """composer.core.redaction.redact with these secrets, for a stream of lines (pip's output)."""
    secrets = list(secrets)
    return lambda text: redact(text, secrets)


def python_target(contents: FullImageContents) -> PythonTarget:
    """The python that wheels are fetched for, which is the python they are installed into: the
    python backend stub's, which must be the image's own python3 (packages land in its
    dist-packages; an environment is a venv of that interpreter). The one check of it, for --pip
    and model environments alike, with the image's C library and machine: all read by the one
    probe run (composer.resolve.contents), no container of its own."""
    mismatch = contents.python_mismatch()
    if mismatch:
        need = ("python packages and model environments need the python backend's python" if contents.python is None
                else "python packages must be of the stub's python")
        raise UsageError(f"{contents.image}: {mismatch}: {need}")
    if not re.match(r"^\d+\.\d+", contents.libc) or not contents.machine:
        raise ComposerError(f"cannot tell the C library of {contents.image}: the probe found "
                            f"{contents.libc or 'none'} on {contents.machine or 'an unknown machine'}")
    major, minor = contents.libc.split(".")[:2]
    return PythonTarget(contents.stub_python_version, f"manylinux_{major}_{minor}_{contents.machine}")


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # a requirement's distribution name


def download_wheels(
    target: PythonTarget,
    packages: Packages,
    constraints: Iterable[str],
    out: Path,
    *,
    on_line: LineSink = quiet,
) -> list[Path]:
    """Fetch on the host every wheel the requirements need (and pip itself) into `out`."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot write the wheelhouse {out}: {exc.strerror or exc}") from None
    redact = redactor(secrets_of(packages))
    env = _index_env(packages)  # in pip's environment, never on its command line (ps shows argv)
    # pip writes into a folder of the composer's own inside `out`; only whole files are moved out
    # of it, so an interrupt or a failure leaves no half-written wheel where a build would take it.
    with tempfile.TemporaryDirectory(prefix="triton-composer-pip-") as tmp, \
            tempfile.TemporaryDirectory(prefix=".triton-composer-incoming-", dir=out) as incoming:
        requirements, constraint_file = _files(Path(tmp), packages.specs, constraints)
        common = target.pip_args() + ["--dest", incoming]
        downloads = [["download", *common, "--requirement", str(requirements), "--constraint", str(constraint_file)],
                     ["download", *common, "--no-deps", "pip"]]  # pip itself: it installs them in the image
        # Both at once (each mostly waits on the index), unless the requirements name pip too.
        names = {match.group(0).lower() for match in (_NAME.match(installable_requirement(s)) for s in packages.specs)
                 if match}
        with ThreadPoolExecutor(max_workers=1 if "pip" in names else 2) as pool:
            for done in [pool.submit(_pip, args, constraints, redact, on_line, env=env) for args in downloads]:
                done.result()
        for whole in sorted(Path(incoming).iterdir()):
            if whole.is_file() and not whole.is_symlink():
                os.replace(whole, out / whole.name)
    return sorted(out.glob("*.whl"))


def check_wheelhouse(
    target: PythonTarget, packages: Packages, constraints: Iterable[str], *, on_line: LineSink = quiet
) -> list[tuple[str, str]]:
    """Resolve the requirements against the wheelhouse alone, on the host; (name, version) pairs."""
    assert packages.wheelhouse is not None
    with tempfile.TemporaryDirectory() as tmp:
        requirements, constraint_file = _files(Path(tmp), [installable_requirement(s) for s in packages.specs],
                                               constraints)
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


def _index_env(packages: Packages) -> dict[str, str]:
    """pip's own environment variables for the indexes, trusted hosts and CA."""
    env = {}
    if packages.index_url:
        env["PIP_INDEX_URL"] = packages.index_url
    if packages.extra_index_urls:
        env["PIP_EXTRA_INDEX_URL"] = " ".join(packages.extra_index_urls)
    if packages.trusted_hosts:
        env["PIP_TRUSTED_HOST"] = " ".join(packages.trusted_hosts)
    if packages.ca_cert:
        env["PIP_CERT"] = str(packages.ca_cert)
    return env


def _pip(args, constraints, redact, on_line, *, isolated: bool = False, where: str = "the index",
         env: dict[str, str] | None = None) -> None:
    env = {**os.environ, **(env or {})}
    if isolated:  # the host's own pip settings (find-links, indexes) must not fill gaps
        env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    run = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, env=env)
    for line in run.stdout.splitlines():
        if line.startswith(("Saved", "Collecting", "Would install")):
            on_line(redact(line))
    if run.returncode != 0:
        raise UsageError(redact(explain_pip_failure(run.stdout + "\n" + run.stderr, constraints, where)))
