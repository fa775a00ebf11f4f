"""The composer's own layers and image (composer.assembly.canonical, composer.assembly.assemble): the same
files give the same bytes whatever their times after the epoch, their owners' names or the order the
engine hands them out in; the configuration holds no clock."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

from composer.assembly.assemble import Sources, assemble, image_config, part_layer
from composer.assembly.canonical import archive_entries, host_entries, parent_folders, write_layer
from composer.engine.interface import ImageInfo
from composer.resolve.plan_types import Copy, LayerPart
from tests.unit.fake_engine import FakeEngine

EPOCH = 1_700_000_000


def _archive(entries: list[tuple[str, bytes | None, dict]]) -> bytes:
    """A tar as an engine's archive of a path hands it out: (name, data or None for a folder, fields)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data, fields in entries:
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE if data is None else tarfile.REGTYPE
            info.mode = 0o755 if data is None else 0o644
            for key, value in fields.items():
                setattr(info, key, value)
            if data is None:
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


BACKEND = [("python", None, {"mtime": EPOCH + 500, "uid": 1000, "gid": 1000, "uname": "cloudsdk"}),
           ("python/libtriton_python.so", b"\x7fELF...", {"mtime": EPOCH - 10, "uid": 1000, "gid": 1000}),
           ("python/triton_python_backend_utils.py", b"print(1)\n", {"mtime": EPOCH + 99, "uname": "someone"})]


def _layer(tmp_path: Path, entries, name: str, owner=None):
    spool = tmp_path / f"{name}.tar"
    spool.write_bytes(_archive(entries))
    copy = Copy("/opt/tritonserver/backends/python", "/opt/tritonserver/backends/python")
    parents = parent_folders(copy.dest, "/opt/tritonserver", EPOCH, owner or (1000, 1000))
    return write_layer([*parents, *archive_entries(spool, copy, EPOCH, owner)], tmp_path / f"{name}.layer", "backend")


def test_the_same_files_give_the_same_layer_whatever_their_order_names_and_later_times(tmp_path):
    first = _layer(tmp_path, BACKEND, "a")
    shuffled = [BACKEND[2], BACKEND[0], (BACKEND[1][0], BACKEND[1][1], {**BACKEND[1][2], "uname": "ubuntu"})]
    later = [(n, d, {**f, "mtime": f.get("mtime", 0) + 1000 if f.get("mtime", 0) > EPOCH else f.get("mtime")})
             for n, d, f in shuffled]
    second = _layer(tmp_path, later, "b")
    assert first.diff_id == second.diff_id and first.path.read_bytes() == second.path.read_bytes()
    assert first.diff_id == "sha256:" + hashlib.sha256(first.path.read_bytes()).hexdigest()
    with tarfile.open(first.path) as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == sorted(m.name for m in members)
    assert all(m.uname == "" and m.gname == "" and m.mtime <= EPOCH for m in members)
    by_name = {m.name: m for m in members}
    assert by_name["opt/tritonserver/backends/python/libtriton_python.so"].mtime == EPOCH - 10  # earlier: kept
    assert (by_name["opt/tritonserver/backends"].uid, by_name["opt/tritonserver/backends"].mode) == (1000, 0o755)
    assert "opt/tritonserver" not in by_name and "opt" not in by_name  # the base's own folders are left as they are


def test_a_different_file_gives_a_different_layer(tmp_path):
    changed = [BACKEND[0], (BACKEND[1][0], b"\x7fELF!!!", BACKEND[1][2]), BACKEND[2]]
    assert _layer(tmp_path, BACKEND, "a").diff_id != _layer(tmp_path, changed, "b").diff_id
    chowned = _layer(tmp_path, BACKEND, "c", owner=(0, 0))
    with tarfile.open(chowned.path) as tar:
        assert {m.uid for m in tar.getmembers()} == {0}


