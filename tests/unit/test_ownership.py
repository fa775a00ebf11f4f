"""Render owns exactly what it wrote: user files survive a re-render, a changed rendered file is
refused by name, nothing is written through a symbolic link; bundle stages under fresh names."""

from __future__ import annotations

import json
from pathlib import Path
import os

import pytest

from composer.core.errors import UsageError
from composer.render.render import MARKER, check_output, write_context


def test_marker_lists_every_rendered_file_with_its_digest(ngc_plan, tmp_path):
    context = write_context(ngc_plan("python"), tmp_path / "ctx")
    record = json.loads((context.directory / MARKER).read_text())
    assert {"Dockerfile", "composition.json", "collect.py"} <= set(record["files"])
    assert all(d.startswith("sha256:") for d in record["files"].values())


def test_user_files_survive_a_re_render(ngc_plan, tmp_path):
    repo = tmp_path / "repo"
    (repo / "m").mkdir(parents=True)
    (repo / "m" / "config.pbtxt").write_text("ours\n")
    out = tmp_path / "ctx"
    write_context(ngc_plan("onnxruntime", bake_models=repo), out)
    (out / "notes.txt").write_text("mine")
    (out / "models" / "mine").mkdir()
    (out / "models" / "mine" / "config.pbtxt").write_text("mine")
    (out / "custom-backends").mkdir()
    (out / "custom-backends" / "keep.txt").write_text("mine")
    write_context(ngc_plan("onnxruntime"), out)  # no baked models now: only the rendered ones go
    assert (out / "notes.txt").read_text() == "mine"
    assert (out / "models" / "mine" / "config.pbtxt").read_text() == "mine"
    assert (out / "custom-backends" / "keep.txt").read_text() == "mine"
    assert not (out / "models" / "m").exists()


def test_a_changed_rendered_file_is_refused_by_name(ngc_plan, tmp_path):
    out = tmp_path / "ctx"
    write_context(ngc_plan("python"), out)
    (out / "Dockerfile").write_text("edited by hand\n")
    with pytest.raises(UsageError, match="Dockerfile was changed or replaced"):
        check_output(out)
    with pytest.raises(UsageError, match="Dockerfile was changed or replaced"):
        write_context(ngc_plan("python"), out)
    assert (out / "Dockerfile").read_text() == "edited by hand\n"


def test_a_user_file_in_the_way_is_refused_by_name(ngc_plan, tmp_path):
    out = tmp_path / "ctx"
    write_context(ngc_plan("python"), out)
    (out / "packages").mkdir()
    (out / "packages" / "requirements.txt").write_text("mine\n")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "six-1.16.0-py2.py3-none-any.whl").write_bytes(b"w")
    from composer.config.types import Packages

    with pytest.raises(UsageError, match="packages/requirements.txt is in the way"):
        write_context(ngc_plan("python", packages=Packages(specs=("six",), wheelhouse=wheels)), out)
    assert (out / "packages" / "requirements.txt").read_text() == "mine\n"


def test_nothing_is_written_through_a_link(ngc_plan, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "Dockerfile").symlink_to(outside)
    with pytest.raises(UsageError):  # a folder holding a file (a link) render did not write
        write_context(ngc_plan("python"), fresh)
    out = tmp_path / "ctx"
    write_context(ngc_plan("python"), out)
    (out / "Dockerfile").unlink()
    (out / "Dockerfile").symlink_to(outside)
    with pytest.raises(UsageError, match="Dockerfile"):
        write_context(ngc_plan("python"), out)
    assert outside.read_text() == "precious\n"


def test_a_linked_folder_inside_is_refused(ngc_plan, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "ctx"
    write_context(ngc_plan("python"), out)
    os.symlink(elsewhere, out / "packages")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "six-1.16.0-py2.py3-none-any.whl").write_bytes(b"w")
    from composer.config.types import Packages

    with pytest.raises(UsageError, match="packages"):
        write_context(ngc_plan("python", packages=Packages(specs=("six",), wheelhouse=wheels)), out)
    assert list(elsewhere.iterdir()) == []


def test_a_re_render_of_an_unchanged_folder_succeeds(ngc_plan, tmp_path):
    out = tmp_path / "ctx"
    first = (write_context(ngc_plan("python"), out).dockerfile).read_bytes()
    assert write_context(ngc_plan("python"), out).dockerfile.read_bytes() == first
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_bundle_staging_never_touches_a_users_path(tmp_path):
    from composer.core.files import fresh_folder

    out = tmp_path / "b.tar"
    (tmp_path / "b.tar.staging").mkdir()
    (tmp_path / "b.tar.staging" / "mine.txt").write_text("mine")
    staging = fresh_folder(out, "staging")
    assert staging.parent == tmp_path and staging.name != "b.tar.staging" and staging.is_dir()
    assert (tmp_path / "b.tar.staging" / "mine.txt").read_text() == "mine"


def test_bundle_output_refuses_a_file_it_did_not_write(tmp_path):
    from composer.sources.bundle import check_bundle_output

    mine = tmp_path / "b.tar"
    mine.write_text("my notes")
    with pytest.raises(UsageError, match="did not write it"):
        check_bundle_output(mine)
    link = tmp_path / "l.tar"
    link.symlink_to(tmp_path / "elsewhere.tar")
    with pytest.raises(UsageError, match="symbolic link"):
        check_bundle_output(link)
    with pytest.raises(UsageError, match="cannot be written"):
        check_bundle_output("/proc/x.tar")
    with pytest.raises(UsageError, match="the folder .*new does not exist"):  # staged beside it: no folder made
        check_bundle_output(tmp_path / "new" / "b.tar")
    assert check_bundle_output(tmp_path / "b2.tar") and not (tmp_path / "new").exists()


def test_checking_an_output_file_writes_nothing_in_its_folder(tmp_path):
    """Checked before any work: a build that then fails at the engine leaves --sbom's folder (its
    entries and its time) as it found it; a read-only folder is still refused."""
    import os

    from composer.core.errors import Invalid
    from composer.core.files import check_output_file

    folder = tmp_path / "out"
    folder.mkdir()
    os.utime(folder, (1_000_000_000, 1_000_000_000))
    check_output_file(folder / "sbom.json", "--sbom")
    assert list(folder.iterdir()) == [] and folder.stat().st_mtime == 1_000_000_000
    for kernel in ("/proc/x.json", "/sys/x.json"):
        with pytest.raises(Invalid, match="cannot be written .*of the kernel's own files"):
            check_output_file(Path(kernel), "--sbom")
