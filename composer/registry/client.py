"""A registry's HTTP API v2 (manifests, digests, blobs, referrers, mounts, uploads), and the
registry clients of one command (Registries).

Apart from composer.publish.push (push, mirror) so a lock or a --locked build can ask a registry
without the push machinery. Retries, credentials, trust and a blob's checked stream are the
modules beside this one.
"""

from __future__ import annotations

import hashlib
import json
import queue
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator
from urllib.parse import quote, urlsplit

import requests

from composer.core.docker_config import HostDockerConfig
from composer.engine.interface import Engine, ImageInfo
from composer.core.errors import RegistryError, RegistryUnavailable
from composer.core.refs import DOCKER_HUB, ImageRef, digest_for
from composer.registry.blobs import VerifiedBlob
from composer.registry.credentials import RegistryAuth
from composer.registry.retries import RETRY_STATUSES, RetryPolicy
from composer.registry.trust import SYSTEM_CERTS_D, InsecureRegistries, TrustAdapter, ca_files, may_send_credentials

MANIFEST_TYPES = (
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
)
OCI_ARTIFACT = "application/vnd.oci.artifact.manifest.v1+json"  # accepted when reading, never written
INDEX_TYPES = (
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.index.v1+json",
)
# An index's children are checked one by one: stop after this many (multi-arch images have few).
MAX_INDEX_CHILDREN = 16
# Seconds a registry has to accept a connection, and then to answer each read: one that takes a
# connection and never answers fails the command in that time, not a minute later.
REGISTRY_TIMEOUT = 5.0
# Seconds a blob stream may stay silent between chunks, and a registry may take to commit an
# uploaded blob (it may hash gigabytes again), before the copy is called stuck.
STREAM_TIMEOUT = 120.0
CHUNK = 1 << 20  # bytes read and sent at a time: a layer is never held whole in memory
MAX_MANIFEST = 4 << 20  # OCI's recommended limit for a manifest
BLOB_SETTLE = (0.2, 0.5, 1.0)  # pauses before a manifest refused for an unknown blob is sent again


# -- registry HTTP API --------------------------------------------------------


@dataclass(frozen=True)
class RemoteManifest:
    """What a registry holds under a tag: the manifest digest and what it points at."""

    digest: str
    media_type: str
    config_digest: str | None  # single-image manifests
    children: tuple[str, ...] = ()  # manifest digests of an index / manifest list


