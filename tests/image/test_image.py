#!/usr/bin/python3
"""test_image.py: `make image-test` -- docker/Dockerfile built with podman as
written, and the image it makes exercised.

    /usr/bin/python3 tests/image/test_image.py [--keep]

Checks, in order (each prints one line; the last line is "N passed, N
failed"):
  build        the Dockerfile builds as written (podman build --format
               docker, the Debian bases made by docker/podman.py)
  libraries    inside the image, ldd finds every shared library the binary
               needs; the runtime stage has the packages of
               docker/packages-runtime.txt and nothing of the build stage
               (no -dev package, compiler, headers or sources)
  user         the server answers /healthz, /readyz and real attention
               requests (a streamed binary answer and a JSON one, against a
               float64 reference) as the numeric non-root user 10001, with
               tini as the container's first process
  healthcheck  the HEALTHCHECK command of the image's configuration, run in
               the container, exits 0 (and `podman healthcheck run` says
               healthy)
  read-only    the same with --read-only --cap-drop ALL and no new
               privileges, as the Kubernetes manifests run it (no capability
               left in the server)
  tls          HTTPS in the image: certificate and key mounted read-only,
               ATTNBIAS_TLS_CERT/KEY set; curl-equivalent requests verified
               against the CA, the HEALTHCHECK verifying the server with its
               own certificate, SIGHUP reloading it
  drain        SIGTERM (podman stop, through tini) ends the server with exit
               code 0 after its drain
  size         the image's size, and what the runtime stage adds to its base
               (under 30 MB)
Containers run with --network host on 127.0.0.1 and free ports, under unique
names; every container and the image tag are removed at the end (--keep
keeps the image).
"""

import argparse
import http.client
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import containers as ct  # noqa: E402
from containers import Container, pm, ref_attention  # noqa: E402
from attnbias_client import Client  # noqa: E402

ROOT = ct.ROOT
MAX_ADDED_MB = 30.0


def package_list(name):
    with open(os.path.join(ROOT, "docker", name)) as f:
        return [ln.strip() for ln in f if ln.strip() and not ln.startswith("#")]


def check_answers(c, url, **client_kw):
    """/healthz, /readyz and two attention requests against a float64
    reference; -> a short description."""
    for path in ("/healthz", "/readyz"):
        st, _, body = ct.http_get(c.port, path, c.tls_context)
        assert st == 200 and json.loads(body)["status"] == "ok", (path, st, body)
    rng = np.random.default_rng(10001)
    ab = Client(url, **client_kw)
    try:
        # [1, 8, 256, 128] float32 out = 1 MiB: the streamed binary path.
        q, k, v = (rng.standard_normal((1, 8, 256, 128)).astype(np.float32) for _ in range(3))
        out = ab.attention(q, k, v, causal=True)
        np.testing.assert_allclose(out, ref_attention(q, k, v, True), rtol=1e-4, atol=1e-5)
        streamed = ab.last_timing.get("stream") is True
        qs = rng.standard_normal((1, 2, 7, 16)).astype(np.float32)
        np.testing.assert_allclose(ab.attention(qs, qs, qs), ref_attention(qs, qs, qs, False),
                                   rtol=1e-5, atol=1e-6)
    finally:
        ab.close()
    assert streamed, "the 1 MiB answer was not streamed"
    return "healthz, readyz, attention [1,8,256,128] causal (streamed) and [1,2,7,16] = float64"


def check_user(c):
    """tini and attnbiasd run as 10001 in every uid and gid field."""
    assert c.image.inspect("{{.Config.User}}") == "%d:%d" % (ct.UID, ct.UID)
    tini, server = c.server_pid()
    for pid, what in ((tini, "tini"), (server, "attnbiasd")):
        st = ct.proc_status(pid)
        assert st["Name"] == what[:15], (pid, st["Name"])
        assert st["Uid"].split() == [str(ct.UID)] * 4, (what, st["Uid"])
        assert st["Gid"].split() == [str(ct.UID)] * 4, (what, st["Gid"])
    return server


def healthcheck_cmd(image):
    hc = json.loads(image.inspect("{{json .Config.Healthcheck}}"))
    assert hc and hc["Test"][0] == "CMD", hc
    return hc["Test"][1:]


def run_healthcheck(c):
    cmd = healthcheck_cmd(c.image)
    p = c.exec(*cmd)
    assert p.returncode == 0, (cmd, p.returncode, p.stderr)
    p = pm.podman("healthcheck", "run", c.name, check=False)
    assert p.returncode == 0 and "unhealthy" not in p.stdout, (p.stdout, p.stderr)
    return " ".join(cmd)


