"""`composer inspect`: an image's versions and parts without pulling it, and what differs between two.

A remote image is read from its registry (manifest, config, the SBOM artifact next to it) with
the same credentials and trust as `lock` and `mirror` (composer.registry.client.Registries); a local image
from the engine (its configuration, history and the SBOM file it holds). The versions come from
what NGC's images state in their environment (CUDA_VERSION, CUDNN_VERSION, TRT_VERSION, ...),
the labels a composed image adds, and its SBOM.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from composer.engine.interface import Engine
from composer.core.errors import RegistryError, UsageError
from composer.core.units import human_size
from composer.core.refs import ImageRef
from composer.verify.sbom import PROPERTY, SBOM_PATH

PLATFORM = ("linux", "amd64")
# version -> where images state it: environment variables, then labels
SOURCES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("release", ("NVIDIA_TRITON_SERVER_VERSION",), ("org.triton-composer.release",)),
    ("triton server", ("TRITON_SERVER_VERSION",), ("com.nvidia.tritonserver.version",)),
    ("os", (), ("org.triton-composer.os",)),
    ("cuda", ("CUDA_VERSION",), ("com.nvidia.cuda.version",)),
    ("cudnn", ("CUDNN_VERSION",), ("com.nvidia.cudnn.version",)),
    ("tensorrt", ("TRT_VERSION", "TENSORRT_VERSION"), ("com.nvidia.tensorrt.version",)),
    ("nccl", ("NCCL_VERSION",), ("com.nvidia.nccl.version",)),
    ("python", ("PYTHON_VERSION",), ("org.triton-composer.python.version",)),
    ("numpy", (), ("org.triton-composer.numpy.version",)),
)
from composer.publish.artifacts import find_sbom
from composer.publish.blobs import COMPRESSION_OF
from composer.registry.estargz import PREFETCH_BYTES_ANNOTATION, PREFETCH_FILES_ANNOTATION, TOC_DIGEST_ANNOTATION
from composer.publish.sign import read_attestations, read_signatures
PARTS = (("backends", "org.triton-composer.backends"), ("repoagents", "org.triton-composer.repoagents"),
         ("caches", "org.triton-composer.caches"))


@dataclass(frozen=True)
class ImageReport:
    """What `inspect` tells of one image."""

    ref: str
    source: str  # "registry" or "engine"
    digest: str | None
    env: Mapping[str, str]
    labels: Mapping[str, str]
    layers: tuple[int, ...]  # bytes per layer, bottom first (compressed in a registry)
    sbom: Mapping[str, Any] | None = None
    versions: Mapping[str, str | None] = field(default_factory=dict)
    compressions: tuple[str, ...] = ()  # each layer's, in a registry (gzip, zstd, none, estargz)
    prefetched: tuple[tuple[int, int], ...] = ()  # an eStargz layer's (bytes, files) a node fetches first
    signatures: tuple[str, ...] = ()  # the references the signatures beside it were made for (unverified)
    attestations: tuple[str, ...] = ()  # the predicate types of the statements beside it

    @classmethod
    def of(cls, ref, source, digest, env, labels, layers, sbom, **extra) -> "ImageReport":
        if not _is_triton(env, labels):
            raise UsageError(f"{ref} is not a Triton image: its configuration states no TRITON_SERVER_VERSION, "
                             "NVIDIA_TRITON_SERVER_VERSION or com.nvidia.tritonserver.version")
        report = cls(ref, source, digest, dict(env), dict(labels), tuple(layers), sbom)
        return cls(ref, source, digest, report.env, report.labels, report.layers, sbom, report._versions(), **extra)

    def _versions(self) -> dict[str, str | None]:
        found = {}
        for name, envs, labels in SOURCES:
            found[name] = next((self.env[e] for e in envs if self.env.get(e)), None) or \
                next((self.labels[k] for k in labels if self.labels.get(k)), None)
        packages = self.packages()
        found["numpy"] = found["numpy"] or packages.get("pypi:numpy")
        os_property = _property(((self.sbom or {}).get("metadata") or {}).get("component") or {}, "os")
        ubuntu = " ".join(filter(None, (self.labels.get("org.opencontainers.image.ref.name"),
                                        self.labels.get("org.opencontainers.image.version")))) \
            if self.labels.get("org.opencontainers.image.ref.name") == "ubuntu" else None
        found["os"] = found["os"] or os_property or ubuntu  # Ubuntu's base images label themselves
        return found

    def parts(self) -> dict[str, list[str] | None]:
        """Backends, repo agents and caches: from the composer's labels, else the SBOM; None: not stated."""
        result: dict[str, list[str] | None] = {}
        for kind, label in PARTS:
            value = self.labels.get(label)
            if value is None and self.sbom:
                value = ",".join(sorted(c["name"] for c in self.sbom.get("components", [])
                                        if c.get("group") == f"triton.{kind[:-1]}"))
            result[kind] = [v for v in value.split(",") if v] if value is not None else None
        return result

    def composition(self) -> dict[str, str] | None:
        """The composer's record of a composed image (its SBOM's metadata), or None."""
        if not self.sbom:
            return None
        prefix = PROPERTY + ":"
        return {p["name"][len(prefix):]: p["value"] for p in self.sbom.get("metadata", {}).get("properties", [])
                if p.get("name", "").startswith(prefix)}

    def packages(self) -> dict[str, str]:
        """"deb:NAME" / "pypi:NAME" -> version, from the SBOM (empty without one)."""
        found = {}
        for component in (self.sbom or {}).get("components", []):
            purl = component.get("purl", "")
            for kind in ("deb", "pypi"):
                if purl.startswith(f"pkg:{kind}/"):
                    found[f"{kind}:{component['name'].lower() if kind == 'pypi' else component['name']}"] = \
                        component.get("version", "")
        return found

    def to_dict(self) -> dict:
        return {
            "ref": self.ref, "source": self.source, "digest": self.digest, "versions": dict(self.versions),
            **self.parts(), "layers": list(self.layers), "size": sum(self.layers),
            "labels": dict(self.labels), "composition": self.composition(), "sbom": self.sbom,
            "compressions": list(self.compressions), "signatures": list(self.signatures),
            "prefetched": [{"bytes": size, "files": files} for size, files in self.prefetched],
            "attestations": list(self.attestations),
        }

    def table(self) -> str:
        rows = [("image", f"{self.ref} (from the {self.source})"), ("digest", self.digest or "-")]
        rows += [(name, value or "-") for name, value in self.versions.items()]
        rows += [(kind, ", ".join(names) or "none" if names is not None else "not stated")
                 for kind, names in self.parts().items()]
        composition = self.composition()
        if composition:
            rows.append(("composed by", f"triton-composer {composition.get('composer-version', '?')}"))
        packages = self.packages()
        debs = sum(1 for k in packages if k.startswith("deb:"))
        rows.append(("sbom", f"{debs} packages, {len(packages) - debs} python packages" if self.sbom else "none"))
        if self.source == "registry":
            rows.append(("signatures", f"{len(self.signatures)} (for {', '.join(sorted(set(self.signatures)))}; "
                         "composer verify checks them)" if self.signatures else "none"))
            rows.append(("attestations", ", ".join(self.attestations) or "none"))
        compressions = self.compressions if len(self.compressions) == len(self.layers) else ("",) * len(self.layers)
        prefetched = self.prefetched if len(self.prefetched) == len(self.layers) else ((0, 0),) * len(self.layers)
        rows += [(f"layer {i}", human_size(size) + (f" ({kind}{_prefetch_note(first)})" if kind else ""))
                 for i, (size, kind, first) in enumerate(zip(self.layers, compressions, prefetched), 1)]
        rows.append(("size", f"{human_size(sum(self.layers))} in {len(self.layers)} layers"
                     + (" (compressed)" if self.source == "registry" else "")))
        first, files = sum(size for size, _ in self.prefetched), sum(n for _, n in self.prefetched)
        if files:
            rows.append(("prefetched", f"{human_size(first)} of {files} file(s) before the container starts "
                         f"({first / max(1, sum(self.layers)):.2f}x of the compressed size)"))
        width = max(len(label) for label, _ in rows)
        return "\n".join(f"{label.ljust(width)}  {value}" for label, value in rows)


