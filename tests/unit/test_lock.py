"""Lock files: digests of a set's base images, round trip, moved tags, edited sets."""

from pathlib import Path

import pytest
import yaml

from composer.engine.interface import ImageInfo
from composer.core.errors import ImageNotFound, RegistryError, UsageError
from composer.sources.lock import (
    LockedImage,
    check_current,
    check_lock,
    digest_of,
    lock_images,
    lock_path,
    locked_image,
    pinned_ref,
    read_lock,
    write_lock,
)
from composer.config.sets import preset_path
from tests.unit.fake_engine import FakeEngine

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
    current = {"full": D1, "min": D2, "backend:pytorch": ID}
    assert {image.role: image.digest for image in lock.images} == current  # what is compared
    assert check_current(lock, current) is None  # every image is where it was locked: no error


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


# -- resolving against registries (fake engine and registries at the boundary) ----------


def engine_with(*images: ImageInfo) -> FakeEngine:
    return FakeEngine(infos={i.ref: i for i in images})


class FakeRegistries:
    """Where tags point in their registries; a refusal raises as the real client does."""

    def __init__(self, tags=None, refuse=False):
        self.tags, self.refuse, self.asked = dict(tags or {}), refuse, []

    def digest(self, ref):
        self.asked.append(str(ref))
        if self.refuse:
            raise RegistryError(f"cannot read {ref}: the registry refused the credentials")
        return self.tags.get(str(ref))


FULL, MIN = "reg.example/nvidia/tritonserver:24.09-py3", "reg.example/nvidia/tritonserver:24.09-py3-min"
ROLES = [("full", FULL), ("min", MIN)]


def test_lock_asks_the_registry_even_when_a_local_copy_exists(set_file):
    stale = info(FULL, ["reg.example/nvidia/tritonserver@" + D2])  # pulled before the tag moved
    registries = FakeRegistries({FULL: D1, MIN: D2})
    lock = lock_images(engine_with(stale), set_file, ROLES, registries)
    assert [(i.role, i.digest, i.local) for i in lock.images] == [("full", D1, False), ("min", D2, False)]
    assert registries.asked == [FULL, MIN]


def test_an_image_its_repository_never_held_is_locked_by_id_without_asking(set_file):
    only_here = info("localhost/standin/tritonserver:24.09-py3", ["127.0.0.1:5000/other@" + D1])
    registries = FakeRegistries({MIN: D2})
    lines = []
    roles = [("full", only_here.ref), ("min", MIN)]
    lock = lock_images(engine_with(only_here), set_file, roles, registries, lines.append)
    assert lock.image("full") == LockedImage("full", only_here.ref, ID, local=True)
    assert registries.asked == [MIN]
    assert any("locked by image id" in line for line in lines)


def test_a_refusing_registry_fails_the_lock_and_writes_nothing(set_file):
    local = info(FULL, ["reg.example/nvidia/tritonserver@" + D1])
    with pytest.raises(RegistryError, match="refused the credentials"):
        lock_images(engine_with(local), set_file, ROLES, FakeRegistries(refuse=True))
    assert not lock_path(set_file).exists()


def test_a_tag_its_registry_does_not_have_cannot_be_locked(set_file):
    with pytest.raises(ImageNotFound, match="registry reg.example has no nvidia/tritonserver:24.09-py3-min"):
        lock_images(engine_with(), set_file, ROLES, FakeRegistries({FULL: D1}))


def test_check_lock_asks_the_registry_and_never_falls_back_to_the_local_copy(set_file):
    write_lock(set_file, [LockedImage("full", FULL, D1), LockedImage("min", MIN, D2)])
    local = engine_with(info(FULL, ["reg.example/nvidia/tritonserver@" + D1]))  # still the locked digest
    lines = []
    assert check_lock(local, set_file, ROLES, FakeRegistries({FULL: D1, MIN: D2}), lines.append) == {
        "full": "reg.example/nvidia/tritonserver@" + D1,
        "min": "reg.example/nvidia/tritonserver@" + D2,
    }
    assert lines == ["lock team.lock.yaml: every base image is where it was locked"]
    with pytest.raises(UsageError, match="moved since the lock"):
        check_lock(local, set_file, ROLES, FakeRegistries({FULL: "sha256:" + "d" * 64, MIN: D2}))
    with pytest.raises(UsageError, match=r"moved since the lock \(locked sha256:1{12}, now nothing\)"):
        check_lock(local, set_file, ROLES, FakeRegistries({MIN: D2}))
    lines.clear()
    with pytest.raises(RegistryError, match="refused the credentials"):
        check_lock(local, set_file, ROLES, FakeRegistries(refuse=True), lines.append)
    assert lines == []


def test_check_lock_of_local_images_compares_image_ids(set_file):
    ref = "localhost/standin/tritonserver:24.09-py3"
    write_lock(set_file, [LockedImage("full", ref, ID, local=True), LockedImage("min", MIN, D2)])
    registries = FakeRegistries({MIN: D2})
    pinned = check_lock(engine_with(info(ref)), set_file, [("full", ref), ("min", MIN)], registries)
    assert pinned["full"] == ID and registries.asked == [MIN]
    with pytest.raises(UsageError, match="moved since the lock"):
        check_lock(engine_with(info(ref, id=D1)), set_file, [("full", ref), ("min", MIN)], registries)


def test_check_lock_refuses_a_ref_the_lock_does_not_pin(set_file):
    write_lock(set_file, [LockedImage("full", FULL, D1), LockedImage("min", MIN, D2)])
    with pytest.raises(UsageError, match="the lock pins .*24.09-py3 but the build uses .*24.10-py3"):
        check_lock(engine_with(), set_file, [("full", FULL.replace("24.09", "24.10")), ("min", MIN)],
                   FakeRegistries())
