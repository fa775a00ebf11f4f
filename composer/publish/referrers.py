"""What is stored beside an image (signatures, attestations, its SBOM), listed as OCI 1.1 referrers.

Each of those manifests names the image as its `subject` and says its `artifactType`: a registry
with the referrers API (Harbor 2.8+, zot, ACR, ECR, go-containerregistry's) lists them by itself. The
composer also keeps the referrers tag schema of the distribution spec, always: the tag
`sha256-<hex>` holds an OCI index of the referrers' descriptors, which `oras discover` and other
OCI 1.1 clients read where the API is missing (Debian's distribution 2.8); and cosign's own tags
(`.sig`, `.att`, `.sbom`) stay, for the clients that read only those.
"""

from __future__ import annotations

import json
import time
from typing import Callable

from composer.core.errors import RegistryError
from composer.engine import locks
from composer.registry.client import RegistryApi

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
SIGNATURE_ARTIFACT = "application/vnd.dev.cosign.artifact.sig.v1+json"
ATTESTATION_ARTIFACT = "application/vnd.dev.cosign.artifact.att.v1+json"


def subject_of(api: RegistryApi, repository: str, digest: str) -> dict:
    """The descriptor of `repository@digest` (its media type and size, as the registry has them)."""
    found = api.document(repository, digest)
    if found is None:
        raise RegistryError(f"{api.host}/{repository}@{digest} is not in the registry")
    _, media_type, _, size = found
    return {"mediaType": media_type, "digest": digest, "size": size}


def referrers_tag(digest: str) -> str:
    """The distribution spec's referrers tag of a digest: sha256:abc... -> sha256-abc..."""
    return digest.replace(":", "-")


def descriptors(api: RegistryApi, repository: str, reference: str, key: str) -> list[dict]:
    """The descriptors a stored manifest or index lists under `key` ("layers", "manifests"): []
    when there is none, or it is not such a document (it is then written anew)."""
    found = api.raw_manifest(repository, reference)
    if found is None:
        return []
    try:
        return [dict(item) for item in json.loads(found[2]).get(key) or []]
    except (ValueError, AttributeError, TypeError):
        return []


def record(api: RegistryApi, repository: str, subject: str, manifest: bytes, stored: str) -> None:
    """List the manifest just stored (its digest `stored`) under the subject's referrers tag, in
    place of an older one of the same artifact type (a signature manifest is rewritten with every
    new signature: the newest holds them all)."""
    document = json.loads(manifest)
    artifact = document.get("artifactType") or (document.get("config") or {}).get("mediaType")
    entry = {"mediaType": document.get("mediaType", OCI_MANIFEST), "digest": stored, "size": len(manifest),
             "artifactType": artifact}
    if document.get("annotations"):
        entry["annotations"] = document["annotations"]
    tag = referrers_tag(subject)

    def index() -> bytes:
        manifests = descriptors(api, repository, tag, "manifests")
        manifests = [m for m in manifests if m.get("artifactType") != artifact and m.get("digest") != stored] + [entry]
        return json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests},
                          sort_keys=True, separators=(",", ":")).encode()

    rewrite(api, repository, tag, OCI_INDEX, index,
            lambda listed: any(m.get("digest") == stored for m in listed.get("manifests") or []))


# -- tags that several pushes extend: read, add, write, read back -------------------------------------
# A signature tag (`sha256-<hex>.sig`), an attestation tag and the referrers tag are documents that
# every push of the digest extends: read what is there, add its own, write it back. Two pushes of one
# digest at once (two tags of one image, two pipelines) would each write back a document without the
# other's part, and one signature would be lost. The registry API has no compare-and-swap, so: on
# this host one writer at a time (a host-wide lock per tag, whatever the state folder); across hosts,
# each writer reads the tag back after a pause and writes its part again while it is missing.
SETTLE_SECONDS = 0.3  # longer than another writer's read-to-write span on a reachable registry
REWRITE_TRIES = 5


def rewrite(api: RegistryApi, repository: str, tag: str, media_type: str, document: Callable[[], bytes],
            holds: Callable[[dict], bool], *, settle: float | None = None) -> tuple[str, bytes]:
    """Write `document()` (made from what the tag holds now) at `tag` until, read back after
    `settle` seconds (SETTLE_SECONDS when None), the tag `holds` this writer's part; what it holds
    then (digest, bytes), which another push's part may have joined. Refused in one line when other
    writers keep taking the part out."""
    with locks.making_host("registry tag", f"{api.host}/{repository}:{tag}"):
        for _ in range(REWRITE_TRIES):
            api.put_manifest(repository, tag, document(), media_type)
            time.sleep(SETTLE_SECONDS if settle is None else settle)
            found = api.raw_manifest(repository, tag)
            try:
                current = json.loads(found[2]) if found is not None else None
            except ValueError:
                current = None
            if isinstance(current, dict) and holds(current):
                return found[0], found[2]
    raise RegistryError(f"{api.host}/{repository}:{tag}: other pushes kept rewriting it without this push's part "
                        f"({REWRITE_TRIES} tries); push again")


def listed(api: RegistryApi, repository: str, digest: str) -> list[dict]:
    """The referrers of `repository@digest`: from the referrers API where the registry has it, else
    from the referrers tag."""
    found = api.referrers(repository, digest)
    if found is not None:
        return list(found)
    return descriptors(api, repository, referrers_tag(digest), "manifests")
