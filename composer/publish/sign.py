"""Signatures and attestations of a pushed image, in cosign's formats, with the composer's own code.

A signature is cosign's simple-signing payload (the pushed digest and the reference it was pushed
as) signed with an ECDSA P-256 key (SHA-256, deterministic per RFC 6979: the same key, payload and
digest give the same bytes), stored as a layer of the manifest tagged `sha256-<hex>.sig`, the
signature in the layer's annotation `dev.cosignproject.cosign/signature`. An attestation is a DSSE
envelope of an in-toto statement, tagged `sha256-<hex>.att`. Both are what cosign, Sigstore's
policy-controller and containers/image (skopeo, Podman, CRI-O: `sigstoreSigned`) read.

The key is read from a file or a variable when it is needed, used, and dropped: it reaches no
render, layer, log or other process.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from composer import __version__
from composer.core.errors import Invalid, RegistryError, UsageError
from composer.core.files import printable, read_text
from composer.publish import keyfile, referrers
from composer.registry.client import RegistryApi

SIMPLE_SIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
SIGNATURE_TYPE = "cosign container image signature"
DSSE = "application/vnd.dsse.envelope.v1+json"
IN_TOTO = "application/vnd.in-toto+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
MAX_ATTACHMENT = 16 << 20


def canonical(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def signature_tag(digest: str) -> str:
    return digest.replace(":", "-") + ".sig"


def attestation_tag(digest: str) -> str:
    return digest.replace(":", "-") + ".att"


def read_secret(source: str, what: str, environ: Mapping[str, str] | None = None) -> bytes:
    """A secret from file:PATH or env:NAME (checked when the option was read), as bytes; messages name
    the file or the variable, never what it holds."""
    environ = os.environ if environ is None else environ
    scheme, _, where = source.partition(":")
    if scheme == "env":
        if where not in environ or not environ[where]:
            raise UsageError(f"{what}: the variable {where} is not set")
        return environ[where].encode()
    try:
        return read_text(Path(where).expanduser(), what, 64 << 10).encode()
    except Invalid as problem:
        raise UsageError(f"{what}: {problem}") from None


@dataclass(frozen=True)
class SigningKey:
    """An ECDSA P-256 private key, loaded for one command (never written anywhere)."""

    key: object  # cryptography's EllipticCurvePrivateKey

    @classmethod
    def load(cls, source: str, passphrase: str | None = None, environ: Mapping[str, str] | None = None) -> "SigningKey":
        """The key at `source` (file:PATH or env:NAME): PKCS#8 or SEC1 PEM, encrypted or not, or
        cosign's own encrypted format (`cosign generate-key-pair`). Its passphrase comes from
        `passphrase` (file:PATH or env:NAME), else from COSIGN_PASSWORD as cosign reads it."""
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.hazmat.primitives.serialization import load_der_private_key, load_pem_private_key

        environ = os.environ if environ is None else environ
        data = read_secret(source, "--sign-key", environ)
        if passphrase:
            secret = read_secret(passphrase, "--sign-passphrase", environ).strip()
        elif "COSIGN_PASSWORD" in environ:  # cosign's own variable; it may be empty, as cosign allows
            secret = environ["COSIGN_PASSWORD"].encode()
        else:
            secret = None
        try:
            if keyfile.is_encrypted_cosign_key(data):
                if secret is None:
                    raise UsageError(f"--sign-key {source}: cosign's encrypted key needs its passphrase: "
                                     "--sign-passphrase file:PATH|env:NAME, or COSIGN_PASSWORD set")
                key = load_der_private_key(keyfile.decrypt(data, secret), password=None)
            elif b"ENCRYPTED" not in data and passphrase:
                raise UsageError(f"--sign-key {source}: the key is not encrypted: leave out --sign-passphrase")
            else:
                key = load_pem_private_key(data, password=secret if b"ENCRYPTED" in data else None)
        except keyfile.KeyFileError as problem:
            raise UsageError(f"--sign-key {source}: cosign's encrypted key: {problem}") from None
        except TypeError:  # a passphrase missing for an encrypted PEM
            raise UsageError(f"--sign-key {source}: the key is encrypted: give its passphrase with "
                             "--sign-passphrase (or COSIGN_PASSWORD)") from None
        except ValueError:
            raise UsageError(f"--sign-key {source}: not a PEM private key (or the passphrase is wrong)") from None
        if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
            raise UsageError(f"--sign-key {source}: an ECDSA P-256 key is needed (cosign's kind), this is another")
        return cls(key)

    def sign(self, payload: bytes) -> bytes:
        """The DER ECDSA signature of sha256(payload), deterministic (RFC 6979)."""
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        try:
            algorithm = ec.ECDSA(hashes.SHA256(), deterministic_signing=True)
        except TypeError:  # an older cryptography: a random k, still a valid signature
            algorithm = ec.ECDSA(hashes.SHA256())
        return self.key.sign(payload, algorithm)

    def public_pem(self) -> bytes:
        from cryptography.hazmat.primitives import serialization

        return self.key.public_key().public_bytes(serialization.Encoding.PEM,
                                                  serialization.PublicFormat.SubjectPublicKeyInfo)


def load_public_key(path: Path, flag: str = "--key"):
    """A PEM public key to verify with: ECDSA P-256, the only kind cosign's key pairs and the
    composer's signatures use (another is refused here, not after the registry was read)."""
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    shown = printable(str(path))
    if not Path(path).exists():
        raise UsageError(f"{flag} {shown}: no such file")
    if Path(path).is_dir():
        raise UsageError(f"{flag} {shown}: a folder, not a PEM public key file")
    try:
        key = load_pem_public_key(read_text(Path(path), "public key", 64 << 10).encode())
    except Invalid as problem:
        raise UsageError(f"{flag} {shown}: {problem}") from None
    except ValueError:
        raise UsageError(f"{flag} {shown}: not a PEM public key") from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name != "secp256r1":
        raise UsageError(f"{flag} {shown}: an ECDSA P-256 public key is needed (cosign's kind), this is another")
    return key


