"""A large image loads in several archives (composer.assembly.assemble.load): each an image of the
layers so far, held by a tag of the run until the whole image is in; the whole image's id is the
same as from one archive; the pruned base's layer files go as they are loaded."""

from __future__ import annotations

import hashlib
import json

import pytest

from composer.assembly import assemble
from composer.assembly.assemble import canonical_json, load, load_chunks, prefix_config
from composer.assembly.canonical import LayerFile
from tests.unit.fake_engine import FakeEngine


def _layers(tmp_path, sizes):
    layers = []
    for index, size in enumerate(sizes):
        path = tmp_path / f"layer-{index}.tar"
        data = bytes([index]) * size
        path.write_bytes(data)
        layers.append(LayerFile(path, "sha256:" + hashlib.sha256(data).hexdigest(), size, size, f"layer {index}"))
    return tuple(layers)


def _config(base, layers):
    history = [{"created_by": "base"}, {"created_by": "ENV", "empty_layer": True}]
    history += [{"created_by": layer.description} for layer in layers]
    return canonical_json({"rootfs": {"type": "layers", "diff_ids": [*base, *(l.diff_id for l in layers)]},
                           "history": history, "config": {}})


def test_chunks_end_where_the_next_layer_would_pass_the_limit_and_held_layers_cost_nothing(tmp_path):
    layers = _layers(tmp_path, [40, 30, 50, 200, 10, 10])
    assert load_chunks(layers, 100) == [2, 3, 4, 6]  # a layer past the limit goes alone
    layers[3].path.unlink()  # held by the engine: named, not sent
    assert load_chunks(layers, 100) == [2, 6]
    assert load_chunks(layers, 1 << 30) == [6]


def test_a_prefix_config_keeps_the_history_that_made_its_layers():
    config = canonical_json({"rootfs": {"type": "layers", "diff_ids": ["a", "b", "c"]}, "config": {},
                             "history": [{"created_by": "1"}, {"created_by": "env", "empty_layer": True},
                                         {"created_by": "2"}, {"created_by": "3"}]})
    cut = json.loads(prefix_config(config, 2))
    assert cut["rootfs"]["diff_ids"] == ["a", "b"]
    assert [h["created_by"] for h in cut["history"]] == ["1", "env", "2"]


@pytest.mark.parametrize("drop", [False, True])
def test_a_load_in_chunks_gives_the_whole_image_and_leaves_no_hold(tmp_path, monkeypatch, drop):
    monkeypatch.setattr(assemble, "LOAD_CHUNK", 100)
    base = ("sha256:" + "b" * 64,)
    layers = _layers(tmp_path, [60, 60, 60, 20])
    config = _config(base, layers)
    engine = FakeEngine()
    image_id = load(engine, config, base, layers, "the image", tag="hold:run1", run="run1", drop_loaded=drop)
    assert image_id == "sha256:" + hashlib.sha256(config).hexdigest()
    assert len(engine.loaded) == 3  # [60] [60] [60, 20]
    sent = [sorted(entry["layers"]) for entry in engine.loaded.values()]
    assert sorted(map(len, sent)) == [1, 1, 2]  # each layer's bytes sent once
    assert {d for names in sent for d in names} == {layer.diff_id[7:] for layer in layers}
    assert engine.loaded[image_id]["config"] == config
    assert engine.images["hold:run1"] == image_id
    assert not [name for name in engine.images if "load" in name]  # the chunks' holds are gone
    assert [layer.path.exists() for layer in layers] == ([False, False, True, True] if drop else [True] * 4)


def test_without_a_run_or_on_an_engine_that_loads_whole_archives_one_archive_goes(tmp_path, monkeypatch):
    monkeypatch.setattr(assemble, "LOAD_CHUNK", 100)
    layers = _layers(tmp_path, [60, 60, 60])
    engine = FakeEngine()
    load(engine, _config((), layers), (), layers, "the image", tag="t:1")
    whole = FakeEngine()
    whole.loads_partial_archives = False  # Podman: containers/image reads whole archives only
    load(whole, _config((), layers), (), layers, "the image", tag="t:1", run="run1")
    assert len(engine.loaded) == len(whole.loaded) == 1
    assert [len(entry["layers"]) for entry in whole.loaded.values()] == [3]
