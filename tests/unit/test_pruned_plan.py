"""--base pruned in the spec, the plan, the rendered Dockerfile and the size report (no engine)."""

from __future__ import annotations

import json
from dataclasses import replace

import re
import pytest

from composer.engine.interface import ImageInfo
from composer.core.errors import Invalid, UsageError
from composer.resolve.offer import Offer
from composer.resolve.plan import make_plan
from composer.assembly.pruning import BASE_LABEL, base_key, proof_failure, pruned_base
from composer.render.render import render_dockerfile, render_pruned_base, write_context
from composer.config.options import OPTIONS
from composer.config.rules import validate as check
from tests.specs import spec


def test_bad_base_and_a_lonely_keep_tensorrt_builder_are_refused():
    base = next(o for o in OPTIONS if o.field == "selection.base")
    with pytest.raises(Invalid, match="give min .* or pruned"):
        base.kind.read("slim", None)
    with pytest.raises(UsageError, match="--keep-tensorrt-builder applies to a pruned base: add --base pruned"):
        check(spec(backends=("python",), version="24.09", keep_tensorrt_builder=True))
    check(spec(backends=("python",), version="24.09", keep_tensorrt_builder=True, base="pruned"))


@pytest.mark.parametrize("release", ["23.07", "24.09", "25.01", "26.07", "26.09"])
def test_every_catalogued_release_can_be_pruned_with_its_familys_list(ngc_plan, catalog, release):
    plan = ngc_plan("python", release=release, base="pruned")
    loaded = dict(plan.pruning.loaded_at_run_time)
    assert loaded == dict(catalog.loaded_at_run_time_for(catalog.release(release)))
    assert "libtorch_cuda.so" in loaded and not any(name.startswith("libcudnn") for name in loaded)


def test_without_the_min_images_configuration_a_pruned_plan_is_refused(ngc_plan, catalog):
    plan = ngc_plan("python")
    with pytest.raises(UsageError, match="needs the min image's configuration"):
        make_plan(spec(backends=("python",), version="24.09", base="pruned"), plan.release,
                  Offer.from_layout(catalog, plan.release), catalog, plan.full, plan.min)


def test_the_dockerfile_builds_on_the_base_given_restates_the_min_config_and_proves(ngc_plan):
    text = render_dockerfile(ngc_plan("onnxruntime", "python", base="pruned", keep_tensorrt_builder=True))
    assert "\nARG PRUNED_BASE\n\nFROM nvcr.io/nvidia/tritonserver@sha256:" in text  # before the first FROM
    assert "\nFROM ${PRUNED_BASE} AS composed-files\nENV \\\n" in text and "FROM scratch" not in text
    assert "USER root\nCOPY --from=decide /composer/prune/pruned.json /opt/tritonserver/pruned.json\n" in text
    assert 'NVIDIA_REQUIRE_CUDA="cuda>=9.0"' in text  # literally, not JSON's \u003e
    assert 'ENTRYPOINT ["/opt/nvidia/nvidia_entrypoint.sh"]' in text
    assert '"--keep-tensorrt-builder", "bin", "lib"' in text and '"backends/onnxruntime", "backends/python"]' in text
    assert text.rstrip().endswith("FROM composed\nCOPY --from=proof /composer-proof/proved.txt /opt/tritonserver/proved.txt")
    assert 'RUN ["/bin/sh", "/composer-proof/prove.sh", "/composer-proof/required.txt", "/composer-proof/proved.txt"]' in text
    assert "FROM scratch" not in render_dockerfile(ngc_plan("onnxruntime", "python"))


def test_the_proofs_line_is_the_error():
    tail = "Step 37/38 : RUN prove.sh\n\x1b[91mproof failed: /usr/lib/libx.so.1 needs liby.so.2, which the image lacks\n\x1b[0m"
    assert proof_failure(tail) == "pruned base: /usr/lib/libx.so.1 needs liby.so.2, which the image lacks"
    assert proof_failure("Step 3/9 : RUN false") is None