# ---------------------------------------------------------------------------

def t_libraries(image):
    def run(entry, *args):
        return pm.podman("run", "--rm", "--network", "host", "--entrypoint", entry, image.tag,
                         *args)
    ldd = run("/usr/bin/ldd", "/usr/local/bin/attnbiasd").stdout
    libs = re.findall(r"^\s*(\S+) => (\S+)", ldd, re.M)
    assert libs and "not found" not in ldd, ldd
    names = {n for n, _ in libs}
    for want in ("libmicrohttpd.so.12", "libjansson.so.4", "libuv.so.1", "libpng16.so.16",
                 "libgnutls.so.30"):
        assert want in names, (want, ldd)
    # "name depends..." of every installed package.
    rows = run("/usr/bin/dpkg-query", "-W", "-f",
               "${Package}\\t${Pre-Depends}, ${Depends}\\n").stdout.splitlines()
    pkgs = {r.split("\t")[0] for r in rows}
    depended = {re.split(r"[\s:(]", d.strip())[0] for r in rows
                for alt in r.split("\t")[1].split(",") for d in alt.split("|") if d.strip()}
    base = set(pm.podman("run", "--rm", "--network", "host", pm.BASES[0], "dpkg-query", "-W",
                         "-f", "${Package}\\n").stdout.split())
    runtime = set(package_list("packages-runtime.txt"))
    assert runtime <= pkgs, runtime - pkgs
    # A package of the build list may be there only as something a runtime
    # package needs (openssl, for ca-certificates), never on its own.
    build_only = set(package_list("packages-build.txt")) - runtime
    build_only |= {"gcc", "gcc-12", "cpp", "make", "libc6-dev", "pkg-config"}
    stray = (pkgs & build_only) - depended
    assert not stray, stray
    dev = sorted(p for p in pkgs if p.endswith("-dev"))
    assert not dev, dev
    listing = run("/bin/sh", "-c", "ls /usr/local/bin; ls -d /src /usr/include/microhttpd.h "
                  "/usr/include/gnutls 2>/dev/null || true").stdout.split()
    assert listing == ["attnbiasd"], listing
    return "ldd: %d libraries, none missing; runtime stage added %d packages (%s)" % (
        len(libs), len(pkgs - base), " ".join(sorted(pkgs - base)))


def t_user(image):
    c = Container(image, "user").start()
    try:
        c.wait_ready()
        server = check_user(c)
        what = check_answers(c, "http://127.0.0.1:%d" % c.port)
        return "%s, as uid/gid %d (server pid %d under tini)" % (what, ct.UID, server)
    finally:
        c.remove()


def t_healthcheck(image):
    c = Container(image, "health").start()
    try:
        c.wait_ready()
        cmd = run_healthcheck(c)
        return "`%s` exits 0, podman healthcheck run: healthy" % cmd
    finally:
        c.remove()


def t_read_only(image):
    c = Container(image, "ro", podman_args=["--read-only", "--cap-drop", "ALL",
                                            "--security-opt", "no-new-privileges"]).start()
    try:
        c.wait_ready()
        assert c.inspect("{{.HostConfig.ReadonlyRootfs}}") == "true"
        server = check_user(c)
        st = ct.proc_status(server)
        for cap in ("CapEff", "CapPrm", "CapBnd"):
            assert int(st[cap], 16) == 0, (cap, st[cap])
        assert st["NoNewPrivs"] == "1", st["NoNewPrivs"]
        p = c.exec("/bin/sh", "-c", "touch /usr/local/bin/x 2>&1 || echo read-only")
        assert "read-only" in p.stdout, p.stdout
        check_answers(c, "http://127.0.0.1:%d" % c.port)
        run_healthcheck(c)
        return "--read-only --cap-drop ALL: no capabilities, root fs not writable, answers " \
               "and health check as above"
    finally:
        c.remove()


