"""BuildKit as the composer's builder (--builder buildkit://ADDR): the rendered Dockerfile solved by
a buildkitd through buildctl, the stages the composer reads loaded into the engine that runs the
image (Docker or Podman), so everything after the build is the same whichever builder built it.

The engine's images a Dockerfile names (`--registry localhost/standin`: images the engine holds,
not a registry) reach BuildKit as named contexts from an OCI layout of the engine's own layers
(composer.engine.oci_layout), byte for byte the engine's, so the composer's layers and image id
do not depend on the builder. An image the engine lacks is BuildKit's to pull.

Docker's builder leaves each stage as an image; BuildKit leaves only what is exported. So each
stage whose last step is the composer's stage label is solved as a target of its own (BuildKit's
cache makes every solve after the first cheap) and loaded without the layers the engine holds
already (the bases'): the engine loads a layer it lacks only. The stages are exported as an OCI
layout into a folder of the build's own that holds the bases' layers already (links to the
layout's blobs): BuildKit sends only the blobs the folder lacks, not the whole stage (a stage on
the full image was the full image sent again, each stage, each build).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from composer.core import interrupts
from composer.core.errors import BuildFailed, EngineUnavailable, UsageError
from composer.core.progress import LineSink, quiet
from composer.engine import locks, oci_layout
from composer.engine.archives import LoadArchive
from composer.engine.errors import lost_layer
from composer.engine.interface import STAGE_LABEL, Engine

SCHEME = "buildkit://"
_NOISE = 'msg="failed check for fsverity support"'  # buildctl's warning on every OCI layout: not the build's
_STEP = re.compile(r"^#\d+ (\d+\.\d+ )?")  # buildctl's plain progress: "#12 0.345 the step's own line"
_FROM = re.compile(r"^FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?\s*$", re.IGNORECASE)
_ARG = re.compile(r"^ARG\s+([A-Za-z_][A-Za-z0-9_]*)(?:=(\S*))?\s*$", re.IGNORECASE)
_VAR = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")
_USES = re.compile(r"(?:^|[\s,])--(?:mount=\S*?)?from=([^\s,]+)")  # COPY --from=X, RUN --mount=...,from=X


def address_of(builder: str, environ: Mapping[str, str] = os.environ) -> str:
    """The buildkitd address of a --builder value: buildkit://unix:///PATH, buildkit://tcp://HOST:PORT,
    buildkit://docker-container://NAME, or buildkit (BUILDKIT_HOST's, as buildctl reads it)."""
    if builder == "buildkit":
        address = environ.get("BUILDKIT_HOST", "")
        if not address:
            raise UsageError("--builder buildkit: BUILDKIT_HOST is not set (give buildkit://unix:///PATH, "
                             "buildkit://tcp://HOST:PORT or buildkit://docker-container://NAME)")
        return address
    return builder[len(SCHEME):]


def buildctl() -> str:
    """buildctl from PATH, else the one scripts/go-tools built into the machine's cache."""
    found = shutil.which("buildctl")
    if found:
        return found
    built = sorted((locks.cache_dir() / "tools").glob("buildctl-*/buildctl"))
    if built:
        return str(built[-1])
    raise UsageError("--builder buildkit: buildctl is not installed (put it on PATH, or run scripts/go-tools buildctl)")


@dataclass(frozen=True)
class Stage:
    name: str
    base: str  # what FROM names, build arguments expanded
    labelled: bool  # its last step is the composer's stage label
    uses: tuple[str, ...] = ()  # what its steps copy or mount --from (stage names or images)


def needed(stages: Sequence[Stage], target: str) -> set[str]:
    """The stages a solve of `target` runs: it, its FROM and what its steps take --from, transitively."""
    by_name = {s.name: s for s in stages if s.name}
    found: set[str] = set()
    todo = [target]
    while todo:
        stage = by_name.get(todo.pop())
        if stage is not None and stage.name not in found:
            found.add(stage.name)
            todo += [stage.base, *stage.uses]
    return found


