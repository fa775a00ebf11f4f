"""A pruned base's layers as the composer writes them: from an engine's archive of the split stage's
tree, each family's listed files in its own layer, the image's files only, the same bytes whatever
order and mount points the engine gave."""

from __future__ import annotations

import io
import tarfile

from composer.assembly.base_layers import layer_entries, split_tree
from composer.assembly.canonical import write_layer


def tree_entries(archive, folder=None, where=None, count=1, index=0, marks=None):
    """Layer `index`'s entries of the tree in `archive` split by `where` (path -> layer)."""
    folder = folder or archive.parent
    families = split_tree(_chunks(archive), where or {}, count, folder)
    return layer_entries(families, index, marks or {})


def _chunks(path):
    data = path.read_bytes()
    return [data[i:i + 1000] for i in range(0, len(data), 1000)]


def _archive(path, entries):
    """A tar at `path` of (name, kind, data or link, mtime) in the order given, as an engine writes one."""
    with tarfile.open(path, "w") as tar:
        for name, kind, value, mtime in entries:
            info = tarfile.TarInfo(name)
            info.mtime, info.uid, info.gid, info.uname = mtime, 0, 0, "root"
            if kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            elif kind == "file":
                info.size, info.mode = len(value), 0o644
                tar.addfile(info, io.BytesIO(value))
            elif kind == "link":
                info.type, info.linkname = tarfile.LNKTYPE, value
                tar.addfile(info)
            else:
                info.type, info.linkname = tarfile.SYMTYPE, value
                tar.addfile(info)
    return path


def _members(layer):
    with tarfile.open(layer.path) as tar:
        return [(m.name, m.type, m.linkname, m.mtime, tar.extractfile(m).read() if m.isreg() else None) for m in tar]


def test_an_engines_mount_points_go_the_images_files_stay_and_folders_take_time_zero(tmp_path):
    now = 1_900_000_000
    archive = _archive(tmp_path / "a.tar", [
        ("/", "dir", None, now), ("/.dockerenv", "file", b"", now), ("/dev/", "dir", None, now),
        ("/dev/console", "file", b"", now), ("/dev/pts/", "dir", None, 5), ("/dev/shm/", "dir", None, 5),
        ("/etc/", "dir", None, now), ("/etc/hosts", "file", b"", now), ("/etc/hostname", "file", b"box\n", 7),
        ("/etc/mtab", "sym", "/proc/mounts", now), ("/proc/", "dir", None, now), ("/sys/", "dir", None, 5),
        ("/sys/kept", "file", b"x", 9), ("/usr/", "dir", None, 0), ("/usr/lib/", "dir", None, 0),
        ("/usr/lib/libz.so.1", "file", b"zlib", 1_600_000_000),
    ])
    with_nodes = _archive(tmp_path / "b.tar", [("/dev/", "dir", None, now), ("/dev/console", "file", b"", now),
                                               ("/dev/null", "sym", "/proc/null", 5), ("/dev/own", "file", b"x", 5)])
    # A runtime's nodes and links in /dev go (every runtime mounts its own there), a file of the image's stays.
    assert sorted(e.info.name for e in tree_entries(with_nodes, tmp_path)) == ["dev", "dev/own"]
    layer = write_layer(tree_entries(archive), tmp_path / "layer.tar", "core")
    names = {m[0]: m for m in _members(layer)}
    assert sorted(names) == ["etc", "etc/hostname", "sys", "sys/kept", "usr", "usr/lib", "usr/lib/libz.so.1"]
    assert all(m[3] == 0 for m in names.values() if m[1] == tarfile.DIRTYPE)  # the read's time never shows
    assert names["usr/lib/libz.so.1"][3] == 1_600_000_000 and names["etc/hostname"][4] == b"box\n"  # the image's own


