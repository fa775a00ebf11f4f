"""Per-model python environments: a python model's own packages, beside the image's python.

Teams serve models whose pins collide (one needs a package at 0.8, another at 0.9) in one image.
Triton's python backend answers this with a per-model environment named by the model's
configuration (EXECUTION_ENV_PATH). The composer builds one for each python model that carries a
requirements.txt (in the baked repository, or named with --model-env MODEL=FILE): a venv of the
stub's own python that also sees the image's packages (numpy as the image has it, unless the
model pins its own), filled at build time from wheels fetched on the host, with no network.

Form: since server 2.36.0 (23.07) the python backend takes a folder as it is (pb_env.cc returns a
directory's path unchanged) and unpacks only archives, into /tmp, at every start. Every release
the catalog knows takes a folder, so environments are stored unpacked: nothing to unpack when
the server starts (benchmarks/model_envs.py measures the difference).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from composer.core.errors import UsageError
from composer.config.requirements import public_requirement, read_requirement_file

ENVS_ROOT = "/opt/tritonserver/model_envs"
REQUIREMENTS = "requirements.txt"
CONFIG = "config.pbtxt"
FORM = "directory"  # how environments are stored (see the module's docstring)
ENV_KEY = "EXECUTION_ENV_PATH"


@dataclass(frozen=True)
class ModelEnv:
    """One model's environment: its requirement lines and where its wheels are on this machine."""

    model: str
    requirements: tuple[str, ...]
    baked: bool  # in the baked repository: its configuration is pointed at the environment
    wheelhouse: Path | None = None  # wheels fetched on the host for this model (None: not yet)
    pip: tuple[str, ...] = ()  # how the build runs pip with the environment's python (set by the plan)

    @property
    def path(self) -> str:
        """Where the environment lives in the image."""
        return f"{ENVS_ROOT}/{self.model}"

    @property
    def stage(self) -> str:
        return "model-env-" + re.sub(r"[^a-z0-9_.-]", "-", self.model.lower())

    def config_line(self) -> str:
        """The line a model's config.pbtxt needs to run in this environment."""
        return f'parameters: {{ key: "{ENV_KEY}", value: {{ string_value: "{self.path}" }} }}'

    def record(self) -> dict:
        return {"path": self.path, "form": FORM, "baked": self.baked,
                "requirements": [public_requirement(line) for line in self.requirements]}


def requested(baked: Path | None, named: tuple[tuple[str, Path], ...]) -> tuple[ModelEnv, ...]:
    """The environments a spec asks for: each baked model with a requirements.txt beside its
    config.pbtxt, and each --model-env MODEL=FILE (files were checked when the spec was read)."""
    envs: dict[str, ModelEnv] = {}
    if baked is not None:
        for folder in sorted(p for p in baked.iterdir() if (p / CONFIG).is_file() and (p / REQUIREMENTS).is_file()):
            env = ModelEnv(folder.name, tuple(read_requirement_file(folder / REQUIREMENTS)), True)
            pointed_config((folder / CONFIG).read_text(errors="replace"), env)  # refused if it names one
            envs[folder.name] = env
    for model, file in named:
        if model in envs:
            raise UsageError(f"--model-env {model}: the baked model {model} carries its own {REQUIREMENTS}; "
                             "keep one of them")
        envs[model] = ModelEnv(model, tuple(read_requirement_file(file)), False)
    return tuple(envs[m] for m in sorted(envs))


def pointed_config(text: str, env: ModelEnv) -> str:
    """A model's config.pbtxt pointed at its environment (refused when it names one already)."""
    if ENV_KEY in text:
        raise UsageError(f"model {env.model}: its {CONFIG} already sets {ENV_KEY}; remove it (or its "
                         f"{REQUIREMENTS}): the composer builds the environment and points the model at it")
    return text.rstrip("\n") + "\n" + env.config_line() + "\n"


def hints(envs: tuple[ModelEnv, ...], repository: Path | None = None) -> list[str]:
    """For models mounted at run time: the line to add to each one's configuration, and which
    models of --model-repository carry requirements the image has no environment for."""
    lines = [f"model {e.model}: its environment is {e.path} in the image; add to its {CONFIG}: {e.config_line()}"
             for e in envs if not e.baked]
    built = {e.model for e in envs}
    if repository is not None:
        for file in sorted(repository.glob(f"*/{REQUIREMENTS}")):
            if file.parent.name not in built:
                lines.append(f"model {file.parent.name} of {repository} carries a {REQUIREMENTS}: build its "
                             f"environment with --model-env {file.parent.name}={file}")
    return lines
