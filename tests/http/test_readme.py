"""test_readme.py: the examples of README.md work exactly as written.

- Every `curl` command of the README's shell blocks is run (by bash, as
  printed, with 127.0.0.1:8080 pointed at the test server) and must answer
  2xx with a body of the type it declares: JSON that parses, YAML that
  parses, Prometheus text, or a PNG file where the command writes one.
- The C example is compiled with the README's own `cc` line against the
  built libattnbias.a and run; its printed ALiBi slopes and attention rows
  are compared with a float64 numpy reference computed here from the
  arrays in the example's source.
- The Python client's install commands run as printed (Debian's
  interpreter, a virtualenv, pip offline) and its example runs with that
  virtualenv against the test server, saving its figures.
- Every flag of the configuration table is one the server accepts.
- The Docker files, checked statically (no Docker engine runs the tests):
  two stages on Debian bookworm, the package lists installed from
  docker/packages-*.txt, a numeric non-root user, tini, the healthcheck,
  and every shared library the binary needs provided by a runtime package.

Tests follow tests/http/run.py's convention; run alone with
    /usr/bin/python3 tests/http/run.py tests/http/test_readme.py
"""

import ast
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile

import numpy as np
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
README = os.path.join(ROOT, "README.md")

DEFAULT = "http://127.0.0.1:8080"


