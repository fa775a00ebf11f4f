"""`composer verify REF`: what a pipeline's admission check asks of a pushed image, answered from the
registry alone (no engine): a signature by the given key of exactly the digest the reference names
now, made for that repository, and provenance that names that digest as its subject (signed by the
key too). Cosign's formats, so signatures cosign or skopeo made verify as well as the composer's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from composer.core.errors import ComposerError, RegistryError
from composer.core.refs import ImageRef
from composer.publish.provenance import SLSA_PROVENANCE
from composer.publish.sign import read_attestations, read_signatures
from composer.registry.client import Registries


class VerificationFailed(ComposerError):
    """The image is there, and fails a check: exit 1, the checks said."""


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str


@dataclass
class Verification:
    ref: str
    digest: str
    checks: list[Check] = field(default_factory=list)
    provenance: dict | None = None  # the statement that names this digest, when there is one

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)

    def to_dict(self) -> dict:
        return {"ref": self.ref, "digest": self.digest, "passed": self.passed,
                "checks": [{"check": c.name, "passed": c.passed, "detail": c.detail} for c in self.checks]}

    def table(self) -> str:
        width = max(len(c.name) for c in self.checks) if self.checks else 5
        lines = [f"{self.ref}@{self.digest}"]
        lines += [f"  {c.name.ljust(width)}  {'PASS' if c.passed else 'FAIL'}  {c.detail}" for c in self.checks]
        return "\n".join(lines)


def _same_repository(reference: str, target: ImageRef) -> bool:
    try:
        return ImageRef.parse(reference).same_repository(target)
    except (ValueError, ComposerError):
        return False


def held_digest(registries: Registries, ref: str) -> tuple[ImageRef, str]:
    """The digest `ref` names, proven held by its registry (a digest it does not hold is said so,
    not taken for an unsigned image)."""
    target = ImageRef.parse(ref)
    api = registries.client(target.host)
    digest = target.digest or api.digest(target)
    if digest is None or (target.digest and not api.has_manifest(target.repository, digest)):
        raise RegistryError(f"{ref}: the registry holds no such image")
    return target, digest


def verify(registries: Registries, ref: str, key) -> Verification:
    """Check `ref`'s signatures and provenance against `key` (a public key read by the preflight,
    composer.app.preflight.public_key; None: only read them)."""
    target, digest = held_digest(registries, ref)
    api = registries.client(target.host)
    result = Verification(str(target).partition("@")[0], digest)  # the table adds @digest once
    signatures = read_signatures(api, target.repository, digest, key)
    mine = [s for s in signatures if _same_repository(s.reference, target)]
    if key is not None:
        good = [s for s in mine if s.verified]
        if good:
            result.checks.append(Check("signature", True, f"{len(good)} of {len(signatures)} signature(s) by the key, "
                                       f"for {good[0].reference}"))
        elif signatures:
            problems = "; ".join(sorted({s.problem or f"made for {s.reference}" for s in signatures}))[:300]
            result.checks.append(Check("signature", False, f"none of {len(signatures)} signature(s) verifies: {problems}"))
        else:
            result.checks.append(Check("signature", False, "no signature is stored beside the image "
                                       f"({digest.replace(':', '-')}.sig)"))
    statements = read_attestations(api, target.repository, digest, key)
    provenance = [(s, v) for s, v in statements if s.get("predicateType") == SLSA_PROVENANCE and
                  any((subject.get("digest") or {}).get("sha256") == digest.partition(":")[2]
                      for subject in s.get("subject") or [])]
    if provenance:
        # With a key, what is said of the provenance is said of the one the key verified.
        statement, verified = next(((s, v) for s, v in provenance if v), provenance[0])
        result.provenance = statement
        if key is not None and not any(v for _, v in provenance):
            result.checks.append(Check("provenance", False, "SLSA provenance names this digest, but the key does "
                                       "not verify its envelope"))
        else:
            bases = [d.get("name") for d in statement["predicate"]["buildDefinition"].get("resolvedDependencies", [])
                     if d.get("uri", "").startswith("docker://")]
            result.checks.append(Check("provenance", True, f"SLSA provenance v1{' signed by the key' if key else ''}, "
                                       f"bases {', '.join(bases)} by digest"))
    else:
        result.checks.append(Check("provenance", False, "no SLSA provenance names this digest "
                                   f"({digest.replace(':', '-')}.att)"))
    return result


def provenance_of(registries: Registries, ref: str, public_key=None) -> tuple[str, dict, bool]:
    """The digest `ref` names, the SLSA provenance stored for it, and whether `public_key` verified
    its envelope. With a key, only a provenance the key verifies is taken: one signed otherwise, or
    not at all, is refused (it could say anything)."""
    target, digest = held_digest(registries, ref)
    api = registries.client(target.host)
    found = [(statement, verified) for statement, verified in read_attestations(api, target.repository, digest,
                                                                               public_key)
             if statement.get("predicateType") == SLSA_PROVENANCE and _names(statement, digest)]
    if not found:
        raise VerificationFailed(f"{ref}: no SLSA provenance is stored for {digest}: nothing to rebuild from")
    if public_key is None:
        return digest, found[0][0], False
    signed = [statement for statement, verified in found if verified]
    if not signed:
        raise VerificationFailed(f"{ref}: {len(found)} SLSA provenance(s) stored for {digest}, none signed by the "
                                 "key: an unsigned or otherwise signed provenance is not rebuilt from")
    return digest, signed[0], True


def _names(statement: dict, digest: str) -> bool:
    return any((subject.get("digest") or {}).get("sha256") == digest.partition(":")[2]
               for subject in statement.get("subject") or [])


def config_of(registries: Registries, ref: str, digest: str) -> tuple[dict, dict]:
    """The manifest and configuration `ref@digest` names (to say which layer differs)."""
    target = ImageRef.parse(ref)
    api = registries.client(target.host)
    found = api.raw_manifest(target.repository, digest)
    if found is None:
        raise RegistryError(f"{ref}@{digest}: gone from the registry")
    manifest = json.loads(found[2])
    config = json.loads(api.blob(target.repository, manifest["config"]["digest"]))
    return manifest, config
