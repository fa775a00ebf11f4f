"""The eStargz writer (composer.registry.estargz) at the format's boundary: a blob of gzip members
that any gzip reader takes whole, one member per file payload and chunk, the TOC as the last tar
entry with each chunk's offset and digest, the 51-byte footer naming the TOC's offset, prefetched
files first. The reference reader's check is in tests/integration/test_estargz.py."""

from __future__ import annotations

import hashlib
import io
import json
import struct
import tarfile
import zlib

import pytest

from composer.registry import estargz


def _layer(tmp_path, files: dict[str, bytes], link: tuple[str, str] | None = None):
    path = tmp_path / "layer.tar"
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        folder = tarfile.TarInfo("./opt")
        folder.type, folder.mode, folder.mtime = tarfile.DIRTYPE, 0o755, 1700000000
        tar.addfile(folder)
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime, info.uid, info.gid = len(data), 0o644, 1700000000, 1000, 1000
            tar.addfile(info, io.BytesIO(data))
        if link:
            info = tarfile.TarInfo(link[0])
            info.type, info.linkname, info.mtime = tarfile.LNKTYPE, link[1], 1700000000
            tar.addfile(info)
    return path


def _members(blob: bytes) -> list[tuple[int, bytes]]:
    """Each gzip member's offset and what it holds."""
    found, offset = [], 0
    while offset < len(blob):
        inflate = zlib.decompressobj(31)
        data = inflate.decompress(blob[offset:])
        found.append((offset, data))
        offset = len(blob) - len(inflate.unused_data)
    return found


def _convert(path, prefetch=()):
    out = io.BytesIO()
    converted = estargz.convert(path, out, prefetch)
    return converted, out.getvalue()


def test_a_blob_any_gzip_reader_takes_whole_with_the_toc_last_and_the_footer_naming_it(tmp_path):
    converted, blob = _convert(_layer(tmp_path, {"./opt/a.txt": b"a" * 1000, "./opt/empty": b""}))
    raw = b"".join(data for _, data in _members(blob))
    assert converted.digest == "sha256:" + hashlib.sha256(blob).hexdigest() and converted.size == len(blob)
    assert converted.diff_id == "sha256:" + hashlib.sha256(raw).hexdigest()
    assert converted.uncompressed_size == len(raw)
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        names = tar.getnames()
        assert names == [".no.prefetch.landmark", "./opt", "./opt/a.txt", "./opt/empty", "stargz.index.json"]
        toc_bytes = tar.extractfile("stargz.index.json").read()
        assert tar.extractfile(".no.prefetch.landmark").read() == b"\x0f"
    assert converted.toc_digest == "sha256:" + hashlib.sha256(toc_bytes).hexdigest()
    footer = blob[-51:]
    assert footer[:4] == b"\x1f\x8b\x08\x04" and struct.unpack("<H", footer[10:12])[0] == 26
    assert footer[12:14] == b"SG" and footer[32:38] == b"STARGZ"
    toc_offset = int(footer[16:32], 16)
    assert zlib.decompressobj(31).decompress(blob[toc_offset:-51])[:len("stargz.index.json")] == b"stargz.index.json"
    entries = json.loads(toc_bytes)["entries"]
    a = next(e for e in entries if e["name"] == "./opt/a.txt")
    assert a["type"] == "reg" and a["size"] == 1000 and a["uid"] == 1000 and a["modtime"] == "2023-11-14T22:13:20Z"
    assert a["digest"] == a["chunkDigest"] == "sha256:" + hashlib.sha256(b"a" * 1000).hexdigest()
    assert zlib.decompressobj(31).decompress(blob[a["offset"]:])[:1000] == b"a" * 1000  # a member starts there
    assert converted.annotations == {"containerd.io/snapshot/stargz/toc.digest": converted.toc_digest,
                                     "io.containers.estargz.uncompressed-size": str(len(raw))}


