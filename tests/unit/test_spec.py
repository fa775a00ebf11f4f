"""The composition spec: one declaration per option serves the command line, sets and bundles."""

from pathlib import Path

import pytest

from composer.core.errors import UsageError
from composer.config.sets import load_set
from composer.config.options import OPTIONS, flags_for, given_on_command_line, spec_from_record, spec_record, unique_fields
from composer.config.rules import validate as check
from composer.config.types import CompositionSpec

SET = """\
version: "24.09"
registry: localhost/standin
images: {min: localhost/min:1}
backends: [onnxruntime, python]
repoagents: [checksum]
caches: [local]
custom_backends: {mine: ./mine}
backend_images: {pytorch: localhost/standin/tritonserver:24.08-py3}
with_headers: true
tag: registry.example/team/triton:onnx
labels: {team: ml, org.example/owner: "Jane Doe"}
packages:
  pip: ["tokenizers==0.20.0"]
  requirements: [requirements.txt]
  extra_index_urls: [https://extra.example/simple]
  trusted_hosts: [extra.example]
  wheelhouse: ./wheels
  ca_cert: ./ca.pem
smoke_test: false
model_repository: ./models
smoke_cases: ./cases.yaml
samples: false
bake_models: ./models
push: registry.example/team/triton:onnx
"""

COMMAND_LINE = dict(
    version="24.09", registry="localhost/standin", image=["min=localhost/min:1"], backend=["onnxruntime", "python"],
    repoagent=["checksum"], cache=["local"], custom_backend=["mine=mine"],
    backend_image=["pytorch=localhost/standin/tritonserver:24.08-py3"], with_headers=True,
    tag="registry.example/team/triton:onnx", label=["team=ml", "org.example/owner=Jane Doe"],
    pip=["tokenizers==0.20.0"], requirements=[Path("requirements.txt")],
    pip_extra_index_url=["https://extra.example/simple"], pip_trusted_host=["extra.example"],
    wheelhouse=Path("wheels"), ca_cert=Path("ca.pem"), no_smoke_test=True, model_repository=Path("models"),
    smoke_cases=Path("cases.yaml"), no_samples=True, bake_models=Path("models"),
    push="registry.example/team/triton:onnx",
)


from tests.unit.test_sets import CASES_JSON, CASES_YAML  # noqa: E402


@pytest.fixture
def folder(tmp_path, monkeypatch):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "model.py").write_text("")
    (tmp_path / "models" / "m").mkdir(parents=True)
    (tmp_path / "models" / "m" / "smoke_cases.json").write_text(CASES_JSON)
    (tmp_path / "cases.yaml").write_text(CASES_YAML)
    (tmp_path / "ca.pem").write_text("cert")
    (tmp_path / "requirements.txt").write_text("numpy<2\n")
    (tmp_path / "x.yaml").write_text(SET)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_command_line_and_set_give_equal_specs(folder):
    from_set = load_set(folder / "x.yaml", {})
    from_flags = CompositionSpec(name="x", source=folder / "x.yaml").with_fields(
        given_on_command_line("build", COMMAND_LINE))
    assert from_flags == from_set
    assert from_set.packages.specs == ("tokenizers==0.20.0", "numpy<2")
    assert from_set.result.labels == (("org.example/owner", "Jane Doe"), ("team", "ml"))


def test_every_field_is_declared_once_with_help_and_an_input():
    fields = [o.field for o in unique_fields()]
    assert len(fields) == len(set(fields))
    spec_fields = {f"{g}.{n}" for g in ("selection", "images", "packages", "result", "mirror")
                   for n in getattr(CompositionSpec(), g).__dataclass_fields__}
    assert set(fields) == spec_fields  # every field of the spec has a declaration, and no more
    for option in OPTIONS:
        assert option.help and (option.flag or option.key), option
    keys = [o.key for o in OPTIONS if o.key]
    assert len(keys) == len(set(keys))


def test_flags_of_each_command():
    build = {o.flag for o in flags_for("build")}
    assert {"--backend", "--label", "--push", "--pip", "--image", "--no-smoke-test"} <= build
    render = {o.flag for o in flags_for("render")}
    assert "--label" in render and "--push" not in render
    assert {o.flag for o in flags_for("backends")} == {"--version", "--registry", "--image"}


