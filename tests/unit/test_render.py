import os
import re
from pathlib import Path

import pytest

from composer.assembly.pruning import base_key
from composer.render.render import composition_key, render_dockerfile, render_pruned_base, write_context
from composer.resolve.plan_types import STAGE_LABEL
from composer.verify.sbom import SBOM_PATH, parse_facts, version_labels
from tests.unit.fake_engine import recorded_facts

GOLDEN = Path(__file__).parent / "golden"
IN_IMAGE = Path(__file__).parents[2] / "composer" / "in_image"
# One release of each generation of NGC's final stage (../shared/TRITON-FACTS.md section 7).
RELEASES = ("24.09", "24.11", "25.03", "26.07")
SELECTIONS = {
    "onnxruntime-python": ("onnxruntime", "python"),
    "python": ("python",),
    "identity": ("identity",),
    "onnxruntime-python-pytorch-tensorrt": ("onnxruntime", "python", "tensorrt", "pytorch"),
}
CASES = [(release, name) for release in RELEASES for name in SELECTIONS] + [("24.09", "onnxruntime-python-baked")]


@pytest.mark.parametrize("release, name", CASES)
def test_golden_dockerfiles(ngc_plan, release, name):
    """Rendering is pinned: a change to the template shows up as a diff of these files.
    Regenerate with COMPOSER_UPDATE_GOLDEN=1: the run then rewrites the files and fails, so a
    normal run never passes by writing its own golden file; review the diff, then rerun."""
    selection = SELECTIONS[name.removesuffix("-baked")]
    options = {"bake_models": Path("/srv/models")} if name.endswith("-baked") else {}
    text = render_dockerfile(ngc_plan(*selection, release=release, **options))
    _matches_golden(text, GOLDEN / f"ngc-{release}-{name}.Dockerfile")


@pytest.mark.parametrize("name", ["onnxruntime-python", "onnxruntime-python-pytorch-tensorrt"])
@pytest.mark.parametrize("which", ["pruned-base", "pruned"])
def test_golden_pruned_renders(ngc_plan, name, which):
    """A pruned composition's two Dockerfiles: the base (its family layers) and the image on it."""
    plan = ngc_plan(*SELECTIONS[name], base="pruned")
    text = render_pruned_base(plan) if which == "pruned-base" else render_dockerfile(plan)
    _matches_golden(text, GOLDEN / f"ngc-24.09-{name}-{which}.Dockerfile")


def _matches_golden(text: str, golden: Path) -> None:
    if os.environ.get("COMPOSER_UPDATE_GOLDEN") == "1" and (not golden.exists() or golden.read_text() != text):
        golden.write_text(text)
        pytest.fail(f"rewrote {golden.name} (COMPOSER_UPDATE_GOLDEN=1): review the diff, then rerun without it")
    assert text == golden.read_text()


