"""An image's SBOM next to it in a registry, and found there again without pulling anything.

Pushed as an OCI artifact whose `subject` is the image: where the registry offers the referrers
API (OCI distribution 1.1) it is found through that API; everywhere it is also stored under the
tag `sha256-<hex>.sbom`, the name cosign-style tools read, and listed under the referrers tag
(composer.publish.referrers).
"""

from __future__ import annotations

import json

from composer.core.errors import RegistryError
from composer.publish import referrers
from composer.registry.client import RegistryApi
from composer.verify.sbom import MEDIA_TYPE

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
EMPTY_CONFIG = "application/vnd.oci.empty.v1+json"
MAX_SBOM = 64 << 20


def fallback_tag(digest: str) -> str:
    """sha256:abc... -> sha256-abc....sbom"""
    return digest.replace(":", "-") + ".sbom"


def push_sbom(api: RegistryApi, repository: str, digest: str, document: str) -> str:
    """Store `document` as the SBOM of `repository@digest`; where it went (a digest or tag ref)."""
    found = api.document(repository, digest)
    if found is None:
        raise RegistryError(f"cannot push the SBOM: {api.host}/{repository}@{digest} is not in the registry")
    _, subject_type, _, subject_size = found
    config = api.upload_blob(repository, b"{}")
    body = document.encode()
    layer = api.upload_blob(repository, body)
    manifest = json.dumps({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": MEDIA_TYPE,
        "config": {"mediaType": EMPTY_CONFIG, "digest": config, "size": 2},
        "layers": [{"mediaType": MEDIA_TYPE, "digest": layer, "size": len(body),
                    "annotations": {"org.opencontainers.image.title": "sbom.cdx.json"}}],
        "subject": {"mediaType": subject_type, "digest": digest, "size": subject_size},
    }, sort_keys=True, separators=(",", ":")).encode()
    # Under cosign's tag always (clients that read only tags), listed by the referrers API where the
    # registry has one, and under the referrers tag too (composer.publish.referrers).
    tag = fallback_tag(digest)
    stored, _ = referrers.rewrite(api, repository, tag, OCI_MANIFEST, lambda: manifest,
                               lambda current: current.get("layers") == json.loads(manifest)["layers"], settle=0)
    referrers.record(api, repository, digest, manifest, stored)
    return f"{api.host}/{repository}@{stored}"


def find_sbom(api: RegistryApi, repository: str, digest: str) -> str | None:
    """The SBOM of `repository@digest` in its registry (referrers first, then the tag), or None."""
    candidates = [m["digest"] for m in api.referrers(repository, digest) or []
                  if m.get("artifactType") == MEDIA_TYPE and "digest" in m]
    for reference in [*candidates, fallback_tag(digest)]:
        found = api.document(repository, reference)
        if found is None:
            continue
        layers = [layer for layer in found[2].get("layers", []) if layer.get("mediaType") == MEDIA_TYPE]
        if layers and (found[2].get("subject") or {}).get("digest", digest) == digest:
            return api.blob(repository, layers[0]["digest"], MAX_SBOM).decode("utf-8", "replace")
    return None


def _sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()
