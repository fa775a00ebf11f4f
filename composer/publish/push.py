"""Pushing composed images to registries through the engine (composer.engine, the only
package that talks to Docker), with retries for transient failures and the local tag put back
when a push fails. Every engine message is scrubbed of credentials before it is shown.
(Mirroring a release between registries is composer.sources.mirror.)
"""

from __future__ import annotations

import enum
import re
import time
from typing import Callable

from composer.engine.interface import Engine, ImageInfo
from composer.core.errors import ImageNotFound, RegistryError, UsageError
from composer.core.progress import LineSink, quiet
from composer.core.refs import ImageRef, parse_tag_ref
from composer.registry.credentials import RegistryAuth


# -- failures -----------------------------------------------------------------


class Failure(enum.Enum):
    """How a push failed, which decides whether it is worth another try."""

    AUTH = "auth"  # never retried
    NO_ANSWER = "no-answer"  # retried; the registry may be starting
    TRANSIENT = "transient"  # retried: resets, 5xx, timeouts
    OTHER = "other"  # not retried: a bad name, a missing image, ...


_AUTH = re.compile(
    r"unauthorized|authentication required|no basic auth credentials|access to the resource is denied"
    r"|denied:|forbidden|\b40[13]\b",
    re.IGNORECASE,
)
_NO_ANSWER = re.compile(
    r"connection refused|no route to host|network is unreachable|i/o timeout|dial tcp", re.IGNORECASE
)
_TRANSIENT = re.compile(
    r"connection reset|broken pipe|\bEOF\b|timed? ?out|deadline exceeded|too many requests|\b429\b"
    r"|internal server error|bad gateway|service unavailable|gateway time-?out|status:? 5\d\d\b"
    r"|\b5\d\d [A-Z]",
    re.IGNORECASE,
)


def classify(message: str) -> Failure:
    """Sort an engine push/pull failure message into a Failure."""
    if _AUTH.search(message):
        return Failure.AUTH
    if _NO_ANSWER.search(message):
        return Failure.NO_ANSWER
    if _TRANSIENT.search(message):
        return Failure.TRANSIENT
    return Failure.OTHER


# -- push ---------------------------------------------------------------------


def push_image(
    engine: Engine,
    image_id_or_tag: str,
    ref: str,
    *,
    auth: RegistryAuth | None = None,
    retries: int = 3,
    backoff: float = 1.0,
    on_line: LineSink = quiet,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Push a local image as `ref` and return the digest (sha256:...) the registry holds.

    The image is tagged `ref` only if `ref` does not name it yet; a failed push puts the local
    tag back where it was (or removes it), so nothing moves unless the push succeeded. A
    successful push keeps `ref` (it now names what the registry holds). Transient failures are
    tried again up to `retries` more times, waiting `backoff`, 2x, 4x ... seconds; refused
    credentials never are. auth=None uses the engine's own (docker login) credentials.
    """
    if "@" in ref:
        raise UsageError(f"cannot push to {ref}: a push target is a tag, not a digest")
    parse_tag_ref(ref, "push target")
    source = engine.image(image_id_or_tag)
    if source is None:
        raise ImageNotFound(f"cannot push {ref}: image {image_id_or_tag} is not on the engine")
    previous = engine.image(ref)
    retag = previous is None or previous.id != source.id
    if retag:
        engine.tag(source.id, ref)
    try:
        return _push_with_retries(engine, ref, auth, retries, backoff, on_line, sleep)
    except BaseException:
        if retag:
            _restore_tag(engine, ref, source, previous, on_line)
        raise


def _push_with_retries(
    engine: Engine,
    ref: str,
    auth: RegistryAuth | None,
    retries: int,
    backoff: float,
    on_line: LineSink,
    sleep: Callable[[float], None],
) -> str:
    host = ImageRef.parse(ref).host
    scrub = auth.redact if auth else (lambda text: text)
    lines = (lambda line: on_line(scrub(line)))
    attempts = max(0, retries) + 1
    for attempt in range(attempts):
        try:
            digest = engine.push(ref, auth=auth.as_config() if auth else None, on_line=lines)
            on_line(f"pushed {ref} ({digest})")
            return digest
        except RegistryError as exc:
            detail = _one_line(scrub(exc.message))
            kind = classify(detail)
            if kind is Failure.AUTH:
                hint = ""
                if auth is None and "no basic auth credentials" in detail:
                    hint = f" (none were given and the engine holds none for {host})"
                raise RegistryError(f"cannot push {ref}: the registry refused the credentials{hint}") from None
            if kind is Failure.OTHER:
                raise RegistryError(detail) from None
            if attempt + 1 == attempts:
                if kind is Failure.NO_ANSWER:
                    raise RegistryError(f"cannot push {ref}: registry {host} does not answer") from None
                reason = detail.split(": ", 1)[-1]
                raise RegistryError(
                    f"cannot push {ref}: registry {host} kept failing after {attempts} tries: {reason}"
                ) from None
            delay = backoff * (2**attempt)
            on_line(f"push of {ref} failed ({detail}); try {attempt + 2} of {attempts} in {delay:g}s")
            sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover


def _restore_tag(
    engine: Engine, ref: str, source: ImageInfo, previous: ImageInfo | None, on_line: LineSink
) -> None:
    """Undo the temporary tag: point `ref` back where it was, or remove it."""
    if previous is not None:
        engine.tag(previous.id, ref)
        return
    now = engine.image(source.id)
    if now is None:
        return
    wanted = parse_tag_ref(ref, "push target")
    other_names = [t for t in now.tags if parse_tag_ref(t) != wanted] + [
        d for d in now.repo_digests if not ImageRef.parse(d).same_repository(wanted)
    ]
    if other_names:
        engine.remove_image(str(wanted))  # only the tag goes: the image keeps its other names
    else:
        # Removing the only name would delete the image the caller gave by id.
        on_line(f"kept the tag {ref}: it is the only name of image {source.id}")


def _one_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else "unknown error"
