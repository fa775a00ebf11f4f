"""The `composer` command: parse options, call the pipeline, print. Nothing else lives here.

Progress goes to stderr so that `--json` output on stdout stays machine-readable; every
ComposerError becomes one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import List, Optional

import typer

from composer import __version__
from composer.catalog import Catalog
from composer.errors import BuildFailed, ComposerError, EngineUnavailable, ImageNotFound, SmokeTestFailed, UsageError
from composer.options import build_options, package_options, set_overrides
from composer.output import Printer, human_size, smoke_table
from composer.plan import DEFAULT_REGISTRY

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Compose slim Triton Inference Server images and prove they serve.",
    pretty_exceptions_enable=False,
)


def reports_errors(command):
    """Turn every failure of a command into one line and an exit code, never a traceback."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except ComposerError as error:
            if isinstance(error, BuildFailed) and error.log_tail:  # the output first: the error is the last line
                typer.echo("--- build output (tail) ---\n" + error.log_tail.rstrip(), err=True)
            typer.secho(f"error: {error.message}", err=True, fg="red")
            raise typer.Exit(error.exit_code)
        except KeyboardInterrupt:
            typer.echo("interrupted", err=True)
            raise typer.Exit(130)
        except (typer.Exit, typer.Abort):
            raise
        except Exception as error:  # a bug: still one line, the traceback on request
            if os.environ.get("COMPOSER_DEBUG"):
                raise
            typer.secho(
                f"internal error: {type(error).__name__}: {error} (COMPOSER_DEBUG=1 shows the traceback)",
                err=True,
                fg="red",
            )
            raise typer.Exit(70)

    return wrapper


def _engine():
    from composer.engine import Engine

    return Engine.connect()


BackendOpt = typer.Option([], "--backend", "-b", help="A backend to include (repeatable).")
RepoagentOpt = typer.Option([], "--repoagent", help="A repository agent to include (repeatable).")
CacheOpt = typer.Option([], "--cache", help="A cache implementation to include (repeatable).")
VersionOpt = typer.Option(None, "--version", "-v", help="Triton release, YY.MM (e.g. 24.09).")
RegistryOpt = typer.Option(
    None, "--registry",
    help=f"Registry prefix holding tritonserver images: a mirror, or localhost/standin (default {DEFAULT_REGISTRY}).",
)
RegistryAuthOpt = typer.Option(
    None, "--registry-auth",
    help="Registry credentials: file:PATH or env:NAME holding user:password (default: docker login's).",
)
ImageOpt = typer.Option([], "--image", help="Name a base image outright: full=REF or min=REF.")
CustomOpt = typer.Option([], "--custom-backend", help="Copy a local backend folder in: NAME=DIR (repeatable).")
BackendImageOpt = typer.Option(
    [], "--backend-image", help="Take a backend from another full image (another release): NAME=REF (repeatable)."
)
HeadersOpt = typer.Option(False, "--with-headers", help="Include /opt/tritonserver/include.")
TagOpt = typer.Option(None, "--tag", "-t", help="Tag for the composed image (default names release and backends).")
JsonOpt = typer.Option(False, "--json", help="Print a machine-readable result on stdout.")
PipOpt = typer.Option([], "--pip", help="A python package for python models, pip requirement syntax (repeatable).")
RequirementsOpt = typer.Option([], "--requirements", "-r", help="A requirements file (repeatable).")
IndexOpt = typer.Option(
    None, "--pip-index-url", envvar="COMPOSER_PIP_INDEX_URL",
    help="Package index (may hold credentials: never written anywhere; env COMPOSER_PIP_INDEX_URL).",
)
ExtraIndexOpt = typer.Option([], "--pip-extra-index-url", help="Extra package index (repeatable).")
TrustedOpt = typer.Option([], "--pip-trusted-host", help="Host pip may reach without valid TLS (repeatable).")
WheelhouseOpt = typer.Option(None, "--wheelhouse", help="Install from this folder of wheels only, no index.")
CaOpt = typer.Option(None, "--ca-cert", help="CA certificate trusted by the install step only.")


