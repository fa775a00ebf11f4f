"""Unit-test fixtures: plans built from catalogued data, no engine."""

import pytest

from composer.catalog.catalog import Catalog
from composer.resolve.offer import Offer
from composer.resolve.plan_types import BaseConfig, BaseImage
from composer.resolve.plan import make_plan
from tests.specs import spec

FULL_DIGEST = "sha256:" + "f" * 64
MIN_DIGEST = "sha256:" + "a" * 64
CREATED = "2024-09-01T00:00:00Z"  # fixed, as SOURCE_DATE_EPOCH makes it
# The min image's configuration, as NGC's (restated by an image on a pruned base).
MIN_CONFIG = BaseConfig(env=(("PATH", "/usr/local/cuda/bin:/usr/bin:/bin"), ("NVIDIA_REQUIRE_CUDA", "cuda>=9.0")),
                        entrypoint=("/opt/nvidia/nvidia_entrypoint.sh",), workdir="/opt/tritonserver")


@pytest.fixture(autouse=True)
def own_state_dir(tmp_path_factory, monkeypatch):
    """Locks and run records of the code under test go to a folder of the test's own."""
    monkeypatch.setenv("COMPOSER_STATE_DIR", str(tmp_path_factory.mktemp("state")))
    monkeypatch.setenv("COMPOSER_HOST_LOCKS", str(tmp_path_factory.mktemp("host-locks")))


@pytest.fixture(autouse=True)
def no_settle(monkeypatch):
    """A tag several pushes extend is read back at once: an in-memory registry has no other writer
    whose write-back could still be on its way (composer.publish.referrers.rewrite)."""
    from composer.publish import referrers

    monkeypatch.setattr(referrers, "SETTLE_SECONDS", 0.0)


@pytest.fixture(scope="session")
def catalog():
    return Catalog.load()


@pytest.fixture
def ngc_plan(catalog):
    """A plan for NGC images (24.09 unless release= says) pinned by (made-up, fixed) digests."""

    def make(*backends, release="24.09", model_envs=(), **options):
        release = catalog.release(release)
        opts = spec(backends=tuple(backends), version=release.name, **options)
        offer = Offer.from_layout(catalog, release)
        full = BaseImage("full", release.full_ref(opts.images.registry), "sha256:" + "1" * 64, FULL_DIGEST)
        minimal = BaseImage("min", release.min_ref(opts.images.registry), "sha256:" + "2" * 64, MIN_DIGEST)
        return make_plan(opts, release, offer, catalog, full, minimal, created=CREATED, model_envs=model_envs,
                         min_config=MIN_CONFIG)

    return make
