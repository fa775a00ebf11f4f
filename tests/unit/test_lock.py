"""Lock files: digests of a set's base images, round trip, moved tags, edited sets."""

from pathlib import Path

import pytest
import yaml

from composer.engine import ImageInfo
from composer.errors import UsageError
from composer.lock import (
    LockedImage,
    check_current,
    digest_of,
    lock_path,
    locked_image,
    pinned_ref,
    read_lock,
    write_lock,
)
from composer.sets import preset_path

D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64
ID = "sha256:" + "9" * 64


def info(ref: str, repo_digests=(), id=ID) -> ImageInfo:
    return ImageInfo(id=id, ref=ref, tags=(ref,), repo_digests=tuple(repo_digests), env={}, labels={}, size=0)


@pytest.fixture
def set_file(tmp_path) -> Path:
    path = tmp_path / "team.yaml"
    path.write_text('version: "24.09"\nbackends: [python]\n')
    return path


IMAGES = (
    LockedImage("min", "localhost/x:24.09-py3-min", D2),
    LockedImage("backend:pytorch", "localhost/x:24.08-py3", ID, local=True),
    LockedImage("full", "localhost/x:24.09-py3", D1),
)


def test_lock_path_is_next_to_the_set(tmp_path):
    assert lock_path(tmp_path / "a.yaml") == tmp_path / "a.lock.yaml"
    assert lock_path(tmp_path / "b.yml") == tmp_path / "b.lock.yaml"


def test_round_trip(set_file):
    written = write_lock(set_file, IMAGES)
    assert written.path == set_file.parent / "team.lock.yaml"
    text = written.path.read_text()
    assert text.startswith("# composer lock file for team.yaml")
    assert [i.role for i in written.images] == ["full", "min", "backend:pytorch"]
    read = read_lock(set_file)
    assert read == written
    assert read.image("full").digest == D1 and read.image("backend:pytorch").local


def test_write_is_deterministic(set_file):
    first = write_lock(set_file, IMAGES).path.read_text()
    second = write_lock(set_file, tuple(reversed(IMAGES))).path.read_text()
    assert first == second
    assert yaml.safe_load(first)["set"] == "team.yaml"


def test_missing_lock_says_how_to_make_one(set_file):
    with pytest.raises(UsageError, match=r"no lock file .*team.lock.yaml: run composer lock --set .*team.yaml"):
        read_lock(set_file)


def test_edited_set_is_noticed(set_file):
    write_lock(set_file, IMAGES)
    set_file.write_text('version: "24.10"\nbackends: [python]\n')
    with pytest.raises(UsageError, match="changed since it was locked"):
        read_lock(set_file)
    assert read_lock(set_file, check_set=False).image("full").digest == D1


def test_garbage_lock(set_file):
    lock_path(set_file).write_text("images: nope\n")
    with pytest.raises(UsageError, match="not a composer lock file"):
        read_lock(set_file)
    lock_path(set_file).write_text("{{{")
    with pytest.raises(UsageError, match="not a composer lock file"):
        read_lock(set_file)


def test_bad_roles(set_file):
    with pytest.raises(UsageError, match="unknown image role 'base'"):
        write_lock(set_file, [LockedImage("base", "x:1", D1)])
    with pytest.raises(UsageError, match="role full given twice"):
        write_lock(set_file, [LockedImage("full", "x:1", D1), LockedImage("full", "x:2", D2)])


def test_shipped_presets_are_not_locked_in_place():
    with pytest.raises(UsageError, match="shipped preset: copy"):
        write_lock(preset_path("python"), IMAGES)


def test_current_digests_pass(set_file):
    lock = write_lock(set_file, IMAGES)
    check_current(lock, {"full": D1, "min": D2, "backend:pytorch": ID})


def test_moved_tag(set_file):
    lock = write_lock(set_file, IMAGES)
    with pytest.raises(UsageError) as error:
        check_current(lock, {"full": "sha256:" + "d" * 64, "min": D2, "backend:pytorch": ID})
    assert error.value.message == (
        f"localhost/x:24.09-py3 moved since the lock (locked sha256:{'1' * 12}, now sha256:{'d' * 12}): "
        f"run composer lock --set {set_file} to accept it"
    )


def test_roles_that_differ_from_the_lock(set_file):
    lock = write_lock(set_file, IMAGES)
    with pytest.raises(UsageError, match=r"\(backend:pytorch\) is in the lock but not in the set"):
        check_current(lock, {"full": D1, "min": D2})
    with pytest.raises(UsageError, match="backend:onnxruntime image that is not in the lock"):
        check_current(lock, {"full": D1, "min": D2, "backend:pytorch": ID, "backend:onnxruntime": D1})


def test_digest_of_prefers_the_refs_own_repository():
    i = info("mirror.example/nvidia/tritonserver:24.09-py3",
             ["nvcr.io/nvidia/tritonserver@" + D2, "mirror.example/nvidia/tritonserver@" + D1])
    assert digest_of(i) == D1
    assert locked_image("full", i) == LockedImage("full", i.ref, D1, local=False)


def test_digest_of_falls_back_to_the_image_id():
    assert digest_of(info("localhost/x:1")) == ID
    assert digest_of(info("localhost/x:1", ["other.example/x@" + D1])) == ID
    assert locked_image("full", info("localhost/x:1")).local


def test_digest_of_docker_hub_names():
    assert digest_of(info("ubuntu:22.04", ["ubuntu@" + D1])) == D1
    assert digest_of(info("docker.io/library/ubuntu:22.04", ["ubuntu@" + D1])) == D1
    assert digest_of(info("localhost:5000/x:1", ["localhost:5000/x@" + D2])) == D2


def test_pinned_ref():
    assert pinned_ref(LockedImage("full", "localhost:5000/x/y:24.09-py3", D1)) == "localhost:5000/x/y@" + D1
    assert pinned_ref(LockedImage("full", "x/y@" + D2, D2)) == "x/y@" + D2
    assert pinned_ref(LockedImage("full", "localhost/x:1", ID, local=True)) == ID
