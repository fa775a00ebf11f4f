"""The blob cache's part of `composer cache` (composer.publish.blobs, composer.app.images): listed as
one entry, cleared by --all or --older-than DAYS (a push that reuses a blob marks it used), never
while a push holds it."""

from __future__ import annotations

import hashlib
import io
import os
import time

import pytest

from composer.app.compose import Progress
from composer.app.images import _blob_entry, _clear_blobs
from composer.assembly.cache import Cleared
from composer.publish.blobs import BlobCache

DAY = 24 * 3600


@pytest.fixture(autouse=True)
def _host_locks(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPOSER_HOST_LOCKS", str(tmp_path / "locks"))


def _add(cache: BlobCache, data: bytes, age_days: float = 0):
    diff_id = "sha256:" + hashlib.sha256(data).hexdigest()
    blob = cache.add(io.BytesIO(data), diff_id, "gzip")
    when = time.time() - age_days * DAY
    os.utime(blob.path, (when, when))
    return diff_id, blob


def test_older_than_removes_the_blobs_unused_that_long_and_their_index_and_a_find_marks_use(tmp_path):
    cache = BlobCache(tmp_path / "blobs")
    old, _ = _add(cache, b"old layer" * 100, age_days=10)
    used, _ = _add(cache, b"used layer" * 100, age_days=10)
    new, _ = _add(cache, b"new layer" * 100)
    assert cache.find(used, "gzip") is not None  # reused by a push: used now
    assert cache.usage().count == 3
    gone = cache.clear(older_than_days=5)
    assert gone is not None and gone.count == 1 and gone.size > 0
    assert cache.find(old, "gzip") is None and not (cache.root / "index" / "gzip" / old.replace(":", "-")).exists()
    assert cache.find(used, "gzip") is not None and cache.find(new, "gzip") is not None
    assert cache.clear().count == 2 and cache.usage().count == 0


def test_nothing_goes_while_a_push_holds_the_cache(tmp_path):
    cache = BlobCache(tmp_path / "blobs")
    diff_id, _ = _add(cache, b"layer" * 100, age_days=10)
    with cache.in_use():
        assert cache.clear() is None
        done = _clear_blobs(Cleared((), (), 0, 0), cache, None, True, Progress())
        assert done.blobs == 0 and [why for _entry, why in done.kept] == ["a push at work holds it"]
    assert cache.find(diff_id, "gzip") is not None


def test_cache_clear_keeps_blobs_without_all_or_older_than_and_counts_what_it_frees(tmp_path):
    cache = BlobCache(tmp_path / "blobs")
    _add(cache, b"a" * 1000, age_days=3)
    _add(cache, b"b" * 1000)
    entry = _blob_entry(cache)
    assert entry.kind == "blob cache" and entry.layers == 2 and "2 compressed layers" in entry.line()
    kept = _clear_blobs(Cleared((), (), 0, 0), cache, None, False, Progress())
    assert kept.kept[0][1] == "only --older-than DAYS or --all removes it" and cache.usage().count == 2
    lines: list[str] = []
    some = _clear_blobs(Cleared((), (), 0, 0), cache, 1, False, Progress(on_line=lines.append))
    assert [e.layers for e in some.removed] == [1] and some.blobs > 0 and some.freed == some.blobs
    unread = _clear_blobs(Cleared((), (), 0, -1), cache, None, True, Progress())  # an engine that counts no bytes
    assert unread.freed == unread.blobs > 0  # the blobs once, not also as the removed entry's own bytes
    assert [why for _e, why in some.kept] == ["used within 1 days"] and "removed 1 compressed layers" in lines[0]
    assert _blob_entry(BlobCache(tmp_path / "empty")) is None


def test_cache_clear_says_what_it_kept_and_why_the_first_ten(tmp_path):
    """`cache clear` printed "kept N" alone: a user could not tell what stayed, nor what would take it."""
    from composer.assembly.cache import Entry

    base = Entry("pruned base", "sha256:b", ("triton-composer/pruned-base:k1",), 10, 5, 0.0, None, used_by=("app:1",))
    stage = Entry("cached stage", "sha256:s", (), 10, 5, 0.0, None, key="system k2")
    blobs = Entry("blob cache", str(tmp_path), (), 10, 10, 0.0, None, layers=3)
    done = Cleared((), ((base, "used by app:1"), (stage, "a build at work on this engine holds it"),
                        (blobs, "only --older-than DAYS or --all removes it")), 0, 0)
    assert done.kept_lines() == [
        "kept pruned base triton-composer/pruned-base:k1: used by app:1",
        "kept cached stage system k2: a build at work on this engine holds it",
        f"kept blob cache {tmp_path}: only --older-than DAYS or --all removes it"]
    many = Cleared((), tuple((stage, f"reason {n}") for n in range(12)), 0, 0)
    lines = many.kept_lines()
    assert len(lines) == 11 and lines[9].endswith("reason 9") and lines[10].startswith("... and 2 more kept")
