"""The composer's command line as a process of its own per run, forked from one that imported it once.

A table of hundreds of bad inputs spent most of its time starting Python and importing the composer
(about a second a run on a loaded machine) before the one line under test. A server process imports
composer.cli.main once; each run is a child forked from it: its own pid, environment, working
folder, stdin (/dev/null), stdout and stderr, and its exit status the process's own, as
`python -m composer ARGS` would give (the same main(), the same code after the interpreter's start).
The server never runs a command itself, so every child starts from the same state; it also imports
what typer imports on each run's first parse (pydantic), which each child would import again.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

_SERVER = r"""
import base64, json, os, signal, sys
from composer.cli.main import main
import typer._adapters  # what typer imports on a run's first parse (pydantic: a quarter second a run)
requests = sys.stdin
answers = os.fdopen(os.dup(1), "w")
for line in requests:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            for fd, path in ((1, request["out"]), (2, request["err"])):
                os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
            sys.argv = ["composer", *(os.fsdecode(base64.b64decode(a)) for a in request["args"])]
            signal.alarm(120)  # a run that hangs ends as a killed process would (the client's timeout)
            try:
                main()
                code = 0
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:
            import traceback
            traceback.print_exc()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    answers.write(json.dumps({"code": os.waitstatus_to_exitcode(status)}) + "\n")
    answers.flush()
"""


class ForkedCli:
    """One server; `run` is thread-safe (one child at a time per server: make one per thread)."""

    def __init__(self, root: Path):
        self.folder = Path(tempfile.mkdtemp(prefix="forked-cli-"))
        self.server = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       text=True, cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
        self.lock = threading.Lock()
        self.count = 0

    def run(self, args, env: dict, cwd: Path) -> subprocess.CompletedProcess:
        with self.lock:
            self.count += 1
            out, err = self.folder / f"{self.count}.out", self.folder / f"{self.count}.err"
            raw = [a if isinstance(a, bytes) else os.fsencode(a) for a in args]
            request = {"args": [base64.b64encode(a).decode() for a in raw], "env": env, "cwd": str(cwd),
                       "out": str(out), "err": str(err)}
            self.server.stdin.write(json.dumps(request) + "\n")
            self.server.stdin.flush()
            answer = self.server.stdout.readline()
            if not answer:
                raise RuntimeError("the forked command line's server ended")
            code = json.loads(answer)["code"]
            stdout = out.read_text(errors="replace")
            stderr = err.read_text(errors="replace")
            out.unlink()
            err.unlink()
        return subprocess.CompletedProcess(["composer", *args], code, stdout, stderr)

    def close(self) -> None:
        self.server.stdin.close()
        try:
            self.server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.server.kill()
        for path in self.folder.iterdir():
            path.unlink()
        self.folder.rmdir()
