"""test_soak.py: the overload soak (bench/soak.c, `make soak`) in its smoke
form -- 32 connections for 5 s -- against a server of the suite's own, so
that the tool keeps working between the runs of the full minute.

Its verdict does not depend on timing: the soak fails on a status other
than 200 or 503-with-Retry-After, a reset, a connection closed without an
answer, a 200 whose bytes differ from the idle server's, descriptors not
back to idle, or a failed health check -- never on a rate or a latency.
Its waits are bounded far above what they take (a request's 120 s, the
descriptors' 60 s, both times run.SLOW), and the RSS rule is not judged on a
run this short.  Conventions: see run.py."""

import json
import os
import re
import subprocess
import tempfile

import run

CONNECTIONS = 32


def soak_binary(server_binary):
    """build/bench/soak next to build/attnbiasd (`make test` builds both)."""
    path = os.path.join(os.path.dirname(server_binary), "bench", "soak")
    assert os.access(path, os.X_OK), (
        "no %s: `make test` builds it (or make %s)" % (path, os.path.relpath(path, run.ROOT)))
    return path


def per_ip_flags(binary):
    """The server's cap on connections per client address, raised above the
    soak's (all of them come from 127.0.0.1), when its --help lists one."""
    text = subprocess.run([binary, "--help"], capture_output=True, text=True,
                          timeout=30).stdout
    m = re.search(r"(--[a-z-]*per-ip[a-z-]*)", text)
    return [m.group(1), str(2 * CONNECTIONS + 16)] if m else []


def test_soak_smoke(start, binary):
    soak = soak_binary(binary)
    # The best kernels, also in the suite's AB_ISA=ref pass: the soak checks
    # the service under load, not the kernels (the suites do), and the
    # scalar ones would only make it slower.
    srv = start(*per_ip_flags(binary), env={"AB_ISA": "avx512"})
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "soak.json")
        p = subprocess.run(
            [soak, "--port", str(srv.port), "--pid", str(srv.proc.pid),
             "--connections", str(CONNECTIONS), "--seconds", "5",
             "--request-timeout", str(120 * run.SLOW),
             "--settle-timeout", str(60 * run.SLOW), "--out", out],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            timeout=600 * run.SLOW)
        assert p.returncode == 0, "soak exited %d:\n%s" % (p.returncode, p.stdout)
        with open(out) as f:
            res = json.load(f)
    assert res["pass"] is True and res["why"] == "", res["why"]
    over = res["phases"]["overload"]
    # Every request it issued is accounted for, and some were answered.
    assert over["issued"] == (over["answered_200"] + over["answered_503"]
                              + over["left"] + over["failed"]), over
    assert over["failed"] == 0 and over["first_failures"] == [], over
    assert over["answered_200"] > 0, over
    assert res["healthy_after"] is True
    assert res["fds"]["after"] <= res["fds"]["idle"], res["fds"]
    assert res["server_metrics_after"]["inflight"] == 0
    assert res["server_metrics_after"]["queue_depth"] == 0
    # Attached to a running server, the soak leaves it running; the harness
    # then stops it and requires exit status 0 (and, under valgrind or ASan,
    # no leak).
    assert srv.proc.poll() is None
