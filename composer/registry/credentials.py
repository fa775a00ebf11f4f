"""Registry credentials: a user and password given by file or variable (--registry-auth).

Apart from the API client so the push and the engine take the same credentials without the
HTTP machinery. A credential never appears in a message: RegistryAuth's repr hides the password.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from composer.core.errors import Invalid, UsageError
from composer.core.files import read_text


@dataclass(frozen=True)
class RegistryAuth:
    """A registry user and password; repr and str never show the password."""

    username: str
    password: str = field(repr=False)

    def __repr__(self) -> str:
        return f"RegistryAuth(username={self.username!r}, password='***')"

    __str__ = __repr__

    def as_config(self) -> dict[str, str]:
        """The auth_config the engine (Docker SDK) takes."""
        return {"username": self.username, "password": self.password}

    def redact(self, text: str) -> str:
        """`text` with the password (and its base64 forms) replaced by ***."""
        for secret in _secret_forms(self):
            text = text.replace(secret, "***")
        return text


def _secret_forms(auth: RegistryAuth) -> list[str]:
    pair = f"{auth.username}:{auth.password}".encode()
    forms = [auth.password, base64.b64encode(pair).decode(), base64.urlsafe_b64encode(pair).decode()]
    return [form for form in forms if form]


def load_auth(spec: str | None, *, environ: Mapping[str, str] | None = None,
              flag: str = "--registry-auth") -> RegistryAuth | None:
    """Credentials from `file:PATH` or `env:NAME`; None (no spec) leaves the engine's own.

    A file holds `user:password` or JSON {"username": .., "password": ..}; a variable holds
    `user:password`. Messages name the flag (`flag`) and the file or variable, never what it holds.
    """
    if spec is None:
        return None
    try:
        return _load_auth(spec, os.environ if environ is None else environ)
    except UsageError as error:
        raise UsageError(f"{flag}: {error.message}") from None


def _load_auth(spec: str, env: Mapping[str, str]) -> RegistryAuth:
    scheme, _, where = spec.partition(":")
    if scheme == "file" and where:
        path = Path(where).expanduser()
        try:  # a small regular file of text: /dev/zero, a FIFO or a huge file is refused, not read
            text = read_text(path, "credentials file", 64 << 10)
        except Invalid as problem:
            message = str(problem)
            if message.startswith("no such"):
                message = message.replace("no such credentials file", "cannot read the credentials file") + \
                    ": no such file"
            raise UsageError(message) from None
        auth = _parse_credentials(text)
        if auth is None:
            raise UsageError(
                f"the credentials file {path} holds neither user:password nor JSON "
                '{"username": .., "password": ..}'
            )
        return auth
    if scheme == "env" and where:
        if where not in env:
            raise UsageError(f"the credentials variable {where} is not set")
        auth = _parse_pair(env[where])
        if auth is None:
            raise UsageError(f"the credentials variable {where} does not hold user:password")
        return auth
    # The spec is not echoed: a mistyped one may be the password itself.
    raise UsageError("registry credentials are given as file:PATH or env:NAME (holding user:password)")


def _parse_credentials(text: str) -> RegistryAuth | None:
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except (json.JSONDecodeError, RecursionError):
            return None
        if not isinstance(data, dict):
            return None
        username, password = data.get("username"), data.get("password")
        if not username and not password and isinstance(data.get("auth"), str):
            try:  # docker config's "auth": base64 of user:password
                return _parse_pair(base64.b64decode(data["auth"]).decode("utf-8"))
            except (ValueError, UnicodeDecodeError):
                return None
        if isinstance(username, str) and isinstance(password, str) and username and password:
            return RegistryAuth(username, password)
        return None
    return _parse_pair(stripped)


def _parse_pair(text: str) -> RegistryAuth | None:
    username, sep, password = text.strip("\r\n").partition(":")
    if not sep or not username or not password or "\n" in text.strip("\r\n"):
        return None
    return RegistryAuth(username, password)
