"""Pushing composed images to registries and mirroring NGC releases between registries.

Pushes and pulls go through the engine (composer.engine, the only module that talks to Docker);
what a registry already holds is read from its HTTP API v2 with `requests`, so a mirror that
re-runs moves only what is missing without pulling anything. Credentials never appear in a
message: they are carried in RegistryAuth, whose repr hides the password, and every engine
message is scrubbed of them before it is shown.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import ipaddress
import json
import os
import re
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence
from urllib.parse import urlsplit

import requests
import requests.adapters

from composer.engine import Engine, ImageInfo
from composer.errors import ImageNotFound, Invalid, RegistryError, UsageError
from composer.files import read_text
from composer.progress import LineSink, quiet
from composer.refs import DOCKER_HUB, ImageRef, check_registry_prefix, digest_for, parse_tag_ref
MANIFEST_TYPES = (
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
)
INDEX_TYPES = (
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.index.v1+json",
)
# An index's children are checked one by one: stop after this many (multi-arch images have few).
MAX_INDEX_CHILDREN = 16



# -- credentials --------------------------------------------------------------


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


def load_auth(spec: str | None, *, environ: Mapping[str, str] | None = None) -> RegistryAuth | None:
    """Credentials from `file:PATH` or `env:NAME`; None (no spec) leaves the engine's own.

    A file holds `user:password` or JSON {"username": .., "password": ..}; a variable holds
    `user:password`. Messages name the file or variable, never what it holds.
    """
    if spec is None:
        return None
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
        env = os.environ if environ is None else environ
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


# -- trust: which CA, and where plain http is allowed -----------------------------------------

SYSTEM_CERTS_D = Path("/etc/docker/certs.d")
LOOPBACK = ipaddress.ip_network("127.0.0.0/8")


def certs_dirs(environ: Mapping[str, str] | None = None) -> tuple[Path, ...]:
    """Where engines keep a CA per registry: the system engine's folder, then a rootless
    engine's ($XDG_CONFIG_HOME/docker/certs.d) and the user's docker config folder."""
    env = os.environ if environ is None else environ
    home = Path(env.get("HOME") or Path.home())
    config = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else home / ".config"
    return (SYSTEM_CERTS_D, config / "docker" / "certs.d", home / ".docker" / "certs.d")


def ca_files(host: str, *, explicit: Path | None = None, dirs: Sequence[Path] | None = None) -> tuple[Path, ...]:
    """The CA files to trust for `host`, besides the system's: every *.crt in <certs.d>/<host>/
    (as the engine reads them), then the explicit one (--registry-ca)."""
    found: list[Path] = []
    for folder in certs_dirs() if dirs is None else dirs:
        try:
            found += sorted(path for path in (Path(folder) / host).glob("*.crt") if path.is_file())
        except OSError:
            continue
    if explicit is not None:
        found.append(Path(explicit))
    return tuple(found)


def check_ca_file(path: Path, what: str = "--registry-ca") -> Path:
    """A readable PEM file holding at least one certificate."""
    try:
        text = Path(path).read_text(encoding="ascii", errors="replace")
    except OSError as exc:
        raise UsageError(f"{what} {path}: cannot read it ({exc.strerror or exc})") from None
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise UsageError(f"{what} {path}: not a PEM certificate file (expected -----BEGIN CERTIFICATE-----)")
    return Path(path)


@dataclass(frozen=True)
class InsecureRegistries:
    """The registries the engine calls insecure, the only ones spoken to over plain http:
    its configured ones (`docker info`: RegistryConfig), 127.0.0.0/8 and localhost."""

    names: frozenset[str] = frozenset()
    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()

    @classmethod
    def from_engine_config(cls, config: Mapping) -> "InsecureRegistries":
        indexes = config.get("IndexConfigs") or {}
        names = frozenset(
            name for name, index in indexes.items() if isinstance(index, Mapping) and index.get("Secure") is False
        )
        networks = []
        for cidr in config.get("InsecureRegistryCIDRs") or ():
            try:
                networks.append(ipaddress.ip_network(cidr, strict=False))
            except (TypeError, ValueError):
                continue
        return cls(names, tuple(networks))

    def allows_http(self, host: str) -> bool:
        if host in self.names:
            return True
        hostname = _hostname(host)
        if hostname == "localhost":
            return True
        try:
            address = ipaddress.ip_address(hostname)
        except ValueError:
            return False  # a name: only the engine's IndexConfigs can make it insecure
        return address in LOOPBACK or any(address in network for network in self.networks)


def _hostname(host: str) -> str:
    """host[:port] without the port (IPv6 in brackets unwrapped)."""
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def may_send_credentials(realm: str, registry_host: str) -> bool:
    """Credentials go to a token realm only over https, or to the registry's own host."""
    url = urlsplit(realm)
    if url.scheme == "https":
        return True
    return url.scheme == "http" and url.netloc.lower() == registry_host.lower()


