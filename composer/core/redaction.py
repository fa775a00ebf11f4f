"""The one redaction of secrets, for every output path: errors, JSON, logs, renders and records.

A URL's userinfo (user:password, or a token in the user's place) and its query (`?token=`) are
replaced by ***, in well-formed and malformed URLs alike (a space or an @ in the password); so
are whole secrets the caller knows (index passwords). The scan is linear in the text's length:
a 100 KB argument is redacted in milliseconds.
"""

from __future__ import annotations

from typing import Iterable

_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")
_MAX_SCHEME = 32


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


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with every URL's credentials and query, and every one of `secrets`, replaced by ***."""
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, "***")
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
