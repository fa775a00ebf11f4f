"""Lock files: the base images of a backend set, pinned by digest, next to the set.

A tag such as tritonserver:24.09-py3 can be pushed again; a lock makes a rebuild take the very
same images, and a moved tag becomes a clear error instead of a silently different image. The
lock also records the set file's own digest, so an edited set is noticed before its stale lock
is trusted.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import yaml

from composer.errors import ImageNotFound, UsageError
from composer.progress import LineSink, quiet

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
    """The digest to lock for a composer.engine.ImageInfo.

    The registry digest of info.ref's own repository (a digest is only valid in the repository
    it came from); else the image id, for images that exist only locally.
    """
    wanted = _repository(info.ref)
    for repo_digest in info.repo_digests:
        repo, _, digest = repo_digest.partition("@")
        if digest and _repository(repo) == wanted:
            return digest
    return info.id


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
    try:
        lock.path.write_text(header + body)
    except OSError as exc:
        raise UsageError(f"cannot write the lock file {lock.path}: {exc.strerror or exc}") from None
    return lock


def read_lock(set_path: Path, *, check_set: bool = True) -> LockFile:
    """The lock of `set_path`; with check_set, a set edited since the lock is an error."""
    set_path = Path(set_path)
    path = lock_path(set_path)
    relock = f"run composer lock --set {set_path}"
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"no lock file {path}: {relock}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read the lock file {path}: {exc}") from None
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


def pinned_ref(image: LockedImage) -> str:
    """What to build from: repo@sha256:... for a registry digest, the image id for a local image."""
    if image.local:
        return image.digest
    return f"{_repository(image.ref, normalize=False)}@{image.digest}"


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


def _repository(ref: str, normalize: bool = True) -> str:
    """The repository of an image reference, without tag or digest (docker.io spelled out when normalizing)."""
    name = ref.split("@", 1)[0]
    if name.rfind(":") > name.rfind("/"):
        name = name.rsplit(":", 1)[0]
    if not normalize:
        return name
    first, _, rest = name.partition("/")
    if not rest or ("." not in first and ":" not in first and first != "localhost"):
        name = f"docker.io/{name}"  # Docker Hub: "ubuntu" is docker.io/library/ubuntu
    if name.startswith("docker.io/") and name.count("/") == 1:
        name = name.replace("docker.io/", "docker.io/library/", 1)
    return name


def _check_role(role: str, set_path: Path) -> None:
    if role in ("full", "min") or (role.startswith("backend:") and len(role) > len("backend:")):
        return
    raise UsageError(f"lock for {set_path}: unknown image role '{role}' (full, min or backend:NAME)")


def _role_key(image: LockedImage) -> tuple[int, str]:
    return (ROLE_ORDER.get(image.role, 2), image.role)


def _check_not_shipped(set_path: Path) -> None:
    """A shipped preset lives inside the installed package: its lock belongs with the user's copy."""
    from composer.sets import presets_dir

    if set_path.resolve().parent == presets_dir().resolve():
        raise UsageError(
            f"{set_path.stem} is a shipped preset: copy {set_path} into your project and lock the copy"
        )


def _short(digest: str) -> str:
    algorithm, _, hexdigest = digest.partition(":")
    return f"{algorithm}:{hexdigest[:12]}" if hexdigest else digest[:19]


# -- resolving against the engine and registries ------------------------------------------


def current_image(engine, ref: str, on_line: LineSink = quiet):
    """What `ref` names now: pulled afresh when its registry answers, else the local image."""
    try:
        return engine.pull(ref, on_line=on_line)
    except ImageNotFound:
        info = engine.image(ref)
        if info is None:
            raise
        return info


def lock_spec(engine, spec, targets, on_line: LineSink = quiet) -> LockFile:
    """Resolve a set's base images (composer.pipeline.Targets) to digests into the lock beside it."""
    if spec.source is None:
        raise UsageError("composer lock works on backend sets: give --set FILE")
    images = []
    for role, ref in targets.roles():
        on_line(f"resolving {ref}")
        images.append(locked_image(role, current_image(engine, ref, on_line)))
    return write_lock(spec.source, images)


def verify_lock(engine, spec, targets, on_line: LineSink = quiet):
    """Refuse to build if a base image tag has moved since the lock was written; else the targets
    pinned to the locked digests (so a stale local copy is never used)."""
    if spec.source is None:
        raise UsageError("--locked needs a backend set (--set FILE) with a lock file beside it")
    lock = read_lock(spec.source)
    current = {}
    for role, ref in targets.roles():
        locked = lock.image(role)
        if locked is not None and locked.ref != ref:
            raise UsageError(
                f"{spec.source.name}: the lock pins {locked.ref} but the build uses {ref}: "
                f"run composer lock --set {spec.source}"
            )
        current[role] = _digest_now(engine, ref, locked)
    check_current(lock, current)
    on_line(f"lock {lock.path.name}: every base image is where it was locked")
    return targets.pinned({image.role: pinned_ref(image) for image in lock.images})


def _digest_now(engine, ref: str, locked) -> str:
    """Where `ref` points now: its registry's answer (no pull), else the local image."""
    if locked is not None and locked.local:
        info = engine.image(ref)
        return info.id if info else "nothing"
    digest = engine.registry_digest(ref)
    if digest is not None:
        return digest
    info = engine.image(ref)
    if info is None:
        raise ImageNotFound(f"{ref}: neither its registry nor the engine has it")
    return digest_of(info)