def cache_name(dockerfile: str, buildargs: Mapping[str, str]) -> str:
    """The registry cache's tag for a Dockerfile (one per stage under it): what its steps are, its
    text and arguments less its LABEL lines. A label is the image's configuration, in no step's cache
    key, and the composer's name a run or a build's key: every run of a pruned base would otherwise
    export to a tag of its own, and a fresh builder would never find another run's steps."""
    steps = [line for line in dockerfile.splitlines() if not line.lstrip().upper().startswith("LABEL ")]
    return hashlib.sha256(json.dumps(["\n".join(steps), sorted(buildargs.items())]).encode()).hexdigest()[:16]


def fresh_options(stages: Sequence[Stage], made: set[str]) -> list[str]:
    """What keeps a --no-cache build's solve off the build cache. Each labelled stage is a solve of
    its own: the first runs every step afresh; each later one only the stages no earlier solve of
    the run made (the frontend's no-cache list), so a stage runs once per run, not once per solve
    (--no-cache on each of a pruned base's 15 solves ran the whole chain 15 times). An unnamed
    stage cannot be listed: the last one's steps may then come from the cache, keyed by the
    content they copy."""
    if not made:
        return ["--no-cache"]
    names = [s.name for s in stages if s.name and s.name not in made]
    return ["--opt", "no-cache=" + ",".join(names)] if names else []


def stages_of(dockerfile: str, buildargs: Mapping[str, str]) -> list[Stage]:
    """The Dockerfile's stages in order (line continuations joined), ARGs before the first FROM and
    the build's arguments expanded in FROM."""
    lines = re.sub(r"\\\n", " ", dockerfile).splitlines()
    globals_: dict[str, str] = {}
    stages: list[list] = []
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        arg = _ARG.match(line)
        if arg and not stages:
            globals_[arg.group(1)] = buildargs.get(arg.group(1), arg.group(2) or "")
            continue
        found = _FROM.match(line)
        if found:
            base = _VAR.sub(lambda m: buildargs.get(m.group(1), globals_.get(m.group(1), "")), found.group(1))
            stages.append([found.group(2) or "", base, None, []])  # "": no name (only the last can be built)
        elif stages:
            stages[-1][2] = line
            stages[-1][3] += _USES.findall(line)
    return [Stage(name, base, bool(last) and last.upper().startswith("LABEL") and STAGE_LABEL in last,
                  tuple(dict.fromkeys(uses))) for name, base, last, uses in stages]


