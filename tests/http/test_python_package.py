"""test_python_package.py: the Python client as a user installs it.

api/python is copied to a temporary directory (the build writes into its
source tree), installed with pip into a fresh virtualenv made by Debian's
interpreter with the system's packages visible -- offline: --no-index, and
--no-build-isolation so that the build backend is Debian's setuptools --
and then, with that virtualenv's python:
- the installed package (not the source tree) is what imports, with its
  py.typed marker, and the former module name attnbias_client still works;
- mypy --strict accepts the installed package as a typed library;
- the package's own tests (api/python/tests, unittest) pass against this
  file's server, every one of them run and none skipped.

Tests follow tests/http/run.py's convention; run alone with
    /usr/bin/python3 tests/http/run.py tests/http/test_python_package.py
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SOURCE = os.path.join(ROOT, "api", "python")
# Debian's interpreter, whatever python3 comes first on PATH.
DEBIAN_PYTHON = "/usr/bin/python3"


def copy_source(dest):
    """api/python without what an earlier build left in it."""
    shutil.copytree(SOURCE, dest, ignore=shutil.ignore_patterns(
        "build", "*.egg-info", "__pycache__", "*.pyc"))


def make_venv(tmp, source):
    """A fresh virtualenv with the package installed from source; returns
    its python."""
    venv = os.path.join(tmp, "venv")
    run([DEBIAN_PYTHON, "-m", "venv", "--system-site-packages", venv], tmp)
    # PIP_CONFIG_FILE: no user or site pip configuration (an index URL) applies.
    run([os.path.join(venv, "bin", "pip"), "install", "--no-index", "--no-build-isolation",
         "--disable-pip-version-check", source], tmp,
        env=dict(os.environ, PIP_CONFIG_FILE=os.devnull))
    return os.path.join(venv, "bin", "python")


def run(cmd, cwd, env=None, timeout=600):
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=timeout)
    assert p.returncode == 0, "%s\nexit %d\n%s%s" % (" ".join(cmd), p.returncode,
                                                   p.stdout[-3000:], p.stderr[-3000:])
    return p


def test_installed_package(server):
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "attnbias-client")
        copy_source(source)
        python = make_venv(tmp, source)
        venv = os.path.dirname(os.path.dirname(python))
        # Imported from the virtualenv's site-packages, typed, shim included.
        p = run([python, "-c",
                 "import os, attnbias, attnbias_client\n"
                 "print(os.path.dirname(attnbias.__file__))\n"
                 "print(attnbias.__version__, attnbias_client.Client is attnbias.Client)"], tmp)
        where, version = p.stdout.split("\n")[:2]
        assert where.startswith(os.path.join(venv, "lib")) and "site-packages" in where, where
        assert os.path.exists(os.path.join(where, "py.typed")), os.listdir(where)
        assert re.fullmatch(r"\d+\.\d+\.\d+ True", version), version
        # A typed library for its users: mypy --strict finds nothing.
        p = run([python, "-m", "mypy", "--strict", "--config-file",
                 os.path.join(source, "pyproject.toml"), "--cache-dir",
                 os.path.join(tmp, "mypy-cache"), "-p", "attnbias"],
                tmp)
        assert "Success" in p.stdout, p.stdout
        # The package's tests, from a directory where only the installed
        # package can be imported.
        env = dict(os.environ, ATTNBIAS_URL=server.url, MPLBACKEND="agg",
                   PYTHONDONTWRITEBYTECODE="1")
        env.pop("PYTHONPATH", None)
        if server.api_key:
            env["ATTNBIAS_API_KEY"] = server.api_key
        tests = os.path.join(source, "tests")
        p = subprocess.run([python, "-m", "unittest", "discover", "-v", "-s", tests,
                            "-t", tests], cwd=tmp, env=env, capture_output=True, text=True,
                           timeout=900)
        out = p.stdout + p.stderr
        sys.stdout.write("".join(l + "\n" for l in out.splitlines()
                                 if l.endswith(" ... ok") or "Ran " in l))
        assert p.returncode == 0, out[-6000:]
        ran = re.search(r"^Ran (\d+) tests?", out, re.M)
        assert ran and int(ran.group(1)) >= 20, out[-2000:]
        assert re.search(r"^OK$", out, re.M), "skipped or failed tests:\n" + out[-3000:]


# A virtualenv, an install, mypy --strict and the package's own tests: about
# 100 s on an idle 2-core machine, so more than the harness's default limit.
# The harness's hang guard for this test, which makes a virtualenv, installs
# into it and runs mypy --strict from a cold cache: over 300 s with both
# cores busy.  Its steps have their own bounds (run's 600 s, the unit tests'
# 900 s) and this one is their sum.
test_installed_package.timeout = 4 * 600 + 900
