"""Per-model python environments: which models get one, the checks against the image, the
rendered stage and context, the record, and the script that makes one in the build."""

import subprocess
import sys
from pathlib import Path

import pytest

from composer.core.errors import UsageError
import dataclasses

from composer.resolve.packages import python_target
from composer.backends import PYTHON
from composer.config.model_envs import ENVS_ROOT, ModelEnv, hints, pointed_config, requested
from composer.resolve.contents import PythonRuntime
from tests.unit.test_pipeline import _contents
from composer.render.render import write_context
from composer.config.options import given_on_command_line
from composer.config.rules import validate as check
from tests.specs import spec


def _repository(tmp_path, models):
    """models: name -> (config text, requirements text or None)."""
    repo = tmp_path / "repo"
    for name, (config, requirements) in models.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(config)
        (repo / name / "1" / "model.py").write_text("# model\n")
        if requirements is not None:
            (repo / name / "requirements.txt").write_text(requirements)
    return repo


def _wheelhouse(tmp_path, *names):
    folder = tmp_path / "wheels"
    folder.mkdir(exist_ok=True)
    for name in names:
        (folder / name).write_bytes(b"wheel")
    return folder


def test_baked_models_with_requirements_and_named_models_get_environments(tmp_path):
    repo = _repository(tmp_path, {"a": ('backend: "python"\n', "six==1.16.0\n# a comment\n"),
                                  "b": ('backend: "python"\n', None)})
    named = tmp_path / "c.txt"
    named.write_text("tabulate==0.9.0\n")
    envs = requested(repo, (("c", named),))
    assert [(e.model, e.requirements, e.baked) for e in envs] == [
        ("a", ("six==1.16.0",), True), ("c", ("tabulate==0.9.0",), False)]
    assert envs[0].path == f"{ENVS_ROOT}/a"


def test_a_model_named_twice_or_already_pointed_is_refused(tmp_path):
    repo = _repository(tmp_path, {"a": ('backend: "python"\n', "six\n")})
    with pytest.raises(UsageError, match="the baked model a carries its own requirements.txt"):
        requested(repo, (("a", repo / "a" / "requirements.txt"),))
    (repo / "a" / "config.pbtxt").write_text('parameters: { key: "EXECUTION_ENV_PATH" value: {} }\n')
    with pytest.raises(UsageError, match="already sets EXECUTION_ENV_PATH"):
        requested(repo, ())


@pytest.mark.parametrize("raw, says", [
    (["m"], "takes NAME=VALUE"),
    (["m=/nonexistent.txt"], "no such file /nonexistent.txt"),
    (["bad/name=/etc/hostname"], "is not a name"),
])
def test_bad_model_env_flags_are_one_line_errors(raw, says):
    with pytest.raises(UsageError) as info:
        given_on_command_line("build", {"model_env": raw})
    assert says in info.value.message and info.value.message.startswith("--model-env ")
    assert "\n" not in info.value.message


def test_model_env_flag_reads_the_file(tmp_path):
    (tmp_path / "r.txt").write_text("six\n")
    given = given_on_command_line("build", {"model_env": [f"m={tmp_path / 'r.txt'}"]})
    assert given["selection.model_envs"] == (("m", tmp_path / "r.txt"),)


def test_packages_are_for_the_stubs_python_which_must_be_the_images():
    """One check, for --pip and model environments alike: the python wheels are fetched for is
    the python they are installed into."""
    runtime = PythonRuntime("3.11", "/usr/bin/python3", "/usr/lib/python3.11", "1.26.4", (), (), True, (), (), 1)
    contents = dataclasses.replace(_contents("image x"), python=runtime, stub_python="3.11", libc="2.36",
                                   machine="x86_64")
    assert python_target(contents).version == contents.python.version
    other = dataclasses.replace(contents, stub_python="3.12",
                                python=dataclasses.replace(contents.python, version="3.10"))
    with pytest.raises(UsageError, match="has python 3.10 but its python backend stub is built for python 3.12"):
        python_target(other)
    with pytest.raises(UsageError, match="has no python"):
        python_target(dataclasses.replace(contents, python=None))


def test_servers_before_2_36_take_only_archives():
    PYTHON.check_server("2.50.0")
    with pytest.raises(UsageError, match="2.36.0"):
        PYTHON.check_server("2.35.0")


