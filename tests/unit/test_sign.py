"""Signatures, attestations and the composer's own push at the registry API's boundary (an in-memory
registry): cosign's payload and tags, DSSE's encoding, keys refused in one line that never shows them,
and a push that gives the same manifest digest twice, the tag last."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from composer.core.errors import RegistryError, UsageError
from composer.publish import referrers
from composer.publish.sign import (
    SigningKey, envelope, load_public_key, pae, push_attestation, push_signature, read_attestations, read_signatures,
    signature_payload,
)
from tests.unit.test_mirror_copy import FakeRegistry

DIGEST = "sha256:" + "ab" * 32


class Registry(FakeRegistry):
    """The fake registry, holding the signed image at DIGEST in team/t (attachments name it as their subject)."""

    def __init__(self, host: str):
        super().__init__(host)
        self.manifests[("team/t", DIGEST)] = ("application/vnd.oci.image.manifest.v1+json", b'{"schemaVersion":2}')

    def upload_blob(self, name, data):
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        self.blobs[(name, digest)] = data
        return digest


@pytest.fixture
def key_files(tmp_path):
    key = ec.generate_private_key(ec.SECP256R1())
    (tmp_path / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                         serialization.NoEncryption()))
    (tmp_path / "key.pub").write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    (tmp_path / "locked.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.BestAvailableEncryption(b"s3")))
    return tmp_path


def test_the_payload_is_cosigns_simple_signing_with_no_time():
    payload = json.loads(signature_payload(DIGEST, "r.example/team/t:1"))
    assert payload["critical"] == {"identity": {"docker-reference": "r.example/team/t:1"},
                                   "image": {"docker-manifest-digest": DIGEST},
                                   "type": "cosign container image signature"}
    assert set(payload["optional"]) == {"creator"}  # no timestamp: the same inputs, the same payload
    assert signature_payload(DIGEST, "r.example/team/t:1") == signature_payload(DIGEST, "r.example/team/t:1")


def test_dsse_pre_authentication_encoding_is_the_specs():
    assert pae("http://example.com/HelloWorld", b"hello world") == \
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"


def test_a_signature_verifies_with_its_key_only_and_names_its_digest(key_files):
    key = SigningKey.load(f"file:{key_files / 'key.pem'}")
    registry = Registry("r.example")
    where = push_signature(registry, "team/t", DIGEST, "r.example/team/t:1", key)
    assert where == f"r.example/team/t:{DIGEST.replace(':', '-')}.sig"
    good = read_signatures(registry, "team/t", DIGEST, load_public_key(key_files / "key.pub"))
    assert [(s.verified, s.reference) for s in good] == [(True, "r.example/team/t:1")]
    other = ec.generate_private_key(ec.SECP256R1()).public_key()
    assert [s.verified for s in read_signatures(registry, "team/t", DIGEST, other)] == [False]
    # Signing again adds nothing (deterministic signatures: the same layer), and a second key adds one.
    push_signature(registry, "team/t", DIGEST, "r.example/team/t:1", key)
    assert len(read_signatures(registry, "team/t", DIGEST)) == 1
    assert read_signatures(registry, "team/t", "sha256:" + "cd" * 32) == []
    # An OCI 1.1 referrer of the image: its subject and type, listed once under the referrers tag.
    manifest = json.loads(registry.raw_manifest("team/t", DIGEST.replace(":", "-") + ".sig")[2])
    assert manifest["subject"]["digest"] == DIGEST and manifest["artifactType"].endswith("cosign.artifact.sig.v1+json")
    index = json.loads(registry.raw_manifest("team/t", DIGEST.replace(":", "-"))[2])
    assert [m["artifactType"] for m in index["manifests"]] == [manifest["artifactType"]]


def test_an_attestation_is_a_dsse_envelope_the_key_verifies(key_files):
    key = SigningKey.load(f"file:{key_files / 'key.pem'}")
    registry = Registry("r.example")
    statement = json.dumps({"_type": "https://in-toto.io/Statement/v1", "subject": []}).encode()
    push_attestation(registry, "team/t", DIGEST, statement, "https://slsa.dev/provenance/v1", key)
    [(read, verified)] = read_attestations(registry, "team/t", DIGEST, load_public_key(key_files / "key.pub"))
    assert read == json.loads(statement) and verified
    unsigned = json.loads(envelope(statement, None))
    assert unsigned["signatures"] == [] and base64.b64decode(unsigned["payload"]) == statement


class Racing(Registry):
    """Another push of the same digest writes the signature tag back right after this one does,
    from what it read before: the document it writes holds its own signature, not this push's
    (`times` times; forever when None)."""

    def __init__(self, host: str, times: int | None = 1):
        super().__init__(host)
        self.times, self.other = times, None

    def put_manifest(self, name, reference, body, media_type):
        stored = super().put_manifest(name, reference, body, media_type)
        if reference.endswith(".sig") and self.other is not None and (self.times is None or self.times > 0):
            self.times = None if self.times is None else self.times - 1
            stored = super().put_manifest(name, reference, self.other, media_type)
        return stored


def test_two_pushes_signing_one_digest_at_once_keep_both_signatures(key_files):
    """Issue 44's race: two pushes of one image (two tags) each read the signature tag, add their
    signature and write it back; the one written first is read back without its signature and
    written again, merged."""
    key = SigningKey.load(f"file:{key_files / 'key.pem'}")
    registry = Racing("r.example")
    push_signature(registry, "team/t", DIGEST, "r.example/team/t:2", key)  # the other push's, alone
    registry.other = registry.raw_manifest("team/t", DIGEST.replace(":", "-") + ".sig")[2]
    registry.manifests.pop(("team/t", DIGEST.replace(":", "-") + ".sig"))
    push_signature(registry, "team/t", DIGEST, "r.example/team/t:1", key)
    found = read_signatures(registry, "team/t", DIGEST, load_public_key(key_files / "key.pub"))
    assert sorted((s.reference, s.verified) for s in found) == [("r.example/team/t:1", True), ("r.example/team/t:2", True)]
    index = json.loads(registry.raw_manifest("team/t", DIGEST.replace(":", "-"))[2])  # lists the merged manifest
    assert [m["digest"] for m in index["manifests"]] == [registry.raw_manifest("team/t", DIGEST.replace(":", "-") + ".sig")[0]]


def test_a_signature_tag_other_writers_keep_taking_is_one_line(key_files):
    key = SigningKey.load(f"file:{key_files / 'key.pem'}")
    registry = Racing("r.example", times=None)
    push_signature(registry, "team/t", DIGEST, "r.example/team/t:2", key)
    registry.other = registry.raw_manifest("team/t", DIGEST.replace(":", "-") + ".sig")[2]
    with pytest.raises(RegistryError) as refused:
        push_signature(registry, "team/t", DIGEST, "r.example/team/t:1", key)
    assert "other pushes kept rewriting it without this push's part (5 tries); push again" in refused.value.message
    assert "\n" not in refused.value.message


@pytest.mark.parametrize("make, passphrase, says", [
    (lambda d: "file:" + str(d / "nope.pem"), None, "no such"),
    (lambda d: "file:" + str(d / "locked.pem"), None, "is encrypted: give its passphrase with --sign-passphrase"),
    (lambda d: "file:" + str(d / "locked.pem"), "env:TC_WRONG", "not a PEM private key (or the passphrase is wrong)"),
    (lambda d: "file:" + str(d / "key.pem"), "env:TC_RIGHT", "is not encrypted: leave out --sign-passphrase"),
    (lambda d: "env:TC_UNSET", None, "the variable TC_UNSET is not set"),
    (lambda d: "file:" + str(d / "rsa.pem"), None, "an ECDSA P-256 key is needed"),
])
def test_a_key_that_is_not_one_is_refused_in_one_line_that_never_shows_it(key_files, monkeypatch, make, passphrase,
                                                                         says):
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (key_files / "rsa.pem").write_bytes(rsa_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    monkeypatch.setenv("TC_WRONG", "not-it")
    monkeypatch.setenv("TC_RIGHT", "s3")
    monkeypatch.delenv("TC_UNSET", raising=False)
    with pytest.raises(UsageError) as caught:
        SigningKey.load(make(key_files), passphrase)
    message = caught.value.message
    assert says in message and "\n" not in message and "PRIVATE KEY" not in message
    SigningKey.load(f"file:{key_files / 'locked.pem'}", "env:TC_RIGHT")  # the right passphrase opens it


def test_the_key_may_come_from_a_variable(key_files, monkeypatch):
    monkeypatch.setenv("TC_KEY", (key_files / "key.pem").read_text())
    key = SigningKey.load("env:TC_KEY")
    assert key.public_pem() == (key_files / "key.pub").read_bytes()
    payload = signature_payload(DIGEST, "r.example/t:1")
    assert key.sign(payload) == key.sign(payload)  # RFC 6979: the same bytes for the same payload


def _tar_of(name: bytes) -> bytes:
    import io
    import tarfile

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(name.decode())
        info.size = len(name)
        tar.addfile(info, io.BytesIO(name))
    return out.getvalue()


def _one_layer_image(tmp_path):
    """A base of one layer on a fake engine, and a composed image of one layer of its own on it."""
    from composer.assembly.assemble import Assembled
    from composer.assembly.canonical import LayerFile
    from tests.unit.fake_engine import FakeEngine

    base_tar, own_tar = _tar_of(b"base-file"), _tar_of(b"own-file")
    base_diff = "sha256:" + hashlib.sha256(base_tar).hexdigest()
    own = tmp_path / "own.tar"
    own.write_bytes(own_tar)
    layer = LayerFile(own, "sha256:" + hashlib.sha256(own_tar).hexdigest(), len(own_tar), 8, "backend x")
    base_id = "sha256:" + "e" * 64
    engine = FakeEngine(images={base_id: base_id})
    engine.loaded[base_id] = {"config": b"{}", "layers": {base_diff[7:]: base_tar}}
    config = json.dumps({"rootfs": {"diff_ids": [base_diff, layer.diff_id]}}).encode()
    assembled = Assembled("sha256:" + hashlib.sha256(config).hexdigest(), config, base_id, (base_diff,), (layer,), ())
    return engine, assembled, base_tar, own_tar


def _push_twice(tmp_path, engine, assembled, registry, ref: str, compression: str) -> list:
    """The composer's push of `assembled` to the in-memory registry, twice (a blob cache of the test's own)."""
    from composer.publish.blobs import BlobCache
    from composer.publish.image_push import push_assembled

    class Registries:
        def client(self, host):
            assert host == "r.example"
            return registry

    pushes = []
    for attempt in range(2):
        folder = tmp_path / f"{compression}{attempt}"
        folder.mkdir()
        pushes.append(push_assembled(engine, assembled, ref, Registries(), compression=compression, folder=folder,
                                     cache=BlobCache(tmp_path / "cache")))
    return pushes


def test_the_composers_push_gives_one_digest_twice_blobs_first_and_the_tag_last(tmp_path):
    engine, assembled, base_tar, own_tar = _one_layer_image(tmp_path)
    registry = Registry("r.example")
    pushes = _push_twice(tmp_path, engine, assembled, registry, "r.example/team/t:1", "gzip")
    assert pushes[0].digest == pushes[1].digest == "sha256:" + hashlib.sha256(pushes[0].manifest).hexdigest()
    assert pushes[0].bytes_moved > 0 and pushes[1].bytes_moved == 0  # the second finds every blob there
    manifest = json.loads(pushes[0].manifest)
    assert [l["mediaType"] for l in manifest["layers"]] == ["application/vnd.oci.image.layer.v1.tar+gzip"] * 2
    assert ("put_manifest", "team/t", "1") in registry.calls
    import gzip

    for entry, tar in zip(manifest["layers"], (base_tar, own_tar)):
        blob = registry.blobs[("team/t", entry["digest"])]
        assert gzip.decompress(blob) == tar and blob[4:8] == b"\0\0\0\0"  # no time in the gzip header


def test_an_image_pushed_again_to_another_registry_compresses_none_of_its_layers_again(tmp_path, monkeypatch):
    """The image's own layers go into the machine's blob cache with the base's: a push of the same
    image to a registry that holds nothing of it compresses nothing, and pushes the same digest."""
    from composer.publish import blobs

    engine, assembled, _, _ = _one_layer_image(tmp_path)
    counted = []
    real = blobs.compress
    monkeypatch.setattr(blobs, "compress", lambda *args: counted.append(args[2]) or real(*args))
    first = _push_twice(tmp_path, engine, assembled, Registry("r.example"), "r.example/team/t:1", "gzip")
    assert len(counted) == 2  # the base's layer and the image's own, once each
    (tmp_path / "again").mkdir()
    other = _push_twice(tmp_path / "again", engine, assembled, Registry("r.example"), "r.example/team/t:1", "gzip")
    assert len(counted) == 4 and other[0].digest == first[0].digest  # a cache of its own: compressed again
    elsewhere = Registry("r.example")
    from composer.publish.blobs import BlobCache
    from composer.publish.image_push import push_assembled

    class Registries:
        def client(self, host):
            return elsewhere

    (tmp_path / "third").mkdir()
    third = push_assembled(engine, assembled, "r.example/team/t:1", Registries(), compression="gzip",
                           folder=tmp_path / "third", cache=BlobCache(tmp_path / "cache"))
    assert len(counted) == 4 and third.digest == first[0].digest and third.bytes_moved > 0


def test_the_base_comes_from_the_runs_own_registry_never_one_the_engine_once_pulled_it_from(tmp_path):
    """Another registry the engine pulled the same base from (its repo digests) is not asked: the
    pushed digest follows from the run's inputs, not from what the engine met before."""
    from composer.engine.interface import ImageInfo
    from composer.publish.blobs import BlobCache
    from composer.publish.image_push import push_assembled

    engine, assembled, _, _ = _one_layer_image(tmp_path)
    engine.infos[assembled.base] = ImageInfo(id=assembled.base, ref=assembled.base, tags=(), env={}, labels={}, size=0,
                                             repo_digests=("elsewhere.example/team/min@sha256:" + "e" * 64,))
    registry, asked = Registry("r.example"), []

    class Registries:
        def client(self, host):
            asked.append(host)
            return registry

    plain = push_assembled(engine, assembled, "r.example/team/t:1", Registries(), compression="gzip",
                           folder=tmp_path, cache=BlobCache(tmp_path / "cache"))
    assert asked == ["r.example"] and plain.digest.startswith("sha256:")
    # The run's own registry is asked; one that does not hold the base (here: nothing) is no shortcut.
    again = push_assembled(engine, assembled, "r.example/team/t:2", Registries(), compression="gzip",
                           folder=tmp_path, cache=BlobCache(tmp_path / "cache"),
                           origin="mirror.example/nvidia/min@sha256:" + "f" * 64)
    assert again.digest == plain.digest and asked[1:] == ["r.example", "mirror.example"]