def code_blocks(lang=None, path=README):
    """[(language, text)] of the fenced blocks of a Markdown file."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    blocks = re.findall(r"^```([\w+-]*)\n(.*?)^```", text, re.M | re.S)
    return [(l, b) for l, b in blocks if lang is None or l == lang]


def shell_commands(block):
    """The commands of a shell block: backslash continuations and lines
    inside a single-quoted string (a multi-line JSON body) are joined."""
    cmds, cur = [], ""
    for line in block.splitlines():
        cur += line
        if cur.endswith("\\"):
            cur += "\n"          # bash reads backslash-newline as it is
            continue
        if cur.count("'") % 2:
            cur += "\n"
            continue
        if cur.strip():
            cmds.append(cur.strip())
        cur = ""
    return cmds


def curl_commands(path=README):
    """The curl commands aimed at the `make run` server (the Unix-socket
    and HTTPS examples start their own servers: test_unix_socket_example,
    test_https_example; the container example is run by `make image-test`,
    tests/image/test_image.py)."""
    out = []
    for lang, block in code_blocks("sh", path):
        if "--unix-socket" in block or "--tls-cert" in block or "podman" in block:
            continue
        out += [c for c in shell_commands(block) if c.startswith("curl ")]
    return out


# ===========================================================================

def run_curl(server, cmds):
    """Run each curl command as printed (aimed at the test server); each must
    answer 2xx with a body of the type it declares."""
    base = server.url
    with tempfile.TemporaryDirectory() as tmp:
        for cmd in cmds:
            assert DEFAULT in cmd, "example not aimed at %s: %s" % (DEFAULT, cmd)
            if "Content-Type" not in cmd and " -d " in cmd:
                raise AssertionError("POST example without Content-Type: %s" % cmd)
            run = cmd.replace(DEFAULT, base).replace(
                "curl ", "curl -w '\\n@@status %{http_code} %{content_type} "
                "@@ignored %header{x-attnbias-ignored}\\n' ", 1)
            p = subprocess.run(["bash", "-c", run], cwd=tmp, capture_output=True,
                               timeout=120)
            assert p.returncode == 0, "%s\nexit %d: %s" % (cmd, p.returncode, p.stderr[-500:])
            body, _, trailer = p.stdout.rpartition(b"\n@@status ")
            trailer, _, ignored = trailer.decode().partition("@@ignored")
            status, _, ctype = trailer.strip().partition(" ")
            assert status.startswith("2"), "%s\n-> %s %r" % (cmd, status, body[:400])
            # A misspelt field would be ignored, and the example would lie.
            assert not ignored.strip(), "%s\nignored fields: %s" % (cmd, ignored)
            m = re.search(r"(?:-o|--output) (\S+)", cmd)
            if m:
                with open(os.path.join(tmp, m.group(1)), "rb") as f:
                    body = f.read()
            if ctype.startswith("application/json"):
                obj = json.loads(body)
                assert isinstance(obj, dict) and obj, cmd
            elif "yaml" in ctype:
                assert yaml.safe_load(body)["openapi"].startswith("3.1"), cmd
            elif ctype.startswith("text/plain"):
                assert b"attnbias_requests_total" in body, cmd
            elif ctype.startswith("image/png"):
                assert body[:8] == b"\x89PNG\r\n\x1a\n", cmd
            else:
                raise AssertionError("%s: unexpected content type %r" % (cmd, ctype))


def test_curl_examples(server):
    cmds = curl_commands()
    routes = {re.search(r"https?://[^/\s]+(/[^\s']*)", c).group(1) for c in cmds}
    # One example per route at least (the nine of docs/http.md#routes).
    for path in ("/healthz", "/readyz", "/metrics", "/openapi.yaml", "/v1/methods",
                 "/v1/encodings", "/v1/rope", "/v1/bias", "/v1/attention"):
        assert path in routes, "README has no curl example for %s" % path
    run_curl(server, cmds)


def test_docs_curl_examples(server):
    """docs/models.md: one request per model family, as printed."""
    path = os.path.join(ROOT, "docs", "models.md")
    cmds = curl_commands(path)
    assert len(cmds) >= 10, len(cmds)
    run_curl(server, cmds)


def _c_arrays(src):
    """{name: ndarray} of the `float name[a][b] = {...};` literals."""
    out = {}
    for name, dims, body in re.findall(
            r"float (\w+)((?:\[\d+\])+) = \{(.*?)\};", src, re.S):
        shape = [int(d) for d in re.findall(r"\d+", dims)]
        nums = [float(x) for x in re.findall(r"-?\d+(?:\.\d*)?(?:[eE]-?\d+)?", body)]
        out[name] = np.array(nums).reshape(shape)
    return out


def test_unix_socket_example(binary):
    """The Unix-socket block runs as printed (its server binary and socket
    path pointed at this build and a temporary directory): the health check
    answers through the socket, and the server removes the file when it
    stops."""
    blocks = [b for _, b in code_blocks("sh") if "--unix-socket" in b]
    assert len(blocks) == 1, "want one Unix-socket example in README.md"
    with tempfile.TemporaryDirectory() as tmp:
        sock = os.path.join(tmp, "attnbiasd.sock")
        script = blocks[0].replace("build/attnbiasd", binary).replace(
            "/tmp/attnbiasd.sock", sock)
        assert script != blocks[0], "the example no longer names build/attnbiasd"
        p = subprocess.run(["bash", "-c", script + "\nwait\n"], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert '{"status":"ok"}' in p.stdout, p.stdout
        assert not os.path.exists(sock), "the socket file outlived the server"


def test_https_example(binary):
    """The HTTPS block runs as printed (its binary, port and files pointed
    at this build, a free port and a temporary directory): openssl makes a
    self-signed certificate, curl --cacert gets the health answer, the
    health check verifies the server with its own certificate, and SIGHUP
    then SIGTERM leave the server exiting 0."""
    blocks = [b for _, b in code_blocks("sh") if "--tls-cert" in b]
    assert len(blocks) == 1, "want one HTTPS example in README.md"
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = str(s.getsockname()[1])
    s.close()
    with tempfile.TemporaryDirectory() as tmp:
        # The binary goes in last: a checkout under /tmp must keep its path.
        script = (blocks[0].replace("8443", port).replace("/tmp/", tmp + "/")
                  .replace("build/attnbiasd", binary))
        assert script.count(port) >= 3, "the example no longer uses port 8443"
        p = subprocess.run(["bash", "-c", "set -e\n" + script + "\nwait $!\n"], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert '{"status":"ok"}' in p.stdout and "healthy" in p.stdout, p.stdout
        assert "SIGHUP: TLS reloaded" in p.stderr, p.stderr


def test_c_example(binary):
    blocks = code_blocks("c")
    assert len(blocks) == 1, "want one C example in README.md"
    src = blocks[0][1]
    cc_lines = [c for _, b in code_blocks("sh") for c in shell_commands(b)
                if c.startswith("cc ") and "example.c" in c and "pkg-config" not in c]
    assert cc_lines, "README has no cc line for the example"
    bdir = os.path.dirname(binary)        # the build directory under test
    assert os.path.exists(os.path.join(bdir, "libattnbias.a")), bdir
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "example.c"), "w") as f:
            f.write(src)
        # The README's paths (lib/include, build/libattnbias.a) resolve here.
        os.symlink(os.path.join(ROOT, "lib"), os.path.join(tmp, "lib"))
        os.symlink(bdir, os.path.join(tmp, "build"))
        # Under `make asan` the library is instrumented: link the runtime too.
        cc = "%s -Wall -Wextra -Werror %s" % (
            cc_lines[0], os.environ.get("ATTNBIAS_TEST_LDFLAGS", ""))
        p = subprocess.run(["bash", "-c", cc], cwd=tmp, capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, "%s\n%s" % (cc, p.stderr)
        p = subprocess.run([os.path.join(tmp, "example")], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    slopes = [float(x) for x in lines[0].split(":")[1].split()]
    np.testing.assert_allclose(slopes, [2.0 ** -(h + 1) for h in range(8)], rtol=1e-6)
    # Reference: one head, ALiBi slope 2^-8, bottom-right causal.
    a = _c_arrays(src)
    q, k, v = a["q"], a["k"], a["v"]
    nq, nk = len(q), len(k)
    pq, pk = np.arange(nq) + nk - nq, np.arange(nk)
    s = q @ k.T / math.sqrt(q.shape[1]) - 2.0 ** -8 * np.abs(pq[:, None] - pk[None, :])
    s = np.where(pk[None, :] > pq[:, None], -np.inf, s)
    lse = np.log(np.exp(s).sum(axis=1))
    out = np.exp(s - lse[:, None]) @ v
    for r in range(nq):
        m = re.match(r"out\[%d\]: (.*)  lse (\S+)$" % r, lines[1 + r])
        assert m, lines
        np.testing.assert_allclose([float(x) for x in m.group(1).split()], out[r],
                                   rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(float(m.group(2)), lse[r], rtol=1e-5, atol=1e-6)


def test_install_and_pkg_config(binary):
    """`make install PREFIX=...` puts the header, the libraries and an
    attnbias.pc naming that prefix, and the README's pkg-config line builds
    the example against them."""
    src = code_blocks("c")[0][1]
    with open(README) as f:
        m = re.search(r"`(cc example\.c \$\(pkg-config [^`]*)`", f.read())
    assert m, "README has no pkg-config cc line"
    bdir = os.path.dirname(binary)
    with tempfile.TemporaryDirectory() as tmp:
        prefix = os.path.join(tmp, "prefix")
        p = subprocess.run(["make", "-s", "install", "PREFIX=" + prefix, "BUILD=" + bdir],
                           cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stdout + p.stderr
        pc = os.path.join(prefix, "lib", "pkgconfig", "attnbias.pc")
        with open(pc) as f:
            assert f.readline().strip() == "prefix=" + prefix
        for name in ("include/attnbias.h", "lib/libattnbias.a", "lib/libattnbias.so"):
            assert os.path.exists(os.path.join(prefix, name)), name
        with open(os.path.join(tmp, "example.c"), "w") as f:
            f.write(src)
        env = dict(os.environ, PKG_CONFIG_PATH=os.path.dirname(pc),
                   LD_LIBRARY_PATH=os.path.join(prefix, "lib"))
        cc = "%s -Wall -Wextra -Werror %s -o example" % (
            m.group(1), os.environ.get("ATTNBIAS_TEST_LDFLAGS", ""))
        p = subprocess.run(["bash", "-c", cc], cwd=tmp, env=env, capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 0, "%s\n%s" % (cc, p.stderr)
        p = subprocess.run([os.path.join(tmp, "example")], env=env, capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 0 and p.stdout.startswith("slopes:"), p


def test_python_example(server):
    """The Python client section as a reader follows it: its install block
    run as printed (in a directory holding a copy of api/python and
    examples/, so that nothing writes into the source tree), then its
    example with that virtualenv's python, aimed at the test server; the
    figures it saves are PNGs of a sensible size.  Then the notebook block:
    the virtualenv made a kernel (in a temporary Jupyter data directory) and
    examples/positions.ipynb run by nbconvert as printed, every cell
    answered and every figure drawn (test_notebook.py checks its numbers)."""
    from PIL import Image
    import test_notebook
    section = README_TEXT().split("### Python client", 1)[1].split("\n## ", 1)[0]
    install = [b for l, b in code_blocks("sh") if "-m venv" in b]
    assert len(install) == 1 and install[0] in section, "want one install block"
    cmds = shell_commands(install[0])
    assert cmds[0].startswith("/usr/bin/python3 -m venv --system-site-packages "), cmds
    example = [b for l, b in code_blocks("python") if b in section]
    assert len(example) == 1, "want one Python example in the section"
    notebook = [b for l, b in code_blocks("sh") if "nbconvert" in b]
    assert len(notebook) == 1 and notebook[0] in section, "want one notebook block"
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(os.path.join(ROOT, "api", "python"), os.path.join(tmp, "api", "python"),
                        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
        shutil.copytree(os.path.join(ROOT, "examples"), os.path.join(tmp, "examples"))
        env = dict(os.environ, PIP_CONFIG_FILE=os.devnull)
        for cmd in cmds:
            p = subprocess.run(["bash", "-c", cmd], cwd=tmp, env=env, capture_output=True,
                               text=True, timeout=600)
            assert p.returncode == 0, "%s\n%s%s" % (cmd, p.stdout[-2000:], p.stderr[-2000:])
        python = os.path.join(tmp, ".venv", "bin", "python")
        src = example[0].replace(DEFAULT, server.url)
        env = dict(os.environ, MPLBACKEND="agg")
        env.pop("PYTHONPATH", None)
        p = subprocess.run([python, "-c", src], cwd=tmp, env=env, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-2000:]
        out = p.stdout.splitlines()
        assert out[0].split()[0].startswith("1.1386"), out        # YaRN factor 4
        assert out[1] == "(1, 8, 256, 64) (1, 8, 256)", out
        assert out[2].startswith("400 /rotary_dim "), out
        # The planner's YaRN fields for 4k -> 32k.
        assert out[3] == ("{'rope_type': 'yarn', 'factor': 8.0, "
                          "'original_max_position_embeddings': 4096, "
                          "'beta_fast': 32.0, 'beta_slow': 1.0}"), out
        used = ast.literal_eval(out[4])                           # a tuple of key names
        assert {"rope_theta", "rope_scaling", "model_type"} <= set(used), out
        for name in re.findall(r'savefig\("([^"]+)"\)', src):
            with Image.open(os.path.join(tmp, name)) as im:
                assert im.format == "PNG" and 300 <= im.width <= 3000, (name, im.size)
        # The notebook, as printed: its kernel goes to a temporary Jupyter
        # data directory, and ATTNBIAS_URL aims it at the test server.
        env = test_notebook.jupyter_env(server.url, tmp)
        for cmd in shell_commands(notebook[0]):
            p = subprocess.run(["bash", "-c", cmd], cwd=tmp, env=env, capture_output=True,
                               text=True, timeout=900)
            assert p.returncode == 0, "%s\n%s%s" % (cmd, p.stdout[-2000:], p.stderr[-4000:])
        with open(os.path.join(tmp, "positions-run.ipynb"), encoding="utf-8") as f:
            test_notebook.check_outputs(json.load(f), "README's run")


# The Python section builds a virtualenv, installs the client and runs the
# notebook in a kernel: minutes on a loaded machine.
test_python_example.timeout = 1800


def README_TEXT():
    with open(README, encoding="utf-8") as f:
        return f.read()


def test_configuration_flags(binary, start):
    """The configuration table lists exactly the server's flags (its --help),
    and each takes the documented value form."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    table = text.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"`(--[a-z-]+)`", table))
    p = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=10)
    assert p.returncode == 0, p.stderr
    accepted = set(re.findall(r"^\s*(--[a-z-]+)", p.stdout + p.stderr, re.M))
    assert documented == accepted, "only in README: %s; only in --help: %s" % (
        sorted(documented - accepted), sorted(accepted - documented))
    srv = start("--threads", "1", "--max-queue", "8", "--max-body-mb", "16",
                "--max-output-mb", "64", "--max-gflop", "100", "--timeout-s", "10",
                "--max-connections", "64", "--drain-s", "5", "--http-threads", "2",
                api_key="k")
    assert srv.get("/healthz").status == 200
    assert srv.get("/v1/methods", headers={"Authorization": None}).status == 401
    # Every flag has its ATTNBIAS_<NAME> variable.
    srv = start(env={"ATTNBIAS_MAX_OUTPUT_MB": "1"})
    r = srv.post("/v1/bias", json={"method": "alibi", "num_heads": 64, "q_len": 128,
                                   "k_len": 128})
    assert r.status == 413, r


