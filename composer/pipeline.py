"""The build pipeline: options -> plan -> Dockerfile + context -> image -> smoke report -> tag.

Each step is a function of the previous step's value; the CLI calls them in order and prints.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from composer.catalog import Catalog
from composer.contents import FullImageContents, inspect_full
from composer.engine import Engine
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

LineSink = Callable[[str], None]


def _quiet(_line: str) -> None:
    pass


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


def plan_from_engine(
    engine: Engine, options: BuildOptions, catalog: Catalog, on_line: LineSink = _quiet
) -> tuple[CompositionPlan, FullImageContents]:
    """Look inside the real base images, then plan: the selection is checked against them."""
    full_ref, min_ref = base_refs(options, catalog, engine)
    on_line(f"full image: {full_ref}")
    full_info = engine.require_image(full_ref, on_line=on_line)
    release = resolve_release(options, catalog, full_info.env)
    on_line(f"min image: {min_ref}")
    min_info = engine.require_image(min_ref, on_line=on_line)
    on_line(f"looking inside {full_ref}")
    contents = inspect_full(engine, full_ref)
    full = BaseImage("full", full_ref, full_info.id, full_info.digest)
    minimal = BaseImage("min", min_ref, min_info.id, min_info.digest)
    foreign = []
    for name, ref in options.backend_images:
        on_line(f"backend {name} from: {ref}")
        info = engine.require_image(ref, on_line=on_line)
        offer = Offer.from_contents(inspect_full(engine, ref))
        image = BaseImage(f"backend:{name}", ref, info.id, info.digest)
        foreign.append(foreign_backend(name, image, offer, info.env.get("NVIDIA_TRITON_SERVER_VERSION")))
    plan = make_plan(
        options, release, Offer.from_contents(contents), catalog, full, minimal, full_info.env, tuple(foreign)
    )
    if plan.packages.wheelhouse is not None:
        # Fail before the build, on the host, if the wheelhouse cannot satisfy the requirements.
        target = python_target(engine, full_ref, contents.python.version)
        for name, version in check_wheelhouse(target, plan.packages, plan.constraints):
            on_line(f"wheelhouse: {name} {version}")
    return plan, contents


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
    on_line: LineSink = _quiet,
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
