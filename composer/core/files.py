"""Files on this machine: inputs checked and read within limits, outputs written safely.

Inputs: a path is refused with one line when it is too long, loops, is of the wrong type or
cannot be read; a file the composer parses is read only if it is a regular file of reasonable
size (so /dev/zero, a FIFO or /proc/self/environ never hang or flood it), and structured files
are refused when nested too deep, when aliases expand too far or when a key is not a string.

Outputs: nothing is written through a symbolic link, a file is written to a fresh temporary
name in its own folder and renamed into place, and an existing file is replaced only when it is
one the command itself wrote (the caller says how to recognise one).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any, Callable

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

from composer.core.errors import Invalid

MAX_VALUE = 4096  # characters of one text value (a label, a requirement, a name): refused beyond

MAX_TEXT_BYTES = 1 << 20  # set files, case files, requirement files: a megabyte is plenty
MAX_DEPTH = 32  # nesting of a structured file (sets check their own, stricter, shape)
MAX_NODES = 100_000  # nodes of a structured file, aliases counted each time they are used


def printable(text: str, limit: int = 240) -> str:
    """Control characters shown escaped and long text cut, so an error stays one short line."""
    shown = "".join(c if ord(c) >= 32 and c != "\x7f" else repr(c)[1:-1] for c in text[:limit])
    return shown + ("..." if len(text) > limit else "")


def _os_reason(exc: OSError) -> str:
    if exc.errno == errno.ENAMETOOLONG:
        return "the name is longer than the system allows"
    if exc.errno == errno.ELOOP:
        return "symbolic links loop"
    return exc.strerror or type(exc).__name__


def path_problem(path: Path, what: str) -> str | None:
    """Why `path` is not an existing, readable `what` ("file" or "folder"); None when it is."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return f"no such {what}"
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the name
        return _os_reason(exc) if isinstance(exc, OSError) else "the name holds a NUL character"
    if what == "folder" and not stat.S_ISDIR(info.st_mode):
        return "not a folder"
    if what == "file" and not stat.S_ISREG(info.st_mode):
        return not_regular(info.st_mode)
    if not os.access(path, os.R_OK | (os.X_OK if what == "folder" else 0)):
        return "not readable"
    return None


def not_regular(mode: int) -> str:
    """What a path that is not a regular file is, as the one line says it (e.g. "is a FIFO, not a
    regular file"): the one wording, for every input that must be a regular file."""
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    kind = next((name for test, name in kinds if test(mode)), "a special file")
    return f"is {kind}, not a regular file"


def tree_problem(root: Path) -> str | None:
    """Why a folder to copy into an image cannot be: an unreadable file, a loop, a special file."""
    seen: set[tuple[int, int]] = set()
    try:
        for folder, _, files in os.walk(root, followlinks=True, onerror=_raise):
            info = os.stat(folder)
            if (info.st_dev, info.st_ino) in seen:
                return f"{printable(folder)}: symbolic links loop"
            seen.add((info.st_dev, info.st_ino))
            for name in files:
                path = Path(folder) / name
                if os.path.islink(path) and not os.path.exists(path):
                    continue  # a dangling link is copied as the link it is
                problem = path_problem(path, "file")
                if problem:
                    return f"{printable(str(path))}: {problem}"
    except OSError as exc:
        return f"{printable(str(exc.filename or root))}: {_os_reason(exc)}"
    return None


def _raise(exc: OSError) -> None:
    raise exc


