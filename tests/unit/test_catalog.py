import pytest

from composer.catalog.catalog import Catalog
from composer.core.errors import UsageError


@pytest.fixture(scope="module")
def catalog():
    return Catalog.load()


def test_24_09_is_server_2_50_on_jammy_with_numpy_pin(catalog):
    release = catalog.release("24.09")
    assert (release.server, release.os, release.python, release.numpy) == ("2.50.0", "ubuntu-22.04", "3.10", "numpy<2")


@pytest.mark.parametrize(
    "name,server,python",
    [("23.07", "2.36.0", "3.10"), ("24.10", "2.51.0", "3.10"), ("24.11", "2.52.0", "3.12"),
     ("25.06", "2.59.0", "3.12"), ("25.08", "2.60.0", "3.12"), ("26.09", "2.73.0", "3.12")],
)
def test_release_table(catalog, name, server, python):
    release = catalog.release(name)
    assert (release.server, release.python) == (server, python)


def test_no_25_07_and_range(catalog):
    assert "25.07" not in catalog.releases
    assert min(catalog.releases) == "23.07" and max(catalog.releases) == "26.09"


def test_numpy_pin_starts_at_24_06(catalog):
    assert catalog.release("24.05").numpy is None
    assert catalog.release("24.06").numpy == "numpy<2"


def test_unknown_release_names_known_ones(catalog):
    with pytest.raises(UsageError) as err:
        catalog.release("25.07")
    assert "unknown Triton release '25.07'" in err.value.message
    assert "24.09" in err.value.message and "\n" not in err.value.message


def test_malformed_release_hint(catalog):
    with pytest.raises(UsageError, match="YY.MM"):
        catalog.release("2024.09")


def test_by_server(catalog):
    assert catalog.by_server("2.50.0").name == "24.09"
    assert catalog.by_server("9.9.9") is None


def test_image_refs(catalog):
    release = catalog.release("24.09")
    assert release.full_ref("nvcr.io/nvidia") == "nvcr.io/nvidia/tritonserver:24.09-py3"
    assert release.min_ref("harbor.example/nvidia/") == "harbor.example/nvidia/tritonserver:24.09-py3-min"
