"""The build pipeline: options -> plan -> Dockerfile + context -> image -> smoke report -> tag.

Each step is a function of the previous step's value; the CLI calls them in order and prints.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from composer.catalog import Catalog
from composer.contents import FullImageContents, inspect_full
from composer.engine import Engine, ImageInfo
from composer.errors import BuildFailed, SmokeTestFailed, UsageError
from composer.packages import check_wheelhouse, explain_pip_failure, python_target, redactor, secrets_of
from composer.plan import (
    BaseImage,
    BuildOptions,
    CompositionPlan,
    Offer,
    foreign_backend,
    image_refs,
    make_plan,
    resolve_release,
)
from composer.render import BuildContext, write_context
from composer.smoke import SmokeOptions, SmokeReport, smoke_test
from composer.progress import LineSink, quiet




@dataclass(frozen=True)
class BuildResult:
    plan: CompositionPlan
    image_id: str
    tag: str | None
    size: int
    smoke: SmokeReport | None

    def to_dict(self) -> dict:
        return {
            "image_id": self.image_id,
            "tag": self.tag,
            "size": self.size,
            "release": self.plan.release.name,
            "server_version": self.plan.release.server,
            "backends": list(self.plan.all_backends),
            "repoagents": list(self.plan.repoagents),
            "caches": list(self.plan.caches),
            "base_images": {"full": self.plan.full.record(), "min": self.plan.min.record()},
            "smoke_test": self.smoke.to_dict() if self.smoke else None,
        }


def base_refs(options: BuildOptions, catalog: Catalog, engine: Engine | None) -> tuple[str, str]:
    """The full and min references, before anything is pulled."""
    if options.version:
        return image_refs(options, catalog.release(options.version))
    if not options.full_image:
        raise UsageError("give --version YY.MM, or --image full=REF so the release can be read from the image")
    if options.min_image:
        return options.full_image, options.min_image
    # The min image sits beside the full one: same repository, tag <release>-py3-min.
    if engine is None:
        raise UsageError("give --version YY.MM or --image min=REF: without an engine the release is unknown")
    info = engine.require_image(options.full_image)
    release = resolve_release(options, catalog, info.env)
    repository = options.full_image.split("@", 1)[0]
    if repository.rfind(":") > repository.rfind("/"):
        repository = repository[: repository.rfind(":")]
    return options.full_image, f"{repository}:{release.name}-py3-min"


@dataclass(frozen=True)
class Inspection:
    """What the engine told about the base images: everything planning needs, and nothing else.

    Kept as one value so a bundle can carry it to a machine that reaches no registry.
    """

    full: ImageInfo
    min: ImageInfo
    contents: FullImageContents
    backend_images: tuple[tuple[str, ImageInfo, FullImageContents], ...] = ()

    def to_dict(self) -> dict:
        return {
            "full": _info_dict(self.full),
            "min": _info_dict(self.min),
            "contents": self.contents.to_dict(),
            "backend_images": [
                {"name": n, "image": _info_dict(i), "contents": c.to_dict()} for n, i, c in self.backend_images
            ],
        }

    @classmethod
    def from_dict(cls, d: dict) -> "Inspection":
        return cls(
            full=_info(d["full"]),
            min=_info(d["min"]),
            contents=FullImageContents.from_dict(d["contents"]),
            backend_images=tuple(
                (b["name"], _info(b["image"]), FullImageContents.from_dict(b["contents"])) for b in d["backend_images"]
            ),
        )


def inspect_images(engine: Engine, options: BuildOptions, catalog: Catalog, on_line: LineSink = quiet) -> Inspection:
    """Pull what is missing and look inside the full image(s) with short-lived containers."""
    full_ref, min_ref = base_refs(options, catalog, engine)
    on_line(f"full image: {full_ref}")
    full_info = engine.require_image(full_ref, on_line=on_line)
    resolve_release(options, catalog, full_info.env)  # a mismatch fails before anything slow
    on_line(f"min image: {min_ref}")
    min_info = engine.require_image(min_ref, on_line=on_line)
    on_line(f"looking inside {full_ref}")
    contents = inspect_full(engine, full_ref)
    others = []
    for name, ref in options.backend_images:
        on_line(f"backend {name} from: {ref}")
        info = engine.require_image(ref, on_line=on_line)
        others.append((name, info, inspect_full(engine, ref)))
    return Inspection(full_info, min_info, contents, tuple(others))


def plan_from_inspection(
    options: BuildOptions, catalog: Catalog, inspection: Inspection, *, pin: bool = True
) -> CompositionPlan:
    """The plan, checked against what the images offer; no engine involved.

    pin=False builds FROM the names rather than the registry digests (for loaded bundles,
    whose image ids were checked instead: a loaded image has no digest reference).
    """
    full_info, min_info = inspection.full, inspection.min
    release = resolve_release(options, catalog, full_info.env)
    full = BaseImage("full", full_info.ref, full_info.id, full_info.digest, pin)
    minimal = BaseImage("min", min_info.ref, min_info.id, min_info.digest, pin)
    foreign = tuple(
        foreign_backend(
            name,
            BaseImage(f"backend:{name}", info.ref, info.id, info.digest, pin),
            Offer.from_contents(contents),
            info.env.get("NVIDIA_TRITON_SERVER_VERSION"),
        )
        for name, info, contents in inspection.backend_images
    )
    offer = Offer.from_contents(inspection.contents)
    return make_plan(options, release, offer, catalog, full, minimal, full_info.env, foreign)


def plan_from_engine(
    engine: Engine, options: BuildOptions, catalog: Catalog, on_line: LineSink = quiet
) -> tuple[CompositionPlan, FullImageContents]:
    """Look inside the real base images, then plan: the selection is checked against them."""
    inspection = inspect_images(engine, options, catalog, on_line)
    plan = plan_from_inspection(options, catalog, inspection)
    check_packages(engine, plan, inspection.contents, on_line)
    return plan, inspection.contents


def check_packages(engine: Engine, plan: CompositionPlan, contents: FullImageContents, on_line: LineSink) -> None:
    """Fail before the build, on the host, if the wheelhouse cannot satisfy the requirements."""
    if plan.packages.wheelhouse is None:
        return
    target = python_target(engine, plan.full.ref, contents.python.version)
    for name, version in check_wheelhouse(target, plan.packages, plan.constraints):
        on_line(f"wheelhouse: {name} {version}")


def _info_dict(info: ImageInfo) -> dict:
    return {
        "id": info.id, "ref": info.ref, "tags": list(info.tags), "repo_digests": list(info.repo_digests),
        "env": dict(info.env), "labels": dict(info.labels), "size": info.size,
    }


def _info(d: dict) -> ImageInfo:
    return ImageInfo(
        id=d["id"], ref=d["ref"], tags=tuple(d["tags"]), repo_digests=tuple(d["repo_digests"]),
        env=dict(d["env"]), labels=dict(d["labels"]), size=int(d["size"]),
    )


def plan_from_catalog(options: BuildOptions, catalog: Catalog) -> CompositionPlan:
    """Plan with no engine: the selection is checked against NGC's catalogued layout."""
    if not options.version:
        raise UsageError("without a Docker engine, give --version YY.MM")
    release = catalog.release(options.version)
    full_ref, min_ref = image_refs(options, release)
    offer = Offer.from_layout(catalog, release)
    foreign = tuple(
        foreign_backend(name, BaseImage(f"backend:{name}", ref), offer, None) for name, ref in options.backend_images
    )
    return make_plan(
        options, release, offer, catalog, BaseImage("full", full_ref), BaseImage("min", min_ref), foreign=foreign
    )