def read_text(path: Path, what: str, limit: int = MAX_TEXT_BYTES) -> str:
    """The UTF-8 text of a regular file of at most `limit` bytes; anything else is Invalid."""
    shown = printable(str(path))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens without waiting, then is refused
    except FileNotFoundError:
        raise Invalid(f"no such {what} {shown}") from None
    except (OSError, ValueError) as exc:
        kind = _special_kind(path)  # a socket does not open at all (ENXIO): say what it is
        if kind:
            raise Invalid(f"the {what} {shown} {kind}") from None
        raise Invalid(f"cannot read the {what} {shown}: "
                      f"{_os_reason(exc) if isinstance(exc, OSError) else 'a NUL character in the name'}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):  # before any read: a folder's descriptor cannot even be wrapped
        os.close(fd)
        raise Invalid(f"the {what} {shown} {not_regular(info.st_mode)}")
    try:  # /proc/self/mem is "regular" and fails to read (EIO): said as what it is, not a crash
        with os.fdopen(fd, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise Invalid(f"cannot read the {what} {shown}: {_os_reason(exc)}") from None
    if len(data) > limit:
        raise Invalid(f"the {what} {shown} is larger than {limit} bytes")
    if len(data) != info.st_size:  # /proc and /sys files: generated as read, never a user's text
        raise Invalid(f"the {what} {shown} is not a regular file on disk")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise Invalid(f"the {what} {shown} is not UTF-8 text") from None


def _special_kind(path: Path) -> str | None:
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    return None if stat.S_ISREG(mode) else not_regular(mode)


def load_structured(text: str, source: str, as_json: bool) -> Any:
    """A JSON or YAML document, refused (Invalid) when deeper than MAX_DEPTH, when its aliases
    expand past MAX_NODES, or when a mapping key is not a string."""
    try:
        if as_json:
            document = json.loads(text)
        else:
            root = yaml.compose(text, Loader=yaml.SafeLoader)
            check_nodes(root, source)
            document = yaml.safe_load(text)
    except RecursionError:
        raise Invalid(f"{source}: nested deeper than {MAX_DEPTH} levels") from None
    except (ValueError, yaml.YAMLError) as exc:
        raise Invalid(f"{source}: not valid {'JSON' if as_json else 'YAML'} ({' '.join(str(exc).split())[:160]})") \
            from None
    _check_values(document, source)
    return document


def check_nodes(root: Node | None, source: str, max_depth: int = MAX_DEPTH) -> None:
    """Refuse a YAML node tree nested deeper than `max_depth` or whose aliases expand past MAX_NODES."""
    stack = [(root, 1)] if root is not None else []
    visits = 0
    while stack:
        node, depth = stack.pop()
        visits += 1
        if visits > MAX_NODES:
            raise Invalid(f"{source}: its aliases expand to more than {MAX_NODES} values")
        if depth > max_depth:
            raise Invalid(f"{source}:{node.start_mark.line + 1}: nested deeper than {max_depth} levels")
        if isinstance(node, MappingNode):
            stack += [(v, depth + 1) for pair in node.value for v in pair]
        elif isinstance(node, SequenceNode):
            stack += [(v, depth + 1) for v in node.value]


def _check_values(document: Any, source: str) -> None:
    stack, visits = [(document, 1)], 0
    while stack:
        value, depth = stack.pop()
        visits += 1
        if visits > MAX_NODES:
            raise Invalid(f"{source}: more than {MAX_NODES} values")
        if depth > MAX_DEPTH:
            raise Invalid(f"{source}: nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise Invalid(f"{source}: the key {printable(repr(key))[:40]} is not a string")
                stack.append((item, depth + 1))
        elif isinstance(value, list):
            stack += [(item, depth + 1) for item in value]


# -- outputs ----------------------------------------------------------------------------------


def check_output_file(path: Path, flag: str, ours: Callable[[Path], bool] | None = None, *,
                      makes_folders: bool = False) -> Path:
    """An output file the command will write, checked before any work (nothing is created):
    not a link, not a folder, an existing file only when `ours` recognises it, and a folder where
    a file can really be made: its own folder, which must exist unless the writer `makes_folders`
    (then its nearest existing ancestor)."""
    path = Path(os.path.abspath(path))
    shown = f"{flag} {printable(str(path))}"
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise Invalid(f"{shown}: {_os_reason(exc)}") from None
    if info is not None:
        if stat.S_ISLNK(info.st_mode):
            raise Invalid(f"{shown}: is a symbolic link; the composer writes no file through one")
        if stat.S_ISDIR(info.st_mode):
            raise Invalid(f"{shown}: is a folder; give a file name")
        if not stat.S_ISREG(info.st_mode) or ours is None or not ours(path):
            raise Invalid(f"{shown}: exists and the composer did not write it; give a new file name")
    if len(path.name.encode()) > 255:
        raise Invalid(f"{shown}: the name is longer than the system allows")
    existing = next((p for p in [path.parent, *path.parent.parents] if os.path.lexists(p)), Path("/"))
    if existing != path.parent and not makes_folders:
        raise Invalid(f"{shown}: the folder {printable(str(path.parent))} does not exist")
    if not existing.is_dir():
        raise Invalid(f"{shown}: cannot be written ({existing} is not a folder)")
    why = unwritable(existing)
    if why:
        raise Invalid(f"{shown}: cannot be written ({existing}: {why})")
    return path


# Filesystems of the kernel's own files: a folder there takes no file of ours.
KERNEL_FILESYSTEMS = frozenset({"proc", "sysfs", "cgroup", "cgroup2", "debugfs", "securityfs", "tracefs", "pstore",
                                "bpf", "configfs", "fusectl", "efivarfs", "devpts", "mqueue", "binfmt_misc"})


def unwritable(folder: Path) -> str | None:
    """Why no file can be made in `folder` (None: one can), found without writing anything there,
    so a check before the work leaves the folder as it was: a read-only filesystem, no permission,
    or a filesystem of the kernel's own files (/proc, /sys)."""
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return "a read-only filesystem"
        if not os.access(folder, os.W_OK | os.X_OK):
            return "permission denied"
    except OSError as exc:
        return _os_reason(exc)
    kind = filesystem_type(folder)
    if kind in KERNEL_FILESYSTEMS:
        return f"a {kind} filesystem, of the kernel's own files"
    return None


def filesystem_type(path: Path) -> str | None:
    """The type of the filesystem `path` is on, from /proc/self/mountinfo (None: unknown)."""
    try:
        real = os.path.realpath(path)
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            mounts = [line.split() for line in fh]
    except OSError:
        return None
    best, kind = "", None
    for fields in mounts:
        if "-" not in fields:
            continue
        point = fields[4].replace("\\040", " ")
        fs_type = fields[fields.index("-") + 1]
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fs_type
    return kind


def make_folders(folder: Path) -> None:
    """Create `folder` and its missing parents, refusing to pass through a symbolic link."""
    folder = Path(os.path.abspath(folder))
    for part in [*reversed(folder.parents), folder]:
        try:
            info = os.lstat(part)
        except FileNotFoundError:
            os.mkdir(part)
            continue
        if stat.S_ISLNK(info.st_mode) and part == folder:
            raise OSError(errno.ELOOP, f"{part} is a symbolic link")
        if not stat.S_ISDIR(os.stat(part).st_mode):
            raise OSError(errno.ENOTDIR, f"{part} is not a folder")


def write_file(path: Path, data: bytes | Path, mode: int = 0o644) -> None:
    """Write `data` (bytes, or the file to copy) to `path` under a fresh temporary name in the
    same folder, then rename it into place: a link at `path` is replaced, never written through."""
    path = Path(path)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:80]}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            if isinstance(data, Path):
                with open(data, "rb") as source:
                    while chunk := source.read(1 << 20):
                        out.write(chunk)
            else:
                out.write(data)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        with _ignored():
            os.unlink(temporary)
        raise


class _ignored:
    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        return exc[0] is not None and issubclass(exc[0], OSError)


def digest(path: Path) -> str:
    """sha256 of a regular file's bytes, or of a link's target text (links are never followed)."""
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        return "link:" + hashlib.sha256(os.readlink(path).encode()).hexdigest()
    if not stat.S_ISREG(info.st_mode):
        return "special"
    hasher = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            hasher.update(chunk)
    return "sha256:" + hasher.hexdigest()


def fresh_folder(beside: Path, purpose: str) -> Path:
    """A new folder with a unique name next to `beside` (same file system: renames stay cheap),
    which never collides with a user's path."""
    return Path(tempfile.mkdtemp(dir=Path(beside).parent, prefix=f".{Path(beside).name[:80]}.{purpose}-"))