def test_config_is_pointed_and_mounted_models_get_the_line(tmp_path):
    env = ModelEnv("m", ("six",), False)
    assert pointed_config('name: "m"\n', env).endswith(
        f'parameters: {{ key: "EXECUTION_ENV_PATH", value: {{ string_value: "{ENVS_ROOT}/m" }} }}\n')
    repo = _repository(tmp_path, {"m": ("", "six\n"), "other": ("", "six\n")})
    lines = hints((env,), repo)
    assert lines[0] == f"model m: its environment is {ENVS_ROOT}/m in the image; add to its config.pbtxt: {env.config_line()}"
    assert "model other of" in lines[1] and "--model-env other=" in lines[1] and len(lines) == 2


def test_plan_and_render(ngc_plan, tmp_path):
    repo = _repository(tmp_path, {"old": ('name: "old"\nbackend: "python"\n', "tabulate==0.8.10\n")})
    wheels = _wheelhouse(tmp_path, "pip-24.2-py3-none-any.whl", "tabulate-0.8.10-py3-none-any.whl")
    envs = tuple(e.__class__(e.model, e.requirements, e.baked, wheels) for e in requested(repo, ()))
    plan = ngc_plan("python", bake_models=repo, model_envs=envs)
    assert plan.python == "3.10" and plan.constraints == ("numpy<2",)
    context = write_context(plan, tmp_path / "ctx")
    text = context.dockerfile.read_text()
    assert "FROM collect AS model-envs" in text
    assert (f'RUN ["python3", "/composer/make_env.py", "{ENVS_ROOT}/old", "3.10", "/composer/model_envs/old", '
            '"/composer/model_envs/old/wheelhouse/pip-24.2-py3-none-any.whl/pip"]') in text
    copy = f"COPY --from=model-envs {ENVS_ROOT}/old {ENVS_ROOT}/old"
    steps = [line for line in text.splitlines() if line.startswith(("COPY", "RUN"))]
    assert steps.index(copy) < steps.index("COPY --chown=1000:1000 models/ /models/")  # models stay the last layer
    folder = context.directory / "model_envs" / "old"
    assert (folder / "requirements.txt").read_text() == "tabulate==0.8.10\n"
    assert (folder / "constraints.txt").read_text() == "numpy<2\n"
    assert (folder / "wheelhouse" / "tabulate-0.8.10-py3-none-any.whl").is_file()
    assert "EXECUTION_ENV_PATH" in (context.directory / "models" / "old" / "config.pbtxt").read_text()
    assert "EXECUTION_ENV_PATH" not in (repo / "old" / "config.pbtxt").read_text()  # the user's file is untouched
    assert plan.record()["model_envs"] == {"old": {"path": f"{ENVS_ROOT}/old", "form": "directory", "baked": True,
                                                   "requirements": ["tabulate==0.8.10"]}}


def test_environments_need_the_python_backend_and_fetched_wheels(ngc_plan, tmp_path):
    requirements = tmp_path / "r.txt"
    requirements.write_text("six\n")
    with pytest.raises(UsageError, match="select --backend python"):
        check(spec(version="24.09", backends=("onnxruntime",)).with_fields(
            {"selection.model_envs": (("m", requirements),)}))
    with pytest.raises(UsageError, match="wheels fetched on this machine"):
        ngc_plan("python", model_envs=(ModelEnv("m", ("six",), False),))


def test_make_env_refuses_a_python_that_is_not_the_stubs(tmp_path):
    script = Path(__file__).parents[2] / "composer" / "in_image" / "make_env.py"
    run = subprocess.run([sys.executable, str(script), str(tmp_path / "env"), "3.1", str(tmp_path), "-m", "pip"],
                         capture_output=True, text=True, timeout=120)
    found = "%d.%d" % sys.version_info[:2]
    assert run.returncode != 0
    assert f"has python {found}, but the python backend stub is built for python 3.1" in run.stderr


def test_a_set_names_model_environments_relative_to_its_folder(tmp_path):
    from composer.core.errors import UsageError as Usage
    from composer.config.sets import load_set

    (tmp_path / "r.txt").write_text("six\n")
    path = tmp_path / "envs.yaml"
    path.write_text('version: "24.09"\nbackends: [python]\nmodel_envs: {m: r.txt}\n')
    assert load_set(path, {}).selection.model_envs == (("m", tmp_path / "r.txt"),)
    path.write_text('version: "24.09"\nbackends: [python]\nmodel_envs: {m: missing.txt}\n')
    with pytest.raises(Usage, match=r"envs.yaml:3: model_envs.m: no such file missing.txt"):
        load_set(path, {})