@dataclass
class RegistryApi:
    """A small client of a registry's HTTP API v2 (reads manifests only).

    https, verified against the system's CAs plus `ca_files`; plain http only when the engine
    calls the registry insecure (`insecure`), and then only after https refused the connection or
    spoke no TLS (one that takes the connection and says nothing within `timeout` is an error). Basic
    auth, plus the bearer-token dance registries such as nvcr.io and Docker Hub use.
    """

    host: str
    auth: RegistryAuth | None = None
    insecure: bool = False
    ca_files: tuple[Path, ...] = ()
    timeout: float = field(default_factory=lambda: REGISTRY_TIMEOUT)
    session: requests.Session = field(default_factory=requests.Session)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    _token: str | None = field(default=None, repr=False)
    _base: str | None = field(default=None, repr=False)
    _withheld: str | None = field(default=None, repr=False)  # a realm that got no credentials

    def __post_init__(self) -> None:
        if self.ca_files and hasattr(self.session, "mount"):
            self.session.mount("https://", TrustAdapter(self.ca_files))

    @property
    def api_host(self) -> str:
        return "registry-1.docker.io" if self.host == DOCKER_HUB else self.host

    def refuses_connections(self) -> bool:
        """One quick look, no retry: does nothing listen at the registry's address (https, and http
        where the engine allows it)? A host that is a name of the engine's images only (stand-ins,
        localhost/...) is told apart at once from a registry that is down for a moment."""
        schemes = ("https", "http") if self.insecure else ("https",)
        for scheme in schemes:
            try:
                self.session.get(f"{scheme}://{self.api_host}/v2/", timeout=self.timeout)
                return False
            except (requests.Timeout, requests.exceptions.SSLError):
                return False
            except requests.ConnectionError:
                continue
            except requests.RequestException:
                return False
        return True

    def base_url(self) -> str:
        """https://HOST; for an insecure registry whose https refuses or speaks no TLS, http://HOST."""
        if self._base is None:  # decided whole before it is kept: threads of one push share the client
            self._base = self._probe() if self.insecure else f"https://{self.api_host}"
        return self._base

    def digest(self, ref: ImageRef) -> str | None:
        """The digest `ref` (a tag) points at in its registry now; None when it has no such tag."""
        found = self.manifest(ref.repository, ref.digest or ref.tag_or_latest)
        return found.digest if found else None

    def manifest(self, name: str, reference: str) -> RemoteManifest | None:
        """The manifest `name:reference` (tag or digest), or None when the registry has none."""
        sep = "@" if reference.startswith("sha256:") else ":"
        what = f"{self.host}/{name}{sep}{reference}"
        response = self._get(f"/v2/{name}/manifests/{reference}", name, what)
        if response.status_code == 404:
            return None
        if response.status_code in (401, 403):
            raise RegistryError(f"cannot read {what}: {self._refusal()}")
        if response.status_code >= 400:
            raise RegistryError(f"cannot read {what}: the registry answered HTTP {response.status_code}")
        body = response.content
        digest = response.headers.get("Docker-Content-Digest") or "sha256:" + hashlib.sha256(body).hexdigest()
        try:
            data = json.loads(body)
        except ValueError:
            data = {}
        media_type = data.get("mediaType") or response.headers.get("Content-Type", "").split(";")[0]
        if media_type in INDEX_TYPES or "manifests" in data:
            children = tuple(m["digest"] for m in data.get("manifests", []) if "digest" in m)
            return RemoteManifest(digest, media_type, None, children)
        config = (data.get("config") or {}).get("digest")
        return RemoteManifest(digest, media_type, config)

    def holds_image(self, name: str, tag: str, image: ImageInfo) -> RemoteManifest | None:
        """The manifest under `name:tag` if it is exactly the local `image`, else None."""
        remote = self.manifest(name, tag)
        if remote is None:
            return None
        if digest_for(ImageRef(self.host, name), image.repo_digests) == remote.digest:
            return remote
        if remote.config_digest == image.id:
            return remote
        for child in remote.children[:MAX_INDEX_CHILDREN]:
            sub = self.manifest(name, child)
            if sub is not None and sub.config_digest == image.id:
                return remote
        return None

    def _refusal(self) -> str:
        if self._withheld:
            return (f"the registry wants a token from {self._withheld}, plain http on another host, "
                    "so no credentials were sent there")
        if self.auth is None:
            return f"the registry asks for credentials and none were given (--registry-auth, or docker login {self.host})"
        return "the registry refused the credentials"

    def _untrusted(self) -> str:
        return (f"cannot verify the TLS certificate of registry {self.host}: trust its CA in "
                f"{SYSTEM_CERTS_D}/{self.host}/ca.crt (as the engine does) or give --registry-ca FILE")

    def _probe(self) -> str:
        """https if the registry answers it, else http (only called for insecure registries)."""
        https, http = f"https://{self.api_host}", f"http://{self.api_host}"
        try:
            self.session.get(https + "/v2/", timeout=self.timeout)
            return https
        except requests.exceptions.SSLError as exc:
            if "CERTIFICATE_VERIFY_FAILED" in str(exc) or "certificate verify failed" in str(exc):
                raise RegistryError(self._untrusted()) from None
            return http  # no TLS there at all
        except requests.Timeout:
            raise  # it took the connection and said nothing: plain http would wait as long again
        except requests.ConnectionError:
            return http
        except requests.RequestException:
            return http

    def _get(self, path: str, name: str, what: str) -> requests.Response:
        return self._request("GET", path, name, what, {"Accept": ", ".join(MANIFEST_TYPES)})

    def _request(self, method: str, path: str, name: str, what: str, headers: dict[str, str], *,
                 data=None, scope: str = "pull", stream: bool = False) -> requests.Response:
        """One request (a path on the registry, or a URL it gave), with its credentials; tried
        again (self.retry) when the registry does not answer or answers 5xx/429.

        `stream`: a blob's bytes (a streamed answer, or a streamed body): a long read timeout, and
        no second try here, since a stream can be sent only once (the caller retries the blob)."""
        if stream or not isinstance(data, (bytes, type(None))) or self.retry.tries <= 1:
            return self._request_once(method, path, name, what, headers, data=data, scope=scope, stream=stream)

        def once() -> requests.Response:
            response = self._request_once(method, path, name, what, headers, data=data, scope=scope)
            if response.status_code in RETRY_STATUSES:
                raise RegistryUnavailable(f"{what}: the registry answered HTTP {response.status_code}")
            return response

        return self.retry.run(self.host, once)

    def _request_once(self, method: str, path: str, name: str, what: str, headers: dict[str, str], *,
                      data=None, scope: str = "pull", stream: bool = False) -> requests.Response:
        try:
            url = path if "://" in path else self.base_url() + path
            response = self._send(url, headers, method, data, stream)
            if response.status_code == 401 and not isinstance(data, VerifiedBlob):
                challenge = response.headers.get("WWW-Authenticate", "")
                if challenge.lower().startswith("bearer") and self._fetch_token(challenge, name, scope):
                    if stream:
                        response.close()
                    response = self._send(url, headers, method, data, stream)
        except requests.exceptions.SSLError:
            raise RegistryError(self._untrusted()) from None
        except requests.Timeout:
            raise RegistryUnavailable(f"cannot read {what}: registry {self.host} did not answer in "
                                      f"{self.timeout:g} s") from None
        except requests.ConnectionError:
            raise RegistryUnavailable(f"cannot read {what}: registry {self.host} does not answer") from None
        except requests.exceptions.ChunkedEncodingError:
            raise RegistryUnavailable(f"cannot read {what}: registry {self.host} dropped the connection") from None
        except requests.RequestException as exc:
            raise RegistryError(f"cannot read {what}: {type(exc).__name__} from registry {self.host}") from None
        return response

    def _send(self, url: str, headers: dict[str, str], method: str = "GET", data=None,
              stream: bool = False) -> requests.Response:
        if self._token:
            headers = {**headers, "Authorization": f"Bearer {self._token}"}
        basic = (self.auth.username, self.auth.password) if self.auth and not self._token else None
        timeout = (self.timeout, max(self.timeout, STREAM_TIMEOUT)) if stream else self.timeout
        if method == "GET" and stream:
            return self.session.get(url, headers=headers, auth=basic, timeout=timeout, stream=True)
        if method == "GET":
            return self.session.get(url, headers=headers, auth=basic, timeout=self.timeout)
        return self.session.request(method, url, headers=headers, auth=basic, data=data, timeout=timeout,
                                    allow_redirects=False)

    # -- whole documents, blobs, and writes (SBOMs, inspect) -------------------------

    def document(self, name: str, reference: str) -> tuple[str, str, dict, int] | None:
        """The manifest `name:reference` as (digest, media type, JSON, size), or None: the raw
        manifest (read and checked once, in raw_manifest), parsed."""
        raw = self.raw_manifest(name, reference)
        if raw is None:
            return None
        digest, media_type, body = raw
        return digest, media_type, json.loads(body), len(body)

    def blob(self, name: str, digest: str, limit: int = 64 << 20) -> bytes:
        """A blob (a config, an SBOM) of at most `limit` bytes, checked against its digest."""
        what = f"{self.host}/{name}@{digest}"
        response = self._request("GET", f"/v2/{name}/blobs/{digest}", name, what, {})
        self._check(response, what)
        body = response.content[: limit + 1]
        if len(body) > limit or "sha256:" + hashlib.sha256(body).hexdigest() != digest:
            raise RegistryError(f"cannot read {what}: the registry's answer is not that blob")
        return body

    def referrers(self, name: str, digest: str) -> list[dict] | None:
        """The referrers of `digest` (OCI 1.1 API), or None where the registry has no such API."""
        what = f"{self.host}/{name}@{digest}"
        response = self._request("GET", f"/v2/{name}/referrers/{digest}", name, what,
                                 {"Accept": "application/vnd.oci.image.index.v1+json"})
        if response.status_code != 200 or "json" not in response.headers.get("Content-Type", ""):
            if response.status_code in (401, 403):
                self._check(response, what)
            return None
        try:
            return list(response.json().get("manifests") or [])
        except (ValueError, AttributeError):
            return None

    def _upload_url(self, name: str, digest: str, what: str) -> str:
        """Start an upload session for blob `digest` of `name`; the URL its one PUT goes to."""
        started = self._request("POST", f"/v2/{name}/blobs/uploads/", name, what, {}, scope="pull,push")
        self._check(started, what, 202, "write")
        location = started.headers.get("Location", "")
        url = location if "://" in location else self.base_url() + location
        return url + ("&" if "?" in url else "?") + f"digest={quote(digest)}"

    def upload_blob(self, name: str, data: bytes) -> str:
        """Upload `data` as a blob of repository `name` (one monolithic upload); its digest."""
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        what = f"{self.host}/{name}@{digest}"
        url = self._upload_url(name, digest, what)
        done = self._request("PUT", url, name, what, {"Content-Type": "application/octet-stream"}, data=data,
                             scope="pull,push")
        self._check(done, what, 201, "write")
        return digest

    def put_manifest(self, name: str, reference: str, body: bytes, media_type: str) -> str:
        """Store a manifest under `reference` (a tag or its digest); the digest the registry gives.

        A manifest whose blobs were just uploaded may be refused as naming an unknown blob while
        another push commits the same blob: distribution's storage rewrites the repository's link
        to it in place (truncated, then written), and a check reading it meanwhile finds no blob
        (two CI jobs pushing one image at once met it). Asked again, a few times, a short pause
        apart; a blob really missing stays refused."""
        what = f"{self.host}/{name}:{reference}"
        for pause in (*BLOB_SETTLE, None):
            done = self._request("PUT", f"/v2/{name}/manifests/{reference}", name, what, {"Content-Type": media_type},
                                 data=body, scope="pull,push")
            if pause is None or done.status_code != 400 or not _names_unknown_blob(done):
                break
            time.sleep(pause)
        self._check(done, what, 201, "write")
        return done.headers.get("Docker-Content-Digest") or "sha256:" + hashlib.sha256(body).hexdigest()

    # -- copying between registries: raw manifests, blobs streamed and verified, mounts ------

    def raw_manifest(self, name: str, reference: str) -> tuple[str, str, bytes] | None:
        """The manifest `name:reference` as (digest, media type, exact bytes), or None.

        The bytes are what a copy puts elsewhere, so the digest stays the same; one asked for by
        digest must hash to it."""
        sep = "@" if ":" in reference else ":"  # a tag holds no colon
        what = f"{self.host}/{name}{sep}{reference}"
        response = self._get(f"/v2/{name}/manifests/{reference}", name, what)
        if response.status_code == 404:
            return None
        self._check(response, what)
        body = response.content
        if len(body) > MAX_MANIFEST:
            raise RegistryError(f"cannot read {what}: the manifest is larger than {MAX_MANIFEST >> 20} MB")
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        if reference.startswith("sha256:") and reference != digest:
            raise RegistryError(f"cannot read {what}: the registry's answer hashes to {digest}, not to that digest")
        try:
            data = json.loads(body)
        except ValueError:
            raise RegistryError(f"cannot read {what}: the registry's manifest is not JSON") from None
        if not isinstance(data, dict):
            raise RegistryError(f"cannot read {what}: the registry's manifest is not a JSON object")
        media_type = data.get("mediaType") or response.headers.get("Content-Type", "").split(";")[0]
        return digest, media_type, body

    def has_manifest(self, name: str, digest: str) -> bool:
        """Whether the registry holds the manifest `name@digest` (HEAD)."""
        what = f"{self.host}/{name}@{digest}"
        response = self._request("HEAD", f"/v2/{name}/manifests/{digest}", name, what,
                                 {"Accept": ", ".join(MANIFEST_TYPES + (OCI_ARTIFACT,))})
        if response.status_code == 404:
            return False
        self._check(response, what)
        return True

    def blob_size(self, name: str, digest: str) -> int | None:
        """The size of the blob `name@digest` if the registry holds it whole (HEAD), else None."""
        what = f"{self.host}/{name}@{digest}"
        response = self._request("HEAD", f"/v2/{name}/blobs/{digest}", name, what, {})
        if response.status_code == 404:
            return None
        if response.status_code in (301, 302, 303, 307, 308):  # held in a storage behind a redirect
            return int(response.headers.get("Content-Length") or 0)
        self._check(response, what)
        return int(response.headers.get("Content-Length") or 0)

    def mount_blob(self, name: str, digest: str, source: str) -> bool:
        """Ask the registry to link blob `digest` of its repository `source` into `name` (a
        cross-repository mount: no byte moves); False when it will not (then nothing changed)."""
        what = f"{self.host}/{name}@{digest}"
        path = f"/v2/{name}/blobs/uploads/?mount={quote(digest)}&from={quote(source, safe='/')}"
        response = self._request("POST", path, name, what, {}, scope="pull,push")
        if response.status_code == 201:
            return True
        self._check(response, what, 202, "write")
        self._cancel(response.headers.get("Location", ""), name, what)  # it opened an upload instead
        return False

    def open_blob(self, name: str, digest: str) -> requests.Response:
        """A streaming answer of the blob `name@digest` (read it with iter_content, then close it)."""
        what = f"{self.host}/{name}@{digest}"
        response = self._request("GET", f"/v2/{name}/blobs/{digest}", name, what, {}, stream=True)
        if response.status_code != 200:
            response.close()
            if response.status_code == 404:
                raise RegistryError(f"cannot read {what}: the registry does not hold that blob")
            self._check(response, what)
        return response

    def chunks(self, response: requests.Response, what: str) -> Iterator[bytes]:
        """The bytes of a streamed answer (open_blob) in CHUNK pieces; a connection lost on the
        way is a RegistryError naming this registry and `what`, not the registry being written."""
        try:
            yield from response.iter_content(CHUNK)
        except requests.RequestException as exc:
            raise RegistryUnavailable(f"cannot read {what}: registry {self.host} stopped sending it "
                                      f"({type(exc).__name__})") from None
        finally:
            response.close()

    def upload_stream(self, name: str, digest: str, body: "VerifiedBlob") -> None:
        """Upload the blob `digest` from `body` (its size known, its bytes streamed and checked on the
        way: see VerifiedBlob); the registry also checks the digest before it keeps the blob."""
        what = f"{self.host}/{name}@{digest}"
        url = self._upload_url(name, digest, what)
        try:
            done = self._request("PUT", url, name, what, {"Content-Type": "application/octet-stream"}, data=body,
                                 scope="pull,push", stream=True)
        except BaseException:
            self._cancel(url.split("?", 1)[0] + _session_query(url), name, what)  # the open upload goes too
            raise
        self._check_blob_written(done, what)

    def upload_unknown(self, name: str, write_body) -> tuple[str, int]:
        """Upload a blob whose digest is known only once it is written (a layer recompressed on the
        way): one streamed PATCH, then the PUT that names the digest, which the registry checks.
        `write_body(send)` calls send(bytes) for each piece and returns (digest, size)."""
        what = f"{self.host}/{name} (a blob being written)"
        started = self._request("POST", f"/v2/{name}/blobs/uploads/", name, what, {}, scope="pull,push")
        self._check(started, what, 202, "write")
        location = started.headers.get("Location", "")
        url = location if "://" in location else self.base_url() + location
        result: list[tuple[str, int]] = []
        failure: list[BaseException] = []
        pieces: "queue.Queue[bytes | None]" = queue.Queue(maxsize=8)
        abandoned = threading.Event()  # the PATCH ended early: the writer must stop, not block

        def send(data: bytes) -> None:
            while data and not abandoned.is_set():
                try:
                    pieces.put(data, timeout=1)
                    return
                except queue.Full:
                    continue
            if abandoned.is_set():
                raise RegistryError(f"{what}: the upload ended before the blob was written")

        def produce() -> None:
            try:
                result.append(write_body(send))
            except BaseException as exc:  # noqa: BLE001 (raised again below)
                failure.append(exc)
            finally:
                while not abandoned.is_set():
                    try:
                        pieces.put(None, timeout=1)
                        break
                    except queue.Full:
                        continue

        def body():
            while (piece := pieces.get()) is not None:
                yield piece

        producer = threading.Thread(target=produce, daemon=True, name="upload-writer")
        producer.start()
        try:
            patched = self._request("PATCH", url, name, what, {"Content-Type": "application/octet-stream"},
                                    data=body(), scope="pull,push", stream=True)
        except BaseException:
            abandoned.set()
            producer.join(timeout=10)
            self._cancel(location, name, what)
            if failure and not isinstance(failure[0], RegistryError):
                raise failure[0]
            raise
        producer.join()
        if failure:
            self._cancel(location, name, what)
            raise failure[0]
        self._check(patched, what, 202, "write")
        digest, size = result[0]
        location = patched.headers.get("Location", location)
        url = location if "://" in location else self.base_url() + location
        url += ("&" if "?" in url else "?") + f"digest={quote(digest)}"
        done = self._request("PUT", url, name, f"{self.host}/{name}@{digest}", {"Content-Length": "0"}, data=b"",
                             scope="pull,push")
        self._check_blob_written(done, f"{self.host}/{name}@{digest}")  # its digest: of what was sent
        return digest, size

    def _check_blob_written(self, done: requests.Response, what: str) -> None:
        """A blob upload's last answer: 201, or one line. Both uploads send only bytes checked against
        the digest as they go (a VerifiedBlob holds its last chunk back until they are proven, and
        fails itself when they are not; upload_unknown names the digest of what it sent), so a
        DIGEST_INVALID means the registry hashed something else: bytes lost or altered on the way or
        in the registry, or a body it stopped reading early. Tried again whole, as a dropped
        connection is (docker push retries a layer too), never taken as a refusal of the blob."""
        if done.status_code == 400 and _names_code(done, "DIGEST_INVALID"):
            raise RegistryUnavailable(f"cannot write {what}: the registry answered HTTP 400 (provided digest did "
                                      "not match uploaded content) to bytes checked against that digest on the way")
        self._check(done, what, 201, "write")

    def check_push(self, name: str) -> None:
        """Prove before any work that these credentials may push to repository `name`: open an
        upload session (what a push does first) and cancel it. A refusal is a RegistryError naming
        the registry's answer; a registry that does not answer is RegistryUnavailable."""
        what = f"{self.host}/{name}"
        started = self._request("POST", f"/v2/{name}/blobs/uploads/", name, what, {}, scope="pull,push")
        self._check(started, what, 202, "push to")
        self._cancel(started.headers.get("Location", ""), name, what)

    def _cancel(self, location: str, name: str, what: str) -> None:
        """Best effort: end an upload the registry opened (it would purge it in days otherwise)."""
        if not location:
            return
        try:
            url = location if "://" in location else self.base_url() + location
            self._request("DELETE", url, name, what, {}, scope="pull,push")
        except (RegistryError, requests.RequestException):
            pass

    def _check(self, response: requests.Response, what: str, expected: int = 200, verb: str = "read") -> None:
        if response.status_code in (401, 403):
            raise RegistryError(f"cannot {verb} {what}: {self._refusal()}")
        if response.status_code != expected and response.status_code >= 300:
            detail = ""
            try:
                errors = response.json().get("errors") or []
                detail = ": " + "; ".join(str(e.get("message", e.get("code", ""))) for e in errors[:2])
            except (ValueError, AttributeError):
                pass
            error = RegistryUnavailable if response.status_code in RETRY_STATUSES else RegistryError
            raise error(f"cannot {verb} {what}: the registry answered HTTP {response.status_code}{detail}")

    def _fetch_token(self, challenge: str, name: str, scope: str = "pull") -> bool:
        params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        realm = params.pop("realm", None)
        if not realm or urlsplit(realm).scheme not in ("http", "https"):
            return False
        params.setdefault("scope", f"repository:{name}:{scope}")
        basic = None
        if self.auth is not None:
            if may_send_credentials(realm, self.api_host):
                basic = (self.auth.username, self.auth.password)
            else:
                self._withheld = realm.split("?", 1)[0]
        response = self.session.get(realm, params=params, auth=basic, timeout=self.timeout)
        if response.status_code != 200:
            return False
        try:
            data = response.json()
        except ValueError:
            return False
        self._token = data.get("token") or data.get("access_token")
        return bool(self._token)