# ===========================================================================
# Docker, statically
# ===========================================================================

def _package_list(name):
    with open(os.path.join(ROOT, "docker", name), encoding="utf-8") as f:
        return [ln.strip() for ln in f if ln.strip() and not ln.strip().startswith("#")]


def _dockerfile_instructions():
    """[(INSTRUCTION, argument text)] with continuation lines joined."""
    with open(os.path.join(ROOT, "docker", "Dockerfile"), encoding="utf-8") as f:
        text = f.read()
    text = re.sub(r"\\\n", " ", text)
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_dockerfile(binary):
    ins = _dockerfile_instructions()
    froms = [a for i, a in ins if i == "FROM"]
    assert froms == ["debian:bookworm AS build", "debian:bookworm-slim AS runtime"], froms
    cut = [n for n, (i, _) in enumerate(ins) if i == "FROM"][1]
    build, runtime = ins[:cut], ins[cut:]
    # Each stage installs its lists from the files themselves, and nothing
    # else: the build stage both (make checks both), the runtime stage its own.
    for stage, lists in ((build, ["packages-build.txt", "packages-runtime.txt"]),
                         (runtime, ["packages-runtime.txt"])):
        for listfile in lists:
            assert any(i == "COPY" and "docker/" + listfile in a for i, a in stage), \
                "stage does not copy docker/%s" % listfile
        runs = [a for i, a in stage if i == "RUN" and "apt-get install" in a]
        assert len(runs) == 1, runs
        assert re.search(r"xargs apt-get install -y --no-install-recommends\s*&&", runs[0]), runs[0]
        # The pipeline of the RUN line yields exactly the packages of the lists.
        pipe = re.search(r"(cat .*?)\s*\|\s*xargs", runs[0]).group(1)
        p = subprocess.run(["bash", "-c", pipe.replace("/tmp/", "docker/")], cwd=ROOT,
                           capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        want = [pkg for listfile in lists for pkg in _package_list(listfile)]
        assert p.stdout.split() == want, (p.stdout, want)
    assert any(i == "RUN" and re.search(r"\bmake\b", a) for i, a in build), "no make in build"
    user = [a for i, a in runtime if i == "USER"]
    assert len(user) == 1 and re.fullmatch(r"[1-9]\d*(:[1-9]\d*)?", user[0]), user
    assert "tini" in _package_list("packages-runtime.txt")
    entry = json.loads(next(a for i, a in runtime if i == "ENTRYPOINT"))
    assert entry[:2] == ["/usr/bin/tini", "--"] and entry[2].endswith("attnbiasd"), entry
    # The address is set by the environment, which --healthcheck shares:
    # a flag in CMD would leave the HEALTHCHECK asking another port.
    env = " ".join(a for i, a in runtime if i == "ENV")
    assert "ATTNBIAS_HOST=0.0.0.0" in env.split() and "ATTNBIAS_PORT=8080" in env.split(), env
    cmd = json.loads(next(a for i, a in runtime if i == "CMD"))
    assert not any(c in ("--host", "--port") or c.startswith(("--host=", "--port="))
                   for c in cmd), cmd
    assert ("EXPOSE", "8080") in runtime
    health = next(a for i, a in runtime if i == "HEALTHCHECK")
    assert re.search(r'CMD \["[^"]*attnbiasd", "--healthcheck"\]', health), health
    copied = [a for i, a in runtime if i == "COPY"]
    assert any("--from=build" in a and "attnbiasd" in a for a in copied), copied
    # Every ATTNBIAS_* variable the file mentions is a flag of the server.
    with open(os.path.join(ROOT, "docker", "Dockerfile"), encoding="utf-8") as f:
        names = set(re.findall(r"ATTNBIAS_([A-Z_]+)", f.read()))
    _check_env_names(binary, names)


def _check_env_names(binary, names):
    p = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=10)
    flags = set(re.findall(r"^\s*--([a-z-]+)", p.stdout + p.stderr, re.M))
    for n in names:
        assert n.lower().replace("_", "-") in flags, "ATTNBIAS_%s is no flag" % n


