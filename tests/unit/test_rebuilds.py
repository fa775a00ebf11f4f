"""Rebuilds (issue 44) at the engine boundary: the recorded image and the run's hold on it, the
recorded smoke test, layers the engine holds, and what the build cache's entries own."""

from __future__ import annotations

import json
import time

from composer.assembly import layer_reuse, records
from composer.assembly.cache import Entry, freed_by, own_bytes, select
from composer.assembly.canonical import LayerFile
from composer.config.types import Device
from composer.engine.interface import ImageInfo
from composer.resolve.plan_types import FROM_CONTEXT, Copy, LayerPart
from composer.verify import smoke_record
from composer.verify.smoke_plan import SmokePlan, SmokeReport, SmokeRow
from tests.unit.fake_engine import FakeEngine

IMAGE = "sha256:" + "a" * 64


def _passed(image: str = IMAGE, status: str = "PASS") -> SmokeReport:
    return SmokeReport(image, (SmokeRow("python", status, "correct answer", "add_sub"),), "2.50.0", device=Device.CPU)


def test_a_recorded_image_is_taken_with_a_hold_of_the_run_and_only_while_the_engine_has_it():
    engine = FakeEngine(images={IMAGE: IMAGE})
    records.save(engine, "k1", IMAGE, "{}", None)
    found = records.find(engine, "k1", "run1")
    assert found and found.image_id == IMAGE and engine.images[records.hold_tag("run1")] == IMAGE
    assert records.find(engine, "k2", "run1") is None  # another key
    records.release(engine, "run1")
    assert IMAGE not in engine.images  # its last name went: so did the image
    assert records.find(engine, "k1", "run2") is None  # the engine lost it: build it again


def test_a_hold_keeps_the_image_when_another_run_lets_go_of_its_own():
    engine = FakeEngine(images={IMAGE: IMAGE, records.hold_tag("a"): IMAGE, records.hold_tag("b"): IMAGE})
    records.release(engine, "a")  # run a's smoke test failed: its hold goes, b's stays, and the image
    assert engine.images[records.hold_tag("b")] == IMAGE and IMAGE in engine.images
    assert records.is_hold("localhost/triton-composer/hold:b") and not records.is_hold("team/hold:b")


def test_a_pass_is_recorded_per_image_models_and_engine_and_a_failure_never(tmp_path):
    engine = FakeEngine()
    models = tmp_path / "models"
    (models / "m" / "1").mkdir(parents=True)
    (models / "m" / "config.pbtxt").write_text("backend: 'python'\n")
    plan = SmokePlan(backends=("python",), model_repository=models)
    assert smoke_record.recorded(engine, IMAGE, plan) is None
    smoke_record.save(engine, IMAGE, plan, _passed())
    again = smoke_record.recorded(engine, IMAGE, plan)
    assert again and again.passed and again.recorded_at and again.to_dict()["recorded_at"] == again.recorded_at
    assert again.rows[0].detail.startswith("recorded for this image on this engine at ")
    assert again.rows[0].detail.endswith(": correct answer")
    assert smoke_record.recorded(engine, "sha256:" + "b" * 64, plan) is None  # another image
    assert smoke_record.recorded(engine, IMAGE, SmokePlan(backends=("python",), model_repository=models,
                                                          strict=True)) is None  # another plan
    other = FakeEngine(offered_runtimes=frozenset({"runc", "nvidia"}))  # a GPU host's runtime
    assert smoke_record.recorded(other, IMAGE, plan) is None
    (models / "m" / "config.pbtxt").write_text("backend: 'python'\nmax_batch_size: 2\n")
    assert smoke_record.recorded(engine, IMAGE, plan) is None  # the models by their bytes
    failed = tmp_path / "failed"
    failed.mkdir()
    plan = SmokePlan(backends=("python",), model_repository=failed)
    smoke_record.save(engine, IMAGE, plan, _passed(status="FAIL"))
    assert smoke_record.recorded(engine, IMAGE, plan) is None