def test_the_same_tree_in_another_order_with_its_hard_links_turned_gives_the_same_layer(tmp_path):
    one = _archive(tmp_path / "1.tar", [
        ("./usr/", "dir", None, 3), ("./usr/bin/", "dir", None, 3), ("./usr/bin/perl5.36", "file", b"perl", 4),
        ("./usr/bin/perl", "link", "./usr/bin/perl5.36", 4), ("./usr/bin/a", "sym", "perl", 4),
    ])
    other = _archive(tmp_path / "2.tar", [
        ("/usr/bin/a", "sym", "perl", 4), ("/usr/", "dir", None, 9), ("/usr/bin/", "dir", None, 9),
        ("/usr/bin/perl", "file", b"perl", 4), ("/usr/bin/perl5.36", "link", "/usr/bin/perl", 4),
    ])
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = write_layer(tree_entries(one, tmp_path / "a"), tmp_path / "one.tar", "core")
    second = write_layer(tree_entries(other, tmp_path / "b"), tmp_path / "two.tar", "core")
    assert first.diff_id == second.diff_id
    members = _members(first)
    assert [m[:3] for m in members] == [("usr", tarfile.DIRTYPE, ""), ("usr/bin", tarfile.DIRTYPE, ""),
                                        ("usr/bin/a", tarfile.SYMTYPE, "perl"), ("usr/bin/perl", tarfile.REGTYPE, ""),
                                        ("usr/bin/perl5.36", tarfile.LNKTYPE, "usr/bin/perl")]
    assert members[3][4] == b"perl"  # the data rides with the first path, whichever the engine gave it to
    target = tmp_path / "out"
    with tarfile.open(first.path) as tar:
        tar.extractall(target, filter="tar")
    assert (target / "usr/bin/perl5.36").read_bytes() == b"perl"
    assert (target / "usr/bin/perl5.36").stat().st_ino == (target / "usr/bin/perl").stat().st_ino


def test_each_family_holds_its_listed_files_the_folders_holding_them_and_its_list(tmp_path):
    """The core holds every folder and what no list names (but the split stage's own lists and the
    pruned stage's listing, whose times are the build's); another family only its files, their
    folders and its list; a hard link to another family's file is that file's data again."""
    archive = _archive(tmp_path / "tree.tar", [
        ("/", "dir", None, 5), ("/usr/", "dir", None, 5), ("/usr/lib/", "dir", None, 5), ("/usr/bin/", "dir", None, 5),
        ("/usr/bin/sh", "file", b"shell", 3), ("/usr/lib/libcublas.so.12", "file", b"blas", 3),
        ("/usr/lib/libcublas.so.12.6", "link", "/usr/lib/libcublas.so.12", 3), ("/etc/", "dir", None, 5),
        ("/etc/hostname", "file", b"box\n", 3), ("/composer-files.tsv", "file", b"f\t5\tusr/bin/sh\n", 1_900_000_000),
        ("/composer-layers/", "dir", None, 5),
        ("/composer-layers/00-core.list", "file", b"usr/bin/sh\nusr/lib/libcublas.so.12.6\n", 5),
    ])
    where = {"usr/bin/sh": 0, "usr/lib/libcublas.so.12.6": 0, "usr/lib/libcublas.so.12": 1}
    (tmp_path / "spools").mkdir()
    families = split_tree(_chunks(archive), where, 2, tmp_path / "spools")
    marks = {"usr/share/triton-composer/pruned-base/00-core.list": b"x\n"}
    core = write_layer(layer_entries(families, 0, marks), tmp_path / "core.tar", "core")
    blas = write_layer(layer_entries(families, 1, {"usr/share/triton-composer/pruned-base/01-cublas.list": b"y\n"}),
                       tmp_path / "blas.tar", "cublas")
    core_members = {m[0]: m for m in _members(core)}
    assert sorted(core_members) == ["etc", "etc/hostname", "usr", "usr/bin", "usr/bin/sh", "usr/lib",
                                    "usr/lib/libcublas.so.12.6", "usr/share", "usr/share/triton-composer",
                                    "usr/share/triton-composer/pruned-base",
                                    "usr/share/triton-composer/pruned-base/00-core.list"]
    assert core_members["usr/lib/libcublas.so.12.6"][1] == tarfile.REGTYPE  # its file is cuBLAS's layer's
    assert core_members["usr/lib/libcublas.so.12.6"][4] == b"blas" and core_members["etc/hostname"][4] == b"box\n"
    assert all(m[3] == 0 for m in core_members.values() if m[1] == tarfile.DIRTYPE)
    assert [m[0] for m in _members(blas)] == ["usr", "usr/lib", "usr/lib/libcublas.so.12", "usr/share",
                                              "usr/share/triton-composer", "usr/share/triton-composer/pruned-base",
                                              "usr/share/triton-composer/pruned-base/01-cublas.list"]