def verify_bytes(public_key, payload: bytes, signature: bytes) -> bool:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        public_key.verify(signature, payload, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        return False
    return True


def signature_payload(digest: str, reference: str) -> bytes:
    """cosign's simple-signing payload of `digest`, pushed as `reference` (no time: the same inputs
    give the same payload)."""
    return canonical({
        "critical": {"identity": {"docker-reference": reference}, "image": {"docker-manifest-digest": digest},
                     "type": SIGNATURE_TYPE},
        "optional": {"creator": f"triton-composer {__version__}"},
    })


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what an envelope's signature signs."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def envelope(statement: bytes, key: SigningKey | None) -> bytes:
    """A DSSE envelope of an in-toto statement, signed with `key` (unsigned without one)."""
    signatures = []
    if key is not None:
        signatures.append({"keyid": "", "sig": base64.b64encode(key.sign(pae(IN_TOTO, statement))).decode()})
    return canonical({"payload": base64.b64encode(statement).decode(), "payloadType": IN_TOTO,
                      "signatures": signatures})


def _attachment_config(layers: list[dict]) -> bytes:
    """The configuration blob of an attachment manifest, as cosign writes it (its layers' digests)."""
    return canonical({"architecture": "", "config": {}, "created": "0001-01-01T00:00:00Z",
                      "history": [{"created": "0001-01-01T00:00:00Z"}], "os": "",
                      "rootfs": {"type": "layers", "diff_ids": [layer["digest"] for layer in layers]}})


def _attach(api: RegistryApi, repository: str, tag: str, layer: dict, body: bytes, subject: dict,
            artifact_type: str) -> str:
    """Add one layer (`body`, described by `layer`) to the attachment manifest at `tag`, keeping the
    ones there; the same layer again is not added twice. The manifest names the image as its
    `subject` (OCI 1.1 referrers) and is listed under the image's referrers tag. Its digest."""
    if api.blob_size(repository, layer["digest"]) is None:
        api.upload_blob(repository, body)

    def manifest() -> bytes:  # what the tag holds now, and this layer (once)
        layers = referrers.descriptors(api, repository, tag, "layers")
        if not any(_same(item, layer) for item in layers):
            layers.append(layer)
        config = _attachment_config(layers)
        if api.blob_size(repository, "sha256:" + hashlib.sha256(config).hexdigest()) is None:
            api.upload_blob(repository, config)
        return canonical({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": artifact_type,
                          "config": {"mediaType": OCI_CONFIG, "digest": "sha256:" + hashlib.sha256(config).hexdigest(),
                                     "size": len(config)},
                          "layers": layers, "subject": subject})

    # The referrers tag lists what the tag holds once written: with another push's signatures, maybe.
    stored, written = referrers.rewrite(api, repository, tag, OCI_MANIFEST, manifest,
                                        lambda current: any(_same(item, layer) for item in current.get("layers") or []))
    referrers.record(api, repository, subject["digest"], written, stored)
    return stored


def _same(item: dict, layer: dict) -> bool:
    return item.get("digest") == layer["digest"] and item.get("annotations") == layer.get("annotations")


def push_signature(api: RegistryApi, repository: str, digest: str, reference: str, key: SigningKey) -> str:
    """Sign `repository@digest` (pushed as `reference`) and store the signature; its tag reference."""
    payload = signature_payload(digest, reference)
    layer = {"mediaType": SIMPLE_SIGNING, "digest": "sha256:" + hashlib.sha256(payload).hexdigest(),
             "size": len(payload), "annotations": {SIGNATURE_ANNOTATION: base64.b64encode(key.sign(payload)).decode()}}
    tag = signature_tag(digest)
    _attach(api, repository, tag, layer, payload, referrers.subject_of(api, repository, digest),
            referrers.SIGNATURE_ARTIFACT)
    return f"{api.host}/{repository}:{tag}"


def push_attestation(api: RegistryApi, repository: str, digest: str, statement: bytes, predicate_type: str,
                     key: SigningKey | None) -> str:
    """Store the statement about `repository@digest` in a DSSE envelope (signed when a key is given)."""
    body = envelope(statement, key)
    # cosign reads every attestation layer as a signature layer, whose annotation must be there: empty,
    # as cosign's own `attest` writes it (the signature is inside the DSSE envelope).
    layer = {"mediaType": DSSE, "digest": "sha256:" + hashlib.sha256(body).hexdigest(), "size": len(body),
             "annotations": {SIGNATURE_ANNOTATION: "", "predicateType": predicate_type}}
    tag = attestation_tag(digest)
    _attach(api, repository, tag, layer, body, referrers.subject_of(api, repository, digest),
            referrers.ATTESTATION_ARTIFACT)
    return f"{api.host}/{repository}:{tag}"


@dataclass(frozen=True)
class Signature:
    """One signature found beside an image, and whether the key given verifies it."""

    reference: str  # the docker-reference it was made for
    digest: str  # the manifest digest it names
    verified: bool
    problem: str = ""


def read_signatures(api: RegistryApi, repository: str, digest: str, public_key=None) -> list[Signature]:
    """Every signature stored for `repository@digest`, each checked with `public_key` when given:
    the signature over its payload, the payload's type and the digest it names."""
    found = api.raw_manifest(repository, signature_tag(digest))
    if found is None:
        return []
    try:
        layers = json.loads(found[2]).get("layers") or []
    except (ValueError, AttributeError):
        raise RegistryError(f"{api.host}/{repository}:{signature_tag(digest)} is not a signature manifest") from None
    signatures = []
    for layer in layers:
        if layer.get("mediaType") != SIMPLE_SIGNING:
            continue
        payload = api.blob(repository, layer["digest"], MAX_ATTACHMENT)
        if "sha256:" + hashlib.sha256(payload).hexdigest() != layer["digest"]:
            signatures.append(Signature("", "", False, "its payload does not hash to its digest"))
            continue
        try:
            critical = json.loads(payload)["critical"]
            named, reference = critical["image"]["docker-manifest-digest"], critical["identity"]["docker-reference"]
            kind = critical["type"]
        except (ValueError, KeyError, TypeError):
            signatures.append(Signature("", "", False, "its payload is not cosign's simple signing"))
            continue
        problem = ""
        verified = False
        if kind != SIGNATURE_TYPE:
            problem = f"its type is {kind!r}"
        elif named != digest:
            problem = f"it signs {named}, not {digest}"
        elif public_key is not None:
            try:
                raw = base64.b64decode((layer.get("annotations") or {}).get(SIGNATURE_ANNOTATION, ""), validate=True)
            except ValueError:
                raw = b""
            verified = bool(raw) and verify_bytes(public_key, payload, raw)
            problem = "" if verified else "the key does not verify it"
        signatures.append(Signature(reference, named, verified, problem))
    return signatures


def read_attestations(api: RegistryApi, repository: str, digest: str, public_key=None) -> list[tuple[dict, bool]]:
    """Every in-toto statement stored for `repository@digest`: (statement, verified by `public_key`)."""
    found = api.raw_manifest(repository, attestation_tag(digest))
    if found is None:
        return []
    statements = []
    for layer in json.loads(found[2]).get("layers") or []:
        if layer.get("mediaType") != DSSE:
            continue
        body = api.blob(repository, layer["digest"], MAX_ATTACHMENT)
        if "sha256:" + hashlib.sha256(body).hexdigest() != layer["digest"]:
            continue
        try:
            dsse = json.loads(body)
            statement_bytes = base64.b64decode(dsse["payload"])
            statement = json.loads(statement_bytes)
        except (ValueError, KeyError, TypeError):
            continue
        verified = False
        if public_key is not None:
            for item in dsse.get("signatures") or []:
                try:
                    raw = base64.b64decode(item.get("sig", ""), validate=True)
                except ValueError:
                    continue
                if verify_bytes(public_key, pae(dsse.get("payloadType", ""), statement_bytes), raw):
                    verified = True
        statements.append((statement, verified))
    return statements
