"""Reading engines' save archives (composer.engine.archives): a base's layers are found by their
content whatever the engine names them, and copied into a load archive in one pass."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile

import pytest

from composer.engine.archives import LoadArchive, copy_saved_layers, may_be_layer


def _layer(text: str) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        info = tarfile.TarInfo("etc/" + text)
        info.size = len(text)
        tar.addfile(info, io.BytesIO(text.encode()))
    return out.getvalue()


def _save(members: dict[str, bytes]) -> list[bytes]:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    data = out.getvalue()
    return [data[i:i + 1000] for i in range(0, len(data), 1000)]  # as it streams


def _diff(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("naming", ["docker", "podman", "oci"])
def test_layers_are_found_by_their_content_whatever_the_engine_names_them(naming):
    one, two = _layer("a"), _layer("b")
    name = {"docker": lambda d: f"{'f' * 64}{d[-1]}/layer.tar"[1:],
            "podman": lambda d: f"{hashlib.sha256(d).hexdigest()}.tar",
            "oci": lambda d: f"blobs/sha256/{hashlib.sha256(d).hexdigest()}"}[naming]
    members = {"manifest.json": json.dumps([{"Layers": []}]).encode(), name(one): one, name(two): two}
    if naming == "docker":
        members = {"manifest.json": b"[]", f"{'1' * 64}/layer.tar": one, f"{'2' * 64}/layer.tar": two}
    out = io.BytesIO()
    archive = LoadArchive(out)
    names = copy_saved_layers(iter(_save(members)), archive, {_diff(two), _diff(one)}, "base-")
    archive.end()
    assert set(names) == {_diff(one), _diff(two)}
    with tarfile.open(fileobj=io.BytesIO(out.getvalue())) as written:
        assert written.extractfile(names[_diff(one)]).read() == one
        assert written.extractfile(names[_diff(two)]).read() == two


def test_what_is_not_named_as_a_layer_is_not_one():
    assert not may_be_layer(tarfile.TarInfo("manifest.json"))
    assert not may_be_layer(tarfile.TarInfo("repositories"))
    assert may_be_layer(tarfile.TarInfo("abc/layer.tar"))
    link = tarfile.TarInfo("abc/layer.tar")
    link.type = tarfile.SYMTYPE  # Docker's save links a layer it already wrote
    assert not may_be_layer(link)
