"""Backend sets: every option expressible, every mistake one line naming file, line and key."""

from pathlib import Path

import pytest

from composer.core.errors import UsageError
from composer.config.options import given_on_command_line
from composer.config.types import DEFAULT_REGISTRY
from composer.config.sets import load_set, override, preset_path, shipped_presets

FULL = """\
# everything a set can say
version: "24.09"
registry: localhost/standin
images: {full: localhost/full:1, min: localhost/min:1}
backends: [onnxruntime, python]
repoagents: [checksum]
caches: [local]
custom_backends: {mine: ./mine}
backend_images: {pytorch: localhost/standin/tritonserver:24.08-py3}
with_headers: true
tag: registry.example/team/triton:onnx
packages:
  pip: ["tokenizers==0.20.0"]
  requirements: [requirements.txt]
  index_url_env: MY_INDEX
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
labels: {team: ml, tier: gold}
"""


CASES_JSON = '{"cases": [{"inputs": [{"name": "X", "datatype": "FP32", "shape": [1], "data": [1]}], ' \
             '"expected": [{"name": "Y", "datatype": "FP32", "shape": [1]}]}]}'
CASES_YAML = "cases:\n  - model: m\n    inputs: [{name: X, datatype: FP32, shape: [1], data: [1]}]\n" \
             "    expected: [{name: Y, datatype: FP32, shape: [1], data: [2]}]\n"


