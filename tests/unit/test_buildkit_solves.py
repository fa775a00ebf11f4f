"""A --no-cache build on BuildKit: one solve per labelled stage, each stage run afresh once per run."""

from __future__ import annotations

from composer.engine.buildkit import fresh_options, needed, stages_of
from composer.render.render import write_context


def _solves(dockerfile: str, buildargs: dict) -> tuple[list, list[tuple[str, list[str]]]]:
    """The stages and what each solve of a --no-cache build would pass, as BuildKit.build orders them."""
    stages = stages_of(dockerfile, buildargs)
    targets = [s.name for s in stages[:-1] if s.labelled and s.name] + [stages[-1].name]
    made: set[str] = set()
    solves = []
    for target in targets:
        solves.append((target, fresh_options(stages, made)))
        made |= needed(stages, target)
    return stages, solves


def test_the_stages_a_solve_runs_follow_from_and_copy_from(ngc_plan, tmp_path):
    plan = ngc_plan("onnxruntime", "python", base="pruned")
    context = write_context(plan, tmp_path / "context")
    stages = stages_of((context.pruned_base / "Dockerfile").read_text(), {})
    layer = next(s.name for s in stages if s.name.startswith("layer-") and s.labelled)
    assert {"collect", "decide", "pruned", "split", layer} <= needed(stages, layer)
    assert not any(n.startswith("layer-") and n != layer for n in needed(stages, layer))
    # What composer build solves: the split stage, its tree and lists; no family's own stage.
    split = next(s for s in stages if s.name == "split")
    assert split.labelled and {"collect", "decide", "pruned", "layers", "split"} <= needed(stages, "split")
    assert not any(n.startswith("layer-") for n in needed(stages, "split"))


def test_a_no_cache_build_runs_each_stage_once_whatever_the_number_of_solves(ngc_plan, tmp_path):
    plan = ngc_plan("onnxruntime", "python", base="pruned")
    context = write_context(plan, tmp_path / "context")
    for dockerfile, args in ((context.pruned_base / "Dockerfile", {}),
                             (context.directory / "Dockerfile", {"PRUNED_BASE": "sha256:" + "b" * 64})):
        stages, solves = _solves(dockerfile.read_text(), args)
        assert len(solves) > 3 and solves[0][1] == ["--no-cache"]  # the first solve: every step afresh
        made: set[str] = set()
        for target, options in solves:
            made_before = set(made)
            made |= needed(stages, target)
            if not made_before:
                continue
            listed = set(options[1].removeprefix("no-cache=").split(",")) if options else set()
            # Afresh: every stage this solve runs that no earlier solve ran; from the run's own
            # solves: the stages they ran (the same steps, just made).
            assert needed(stages, target) - made_before <= listed, (dockerfile.name, target)
            assert not listed & made_before, (dockerfile.name, target)


def test_every_run_of_a_pruned_base_exports_its_cache_to_one_tag(ngc_plan):
    """The registry cache's tag leaves the labels out (they name the run): a fresh builder finds the
    steps another run of the same base exported. A change to a step is a tag of its own."""
    from composer.engine.buildkit import cache_name
    from composer.render.render import render_pruned_base

    plan = ngc_plan("onnxruntime", "python", base="pruned")
    one, two = render_pruned_base(plan, "run1"), render_pruned_base(plan, "run2")
    assert one != two and cache_name(one, {}) == cache_name(two, {})
    assert cache_name(one, {}) != cache_name(one.replace("--all-folders", "--all"), {})
    assert cache_name(one, {}) != cache_name(one, {"PRUNED_BASE": "sha256:1"})


class _Runtime:
    """The engine side of a solve, as far as BuildKit.build asks here: it holds no base image."""

    loads_partial_archives = False

    def image(self, ref):
        return None


def _calls(tmp_path, ngc_plan, *, nocache: bool, cache: str | None) -> list[tuple[str, list[str], bool]]:
    from composer.engine.buildkit import BuildKit
    from composer.render.render import render_pruned_base

    plan = ngc_plan("onnxruntime", "python", base="pruned")
    (tmp_path / "Dockerfile").write_text(render_pruned_base(plan, "run1"))
    builder = BuildKit("buildkit://unix:///nonexistent.sock", _Runtime(), cache=cache)
    calls = []

    def solve(options, target, tag, held, redact, on_line, export, load=True):
        calls.append((target, options, load))
        return "sha256:" + "1" * 64

    builder._solve = solve
    builder.build(tmp_path, target="split", nocache=nocache)
    return calls


def test_a_no_cache_build_exports_its_cache_again_from_its_own_records(ngc_plan, tmp_path):
    """BuildKit exports no usable record of a solve's last step that ignored the cache: with
    --builder-cache, each --no-cache solve is followed by one from the builder's own cache that
    exports it (not loaded, no no-cache option); without --no-cache, or without a cache, none."""
    calls = _calls(tmp_path, ngc_plan, nocache=True, cache="127.0.0.1:5000/team/cache")
    loaded = [c for c in calls if c[2]]
    again = [c for c in calls if not c[2]]
    assert [c[0] for c in again] == [c[0] for c in loaded] and loaded
    assert all("--no-cache" in c[1] or any(o.startswith("no-cache=") for o in c[1]) for c in loaded[:1])
    for target, options, _ in again:
        assert "--no-cache" not in options and not any(o.startswith("no-cache=") for o in options), target
        assert any(o.startswith("type=registry,ref=127.0.0.1:5000/team/cache:") and o.endswith(f"-{target},mode=max")
                   for o in options), options
    for order, (first, second) in enumerate(zip(calls[::2], calls[1::2])):  # each right after its own
        assert first[0] == second[0] and first[2] and not second[2], order
    assert all(c[2] for c in _calls(tmp_path, ngc_plan, nocache=False, cache="127.0.0.1:5000/team/cache"))
    assert all(c[2] for c in _calls(tmp_path, ngc_plan, nocache=True, cache=None))