def test_stage_images_are_swept_by_their_label_and_run_never_a_live_runs():
    """Stages name their run ("<stage> <run>"): a sweep with a run removes only that run's; one
    without removes those of runs not at work (and stages of a version that named none), leaves first."""
    from composer.assembly.pruning import STAGE_LABEL, sweep_stages
    from composer.engine import locks
    from tests.unit.fake_engine import FakeEngine

    def info(image_id, value):
        return ImageInfo(id=image_id, ref=image_id, tags=(), repo_digests=(), env={}, labels={STAGE_LABEL: value}, size=1)

    stages = {"sha256:1": info("sha256:1", "decide aaaa"), "sha256:2": info("sha256:2", "layer aaaa"),
              "sha256:3": info("sha256:3", "decide bbbb"), "sha256:4": info("sha256:4", "decide"),
              "sha256:5": info("sha256:5", "split mine")}
    parents = {"sha256:2": "sha256:5"}  # sha256:5 lists only once its child is gone
    removed = []
    engine = FakeEngine(infos=stages)

    def listed(label, untagged=False):
        assert label == STAGE_LABEL and untagged
        gone = set(removed)
        return [i for i in stages if i not in gone and not any(p == i and c not in gone for c, p in parents.items())]

    engine.images_labelled = listed
    engine.remove_image = lambda image, force=False, prune=True: removed.append(image) if not prune else None
    sweep_stages(engine, run="aaaa")
    assert removed == ["sha256:1", "sha256:2"]
    with locks.run_record("mine", "engine"):  # a run at work keeps its stages
        sweep_stages(engine)
    assert removed == ["sha256:1", "sha256:2", "sha256:3", "sha256:4"]
    sweep_stages(engine)
    assert removed[-1] == "sha256:5"


def test_every_stage_no_image_keeps_labels_itself_first_and_the_image_needs_the_proof(ngc_plan, tmp_path):
    """BuildKit and Podman build only the stages the target needs: the image copies the proof's
    verdict, so the proof runs under every builder; each swept stage is labelled before any step."""
    plan = ngc_plan("onnxruntime", "python", base="pruned")
    context = write_context(plan, tmp_path / "context")
    for dockerfile in (context.directory / "Dockerfile", context.pruned_base / "Dockerfile"):
        lines = dockerfile.read_text().splitlines()
        for index, line in enumerate(lines):
            stage = re.match(r"FROM \S+ AS (pruned|layers|split|layer|proof|layers-made)(-[0-9]{2}-[a-z0-9-]+)?$", line)
            if stage and stage.group(1) == "proof":  # the composition's: build cache named by its key, like composed
                body = lines[index + 1:lines.index("", index)]
                assert not any("org.triton-composer.stage=" in x for x in body), dockerfile
                assert body[-1] == 'LABEL org.triton-composer.cached-stage="proof ${COMPOSER_KEY}"', dockerfile
            elif stage:  # the run that builds it (an ARG makes no image: the label is still the first step)
                assert lines[index + 1:index + 3] == [
                    "ARG COMPOSER_RUN=render",
                    f'LABEL org.triton-composer.stage="{stage.group(1)} ${{COMPOSER_RUN}}"'], dockerfile
            else:
                assert " AS " not in line or re.search(
                    r" AS (full|min|collect|decide|collected|composed-files|system|composed|packages|model-envs)$",
                    line), line  # build cache shared by builds of the same inputs (decide: by the base's too)
    final = (context.directory / "Dockerfile").read_text().rsplit("\nFROM ", 1)[1]
    assert final.startswith("composed\n") and "COPY --from=proof /composer-proof/proved.txt" in final


def test_the_pruned_base_is_its_own_context_sharing_the_collect_and_decide_steps(ngc_plan, tmp_path):
    plan = ngc_plan("onnxruntime", "python", base="pruned")
    context = write_context(plan, tmp_path / "context")
    assert context.pruned_base == tmp_path / "context" / "pruned-base"
    assert sorted(p.name for p in context.pruned_base.iterdir()) == [
        "Dockerfile", "collect.py", "elfdeps.py", "keep_layer.sh", "layers.json", "layers.py", "loaded-at-run-time.json",
        "probe.py", "prune.py", "pydists.py"]
    base = (context.pruned_base / "Dockerfile").read_text()
    main = context.dockerfile.read_text()
    collect = base[base.index("FROM nvcr.io"):base.index("FROM collect AS decide")].strip()
    decide = base[base.index("FROM collect AS decide"):base.index("# The min image less")].strip()
    steps, _, mark = decide.rpartition("\n")  # the base's decide ends with a mark of its own: build cache
    assert mark == 'LABEL org.triton-composer.build-cache="pruned-base decide"'  # `cache clear` removes it
    assert collect.count("FROM ") == 3 and collect in main and steps in main  # the same steps: one cache
    split = base[base.index("\nFROM pruned AS split\n"):base.index("# By hand: one stage per family")]
    assert split.strip().splitlines()[-1] == 'LABEL org.triton-composer.cached-stage="split ${COMPOSER_RUN}"'  # what
    assert "AS layers-made" not in base  # the composer builds: the tree and the lists, one stage for every family
    final = base[base.index("\nFROM scratch\n"):].strip().splitlines()  # by hand, the builder copies each
    assert final[1:] == [f"COPY --from=layer-{slot.name} / /" for slot in plan.pruning.slots]
    assert "rm -f -- < /composer/prune/drop.txt" in base
    assert write_context(ngc_plan("onnxruntime", "python"), tmp_path / "plain").pruned_base is None


