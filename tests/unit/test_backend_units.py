"""Backend units (composer/backends/): every backend the catalog lets a user select has one, and a
unit's rule refuses in the one line the rule book always said."""

import pytest

from composer.backends import ONNXRUNTIME, PYTHON, TENSORRT, UNITS, Backend, selectable, unit, units
from composer.catalog.catalog import Catalog
from composer.config.rules import Problem, validate as check
from composer.core.errors import UsageError
from tests.specs import spec


def test_every_selectable_backend_of_every_release_has_a_unit_of_its_name():
    catalog = Catalog.load()
    missing = []
    for release in catalog.releases.values():
        for name in selectable(catalog, release):
            if name not in UNITS:
                missing.append(f"{release.name}: {name}")
            else:
                assert unit(name).name == name
    assert not missing, "selectable backends without a unit in composer/backends/: " + ", ".join(missing)


def test_the_catalog_is_walked_as_the_plan_sees_it():
    """tensorflow while the release has it; vllm from its flavour's first release; trtllm's backend
    not at all (its flavour is unsupported)."""
    catalog = Catalog.load()
    assert "tensorflow" in selectable(catalog, catalog.release("25.03"))
    assert "tensorflow" not in selectable(catalog, catalog.release("25.04"))
    assert "vllm" not in selectable(catalog, catalog.release("23.09"))
    assert "vllm" in selectable(catalog, catalog.release("23.10"))
    assert "tensorrtllm" not in selectable(catalog, catalog.release("26.09"))


def test_units_are_named_as_their_modules_and_listed_in_order():
    assert [u.name for u in units()] == sorted(UNITS)
    for name, backend in UNITS.items():
        assert backend.name == name and backend.folder == f"backends/{name}"


def test_a_backend_of_the_users_own_gets_the_generic_unit(tmp_path):
    own = unit("mine")
    assert type(own) is Backend and own.library == "libtriton_mine.so" and not own.holds_a_backend(tmp_path)
    (tmp_path / "model.py").write_text("")
    assert own.holds_a_backend(tmp_path) and own.python_based_folder(tmp_path)


def test_the_samples_units_name_are_the_sample_catalogs():
    from composer.verify.samples import load_samples
    by_backend = {}
    for sample in load_samples():
        by_backend.setdefault(sample.backend, []).append(sample.model)
    for name, models in by_backend.items():
        assert sorted(unit(name).samples) == sorted(models), name
    assert all(set(u.samples) <= set(by_backend.get(u.name, ())) for u in units())


def test_the_libraries_loaded_by_name_belong_to_units():
    claimed = {library for u in units() for library in u.loads}
    for table in Catalog.load().loaded_at_run_time.values():
        assert set(table) <= claimed


@pytest.mark.parametrize("fields, line", [
    (dict(backends=("tensorrt",), device="cpu"),
     "--device cpu -b tensorrt: the tensorrt backend runs only on a GPU; leave it out"),
    (dict(backends=("python",), ort_providers=("cuda",)),
     "--ort-provider cuda: ONNX Runtime's providers are chosen for the onnxruntime backend; select --backend "
     "onnxruntime too"),
    (dict(backends=("onnxruntime",), keep_tensorrt_builder=True),
     "--keep-tensorrt-builder applies to a pruned base: add --base pruned"),
])
def test_a_units_rule_gives_the_one_line_refusal(fields, line):
    with pytest.raises(UsageError) as raised:
        check(spec(version="24.09", **fields))
    assert raised.value.message == line


def test_the_unit_words_a_refusal_as_the_rule_book_reports_it():
    refusal = TENSORRT.cpu_image_refusal(True, ("tensorrt",))
    assert Problem.of(refusal) == Problem(
        "backends", "device: cpu: the tensorrt backend runs only on a GPU; leave tensorrt out",
        "--device cpu -b tensorrt: the tensorrt backend runs only on a GPU; leave it out")
    assert TENSORRT.cpu_image_refusal(False, ("tensorrt",)) is None
    assert ONNXRUNTIME.providers_refusal((), ("python",), set()) is None
    assert Problem.of(None) is None
    assert PYTHON.constraints(Catalog.load().release("24.09")) == ("numpy<2",)