def test_a_contents_copy_puts_what_is_inside_at_the_destination_and_keeps_hard_links(tmp_path):
    tree = [("tree", None, {}), ("tree/etc", None, {"mode": 0o755}), ("tree/etc/passwd", b"root:x:0:0\n", {}),
            ("tree/usr", None, {})]
    spool = tmp_path / "t.tar"
    spool.write_bytes(_archive(tree))
    with tarfile.open(spool, "a") as tar:  # a hard link, named by its path in the archive
        link = tarfile.TarInfo("tree/usr/passwd-link")
        link.type, link.linkname = tarfile.LNKTYPE, "tree/etc/passwd"
        tar.addfile(link)
    layer = write_layer(archive_entries(spool, Copy("/composer-system/tree", "/", True), EPOCH, None),
                        tmp_path / "t.layer", "system")
    with tarfile.open(layer.path) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert sorted(members) == ["etc", "etc/passwd", "usr", "usr/passwd-link"]
    assert members["usr/passwd-link"].linkname == "etc/passwd"


def test_context_files_are_owned_as_asked_and_clamped(tmp_path):
    models = tmp_path / "models" / "m" / "1"
    models.mkdir(parents=True)
    (models / "model.py").write_text("x = 1\n")
    layer = write_layer(host_entries(tmp_path / "models", "/models", EPOCH, (1000, 1000)), tmp_path / "m.layer", "m")
    with tarfile.open(layer.path) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert sorted(members) == ["models", "models/m", "models/m/1", "models/m/1/model.py"]
    assert {(m.uid, m.gid) for m in members.values()} == {(1000, 1000)}
    assert all(m.mtime <= EPOCH for m in members.values())


def _base() -> ImageInfo:
    return ImageInfo(id="sha256:" + "a" * 64, ref="min:1", tags=(), repo_digests=(), env={}, labels={}, size=0,
                     layers=("sha256:" + "1" * 64, "sha256:" + "2" * 64), created="2024-09-01T10:00:00.123456789Z")


def test_the_configuration_holds_no_clock_and_names_the_base_by_its_id():
    built = {"config": {"Env": ["PATH=/bin"], "Cmd": ["tritonserver"], "Image": "sha256:" + "9" * 64,
                        "Hostname": "abc123", "Labels": {"a": "1"}}, "architecture": "amd64", "os": "linux"}
    config = json.loads(image_config(_base(), built, (), EPOCH, {"b": "2"}))
    assert config["created"] == "2023-11-14T22:13:20Z"
    assert config["config"] == {"Env": ["PATH=/bin"], "Cmd": ["tritonserver"], "Labels": {"a": "1", "b": "2"}}
    assert [h["created"] for h in config["history"]] == ["2024-09-01T10:00:00Z"] * 2
    assert config["history"][0]["created_by"] == f"base {'sha256:' + 'a' * 64}: layer 1 of 2"
    assert image_config(_base(), built, (), EPOCH, {"b": "2"}) == image_config(_base(), built, (), EPOCH, {"b": "2"})


def test_a_pruned_base_is_named_by_its_key_at_the_epoch_not_by_its_id_or_time():
    """Two engines (or two runs) making the same pruned base get the same layers, not the same id:
    the composed images must still be one."""
    from dataclasses import replace

    from composer.assembly.pruning import BASE_LABEL

    built = {"config": {"Cmd": ["tritonserver"]}, "architecture": "amd64", "os": "linux"}
    made = [replace(_base(), id="sha256:" + c * 64, created=when, labels={BASE_LABEL: "f" * 64})
            for c, when in (("a", "2026-11-27T10:00:00Z"), ("b", "2026-11-28T11:00:00Z"))]
    first, second = (json.loads(image_config(base, built, (), EPOCH, {})) for base in made)
    assert first == second
    assert first["history"][0] == {"created": "2023-11-14T22:13:20Z", "created_by": f"pruned base {'f' * 16}: layer 1 of 2"}


