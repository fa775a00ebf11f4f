"""Lock files: the base images of a backend set, pinned by digest, next to the set.

A tag such as tritonserver:24.09-py3 can be pushed again; a lock makes a rebuild take the very
same images, and a moved tag becomes a clear error instead of a silently different image. The
lock also records the set file's own digest, so an edited set is noticed before its stale lock
is trusted.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

import yaml

from composer.core.errors import ImageNotFound, Invalid, UsageError
from composer.core.files import check_output_file, load_structured, read_text, write_file
from composer.core.progress import LineSink, quiet
from composer.core.refs import ImageRef, digest_for
from composer.config.sets import presets_dir
from composer.registry.client import Registries

if TYPE_CHECKING:  # the engine is only passed through here
    from composer.engine.interface import Engine

LOCK_SUFFIX = ".lock.yaml"
LOCK_VERSION = 1
ROLE_ORDER = {"full": 0, "min": 1}


@dataclass(frozen=True)
class LockedImage:
    """One base image of a set: its role ("full", "min" or "backend:<name>"), ref and digest."""

    role: str
    ref: str
    digest: str  # a registry digest, or the image id of an image that exists only locally
    local: bool = False  # True: `digest` is an image id, not a registry digest

    def record(self) -> dict:
        record = {"role": self.role, "ref": self.ref, "digest": self.digest}
        if self.local:
            record["local"] = True
        return record


@dataclass(frozen=True)
class LockFile:
    path: Path
    set_digest: str  # sha256 of the set file's bytes when it was locked
    images: tuple[LockedImage, ...]
    set_path: Path | None = None

    def image(self, role: str) -> LockedImage | None:
        return next((i for i in self.images if i.role == role), None)


def lock_path(set_path: Path) -> Path:
    """<folder>/<set stem>.lock.yaml, next to the set."""
    set_path = Path(set_path)
    stem = set_path.name.rsplit(".", 1)[0] if set_path.suffix in (".yaml", ".yml") else set_path.name
    return set_path.with_name(stem + LOCK_SUFFIX)


def digest_of(info) -> str:
    """The digest to lock for a composer.engine.interface.ImageInfo.

    The registry digest of info.ref's own repository (a digest is only valid in the repository
    it came from); else the image id, for images that exist only locally.
    """
    return digest_for(info.ref, info.repo_digests) or info.id


def locked_image(role: str, info) -> LockedImage:
    """The LockedImage of an ImageInfo, marked local when only its id could be had."""
    digest = digest_of(info)
    return LockedImage(role=role, ref=info.ref, digest=digest, local=digest == info.id)


def write_lock(set_path: Path, images: Sequence[LockedImage]) -> LockFile:
    """Write the lock of `set_path` (deterministic: images sorted by role) and return it."""
    set_path = Path(set_path)
    _check_not_shipped(set_path)
    roles = [image.role for image in images]
    for image in images:
        _check_role(image.role, set_path)
    duplicates = sorted({r for r in roles if roles.count(r) > 1})
    if duplicates:
        raise UsageError(f"lock for {set_path}: role {duplicates[0]} given twice")
    lock = LockFile(
        path=lock_path(set_path),
        set_digest=set_digest(set_path),
        images=tuple(sorted(images, key=_role_key)),
        set_path=set_path,
    )
    header = (
        f"# composer lock file for {set_path.name}: its base images pinned by digest.\n"
        f"# Written by `composer lock --set {set_path.name}`; rerun it to accept moved tags. Do not edit.\n"
    )
    body = yaml.safe_dump(
        {
            "lock_version": LOCK_VERSION,
            "set": set_path.name,
            "set_digest": lock.set_digest,
            "images": [image.record() for image in lock.images],
        },
        sort_keys=True,
        default_flow_style=False,
    )
    check_lock_output(set_path)
    try:
        write_file(lock.path, (header + body).encode())
    except OSError as exc:
        raise UsageError(f"cannot write the lock file {lock.path}: {exc.strerror or exc}") from None
    return lock


LOCK_HEADER = b"# composer lock file for "


def check_lock_output(set_path: Path) -> Path:
    """The lock file `composer lock` writes beside the set: checked before any work; an
    existing file is replaced only if it is a lock this composer wrote."""

    def ours(path: Path) -> bool:
        with open(path, "rb") as handle:
            return handle.read(len(LOCK_HEADER)) == LOCK_HEADER

    try:
        return check_output_file(lock_path(set_path), "lock file", ours=ours)
    except Invalid as problem:
        raise UsageError(str(problem)) from None


def read_lock(set_path: Path, *, check_set: bool = True) -> LockFile:
    """The lock of `set_path`; with check_set, a set edited since the lock is an error."""
    set_path = Path(set_path)
    path = lock_path(set_path)
    relock = f"run composer lock --set {set_path}"
    if not os.path.lexists(path):
        raise UsageError(f"no lock file {path}: {relock}")
    try:
        raw = load_structured(read_text(path, "lock file", 1 << 20), str(path), as_json=False)
    except Invalid as problem:
        if "not valid YAML" in str(problem):
            raise UsageError(f"{path}: not a composer lock file (invalid YAML): {relock}") from None
        raise UsageError(f"{problem}: {relock}") from None
    except yaml.YAMLError:
        raise UsageError(f"{path}: not a composer lock file (invalid YAML): {relock}") from None
    lock = _parse(raw, path, set_path, relock)
    if check_set and lock.set_digest != set_digest(set_path):
        raise UsageError(f"{set_path} changed since it was locked: {relock}")
    return lock


def check_current(lock: LockFile, current: Mapping[str, str]) -> None:
    """Fail unless every locked image still has its locked digest (current: role -> digest now)."""
    relock = f"run composer lock --set {lock.set_path}" if lock.set_path else "run composer lock"
    for image in lock.images:
        now = current.get(image.role)
        if now is None:
            raise UsageError(f"{image.ref} ({image.role}) is in the lock but not in the set: {relock}")
        if now != image.digest:
            raise UsageError(
                f"{image.ref} moved since the lock (locked {_short(image.digest)}, now {_short(now)}): "
                f"{relock} to accept it"
            )
    missing = sorted(set(current) - {image.role for image in lock.images})
    if missing:
        raise UsageError(f"the set has a {missing[0]} image that is not in the lock: {relock}")


# -- resolving and checking against the registries ---------------------------------


def lock_images(
    engine: "Engine",
    set_path: Path,
    roles: Sequence[tuple[str, str]],
    registries: "Registries",
    on_line: LineSink = quiet,
) -> LockFile:
    """Resolve each (role, ref) to where it points now and write the lock beside `set_path`.

    A tag is asked of its registry (with the command's credentials; nothing is pulled). An image
    whose repository never held it (built or tagged on this engine only) is locked by image id.
    A registry that refuses or does not answer is an error: never a silent fall back to a local copy.
    """
    _check_not_shipped(Path(set_path))
    images = []
    for role, ref in roles:
        on_line(f"resolving {ref}")
        images.append(_resolve(engine, role, ref, registries, on_line))
    return write_lock(set_path, images)


def check_lock(
    engine: "Engine",
    set_path: Path,
    roles: Sequence[tuple[str, str]],
    registries: "Registries",
    on_line: LineSink = quiet,
) -> dict[str, str]:
    """Fail unless every base image is where the lock of `set_path` pinned it (the registry is
    asked, with credentials); else role -> what to build from (repo@digest, or an image id)."""
    lock = read_lock(set_path)
    relock = f"run composer lock --set {set_path}"
    current = {}
    for role, ref in roles:
        locked = lock.image(role)
        if locked is None:
            current[role] = ""  # check_current names the role missing from the lock
            continue
        if locked.ref != ref:
            raise UsageError(f"{Path(set_path).name}: the lock pins {locked.ref} but the build uses {ref}: {relock}")
        current[role] = _digest_now(engine, locked, registries)
    check_current(lock, current)
    on_line(f"lock {lock.path.name}: every base image is where it was locked")
    return {image.role: pinned_ref(image) for image in lock.images}


def _resolve(engine: "Engine", role: str, ref: str, registries: "Registries", on_line: LineSink) -> LockedImage:
    parsed = ImageRef.parse(ref, f"the {role} image")
    if parsed.digest:
        return LockedImage(role, ref, parsed.digest)
    local = engine.image(ref)
    if local is not None and digest_for(parsed, local.repo_digests) is None:
        on_line(f"{ref}: its repository never held this image (it exists on this engine only): locked by image id")
        return LockedImage(role, ref, local.id, local=True)
    digest = registries.digest(parsed)
    if digest is None:
        raise ImageNotFound(f"cannot lock {ref}: registry {parsed.host} has no {parsed.repository}:{parsed.tag_or_latest}")
    return LockedImage(role, ref, digest)


def _digest_now(engine: "Engine", locked: LockedImage, registries: "Registries") -> str:
    """Where a locked image's ref points now: the engine's image id for a local one, else its
    registry's answer (a tag its registry no longer has points at "nothing")."""
    if locked.local:
        info = engine.image(locked.ref)
        return info.id if info else "nothing"
    parsed = ImageRef.parse(locked.ref)
    if parsed.digest:
        return parsed.digest
    return registries.digest(parsed) or "nothing"


def pinned_ref(image: LockedImage) -> str:
    """What to build from: repo@sha256:... for a registry digest, the image id for a local image."""
    if image.local:
        return image.digest
    return str(ImageRef.parse(image.ref).without_tag().with_digest(image.digest))


def set_digest(set_path: Path) -> str:
    try:
        return "sha256:" + hashlib.sha256(Path(set_path).read_bytes()).hexdigest()
    except OSError as exc:
        raise UsageError(f"{set_path}: cannot read the set file: {exc.strerror or exc}") from None


# -- helpers ----------------------------------------------------------------------


def _parse(raw, path: Path, set_path: Path, relock: str) -> LockFile:
    def bad(why: str) -> UsageError:
        return UsageError(f"{path}: not a composer lock file ({why}): {relock}")

    if not isinstance(raw, dict) or raw.get("lock_version") != LOCK_VERSION:
        raise bad(f"expected lock_version: {LOCK_VERSION}")
    if not isinstance(raw.get("set_digest"), str):
        raise bad("no set_digest")
    entries = raw.get("images")
    if not isinstance(entries, list):
        raise bad("no list of images")
    images = []
    for entry in entries:
        if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in ("role", "ref", "digest")):
            raise bad("an image lacks role, ref or digest")
        images.append(LockedImage(entry["role"], entry["ref"], entry["digest"], bool(entry.get("local", False))))
    return LockFile(path=path, set_digest=raw["set_digest"], images=tuple(images), set_path=set_path)


