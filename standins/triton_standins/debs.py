"""Debian packages made on the host and served to an image build from a throw-away apt repository.

The NGC-scale stand-in installs GBs of libraries as Debian packages, so that the image's dpkg
database owns every file as in NVIDIA's images. Serving the .debs over http on 127.0.0.1 (the
build runs with the host's network) keeps them out of every layer: a COPY of them would not.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.server
import os
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from composer.core.errors import BuildFailed


@dataclass(frozen=True)
class Control:
    """The control fields of one package."""

    package: str
    version: str
    description: str
    depends: tuple[str, ...] = ()
    section: str = "multiverse/devel"
    maintainer: str = "triton-composer stand-in <stand-in@localhost>"
    ldconfig: bool = False  # run ldconfig after install (a libc-bin trigger, as library packages do)

    def text(self, installed_kib: int) -> str:
        lines = [
            f"Package: {self.package}",
            f"Version: {self.version}",
            "Architecture: amd64",
            f"Maintainer: {self.maintainer}",
            f"Installed-Size: {installed_kib}",
        ]
        if self.depends:
            lines.append(f"Depends: {', '.join(self.depends)}")
        lines += [f"Section: {self.section}", "Priority: optional", f"Description: {self.description}"]
        return "\n".join(lines) + "\n"


def build_deb(root: Path, control: Control, out_dir: Path) -> Path:
    """Pack `root` (the files, as installed) into out_dir/<package>_<version>_amd64.deb.

    Uncompressed (-Znone): the payload is mostly shared libraries and random bytes, and xz
    on GBs would take longer than the rest of the build.
    """
    size = sum(p.lstat().st_size for p in root.rglob("*") if not p.is_dir())
    meta = root / "DEBIAN"
    meta.mkdir(exist_ok=True)
    (meta / "control").write_text(control.text(installed_kib=(size + 1023) // 1024))
    if control.ldconfig:
        (meta / "triggers").write_text("activate-noawait ldconfig\n")
    deb = out_dir / f"{control.package}_{control.version.replace(':', '%3a')}_amd64.deb"
    result = subprocess.run(
        ["dpkg-deb", "--root-owner-group", "-Znone", "--build", str(root), str(deb)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
    )
    if result.returncode != 0:
        last = (result.stdout.strip().splitlines() or ["no output"])[-1]
        raise BuildFailed(f"dpkg-deb could not pack {control.package}: {last}", log_tail=result.stdout)
    return deb


def write_index(repo: Path) -> None:
    """A flat repository's Packages file for every .deb in `repo` (what dpkg-scanpackages writes)."""
    stanzas = []
    for deb in sorted(repo.glob("*.deb")):
        control = subprocess.run(
            ["dpkg-deb", "--field", str(deb)], stdout=subprocess.PIPE, text=True, check=True
        ).stdout.strip()
        sha256 = hashlib.sha256()
        with deb.open("rb") as handle:
            for block in iter(functools.partial(handle.read, 1 << 22), b""):
                sha256.update(block)
        stanzas.append(
            f"{control}\nFilename: ./{deb.name}\nSize: {deb.stat().st_size}\nSHA256: {sha256.hexdigest()}\n"
        )
    (repo / "Packages").write_text("\n".join(stanzas))


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        pass


@contextlib.contextmanager
def served(repo: Path) -> Iterator[str]:
    """Serve `repo` over http on 127.0.0.1 for the duration; yields the apt source line."""
    handler = functools.partial(_QuietHandler, directory=os.fspath(repo))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="standin-apt-repo", daemon=True)
    thread.start()
    try:
        yield f"deb [trusted=yes] http://127.0.0.1:{server.server_address[1]}/ ./"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