def t_tls(image):
    d = ct.make_tls()
    ctx = ssl.create_default_context(cafile=os.path.join(d, "ca.pem"))
    c = Container(image, "tls", tls_context=ctx,
                  env={"ATTNBIAS_TLS_CERT": "/etc/attnbias/tls/tls.crt",
                       "ATTNBIAS_TLS_KEY": "/etc/attnbias/tls/tls.key"},
                  podman_args=["--read-only", "--cap-drop", "ALL",
                               "-v", "%s:/etc/attnbias/tls:ro" % d])
    try:
        c.start()
        c.wait_ready()
        check_answers(c, "https://localhost:%d" % c.port, ca_file=os.path.join(d, "ca.pem"))
        run_healthcheck(c)
        # Plain HTTP to it gets no answer.
        try:
            st = ct.http_get(c.port, "/healthz")[0]
        except (OSError, http.client.HTTPException):
            st = None
        assert st is None, st
        c.signal("HUP")
        ct.wait_until("the reload in the log", lambda: "SIGHUP: TLS reloaded" in c.logs(), 60)
        assert ct.http_get(c.port, "/healthz", ctx)[0] == 200
        assert c.stop() == 0
        return "HTTPS verified against the CA, HEALTHCHECK over TLS, SIGHUP reload"
    finally:
        c.remove()
        shutil.rmtree(d, ignore_errors=True)


def t_drain(image):
    c = Container(image, "drain").start()
    try:
        c.wait_ready()
        t0 = time.monotonic()
        code = c.stop()
        logs = c.logs()
        assert code == 0, (code, logs[-2000:])
        assert "SIGTERM: draining" in logs and "stopped" in logs, logs[-2000:]
        return "exit 0, %.1f s after SIGTERM" % (time.monotonic() - t0)
    finally:
        c.remove()


def t_size(image):
    total = int(image.inspect("{{.Size}}"))
    base = int(pm.podman("image", "inspect", "--format", "{{.Size}}", pm.BASES[0]).stdout)
    added = total - base
    layers = []
    for line in pm.podman("history", "--no-trunc", "--format", "{{.Size}}\t{{.CreatedBy}}",
                          image.tag).stdout.splitlines():
        size, _, by = line.partition("\t")
        if "ADD file:" in by:          # the base's own layer: the stage's end
            break
        if size.strip() not in ("0 B", "0B"):
            m = re.search(r"COPY \S+ in (\S+)", by)
            kind = ("packages" if "apt-get install" in by else
                    os.path.basename(m.group(1).rstrip("/")) if m else by[:40])
            layers.append("%s %s" % (kind, size.strip()))
    msg = ("image %.1f MB = base debian:bookworm-slim %.1f MB (a debootstrap minbase, larger "
           "than the official one) + runtime stage %.1f MB (%s)" % (
               total / 1e6, base / 1e6, added / 1e6, ", ".join(reversed(layers))))
    assert added / 1e6 < MAX_ADDED_MB, msg
    return msg


def t_readme(image):
    """README's podman block, as written but for the image (this run's tag),
    the container's name and the port (free ones); the `make` lines are what
    this test is."""
    with open(os.path.join(ROOT, "README.md")) as f:
        blocks = re.findall(r"^```sh\n(.*?)^```", f.read(), re.M | re.S)
    (block,) = [b for b in blocks if "docker/podman.py podman run" in b]
    port = str(ct.free_port())
    name = "attnbias-readme-" + ct.RUN_ID
    script = "\n".join(ln for ln in block.replace("\\\n", " ").splitlines()
                       if not ln.startswith("make "))
    script = (script.replace("localhost/attnbias:latest", image.tag)
              .replace("attnbias-demo", name).replace("8090", port))
    assert script.count(port) == 2 and script.count(name) == 2, script
    assert "--retry-connrefused" in script, "the curl must wait for the container to listen"
    Container.started.append(name)
    p = subprocess.run(["bash", "-ec", script + "\n"], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0 and '{"status":"ok"}' in p.stdout, (p.returncode, p.stdout,
                                                                 p.stderr[-2000:])
    return "README's podman run / curl / stop block ran as written"


def main(argv):
    ap = argparse.ArgumentParser(description="make image-test")
    ap.add_argument("--keep", action="store_true", help="keep the image afterwards")
    a = ap.parse_args(argv)
    os.chdir(ROOT)
    checks = ct.Checks()
    image = ct.Image("imagetest")
    try:
        if not checks.run("build", lambda: (image.build(), "docker/Dockerfile as written, "
                                            "%s in %.0f s" % (image.tag, image.seconds))[1]):
            return checks.summary()
        for name, fn in (("libraries", t_libraries), ("user", t_user),
                         ("healthcheck", t_healthcheck), ("read-only", t_read_only),
                         ("tls", t_tls), ("drain", t_drain), ("size", t_size),
                         ("readme", t_readme)):
            checks.run(name, fn, image)
    finally:
        Container.remove_all()
        if not a.keep:
            image.remove()
    return checks.summary()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