def _check_role(role: str, set_path: Path) -> None:
    if role in ("full", "min") or (role.startswith("backend:") and len(role) > len("backend:")):
        return
    raise UsageError(f"lock for {set_path}: unknown image role '{role}' (full, min or backend:NAME)")


def _role_key(image: LockedImage) -> tuple[int, str]:
    return (ROLE_ORDER.get(image.role, 2), image.role)


def _check_not_shipped(set_path: Path) -> None:
    """A shipped preset lives inside the installed package: its lock belongs with the user's copy."""
    if set_path.resolve().parent == presets_dir().resolve():
        raise UsageError(
            f"{set_path.stem} is a shipped preset: copy {set_path} into your project and lock the copy"
        )


def _short(digest: str) -> str:
    algorithm, _, hexdigest = digest.partition(":")
    return f"{algorithm}:{hexdigest[:12]}" if hexdigest else digest[:19]


# -- a spec's base images (composer.resolve.resolve.Targets) ------------------------------------


def lock_spec(engine: "Engine", spec, targets, on_line: LineSink = quiet, *,
              registries: "Registries | None" = None) -> LockFile:
    """Resolve a set's base images to digests into the lock beside it (see lock_images)."""
    if spec.source is None:
        raise UsageError("composer lock works on backend sets: give --set FILE")
    return lock_images(engine, spec.source, targets.roles(), registries or _registries(engine), on_line)


def check_locked(specs) -> None:
    """--locked's one rule, before any work: every spec comes from a set whose lock file is
    beside it and still matches the set (a missing or stale lock is bad input)."""
    for spec in specs:
        if spec.source is None:
            raise UsageError("--locked needs a backend set (--set FILE) with a lock file beside it")
        read_lock(spec.source)


def verify_lock(engine: "Engine", spec, targets, on_line: LineSink = quiet, *,
                registries: "Registries | None" = None):
    """Refuse to build if a base image tag has moved since the lock was written; else the targets
    pinned to the locked digests (so a stale local copy is never used). `spec` passed
    check_locked."""
    pinned = check_lock(engine, spec.source, targets.roles(), registries or _registries(engine), on_line)
    return targets.pinned(pinned)


def _registries(engine: "Engine") -> "Registries":
    """The engine's own trust and docker login, when the caller gave no credentials."""
    return Registries(engine)
