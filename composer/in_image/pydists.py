"""The python distributions a pruned base keeps (prune.py --python); stdlib only.

pip-installed distributions are no dpkg packages: what they need of each other is only in their
installed metadata. Kept: the distributions the kept python code imports (found through each
distribution's RECORD) and those asked for by name (--pip, model environments), then what each
kept one requires (Requires-Dist, its environment markers evaluated for this python and platform;
an extra only when a kept requirement asks for it, as foo[bar]), until nothing changes. A
requirement naming a distribution that is not installed is reported by name when it is
unconditional; a conditional one (a marker, an extra) is noted only.
"""

import ast
import csv
import email.parser
import os
import platform
import re
import site
import sys

NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?\s*(.*)$")
TOKEN = re.compile(r"""\s*(\(|\)|===|==|!=|<=|>=|~=|<|>|not\s+in\b|in\b|and\b|or\b|not\b|'[^']*'|"[^"]*"|[A-Za-z_][A-Za-z0-9_.]*)""")
VERSION_VARIABLES = {"python_version", "python_full_version", "implementation_version", "platform_release"}


def normalize(name):
    """PEP 503: Foo_Bar.baz -> foo-bar-baz."""
    return re.sub(r"[-_.]+", "-", name).lower()


def environment():
    """The marker variables of the running python (the image's, which runs this script)."""
    info = sys.implementation.version
    implementation_version = "%d.%d.%d" % (info.major, info.minor, info.micro)
    if info.releaselevel != "final":
        implementation_version += info.releaselevel[0] + str(info.serial)
    return {
        "implementation_name": sys.implementation.name,
        "implementation_version": implementation_version,
        "os_name": os.name,
        "platform_machine": platform.machine(),
        "platform_release": platform.release(),
        "platform_system": platform.system(),
        "platform_version": platform.version(),
        "python_full_version": platform.python_version(),
        "platform_python_implementation": platform.python_implementation(),
        "python_version": ".".join(platform.python_version_tuple()[:2]),
        "sys_platform": sys.platform,
    }


class Requirement(object):
    """One Requires-Dist line: name, extras asked, marker (or None)."""

    def __init__(self, text):
        body, _, marker = text.partition(";")
        match = NAME.match(body)
        if not match:
            raise ValueError("not a requirement: %r" % text)
        self.text = text.strip()
        self.name = normalize(match.group(1))
        self.extras = frozenset(normalize(e.strip()) for e in (match.group(2) or "").split(",") if e.strip())
        self.marker = marker.strip() or None

    def applies(self, env, extras):
        """Whether it holds here, for the extras asked of the distribution that states it."""
        if self.marker is None:
            return True
        return any(evaluate(self.marker, dict(env, extra=extra)) for extra in [""] + sorted(extras))


def evaluate(marker, env):
    """A PEP 508 environment marker, evaluated against `env` (variable -> value)."""
    tokens, at = [], 0
    while at < len(marker.rstrip()):
        match = TOKEN.match(marker, at)
        if not match:
            raise ValueError("cannot read marker %r at %r" % (marker, marker[at:]))
        tokens.append(re.sub(r"\s+", " ", match.group(1)))
        at = match.end()
    value, rest = _or(tokens, env)
    if rest:
        raise ValueError("cannot read marker %r at %r" % (marker, " ".join(rest)))
    return value


def _or(tokens, env):
    value, tokens = _and(tokens, env)
    while tokens[:1] == ["or"]:
        right, tokens = _and(tokens[1:], env)
        value = value or right
    return value, tokens


def _and(tokens, env):
    value, tokens = _atom(tokens, env)
    while tokens[:1] == ["and"]:
        right, tokens = _atom(tokens[1:], env)
        value = value and right
    return value, tokens


def _atom(tokens, env):
    if tokens[:1] == ["("]:
        value, tokens = _or(tokens[1:], env)
        if tokens[:1] != [")"]:
            raise ValueError("unbalanced parentheses in a marker")
        return value, tokens[1:]
    if len(tokens) < 3:
        raise ValueError("incomplete marker")
    left, op, right = tokens[0], tokens[1], tokens[2]
    variable = left if left[0] not in "'\"" else right
    return _compare(_value(left, env), op, _value(right, env), variable), tokens[3:]


def _value(token, env):
    if token[0] in "'\"":
        return token[1:-1]
    return env.get(token, "")