def write(tmp_path: Path, text: str, name: str = "x.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def error(path: Path, environ=None) -> str:
    with pytest.raises(UsageError) as info:
        load_set(path, environ or {})
    message = info.value.message
    assert "\n" not in message
    return message


@pytest.fixture
def full_set(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "model.py").write_text("")
    (tmp_path / "models" / "m").mkdir(parents=True)
    (tmp_path / "models" / "m" / "smoke_cases.json").write_text(CASES_JSON)
    (tmp_path / "cases.yaml").write_text(CASES_YAML)
    (tmp_path / "ca.pem").write_text("cert")
    (tmp_path / "requirements.txt").write_text("# pins\nnumpy<2\n")
    return write(tmp_path, FULL)


def test_every_option(full_set, tmp_path):
    s = load_set(full_set, {"MY_INDEX": "https://user:secret@index.example/simple"})
    assert s.name == "x" and s.source == full_set
    assert s.images.version == "24.09" and s.images.registry == "localhost/standin"
    assert (s.images.full, s.images.min) == ("localhost/full:1", "localhost/min:1")
    o = s.selection
    assert o.backends == ("onnxruntime", "python")
    assert o.repoagents == ("checksum",) and o.caches == ("local",)
    assert o.custom_backends == (("mine", (tmp_path / "mine").resolve()),)
    assert o.backend_images == (("pytorch", "localhost/standin/tritonserver:24.08-py3"),)
    assert o.with_headers is True and s.result.tag == "registry.example/team/triton:onnx"
    p = s.packages
    assert p.specs == ("tokenizers==0.20.0", "numpy<2")
    assert p.index_url == "https://user:secret@index.example/simple"
    assert p.extra_index_urls == ("https://extra.example/simple",) and p.trusted_hosts == ("extra.example",)
    assert p.wheelhouse == (tmp_path / "wheels").resolve() and p.ca_cert == (tmp_path / "ca.pem").resolve()
    assert s.result.smoke_test is False and s.result.model_repository == (tmp_path / "models").resolve()
    assert s.result.push == "registry.example/team/triton:onnx"
    assert s.result.labels == (("team", "ml"), ("tier", "gold"))


def test_minimal_set_defaults(tmp_path):
    s = load_set(write(tmp_path, 'version: "24.09"\nbackends: [python]\n'), {})
    assert s.images.registry == DEFAULT_REGISTRY and s.images.full is None
    assert s.result.smoke_test is True and s.result.push is None and s.result.model_repository is None
    assert not s.packages and s.packages.index_url is None


def test_full_image_instead_of_version(tmp_path):
    s = load_set(write(tmp_path, "images: {full: localhost/x:1}\nbackends: [python]\n"), {})
    assert s.images.version is None and s.images.full == "localhost/x:1"


def test_relative_paths_resolve_against_the_set_folder(tmp_path, monkeypatch):
    folder = tmp_path / "sets"
    (folder / "models" / "m").mkdir(parents=True)
    write(folder, 'version: "24.09"\nbackends: [python]\nmodel_repository: models\n')
    monkeypatch.chdir(tmp_path)
    assert load_set(Path("sets/x.yaml"), {}).result.model_repository == (folder / "models").resolve()


@pytest.mark.parametrize(
    "text, expected",
    [
        ('version: "24.09"\nbackends: onnxruntime\n', "x.yaml:2: backends: expected a list of names, got a string"),
        ('version: "24.09"\nbackend: [python]\n', "x.yaml:2: backend: unknown key (did you mean 'backends'?)"),
        ('version: 24.09\nbackends: [python]\n', "x.yaml:1: version: quote it, as in version: \"24.09\""),
        ('version: "2409"\nbackends: [python]\n', "x.yaml:1: version: '2409' is not a release"),
        ('backends: [python]\n', "x.yaml:1: version: missing"),
        ('version: "24.09"\n', "x.yaml:1: backends: select at least one backend"),
        ('version: "24.09"\nbackends: []\n', "x.yaml:2: backends: select at least one backend"),
        ('version: "24.09"\nbackends: [python, "a b"]\n', "x.yaml:2: backends: 'a b' is not a name"),
        ('version: "24.09"\nbackends: [python, python]\n', "x.yaml:2: backends: 'python' is listed twice"),
        ('version: "24.09"\nbackends: [python, 3]\n', "x.yaml:2: backends: expected a list of names, one item is a number (3)"),
        ('version: "24.09"\nbackends: [python]\nwith_headers: "yes"\n', "x.yaml:3: with_headers: expected true or false, got a string"),
        ('version: "24.09"\nbackends: [python]\nimages: {ful: x}\n', "x.yaml:3: images.ful: unknown key (did you mean 'full'?)"),
        ('version: "24.09"\nbackends: [python]\nimages: [x]\n', "x.yaml:3: images: expected a mapping, got a list"),
        ('version: "24.09"\nbackends: [python]\nversion: "24.08"\n', "x.yaml:3: version: duplicate key (first on line 1)"),
        ('version: "24.09"\nbackends: [python\n', "invalid YAML"),
        ('- python\n', "x.yaml:1: expected a mapping of settings"),
        ('', "x.yaml:1: the set is empty"),
        ('version: "24.09"\nbackends: [python]\ncustom_backends: {mine: ./nope}\n', "x.yaml:3: custom_backends.mine: no such folder ./nope"),
        ('version: "24.09"\nbackends: [python]\nmodel_repository: ./nope\n', "x.yaml:3: model_repository: no such folder"),
        ('version: "24.09"\nbackends: [python]\nsmoke_test: 1\n', "x.yaml:3: smoke_test: expected true or false, got a number (1)"),
        ('version: "24.09"\nbackends: [python]\nzzz: 1\n', "x.yaml:3: zzz: unknown key: known keys are version, registry"),
    ],
)
def test_wrong_sets_are_one_line_errors(tmp_path, text, expected):
    message = error(write(tmp_path, text))
    assert message.startswith(str(tmp_path / "x.yaml")), message
    assert expected in message, message


def test_yaml_syntax_error_names_the_line(tmp_path):
    message = error(write(tmp_path, 'version: "24.09"\nbackends: [python]\ntag: "unclosed\n'))
    assert message.startswith(f"{tmp_path / 'x.yaml'}:") and "invalid YAML" in message


PACKAGES = 'version: "24.09"\nbackends: [python]\npackages:\n'


@pytest.mark.parametrize(
    "lines, expected",
    [
        ("  pip: [a]\n  index_url_env: NOPE\n", "x.yaml:5: packages.index_url_env: environment variable NOPE is not set"),
        ("  pip: [a]\n  index_url_env: https://x.example/simple\n", "x.yaml:5: packages.index_url_env: name the environment variable"),
        ("  pip: [a]\n  index_url: https://x.example\n", "x.yaml:5: packages.index_url: a set never holds an index URL"),
        ("  pip: [a]\n  extra_index_urls: [\"https://u:p@x.example\"]\n", "x.yaml:5: packages.extra_index_urls: a URL in a set must not carry credentials"),
        ("  pip: a\n", "x.yaml:4: packages.pip: expected a list of strings, got a string"),
        ("  requirements: [nope.txt]\n", "x.yaml:4: packages.requirements: no such file nope.txt"),
        ("  ca_cert: ./nope.pem\n  pip: [a]\n", "x.yaml:4: packages.ca_cert: no such file"),
        ("  wheelhouse: ./wheels\n", "x.yaml:3: packages: package sources are given but no package"),
        ("  pipp: [a]\n", "x.yaml:4: packages.pipp: unknown key (did you mean 'pip'?)"),
    ],
)
def test_wrong_packages(tmp_path, lines, expected):
    message = error(write(tmp_path, PACKAGES + lines))
    assert expected in message, message


def test_index_url_comes_from_the_environment(tmp_path):
    path = write(tmp_path, PACKAGES + "  pip: [a]\n  index_url_env: IDX\n")
    assert load_set(path, {"IDX": "https://i.example/simple"}).packages.index_url == "https://i.example/simple"


def test_requirements_file_errors_name_the_file(tmp_path):
    (tmp_path / "req.txt").write_text("--index-url https://x\n")
    message = error(write(tmp_path, PACKAGES + "  requirements: [req.txt]\n"))
    assert "req.txt:1:" in message


def test_missing_set_file(tmp_path):
    assert "no such set file" in error(tmp_path / "nope.yaml")


def test_a_folder_or_special_file_as_a_set_names_the_flag_and_what_it_is(tmp_path, monkeypatch):
    import os

    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "folder").mkdir()
    monkeypatch.chdir(tmp_path)
    for name, kind in ((str(tmp_path / "folder"), "a folder"), ("folder", "a folder"),
                       (str(tmp_path / "fifo"), "a FIFO"), ("/dev/zero", "a character device")):
        with pytest.raises(UsageError) as caught:
            load_set(preset_path(name))
        assert caught.value.message == f"--set: the set file {name} is {kind}, not a regular file"


