#!/usr/bin/python3
"""podman.py: building and running attnbias's image with podman on a host
without a Docker engine or a reachable registry (what `make image`,
`make image-test`, `make scale-test` and .ci/run use).

    /usr/bin/python3 docker/podman.py image [--tag T]   install podman, make the base, build
    /usr/bin/python3 docker/podman.py probe             can this host build and run any image?
    /usr/bin/python3 docker/podman.py podman ARGS...    podman with this host's settings

What it takes care of, all with Debian packages:
  * podman, runc and debootstrap are installed when missing (as root,
    apt-get install -y, waiting for other apt runs to finish);
  * the Dockerfile's bases, debian:bookworm-slim and debian:bookworm, are
    made once from Debian's own packages (debootstrap --variant=minbase from
    the mirror of this host's apt sources, imported and tagged with the
    official names, so the Dockerfile stays standard) and then kept: later
    runs reuse them;
  * every podman command gets docker/containers.conf (CONTAINERS_CONF) and
    runc as its runtime: the default crun cannot use this host's cgroups;
  * images are built with --format docker, which keeps the HEALTHCHECK
    instruction (the OCI format drops it), and --isolation=chroot.
A minbase root is about 200 MB, more than the official slim image: sizes
are reported against the base, never as absolute figures.

`probe` exits 0 when podman can build and run a trivial image here, and 77
with one line saying why not (.ci/run then reports the image test as
skipped); any later failure is a failure of the image itself.
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CONF = os.path.join(HERE, "containers.conf")
RUNTIME = "/usr/sbin/runc"
BASES = ("docker.io/library/debian:bookworm-slim", "docker.io/library/debian:bookworm")
SUITE = "bookworm"
PACKAGES = ("podman", "runc", "debootstrap")
TAG = "localhost/attnbias:test"
SKIP = 77


class Unavailable(Exception):
    """podman cannot build or run images on this host (not our image's fault)."""


def env():
    e = dict(os.environ)
    e["CONTAINERS_CONF"] = CONF
    return e


def podman(*args, check=True, capture=True, timeout=1800, input=None):
    """Run podman with this host's settings; -> CompletedProcess (text)."""
    p = subprocess.run(["podman", "--runtime", RUNTIME] + list(args), env=env(),
                       capture_output=capture, text=True, timeout=timeout, input=input)
    if check and p.returncode != 0:
        raise RuntimeError("podman %s: exit %d\n%s" % (
            " ".join(args[:6]), p.returncode, (p.stderr or "")[-3000:]))
    return p


def log(msg):
    print(msg, flush=True)


# ---------------------------------------------------------------------------
# tools and base image
# ---------------------------------------------------------------------------

def installed(pkg):
    p = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True)
    return p.returncode == 0 and "ok installed" in p.stdout


def ensure_tools():
    """Install podman, runc and debootstrap if missing (as root)."""
    missing = [p for p in PACKAGES if not installed(p)]
    if not missing:
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise Unavailable("missing Debian packages %s and not root to install them"
                          % " ".join(missing))
    log("installing: %s" % " ".join(missing))
    cmd = ["apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y", "-q"] + missing
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    if p.returncode != 0:
        subprocess.run(["apt-get", "-o", "DPkg::Lock::Timeout=600", "update", "-q"],
                       capture_output=True, timeout=1800)
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800,
                           env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    if p.returncode != 0:
        raise Unavailable("apt-get install %s failed: %s" % (
            " ".join(missing), p.stderr.strip().splitlines()[-1:] or p.returncode))


def mirror():
    """The Debian mirror of this host's apt sources (deb822 or one-line)."""
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        with open(path) as f:
            text = f.read()
        for stanza in re.split(r"\n\s*\n", text):
            if re.search(r"^Suites:.*\b%s\b" % SUITE, stanza, re.M) and \
                    re.search(r"^Components:.*\bmain\b", stanza, re.M):
                m = re.search(r"^URIs:\s*(\S+)", stanza, re.M)
                if m and not m.group(1).rstrip("/").endswith("-security"):
                    return m.group(1)
    for path in ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*.list")):
        try:
            with open(path) as f:
                for line in f:
                    m = re.match(r"\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+%s\s" % SUITE, line)
                    if m:
                        return m.group(1)
        except OSError:
            pass
    raise Unavailable("no Debian %s mirror in this host's apt sources" % SUITE)


