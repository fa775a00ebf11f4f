"""How the dynamic loader would resolve an ELF file's needs, read from the file itself.

Apart from probe.py, which reads a whole Triton tree with it (collect.py and prune.py use it too),
and copied beside it, imported as a sibling: stdlib only, Python 3.8 compatible, no composer
imports. Dependencies are read from the files (ELF dynamic sections), not from package databases,
and resolved the way the dynamic loader would, so the result holds for any image layout.
"""

from __future__ import annotations

import glob
import os
import re
import struct

MULTIARCH = {62: "x86_64-linux-gnu", 183: "aarch64-linux-gnu"}

# ELF constants
PT_LOAD, PT_DYNAMIC = 1, 2
SHT_DYNAMIC = 6
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME, DT_RPATH, DT_RUNPATH = 0, 1, 5, 10, 14, 15, 29
MAX_STRTAB = 64 << 20
MAX_HEADERS = 4096


class ElfInfo(object):
    """The dynamic-linking facts of one ELF object."""

    __slots__ = ("machine", "type", "needed", "soname", "rpath", "runpath")

    def __init__(self, machine, etype, needed, soname, rpath, runpath):
        self.machine = machine
        self.type = etype
        self.needed = needed
        self.soname = soname
        self.rpath = rpath
        self.runpath = runpath

    def __repr__(self):
        return "ElfInfo(machine=%r, needed=%r, soname=%r, rpath=%r, runpath=%r)" % (
            self.machine, self.needed, self.soname, self.rpath, self.runpath)


def _read_at(fh, offset, size):
    fh.seek(offset)
    data = fh.read(size)
    if len(data) != size:
        raise ValueError("truncated")
    return data


def read_elf(path):
    """ElfInfo of `path`, or None if it is not a readable 64-bit little-endian ELF file.

    Only headers, the dynamic section and its string table are read (by seeking), so
    multi-GB libraries cost a few reads.
    """
    try:
        with open(path, "rb") as fh:
            head = fh.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
                return None
            (etype, machine, _ver, _entry, phoff, shoff, _flags, _ehsize, phentsize, phnum,
             shentsize, shnum, _shstrndx) = struct.unpack_from("<HHIQQQIHHHHHH", head, 16)
            loads = []
            dynamic = None
            if phoff and phnum and phentsize >= 56 and phnum <= MAX_HEADERS:
                table = _read_at(fh, phoff, phentsize * phnum)
                for i in range(phnum):
                    p_type, _pf, p_offset, p_vaddr, _pa, p_filesz, _pm, _al = struct.unpack_from(
                        "<IIQQQQQQ", table, i * phentsize)
                    if p_type == PT_LOAD:
                        loads.append((p_vaddr, p_offset, p_filesz))
                    elif p_type == PT_DYNAMIC:
                        dynamic = (p_offset, p_filesz)
            strtab_offset = None
            if dynamic is None and shoff and shnum and shentsize >= 64 and shnum <= MAX_HEADERS * 16:
                sections = _read_at(fh, shoff, shentsize * shnum)
                for i in range(shnum):
                    (_n, sh_type, _f, _a, sh_offset, sh_size, sh_link, _i, _al, _es) = struct.unpack_from(
                        "<IIQQQQIIQQ", sections, i * shentsize)
                    if sh_type == SHT_DYNAMIC and sh_link < shnum:
                        dynamic = (sh_offset, sh_size)
                        strtab_offset = struct.unpack_from("<Q", sections, sh_link * shentsize + 24)[0]
                        break
            if dynamic is None:
                return ElfInfo(machine, etype, [], None, [], [])
            raw = _read_at(fh, dynamic[0], dynamic[1] - dynamic[1] % 16)
            entries = []
            strtab_addr = None
            strsz = None
            for tag, value in struct.iter_unpack("<qQ", raw):
                if tag == DT_NULL:
                    break
                if tag == DT_STRTAB:
                    strtab_addr = value
                elif tag == DT_STRSZ:
                    strsz = value
                elif tag in (DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH):
                    entries.append((tag, value))
            if strtab_offset is None and strtab_addr is not None:
                for vaddr, offset, filesz in loads:
                    if vaddr <= strtab_addr < vaddr + filesz:
                        strtab_offset = strtab_addr - vaddr + offset
                        break
                else:
                    # Prelinked or odd objects: some tools leave the offset in place.
                    strtab_offset = strtab_addr if not loads else None
            if not entries:
                return ElfInfo(machine, etype, [], None, [], [])
            if strtab_offset is None or not strsz or strsz > MAX_STRTAB:
                return None
            fh.seek(strtab_offset)
            strings = fh.read(strsz)
    except (OSError, ValueError, struct.error):
        return None

    def string(offset):
        end = strings.find(b"\0", offset)
        if offset >= len(strings) or end < 0:
            raise ValueError("bad string offset")
        return strings[offset:end].decode("utf-8", "replace")

    needed, soname, rpath, runpath = [], None, [], []
    try:
        for tag, value in entries:
            text = string(value)
            if tag == DT_NEEDED:
                needed.append(text)
            elif tag == DT_SONAME:
                soname = text
            elif tag == DT_RPATH:
                rpath.extend(p for p in text.split(":") if p)
            else:
                runpath.extend(p for p in text.split(":") if p)
    except ValueError:
        return None
    return ElfInfo(machine, etype, needed, soname, rpath, runpath)


