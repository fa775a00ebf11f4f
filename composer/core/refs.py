"""Image references: the one parser and printer of `[host[:port]/]path[:tag][@digest]`.

Every module that reads or writes an image reference goes through ImageRef, so a reference
means the same thing everywhere: `ubuntu` is docker.io/library/ubuntu, a first component with
a dot, a colon or `localhost` is a registry host, and anything outside Docker's reference
grammar is refused up front with a one-line UsageError that names the input.

It also holds the one definition of an image's digest: the digest recorded for the repository
the reference names (a digest is only valid in the repository it came from).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Iterable

from composer.core.errors import UsageError

DOCKER_HUB = "docker.io"
_HUB_ALIASES = ("index.docker.io", "registry-1.docker.io")
MAX_NAME = 255  # host/path, as Docker limits it

# Docker's reference grammar (distribution/reference), component by component.
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_PATH = re.compile(rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*")
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = re.compile(rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:.]+\])(?::[0-9]+)?")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")  # ASCII, as Docker's grammar
_DIGEST = re.compile(r"sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128}|sha384:[a-f0-9]{96}")
_IMAGE_ID = re.compile(r"sha256:[a-f0-9]{64}")

SHAPE = "[HOST[:PORT]/]PATH[:TAG][@sha256:HEX], lowercase PATH, e.g. nvcr.io/nvidia/tritonserver:24.09-py3"
PREFIX_SHAPE = "HOST[:PORT][/PATH] with a lowercase PATH, e.g. harbor.example/nvidia or localhost/standin"
TAG_SHAPE = "letters, digits, '_', '.' or '-', at most 128, not starting with '.' or '-'"


@dataclass(frozen=True)
class ImageRef:
    """One image reference, normalised: host is never empty (docker.io for Docker Hub) and a
    Docker Hub image without a namespace lives in library/ (`ubuntu` -> docker.io/library/ubuntu)."""

    host: str
    repository: str  # the path inside the registry, e.g. nvidia/tritonserver
    tag: str | None = None
    digest: str | None = None

    @classmethod
    def parse(cls, text: str, what: str = "image reference") -> "ImageRef":
        """Parse `text`; a UsageError names `what` and the input and shows the valid shape."""
        if not isinstance(text, str):
            raise UsageError(f"{what}: expected an image reference {SHAPE}")
        reason = _invalid(text)
        if reason:
            raise UsageError(f"{what} {_show(text)} is not a valid image reference ({reason}): expected {SHAPE}")
        rest, _, digest = text.partition("@")
        tag = None
        slash, colon = rest.rfind("/"), rest.rfind(":")
        if colon > slash:
            rest, tag = rest[:colon], rest[colon + 1 :]
        host, repository = _split_host(rest)
        return cls(host, repository, tag, digest or None)

    # -- names ----------------------------------------------------------------

    @property
    def name(self) -> str:
        """host/repository, fully spelled out (docker.io/library/ubuntu)."""
        return f"{self.host}/{self.repository}"

    @property
    def familiar_name(self) -> str:
        """The repository as the engine names it in RepoTags/RepoDigests (ubuntu, someone/x)."""
        if self.host == DOCKER_HUB:
            return self.repository.removeprefix("library/") if self.repository.count("/") == 1 else self.repository
        return self.name

    @property
    def tag_or_latest(self) -> str:
        return self.tag or "latest"

    def same_repository(self, other: "ImageRef") -> bool:
        return (self.host, self.repository) == (other.host, other.repository)

    # -- variants -------------------------------------------------------------

    def with_tag(self, tag: str) -> "ImageRef":
        return replace(self, tag=check_tag(tag))

    def with_digest(self, digest: str) -> "ImageRef":
        """This reference pinned to `digest` (the tag, if any, stays for the reader)."""
        if not _DIGEST.fullmatch(digest):
            raise UsageError(f"digest {_show(digest)} is not a valid digest: expected sha256:<64 hex digits>")
        return replace(self, digest=digest)

    def without_tag(self) -> "ImageRef":
        return replace(self, tag=None)

    def without_digest(self) -> "ImageRef":
        return replace(self, digest=None)

    # -- printing -------------------------------------------------------------

    def __str__(self) -> str:
        """The familiar form, as the engine prints it: ubuntu:22.04, nvcr.io/nvidia/x@sha256:..."""
        return self._format(self.familiar_name)

    def canonical(self) -> str:
        """The fully spelled-out form: docker.io/library/ubuntu:22.04."""
        return self._format(self.name)

    def _format(self, name: str) -> str:
        text = name
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text


# -- validators -----------------------------------------------------------------


def parse_tag_ref(text: str, what: str = "--tag") -> ImageRef:
    """A reference that names a tag (for --tag and --push): no digest; `latest` when none."""
    ref = ImageRef.parse(text, what)
    if ref.digest:
        raise UsageError(f"{what} {_show(text)} names a digest: give a tag to write, e.g. {ref.familiar_name}:1.0")
    return ref if ref.tag else ref.with_tag("latest")


def check_tag(text: str, what: str = "tag") -> str:
    """A bare tag such as 24.09-py3 (the part after the colon)."""
    if not isinstance(text, str) or not _TAG.fullmatch(text):
        raise UsageError(f"{what} {_show(text)} is not a valid tag: expected {TAG_SHAPE}")
    return text


def prefix_problem(text: str) -> str | None:
    """The one rule of a registry prefix images are named under (harbor.example/nvidia,
    localhost/standin, 127.0.0.1:5000), for every flag and set key that takes one."""
    prefix = text.removesuffix("/") if isinstance(text, str) else text
    if not isinstance(prefix, str) or not prefix or "@" in prefix or _invalid(f"{prefix}/x") is not None:
        return f"not a valid registry prefix: expected {PREFIX_SHAPE}"
    return None


def check_registry_prefix(text: str, what: str = "--registry") -> str:
    """The prefix without a trailing slash; a UsageError naming `what` if it is not one."""
    problem = prefix_problem(text)
    if problem:
        raise UsageError(f"{what} {_show(text)}: {problem}")
    return text.removesuffix("/")


def reference_problem(text: str) -> str | None:
    """Why `text` is not an image reference, or None when it is one."""
    return _invalid(text)


def is_image_id(text: str) -> bool:
    """An engine image id (sha256:<64 hex>), which is no reference."""
    return bool(_IMAGE_ID.fullmatch(text))


# -- digests --------------------------------------------------------------------


def digest_for(ref: ImageRef | str, repo_digests: Iterable[str]) -> str | None:
    """The digest of `ref` as recorded for its own repository in RepoDigests, else None.

    A digest is only valid in the repository it came from: the digest of `a/b` is the one
    recorded for `a/b`, never one recorded for another name of the same image.
    """
    if isinstance(ref, str):
        if is_image_id(ref) or _invalid(ref):
            return None
        ref = ImageRef.parse(ref)
    if ref.digest:
        return ref.digest
    for entry in repo_digests:
        if _invalid(entry) or "@" not in entry:
            continue
        recorded = ImageRef.parse(entry)
        if recorded.same_repository(ref):
            return recorded.digest
    return None


@dataclass(frozen=True)
class BuildSource:
    """What a build should name a base image by, and a note when it cannot be pinned by digest."""

    ref: str  # repo@digest, the image id, or the reference as given
    note: str | None = None


def build_source(ref: str, image_id: str, repo_digests: Iterable[str]) -> BuildSource:
    """Pin `ref` by its own repository's digest; an image known only under another repository is
    built by id (a digest from another repository is one the engine cannot resolve)."""
    if is_image_id(ref):
        return BuildSource(ref)
    parsed = ImageRef.parse(ref)
    digest = digest_for(parsed, repo_digests)
    if digest is not None:
        return BuildSource(str(parsed.without_tag().with_digest(digest)))
    others = sorted({entry.split("@", 1)[0] for entry in repo_digests if "@" in entry})
    if others:
        return BuildSource(
            image_id,
            f"{ref} has no digest of its own repository (the engine knows it by digest only as "
            f"{', '.join(others)}): building from image id {image_id[:19]}",
        )
    return BuildSource(ref)  # never pulled or pushed: the local name is all there is


# -- helpers --------------------------------------------------------------------


def _split_host(name: str) -> tuple[str, str]:
    first, sep, rest = name.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost" or first != first.lower()):
        host, repository = first, rest
    else:
        host, repository = DOCKER_HUB, name
    if host in _HUB_ALIASES:
        host = DOCKER_HUB
    if host == DOCKER_HUB and "/" not in repository:
        repository = f"library/{repository}"
    return host, repository


def _invalid(text: str) -> str | None:
    """Why `text` is not a reference, or None when it is one."""
    if not text:
        return "it is empty"
    if not text.isascii():
        return "it holds characters outside ASCII (Docker's grammar is ASCII)"
    if any(ch.isspace() or not ch.isprintable() for ch in text):
        return "it holds whitespace or control characters"
    if text.count("@") > 1:
        return "more than one '@'"
    rest, at, digest = text.partition("@")
    if at and not _DIGEST.fullmatch(digest):
        return "the digest is not sha256:<64 lowercase hex digits>"
    slash, colon = rest.rfind("/"), rest.rfind(":")
    if colon > slash:
        tag = rest[colon + 1 :]
        rest = rest[:colon]
        if not _TAG.fullmatch(tag):
            return f"the tag '{tag}' is not {TAG_SHAPE}"
    if not rest:
        return "no repository"
    first, sep, path = rest.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost" or first != first.lower()):
        if not _HOST.fullmatch(first):
            return f"'{first}' is not a registry host[:port]"
    else:
        path = rest
    if not _PATH.fullmatch(path):
        return f"the path '{path}' is not lowercase letters and digits separated by '.', '_', '-' or '/'"
    if len(rest) > MAX_NAME:
        return f"the name is longer than {MAX_NAME} characters"
    if _IMAGE_ID.fullmatch(text) or re.fullmatch(r"[a-f0-9]{64}", path):
        return "it is an image id, not a name"
    return None


def _show(text) -> str:
    """The input quoted on one line (control characters escaped), shortened when very long."""
    shown = repr(text)
    return shown if len(shown) <= 120 else shown[:100] + "...'"