def image_exists(ref):
    return podman("image", "exists", ref, check=False).returncode == 0


def ensure_base():
    """debian:bookworm-slim and debian:bookworm from Debian's packages,
    made once and kept."""
    if all(image_exists(b) for b in BASES):
        return
    url = mirror()
    log("making the base image %s with debootstrap from %s (once; kept for later runs)"
        % (BASES[0], url))
    root = tempfile.mkdtemp(prefix="attnbias-rootfs-", dir="/var/tmp")
    try:
        p = subprocess.run(["debootstrap", "--variant=minbase", SUITE, root, url],
                           capture_output=True, text=True, timeout=1800)
        if p.returncode != 0:
            raise Unavailable("debootstrap %s from %s failed: %s" % (
                SUITE, url, (p.stderr or p.stdout).strip().splitlines()[-1:]))
        tar = subprocess.Popen(["tar", "-C", root, "-c", "."], stdout=subprocess.PIPE)
        imp = subprocess.run(["podman", "--runtime", RUNTIME, "import", "-", BASES[0]],
                             stdin=tar.stdout, env=env(), capture_output=True, text=True,
                             timeout=1800)
        tar.stdout.close()
        tar.wait()
        if imp.returncode != 0 or tar.returncode != 0:
            raise Unavailable("podman import of the base failed: %s" % imp.stderr.strip())
        for other in BASES[1:]:
            podman("tag", BASES[0], other)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def build(tag=TAG, extra=()):
    """podman build of docker/Dockerfile as written; returns the tag."""
    log("building %s from docker/Dockerfile" % tag)
    p = podman("build", "--isolation=chroot", "--format", "docker", "-f", "docker/Dockerfile",
               "-t", tag, *extra, ROOT, check=False, capture=False, timeout=3600)
    if p.returncode != 0:
        raise RuntimeError("podman build of docker/Dockerfile failed (exit %d)" % p.returncode)
    return tag


def probe():
    """Build and run a trivial image on the base; raise Unavailable if podman
    cannot do that here."""
    if not shutil.which("apt-get") and not shutil.which("podman"):
        raise Unavailable("no podman and no apt-get to install it")
    ensure_tools()
    ensure_base()
    name = "attnbias-probe-%s" % uuid.uuid4().hex[:10]
    tag = "localhost/%s:latest" % name
    with tempfile.TemporaryDirectory() as ctx:
        with open(os.path.join(ctx, "Containerfile"), "w") as f:
            f.write("FROM %s\nRUN echo probe > /probe.txt\nCMD [\"cat\", \"/probe.txt\"]\n"
                    % BASES[0])
        p = podman("build", "--isolation=chroot", "--format", "docker", "-t", tag, ctx,
                   check=False, timeout=1800)
        if p.returncode != 0:
            raise Unavailable("podman cannot build a trivial image here: %s"
                              % p.stderr.strip().splitlines()[-1:])
    try:
        p = podman("run", "--rm", "--network", "host", "--name", name, tag, check=False,
                   timeout=600)
        if p.returncode != 0 or p.stdout.strip() != "probe":
            raise Unavailable("podman cannot run a trivial image here: %s"
                              % (p.stderr.strip().splitlines()[-1:] or p.stdout))
    finally:
        podman("rm", "-f", "--ignore", name, check=False)
        podman("rmi", "-f", tag, check=False)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    im = sub.add_parser("image", help="install podman if need be, make the base, build")
    im.add_argument("--tag", default="localhost/attnbias:latest")
    sub.add_parser("probe", help="exit 0 if podman can build and run an image here, else 77")
    pm = sub.add_parser("podman", help="podman with this host's settings")
    pm.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    os.chdir(ROOT)
    if a.cmd == "podman":
        ensure_tools()
        return podman(*a.args, check=False, capture=False).returncode
    try:
        if a.cmd == "probe":
            probe()
            log("podman can build and run images here")
            return 0
        ensure_tools()
        ensure_base()
        build(a.tag)
        size = podman("image", "inspect", "--format", "{{.Size}}", a.tag).stdout.strip()
        log("built %s (%.1f MB)" % (a.tag, int(size) / 1e6))
        return 0
    except Unavailable as e:
        log("SKIPPED: %s" % e if a.cmd == "probe" else "podman is not usable here: %s" % e)
        return SKIP if a.cmd == "probe" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
