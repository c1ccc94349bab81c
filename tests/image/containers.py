"""containers.py: what the image tests share -- the image built once per run
under a unique tag (and everything that build left removed afterwards),
containers with unique names on the host's loopback, waits decided by
events with a deadline, and a throwaway TLS certificate.

Used by tests/image/test_image.py (`make image-test`) and
tests/image/scale_test.py (`make scale-test`).  podman runs with this host's
settings through docker/podman.py.
"""

import http.client
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "docker"))
sys.path.insert(0, os.path.join(ROOT, "api", "python"))

import podman as pm  # noqa: E402  (docker/podman.py)

RUN_ID = uuid.uuid4().hex[:8]
#: The image's numeric user (docker/Dockerfile's USER).
UID = 10001


def log(msg):
    print(msg, flush=True)


def free_port():
    """A port nothing listens on now (the kernel's pick, then released)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_until(what, cond, timeout, interval=0.05):
    """Poll cond() until it returns a true value (returned); fail with
    `what` after timeout seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            v = cond()
            if v:
                return v
        except (OSError, http.client.HTTPException) as e:
            last = e
        time.sleep(interval)
    raise AssertionError("%s: not within %.0f s%s" % (what, timeout,
                                                     " (last: %r)" % last if last else ""))


def http_get(port, path, tls_context=None, timeout=10):
    """-> (status, headers, body) of GET path on 127.0.0.1:port."""
    if tls_context is not None:
        c = http.client.HTTPSConnection("127.0.0.1", port, timeout=timeout, context=tls_context)
    else:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


# ---------------------------------------------------------------------------
# the image
# ---------------------------------------------------------------------------

class Image:
    """docker/Dockerfile built as written under a unique tag.  remove()
    deletes the tag and the images the build made: only the layers of the
    two apt-get steps stay, tagged localhost/attnbias-cache:build-deps and
    :runtime-deps (podman's cache, so that the next build does not download
    every package again; untagged, podman would remove them with the
    images above them)."""

    def __init__(self, name):
        self.tag = "localhost/attnbias-%s-%s:test" % (name, RUN_ID)
        self.before = set()
        self.seconds = None

    def build(self):
        pm.ensure_tools()
        pm.ensure_base()
        self.before = _image_ids()
        t0 = time.monotonic()
        pm.build(self.tag)
        self.seconds = time.monotonic() - t0
        return self

    def remove(self):
        made = _image_ids() - self.before
        dangling = set(pm.podman("images", "-q", "--no-trunc", "--filter", "dangling=true",
                                 check=False).stdout.split())
        # The build's last images: this tag, and the build stage's end.
        for top in [self.tag] + sorted(dangling & made):
            hist = _history(top)          # newest step first
            for i, (_, by) in enumerate(hist):
                if "apt-get install" not in by:
                    continue
                # The image of that step, or of the first step after it that
                # has one (a step that adds no layer, WORKDIR, shares it).
                iid = next((h[0] for h in reversed(hist[:i + 1]) if h[0] != "<missing>"), None)
                if iid:
                    _keep_as_cache(iid, "build-deps" if "packages-build.txt" in by
                                   else "runtime-deps")
        pm.podman("rmi", "-f", self.tag, check=False)
        gone = [i for i in dangling & made]
        if gone:
            pm.podman("rmi", *gone, check=False)

    def inspect(self, fmt):
        return pm.podman("image", "inspect", "--format", fmt, self.tag).stdout.strip()


def _image_ids():
    return set(pm.podman("images", "-a", "-q", "--no-trunc", check=False).stdout.split())


def _history(image):
    """[(image id or "<missing>", created by)] of image's steps, newest
    first."""
    out = []
    for line in pm.podman("history", "--no-trunc", "--format", "{{.ID}}\t{{.CreatedBy}}",
                          image, check=False).stdout.splitlines():
        iid, _, by = line.partition("\t")
        out.append((iid or "<missing>", by))
    return out


def _keep_as_cache(image_id, name):
    """Tag image_id localhost/attnbias-cache:NAME; the image the tag named
    before is removed (its packages list changed)."""
    ref = "localhost/attnbias-cache:" + name
    old = pm.podman("image", "inspect", "--format", "{{.Id}}", ref, check=False).stdout.strip()
    if old and not image_id.startswith(old) and not old.startswith(image_id):
        pm.podman("untag", old, ref, check=False)
        pm.podman("rmi", old, check=False)    # refused while other images build on it
    pm.podman("tag", image_id, ref, check=False)


# ---------------------------------------------------------------------------
# containers
# ---------------------------------------------------------------------------

