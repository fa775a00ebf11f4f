"""Runs inside the build (a model environment's stage); stdlib only.

Makes one python model's environment where the image will hold it: a venv of this python (the
python backend stub's) that also sees the image's packages, so numpy stays the image's unless
the model pins its own, then installs the model's requirements into it from its wheelhouse
alone (no index, no network). A venv whose python is not the stub's fails here, naming both.

Usage: make_env.py ENV_PATH STUB_PYTHON FOLDER PIP...
  FOLDER holds requirements.txt, constraints.txt and wheelhouse/; PIP is how to run pip with
  the environment's python (`-m pip`, or a pip wheel's path).
"""

import os
import subprocess
import sys
import venv


def main(env_path, stub_python, folder, pip):
    venv.EnvBuilder(system_site_packages=True, symlinks=True, with_pip=False).create(env_path)
    python = os.path.join(env_path, "bin", "python3")
    found = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                           capture_output=True, text=True, check=True).stdout.strip()
    if found != stub_python:
        sys.exit(f"the environment {env_path} has python {found}, but the python backend stub is built for "
                 f"python {stub_python}")
    subprocess.run(
        [python, *pip, "install", "--no-cache-dir", "--disable-pip-version-check", "--no-warn-script-location",
         "--no-compile", "--no-index", "--find-links", os.path.join(folder, "wheelhouse"),
         "--requirement", os.path.join(folder, "requirements.txt"),
         "--constraint", os.path.join(folder, "constraints.txt")],
        check=True,
    )
    # Byte-code after pip, by the source's hash, with a fixed hash seed (a set constant is written in
    # hash order): the same wheels give the same files. A file python cannot compile is not an error.
    site = os.path.join(env_path, "lib", "python" + found, "site-packages")
    subprocess.run([python, "-m", "compileall", "-q", "-r", "64", "--invalidation-mode", "checked-hash", site],
                   env={**os.environ, "PYTHONHASHSEED": "0"}, stdout=subprocess.DEVNULL, check=False)


if __name__ == "__main__":
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