def _prefetch_note(prefetched: tuple[int, int]) -> str:
    size, files = prefetched
    return f", {human_size(size)} of {files} file(s) prefetched" if files else ""


def _layer_kind(layer: Mapping[str, Any]) -> str:
    """A layer's compression, eStargz told by its TOC digest annotation (its media type is gzip's)."""
    if TOC_DIGEST_ANNOTATION in (layer.get("annotations") or {}):
        return "estargz"
    return COMPRESSION_OF.get(layer.get("mediaType"), "?")


def _prefetched(layer: Mapping[str, Any]) -> tuple[int, int]:
    said = layer.get("annotations") or {}
    try:
        return int(said.get(PREFETCH_BYTES_ANNOTATION, 0)), int(said.get(PREFETCH_FILES_ANNOTATION, 0))
    except ValueError:
        return 0, 0


def _is_triton(env: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return bool(env.get("TRITON_SERVER_VERSION") or env.get("NVIDIA_TRITON_SERVER_VERSION")
                or labels.get("com.nvidia.tritonserver.version"))


def _property(component: Mapping[str, Any], name: str) -> str | None:
    return next((p["value"] for p in component.get("properties", []) if p.get("name") == f"{PROPERTY}:{name}"), None)


def _env(pairs) -> dict[str, str]:
    return dict(item.split("=", 1) for item in pairs or [] if "=" in item)


# -- reading ---------------------------------------------------------------------------


def inspect_remote(registries, ref: str) -> ImageReport:
    """From the registry: manifest (the linux/amd64 one of an index), config and SBOM; nothing pulled."""
    target = ImageRef.parse(ref)
    api = registries.client(target.host)
    reference = target.digest or target.tag_or_latest
    found = api.document(target.repository, reference)
    if found is None:
        raise RegistryError(f"{ref}: registry {target.host} holds no such image")
    digest, media_type, manifest, _ = found
    if "manifests" in manifest:
        chosen = next((m for m in manifest["manifests"] if (m.get("platform") or {}).get("os") == PLATFORM[0]
                       and (m.get("platform") or {}).get("architecture") == PLATFORM[1]), None)
        if chosen is None:
            raise RegistryError(f"{ref}: the registry's index has no {'/'.join(PLATFORM)} image")
        found = api.document(target.repository, chosen["digest"])
        if found is None:
            raise RegistryError(f"{ref}: the registry lists {chosen['digest']} but does not hold it")
        digest, media_type, manifest, _ = found
    config_digest = (manifest.get("config") or {}).get("digest")
    if not config_digest:
        raise RegistryError(f"{ref}: the registry's manifest ({media_type}) names no image configuration")
    config = json.loads(api.blob(target.repository, config_digest, 16 << 20))
    settings = config.get("config") or {}
    sbom = find_sbom(api, target.repository, digest)
    layers = manifest.get("layers", [])
    return ImageReport.of(ref, "registry", digest, _env(settings.get("Env")), settings.get("Labels") or {},
                          [int(layer.get("size", 0)) for layer in layers], json.loads(sbom) if sbom else None,
                          compressions=tuple(_layer_kind(layer) for layer in layers),
                          prefetched=tuple(_prefetched(layer) for layer in layers),
                          signatures=tuple(s.reference for s in read_signatures(api, target.repository, digest)),
                          attestations=tuple(str(st.get("predicateType")) for st, _ in
                                             read_attestations(api, target.repository, digest)))


def inspect_local(engine: Engine, ref: str) -> ImageReport | None:
    """From the engine (None: it holds no such image); the SBOM is read from the image's file."""
    info = engine.image(ref)
    if info is None:
        return None
    sbom = None
    if _is_triton(info.env, info.labels) and info.labels.get("org.triton-composer.sbom") == SBOM_PATH:
        done = engine.run_once(info.id, ["cat", SBOM_PATH], entrypoint=[])
        sbom = json.loads(done.output) if done.exit_code == 0 else None
    layers = [layer.size for layer in engine.layers(info.id) if layer.size]
    return ImageReport.of(ref, "engine", info.digest, info.env, info.labels, layers, sbom)


def inspect(engine: Engine, registries, ref: str, *, remote: bool = False) -> ImageReport:
    """The engine's image when it holds `ref` (unless `remote`), else the registry's."""
    local = None if remote else inspect_local(engine, ref)
    return local if local is not None else inspect_remote(registries, ref)


# -- two images -------------------------------------------------------------------------


@dataclass(frozen=True)
class Difference:
    a: ImageReport
    b: ImageReport

    def versions(self) -> dict[str, tuple[str | None, str | None]]:
        return {k: (self.a.versions.get(k), self.b.versions.get(k)) for k in self.a.versions
                if self.a.versions.get(k) != self.b.versions.get(k)}

    def parts(self) -> dict[str, tuple[list[str] | None, list[str] | None]]:
        a, b = self.a.parts(), self.b.parts()
        return {k: (a[k], b[k]) for k in a if a[k] != b[k]}

    def packages(self) -> dict[str, dict]:
        a, b = self.a.packages(), self.b.packages()
        return {
            "added": {k: b[k] for k in sorted(set(b) - set(a))},
            "removed": {k: a[k] for k in sorted(set(a) - set(b))},
            "changed": {k: [a[k], b[k]] for k in sorted(set(a) & set(b)) if a[k] != b[k]},
        }

    def to_dict(self) -> dict:
        return {"a": self.a.ref, "b": self.b.ref, "versions": {k: list(v) for k, v in self.versions().items()},
                "parts": {k: list(v) for k, v in self.parts().items()}, "packages": self.packages(),
                "sbom": [self.a.sbom is not None, self.b.sbom is not None]}

    def table(self) -> str:
        lines = [f"a: {self.a.ref} (from the {self.a.source})", f"b: {self.b.ref} (from the {self.b.source})"]
        lines += [f"{name}: {old or '-'} -> {new or '-'}" for name, (old, new) in self.versions().items()]
        lines += [f"{kind}: {', '.join(old or []) or '-'} -> {', '.join(new or []) or '-'}"
                  for kind, (old, new) in self.parts().items()]
        packages = self.packages()
        lines += [f"added    {k} {v}" for k, v in packages["added"].items()]
        lines += [f"removed  {k} {v}" for k, v in packages["removed"].items()]
        lines += [f"changed  {k} {old} -> {new}" for k, (old, new) in packages["changed"].items()]
        for side in (self.a, self.b):
            if side.sbom is None:
                lines.append(f"note: {side.ref} has no SBOM, so its packages are not compared")
        if len(lines) == 2:
            lines.append("no differences")
        return "\n".join(lines)
