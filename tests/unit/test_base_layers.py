"""A pruned base's layers as the composer writes them: from an engine's archive of a family stage,
the image's files only, the same bytes whatever order and mount points the engine gave."""

from __future__ import annotations

import io
import tarfile

from composer.assembly.base_layers import tree_entries
from composer.assembly.canonical import write_layer


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
                                               ("/dev/null", "sym", "/proc/null", 5)])
    assert [e.info.name for e in tree_entries(with_nodes)] == ["dev", "dev/null"]  # a /dev of the image's own stays
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
    first = write_layer(tree_entries(one), tmp_path / "one.tar", "core")
    second = write_layer(tree_entries(other), tmp_path / "two.tar", "core")
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