def test_a_base_source_that_goes_away_in_the_push_gives_way_to_the_engines_layers(tmp_path, monkeypatch):
    """The registry the base came from (a mirror) stops answering in the middle of the push: the
    base's layers go from the engine instead, and the manifest names what arrived."""
    import dataclasses

    from composer.core.errors import RegistryError
    from composer.publish import image_push
    from composer.publish.blobs import BlobCache
    from composer.registry.retries import RetryPolicy

    @dataclasses.dataclass
    class Gone:
        host: str = "mirror.example"
        api_host: str = "mirror.example"
        retry: RetryPolicy = dataclasses.field(default_factory=RetryPolicy)

        def blob_size(self, name, digest):
            raise RegistryError("mirror.example does not answer")

        def open_blob(self, name, digest):
            raise RegistryError("mirror.example does not answer")

        def chunks(self, response, what):
            raise AssertionError("never reached: the blob does not open")

    engine, assembled, _, _ = _one_layer_image(tmp_path)
    registry = Registry("r.example")
    gone = image_push.RemoteLayer(Gone(), "nvidia/tritonserver", "sha256:" + "a" * 64, 10,
                                  "application/vnd.oci.image.layer.v1.tar+gzip")
    monkeypatch.setattr(image_push, "base_in_a_registry", lambda *args: [gone])

    class Registries:
        def client(self, host):
            return registry

    lines = []
    pushed = image_push.push_assembled(engine, assembled, "r.example/team/t:1", Registries(), compression="gzip",
                                       folder=tmp_path, cache=BlobCache(tmp_path / "cache"), on_line=lines.append)
    assert "mirror.example no longer answers: the base's layers go from the engine instead" in lines
    manifest = json.loads(pushed.manifest)
    assert gone.digest not in [entry["digest"] for entry in manifest["layers"]]
    assert all(("team/t", entry["digest"]) in registry.blobs for entry in manifest["layers"])