def test_the_base_key_follows_the_base_images_and_every_file_of_its_context(ngc_plan, tmp_path):
    plan = ngc_plan("onnxruntime", "python", base="pruned")
    folder = write_context(plan, tmp_path / "a").pruned_base
    key = base_key(plan, folder)
    assert key == base_key(plan, write_context(plan, tmp_path / "b").pruned_base)  # the same inputs, the same base
    assert key != base_key(replace(plan, min=replace(plan.min, id="sha256:" + "9" * 64)), folder)
    assert key != base_key(plan, write_context(ngc_plan("onnxruntime", base="pruned"), tmp_path / "c").pruned_base)
    (folder / "loaded-at-run-time.json").write_text("{}")
    assert key != base_key(plan, folder)


def test_an_older_bases_format_is_not_taken_for_this_one(ngc_plan, tmp_path, monkeypatch):
    """A base of one layer (format 1) made from the same inputs would have had another key."""
    from composer.assembly import pruning

    plan = ngc_plan("onnxruntime", "python", base="pruned")
    folder = write_context(plan, tmp_path / "a").pruned_base
    key = base_key(plan, folder)
    monkeypatch.setattr(pruning, "BASE_FORMAT", "1")
    assert base_key(plan, folder) != key


def _family_stages(plan, run="render") -> dict:
    """A fake engine's split stage of `plan`'s base (its label -> image) and its trees as an engine
    hands out a container's folders (with the mount points it adds): each family's list, one file a
    family, and layers.py's report."""
    from composer.assembly.base_layers import split_label

    image = f"sha256:{500:064x}"
    lists = {f"/composer-layers/{slot.name}.list": f"opt/{slot.name}/file\n".encode() for slot in plan.pruning.slots}
    lists["/composer-layers/layers.json"] = b'{"layers": []}'
    files = {f"/opt/{slot.name}/file": slot.name.encode() for slot in plan.pruning.slots}
    tree = {"/": None, "/.dockerenv": b"", "/etc/": None, "/etc/hosts": b"", "/opt/": None,
            **{f"/opt/{slot.name}/": None for slot in plan.pruning.slots}, **files,
            "/composer-layers/": None, **lists}
    return {"roots": {split_label(run): [image]},
            "archives": {(image, "/"): tar_of(tree), (image, "/composer-layers"): tar_of({"composer-layers/": None, **{
                name.lstrip("/"): data for name, data in lists.items()}})}}