def test_assemble_reads_each_part_where_it_is_and_loads_only_its_own_layers(tmp_path):
    base = _base()
    engine = FakeEngine(infos={"min:1": base})
    engine.archives[("full-id", "/opt/tritonserver/backends/python")] = _archive(BACKEND)
    (tmp_path / "composition.json").write_text("{}\n")
    path = "/opt/tritonserver/backends/python"
    parts = (LayerPart("backend", "python", "full", (Copy(path, path),), "1000:1000"),
             LayerPart("record", "composition record", "context",
                       (Copy("composition.json", "/opt/tritonserver/composition.json"),), "1000:1000"))

    class Plan:
        tag = "t:1"

        def all_parts(self):
            return parts

    sources = Sources({}, "full-id", {}, tmp_path)
    (tmp_path / "layers").mkdir()
    done = assemble(engine, Plan(), "built", base, sources, tmp_path / "layers", epoch=EPOCH, labels={},
                    extra=[("/opt/tritonserver/sbom.cdx.json", "SBOM", b"{}")])
    assert len(done.layers) == 3 and done.diff_ids[:2] == base.layers
    loaded = engine.loaded[done.image_id]
    assert done.image_id == "sha256:" + hashlib.sha256(loaded["config"]).hexdigest()
    assert sorted(loaded["layers"]) == sorted(layer.diff_id[7:] for layer in done.layers)  # not the base's
    assert engine.exports == [("full-id", "/opt/tritonserver/backends/python")]
    again = tmp_path / "again"
    again.mkdir()
    assert assemble(engine, Plan(), "built", base, sources, again, epoch=EPOCH, labels={},
                    extra=[("/opt/tritonserver/sbom.cdx.json", "SBOM", b"{}")]).image_id == done.image_id



def test_the_system_layer_keeps_its_owners_where_the_engines_archive_names_every_file_roots(tmp_path):
    """Podman's archive of a stage says root's for every file: the system stage's own list of the
    tree's other owners (system.sh) puts /home/triton-server and /etc/shadow's group back, so the
    layer is Docker's, byte for byte."""
    tree = [("tree", None, {}), ("tree/etc", None, {}),
            ("tree/etc/shadow", b"root:*:19000::::::\n", {"mode": 0o640, "gid": 42}),
            ("tree/home", None, {}), ("tree/home/triton-server", None, {"uid": 1000, "gid": 1000}),
            ("tree/home/triton-server/.bashrc", b"# bash\n", {"uid": 1000, "gid": 1000})]
    rooted = [(name, data, {k: v for k, v in fields.items() if k not in ("uid", "gid")}) for name, data, fields in tree]
    listed = b"0:42 etc/shadow\0" b"1000:1000 home/triton-server\0" b"1000:1000 home/triton-server/.bashrc\0"
    part = LayerPart("system", "loader cache, user, byte-code", "system", (Copy("/composer-system/tree", "/", True),),
                     owners="/composer-system/owners")
    sources = Sources({"system": "system-id"}, "full-id", {}, tmp_path)
    layers = {}
    for name, archive, keeps in (("docker", tree, True), ("podman", rooted, False)):
        engine = FakeEngine()
        engine.archives_keep_owners = keeps
        engine.archives[("system-id", "/composer-system/tree")] = _archive(archive)
        engine.archives[("system-id", "/composer-system/owners")] = _archive([("owners", listed, {})])
        (tmp_path / name).mkdir()
        layers[name] = part_layer(engine, part, sources, EPOCH, tmp_path / name, 0)
        assert (("system-id", "/composer-system/owners") in engine.exports) is not keeps  # read only where lost
    assert layers["podman"].diff_id == layers["docker"].diff_id
    with tarfile.open(layers["podman"].path) as tar:
        owners = {m.name: (m.uid, m.gid) for m in tar}
    assert owners["etc/shadow"] == (0, 42) and owners["home/triton-server"] == (1000, 1000)
    assert owners["etc"] == (0, 0)