@pytest.mark.parametrize("release, name", CASES)
def test_golden_renders_follow_ngc_final_stage(release, name):
    """Each golden file, line by line against what NGC's own final stage does for its release
    (section 7 of TRITON-FACTS.md; build.py dockerfile_prepare_container_linux)."""
    text = (GOLDEN / f"ngc-{release}-{name}.Dockerfile").read_text()
    lines = text.splitlines()
    backends = SELECTIONS[name.removesuffix("-baked")]
    # Every release: the server's version in ENV and LABEL, PATH, UCX_MEM_EVENTS,
    # TRITON_SERVER_GPU_ENABLED, TCMALLOC_RELEASE_RATE, TRITON_SERVER_USER, DEBIAN_FRONTEND.
    for env in ('NVIDIA_TRITON_SERVER_VERSION="%s"' % release, 'PATH="/opt/tritonserver/bin:${PATH}"',
                'UCX_MEM_EVENTS="no"', 'TRITON_SERVER_GPU_ENABLED="1"', 'TCMALLOC_RELEASE_RATE="200"',
                'TRITON_SERVER_USER="triton-server"', 'DEBIAN_FRONTEND="noninteractive"'):
        assert any(line.strip().startswith(env) for line in lines), env
    assert any(line.strip().startswith("com.nvidia.tritonserver.version=") for line in lines)
    # TF_* while tensorflow exists (up to 25.03).
    has_tf = release <= "25.03"
    assert ('TF_AUTOTUNE_THRESHOLD="2"' in text) is has_tf and ('TF_ADJUST_HUE_FUSED="1"' in text) is has_tf
    # pytorch: the hpcx libraries on LD_LIBRARY_PATH. (libgomp1, which NGC installs with apt for
    # onnxruntime and pytorch, comes from the full image through the collector: no apt here.)
    assert ("/opt/hpcx/ucc/lib/:/opt/hpcx/ucx/lib/" in text) is ("pytorch" in backends)
    assert "apt-get" not in text
    # The user: remove tensorrt-server, and from 24.11 `ubuntu` (uid 1000 on Ubuntu 24.04), then
    # triton-server with uid and gid 1000 (the system stage's script, copied into every context).
    system = (Path(__file__).parents[2] / "composer" / "in_image" / "system.sh").read_text()
    assert ('RUN ["/bin/sh", "/composer-system/system.sh", "/composer-system/tree", "--cuda-compat", "--byte-code", '
            '"/opt/tritonserver/backends"]') in lines
    assert "userdel tensorrt-server" in system and "userdel ubuntu" in system
    assert "useradd --uid 1000 --gid 1000" in system
    # Python's PEP 668 marker from 24.11: PIP_BREAK_SYSTEM_PACKAGES where python is in the image.
    assert ('PIP_BREAK_SYSTEM_PACKAGES="1"' in text) is (release >= "24.11" and "python" in backends)
    # Ownership: every Triton COPY --chown=1000:1000 up to 26.05; nothing chowned from 26.06.
    copies = [line for line in lines if line.startswith("COPY") and "/opt/tritonserver" in line]
    assert copies
    if release >= "26.06":
        assert not any("--chown" in line for line in copies)
    else:
        assert all("--chown=1000:1000" in line for line in copies)
    # The entrypoint scripts NGC's entrypoint runs first; the CUDA compat wiring on GPU images.
    assert "COPY --from=full /opt/nvidia/entrypoint.d/ /opt/nvidia/entrypoint.d/" in lines
    assert 'echo "${_CUDA_COMPAT_PATH}/lib" > /etc/ld.so.conf.d/00-cuda-compat.conf' in system
    # Only the selected backends, from the full image, FROM images pinned by digest.
    copied = sorted(line.split()[-1].rsplit("/", 1)[-1] for line in copies if "/backends/" in line)
    assert copied == sorted(backends)
    assert lines[[i for i, line in enumerate(lines) if line.startswith("FROM ")][0]].endswith(" AS full")


def test_same_inputs_same_bytes(ngc_plan, tmp_path):
    a = write_context(ngc_plan("python", "onnxruntime"), tmp_path / "a")
    b = write_context(ngc_plan("onnxruntime", "python"), tmp_path / "b")
    for name in ("Dockerfile", "composition.json", "collect.py", "probe.py"):
        assert (a.directory / name).read_bytes() == (b.directory / name).read_bytes()


def _siblings(script: str) -> set[str]:
    """The in_image modules `script` imports from its own folder (import probe -> probe.py)."""
    text = (IN_IMAGE / script).read_text()
    return {f"{name}.py" for name in re.findall(r"^import (\w+)", text, re.M) if (IN_IMAGE / f"{name}.py").is_file()}


def _copied_scripts(dockerfile: str) -> list[set[str]]:
    """For each COPY of context files into /composer/: what /composer/ then holds in that stage."""
    stages: dict[str, set[str]] = {}
    held: set[str] = set()
    found = []
    for line in dockerfile.splitlines():
        words = line.split()
        if line.startswith("FROM "):
            held = set(stages.get(words[1], ()))
            if len(words) == 4:
                stages[words[3]] = held
        elif line.startswith("COPY ") and not words[1].startswith("--from") and words[-1] == "/composer/":
            held |= set(words[1:-1])
            found.append(set(held))
    return found