# -- override ---------------------------------------------------------------------


NOTHING_GIVEN = dict(
    version=None, registry=None, image=[], tag=None, with_headers=False, backend=[], repoagent=[], cache=[],
    custom_backend=[], backend_image=[], pip=[], requirements=[], pip_index_url=None, pip_extra_index_url=[],
    pip_trusted_host=[], wheelhouse=None, ca_cert=None, no_smoke_test=False, model_repository=None, smoke_cases=None, no_samples=False,
    bake_models=None, push=None,
    label=[],
)


def test_override_not_given_keeps_the_set(full_set):
    s = load_set(full_set, {"MY_INDEX": "https://i.example"})
    given = given_on_command_line("build", NOTHING_GIVEN)
    assert given == {}
    assert override(s, given) == s


def test_override_replaces_scalars_and_lists(full_set, tmp_path):
    s = load_set(full_set, {"MY_INDEX": "https://i.example"})
    given = given_on_command_line("build", {
        **NOTHING_GIVEN, "version": "24.10", "registry": "mirror.example/nvidia", "backend": ["python"],
        "pip": ["x==1"], "pip_trusted_host": ["other.example"], "push": "r.example/t:2",
        "wheelhouse": tmp_path / "w2", "backend_image": ["onnxruntime=img:2"], "image": ["full=f:2"],
    })
    o = override(s, {**given, "result.smoke_test": True})
    assert o.images.version == "24.10" and o.images.registry == "mirror.example/nvidia"
    assert o.selection.backends == ("python",) and o.images.full == "f:2"
    assert o.images.min == "localhost/min:1"  # not given: kept
    assert o.packages.specs == ("x==1",)  # --pip replaces the set's pip and requirements: one field
    assert o.packages.trusted_hosts == ("other.example",)
    assert o.packages.extra_index_urls == ("https://extra.example/simple",)
    assert o.packages.index_url == "https://i.example"
    assert o.packages.wheelhouse == (tmp_path / "w2").resolve()
    assert o.result.smoke_test is True and o.result.push == "r.example/t:2"
    assert o.selection.backend_images == (("onnxruntime", "img:2"),)
    assert s.images.version == "24.09"  # the base is untouched