def test_large_files_are_chunked_each_chunk_its_own_member_and_digest(tmp_path, monkeypatch):
    monkeypatch.setattr(estargz, "CHUNK_SIZE", 4096)
    data = bytes(range(256)) * 40  # 10,240 bytes: three chunks
    converted, blob = _convert(_layer(tmp_path, {"./opt/big": data}))
    raw = b"".join(d for _, d in _members(blob))
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        toc = json.loads(tar.extractfile("stargz.index.json").read())
    chunks = [e for e in toc["entries"] if e["name"] == "./opt/big"]
    assert [e["type"] for e in chunks] == ["reg", "chunk", "chunk"]
    assert [e.get("chunkOffset", 0) for e in chunks] == [0, 4096, 8192]
    assert [e.get("chunkSize") for e in chunks] == [4096, 4096, None]  # the last runs to the file's end
    offsets = {offset for offset, _ in _members(blob)}
    for entry in chunks:
        start = entry.get("chunkOffset", 0)
        assert entry["offset"] in offsets
        assert entry["chunkDigest"] == "sha256:" + hashlib.sha256(data[start:start + 4096]).hexdigest()
    assert chunks[0]["digest"] == "sha256:" + hashlib.sha256(data).hexdigest()


def test_prefetched_files_come_first_in_order_then_the_landmark_and_a_hard_link_stays_after_its_target(tmp_path):
    path = _layer(tmp_path, {"./opt/a": b"a", "./opt/b": b"b", "./opt/c": b"c"}, link=("./opt/l", "./opt/a"))
    converted, blob = _convert(path, ["/opt/c", "opt/a", "opt/l", "opt/missing"])
    raw = b"".join(d for _, d in _members(blob))
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        names = tar.getnames()
    assert names[:3] == ["./opt/c", "./opt/a", ".prefetch.landmark"]
    assert names.index("./opt/l") > names.index("./opt/a") and converted.prefetched == ("./opt/c", "./opt/a")


def test_the_same_layer_and_list_give_the_same_blob(tmp_path):
    path = _layer(tmp_path, {"./opt/a": b"a" * 5000, "./opt/b": b"b"})
    assert _convert(path, ["opt/b"])[0] == _convert(path, ["opt/b"])[0]
    assert _convert(path)[0].digest != _convert(path, ["opt/b"])[0].digest


def test_an_entry_type_estargz_cannot_hold_is_one_line(tmp_path):
    path = tmp_path / "odd.tar"
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo("./odd")
        info.type = tarfile.CONTTYPE
        tar.addfile(info)
    with pytest.raises(estargz.UsageError, match="entry ./odd is of a tar type it cannot hold"):
        _convert(path)


def test_a_prefetching_layer_says_how_many_bytes_and_files_a_node_fetches_first(tmp_path):
    path = _layer(tmp_path, {"./opt/a": b"a" * 70000, "./opt/b": b"b" * 90000})
    converted, blob = _convert(path, ["/opt/b"])
    said = converted.annotations
    assert said[estargz.PREFETCH_FILES_ANNOTATION] == "1"
    first = int(said[estargz.PREFETCH_BYTES_ANNOTATION])
    # Everything before the landmark's payload: the prefetched file whole, not the other one.
    assert 0 < first < len(blob)
    raw, rest = b"", blob[:first]
    while rest:  # member by member, as a node reads the span it fetched
        member = zlib.decompressobj(31)
        raw += member.decompress(rest)
        rest = member.unused_data
    assert b"b" * 90000 in raw and b"a" * 1000 not in raw
    none, _ = _convert(path)
    assert estargz.PREFETCH_BYTES_ANNOTATION not in none.annotations


def test_a_prefetch_list_is_part_of_what_a_blob_and_a_push_are_kept_by(tmp_path):
    from composer.publish.blobs import BlobCache, kept_as

    assert kept_as("gzip", ["/opt/x"]) == "gzip" and kept_as("estargz") == "estargz"
    assert kept_as("estargz", ["/opt/a"]) != kept_as("estargz", ["/opt/b"]) != "estargz"
    path = _layer(tmp_path, {"./opt/a": b"a" * 5000, "./opt/b": b"b"})
    diff = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    cache = BlobCache(tmp_path / "cache")
    with open(path, "rb") as fh:
        first = cache.add(fh, diff, "estargz", ["/opt/b"])
    assert cache.find(diff, "estargz", ["/opt/b"]) == first
    assert cache.find(diff, "estargz") is None and cache.find(diff, "estargz", ["/opt/a"]) is None
    assert dict(first.annotations)[estargz.PREFETCH_FILES_ANNOTATION] == "1"