def build_image(
    engine: Engine,
    plan: CompositionPlan,
    *,
    smoke: bool = True,
    model_repository: Path | None = None,
    context_dir: Path | None = None,
    network: bool = False,
    labels: dict[str, str] | None = None,
    on_line: LineSink = quiet,
    on_smoke_line: LineSink | None = None,
) -> BuildResult:
    """Build the plan; tag the image only once its smoke test passed.

    A failed build or smoke test leaves the tag where it was: the new image is built untagged
    and discarded if it does not serve.
    """
    workdir = Path(tempfile.mkdtemp(prefix="triton-composer-")) if context_dir is None else context_dir
    packages = plan.packages
    # Only an install from an index needs the network; everything else comes from the images.
    network = network or (bool(packages) and packages.wheelhouse is None)
    redact = redactor(secrets_of(packages))
    try:
        context: BuildContext = write_context(plan, workdir)
        on_line(f"build context: {context.directory}")
        image_id = engine.build(
            context.directory,
            network_mode=None if network else "none",
            labels=labels,
            buildargs=packages.build_args(),
            redact=redact,
            on_line=on_line,
        )
    except BuildFailed as failure:
        if packages and "pip" in failure.log_tail:
            where = f"the wheelhouse {packages.wheelhouse}" if packages.wheelhouse else "the index"
            raise BuildFailed(
                "installing python packages failed: " + explain_pip_failure(failure.log_tail, plan.constraints, where),
                log_tail=failure.log_tail,
            ) from failure
        raise
    finally:
        if context_dir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    on_line(f"built {image_id[:19]}")

    report = None
    if smoke:
        options = SmokeOptions(
            backends=plan.all_backends, server_version=plan.release.server, model_repository=model_repository
        )
        report = smoke_test(engine, image_id, options, on_line=on_smoke_line or on_line, labels=labels)
        if not report.passed:
            engine.discard_untagged(image_id)
            failed = ", ".join(f"{r.subject}{'/' + r.model if r.model else ''}" for r in report.failures())
            raise SmokeTestFailed(
                f"smoke test failed ({failed}); {plan.tag} was not moved", report=report, log_tail=report.log_tail
            )
    engine.tag(image_id, plan.tag)
    info = engine.image(image_id)
    return BuildResult(plan, image_id, plan.tag, info.size if info else 0, report)
