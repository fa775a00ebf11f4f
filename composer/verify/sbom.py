"""The SBOM of a composed image: a CycloneDX document made from what is in the built image.

The composer knows at build time what it took from where (the plan, the collector's report);
the built image knows what is really there (its dpkg database, its Python distributions). The
document is assembled from both, read back from the built image by one container
(`in_image/facts.sh`), so whatever the build left out (a pruned base, a backend not selected)
is absent from it too. Every value is taken from the image or the plan, the time from
SOURCE_DATE_EPOCH and the serial number from the content, so two builds of one composition
give byte-identical documents.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import uuid
from dataclasses import dataclass
from importlib import resources
from typing import Any, Mapping

from composer import __version__
from composer.core.errors import BuildFailed
from composer.config.model_envs import ENVS_ROOT
from composer.resolve.plan_types import ROOT, BaseImage, CompositionPlan
from composer.core.progress import LineSink, quiet
from composer.core.refs import ImageRef, is_image_id

SBOM_PATH = f"{ROOT}/sbom.cdx.json"  # where every composed image holds its SBOM
MEDIA_TYPE = "application/vnd.cyclonedx+json"
MARK = "@@triton-composer-facts@@"
PROPERTY = "triton-composer"  # prefix of the document's own properties


# -- what the built image holds ----------------------------------------------------


@dataclass(frozen=True)
class DebPackage:
    name: str
    version: str
    arch: str
    source: str | None = None


@dataclass(frozen=True)
class PythonPackage:
    name: str
    version: str
    path: str  # the distribution's metadata folder in the image


@dataclass(frozen=True)
class ImageFacts:
    """What one container read from a built image (in_image/facts.sh), parsed."""

    os_id: str
    os_version: str
    debs: tuple[DebPackage, ...]
    python: tuple[PythonPackage, ...]
    collected: Mapping[str, Any] | None  # /opt/tritonserver/collected.json
    composition: Mapping[str, Any] | None  # /opt/tritonserver/composition.json

    @property
    def os(self) -> str:
        return f"{self.os_id} {self.os_version}".strip()

    def python_version(self, name: str) -> str | None:
        """The version of a package as the image's python has it (not a model environment's)."""
        wanted = _normal(name)
        return next((p.version for p in self.python if _normal(p.name) == wanted and _model_env(p.path) is None),
                    None)


def facts_script() -> bytes:
    return resources.files("composer.in_image").joinpath("facts.sh").read_bytes()


def read_facts(engine, image: str, labels: Mapping[str, str] | None = None) -> ImageFacts:
    """Run facts.sh in one short-lived container of `image` (no network) and parse its output."""
    done = engine.run_once(image, ["/bin/sh", "/composer-facts.sh"], entrypoint=[],
                           files={"/composer-facts.sh": facts_script()}, user="0", labels=labels)
    if done.exit_code != 0 or f"{MARK} end" not in done.output:
        raise BuildFailed(f"cannot read the built image's contents for its SBOM: {done.output.strip()[-300:]}")
    return parse_facts(done.output)


def parse_facts(text: str) -> ImageFacts:
    sections: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith(MARK + " "):
            sections.append((line[len(MARK) + 1:], []))
        elif sections:
            sections[-1][1].append(line)
    os_release: dict[str, str] = {}
    debs: list[DebPackage] = []
    python: dict[tuple[str, str, str], PythonPackage] = {}
    records: dict[str, Any] = {}
    for title, lines in sections:
        if title == "os-release":
            os_release = dict(_assignment(line) for line in lines if "=" in line)
        elif title == "dpkg-status":
            debs = _installed(lines)
        elif title.startswith("python "):
            head = _fields(lines)
            if head.get("name") and head.get("version"):
                path = title[len("python "):].rsplit("/", 1)[0]
                python[(_normal(head["name"]), head["version"], path)] = PythonPackage(head["name"], head["version"], path)
        elif title in ("collected", "composition"):
            try:
                records[title] = json.loads("\n".join(lines))
            except ValueError:
                raise BuildFailed(f"the image's {ROOT}/{title}.json is not JSON") from None
    return ImageFacts(os_release.get("ID", ""), os_release.get("VERSION_ID", ""), tuple(sorted(debs, key=_deb_key)),
                      tuple(python[k] for k in sorted(python)), records.get("collected"), records.get("composition"))


def _assignment(line: str) -> tuple[str, str]:
    key, _, value = line.partition("=")
    return key.strip(), value.strip().strip('"')


def _fields(lines: list[str]) -> dict[str, str]:
    """RFC 822 style fields (dpkg status stanzas, Python METADATA heads); first value wins."""
    fields: dict[str, str] = {}
    for line in lines:
        if line[:1] in (" ", "\t") or ":" not in line:
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip().lower(), value.strip())
    return fields


def _installed(lines: list[str]) -> list[DebPackage]:
    """Packages the dpkg database holds as installed (as `dpkg -l` marks them ii/hi)."""
    stanzas: list[list[str]] = [[]]
    for line in lines:
        if line.strip():
            stanzas[-1].append(line)
        elif stanzas[-1]:
            stanzas.append([])
    found = []
    for stanza in stanzas:
        fields = _fields(stanza)
        if fields.get("status", "").split()[-1:] == ["installed"] and fields.get("package"):
            source = fields.get("source", "").split(" ")[0] or None
            found.append(DebPackage(fields["package"], fields.get("version", ""), fields.get("architecture", ""), source))
    return found


def _deb_key(deb: DebPackage) -> tuple[str, str]:
    return (deb.name, deb.arch)


def _normal(name: str) -> str:
    """A Python distribution's name as PEP 503 compares them."""
    return "-".join(name.replace("_", "-").replace(".", "-").lower().split("-"))