# -- commands -------------------------------------------------------------------


@app.command()
@reports_errors
def build(
    set_files: List[str] = typer.Option(
        [], "--set", "-s", help="A backend set: YAML file or shipped preset name (repeatable: several images)."
    ),
    backend: List[str] = BackendOpt,
    repoagent: List[str] = RepoagentOpt,
    cache: List[str] = CacheOpt,
    version: Optional[str] = VersionOpt,
    registry: Optional[str] = RegistryOpt,
    image: List[str] = ImageOpt,
    custom_backend: List[str] = CustomOpt,
    backend_image: List[str] = BackendImageOpt,
    with_headers: bool = HeadersOpt,
    tag: Optional[str] = TagOpt,
    pip: List[str] = PipOpt,
    requirements: List[Path] = RequirementsOpt,
    pip_index_url: Optional[str] = IndexOpt,
    pip_extra_index_url: List[str] = ExtraIndexOpt,
    pip_trusted_host: List[str] = TrustedOpt,
    wheelhouse: Optional[Path] = WheelhouseOpt,
    ca_cert: Optional[Path] = CaOpt,
    no_smoke_test: bool = typer.Option(False, "--no-smoke-test", help="Tag without serving the samples first."),
    model_repository: Optional[Path] = typer.Option(
        None, "--model-repository", help="Smoke-test these models instead of the samples: each must reach READY."
    ),
    push: Optional[str] = typer.Option(None, "--push", help="Push the image as REF once its smoke test passed."),
    registry_auth: Optional[str] = RegistryAuthOpt,
    locked: bool = typer.Option(False, "--locked", help="Build from the digests in the set's lock file."),
    junit: Optional[Path] = typer.Option(None, "--junit", help="Write smoke-test results as JUnit XML."),
    bundle: Optional[Path] = typer.Option(
        None, "--bundle", help="Build from a bundle made by composer bundle: no registry, no network."
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Compose, build and smoke-test a slim image; tag (and push) it only once it serves."""
    from composer.jobs import Job, jobs_from_sets

    out = Printer(as_json)
    catalog = Catalog.load()
    if version:
        catalog.release(version)
    if bundle is not None:
        if set_files or backend or version or image or custom_backend or backend_image or pip or requirements \
                or wheelhouse or locked:
            raise UsageError("--bundle carries its own selection: give only --tag, --push, --no-smoke-test, "
                             "--junit or --json with it")
        _build_from_bundle(out, bundle, catalog, tag=tag, push=push, smoke=not no_smoke_test,
                           model_repository=model_repository, registry_auth=registry_auth, junit=junit)
        return
    if set_files:
        if len(set_files) > 1 and (tag or push):
            raise UsageError("--tag and --push name one image: with several --set files, put them in the sets")
        overrides = set_overrides(
            backend=backend, repoagent=repoagent, cache=cache, version=version, registry=registry, image=image,
            custom_backend=custom_backend, backend_image=backend_image, with_headers=with_headers, tag=tag,
            pip=pip, requirements=requirements, index_url=pip_index_url, extra_index_url=pip_extra_index_url,
            trusted_host=pip_trusted_host, wheelhouse=wheelhouse, ca_cert=ca_cert,
            model_repository=model_repository, push=push, no_smoke_test=no_smoke_test,
        )
        jobs = jobs_from_sets(set_files, overrides)
    else:
        packages = package_options(pip, requirements, pip_index_url, pip_extra_index_url, pip_trusted_host,
                                   wheelhouse, ca_cert)
        options = build_options(backend, repoagent, cache, version, registry, image, custom_backend, with_headers,
                                tag, packages, backend_image)
        if not options.version and not options.full_image:
            raise UsageError("give --version YY.MM (or --image full=REF), or a backend set with --set")
        if locked:
            raise UsageError("--locked needs a backend set (--set FILE) with a lock file beside it")
        jobs = [Job("command line", options, not no_smoke_test, model_repository, push)]
    _run_jobs(out, _engine(), jobs, catalog, locked=locked, registry_auth=registry_auth, junit=junit)


def _build_from_bundle(out: Printer, archive: Path, catalog, *, tag, push, smoke, model_repository, registry_auth,
                       junit) -> None:
    import dataclasses
    import shutil
    import tempfile

    from composer.bundle import open_bundle
    from composer.jobs import Job

    engine = _engine()
    workdir = Path(tempfile.mkdtemp(prefix="triton-composer-bundle-"))
    try:
        opened = open_bundle(engine, archive, workdir, on_line=out.step)
        options = dataclasses.replace(opened.options, tag=tag or opened.options.tag)
        job = Job(archive.name, options, smoke and opened.smoke_test, model_repository, push,
                  inspection=opened.inspection)
        _run_jobs(out, engine, [job], catalog, locked=False, registry_auth=registry_auth, junit=junit)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _run_jobs(out: Printer, engine, jobs, catalog, *, locked: bool, registry_auth: Optional[str],
              junit: Optional[Path]) -> None:
    """Run every job; with several, a failure does not stop the others but fails the command."""
    from composer.jobs import Outcome, junit_entries, run_job
    from composer.junit import write_junit
    from composer.registry import load_auth, push_image

    auth = load_auth(registry_auth)

    def push(image_ref: str, target: str) -> str:
        out.step(f"pushing {target}")
        digest = push_image(engine, image_ref, target, auth=auth, on_line=out.step)
        out.step(f"pushed {target}@{digest}")
        return digest

    def show_plan(plan) -> None:
        for note in plan.notes:
            out.step(f"note: {note}")
        out.step(f"composing {plan.tag}: backends {', '.join(plan.all_backends)}")

    outcomes = []
    try:
        for job in jobs:
            if len(jobs) > 1:
                out.step(f"== {job.name} ==")
            try:
                outcome = run_job(engine, job, catalog, locked=locked, push=push, on_line=out.step,
                                  on_build_line=out.build_line, on_plan=show_plan)
            except ComposerError as error:
                if isinstance(error, SmokeTestFailed):
                    out.smoke_failure(error.report, error.log_tail)
                outcomes.append(Outcome(job, error=error))
                if len(jobs) == 1:
                    raise
                typer.secho(f"error: {job.name}: {error.message}", err=True, fg="red")
                continue
            outcomes.append(outcome)
    finally:
        if junit is not None:
            write_junit(junit_entries(outcomes), junit)

    def describe(outcome) -> str:
        if outcome.error is not None:
            return f"{outcome.job.name}: FAILED: {outcome.error.message}"
        result = outcome.result
        lines = [smoke_table(result.smoke)] if result.smoke else []
        lines.append(f"{result.tag}  {result.image_id[:19]}  {human_size(result.size)}")
        if outcome.pushed:
            lines.append(f"pushed {outcome.pushed[0]}@{outcome.pushed[1]}")
        return "\n".join(lines)

    payload = outcomes[0].to_dict() if len(outcomes) == 1 else {"images": [o.to_dict() for o in outcomes]}
    out.result(payload, "\n\n".join(describe(o) for o in outcomes))
    failed = [o for o in outcomes if o.error is not None]
    if failed:
        raise ComposerError(f"{len(failed)} of {len(outcomes)} images failed: {', '.join(o.job.name for o in failed)}")


@app.command()
@reports_errors
def lock(
    set_files: List[str] = typer.Option(..., "--set", "-s", help="Backend set(s) to lock (repeatable)."),
    as_json: bool = JsonOpt,
) -> None:
    """Resolve a set's base images to digests into a lock file beside it (for --locked builds)."""
    from composer.jobs import jobs_from_sets, lock_job

    out = Printer(as_json)
    catalog = Catalog.load()
    engine = _engine()
    locks = [lock_job(engine, job, catalog, out.step) for job in jobs_from_sets(set_files, {})]
    out.result(
        {"locks": [{"path": str(l.path), "images": [i.record() for i in l.images]} for l in locks]},
        "\n".join(f"wrote {l.path}: " + ", ".join(f"{i.role} {i.digest[:19]}" for i in l.images) for l in locks),
    )


@app.command()
@reports_errors
def mirror(
    version: str = typer.Option(..., "--version", "-v", help="Release to mirror, YY.MM."),
    to: str = typer.Option(..., "--to", help="Registry prefix to copy into, e.g. harbor.example/nvidia."),
    source: str = typer.Option(DEFAULT_REGISTRY, "--from", help="Registry prefix to copy from."),
    registry_auth: Optional[str] = RegistryAuthOpt,
    source_auth: Optional[str] = typer.Option(
        None, "--source-auth", help="Credentials for --from: file:PATH or env:NAME (user:password)."
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Copy a release's full and min images into a private registry; only what is missing moves."""
    from composer.registry import load_auth, mirror_release

    out = Printer(as_json)
    release = Catalog.load().release(version)
    auth, src_auth = load_auth(registry_auth), load_auth(source_auth)
    engine = _engine()
    result = mirror_release(engine, release, source=source, dest=to, auth=auth, source_auth=src_auth,
                            on_line=out.step)
    out.result(
        result.to_dict(),
        "\n".join(f"{'moved' if i.moved else 'present'}  {i.dest}@{i.digest}" for i in result.images),
    )


@app.command()
@reports_errors
def bundle(
    output: Path = typer.Option(..., "--output", "-o", help="The bundle archive to write (.tar)."),
    backend: List[str] = BackendOpt,
    repoagent: List[str] = RepoagentOpt,
    cache: List[str] = CacheOpt,
    version: Optional[str] = VersionOpt,
    registry: Optional[str] = RegistryOpt,
    image: List[str] = ImageOpt,
    custom_backend: List[str] = CustomOpt,
    backend_image: List[str] = BackendImageOpt,
    with_headers: bool = HeadersOpt,
    tag: Optional[str] = TagOpt,
    pip: List[str] = PipOpt,
    requirements: List[Path] = RequirementsOpt,
    wheelhouse: Optional[Path] = WheelhouseOpt,
    no_smoke_test: bool = typer.Option(False, "--no-smoke-test", help="Builds from the bundle skip the smoke test."),
    as_json: bool = JsonOpt,
) -> None:
    """Write one archive with everything a build needs, for a machine that reaches no registry."""
    from composer.bundle import write_bundle
    from composer.pipeline import check_packages, inspect_images, plan_from_inspection

    out = Printer(as_json)
    packages = package_options(pip, requirements, None, [], [], wheelhouse, None)
    options = build_options(
        backend, repoagent, cache, version, registry, image, custom_backend, with_headers, tag, packages,
        backend_image,
    )
    catalog = Catalog.load()
    if options.version:
        catalog.release(options.version)
    engine = _engine()
    inspection = inspect_images(engine, options, catalog, on_line=out.step)
    plan = plan_from_inspection(options, catalog, inspection)
    check_packages(engine, plan, inspection.contents, out.step)
    path = write_bundle(engine, plan, options, inspection, output, smoke_test=not no_smoke_test, on_line=out.step)
    size = path.stat().st_size
    out.result({"bundle": str(path), "size": size, "tag": plan.tag, "backends": list(plan.all_backends)},
               f"wrote {path} ({human_size(size)}); on the other side: composer build --bundle {path.name}")


@app.command()
@reports_errors
def render(
    output: Path = typer.Option(..., "--output", "-o", help="Folder for the Dockerfile and build context."),
    backend: List[str] = BackendOpt,
    repoagent: List[str] = RepoagentOpt,
    cache: List[str] = CacheOpt,
    version: Optional[str] = VersionOpt,
    registry: Optional[str] = RegistryOpt,
    image: List[str] = ImageOpt,
    custom_backend: List[str] = CustomOpt,
    backend_image: List[str] = BackendImageOpt,
    with_headers: bool = HeadersOpt,
    tag: Optional[str] = TagOpt,
    pip: List[str] = PipOpt,
    requirements: List[Path] = RequirementsOpt,
    pip_index_url: Optional[str] = IndexOpt,
    pip_extra_index_url: List[str] = ExtraIndexOpt,
    pip_trusted_host: List[str] = TrustedOpt,
    wheelhouse: Optional[Path] = WheelhouseOpt,
    ca_cert: Optional[Path] = CaOpt,
    offline: bool = typer.Option(
        False, "--offline", help="Do not ask an engine: check the selection against NGC's catalogued layout."
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Write the Dockerfile and build context only (no build)."""
    from composer.pipeline import plan_from_catalog, plan_from_engine
    from composer.render import write_context

    out = Printer(as_json)
    packages = package_options(pip, requirements, pip_index_url, pip_extra_index_url, pip_trusted_host, wheelhouse, ca_cert)
    options = build_options(
        backend, repoagent, cache, version, registry, image, custom_backend, with_headers, tag, packages,
        backend_image,
    )
    catalog = Catalog.load()
    if options.version:
        catalog.release(options.version)
    engine = None
    if not offline:
        try:
            engine = _engine()
        except EngineUnavailable:
            if not options.version:
                raise
            out.step("no Docker engine answers: checking the selection against NGC's catalogued layout")
    plan = None
    if engine is not None:
        try:
            plan, _ = plan_from_engine(engine, options, catalog, on_line=out.step)
        except ImageNotFound as missing:
            if not options.version:
                raise
            out.step(f"{missing.message}: checking the selection against NGC's catalogued layout instead")
    if plan is None:
        plan = plan_from_catalog(options, catalog)
    for note in plan.notes:
        out.step(f"note: {note}")
    context = write_context(plan, output)
    if packages.build_args():
        names = " ".join(f"--build-arg {name}" for name in sorted(packages.build_args()))
        out.step(f"note: pass the package index at build time: docker build {names} ... (values from your environment)")
    out.result(
        {"dockerfile": str(context.dockerfile), "context": str(context.directory), "tag": plan.tag,
         "composition": plan.record()},
        f"wrote {context.dockerfile} (build with: docker build -t {plan.tag} {context.directory})",
    )


@app.command("smoke-test")
@reports_errors
def smoke_test_command(
    image_ref: str = typer.Argument(..., metavar="IMAGE", help="The image to smoke-test."),
    model_repository: Optional[Path] = typer.Option(
        None, "--model-repository", help="Serve these models instead of the samples: each must reach READY."
    ),
    backend: List[str] = typer.Option(
        [], "--backend", "-b", help="Backends the image must hold (default: those its composition record names)."
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Serve the samples (or your models) from IMAGE and check the answers."""
    from composer.smoke import SmokeOptions, smoke_test

    out = Printer(as_json)
    engine = _engine()
    info = engine.require_image(image_ref, on_line=out.step)
    backends = tuple(backend) or tuple(b for b in info.labels.get("org.triton-composer.backends", "").split(",") if b)
    if not backends:
        raise UsageError(f"{image_ref} has no composition label: name its backends with --backend")
    options = SmokeOptions(
        backends=backends,
        server_version=info.env.get("TRITON_SERVER_VERSION"),
        model_repository=model_repository,
    )
    report = smoke_test(engine, info.id, options, on_line=out.step)
    if not report.passed:
        out.smoke_failure(report, report.log_tail)
        failed = ", ".join(r.subject for r in report.failures())
        raise SmokeTestFailed(f"smoke test of {image_ref} failed ({failed})", report=report)
    out.result(report.to_dict(), smoke_table(report))


@app.command()
@reports_errors
def backends(
    version: Optional[str] = VersionOpt,
    registry: Optional[str] = RegistryOpt,
    image: List[str] = ImageOpt,
    as_json: bool = JsonOpt,
) -> None:
    """List what a full image offers (backends, repo agents, caches) with their sizes."""
    from composer.contents import inspect_full
    from composer.pipeline import base_refs

    out = Printer(as_json)
    options = build_options([], [], [], version, registry, image, [], False, None)
    catalog = Catalog.load()
    if options.version:
        catalog.release(options.version)
    engine = _engine()
    full_ref, _ = base_refs(options, catalog, engine)
    engine.require_image(full_ref, on_line=out.step)
    contents = inspect_full(engine, full_ref)
    rows = [("KIND", "NAME", "SIZE", "NOTE")]
    payload = {"image": full_ref, "core_size": contents.core_size, "components": []}
    for c in contents.components:
        need_bytes = sum(n.size for n in c.needs)
        note = "python-based" if c.python_based else ""
        rows.append((c.kind, c.name, human_size(c.size), note))
        payload["components"].append(
            {"kind": c.kind, "name": c.name, "size": c.size, "python_based": c.python_based,
             "needs_bytes": need_bytes}
        )
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    table = "\n".join(f"{r[0].ljust(widths[0])}  {r[1].ljust(widths[1])}  {r[2].rjust(widths[2])}  {r[3]}" for r in rows)
    out.result(payload, f"{full_ref}: core {human_size(contents.core_size)}\n{table}")


@app.command()
@reports_errors
def wheels(
    output: Path = typer.Option(..., "--output", "-o", help="Folder to fill with wheels (the wheelhouse)."),
    backend: List[str] = BackendOpt,
    version: Optional[str] = VersionOpt,
    registry: Optional[str] = RegistryOpt,
    image: List[str] = ImageOpt,
    pip: List[str] = PipOpt,
    requirements: List[Path] = RequirementsOpt,
    pip_index_url: Optional[str] = IndexOpt,
    pip_extra_index_url: List[str] = ExtraIndexOpt,
    pip_trusted_host: List[str] = TrustedOpt,
    ca_cert: Optional[Path] = CaOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Download on this machine the wheels a build's packages need, so the build runs offline."""
    from composer.packages import download_wheels, python_target
    from composer.pipeline import plan_from_engine

    out = Printer(as_json)
    packages = package_options(pip, requirements, pip_index_url, pip_extra_index_url, pip_trusted_host, None, ca_cert)
    if not packages:
        raise UsageError("name the packages with --pip SPEC or --requirements FILE")
    options = build_options(backend or ["python"], [], [], version, registry, image, [], False, None, packages)
    catalog = Catalog.load()
    if options.version:
        catalog.release(options.version)
    engine = _engine()
    plan, contents = plan_from_engine(engine, options, catalog, on_line=out.step)
    target = python_target(engine, plan.full.ref, contents.python.version)
    out.step(f"wheels for python {target.version} on {target.platform}, pins: {', '.join(plan.constraints) or 'none'}")
    files = download_wheels(target, packages, plan.constraints, output, on_line=out.step)
    out.result(
        {"wheelhouse": str(output), "python": target.version, "platform": target.platform,
         "wheels": [f.name for f in files]},
        f"{len(files)} wheels in {output} (build with --wheelhouse {output})",
    )


@app.command()
@reports_errors
def standin(
    version: str = typer.Option("24.09", "--version", "-v", help="Release to stand in for (24.07 ... 24.10)."),
    force: bool = typer.Option(False, "--force", help="Rebuild even if the images are present."),
    as_json: bool = JsonOpt,
) -> None:
    """Build local stand-ins of NGC's full and min images, with a real Triton server inside."""
    from composer.standin import build_standins

    out = Printer(as_json)
    release = Catalog.load().release(version)
    engine = _engine()
    result = build_standins(engine, release, force=force, on_line=out.build_line)
    payload = {"full": result.full_ref, "min": result.min_ref}
    out.result(payload, f"{result.full_ref}\n{result.min_ref}")


@app.command("version")
@reports_errors
def version_command() -> None:
    """Print the composer's version."""
    typer.echo(__version__)


def main() -> None:
    app()