def _cosign_key_file(tmp_path, passphrase: bytes, n: int = 1 << 15) -> tuple:
    """A key file as `cosign generate-key-pair` writes it (scrypt, then NaCl's secretbox over the
    PKCS#8 DER), made with PyNaCl, an independent secretbox."""
    import base64
    import hashlib
    import json
    import os

    import nacl.secret
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    private = ec.generate_private_key(ec.SECP256R1())
    der = private.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    salt, nonce = os.urandom(32), os.urandom(24)
    key = hashlib.scrypt(passphrase, salt=salt, n=n, r=8, p=1, maxmem=64 << 20, dklen=32)
    sealed = nacl.secret.SecretBox(key).encrypt(der, nonce).ciphertext
    box = {"kdf": {"name": "scrypt", "params": {"N": n, "r": 8, "p": 1}, "salt": base64.b64encode(salt).decode()},
           "cipher": {"name": "nacl/secretbox", "nonce": base64.b64encode(nonce).decode()},
           "ciphertext": base64.b64encode(sealed).decode()}
    body = base64.encodebytes(json.dumps(box).encode()).decode()
    path = tmp_path / "cosign.key"
    path.write_text(f"-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\n{body}-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n")
    return path, private


def test_cosigns_encrypted_key_opens_with_its_passphrase_from_a_flag_or_cosign_password(tmp_path):
    from cryptography.hazmat.primitives import serialization

    path, private = _cosign_key_file(tmp_path, b"pass-7")
    public = private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert SigningKey.load(f"file:{path}", "env:TC_PASS", environ={"TC_PASS": "pass-7"}).public_pem() == public
    assert SigningKey.load(f"file:{path}", environ={"COSIGN_PASSWORD": "pass-7"}).public_pem() == public
    with pytest.raises(UsageError, match="cosign's encrypted key: the passphrase is wrong"):
        SigningKey.load(f"file:{path}", environ={"COSIGN_PASSWORD": "pass-8"})
    with pytest.raises(UsageError, match="needs its passphrase: --sign-passphrase file:PATH|env:NAME, or COSIGN_PASSWORD"):
        SigningKey.load(f"file:{path}", environ={})