def test_override_flags(tmp_path):
    s = load_set(write(tmp_path, 'version: "24.09"\nbackends: [python]\nwith_headers: true\n'), {})
    assert override(s, given_on_command_line("build", {"with_headers": False})).selection.with_headers is True
    assert override(s, given_on_command_line("build", {"no_smoke_test": True})).result.smoke_test is False
    plain = load_set(write(tmp_path, 'version: "24.09"\nbackends: [python]\n', "y.yaml"), {})
    assert override(plain, given_on_command_line("build", {"with_headers": True})).selection.with_headers is True


def test_override_unknown_field_is_a_bug(full_set):
    with pytest.raises(TypeError):
        override(load_set(full_set, {"MY_INDEX": "https://u.example/simple"}), {"selection.backend": ("python",)})


# -- presets ----------------------------------------------------------------------


def test_shipped_presets_load():
    names = shipped_presets()
    assert {"onnx-python", "python", "onnx-python-tensorrt-pytorch"} <= set(names)
    for name in names:
        s = load_set(preset_path(name), {})
        assert s.images.version and s.selection.backends
        assert s.source.read_text().startswith("#")  # says what it is for
    assert load_set(preset_path("onnx-python"), {}).selection.backends == ("onnxruntime", "python")
    assert set(load_set(preset_path("onnx-python-tensorrt-pytorch"), {}).selection.backends) == {
        "onnxruntime", "python", "tensorrt", "pytorch"}


def test_preset_path_takes_a_file(tmp_path):
    path = write(tmp_path, 'version: "24.09"\nbackends: [python]\n')
    assert preset_path(str(path)) == path


def test_unknown_preset_lists_the_shipped_ones():
    with pytest.raises(UsageError) as info:
        preset_path("onnx-pyton")
    assert "did you mean 'onnx-python'" in info.value.message and "python" in info.value.message
    with pytest.raises(UsageError, match="no such set file"):
        preset_path("./nope.yaml")


def test_builder_tls_is_a_folder_of_client_files_for_a_tcp_builder(tmp_path):
    files = tmp_path / "client"
    files.mkdir()
    head = 'version: "24.09"\nbackends: [python]\n'
    empty = write(tmp_path, head + "builder: buildkit://tcp://127.0.0.1:1234\nbuilder_tls: ./client\n")
    with pytest.raises(UsageError, match=r":4: builder_tls: .*client holds neither ca.pem, cert.pem and key.pem "
                                         r"nor ca.crt, tls.crt and tls.key"):
        load_set(empty, {})
    for name in ("ca.crt", "tls.crt", "tls.key"):
        (files / name).write_text("x")
    loaded = load_set(write(tmp_path, head + "builder: buildkit://tcp://127.0.0.1:1234\nbuilder_tls: ./client\n"), {})
    assert loaded.result.builder_tls == files
    with pytest.raises(UsageError, match=":4: builder_tls: builder_tls is for a BuildKit at tcp://"):
        load_set(write(tmp_path, head + "builder: buildkit://unix:///run/b.sock\nbuilder_tls: ./client\n"), {})