def expand_origin(entry, origin):
    """Expand $ORIGIN / ${ORIGIN} (and $LIB as "lib") in one RPATH/RUNPATH entry.

    Entries naming $PLATFORM are dropped (None): the probe cannot know the platform string.
    """
    text = entry.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)
    text = text.replace("${LIB}", "lib").replace("$LIB", "lib")
    if "$" in text:
        return None
    return os.path.normpath(text)


def is_loader(soname):
    """The dynamic loader and the vDSO are always there; they never need copying."""
    base = os.path.basename(soname)
    return base.startswith(("ld-linux", "ld64.so", "linux-vdso", "linux-gate"))


def parse_ld_so_conf(path="/etc/ld.so.conf", _seen=None):
    """Library dirs listed in ld.so.conf, following `include` globs, in file order."""
    seen = _seen if _seen is not None else set()
    if path in seen:
        return []
    seen.add(path)
    try:
        with open(path, "r", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return []
    dirs = []
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("hwcap"):
            continue
        if line.startswith("include"):
            for pattern in line.split()[1:]:
                if not os.path.isabs(pattern):
                    pattern = os.path.join(os.path.dirname(path), pattern)
                for included in sorted(glob.glob(pattern)):
                    dirs.extend(parse_ld_so_conf(included, seen))
            continue
        for word in re.split(r"[\s,:]+", line):
            word = word.split("=", 1)[0]
            if word.startswith("/"):
                dirs.append(os.path.normpath(word))
    return dirs


def default_system_dirs(machine=None):
    """Where the loader looks after RPATH/LD_LIBRARY_PATH/RUNPATH: ld.so.conf, then the defaults."""
    if machine is None:
        machine = {"x86_64": 62, "aarch64": 183}.get(os.uname().machine, 62)
    multiarch = MULTIARCH.get(machine, "x86_64-linux-gnu")
    dirs = parse_ld_so_conf()
    dirs += ["/lib/" + multiarch, "/usr/lib/" + multiarch, "/lib", "/usr/lib", "/lib64", "/usr/lib64"]
    return unique(dirs)


def unique(items):
    seen = set()
    out = []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


def is_under(path, prefix):
    return path == prefix or path.startswith(prefix.rstrip("/") + "/")


# A library name as code hands it to dlopen: a file name (libcudnn_ops.so.9, libnvrtc-builtins.so.12.6),
# maybe behind an absolute folder (/opt/hpcx/ucx/lib/libucp.so.0). Names built at run time from
# pieces ("libcudnn_%s.so") cannot be read; the catalog keeps what strings cannot show. The scan
# looks for "lib" (a literal prefix: fast over hundreds of MB), then reads the folder before it.
CANDIDATE = re.compile(rb"lib[A-Za-z0-9_+-]+(?:\.[A-Za-z0-9_+-]+)*")
SO_NAME = re.compile(r"^lib[A-Za-z0-9_+-]+(?:\.[A-Za-z0-9_+-]+)*?\.so(?:\.[0-9]+)*$")
NAME_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_+-%")
PATH_BYTES = NAME_BYTES | frozenset(b"./")
DATA_SECTIONS = (b".rodata", b".data")  # string literals live there, never in code or GPU images
MAX_SCANNED = 512 << 20  # bytes of data sections read from one file


def _names_in(data):
    """Library names standing whole in `data`: a file name, or one behind an absolute folder."""
    found = set()
    for match in CANDIDATE.finditer(data):
        start, end = match.span()
        if end < len(data) and (data[end] in NAME_BYTES or
                                data[end] == 0x2E and end + 1 < len(data) and data[end + 1] in NAME_BYTES):
            continue  # part of a longer word, or a name built at run time (libnvrtc.so.%d)
        head = start
        while head > 0 and data[head - 1] in PATH_BYTES:
            head -= 1
        folder = data[head:start]
        if folder and not (folder.startswith(b"/") and folder.endswith(b"/")):
            continue  # inside a word (calibrate.so) or a relative path
        text = (folder + match.group(0)).decode("ascii")
        if SO_NAME.match(os.path.basename(text)):
            found.add(text)
    return found


def named_libraries(path):
    """The library names an ELF file's read-only and initialised data hold: what it may dlopen.

    Only the data sections are read (by seeking), not code or GPU images, so a multi-GB library
    costs what its strings weigh. Returns sorted names, each a file name or an absolute path."""
    found = set()
    try:
        with open(path, "rb") as fh:
            head = fh.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
                return []
            shoff, = struct.unpack_from("<Q", head, 40)
            shentsize, shnum, shstrndx = struct.unpack_from("<HHH", head, 58)
            if not shoff or not shnum or shentsize < 64 or shnum > MAX_HEADERS * 16 or shstrndx >= shnum:
                return []
            table = _read_at(fh, shoff, shentsize * shnum)
            sections = [struct.unpack_from("<IIQQQQIIQQ", table, i * shentsize) for i in range(shnum)]
            names_at, names_size = sections[shstrndx][4], sections[shstrndx][5]
            names = _read_at(fh, names_at, min(names_size, MAX_STRTAB))
            budget = MAX_SCANNED
            for name_offset, sh_type, _f, _a, offset, size, _l, _i, _al, _es in sections:
                name = names[name_offset:names.find(b"\0", name_offset)]
                if sh_type != 1 or not name.startswith(DATA_SECTIONS) or size > budget:  # SHT_PROGBITS
                    continue
                budget -= size
                found |= _names_in(_read_at(fh, offset, size))
    except (OSError, ValueError, struct.error):
        return []
    return sorted(found)


class Resolver(object):
    """Resolves DT_NEEDED names to files like the loader, with caches shared by all units."""

    def __init__(self, root, system_dirs, ld_library_path):
        self.root = root
        self.system_dirs = list(system_dirs)
        self.ld_library_path = [os.path.normpath(p) for p in ld_library_path if p and os.path.isabs(p)]
        self._elf = {}
        self._listing = {}
        self._deps = {}

    def elf(self, path):
        real = os.path.realpath(path)
        if real not in self._elf:
            self._elf[real] = read_elf(real)
        return self._elf[real]

    def _has(self, directory, name):
        names = self._listing.get(directory)
        if names is None:
            try:
                names = frozenset(os.listdir(directory))
            except OSError:
                names = frozenset()
            self._listing[directory] = names
        return name in names

    def search_dirs(self, path, info):
        """Directories searched for the needs of object `path`, in loader order."""
        origin = os.path.dirname(path)
        if info.type == 2:  # executables: $ORIGIN is where the real file lives (/proc/self/exe)
            origin = os.path.dirname(os.path.realpath(path))
        dirs = []
        if not info.runpath:
            dirs += [expand_origin(p, origin) for p in info.rpath]
            if is_under(path, self.root):  # approximates the executable's RPATH
                dirs.append(os.path.join(self.root, "lib"))
        dirs += self.ld_library_path
        if info.runpath:
            dirs += [expand_origin(p, origin) for p in info.runpath]
            if is_under(path, self.root):
                dirs.append(os.path.join(self.root, "lib"))
        dirs += self.system_dirs
        return unique(d for d in dirs if d)

    def find(self, name, dirs, machine):
        for directory in dirs:
            if self._has(directory, name):
                candidate = os.path.join(directory, name)
                info = self.elf(candidate)
                if info is not None and info.machine == machine:
                    # Name the file through its real folder (/lib -> /usr/lib on merged-/usr
                    # systems) but keep a symlinked file name: that name is what is opened.
                    return os.path.join(os.path.realpath(directory), name)
        return None

    def deps(self, path):
        """[(soname, resolved path or None)] for the direct needs of `path`, loader skipped."""
        if path in self._deps:
            return self._deps[path]
        info = self.elf(path)
        out = []
        if info is not None and info.needed:
            dirs = self.search_dirs(path, info)
            for name in info.needed:
                if is_loader(name):
                    continue
                if "/" in name:
                    target = name if os.path.isabs(name) else os.path.join(os.path.dirname(path), name)
                    out.append((name, target if self.elf(target) is not None else None))
                else:
                    out.append((name, self.find(name, dirs, info.machine)))
        self._deps[path] = out
        return out

    def closure(self, seeds, inside, stop=(), local=None):
        """External needs and missing sonames of `seeds`, transitively.

        `inside`: prefixes whose files belong to the unit (walked, never reported);
        `stop`: prefixes reported elsewhere (the core): neither reported nor walked;
        `local`: soname -> path of objects in the unit, standing in for libraries the
        loader would find already loaded (objects without RPATH that rely on a sibling).
        """
        local = local or {}
        needs = {}
        missing = set()
        seen = set()
        stack = list(seeds)
        while stack:
            obj = stack.pop()
            for soname, resolved in self.deps(obj):
                if resolved is None:
                    resolved = local.get(soname)
                    if resolved is None:
                        missing.add(soname)
                        continue
                if resolved in seen:
                    continue
                seen.add(resolved)
                if any(is_under(resolved, p) for p in stop):
                    continue
                if not any(is_under(resolved, p) for p in inside):
                    needs[resolved] = soname
                stack.append(resolved)
        return [self.need(soname, path) for path, soname in sorted(needs.items())], sorted(missing)

    def need(self, soname, path):
        real = os.path.realpath(path)
        try:
            size = os.stat(real).st_size
        except OSError:
            size = 0
        return {"soname": soname, "path": path, "realpath": real, "size": size, "links": symlink_chain(path)}


def symlink_chain(path):
    """The symlinks between `path` and its real file (e.g. through /etc/alternatives), in order.

    A copy into another image must recreate each of them for `path` to keep working.
    """
    chain = []
    current = path
    while os.path.islink(current) and current not in chain and len(chain) < 40:
        chain.append(current)
        target = os.path.normpath(os.path.join(os.path.dirname(current), os.readlink(current)))
        current = os.path.join(os.path.realpath(os.path.dirname(target)), os.path.basename(target))
    return chain
