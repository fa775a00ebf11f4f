"""Everything a command checks before its work: the one preflight.

The input's own rules ran when the options were read (composer.config.rules.validate); here the
secrets are loaded, once, into memory (registry credentials, the signing key and its passphrase,
a public key to verify with), and the outside things the run will need are proven: the engine
answers, the push target takes these credentials for a push, the output folders can be written.
A refusal is one line within seconds: exit 2 for the input, 1 where a service said no; nothing
has been pulled, built, tagged or written by then.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from composer.config.types import CompositionSpec
from composer.core.errors import ComposerError, Invalid, RegistryError, UsageError
from composer.core.files import printable
from composer.core.progress import LineSink, quiet
from composer.core.refs import ImageRef
from composer.engine.buildkit import BuildKit
from composer.engine.interface import Engine
from composer.publish.sign import SigningKey, load_public_key
from composer.registry.client import Registries
from composer.registry.credentials import RegistryAuth, load_auth
from composer.registry.retries import retry_policy


@dataclass(frozen=True)
class Secrets:
    """The run's secrets, loaded once and held in memory only (never an argument of another process)."""

    registry_auth: RegistryAuth | None = None
    source_auth: RegistryAuth | None = None
    sign_keys: Mapping[str, SigningKey] = field(default_factory=dict)  # spec name -> its key

    def sign_key(self, spec: CompositionSpec) -> SigningKey | None:
        return self.sign_keys.get(spec.name)


def load_secrets(registry_auth: str | None = None, specs: Sequence[CompositionSpec] = (), *,
                 source_auth: str | None = None) -> Secrets:
    """Every secret the run names, read now: a missing variable, an unreadable file, a key that is
    not one or a wrong passphrase is refused here, before any work."""
    keys = {spec.name: SigningKey.load(spec.result.sign_key, spec.result.sign_passphrase)
            for spec in specs if spec.result.sign_key}
    return Secrets(load_auth(registry_auth), load_auth(source_auth, flag="--source-auth") if source_auth else None,
                   keys)


def public_key(path: Path | None, flag: str = "--key"):
    """The public key to verify with (ECDSA P-256, cosign's kind), read before any registry is asked."""
    if path is None:
        return None
    return load_public_key(Path(path), flag)


def connect(engine: Callable[[], Engine]) -> Engine:
    """The engine, asked once that it answers (a refusal names it, exit 1)."""
    connected = engine()
    connected.identity()  # one request: an engine that does not answer fails here, not mid-build
    return connected


@dataclass(frozen=True)
class CacheBuilders:
    """`composer cache --builder ADDR ... [--builder-tls DIR]`, checked before any work."""

    builders: tuple[str, ...] = ()
    tls: Path | None = None

    @classmethod
    def given(cls, builders: Sequence[str], tls: Path | None) -> "CacheBuilders":
        from composer.config.values import TlsFolder, check_builder

        for builder in builders:
            if builder == "engine":
                raise UsageError("--builder engine: the engine's own cache is what composer cache shows without "
                                 "--builder; give buildkit, buildkit://unix:///PATH, buildkit://tcp://HOST:PORT or "
                                 "buildkit://docker-container://NAME")
            problem = check_builder(builder)
            if problem:
                raise UsageError(f"--builder {problem}")
        try:
            folder = TlsFolder().read(str(tls), Path.cwd()) if tls is not None else None
        except Invalid as problem:
            raise UsageError(f"--builder-tls: {problem}") from None
        return cls(tuple(dict.fromkeys(builders)), folder)

    def reach(self, engine: Engine) -> list[BuildKit]:
        """Each builder, once it answered."""
        reached = [BuildKit(builder, engine, tls=self.tls) for builder in self.builders]
        for builder in reached:
            builder.check()
        return reached


def check_builders(engine: Engine, specs: Sequence[CompositionSpec]) -> None:
    """Each --builder other than the engine answers (and buildctl is here), before any work."""
    for builder, tls in dict.fromkeys((b, spec.result.builder_tls) for spec in specs for b in spec.result.builders
                                      if b != "engine"):
        BuildKit(builder, engine, tls=tls).check()


def check_push_targets(engine: Engine, specs: Sequence[CompositionSpec], secrets: Secrets,
                       on_line: LineSink = quiet) -> None:
    """Each --push target takes these credentials for a push: an upload session is opened and
    cancelled (a registry's first step of any push), so a wrong password or a read-only token
    fails now, not after the build and the smoke test."""
    seen: set[tuple[str, str]] = set()
    for spec in specs:
        push = spec.result.push
        if not push:
            continue
        target = ImageRef.parse(push)
        if (target.host, target.repository) in seen:
            continue
        seen.add((target.host, target.repository))
        registries = Registries(engine, secrets.registry_auth, spec.images.registry_ca,
                                retry_policy(spec.images, on_line))
        on_line(f"checking that {target.host}/{target.repository} takes a push with these credentials")
        try:
            registries.client(target.host).check_push(target.repository)
        except RegistryError as refused:
            raise type(refused)(f"--push {printable(push)}: {refused.message}; nothing was built or pulled") \
                from None


def check_writable_folder(folder: Path, flag: str) -> Path:
    """An output folder (new or existing) in which files can be made, checked before any work."""
    from composer.core.files import check_output_file

    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{flag} {printable(str(folder))}: exists and is not a folder")
    try:
        check_output_file(folder / "probe.file", flag, makes_folders=True)
    except Invalid as problem:
        raise UsageError(str(problem).replace("/probe.file", "")) from None
    return folder


__all__ = ["Secrets", "load_secrets", "public_key", "connect", "check_push_targets", "check_writable_folder",
           "ComposerError"]