def test_cosigns_key_with_an_empty_passphrase_opens_with_an_empty_cosign_password(tmp_path):
    path, _private = _cosign_key_file(tmp_path, b"", n=1 << 10)
    assert SigningKey.load(f"file:{path}", environ={"COSIGN_PASSWORD": ""}).public_pem()


def test_sec1_and_pkcs8_pem_keys_both_load(tmp_path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    private = ec.generate_private_key(ec.SECP256R1())
    for name, form in (("sec1.pem", serialization.PrivateFormat.TraditionalOpenSSL),
                       ("pkcs8.pem", serialization.PrivateFormat.PKCS8)):
        (tmp_path / name).write_bytes(private.private_bytes(serialization.Encoding.PEM, form,
                                                            serialization.NoEncryption()))
        assert SigningKey.load(f"file:{tmp_path / name}", environ={}).public_pem() == SigningKey(private).public_pem()


def test_an_estargz_push_names_its_layers_toc_and_the_config_of_the_tars_it_holds(tmp_path):
    """--compression estargz: every layer an eStargz blob with its TOC digest and uncompressed size as
    annotations, and a configuration naming the diff ids of the tars the blobs hold; twice, one digest."""
    engine, assembled, _, _ = _one_layer_image(tmp_path)
    registry = Registry("r.example")
    pushes = _push_twice(tmp_path, engine, assembled, registry, "r.example/team/t:esgz", "estargz")
    assert pushes[0].digest == pushes[1].digest
    manifest = json.loads(pushes[0].manifest)
    assert all(l["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip" for l in manifest["layers"])
    assert all(set(l["annotations"]) == {"containerd.io/snapshot/stargz/toc.digest",
                                         "io.containers.estargz.uncompressed-size"} for l in manifest["layers"])
    config = json.loads(registry.blobs[("team/t", manifest["config"]["digest"])])
    import zlib

    for entry, diff_id in zip(manifest["layers"], config["rootfs"]["diff_ids"]):
        blob = registry.blobs[("team/t", entry["digest"])]
        raw, rest = b"", blob
        while rest:
            inflate = zlib.decompressobj(31)
            raw += inflate.decompress(rest)
            rest = inflate.unused_data
        assert diff_id == "sha256:" + hashlib.sha256(raw).hexdigest() and b"stargz.index.json" in raw
        assert entry["annotations"]["io.containers.estargz.uncompressed-size"] == str(len(raw))
    assert config["rootfs"]["diff_ids"] != list(assembled.diff_ids)  # the tars inside are not the image's