def _blob(folder, data: bytes) -> str:
    import hashlib

    name = hashlib.sha256(data).hexdigest()
    (folder / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    (folder / "blobs" / "sha256" / name).write_bytes(data)
    return "sha256:" + name


def test_an_export_folder_holds_the_bases_layers_as_links_and_goes_after(tmp_path):
    """BuildKit sends a blob the export folder lacks only: the bases' layers are linked in from the
    layout first (the same files, not copies); a layer the layout lacks is left for BuildKit; the
    folder goes when the build ends, the layout stays."""
    import os

    from composer.engine.buildkit import _exports

    layout = tmp_path / "oci-layouts" / "engine"
    base = _blob(layout, b"a base layer")
    missing = "sha256:" + "0" * 64
    with _exports(layout, {base, missing}) as export:
        linked = export / "blobs" / "sha256" / base.split(":")[1]
        assert export.parent == layout.parent and linked.read_bytes() == b"a base layer"
        assert os.stat(linked).st_ino == os.stat(layout / "blobs" / "sha256" / base.split(":")[1]).st_ino
        assert not (export / "blobs" / "sha256" / missing.split(":")[1]).exists()
    assert not export.exists() and (layout / "blobs" / "sha256" / base.split(":")[1]).exists()
    with _exports(None, {base}) as export:  # no layout: an empty folder, BuildKit sends everything
        assert list((export / "blobs" / "sha256").iterdir()) == []


def test_a_stage_is_loaded_from_the_export_folder_without_the_layers_the_engine_holds(tmp_path):
    """The archive an engine loads: the configuration, the layers the engine lacks (byte for byte)
    and a manifest naming every layer in order and the tag; an index's image manifest is read
    through it (not an attestation's)."""
    import io
    import json
    import tarfile

    import pytest

    from composer.core.errors import BuildFailed
    from composer.engine.buildkit import _docker_archive

    held, new = _blob(tmp_path, b"held layer"), _blob(tmp_path, b"new layer" * 1000)
    config = _blob(tmp_path, b'{"rootfs": {}}')
    manifest = _blob(tmp_path, json.dumps({"config": {"digest": config}, "layers": [{"digest": held}, {"digest": new}]}).encode())
    proof = _blob(tmp_path, b"{}")
    index = _blob(tmp_path, json.dumps({"manifests": [
        {"digest": proof, "annotations": {"vnd.docker.reference.type": "attestation-manifest"}},
        {"digest": manifest}]}).encode())
    for digest in (manifest, index):
        with _docker_archive(tmp_path, digest, "triton-composer/hold:run1", {held}, "a stage") as stream:
            data = stream.read()
        with tarfile.open(fileobj=io.BytesIO(data)) as archive:
            names = archive.getnames()
            assert names == [f"{config[7:]}.json", f"{new[7:]}/layer.tar", "manifest.json"]
            assert archive.extractfile(f"{new[7:]}/layer.tar").read() == b"new layer" * 1000
            assert json.loads(archive.extractfile("manifest.json").read()) == [{
                "Config": f"{config[7:]}.json", "RepoTags": ["triton-composer/hold:run1"],
                "Layers": [f"{held[7:]}/layer.tar", f"{new[7:]}/layer.tar"]}]
    with pytest.raises(BuildFailed, match="exported no readable manifest"):
        _docker_archive(tmp_path, "sha256:" + "f" * 64, None, set(), "a stage")


def test_an_image_the_composer_wrote_goes_into_the_layout_linked_not_saved(tmp_path, monkeypatch):
    """The base's layers are the layout's already (ensure); the composer's own layers are linked in
    from their files (the same inode), its configuration written as it is: no save of the image;
    a second call finds its manifest and writes nothing."""
    import hashlib
    import json

    from composer.engine import oci_layout

    monkeypatch.setenv("COMPOSER_CACHE_DIR", str(tmp_path / "cache"))

    class Engine:
        def identity(self):
            return "engine-1"

        def image(self, ref):
            return type("Info", (), {"id": ref})()

    engine = Engine()
    folder = oci_layout.folder_for(engine)
    blobs = folder / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    base_layer = _blob(folder, b"base layer")
    own = tmp_path / "layer-01.tar"
    own.write_bytes(b"the composer's layer")
    own_id = "sha256:" + hashlib.sha256(own.read_bytes()).hexdigest()
    config = json.dumps({"rootfs": {"type": "layers", "diff_ids": [base_layer, own_id]}}).encode()
    image_id = "sha256:" + hashlib.sha256(config).hexdigest()
    monkeypatch.setattr(oci_layout, "ensure", lambda engine, image, on_line=None: oci_layout.Layout(folder, "", image))
    monkeypatch.setattr(oci_layout, "_save_into", lambda *args: (_ for _ in ()).throw(AssertionError("saved")))
    layout = oci_layout.add_written(engine, image_id, config, "sha256:base", [(own_id, own)])
    assert (blobs / own_id[7:]).stat().st_ino == own.stat().st_ino  # linked, not copied
    manifest = json.loads((blobs / layout.manifest[7:]).read_text())
    assert [layer["digest"] for layer in manifest["layers"]] == [base_layer, own_id]
    assert manifest["config"]["digest"] == image_id and (blobs / image_id[7:]).read_bytes() == config
    assert oci_layout._manifest_of(folder, image_id) == layout.manifest
    own.unlink()  # found again by its manifest: nothing read
    assert oci_layout.add_written(engine, image_id, config, "sha256:base", [(own_id, blobs / own_id[7:])]) == layout