class _Images(FakeEngine):
    """The fake engine with image infos (layers) for the layer and cache checks."""

    def image(self, ref):
        return self.infos.get(ref)

    def images_labelled(self, label, *, untagged=False):
        return [i for i, info in self.infos.items() if label.split("=")[0] in info.labels]

    def tag(self, image_id, ref):
        if image_id not in self.infos:
            from composer.core.errors import EngineError
            raise EngineError(f"cannot tag {image_id} as {ref}: no such image")
        self.infos[ref] = self.infos[image_id]

    def remove_image(self, ref, *, force=False, prune=True):
        self.infos.pop(ref, None)


def _info(image: str, layers: tuple[str, ...], labels=None, tags=("t:1",)) -> ImageInfo:
    return ImageInfo(id=image, ref=image, tags=tags, repo_digests=(), env={}, labels=labels or {}, size=0,
                     layers=layers)


def test_a_layer_is_known_by_what_it_copies_and_held_only_in_the_same_chain(tmp_path):
    stage = _info("sha256:s", ("sha256:l1", "sha256:l2"))
    composed = _info("sha256:c", ("sha256:base", "sha256:own1", "sha256:own2"), {"org.triton-composer.backends": "x"})
    engine = _Images(infos={"sha256:s": stage, "sha256:c": composed})
    part = LayerPart("backend", "python", "collected", (Copy("/opt/tritonserver/backends/python", "/x"),), "1000:1000")
    key = layer_reuse.part_key(engine, part, "sha256:s", 1)
    assert key and key == layer_reuse.part_key(engine, part, "sha256:s", 1)
    assert key != layer_reuse.part_key(engine, part, "sha256:s", 2)  # the epoch is in the layer
    assert layer_reuse.part_key(engine, LayerPart("record", "r", FROM_CONTEXT, ()), None, 1) is None
    layer_reuse.save(key, LayerFile(tmp_path / "l.tar", "sha256:own1", 10, 8, "backend python"))
    assert layer_reuse.recorded(key)["diff_id"] == "sha256:own1"
    chains = layer_reuse.Chains.on(engine)
    assert chains.holds(("sha256:base", "sha256:own1")) and not chains.holds(("sha256:other", "sha256:own1"))


def test_an_unnamed_image_is_never_a_chains_holder():
    """CI, session 64: run A held the engine's unnamed build image (its layers start with the
    chain) and its hold's drop removed it, while run B of the same selection, whose build gave the
    very same image from the build cache, was reading it ("cannot inspect image ...: No such image")."""
    labels = {"org.triton-composer.backends": "x"}
    built = _info("sha256:b", ("sha256:base", "sha256:own1", "sha256:engines"), labels, tags=())
    composed = _info("sha256:c", ("sha256:base", "sha256:own1", "sha256:own2"), labels)
    engine = _Images(infos={"sha256:c": composed, "sha256:b": built})  # the unnamed one last: it would win
    chains = layer_reuse.Chains.on(engine)
    assert chains.held[("sha256:base", "sha256:own1")] == "sha256:c"
    assert not chains.holds(("sha256:base", "sha256:own1", "sha256:engines"))


def test_layers_left_out_of_the_archive_are_held_by_the_run_or_written_after_all():
    """Another run's cleanup may remove the image that held a chain between the look and the load
    (CI, stop 48: "layer.tar: no such file or directory"): the run tags it first, or writes them."""
    composed = _info("sha256:c", ("sha256:base", "sha256:own1"), {"org.triton-composer.backends": "x"})
    engine = _Images(infos={"sha256:c": composed})
    chains = layer_reuse.Chains.on(engine)
    assert chains.hold(engine, ("sha256:base", "sha256:own1"), "triton-composer/hold:r1-layers")
    assert engine.infos["triton-composer/hold:r1-layers"] is composed
    records.drop_hold(engine, "triton-composer/hold:r1-layers")
    assert "triton-composer/hold:r1-layers" not in engine.infos
    assert records.run_of_hold("localhost/triton-composer/hold:r1-layers") == "r1"
    del engine.infos["sha256:c"]  # removed by another run after the look
    assert not chains.hold(engine, ("sha256:base", "sha256:own1"), "triton-composer/hold:r1-layers")
    assert not chains.hold(engine, ("sha256:base",), None)  # no hold to take: write them


