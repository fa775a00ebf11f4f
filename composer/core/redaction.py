"""The one redaction of secrets, for every output path: errors, JSON, logs, renders and records.

A URL's userinfo (user:password, or a token in the user's place) and its query (`?token=`) are
replaced by ***, in well-formed and malformed URLs alike (a space or an @ in the password); so is
the `user:password@` of a reference written without a scheme (`user:pw@host:5000/x:1`, which no
image reference is: an @ in one starts its digest), and so are whole secrets the caller knows
(index passwords). The scan is linear in the text's length: a 100 KB argument is redacted in
milliseconds.
"""

from __future__ import annotations

import re
from typing import Iterable

_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")
_MAX_SCHEME = 32
_WORDS = re.compile(r"([^\s'\"<>]+)")  # a word of free text: where userinfo may hide
_DIGEST_AT = re.compile(r"@(?:sha256|sha384|sha512):", re.IGNORECASE)  # name:tag@sha256:...: no userinfo


def redact_url(url: str) -> str:
    """One URL (maybe malformed) with its userinfo and query replaced by ***."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority_end = min((i for i in (rest.find(c) for c in "/?#") if i != -1), default=len(rest))
    at = rest.rfind("@", 0, authority_end)
    if at != -1:
        rest = "***@" + rest[at + 1:]
    query = rest.find("?")
    if query != -1:
        fragment = rest.find("#", query)
        rest = rest[:query] + "?***" + (rest[fragment:] if fragment != -1 else "")
    return f"{scheme}://{rest}"


def strip_url(url: str) -> str:
    """A URL as it may be recorded: no userinfo and no query at all (where it is, not how to get in)."""
    redacted = redact_url(url)
    scheme, _, rest = redacted.partition("://")
    rest = rest[4:] if rest.startswith("***@") else rest
    return f"{scheme}://{rest.split('?', 1)[0]}"


def redact_userinfo(word: str) -> str:
    """One word without a scheme (`user:pw@host/x:1`) with its `user:password` replaced by ***.

    The userinfo ends at the last @ that does not start a digest, and is one only when a : comes
    before it (an e-mail address keeps its name); a package URL (`pkg:deb/x@1.0`, as SBOMs hold)
    names a version after its @, not a host, and is left alone.
    """
    if "@" not in word or "://" in word or word.startswith("pkg:"):
        return word
    at = max((i for i in _at_signs(word) if not _DIGEST_AT.match(word, i)), default=-1)
    if at <= 0 or ":" not in word[:at]:
        return word
    opening = len(word) - len(word.lstrip("([{"))  # "(user:pw@h/x and ...": the parenthesis stays
    return word[:opening] + "***" + word[at:]


def _at_signs(word: str) -> Iterable[int]:
    at = word.find("@")
    while at != -1:
        yield at
        at = word.find("@", at + 1)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with every URL's credentials and query, every reference's user:password@, and every
    one of `secrets`, replaced by ***."""
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, "***")
    if "@" in text:
        text = _WORDS.sub(lambda word: redact_userinfo(word.group()), text)
    if "://" not in text:
        return text
    out, pos = [], 0
    while (mark := text.find("://", pos)) != -1:
        start = mark
        while start > pos and mark - start < _MAX_SCHEME and text[start - 1] in _SCHEME_CHARS:
            start -= 1
        end = mark + 3
        while end < len(text) and not text[end].isspace() and text[end] not in "'\"<>":
            end += 1
        out += [text[pos:start], redact_url(text[start:end])]
        pos = end
    out.append(text[pos:])
    return "".join(out)