def _compare(left, op, right, variable):
    if variable == "extra":
        left, right = normalize(left), normalize(right)
    if op == "in":
        return left in right
    if op == "not in":
        return left not in right
    if op == "===":
        return left == right
    if variable in VERSION_VARIABLES and op in ("==", "!=", "<", "<=", ">", ">=", "~="):
        a, b = _version(left), _version(right)
        if op == "~=":
            return a >= b and a[:len(b) - 1] == b[:len(b) - 1]
        if right.endswith(".*") and op in ("==", "!="):
            prefix = _version(right[:-2])
            return (a[:len(prefix)] == prefix) == (op == "==")
        width = max(len(a), len(b))
        a, b = a + (0,) * (width - len(a)), b + (0,) * (width - len(b))
        return {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
    return {"==": left == right, "!=": left != right, "<": left < right, "<=": left <= right,
            ">": left > right, ">=": left >= right, "~=": left == right}[op]


def _version(text):
    """'3.11.4' -> (3, 11, 4): the release numbers, up to the first part that is not one."""
    numbers = []
    for part in text.split("."):
        match = re.match(r"\d+", part)
        if not match:
            break
        numbers.append(int(match.group(0)))
        if match.group(0) != part:
            break
    return tuple(numbers)


class Distribution(object):
    """An installed distribution: its metadata folder, requirements and files (from RECORD)."""

    def __init__(self, site, info):
        self.site, self.info = site, os.path.join(site, info)
        metadata = self._read("METADATA") or self._read("PKG-INFO") or ""
        fields = email.parser.Parser().parsestr(metadata, headersonly=True)
        stem = re.split(r"-\d", info.rsplit(".", 1)[0], 1)[0]
        self.name = normalize(fields.get("Name") or stem)
        self.shown = fields.get("Name") or stem
        self.version = fields.get("Version", "")
        self.requires = [Requirement(r) for r in fields.get_all("Requires-Dist") or []]
        if not fields.get_all("Requires-Dist"):  # an egg-info's requires.txt
            self.requires = _requires_txt(self._read("requires.txt") or "")
        self.files = self._files()
        self.modules = self._modules()

    def _read(self, name):
        try:
            with open(os.path.join(self.info, name), errors="replace") as fh:
                return fh.read()
        except OSError:
            return None

    def _files(self):
        """Every file it installed, as absolute normalized paths; its metadata folder's included."""
        paths = set()
        record = self._read("RECORD")
        if record is not None:
            for row in csv.reader(record.splitlines()):
                if row and row[0]:
                    paths.add(os.path.normpath(os.path.join(self.site, row[0])))
        else:
            for line in (self._read("installed-files.txt") or "").splitlines():
                if line.strip():
                    paths.add(os.path.normpath(os.path.join(self.info, line.strip())))
        for folder, _, names in os.walk(self.info):
            paths.update(os.path.join(folder, n) for n in names)
        return sorted(paths)

    def _modules(self):
        """The top-level modules it provides: top_level.txt, else the first part of its files."""
        listed = (self._read("top_level.txt") or "").split()
        if listed:
            return set(listed)
        modules = set()
        for path in self.files:
            relative = os.path.relpath(path, self.site)
            head = relative.split(os.sep, 1)[0]
            if relative.startswith("..") or head.endswith((".dist-info", ".egg-info", ".pth")) or head == "__pycache__":
                continue
            modules.add(head.split(".", 1)[0] if head.endswith((".py", ".so")) else head)
        return modules

    def size(self):
        total = 0
        for path in self.files:
            try:
                total += os.lstat(path).st_size
            except OSError:
                pass
        return total


def _requires_txt(text):
    """An egg-info's requires.txt: plain lines, then [extra] or [:marker] or [extra:marker] sections."""
    found, marker = [], None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            extra, _, condition = line.strip("[]").partition(":")
            parts = (['extra == "%s"' % extra] if extra else []) + (["(%s)" % condition] if condition else [])
            marker = " and ".join(parts) or None
            continue
        found.append(Requirement(line + ("; " + marker if marker else "")))
    return found


def installed(sites):
    """name -> Distribution over the site folders, the first one on the path winning."""
    found = {}
    for site in sites:
        try:
            entries = sorted(os.listdir(site))
        except OSError:
            continue
        for entry in entries:
            if entry.endswith((".dist-info", ".egg-info")) and os.path.isdir(os.path.join(site, entry)):
                dist = Distribution(site, entry)
                found.setdefault(dist.name, dist)
    return found


def imported_modules(files):
    """Top-level modules the python files import ({module: first file}), relative imports aside."""
    modules = {}
    for path in sorted(files):
        try:
            with open(path, "rb") as fh:
                tree = ast.parse(fh.read(), path)
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                modules.setdefault(name.split(".")[0], path)
    return modules


class Closure(object):
    """The kept distributions, each with why (the chain of Requires-Dist), until nothing changes."""

    def __init__(self, dists, env):
        self.dists, self.env = dists, env
        self.why = {}  # name -> why it stays
        self.extras = {}  # name -> extras asked of it
        self.missing = []  # (requirement, why): unconditional, not installed
        self.absent = []  # (requirement, why): conditional, not installed (noted only)
        self.by_module = {}
        for dist in dists.values():
            for module in dist.modules:
                self.by_module.setdefault(module, dist.name)

    def add(self, name, why, extras=()):
        """Keep `name` (and the extras asked of it); False when nothing changed."""
        name = normalize(name)
        if name not in self.dists:
            return False
        new = set(extras) - self.extras.get(name, set())
        if name in self.why and not new:
            return False
        self.why.setdefault(name, why)
        self.extras.setdefault(name, set()).update(new)
        return True

    def settle(self):
        """Follow Requires-Dist of every kept distribution until nothing changes."""
        done = {}
        while True:
            todo = [n for n in sorted(self.why) if done.get(n) != self.extras[n]]
            if not todo:
                return
            for name in todo:
                done[name] = set(self.extras[name])
                dist = self.dists[name]
                for requirement in dist.requires:
                    if not requirement.applies(self.env, self.extras[name]):
                        continue
                    why = "%s -> %s" % (self.why[name], requirement.name)
                    if requirement.name not in self.dists:
                        entry = (requirement.text, "%s requires it" % dist.shown)
                        listing = self.missing if requirement.marker is None else self.absent
                        if entry not in listing:
                            listing.append(entry)
                        continue
                    self.add(requirement.name, why, requirement.extras)

    def owners(self):
        """path -> the installed distribution whose RECORD lists it (every one, kept or not)."""
        owner = {}
        for name in sorted(self.dists):
            for path in self.dists[name].files:
                owner.setdefault(path, name)
        return owner


def site_folders():
    """The running python's dist-packages / site-packages folders, in path order."""
    folders = [p for p in site.getsitepackages() if os.path.isdir(p)]
    user = site.getusersitepackages()
    return folders + ([user] if os.path.isdir(user) else [])