def _model_env(path: str) -> str | None:
    """The model whose environment holds this path, if any."""
    if not path.startswith(ENVS_ROOT + "/"):
        return None
    return path[len(ENVS_ROOT) + 1:].split("/", 1)[0]


# -- the document --------------------------------------------------------------------


class _Components(dict):
    """The document's components by bom-ref, each added once."""

    def add(self, ref: str, **kwargs: Any) -> str:
        from cyclonedx.model.component import Component

        if ref not in self:
            self[ref] = Component(bom_ref=ref, **kwargs)
        return ref


def _props(**values: Any) -> list:
    from cyclonedx.model import Property

    return [Property(name=f"{PROPERTY}:{k.replace('_', '-')}", value=str(v))
            for k, v in sorted(values.items()) if v not in (None, "", [], ())]


def make_sbom(plan: CompositionPlan, facts: ImageFacts) -> str:
    """The CycloneDX 1.6 JSON document of an image built from `plan` holding `facts`."""
    from cyclonedx.model import Property
    from cyclonedx.model.bom import Bom
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.output.json import JsonV1Dot6
    from packageurl import PackageURL

    components = _Components()
    debs, pythons = _packages(facts, components)
    envs = _model_envs(plan, facts)
    images = {"full": plan.full, "min": plan.min, **{f"backend:{f.name}": f.image for f in plan.foreign_backends}}
    for role, image in sorted(images.items()):
        components.add(f"image:{role}", **_image_component(role, image))
    server = components.add(
        "triton:server", type=ComponentType.APPLICATION, name="tritonserver", version=plan.server_version,
        purl=PackageURL("generic", "nvidia", "tritonserver", plan.server_version),
        properties=_props(kind="server", release=plan.release.name, image=_source(plan.full)))
    parts = _parts(plan, components)
    collected = facts.collected or {}
    libraries = _libraries(plan, collected, components)
    depends = _dependencies(collected, components, parts, libraries, debs, pythons)
    depends[server] |= set(parts.values())
    if "backend python" in parts:  # the python backend runs each model in its environment
        depends[parts["backend python"]] |= {env.bom_ref.value for env in envs}

    # The image by what it is, not by the name it is given: a tag in the document made the same
    # composition under another tag (CI's tag per commit) another image id and digest.
    root = Component(bom_ref="image", type=ComponentType.CONTAINER, name="tritonserver", version=plan.release.name,
                     description=f"Triton {plan.release.name} composed by triton-composer: "
                                 f"{', '.join(plan.all_backends)}",
                     properties=_props(os=facts.os, sbom_path=SBOM_PATH))
    depends["image"] = {server, "image:min", *{r for r in libraries.values() if r.startswith("file:/usr")}}
    composer_tool = Component(type=ComponentType.APPLICATION, name="triton-composer", version=__version__,
                              bom_ref="tool:triton-composer")
    metadata_props = _props(composer_version=__version__, release=plan.release.name,
                            server_version=plan.server_version, backends=",".join(plan.all_backends),
                            repoagents=",".join(plan.repoagents), caches=",".join(plan.caches),
                            requested_packages=",".join(plan.record()["requested_packages"]))
    metadata_props += [Property(name=f"{PROPERTY}:label:{k}", value=v) for k, v in plan.labels]

    bom = Bom(components=[*components.values(), *envs], serial_number=uuid.UUID(int=0))
    bom.metadata.component = root
    bom.metadata.tools.components.add(composer_tool)
    bom.metadata.timestamp = _created(plan)
    bom.metadata.properties = metadata_props
    by_ref = {**components, "image": root, **{env.bom_ref.value: env for env in envs}}
    for ref, needs in depends.items():
        if needs:
            bom.register_dependency(by_ref[ref], [by_ref[n] for n in sorted(needs)])
    draft = JsonV1Dot6(bom).output_as_string(indent=1)
    # The serial number names this content: the same composition of the same image, the same one.
    bom.serial_number = uuid.UUID(bytes=hashlib.sha256(draft.encode()).digest()[:16], version=4)
    return JsonV1Dot6(bom).output_as_string(indent=1) + "\n"


