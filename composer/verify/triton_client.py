"""A tiny client for Triton's KServe v2 HTTP/JSON protocol.

Just what the composer needs to prove an image serves: health, metadata, the model index
and JSON inference. No tritonclient dependency, so the composer stays pip-light.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import requests

from composer.core import interrupts
from composer.core.errors import ComposerError
from composer.config.cases import TensorData


class InferenceError(ComposerError):
    """A request to the server failed or was refused; the message is one line."""


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class TritonHTTP:
    """A Triton server reached at `base_url` (e.g. http://127.0.0.1:32768)."""

    def __init__(self, base_url: str, timeout: float = 10.0):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.session = requests.Session()
        # Only ever a local server: never go through a proxy from the environment.
        self.session.trust_env = False

    def _get_ok(self, path: str) -> bool:
        try:
            return self.session.get(self.base_url + path, timeout=self.timeout).status_code == 200
        except requests.RequestException:
            return False

    def live(self) -> bool:
        return self._get_ok("/v2/health/live")

    def ready(self) -> bool:
        return self._get_ok("/v2/health/ready")

    def wait_ready(self, timeout: float, is_alive: Callable[[], bool] | None = None) -> bool:
        """Poll until the server is ready; give up early once `is_alive()` says it died."""
        deadline = time.monotonic() + timeout
        while True:
            if self.ready():
                return True
            if is_alive is not None and not is_alive():
                return False
            if time.monotonic() >= deadline:
                return False
            interrupts.check()
            time.sleep(0.1)  # loopback: asking often costs nothing, and each wait is the user's

    def _json(self, method: str, path: str, body: Any = None) -> Any:
        url = self.base_url + path
        try:
            response = self.session.request(method, url, json=body, timeout=self.timeout)
        except requests.RequestException as exc:
            raise InferenceError(f"{method} {path}: cannot reach the server at {self.base_url}: {type(exc).__name__}") from exc
        try:
            payload = response.json() if response.content else {}
        except ValueError:
            payload = {"error": response.text}
        if response.status_code != 200:
            message = payload.get("error") if isinstance(payload, dict) else None
            raise InferenceError(f"{method} {path}: HTTP {response.status_code}: {_one_line(message or response.text or 'no detail')}")
        return payload

    def server_metadata(self) -> dict:
        return self._json("GET", "/v2")

    def model_index(self) -> list[dict]:
        """Every model the repository holds, with its state (POST /v2/repository/index)."""
        return list(self._json("POST", "/v2/repository/index", {}))

    def model_config(self, name: str) -> dict:
        """The configuration the server runs `name` with (instance_group says on which device)."""
        return dict(self._json("GET", f"/v2/models/{name}/config"))

    def model_ready(self, name: str, version: str = "") -> bool:
        path = f"/v2/models/{name}" + (f"/versions/{version}" if version else "") + "/ready"
        return self._get_ok(path)

    def infer(self, model: str, inputs: Sequence[TensorData]) -> dict[str, TensorData]:
        """Run one inference; the outputs by name."""
        body = {"inputs": [t.to_json() for t in inputs]}
        payload = self._json("POST", f"/v2/models/{model}/infer", body)
        try:
            outputs = [TensorData.from_json(raw) for raw in payload.get("outputs", [])]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InferenceError(f"model {model}: malformed inference response: {_one_line(str(exc))}") from exc
        return {t.name: t for t in outputs}