class _TrustAdapter(requests.adapters.HTTPAdapter):
    """Verifies TLS against the system's CAs plus the registry's own (as the engine does)."""

    def __init__(self, cafiles: Sequence[Path]):
        self._context = ssl.create_default_context()
        for cafile in cafiles:
            try:
                self._context.load_verify_locations(cafile=str(cafile))
            except (OSError, ssl.SSLError):
                raise UsageError(f"{cafile}: not a readable PEM CA certificate") from None
        super().__init__()

    def init_poolmanager(self, *args, **kwargs):
        kwargs["ssl_context"] = self._context
        return super().init_poolmanager(*args, **kwargs)


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
    calls the registry insecure (`insecure`), and then only after https did not answer. Basic
    auth, plus the bearer-token dance registries such as nvcr.io and Docker Hub use.
    """

    host: str
    auth: RegistryAuth | None = None
    insecure: bool = False
    ca_files: tuple[Path, ...] = ()
    timeout: float = 10.0
    session: requests.Session = field(default_factory=requests.Session)
    _token: str | None = field(default=None, repr=False)
    _base: str | None = field(default=None, repr=False)
    _withheld: str | None = field(default=None, repr=False)  # a realm that got no credentials

    def __post_init__(self) -> None:
        if self.ca_files and hasattr(self.session, "mount"):
            self.session.mount("https://", _TrustAdapter(self.ca_files))

    @property
    def api_host(self) -> str:
        return "registry-1.docker.io" if self.host == DOCKER_HUB else self.host

    def base_url(self) -> str:
        """https://HOST; for an insecure registry whose https does not answer, http://HOST."""
        if self._base is None:
            self._base = f"https://{self.api_host}"
            if self.insecure:
                self._base = self._probe()
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
        except (requests.ConnectionError, requests.Timeout):
            return http
        except requests.RequestException:
            return http

    def _get(self, path: str, name: str, what: str) -> requests.Response:
        headers = {"Accept": ", ".join(MANIFEST_TYPES)}
        try:
            url = self.base_url() + path
            response = self._send(url, headers)
            if response.status_code == 401:
                challenge = response.headers.get("WWW-Authenticate", "")
                if challenge.lower().startswith("bearer") and self._fetch_token(challenge, name):
                    response = self._send(url, headers)
        except requests.exceptions.SSLError:
            raise RegistryError(self._untrusted()) from None
        except (requests.ConnectionError, requests.Timeout):
            raise RegistryError(f"cannot read {what}: registry {self.host} does not answer") from None
        except requests.RequestException as exc:
            raise RegistryError(f"cannot read {what}: {type(exc).__name__} from registry {self.host}") from None
        return response

    def _send(self, url: str, headers: dict[str, str]) -> requests.Response:
        if self._token:
            return self.session.get(
                url, headers={**headers, "Authorization": f"Bearer {self._token}"}, timeout=self.timeout
            )
        basic = (self.auth.username, self.auth.password) if self.auth else None
        return self.session.get(url, headers=headers, auth=basic, timeout=self.timeout)

    def _fetch_token(self, challenge: str, name: str) -> bool:
        params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        realm = params.pop("realm", None)
        if not realm or urlsplit(realm).scheme not in ("http", "https"):
            return False
        params.setdefault("scope", f"repository:{name}:pull")
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
    """The registry clients of one command: the engine's trust (certs.d CAs, insecure
    registries) and the command's credentials (explicit, else the engine's docker login)."""

    engine: Engine
    auth: RegistryAuth | None = None
    ca_file: Path | None = None
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
            )
        return self._clients[host]

    def engine_auth(self, host: str) -> RegistryAuth | None:
        found = self.engine.credentials_for(host)
        return RegistryAuth(found["username"], found["password"]) if found else None

    def digest(self, ref: ImageRef) -> str | None:
        """Where `ref` points in its registry now (None: no such tag); refusals are errors."""
        return self.client(ref.host).digest(ref)


