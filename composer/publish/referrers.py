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

from composer.registry.client import RegistryApi

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
SIGNATURE_ARTIFACT = "application/vnd.dev.cosign.artifact.sig.v1+json"
ATTESTATION_ARTIFACT = "application/vnd.dev.cosign.artifact.att.v1+json"


def subject_of(api: RegistryApi, repository: str, digest: str) -> dict:
    """The descriptor of `repository@digest` (its media type and size, as the registry has them)."""
    found = api.document(repository, digest)
    if found is None:
        from composer.core.errors import RegistryError

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
    manifests = descriptors(api, repository, tag, "manifests")
    manifests = [m for m in manifests if m.get("artifactType") != artifact and m.get("digest") != stored] + [entry]
    index = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests},
                       sort_keys=True, separators=(",", ":")).encode()
    api.put_manifest(repository, tag, index, OCI_INDEX)


def listed(api: RegistryApi, repository: str, digest: str) -> list[dict]:
    """The referrers of `repository@digest`: from the referrers API where the registry has it, else
    from the referrers tag."""
    found = api.referrers(repository, digest)
    if found is not None:
        return list(found)
    return descriptors(api, repository, referrers_tag(digest), "manifests")