def tar_of(entries: dict) -> bytes:
    """A tar of `entries` (name -> bytes, or None for a folder), in the order given."""
    import io
    import tarfile

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.mtime = 1_800_000_000
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def test_a_base_made_before_is_reused_and_a_new_one_is_made_tagged_and_labelled(ngc_plan, tmp_path):
    from tests.unit.fake_engine import FakeEngine

    plan = ngc_plan("onnxruntime", "python", base="pruned")
    folder = write_context(plan, tmp_path / "context").pruned_base
    key = base_key(plan, folder)
    engine = FakeEngine(builds=[], **_family_stages(plan, "run1"))
    made = pruned_base(engine, plan, folder, labels={"test": "1"}, run="run1")
    assert made.made and made.tag == f"triton-composer/pruned-base:24.09-{key[:16]}"
    # Built from a copy of the context whose Dockerfile names the run (the context's names none: the key)
    copy = engine.builds[0]["context"]
    assert copy != folder and "base-context" in copy.name and not copy.exists()
    assert engine.builds == [{"context": copy, "target": "split", "labels": {"test": "1"}, "network_mode": "none",
                              "on_line": engine.builds[0]["on_line"]}]
    assert engine.dockerfiles == [render_pruned_base(plan, "run1")] and "run1" not in (folder / "Dockerfile").read_text()
    assert base_key(plan, folder) == key
    # The composer wrote the base: a layer a family, read from the split stage's one tree, the tag on it.
    assert engine.images[made.tag] == made.image and made.image in engine.loaded
    config = json.loads(engine.loaded[made.image]["config"])
    assert config["config"]["Labels"] == {"test": "1", BASE_LABEL: key} and config["created"] == "1970-01-01T00:00:00Z"
    assert len(config["rootfs"]["diff_ids"]) == len(plan.pruning.slots) == len(config["history"])
    assert sorted(path for _, path in engine.exports) == ["/", "/composer-layers"]  # the lists, then the tree once
    base = ImageInfo(id="sha256:" + "7" * 64, ref=made.tag, tags=(made.tag,), repo_digests=(), env={},
                     labels={BASE_LABEL: key}, size=1)
    engine = FakeEngine(builds=[], infos={made.tag: base})
    lines = []
    reused = pruned_base(engine, plan, folder, on_line=lines.append)
    assert not reused.made and reused.image == base.id and engine.builds == []
    assert lines == [f"pruned base: reusing {reused.tag}, made before from the same min image for the same selection"]
    engine = FakeEngine(builds=[], infos={made.tag: replace(base, labels={BASE_LABEL: "another key"})},
                        **_family_stages(plan))
    assert pruned_base(engine, plan, folder).made  # that tag on something else: a base is made
    # --no-cache: made again from scratch, though the same base is there
    engine, lines = FakeEngine(builds=[], infos={made.tag: base}, **_family_stages(plan)), []
    again = pruned_base(engine, plan, folder, on_line=lines.append, reuse=False)
    assert again.made and [b["nocache"] for b in engine.builds] == [True] and engine.images[made.tag] == again.image
    assert lines[0] == f"pruned base: making {made.tag} (--no-cache: from scratch, not the one made before)"


def test_the_tree_is_read_with_its_owners_where_an_engines_archive_loses_them(ngc_plan, tmp_path):
    """Podman's archive of a container names every file root's; its export keeps the owners (and
    adds its /dev nodes). The base is read through export_tree: shadow's group stays, a device node
    of the runtime's does not."""
    import io
    import tarfile

    from tests.unit.fake_engine import FakeEngine

    plan = ngc_plan("onnxruntime", "python", base="pruned")
    folder = write_context(plan, tmp_path / "context").pruned_base
    stages = _family_stages(plan)
    image = next(iter(stages["roots"].values()))[0]

    class Exporting(FakeEngine):
        archives_keep_owners = False

        def export_tree(self, ref, *, labels=None):
            self.exports.append((ref, "export"))
            out = io.BytesIO()
            with tarfile.open(fileobj=out, mode="w") as tar, tarfile.open(fileobj=io.BytesIO(
                    self.archives[(ref, "/")])) as tree:
                for member in tree:
                    tar.addfile(member, tree.extractfile(member) if member.isreg() else None)
                shadow = tarfile.TarInfo("etc/shadow")
                shadow.size, shadow.gid, shadow.mode = 4, 42, 0o640
                tar.addfile(shadow, io.BytesIO(b"root"))
                null = tarfile.TarInfo("dev/null")
                null.type, null.devmajor, null.devminor = tarfile.CHRTYPE, 1, 3
                tar.addfile(null)
            yield out.getvalue()

    engine = Exporting(builds=[], **stages)
    made = pruned_base(engine, plan, folder, labels={"test": "1"})
    assert made.made and engine.builds[0]["target"] == "split" and (image, "export") in engine.exports
    assert (image, "/") not in engine.exports  # the archive of / (owners lost) is never read
    core = next(iter(engine.loaded[made.image]["layers"].values()))
    members = {m.name: m for m in tarfile.open(fileobj=io.BytesIO(core))}
    assert members["etc/shadow"].gid == 42 and not any(name.startswith("dev") for name in members)