@dataclass
class Registries:
    """The registry clients of one command: the trust of `engine` (certs.d CAs, insecure
    registries) and the command's credentials (explicit, else docker login's). `engine` is the
    engine, or composer.core.docker_config.HostDockerConfig where no engine takes part: both say
    registry_config() and credentials_for(host)."""

    engine: Engine | HostDockerConfig
    auth: RegistryAuth | None = None
    ca_file: Path | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)  # --registry-tries, --registry-backoff
    _clients: dict[str, RegistryApi] = field(default_factory=dict, repr=False)
    _insecure: InsecureRegistries | None = field(default=None, repr=False)

    def client(self, host: str) -> RegistryApi:
        if host not in self._clients:
            if self._insecure is None:
                self._insecure = InsecureRegistries.from_engine_config(self.engine.registry_config())
            self._clients[host] = RegistryApi(
                host,
                self.auth or self.engine_auth(host),
                insecure=self._insecure.allows_http(host),
                ca_files=ca_files(host, explicit=self.ca_file),
                retry=self.retry,
            )
        return self._clients[host]

    def engine_auth(self, host: str) -> RegistryAuth | None:
        found = self.engine.credentials_for(host)
        return RegistryAuth(found["username"], found["password"]) if found else None

    def digest(self, ref: ImageRef) -> str | None:
        """Where `ref` points in its registry now (None: no such tag); refusals are errors."""
        return self.client(ref.host).digest(ref)


def _session_query(url: str) -> str:
    """An upload URL's query without the digest the PUT adds (the session's own parameters stay)."""
    query = url.split("?", 1)[1] if "?" in url else ""
    kept = [part for part in query.split("&") if part and not part.startswith("digest=")]
    return "?" + "&".join(kept) if kept else ""


def _names_unknown_blob(response: requests.Response) -> bool:
    """Whether a refusal names a blob the registry does not find (OCI's BLOB_UNKNOWN,
    MANIFEST_BLOB_UNKNOWN; distribution adds DIGEST_INVALID when a link it reads is empty)."""
    return _names_code(response, "BLOB_UNKNOWN", "MANIFEST_BLOB_UNKNOWN")


def _names_code(response: requests.Response, *codes: str) -> bool:
    """Whether an answer's OCI error list holds one of `codes`."""
    try:
        errors = response.json().get("errors") or []
        return any(str(e.get("code", "")) in codes for e in errors)
    except (ValueError, AttributeError):
        return False