# -- mirror -------------------------------------------------------------------


@dataclass(frozen=True)
class MirroredImage:
    source: str
    dest: str
    digest: str
    moved: bool  # False: the destination already held this image


@dataclass(frozen=True)
class MirrorResult:
    release: str
    images: tuple[MirroredImage, ...]

    @property
    def moved(self) -> tuple[MirroredImage, ...]:
        return tuple(image for image in self.images if image.moved)

    def to_dict(self) -> dict:
        return {
            "release": self.release,
            "images": [
                {"source": i.source, "dest": i.dest, "digest": i.digest, "moved": i.moved} for i in self.images
            ],
        }


def mirror_release(
    engine: Engine,
    release,
    *,
    source: str,
    dest: str,
    auth: RegistryAuth | None = None,
    source_auth: RegistryAuth | None = None,
    registry_ca: Path | None = None,
    on_line: LineSink = quiet,
    retries: int = 3,
    backoff: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
) -> MirrorResult:
    """Copy a release's full and min images from `source` to `dest`; only what is missing moves.

    `release` is a catalog Release or its name (YY.MM). A source image already on the engine is
    used as is (stand-ins are local only); otherwise it is pulled. What `dest` holds is read from
    its HTTP API (trusting the CA the engine trusts for it, or `registry_ca`), so a re-run
    pushes nothing when the destination already has the same images; after a push the
    registry is asked again that the tag names the pushed digest.
    """
    name = getattr(release, "name", release)
    source, dest = check_registry_prefix(source, "--registry"), check_registry_prefix(dest, "--to")
    if source == dest:
        raise UsageError(f"cannot mirror {source} onto itself: give a different destination")
    dest_host = ImageRef.parse(f"{dest}/tritonserver").host
    api = Registries(engine, auth, registry_ca).client(dest_host)
    scrub = _scrubber(auth, source_auth, api.auth)
    say = (lambda line: on_line(scrub(line)))
    images: list[MirroredImage] = []
    for suffix in ("-py3", "-py3-min"):
        src_ref = f"{source}/tritonserver:{name}{suffix}"
        dst_ref = f"{dest}/tritonserver:{name}{suffix}"
        info = engine.image(src_ref)
        if info is None:
            say(f"pulling {src_ref}")
            info = engine.pull(src_ref, auth=source_auth.as_config() if source_auth else None, on_line=say)
        else:
            say(f"{src_ref} is on the engine ({info.id})")
        target = ImageRef.parse(dst_ref)
        held = api.holds_image(target.repository, target.tag_or_latest, info)
        if held is not None:
            say(f"{dst_ref} already holds it ({held.digest}): nothing to move")
            images.append(MirroredImage(src_ref, dst_ref, held.digest, moved=False))
            continue
        say(f"pushing {src_ref} to {dst_ref}")
        digest = push_image(
            engine, info.id, dst_ref, auth=auth, retries=retries, backoff=backoff, on_line=say, sleep=sleep
        )
        now = api.digest(target)
        if now != digest:
            raise RegistryError(f"pushed {dst_ref} ({digest}) but the registry names {now or 'nothing'} by it")
        images.append(MirroredImage(src_ref, dst_ref, digest, moved=True))
    return MirrorResult(str(name), tuple(images))


def _scrubber(*auths: RegistryAuth | None) -> Callable[[str], str]:
    present = [a for a in auths if a is not None]

    def scrub(text: str) -> str:
        for a in present:
            text = a.redact(text)
        return text

    return scrub