def _packages(facts: ImageFacts, components: _Components) -> tuple[dict[str, str], dict[str, str]]:
    """A component per installed Debian package (by name and name:arch) and per Python
    distribution (by its metadata folder); their bom-refs."""
    from cyclonedx.model.component import ComponentType
    from packageurl import PackageURL

    distro = f"{facts.os_id}-{facts.os_version}" if facts.os_id else None
    debs: dict[str, str] = {}
    for deb in facts.debs:
        qualifiers = {"arch": deb.arch, **({"distro": distro} if distro else {})}
        purl = PackageURL("deb", facts.os_id or None, deb.name, deb.version, qualifiers)
        debs[deb.name] = debs[f"{deb.name}:{deb.arch}"] = components.add(
            purl.to_string(), type=ComponentType.LIBRARY, name=deb.name, version=deb.version, purl=purl,
            properties=_props(kind="deb", architecture=deb.arch, source_package=deb.source))
    pythons: dict[str, str] = {}
    for package in facts.python:
        if _model_env(package.path) is not None:
            continue  # listed under its model's environment
        purl = PackageURL("pypi", None, _normal(package.name), package.version)
        pythons[package.path] = components.add(
            f"{purl.to_string()}#{package.path}", type=ComponentType.LIBRARY, name=package.name,
            version=package.version, purl=purl, properties=_props(kind="python", location=package.path))
    return debs, pythons


def _model_envs(plan: CompositionPlan, facts: ImageFacts) -> list:
    """A component per python model's own environment, holding the packages installed in it."""
    from cyclonedx.model.component import Component, ComponentType
    from packageurl import PackageURL

    envs = []
    for env in plan.model_envs:
        inside = []
        for package in facts.python:
            if _model_env(package.path) == env.model:
                purl = PackageURL("pypi", None, _normal(package.name), package.version)
                inside.append(Component(
                    bom_ref=f"{purl.to_string()}#{package.path}", type=ComponentType.LIBRARY, name=package.name,
                    version=package.version, purl=purl, properties=_props(kind="python", location=package.path,
                                                                          model=env.model)))
        envs.append(Component(
            bom_ref=f"model-env:{env.model}", type=ComponentType.APPLICATION, name=env.model,
            group="triton.model-env", components=inside,
            properties=_props(kind="model-env", model=env.model, location=env.path, form=env.record()["form"],
                              requirements=",".join(env.record()["requirements"]))))
    return envs


def _parts(plan: CompositionPlan, components: _Components) -> dict[str, str]:
    """A component per selected backend, repo agent and cache ("backend python" -> bom-ref), with
    the server's version (or its release's, for a backend from another image) and its image."""
    from cyclonedx.model.component import ComponentType

    parts: dict[str, str] = {}
    foreign = {f.name: f for f in plan.foreign_backends}
    custom = {c.name for c in plan.custom_backends}
    for kind, names in (("backend", plan.all_backends), ("repoagent", plan.repoagents), ("cache", plan.caches)):
        for name in names:
            other = foreign.get(name)
            if name in custom:
                version, origin, release = None, "custom", None
            elif other is not None:
                version, origin, release = other.release, _source(other.image), other.release
            else:
                version, origin, release = plan.server_version, _source(plan.full), plan.release.name
            parts[f"{kind} {name}"] = components.add(
                f"triton:{kind}:{name}", type=ComponentType.LIBRARY, name=name, version=version,
                group=f"triton.{kind}", properties=_props(kind=kind, image=origin, release=release))
    return parts