class Container:
    """One container of the image on the host's network, listening on
    127.0.0.1:port (ATTNBIAS_PORT, which its HEALTHCHECK reads too)."""

    started = []        # every container of this run, removed by remove_all

    def __init__(self, image, label, port=None, env=None, podman_args=(), flags=(),
                 tls_context=None):
        self.image = image
        self.name = "attnbias-%s-%s-%s" % (label, RUN_ID, uuid.uuid4().hex[:6])
        self.port = port or free_port()
        self.env = dict(env or {})
        self.env.setdefault("ATTNBIAS_HOST", "127.0.0.1")
        self.env["ATTNBIAS_PORT"] = str(self.port)
        self.podman_args = list(podman_args)
        self.flags = list(flags)
        self.tls_context = tls_context

    def start(self):
        args = ["run", "-d", "--network", "host", "--name", self.name]
        for k, v in self.env.items():
            args += ["-e", "%s=%s" % (k, v)]
        Container.started.append(self.name)
        pm.podman(*(args + self.podman_args + [self.image.tag] + self.flags))
        return self

    def running(self):
        return self.inspect("{{.State.Running}}") == "true"

    def wait_ready(self, path="/readyz", timeout=120):
        def ready():
            if not self.running():
                raise AssertionError("container %s exited: %s" % (self.name, self.logs()[-2000:]))
            return http_get(self.port, path, self.tls_context, timeout=5)[0] == 200
        return wait_until("%s answers %s" % (self.name, path), ready, timeout)

    def inspect(self, fmt):
        return pm.podman("inspect", "--format", fmt, self.name, check=False).stdout.strip()

    def server_pid(self):
        """The host pid of attnbiasd (the child of tini, the container's
        first process)."""
        pid1 = int(self.inspect("{{.State.Pid}}"))
        with open("/proc/%d/task/%d/children" % (pid1, pid1)) as f:
            kids = f.read().split()
        assert len(kids) == 1, "tini has children %s" % kids
        return pid1, int(kids[0])

    def exec(self, *cmd, timeout=60):
        return pm.podman("exec", self.name, *cmd, check=False, timeout=timeout)

    def logs(self):
        p = pm.podman("logs", self.name, check=False)
        return (p.stdout or "") + (p.stderr or "")

    def signal(self, sig):
        pm.podman("kill", "--signal", sig, self.name)

    def stop(self, grace=60):
        """SIGTERM (through tini), up to `grace` seconds before SIGKILL;
        -> the container's exit code."""
        pm.podman("stop", "-t", str(grace), self.name, timeout=grace + 120)
        return int(self.inspect("{{.State.ExitCode}}"))

    def remove(self):
        pm.podman("rm", "-f", "--ignore", self.name, check=False)

    @classmethod
    def remove_all(cls):
        for name in cls.started:
            pm.podman("rm", "-f", "--ignore", name, check=False)
        cls.started = []


def ref_attention(q, k, v, causal=False):
    """softmax(q k^T / sqrt(d) (+ bottom-right causal mask)) v in float64,
    the reference the image tests compare the server's answers with."""
    import numpy as np
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    nq, nk = q.shape[-2], k.shape[-2]
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.arange(nk)[None, :] > np.arange(nq)[:, None] + nk - nq, -np.inf, s)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ v


def proc_status(pid):
    """{field: value} of /proc/PID/status."""
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k] = v.strip()
    return out


# ---------------------------------------------------------------------------
# TLS material
# ---------------------------------------------------------------------------

def make_tls(owner_uid=UID):
    """A throwaway CA and a server certificate for localhost / 127.0.0.1
    signed by it, in a new directory: ca.pem, tls.crt, tls.key.  The key is
    given to the image's user (mode 0400), as a Secret volume with that
    owner would be.  -> the directory (the caller removes it)."""
    d = tempfile.mkdtemp(prefix="attnbias-image-tls-")
    os.chmod(d, 0o755)

    def ssl(*args):
        p = subprocess.run(["openssl"] + list(args), cwd=d, capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0, p.stderr

    ec = ["ec", "-pkeyopt", "ec_paramgen_curve:P-256"]
    ssl("req", "-x509", "-newkey", *ec, "-nodes", "-days", "2", "-subj", "/CN=attnbias image test CA",
        "-keyout", "ca.key", "-out", "ca.pem")
    ssl("req", "-newkey", *ec, "-nodes", "-subj", "/CN=localhost", "-keyout", "tls.key",
        "-out", "tls.csr")
    with open(os.path.join(d, "ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    ssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "2", "-extfile", "ext", "-out", "tls.crt")
    for name in ("ca.key", "tls.csr", "ext", "ca.srl"):
        try:
            os.unlink(os.path.join(d, name))
        except OSError:
            pass
    key = os.path.join(d, "tls.key")
    if os.geteuid() == 0:
        os.chown(key, owner_uid, owner_uid)
        os.chmod(key, 0o400)
    else:
        os.chmod(key, 0o444)
    os.chmod(os.path.join(d, "tls.crt"), 0o444)
    return d


# ---------------------------------------------------------------------------
# a tiny runner with the project's closing line
# ---------------------------------------------------------------------------

class Checks:
    def __init__(self):
        self.passed = self.failed = 0

    def run(self, name, fn, *args):
        t0 = time.monotonic()
        try:
            detail = fn(*args)
        except Exception as e:  # a failing check never stops the others
            import traceback
            self.failed += 1
            log("FAIL %s (%.1fs)\n%s" % (name, time.monotonic() - t0,
                                          traceback.format_exc().rstrip()))
            return False
        self.passed += 1
        log("ok   %s (%.1fs)%s" % (name, time.monotonic() - t0,
                                   ": " + detail if detail else ""))
        return True

    def fail(self, name, why):
        self.failed += 1
        log("FAIL %s: %s" % (name, why))

    def summary(self):
        log("%d passed, %d failed" % (self.passed, self.failed))
        return 1 if self.failed else 0