def test_own_bytes_are_what_removing_an_image_frees_not_what_it_shares():
    # a <- b <- c1 (leaf), b <- c2 (leaf); t tagged on a: b is shared by c1 and c2
    graph = {"a": ("", 100, True), "b": ("a", 150, False), "c1": ("b", 160, False), "c2": ("b", 190, False),
             "d": ("x", 5, False)}
    assert own_bytes(graph, "c1") == 10 and own_bytes(graph, "c2") == 40  # b is shared: neither owns it
    assert own_bytes(graph, "nope") == -1
    assert freed_by(graph, {"c1", "c2"}) == 10 + 40 + 50  # both go: b goes with them, a (tagged) stays
    assert freed_by(graph, {"c1"}) == 10


def test_an_image_loaded_whole_counts_only_what_it_shares_with_no_other_image():
    """A BuildKit stage is loaded whole (no parent): its size holds the full image's layers too, which
    removing it does not free. 48 such stages once showed "freed 39.7 GB" on an 8 GB engine."""
    graph = {"full": ("", 1600, True), "s1": ("", 1650, False), "s2": ("", 1700, False),
             "built": ("s1", 1660, False)}  # a step built on a loaded stage
    usage = {"s1": {"size": 1650, "shared": 1600}, "s2": {"size": 1700, "shared": 1600}}
    assert own_bytes(graph, "s2") == -1  # the engine's count says (cache list falls back to it)
    assert own_bytes(graph, "built") == -1  # its chain ends in a stage loaded whole
    assert freed_by(graph, {"s2"}, usage) == 100 and freed_by(graph, {"s1", "built"}, usage) == 50 + 10
    assert freed_by(graph, {"s2"}) == 1700  # without the engine's count: its size, as before


def test_clear_says_what_the_engines_layer_store_lost():
    from composer.assembly.cache import clear

    class Engine(FakeEngine):
        stored = [8_000, 7_250]  # before, after

        def layers_bytes(self):
            return self.stored.pop(0)

    assert clear(Engine()).freed == 750


def test_cached_stages_go_unless_a_build_holds_them_and_a_live_runs_hold_stays():
    now = time.time()
    stage = Entry("cached stage", "sha256:s", (), 10, 5, now, None, key="system k")
    busy = Entry("cached stage", "sha256:t", (), 10, 5, now, None, key="system k", held="a build at work")
    dead_hold = Entry("held image", "sha256:h", ("triton-composer/hold:r1",), 10, 5, now, None, run="r1")
    live_hold = Entry("held image", "sha256:h", ("triton-composer/hold:r2",), 10, 5, now, None, run="r2",
                      run_alive=True, held="run r2 is at work")
    chosen, kept = select([stage, busy, dead_hold, live_hold], older_than_days=None, everything=False, now=now)
    assert chosen == [stage, dead_hold] and [e for e, _ in kept] == [busy, live_hold]
    chosen, kept = select([stage], older_than_days=1, everything=False, now=now)  # made today: kept
    assert chosen == [] and kept[0][1] == "made within 1 days"