def test_each_script_copied_into_a_stage_has_the_siblings_it_imports(ngc_plan, tmp_path):
    """The scripts import their siblings from their own folder (collect.py: probe.py, which imports
    elfdeps.py): every COPY of them, in every Dockerfile, brings those too, and the context holds them."""
    checked = 0
    for golden in sorted(GOLDEN.glob("*.Dockerfile")):
        for held in _copied_scripts(golden.read_text()):
            for script in (name for name in held if name.endswith(".py")):
                assert _siblings(script) <= held, (golden.name, script)
                checked += 1
    assert checked
    context = write_context(ngc_plan("onnxruntime", "python", base="pruned"), tmp_path / "context")
    for folder in (context.directory, context.pruned_base):
        for held in _copied_scripts((folder / "Dockerfile").read_text()):
            assert all((folder / name).is_file() for name in held), (folder, held)


def test_a_build_writes_its_key_into_the_labels_of_its_stages_last(ngc_plan, tmp_path):
    # buildah (Podman) caches a LABEL step by its text: with ${COMPOSER_KEY} a build of other inputs
    # would find the stage of the last. Each label is its stage's last step, so the steps before it
    # are shared by every build of the same inputs; the pruned base's files stay the same.
    plan = ngc_plan("python", "onnxruntime", base="pruned")
    rendered = write_context(plan, tmp_path / "render")
    built = write_context(plan, tmp_path / "run", key="0123456789abcdef")
    text = (built.directory / "Dockerfile").read_text()
    labels = [line for line in text.splitlines() if line.startswith(f"LABEL {STAGE_LABEL}")]
    assert len(labels) >= 4 and all(line.endswith(' 0123456789abcdef"') for line in labels), labels
    assert "org.triton-composer.run" not in text  # no step names the run: another run's build reuses each
    for stage in text.split("\nFROM ")[1:]:
        steps = [line for line in stage.splitlines() if line and not line.startswith(("#", "ARG", "    "))]
        if any(line.startswith(f"LABEL {STAGE_LABEL}") for line in steps):
            assert steps[-1].startswith(f"LABEL {STAGE_LABEL}"), stage  # its last step
    assert "${COMPOSER_KEY}" not in text and "ARG COMPOSER_KEY" not in text  # written: no build argument step
    assert text.replace("0123456789abcdef", "${COMPOSER_KEY}") == \
        (rendered.directory / "Dockerfile").read_text().replace("ARG COMPOSER_KEY=render\n", "")
    assert base_key(plan, rendered.pruned_base) == base_key(plan, built.pruned_base)


def test_the_composition_key_names_every_input(ngc_plan, tmp_path):
    plan = ngc_plan("python", "onnxruntime")
    inputs = {"full": "sha256:1", "epoch": 1}
    key = composition_key(plan, inputs)
    assert key == composition_key(plan, dict(inputs)) and len(key) == 16
    assert key != composition_key(plan, {**inputs, "epoch": 2})
    assert key != composition_key(ngc_plan("python"), inputs)
    repo = tmp_path / "repo"
    (repo / "affine" / "1").mkdir(parents=True)
    (repo / "affine" / "config.pbtxt").write_text('platform: "onnxruntime_onnx"\n')
    baked = composition_key(ngc_plan("onnxruntime", bake_models=repo), inputs)
    (repo / "affine" / "config.pbtxt").write_text('platform: "onnxruntime_onnx"\nmax_batch_size: 2\n')
    assert baked != composition_key(ngc_plan("onnxruntime", bake_models=repo), inputs)  # models by content


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
    assert "COPY --from=full /opt/tritonserver/include" in render_dockerfile(ngc_plan("python", release="26.07",
                                                                                      with_headers=True))


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
    from composer.config.types import Packages

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
    # No build argument could carry a secret: the only ones are the build's name and its epoch.
    assert "FROM collect AS packages" in text
    assert {line.split("=")[0] for line in text.splitlines() if line.startswith("ARG ")} <= {
        "ARG COMPOSER_KEY", "ARG SOURCE_DATE_EPOCH"}
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
    from composer.core.errors import UsageError
    from composer.config.types import Packages

    with pytest.raises(UsageError, match="installed from a wheelhouse"):
        ngc_plan("python", packages=Packages(specs=("six",), index_url="https://u:p@pypi.example/simple"))


