import os
from pathlib import Path

import pytest

from composer.render import render_dockerfile, write_context

GOLDEN = Path(__file__).parent / "golden"
SELECTIONS = {
    "ngc-24.09-onnxruntime-python": ("onnxruntime", "python"),
    "ngc-24.09-python": ("python",),
    "ngc-24.09-onnxruntime-python-pytorch-tensorrt": ("onnxruntime", "python", "tensorrt", "pytorch"),
}


@pytest.mark.parametrize("name", sorted(SELECTIONS))
def test_golden_dockerfiles(ngc_plan, name):
    """Rendering is pinned: a change to the template shows up as a diff of these files.
    Regenerate with UPDATE_GOLDEN=1 after reviewing the change."""
    text = render_dockerfile(ngc_plan(*SELECTIONS[name]))
    golden = GOLDEN / f"{name}.Dockerfile"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()


def test_same_inputs_same_bytes(ngc_plan, tmp_path):
    a = write_context(ngc_plan("python", "onnxruntime"), tmp_path / "a")
    b = write_context(ngc_plan("onnxruntime", "python"), tmp_path / "b")
    for name in ("Dockerfile", "composition.json", "collect.py", "probe.py"):
        assert (a.directory / name).read_bytes() == (b.directory / name).read_bytes()


def test_only_selected_backends_are_copied(ngc_plan):
    text = render_dockerfile(ngc_plan("onnxruntime", "python"))
    assert "/opt/tritonserver/backends/onnxruntime " in text
    assert "/opt/tritonserver/backends/python " in text
    for absent in ("tensorrt", "pytorch", "dali", "openvino", "tensorflow"):
        assert f"backends/{absent}" not in text
    assert "/opt/tritonserver/include" not in text


def test_no_compilers_package_managers_or_network(ngc_plan):
    text = render_dockerfile(ngc_plan("onnxruntime", "python", "pytorch", "tensorrt"))
    for word in ("apt-get", "pip ", "curl", "wget", "clang", "-dev", "git "):
        assert word not in text


def test_with_headers(ngc_plan):
    text = render_dockerfile(ngc_plan("python", with_headers=True))
    assert "COPY --chown=1000:1000 --from=full /opt/tritonserver/include /opt/tritonserver/include" in text


def test_env_and_labels(ngc_plan):
    text = render_dockerfile(ngc_plan("pytorch"))
    assert "TRITON_SERVER_VERSION=\"2.50.0\"" in text
    assert "NVIDIA_TRITON_SERVER_VERSION=\"24.09\"" in text
    assert "LD_LIBRARY_PATH" in text  # the pytorch backend's environment
    assert 'org.opencontainers.image.version="24.09"' in text
    assert 'org.triton-composer.backends="pytorch"' in text


def test_custom_backend_is_copied(ngc_plan, tmp_path):
    folder = tmp_path / "mybackend"
    folder.mkdir()
    (folder / "model.py").write_text("# custom\n")
    plan = ngc_plan("python", custom_backends=(("mine", folder),))
    context = write_context(plan, tmp_path / "ctx")
    assert (context.directory / "custom-backends" / "mine" / "model.py").read_text() == "# custom\n"
    assert "COPY --chown=1000:1000 custom-backends/mine /opt/tritonserver/backends/mine" in context.dockerfile.read_text()


def test_packages_render_from_a_wheelhouse_without_secrets(ngc_plan, tmp_path):
    """What the pipeline plans once it fetched the wheels on the host: no index, no secret."""
    from composer.spec import Packages

    secret = "tok-3141592653"
    wheelhouse = tmp_path / "wheels"
    wheelhouse.mkdir()
    for name in ("pip-24.2-py3-none-any.whl", "mypkg-1.0-py3-none-any.whl"):
        (wheelhouse / name).write_bytes(b"wheel")
    url = f"https://ci:{secret}@files.example/mypkg-1.0-py3-none-any.whl?sig={secret}x"
    packages = Packages(specs=("tokenizers==0.20.0", f"mypkg @ {url}"), wheelhouse=wheelhouse)
    plan = ngc_plan("python", packages=packages)
    context = write_context(plan, tmp_path / "ctx")
    text = context.dockerfile.read_text()
    assert "FROM collect AS packages" in text and "ARG " not in text
    assert '"python3", "/composer/packages/wheelhouse/pip-24.2-py3-none-any.whl/pip", "install"' in text
    assert '"--no-index", "--find-links", "/composer/packages/wheelhouse"' in text
    assert "COPY --from=packages /composer/site-packages /usr/local/lib/python3.10/dist-packages" in text
    for path in context.directory.rglob("*"):
        if path.is_file():
            assert secret not in path.read_text(errors="replace"), path
    assert (context.directory / "packages" / "constraints.txt").read_text() == "numpy<2\n"
    assert (context.directory / "packages" / "requirements.txt").read_text() == "tokenizers==0.20.0\nmypkg\n"
    assert plan.record()["requested_packages"] == [
        "tokenizers==0.20.0", "mypkg @ https://files.example/mypkg-1.0-py3-none-any.whl"]


def test_packages_from_an_index_are_never_planned_into_the_build(ngc_plan):
    from composer.errors import UsageError
    from composer.spec import Packages

    with pytest.raises(UsageError, match="installed from a wheelhouse"):
        ngc_plan("python", packages=Packages(specs=("six",), index_url="https://u:p@pypi.example/simple"))


def test_redaction_takes_whole_secrets_only():
    from composer.packages import redactor, secrets_of
    from composer.spec import Packages

    packages = Packages(specs=("x @ https://TOKEN123@files.example/x.whl",),
                        index_url="https://S:pa55w0rd-long@pypi.example/simple?k=v",
                        extra_index_urls=("https://plain.example/simple",))
    redact = redactor(secrets_of(packages))
    shown = redact("Successfully fetched https://S:pa55w0rd-long@pypi.example/simple?k=v with pa55w0rd-long "
                   "and https://TOKEN123@files.example/x.whl from https://plain.example/simple")
    assert "Successfully" in shown and "pa55w0rd" not in shown and "TOKEN123" not in shown
    assert "https://plain.example/simple" in shown  # no secret, left alone


def test_packages_need_the_python_backend(ngc_plan):
    from composer.errors import UsageError
    from composer.spec import Packages as PackageOptions

    with pytest.raises(UsageError, match="--backend python"):
        ngc_plan("onnxruntime", packages=PackageOptions(specs=("six",)))