def test_a_dead_runs_pruned_base_stages_are_listed_as_its_own_though_they_carry_a_cached_stage_mark():
    """A run killed while it made its pruned base leaves the layer stage's last image (named for the
    builder by the run: the cached-stage label) and the layers stage (built on the decide stage: it
    inherits its build-cache mark). Both are the run's leftovers, not build cache by content."""
    from composer.assembly.cache import listing
    from composer.assembly.pruning import STAGE_LABEL
    from composer.resolve.plan_types import CACHE_LABEL, STAGE_LABEL as CACHED

    labels = {"sha256:layer": {STAGE_LABEL: "layer deadrun", CACHED: "layer-00-core deadrun"},
              "sha256:layers": {STAGE_LABEL: "layers deadrun", CACHE_LABEL: "pruned-base decide"},
              "sha256:system": {CACHED: "system 0123abcd"}}  # a composition's stage: build cache

    class Engine(FakeEngine):
        def images_labelled(self, label, *, untagged=False):
            return [image for image, own in labels.items() if label in own]

    engine = Engine(infos={image: ImageInfo(id=image, ref=image, tags=(), repo_digests=(), env={}, labels=own,
                                            size=10) for image, own in labels.items()})
    entries = {e.image: e for e in listing(engine)}
    assert {i: (e.kind, e.run, e.run_alive) for i, e in entries.items()} == {
        "sha256:layer": ("stage", "deadrun", False), "sha256:layers": ("stage", "deadrun", False),
        "sha256:system": ("cached stage", None, False)}


def test_an_unchanged_image_is_pushed_again_by_its_manifest_while_the_registry_holds_every_blob():
    from composer.publish.image_push import OCI_MANIFEST, Pushed, push_again, pushed_before, record_push
    from tests.unit.test_mirror_copy import FakeRegistry, sha

    registry = FakeRegistry("r.example")
    layer, config = b"a layer", b"{}"
    registry.blobs[("team/t", sha(layer))] = layer
    registry.blobs[("team/t", sha(config))] = config
    manifest = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                           "config": {"digest": sha(config), "size": 2},
                           "layers": [{"digest": sha(layer), "size": len(layer)}]}).encode()

    class Registries:
        def client(self, host):
            assert host == "r.example"
            return registry

    assert not pushed_before(IMAGE, "gzip", "r.example/team/t:1")
    assert push_again(IMAGE, "gzip", "r.example/team/t:1", Registries()) is None  # never pushed: whole
    record_push(IMAGE, "gzip", Pushed("r.example/team/t:1", sha(manifest), manifest, 1, 0, 0))
    assert pushed_before(IMAGE, "gzip", "r.example/team/t:7") and not pushed_before(IMAGE, "zstd", "r.example/team/t:7")
    again = push_again(IMAGE, "gzip", "r.example/team/t:7", Registries())
    assert again and again.digest == sha(manifest) and registry.manifests[("team/t", "7")][1] == manifest
    assert again.bytes_moved == 0
    del registry.blobs[("team/t", sha(layer))]  # the registry's garbage collection took it
    assert push_again(IMAGE, "gzip", "r.example/team/t:8", Registries()) is None
    assert ("team/t", "8") not in registry.manifests


def test_a_pruned_base_with_the_same_layers_is_not_anothers_user():
    """Two selections keeping the same packages (small stand-ins: python, identity+onnxruntime) make
    two bases with one list of layers: neither is built on the other, so `cache clear --all` takes
    both; an image built on one is its user."""
    from types import SimpleNamespace

    from composer.assembly.cache import _users
    from composer.assembly.pruning import BASE_LABEL

    def image(name, layers, labels):
        return SimpleNamespace(id=f"sha256:{name}", layers=layers, tags=(name,), labels=labels)

    one = image("base-one", ("a", "b"), {BASE_LABEL: "k1"})
    two = image("base-two", ("a", "b"), {BASE_LABEL: "k2"})
    built = image("team/t:1", ("a", "b", "c"), {BASE_LABEL: "k1"})  # inherits the base's label
    tagged = {i.id: i for i in (one, two, built)}
    assert _users(one, tagged) == ("team/t:1",) and _users(two, tagged) == ("team/t:1",)
    assert _users(one, {i.id: i for i in (one, two)}) == ()