def test_bundle_manifest_round_trip(folder):
    spec = load_set(folder / "x.yaml", {})
    portable = spec_record(spec, portable_only=True)
    assert "packages.ca_cert" not in portable and "selection.custom_backends" not in portable
    assert "packages.extra_index_urls" not in portable
    back = spec_from_record(portable, name="x")
    assert back.selection.backends == spec.selection.backends and back.result.labels == spec.result.labels
    assert back.packages.specs == spec.packages.specs and back.packages.ca_cert is None
    assert spec_from_record(spec_record(spec)) == CompositionSpec(
        spec.selection, spec.images, spec.packages, spec.result)


@pytest.mark.parametrize("values, message", [
    ({"version": "24.9"}, "--version 24.9: '24.9' is not a release"),
    ({"backend": ["a b"]}, "--backend a b: 'a b' is not a name"),
    ({"backend": ["python", "python"]}, "'python' is listed twice"),
    ({"image": ["fulll=x"]}, "--image fulll=x: takes full=REF or min=REF, not fulll=..."),
    ({"image": ["full"]}, "--image full: takes NAME=VALUE"),
    ({"label": ["org.triton-composer.backends=x"]}, "is set by the composer itself"),
    ({"label": ["bad key=x"]}, "is not a label key"),
    ({"label": ["k=line\nbreak"]}, "a label value is one line"),
    ({"tag": "Bad Tag"}, "--tag Bad Tag: not a valid image reference (it holds whitespace"),
    ({"tag": "x:y:z"}, "--tag x:y:z: not a valid image reference"),
    ({"push": "r.example/t@sha256:" + "a" * 64}, "names a digest"),
    ({"registry": "x\nRUN echo pwned"}, "not a valid registry prefix"),
    ({"image": ["full=::bad::"]}, "--image full=::bad::: not a valid image reference"),
    ({"backend_image": ["pytorch=::bad::"]}, "not a valid image reference"),
    ({"registry_ca": Path("/nonexistent.pem")}, "--registry-ca /nonexistent.pem: no such file"),
    ({"pip": ["--extra-index-url=https://u:tok@x.example"]}, "pip options (--extra-index-url=https://***@x.example) are not packages"),
    ({"custom_backend": ["x=/nonexistent"]}, "no such folder /nonexistent"),
    ({"requirements": [Path("/nonexistent.txt")]}, "no such file /nonexistent.txt"),
    ({"pip_extra_index_url": ["ftp://x"]}, "is not an http(s) URL"),
])
def test_bad_flags_are_one_line_errors(values, message):
    with pytest.raises(UsageError) as info:
        given_on_command_line("build", values)
    assert message in info.value.message and "\n" not in info.value.message, info.value.message


def test_whole_spec_checks():
    with pytest.raises(UsageError, match="give --version"):
        check(CompositionSpec().with_fields({"selection.backends": ("python",)}))
    with pytest.raises(UsageError, match="select at least one backend"):
        check(CompositionSpec().with_fields({"images.version": "24.09"}))
    check(CompositionSpec().with_fields({"images.version": "24.09"}), "backends")  # lists, selects nothing


@pytest.mark.parametrize("param, values, says", [
    ("image", ["full=a:1", "full=b:1"], "--image full is given twice (a:1 and b:1): give it once"),
    ("image", ["full=a:1", "min=m:1", "full=a:1"], "--image full is given twice (a:1 and a:1): give it once"),
    ("label", ["k=1", "k=2"], "--label k is given twice (1 and 2): give it once"),
    ("backend_image", ["pytorch=a:1", "pytorch=b:1"], "--backend-image pytorch is given twice"),
])
def test_a_key_given_twice_is_refused_for_every_key_value_flag(param, values, says):
    """One rule, in the one reading of KEY=VALUE flags: the last would otherwise silently win."""
    with pytest.raises(UsageError) as caught:
        given_on_command_line("build", {param: values})
    assert caught.value.message.startswith(says)


def test_different_keys_of_one_flag_are_fine():
    given = given_on_command_line("build", {"image": ["full=a:1", "min=m:1"], "label": ["k=1", "j=1"]})
    assert given["images.full"] == "a:1" and given["images.min"] == "m:1"
    assert dict(given["result.labels"]) == {"k": "1", "j": "1"}