class BuildKit:
    """A buildkitd the composer builds with; the engine runs (and holds) what it builds."""

    def __init__(self, builder: str, runtime: Engine, cache: str | None = None, tls: Path | None = None):
        self.address = address_of(builder)
        self.runtime = runtime
        self.cache = cache  # a repository for BuildKit's registry cache (export and import), or None
        # buildctl's global options: the address, and over tcp:// the client's TLS files (their folder).
        self.connection = ["--addr", self.address,
                           *(("--tlsdir", str(tls)) if tls and self.address.startswith("tcp://") else ())]

    def where(self) -> str:
        return f"BuildKit at {self.address}"

    def check(self) -> None:
        """It answers (buildctl debug workers), before any work."""
        try:
            done = subprocess.run([buildctl(), *self.connection, "debug", "workers"], capture_output=True,
                                  text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise EngineUnavailable(f"no BuildKit answers at {self.address}: {error}") from None
        if done.returncode != 0:
            why = (done.stderr.strip().splitlines() or ["no answer"])[-1]
            raise EngineUnavailable(f"no BuildKit answers at {self.address}: {why[:300]}")

    def answers(self) -> bool:
        """Whether it answers now (check()'s question, as a yes or no: a builder gone mid-run)."""
        try:
            self.check()
            return True
        except EngineUnavailable:
            return False

    def records(self) -> list[CacheRecord]:
        """Every record of its build cache (buildctl du)."""
        return [CacheRecord(str(r.get("id")), str(r.get("description") or ""), int(r.get("size") or 0),
                            bool(r.get("inUse")), str(r.get("createdAt") or ""), r.get("lastUsedAt"),
                            tuple(r.get("parents") or ()))
                for r in self._json("du", "--verbose")]

    def prune(self, ids: Sequence[str]) -> tuple[int, int]:
        """Remove these records where nothing uses them (buildctl prune; its filters are alternatives):
        how many went and their bytes. A record another stands on goes once that one went: passes
        until none goes."""
        count, freed, left = 0, 0, list(ids)
        for _ in range(16):
            gone = []
            for start in range(0, len(left), 50):
                filters = [x for i in left[start:start + 50] for x in ("--filter", f"id=={i}")]
                pruned = self._json("prune", *filters)
                freed += sum(int(r.get("size") or 0) for r in pruned)
                gone += [str(r.get("id")) for r in pruned]
            if not gone:
                break
            count += len(gone)
            left = [i for i in left if i not in set(gone)]
        return count, freed

    def _json(self, command: str, *options: str) -> list[dict]:
        try:
            done = subprocess.run([buildctl(), *self.connection, command, *options, "--format", "{{json .}}"],
                                  capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise EngineUnavailable(f"no BuildKit answers at {self.address}: {error}") from None
        if done.returncode != 0:
            why = (done.stderr.strip().splitlines() or ["no answer"])[-1]
            raise EngineUnavailable(f"buildctl {command} at {self.address} failed: {why[:300]}")
        found = []
        for line in done.stdout.splitlines():
            if line.strip():
                value = json.loads(line)  # a list, one record, or null (no record at all)
                found += value if isinstance(value, list) else [value] if isinstance(value, dict) else []
        return found

    def build(self, context: Path, *, dockerfile: str = "Dockerfile", tag: str | None = None,
              labels: Mapping[str, str] | None = None, network_mode: str | None = None,
              buildargs: Mapping[str, str] | None = None, nocache: bool = False,
              redact: Callable[[str], str] = lambda line: line, on_line: LineSink = quiet,
              target: str | None = None) -> str:
        """Solve `context`; load each labelled stage before `target` (or the last) and it into the
        engine. The target's id."""
        buildargs = dict(buildargs or {})
        stages = stages_of((context / dockerfile).read_text(), buildargs)
        if not stages:
            raise BuildFailed(f"the builder found no stage in {context / dockerfile}")
        names = {s.name for s in stages}
        options = ["--frontend", "dockerfile.v0", "--local", f"context={context}", "--local", f"dockerfile={context}",
                   "--opt", f"filename={dockerfile}", "--progress", "plain"]
        if network_mode == "none":
            options += ["--opt", "force-network-mode=none"]
        options += [x for k, v in sorted(buildargs.items()) for x in ("--opt", f"build-arg:{k}={v}")]
        options += [x for k, v in sorted((labels or {}).items()) for x in ("--opt", f"label:{k}={v}")]
        held: set[str] = set()  # layers the engine has: left out of what is loaded (not for Podman)
        handed: set[str] = set()  # the bases' layers, in the layout: BuildKit need not send them back
        store = None
        for base in dict.fromkeys(s.base for s in stages if s.base not in names and s.base != "scratch"):
            info = self.runtime.image(base)
            if info is None:
                continue  # BuildKit pulls it
            layout = oci_layout.ensure(self.runtime, base, on_line)
            store = layout.folder
            options += ["--opt", f"context:{base}=oci-layout://engine@{layout.manifest}"]
            handed.update(info.layers)
            if self.runtime.loads_partial_archives:
                held.update(info.layers)
        if store is not None:
            options += ["--oci-layout", f"engine={store}"]
        if target is not None and target not in names:
            raise BuildFailed(f"the builder found no stage {target} in {context / dockerfile}")
        end = next(i for i, s in enumerate(stages) if s.name == target) if target is not None else len(stages) - 1
        targets = [s.name for s in stages[:end] if s.labelled and s.name] + [stages[end].name]
        what = cache_name((context / dockerfile).read_text(), buildargs)
        with _exports(store, handed) as export:
            return self._solve_all(options, stages, targets, what, export, held, tag, nocache, redact, on_line)

    def _solve_all(self, options: list[str], stages: Sequence[Stage], targets: Sequence[str], what: str, export: Path,
                   held: set[str], tag: str | None, nocache: bool, redact: Callable[[str], str],
                   on_line: LineSink) -> str:
        """Each target solved and loaded in turn (build's steps, into the export folder). The last's id."""
        image_id = ""
        made: set[str] = set()  # the stages this run's solves ran so far
        loaded: set[str] = set()  # layers this run's earlier solves loaded into the engine
        for index, stage in enumerate(targets):
            last = index == len(targets) - 1
            shared: list[str] = []
            if self.cache:
                ref = f"{self.cache}:{what}-{stage or 'last'}"
                shared = ["--import-cache", f"type=registry,ref={ref}", "--export-cache",
                          f"type=registry,ref={ref},mode=max"]
            cached = (fresh_options(stages, made) if nocache else []) + shared
            try:
                image_id = self._solve([*options, *cached], stage, tag if last else None, held | loaded, redact,
                                       on_line, export)
            except BuildFailed as error:
                if not loaded or not lost_layer(error.message):
                    raise
                # A layer an earlier stage brought went from the engine meanwhile (its image removed
                # by another run): this stage is loaded with every layer it has.
                on_line(f"note: a layer loaded for an earlier stage went from the engine; loading "
                        f"{stage or 'the last'} whole")
                loaded.clear()
                image_id = self._solve([*options, *cached], stage, tag if last else None, held, redact, on_line,
                                       export)
            made |= needed(stages, stage)
            if nocache and shared:
                # BuildKit exports no record of a solve's last step that ignored the cache that
                # another builder can use (each family stage's step ran again on the next runner):
                # solved again from this builder's own cache, its records exported as hits.
                self._solve([*options, *shared], stage, None, set(), redact, on_line, export, load=False)
            if self.runtime.loads_partial_archives and not last:
                # Each stage's image is loaded whole but for what the engine has: the family stages
                # of a pruned base all stand on its split stage, which went 14 times before.
                info = self.runtime.image(image_id)
                loaded.update(info.layers if info else ())
        return image_id

    def _solve(self, options: list[str], target: str, tag: str | None, held: set[str],
               redact: Callable[[str], str], on_line: LineSink, export: Path, load: bool = True) -> str:
        """One target solved, exported into `export` (an OCI layout: BuildKit sends the blobs it
        lacks) and loaded into the engine without the layers of `held`. Its id. Without `load`,
        only solved (and its cache exported, if asked): no output, no id."""
        with tempfile.TemporaryDirectory(prefix="triton-composer-buildkit-") as folder:
            metadata = Path(folder) / "metadata.json"
            output = f"type=oci,dest={export},tar=false,compression=uncompressed"
            command = [buildctl(), *self.connection, "build", *options,
                       *(("--opt", f"target={target}") if target else ()),  # no name: the last stage, the default
                       *(("--metadata-file", str(metadata), "--output", output) if load else ())]
            tail: list[str] = []

            def said(line: str) -> None:
                shown = _STEP.sub("", redact(line.rstrip()))
                if shown.strip() and _NOISE not in shown:
                    tail.append(shown)
                    del tail[:-40]
                    on_line(shown)

            process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            reader = threading.Thread(target=lambda: [said(b.decode(errors="replace")) for b in process.stderr],
                                      daemon=True)
            reader.start()
            ended = threading.Event()

            def watch() -> None:  # on a worker thread the signal never arrives: the run's stop does
                while not ended.wait(0.5):
                    if interrupts.STOPPING.is_set():
                        _stop(process)
                        return

            threading.Thread(target=watch, daemon=True).start()
            try:
                process.wait()
            except BaseException:  # an interrupt: the solve is cancelled (buildctl cancels it on SIGINT)
                _stop(process)
                raise
            finally:
                ended.set()
                reader.join(timeout=30)
            interrupts.check()
            if process.returncode != 0:
                error = next((line for line in reversed(tail) if line.startswith("error:") or "ERROR" in line),
                             tail[-1] if tail else "buildctl failed")
                raise BuildFailed(f"the build failed on {self.where()}: {error.removeprefix('error: ')[:400]}",
                                  log_tail="\n".join(tail))
            if not load:
                return ""
            result = json.loads(metadata.read_text())
        image_id = str(result.get("containerimage.config.digest", ""))
        what = f"the builder's stage {target or 'last'}"
        archive = _docker_archive(export, str(result.get("containerimage.digest", "")), tag, held, what)
        try:
            self.runtime.load_stream(archive, what)
        finally:
            archive.close()
        if not image_id or self.runtime.image(image_id) is None:
            raise BuildFailed(f"the builder's stage {target or 'last'} ({image_id[:19] or 'no id'}) is not on the engine after "
                              "loading it")
        return image_id


@dataclass(frozen=True)
class CacheRecord:
    """One record of BuildKit's build cache (buildctl du)."""

    id: str
    description: str
    size: int
    in_use: bool
    created: str
    last_used: str | None
    parents: tuple[str, ...] = ()


def composers(records: Sequence[CacheRecord], stages: Iterable[str], handed: set[str]) -> list[CacheRecord]:
    """The records the composer's builds made: a step of one of its stages ("[collect 2/3] COPY ..."),
    an engine image it handed over ("pulled from REF@DIGEST", DIGEST in its OCI layout), and what
    stands on those (a RUN step's record reads "mount / from exec ...")."""
    names = [re.escape(s[:-1]) + r"[A-Za-z0-9_.-]+" if s.endswith("*") else re.escape(s) for s in sorted(stages)]
    step = re.compile(r"^\[(?:%s) \d+/\d+\] " % "|".join(names))
    mine = {r.id for r in records if step.match(r.description) or
            (r.description.startswith("pulled from ") and r.description.rpartition("@")[2] in handed)}
    grown = True
    while grown:
        more = {r.id for r in records if r.id not in mine and set(r.parents) & mine}
        mine |= more
        grown = bool(more)
    return [r for r in records if r.id in mine]


def _stop(process: subprocess.Popen) -> None:
    """Cancel a solve: buildctl cancels it on SIGINT; killed if it has not ended in 30 s."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def _exports(store: Path | None, handed: set[str]):
    """A folder for a build's exports (an OCI layout; removed after), holding links to the layout's
    blobs of the bases' layers: BuildKit's export skips a blob the folder has. Beside the layout,
    so links can be made; where one cannot (another file system), the folder starts empty and
    BuildKit sends those layers too."""
    where = store.parent if store is not None else None
    folder = Path(tempfile.mkdtemp(prefix=".buildkit-export-", dir=where))
    try:
        blobs = folder / "blobs" / "sha256"
        blobs.mkdir(parents=True)
        for diff_id in sorted(handed) if store is not None else ():
            name = diff_id.split(":", 1)[1]
            try:
                os.link(store / "blobs" / "sha256" / name, blobs / name)
            except FileNotFoundError:
                continue
            except OSError:
                break
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _manifest(export: Path, digest: str, what: str) -> dict:
    """The image manifest `digest` names in the export folder (the platform's, if it is an index)."""
    try:
        document = json.loads((export / "blobs" / "sha256" / digest.split(":", 1)[-1]).read_text())
        if "manifests" in document:
            chosen = next(m for m in document["manifests"]
                          if (m.get("annotations") or {}).get("vnd.docker.reference.type") != "attestation-manifest")
            return _manifest(export, chosen["digest"], what)
        return document
    except (OSError, ValueError, KeyError, StopIteration):
        raise BuildFailed(f"cannot load {what}: the builder exported no readable manifest ({digest[:19] or 'no digest'})") from None


def _docker_archive(export: Path, digest: str, tag: str | None, held: set[str], what: str):
    """The image `digest` of the export folder as an engine's load archive, streamed from a thread
    (composer.engine.archives.LoadArchive): its configuration, the layers not in `held`
    (the engine has those: named, not sent) and a manifest naming `tag`. A file to read it from."""
    manifest = _manifest(export, digest, what)
    blobs = export / "blobs" / "sha256"
    config = manifest["config"]["digest"].split(":", 1)[1]
    layers = [layer["digest"].split(":", 1)[1] for layer in manifest.get("layers", ())]
    named = json.dumps([{"Config": f"{config}.json", "RepoTags": [tag] if tag else None,
                         "Layers": [f"{name}/layer.tar" for name in layers]}]).encode()
    skip = {d.split(":", 1)[1] for d in held}
    reader, writer = os.pipe()

    def write() -> None:
        try:
            with os.fdopen(writer, "wb") as out:
                archive = LoadArchive(out)
                archive.file(f"{config}.json", blobs / config)
                for name in dict.fromkeys(layers):
                    if name not in skip:
                        archive.file(f"{name}/layer.tar", blobs / name)
                archive.data("manifest.json", named)
                archive.end()
        except (OSError, ValueError):
            pass  # the engine stopped reading, or the archive ended early: the load's error says why

    threading.Thread(target=write, daemon=True).start()
    return os.fdopen(reader, "rb")
