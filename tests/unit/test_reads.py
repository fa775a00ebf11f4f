"""What the smoke test saw the server open (composer.verify.reads): fanotify on a real folder of
this machine, and the smoke test's wiring with the engine faked at its boundary."""

from __future__ import annotations

import os

from composer.verify import reads, smoke
from composer.verify.smoke import smoke_test
from composer.verify.smoke_plan import SmokePlan
from tests.unit.test_smoke import FakeClient, add_sub_answer, client, serving  # noqa: F401 (fixture)


def test_files_opened_under_a_watched_folder_are_listed_as_paths_inside_it_in_the_order_first_opened(tmp_path):
    why = reads.unavailable()
    if os.geteuid() != 0:  # CI runs as root; elsewhere the reason is the answer
        assert why and "root" in why
        return
    assert why is None
    for name in ("a", "b", "c"):
        (tmp_path / name).write_text(name)
    watching = reads.Reads(tmp_path)
    try:
        for name in ("b", "a", "b", "c"):
            (tmp_path / name).read_text()
        (tmp_path / reads.GO.lstrip("/")).write_text("")  # the start signal is no file of the image
    finally:
        seen = watching.stop()
    mine = [path for path in seen if path in ("/a", "/b", "/c", reads.GO)]
    assert mine == ["/b", "/a", "/c"]


def test_a_server_watched_waits_behind_its_images_entrypoint_and_is_let_go_once(client, tmp_path, monkeypatch):
    client.answers = {"add_sub": add_sub_answer()}
    engine = serving(["python"], root=None)
    report = smoke_test(engine, "img", SmokePlan(backends=("python",), record_reads=True))
    assert report.passed
    entrypoint = engine.starts[0]["entrypoint"]
    assert entrypoint[:3] == ["/bin/sh", "-c", reads.WAIT]
    assert engine.put == [("container-1", {reads.GO: b""})]  # started, unwatched: not mounted here
    assert report.reads == () and "not mounted on this machine" in report.reads_note


def test_what_the_smoke_test_copied_in_is_no_file_of_the_image(client, tmp_path, monkeypatch):
    client.answers = {"add_sub": add_sub_answer()}

    class Seen:
        def __init__(self, root):
            self.root = root

        def stop(self):
            return ("/opt/tritonserver/bin/tritonserver", "/composer-smoke/samples/add_sub/1/model.py", "/etc/passwd")

    monkeypatch.setattr(reads, "Reads", Seen)
    monkeypatch.setattr(reads, "unavailable", lambda: None)
    engine = serving(["python"], root=tmp_path)
    report = smoke_test(engine, "img", SmokePlan(backends=("python",), record_reads=True))
    assert report.reads == ("/etc/passwd", "/opt/tritonserver/bin/tritonserver") and not report.reads_note
    assert report.to_dict()["files_read"] == 2


def test_without_the_ask_the_server_starts_as_the_image_says(client):
    client.answers = {"add_sub": add_sub_answer()}
    engine = serving(["python"])
    smoke_test(engine, "img", SmokePlan(backends=("python",)))
    assert engine.starts[0]["entrypoint"] is None and engine.put == []