def test_runtime_packages_cover_the_binary(binary):
    """Every shared library attnbiasd links comes from a runtime package
    (or from libc6, which every Debian image has)."""
    p = subprocess.run(["readelf", "-d", binary], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    needed = re.findall(r"Shared library: \[(.+?)\]", p.stdout)
    assert needed, p.stdout
    runtime = set(_package_list("packages-runtime.txt"))
    arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True,
                          text=True).stdout.strip()
    # A sanitizer build (make asan) links the sanitizer runtimes: those
    # belong to that build, not to the image's packages.
    needed = [lib for lib in needed if not re.match(r"lib(asan|ubsan|lsan|tsan)\.so", lib)]
    # One dpkg -S for all (each call reads every package's file list: one
    # per library took most of a minute on a loaded machine).
    q = subprocess.run(["dpkg", "-S"] + ["*/" + lib for lib in needed],
                       capture_output=True, text=True)
    owners = [ln.split(": ", 1) for ln in q.stdout.splitlines() if ": /" in ln]
    for lib in needed:
        pkgs = {pkg.split(":")[0] for pkg, path in owners
                if path.endswith("/" + lib) and (pkg.endswith(":" + arch) or ":" not in pkg)}
        assert pkgs, "no package provides %s" % lib
        assert pkgs & (runtime | {"libc6"}), "%s comes from %s, not in packages-runtime.txt" % (
            lib, sorted(pkgs))