def test_redaction_takes_whole_secrets_only():
    from composer.resolve.packages import redactor, secrets_of
    from composer.config.types import Packages

    packages = Packages(specs=("x @ https://TOKEN123@files.example/x.whl",),
                        index_url="https://S:pa55w0rd-long@pypi.example/simple?k=v",
                        extra_index_urls=("https://plain.example/simple",))
    redact = redactor(secrets_of(packages))
    shown = redact("Successfully fetched https://S:pa55w0rd-long@pypi.example/simple?k=v with pa55w0rd-long "
                   "and https://TOKEN123@files.example/x.whl from https://plain.example/simple")
    assert "Successfully" in shown and "pa55w0rd" not in shown and "TOKEN123" not in shown
    assert "https://plain.example/simple" in shown  # no secret, left alone


def test_packages_need_the_python_backend(ngc_plan):
    from composer.core.errors import UsageError
    from composer.config.types import Packages as PackageOptions

    from composer.config.rules import validate
    from tests.specs import spec

    with pytest.raises(UsageError, match="select --backend python too"):
        validate(spec(version="24.09", backends=("onnxruntime",), packages=PackageOptions(specs=("six",))))
    validate(spec(version="24.09", backends=("vllm",), flavour="vllm", packages=PackageOptions(specs=("six",))))


def test_baked_models_are_the_last_layer_and_served_by_default(ngc_plan, tmp_path):
    repo = tmp_path / "repo"
    (repo / "affine" / "1").mkdir(parents=True)
    (repo / "affine" / "config.pbtxt").write_text('platform: "onnxruntime_onnx"\n')
    (repo / "affine" / "smoke_cases.json").write_text("{}")
    context = write_context(ngc_plan("onnxruntime", bake_models=repo), tmp_path / "ctx")
    text = context.dockerfile.read_text()
    steps = [line for line in text.splitlines() if line.startswith(("COPY", "RUN"))]
    assert steps[-1] == "COPY --chown=1000:1000 models/ /models/"  # after every Triton layer
    assert 'CMD ["tritonserver", "--model-repository=/models"]' in text.rstrip().splitlines()[-3:]
    assert "ENTRYPOINT" not in text  # the min image's (NGC's) entrypoint stays
    assert (context.directory / "models" / "affine" / "config.pbtxt").is_file()
    assert (context.directory / "models" / "affine" / "smoke_cases.json").is_file()
    assert (context.directory / "models" / "affine" / "1").is_dir()  # an empty version folder is kept
    assert '"baked_models": "/models"' in (context.directory / "composition.json").read_text()
    again = write_context(ngc_plan("onnxruntime"), tmp_path / "ctx")  # rendering again without: gone
    assert not (again.directory / "models").exists() and "CMD" not in again.dockerfile.read_text()


def test_the_python_runtime_is_a_layer_only_where_python_is_served(ngc_plan, tmp_path):
    """No empty COPY layer (the classic builder cannot export one): no python, no python layer."""
    line = "COPY --from=collected /composer/python-rootfs/ /"
    assert line in render_dockerfile(ngc_plan("python")).splitlines()
    assert line not in render_dockerfile(ngc_plan("identity")).splitlines()
    custom = tmp_path / "mine"
    custom.mkdir()
    (custom / "model.py").write_text("")  # a Python-based backend, served through python's stub
    assert line in render_dockerfile(ngc_plan("identity", custom_backends=(("mine", custom),))).splitlines()