def _libraries(plan: CompositionPlan, collected: Mapping[str, Any], components: _Components) -> dict[str, str]:
    """A component per library the collector copied (with its package) or found inside a part's
    folder; bom-refs by path (and by soname for the copied ones)."""
    from cyclonedx.model.component import ComponentType

    libraries: dict[str, str] = {}
    for entry in [*collected.get("system", []), *collected.get("package_siblings", [])]:
        libraries[entry["soname"]] = libraries[entry["path"]] = components.add(
            f"file:{entry['path']}", type=ComponentType.FILE, name=entry["path"],
            properties=_props(kind="collected-library", soname=entry.get("soname"), package=entry.get("package"),
                              loaded_with=entry.get("for"), image=_source(plan.full)))
    for label, paths in _inside_parts(collected):
        for path in paths:
            libraries[path] = components.add(f"file:{path}", type=ComponentType.FILE, name=path,
                                             properties=_props(kind="bundled-library", part=label))
    return libraries


def _inside_parts(collected: Mapping[str, Any]) -> list[tuple[str, list[str]]]:
    """(part label, library paths) for libraries in a part's folder: bundled (RUNPATH) or loaded by name."""
    return [*collected.get("bundled", {}).items(), *collected.get("plugins", {}).items()]


def _dependencies(collected, components, parts, libraries, debs, pythons) -> dict[str, set[str]]:
    """What the collector knows each part needs: the libraries in its folder, the NVIDIA packages
    it reaches, its Python packages; and each library the ones loaded with it."""
    depends: dict[str, set[str]] = {ref: set() for ref in components}
    for entry in collected.get("package_siblings", []):
        if entry.get("for") in libraries:
            depends[libraries[entry["for"]]].add(libraries[entry["path"]])
    for label, paths in _inside_parts(collected):
        if label in parts:
            depends[parts[label]] |= {libraries[p] for p in paths}
    for label, reached in collected.get("nvidia", {}).items():
        for item in reached if label in parts else ():
            package = (item.get("package") or "").split(":")[0]
            if package in debs:
                depends[parts[label]].add(debs[package])
    for label, ref in parts.items():
        kind, name = label.split()
        depends[ref] |= {r for path, r in pythons.items() if path.startswith(f"{ROOT}/{kind}s/{name}/")}
    if "backend python" in parts and collected.get("python"):
        depends[parts["backend python"]] |= {r for path, r in pythons.items() if not path.startswith(ROOT + "/")}
    return depends


def _created(plan: CompositionPlan) -> datetime.datetime:
    """The image's creation label (SOURCE_DATE_EPOCH when set), as the document's time."""
    stamp = dict(plan.labels).get("org.opencontainers.image.created")
    if stamp:
        return datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    return datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def _source(image: BaseImage) -> str:
    """An image as the SBOM names it: by digest where it has one, else by id, else by name."""
    if image.digest and not is_image_id(image.ref):
        return str(ImageRef.parse(image.ref).without_tag().with_digest(image.digest))
    return f"{image.ref} ({image.id})" if image.id and image.id != image.ref else image.ref


def _image_component(role: str, image: BaseImage) -> dict:
    from cyclonedx.model import Property
    from cyclonedx.model.component import ComponentType
    from packageurl import PackageURL

    version = image.digest or image.id
    purl = None
    if version and not is_image_id(image.ref):  # an image known by id only (pinned locally) has no purl
        parsed = ImageRef.parse(image.ref)
        repository, tag = parsed.familiar_name, parsed.tag
        qualifiers = {"repository_url": repository, **({"tag": tag} if tag else {})}
        purl = PackageURL("oci", None, repository.rsplit("/", 1)[-1], version, qualifiers)
    properties = [Property(name=f"{PROPERTY}:{k}", value=v) for k, v in
                  (("role", role), ("ref", image.ref), ("id", image.id or ""), ("digest", image.digest or "")) if v]
    return {"type": ComponentType.CONTAINER, "name": image.ref, "version": version, "purl": purl,
            "properties": properties}


def validate(document: str) -> str | None:
    """Problems the CycloneDX 1.6 JSON schema finds in `document` (the library's validator), or None."""
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(document)
    return str(error) if error else None


def version_labels(facts: ImageFacts) -> dict[str, str]:
    """Labels the final layer adds so registry browsers show the versions inside."""
    labels = {"org.triton-composer.sbom": SBOM_PATH, "org.triton-composer.os": facts.os}
    for name in ("numpy",):
        version = facts.python_version(name)
        if version:
            labels[f"org.triton-composer.{name}.version"] = version
    python = (facts.collected or {}).get("python")
    if python:
        labels["org.triton-composer.python.version"] = python
    return {k: v for k, v in labels.items() if v}