def test_compose_and_dockerignore(binary):
    with open(os.path.join(ROOT, "docker", "compose.yaml"), encoding="utf-8") as f:
        comp = yaml.safe_load(f)
    svc = comp["services"]["attnbias"]
    assert svc["build"] == {"context": "..", "dockerfile": "docker/Dockerfile"}, svc["build"]
    assert any(str(p).endswith(":8080") for p in svc["ports"]), svc["ports"]
    assert svc["healthcheck"]["test"][-1] == "--healthcheck", svc["healthcheck"]
    limits = svc["deploy"]["resources"]["limits"]
    assert limits["cpus"] and limits["memory"], limits
    assert svc.get("stop_grace_period"), "no grace period for the drain"
    _check_env_names(binary, {k[len("ATTNBIAS_"):] for k in svc["environment"]})
    # The build context keeps what `make` needs.
    with open(os.path.join(ROOT, ".dockerignore"), encoding="utf-8") as f:
        ignored = [ln.strip().rstrip("/") for ln in f if ln.strip() and not ln.startswith("#")]
    for needed in ("lib", "server", "api", "docker", "Makefile", "attnbias.pc.in", "tests"):
        assert needed not in ignored, "%s is excluded from the build context" % needed
    assert ".git" in ignored and "build" in ignored, ignored
