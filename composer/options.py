"""Command-line values -> BuildOptions, or -> the overrides a backend set takes."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Sequence

from composer.errors import UsageError
from composer.packages import read_requirements
from composer.plan import DEFAULT_REGISTRY, BuildOptions, PackageOptions


def pairs(values: Iterable[str], option: str) -> dict[str, str]:
    """KEY=VALUE arguments of a repeatable option."""
    result = {}
    for value in values:
        key, _, val = value.partition("=")
        if not key or not val:
            raise UsageError(f"{option} takes KEY=VALUE, got '{value}'")
        result[key] = val
    return result


def image_refs(image: Iterable[str]) -> dict[str, str | None]:
    """--image full=REF / min=REF."""
    images = pairs(image, "--image")
    unknown = sorted(set(images) - {"full", "min"})
    if unknown:
        raise UsageError(f"--image takes full=REF or min=REF, not {unknown[0]}=...")
    return {"full_image": images.get("full"), "min_image": images.get("min")}


def requirement_specs(pip: Sequence[str], requirements: Sequence[Path]) -> tuple[str, ...]:
    specs = list(pip)
    for path in requirements:
        specs += read_requirements(path)
    return tuple(specs)


def package_options(
    pip=(), requirements=(), index_url=None, extra_index_url=(), trusted_host=(), wheelhouse=None, ca_cert=None
) -> PackageOptions:
    specs = requirement_specs(pip, requirements)
    if wheelhouse is not None and not wheelhouse.is_dir():
        raise UsageError(f"--wheelhouse {wheelhouse}: no such folder")
    if ca_cert is not None and not ca_cert.is_file():
        raise UsageError(f"--ca-cert {ca_cert}: no such file")
    if (wheelhouse or index_url or extra_index_url or ca_cert) and not specs:
        raise UsageError("package sources were given but no package: add --pip SPEC or --requirements FILE")
    return PackageOptions(
        specs=specs,
        index_url=index_url,
        extra_index_urls=tuple(extra_index_url),
        trusted_hosts=tuple(trusted_host),
        wheelhouse=wheelhouse.resolve() if wheelhouse else None,
        ca_cert=ca_cert.resolve() if ca_cert else None,
    )


def build_options(
    backend=(), repoagent=(), cache=(), version=None, registry=None, image=(), custom_backend=(),
    with_headers=False, tag=None, packages: PackageOptions = PackageOptions(), backend_image=(),
) -> BuildOptions:
    return BuildOptions(
        backends=tuple(backend),
        repoagents=tuple(repoagent),
        caches=tuple(cache),
        version=version,
        registry=registry or DEFAULT_REGISTRY,
        custom_backends=tuple((name, Path(path)) for name, path in sorted(pairs(custom_backend, "--custom-backend").items())),
        backend_images=tuple(sorted(pairs(backend_image, "--backend-image").items())),
        with_headers=with_headers,
        tag=tag,
        packages=packages,
        **image_refs(image),
    )


def set_overrides(
    *, backend=(), repoagent=(), cache=(), version=None, registry=None, image=(), custom_backend=(),
    backend_image=(), with_headers=False, tag=None, pip=(), requirements=(), index_url=None,
    extra_index_url=(), trusted_host=(), wheelhouse=None, ca_cert=None, model_repository=None, push=None,
    no_smoke_test=False,
) -> dict[str, Any]:
    """What the command line says, for composer.sets.override: None or () where it says nothing."""
    return dict(
        version=version,
        registry=registry,
        tag=tag,
        backends=tuple(backend),
        repoagents=tuple(repoagent),
        caches=tuple(cache),
        custom_backends=tuple((k, Path(v)) for k, v in sorted(pairs(custom_backend, "--custom-backend").items())),
        backend_images=tuple(sorted(pairs(backend_image, "--backend-image").items())),
        with_headers=with_headers or None,
        specs=requirement_specs(pip, requirements),
        index_url=index_url,
        extra_index_urls=tuple(extra_index_url),
        trusted_hosts=tuple(trusted_host),
        wheelhouse=wheelhouse.resolve() if wheelhouse else None,
        ca_cert=ca_cert.resolve() if ca_cert else None,
        model_repository=model_repository,
        push=push,
        smoke_test=False if no_smoke_test else None,
        **image_refs(image),
    )