def test_a_mirror_writes_each_gzip_layer_as_estargz_and_a_configuration_naming_the_new_tars(tmp_path, monkeypatch):
    """`composer mirror --compression estargz`: the tar inside each layer changes (TOC, landmark), so
    the configuration's diff ids are the new tars' (a new configuration blob); no prefetch list; a
    second mirror writes the same blobs; a layer already eStargz is copied as it is."""
    import gzip

    from composer.core.refs import ImageRef
    from composer.registry.copy import copy_image, plan_copy
    from composer.registry.recompress import Recompressed, recompress
    from tests.unit.test_mirror_copy import OCI_MANIFEST, FakeRegistry

    monkeypatch.setenv("COMPOSER_STATE_DIR", str(tmp_path / "state"))

    class Registry(FakeRegistry):
        def upload_unknown(self, name, write):
            pieces = []
            digest, size = write(pieces.append)
            data = b"".join(pieces)
            assert "sha256:" + hashlib.sha256(data).hexdigest() == digest and len(data) == size
            self.blobs[(name, digest)] = data
            return digest, size

        def upload_blob(self, name, data):
            digest = "sha256:" + hashlib.sha256(data).hexdigest()
            self.blobs[(name, digest)] = data
            return digest

        def open_blob(self, name, digest):
            return _Response(self.blobs[(name, digest)])

        def chunks(self, response, what):
            yield from (response[i:i + 4096] for i in range(0, len(response), 4096))

    class _Response(bytes):
        def close(self):
            pass

    tar = _layer(tmp_path, {"opt/a.txt": b"a" * 100, "opt/b.bin": b"b" * 5000}).read_bytes()
    already, converted_blob = _convert(_layer(tmp_path, {"opt/c.txt": b"c"}))
    source = Registry("src.example")
    blob = gzip.compress(tar, mtime=0)
    diff_id = "sha256:" + hashlib.sha256(tar).hexdigest()
    config = json.dumps({"os": "linux", "architecture": "amd64", "history": [{}, {}],
                         "rootfs": {"type": "layers", "diff_ids": [diff_id, already.diff_id]}}).encode()
    for data in (config, blob, converted_blob):
        source.blobs[("nv/t", "sha256:" + hashlib.sha256(data).hexdigest())] = data
    gz = "application/vnd.oci.image.layer.v1.tar+gzip"
    body = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                       "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                  "digest": "sha256:" + hashlib.sha256(config).hexdigest(), "size": len(config)},
                       "layers": [{"mediaType": gz, "digest": "sha256:" + hashlib.sha256(blob).hexdigest(), "size": len(blob)},
                                  {"mediaType": gz, "digest": already.digest, "size": already.size,
                                   "annotations": already.annotations}]}).encode()
    source.manifests[("nv/t", "1")] = (OCI_MANIFEST, body)
    source.manifests[("nv/t", "sha256:" + hashlib.sha256(body).hexdigest())] = (OCI_MANIFEST, body)

    digests = []
    for attempt in range(2):
        target = Registry("dst.example")
        plan = plan_copy(source, ImageRef.parse("src.example/nv/t:1"), ImageRef.parse("dst.example/m/t:1"))
        plan, uploaded = recompress(plan, "estargz", source, target, memory=Recompressed(tmp_path / f"memory{attempt}"))
        copy_image(plan, source, target)
        manifest = json.loads(target.raw_manifest("m/t", "1")[2])
        first, second = manifest["layers"]
        assert second == json.loads(body)["layers"][1]  # already eStargz: as it was
        assert first["mediaType"] == gz and estargz.TOC_DIGEST_ANNOTATION in first["annotations"]
        assert estargz.PREFETCH_FILES_ANNOTATION not in first["annotations"]  # a mirror runs no server
        new = target.blobs[("m/t", first["digest"])]
        names = [m.name for m in tarfile.open(fileobj=io.BytesIO(gzip.decompress(new))).getmembers()]
        assert names[0] == estargz.NO_PREFETCH_LANDMARK and names[-1] == estargz.TOC_NAME
        written = json.loads(target.blobs[("m/t", manifest["config"]["digest"])])
        assert written["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(gzip.decompress(new)).hexdigest(),
                                                 already.diff_id]
        assert written["history"] == [{}, {}] and "composer.diff_id" not in json.dumps(manifest)
        assert uploaded == len(new)  # (each attempt a fresh target and memory: converted again)
        digests.append(target.raw_manifest("m/t", "1")[0])
    assert digests[0] == digests[1]  # the same source, the same copy
