#!/usr/bin/python3
"""scale_test.py: `make scale-test` -- three replicas of the image behind
HAProxy (docker/haproxy.cfg), a steady mixed load through the balancer, and a
rolling restart under it.

    /usr/bin/python3 tests/image/scale_test.py [--clients N] [--settle S]

1. Builds docker/Dockerfile (a unique tag, removed at the end), starts three
   containers of it on 127.0.0.1 (host network, free ports, one worker
   each) and HAProxy from Debian in front of them; waits until HAProxy's
   runtime API shows the three UP.
2. N client threads (default 6) send a steady mix through the balancer on
   kept-alive connections: small /v1/bias tables (JSON), small attention
   (JSON), and binary attention requests whose 384 KiB safetensors body is
   far larger than HAProxy's buffer (so it cannot be resent by the
   balancer: the drain itself must not lose it).  Every answer is checked
   against a float64 reference computed here.
3. Rolling restart, one replica at a time: SIGTERM (podman stop, through
   tini: the drain), start its replacement on the same port, wait for its
   /readyz and for HAProxy to mark it UP, next.  The load runs throughout,
   and for a few seconds after.
4. Prints the counts.  Passes when no request was reset, cut or lost
   (every request got a whole answer, every 200 was right), at least 99 %
   were 200, and every other answer was a 503 with Retry-After.
Bounded: every wait has a deadline, the load stops after the restart, and
everything started is removed.  Loopback only.
"""

import argparse
import http.client
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import containers as ct  # noqa: E402
from containers import Container, log, ref_attention  # noqa: E402

ROOT = ct.ROOT
DEADLINE_S = 900


# ---------------------------------------------------------------------------
# the requests and their expected answers
# ---------------------------------------------------------------------------

def safetensors(tensors):
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        b = a.astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def read_safetensors(data, name):
    n = struct.unpack("<Q", data[:8])[0]
    meta = json.loads(data[8:8 + n])[name]
    a, b = meta["data_offsets"]
    return np.frombuffer(data[8 + n + a:8 + n + b], dtype="<f4").reshape(meta["shape"])


class Mix:
    """The three kinds of request, each with a check of its answer."""

    def __init__(self):
        rng = np.random.default_rng(3)
        slopes = np.array([2.0 ** -(8.0 * (h + 1) / 4) for h in range(4)])
        dist = np.abs(np.arange(16)[:, None] - np.arange(16)[None, :])
        self.bias_ref = -slopes[:, None, None] * dist
        self.bias_body = json.dumps({"method": "alibi", "num_heads": 4, "q_len": 16,
                                     "k_len": 16}).encode()
        qs = rng.standard_normal((1, 2, 16, 16))
        self.small_body = json.dumps({"q": qs.tolist(), "k": qs.tolist(), "v": qs.tolist()}).encode()
        self.small_ref = ref_attention(qs, qs, qs)
        q, k, v = (rng.standard_normal((1, 4, 128, 64)).astype(np.float32) for _ in range(3))
        self.big_body = safetensors({"q": q, "k": k, "v": v})
        self.big_ref = ref_attention(*(a.astype(np.float64) for a in (q, k, v)))

    def request(self, i):
        """(name, path, body, headers, check) of request number i."""
        kind = i % 10
        if kind < 6:
            return ("bias", "/v1/bias", self.bias_body, {"Content-Type": "application/json"},
                    lambda b: np.allclose(np.array(json.loads(b)["bias"]["data"]).reshape(4, 16, 16),
                                          self.bias_ref, rtol=1e-6))
        if kind < 8:
            return ("attention-json", "/v1/attention", self.small_body,
                    {"Content-Type": "application/json"},
                    lambda b: np.allclose(np.array(json.loads(b)["output"]["data"]).reshape(
                        self.small_ref.shape), self.small_ref, rtol=1e-4, atol=1e-5))
        return ("attention-binary", "/v1/attention", self.big_body,
                {"Content-Type": "application/vnd.safetensors",
                 "Accept": "application/vnd.safetensors"},
                lambda b: np.allclose(read_safetensors(b, "output"), self.big_ref,
                                      rtol=1e-4, atol=1e-5))


class Load:
    """Client threads sending the mix through the balancer until stopped."""

    def __init__(self, port, clients, mix):
        self.port, self.mix = port, mix
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.counts = Counter()
        self.problems = []
        self.threads = [threading.Thread(target=self.client, args=(n,), daemon=True)
                        for n in range(clients)]

    def note(self, key, problem=None):
        with self.lock:
            self.counts[key] += 1
            if problem and len(self.problems) < 20:
                self.problems.append(problem)

    def client(self, n):
        conn = None
        i = n
        while not self.stop.is_set():
            name, path, body, headers, check = self.mix.request(i)
            i += len(self.threads)
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
            try:
                conn.request("POST", path, body=body, headers=headers)
                r = conn.getresponse()
                data = r.read()
            except (OSError, http.client.HTTPException) as e:
                # A reset, a cut answer, a timeout: a lost request.
                self.note("error", "%s: %r" % (name, e))
                conn.close()
                conn = None
                continue
            if r.status == 200:
                ok = False
                try:
                    ok = check(data)
                except Exception as e:  # a malformed answer is a wrong one
                    self.note("wrong", "%s: %r" % (name, e))
                    continue
                self.note("200" if ok else "wrong",
                           None if ok else "%s: wrong numbers" % name)
                self.note("200 " + name)
            elif r.status == 503 and r.getheader("Retry-After"):
                self.note("503 with Retry-After")
            else:
                self.note("other", "%s: %d %r" % (name, r.status, data[:200]))
            if r.getheader("Connection", "").lower() == "close":
                conn.close()
                conn = None
            time.sleep(0.005)      # steady, not flat out: the drains must get CPU
        if conn:
            conn.close()

    def start(self):
        for t in self.threads:
            t.start()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(180)


# ---------------------------------------------------------------------------
# HAProxy
# ---------------------------------------------------------------------------

class Balancer:
    def __init__(self, replicas, tmp):
        self.port = ct.free_port()
        self.stats = os.path.join(tmp, "haproxy.sock")
        self.env = dict(os.environ, ATTNBIAS_LB_BIND="127.0.0.1:%d" % self.port,
                        ATTNBIAS_LB_STATS=self.stats)
        for n, c in enumerate(replicas, 1):
            self.env["ATTNBIAS_REPLICA_%d" % n] = "127.0.0.1:%d" % c.port
        self.log = open(os.path.join(tmp, "haproxy.log"), "w+")
        self.proc = None

    def start(self):
        cfg = os.path.join(ROOT, "docker", "haproxy.cfg")
        p = subprocess.run(["haproxy", "-c", "-f", cfg], env=self.env, capture_output=True,
                           text=True)
        assert p.returncode == 0, p.stdout + p.stderr
        self.proc = subprocess.Popen(["haproxy", "-db", "-f", cfg], env=self.env,
                                     stdout=self.log, stderr=subprocess.STDOUT)

    def states(self):
        """{server: status} from the runtime API's `show stat`."""
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(5)
        s.connect(self.stats)
        s.sendall(b"show stat\n")
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        s.close()
        lines = data.decode().splitlines()
        head = lines[0].lstrip("# ").split(",")
        out = {}
        for line in lines[1:]:
            row = dict(zip(head, line.split(",")))
            if row.get("pxname") == "replicas" and row.get("svname", "").startswith("r"):
                out[row["svname"]] = row["status"]
        return out

    def wait_up(self, names, timeout=120):
        ct.wait_until("HAProxy marks %s UP" % ",".join(names),
                      lambda: self.proc.poll() is None and
                      all(self.states().get(n) == "UP" for n in names), timeout)

    def unusual(self):
        """HAProxy's log lines of requests that did not end normally (their
        termination state is not "--") or were retried."""
        self.log.flush()
        self.log.seek(0)
        out = []
        for line in self.log:
            # ... status bytes - - term-state act/fe/be/srv/retries ...
            m = re.search(r" (-?\d+) \d+ - - (\S{4}) \d+/\d+/\d+/\d+/(\+?\d+) ", line)
            if m and (m.group(2) != "----" or m.group(3) != "0" or m.group(1) != "200"):
                out.append(line.rstrip())
        return out

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def ensure_haproxy():
    if shutil.which("haproxy"):
        return
    assert os.geteuid() == 0, "haproxy is missing (apt-get install haproxy as root)"
    log("installing: haproxy")
    p = subprocess.run(["apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y", "-q",
                        "haproxy"], capture_output=True, text=True, timeout=1800,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    assert p.returncode == 0, p.stderr[-2000:]


# ---------------------------------------------------------------------------

def replica(image, port=None):
    return Container(image, "replica", port=port,
                     env={"ATTNBIAS_THREADS": "1", "ATTNBIAS_DRAIN_S": "30"})


def main(argv):
    ap = argparse.ArgumentParser(description="make scale-test")
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--settle", type=float, default=3.0,
                    help="seconds of load before and after the restart")
    a = ap.parse_args(argv)
    os.chdir(ROOT)
    signal.alarm(DEADLINE_S)
    ensure_haproxy()
    image = ct.Image("scaletest")
    tmp = tempfile.mkdtemp(prefix="attnbias-scale-")
    lb = load = None
    unusual = []
    try:
        image.build()
        replicas = [replica(image).start() for _ in range(3)]
        for c in replicas:
            c.wait_ready()
        lb = Balancer(replicas, tmp)
        lb.start()
        lb.wait_up(["r1", "r2", "r3"])
        log("3 replicas on ports %s behind HAProxy on 127.0.0.1:%d"
            % (", ".join(str(c.port) for c in replicas), lb.port))

        load = Load(lb.port, a.clients, Mix())
        t0 = time.monotonic()
        load.start()
        time.sleep(a.settle)
        for n, old in enumerate(list(replicas)):
            t = time.monotonic()
            code = old.stop(grace=60)
            assert code == 0, "replica %s exited %d:\n%s" % (old.name, code, old.logs()[-2000:])
            old.remove()
            new = replica(image, port=old.port).start()
            replicas[n] = new
            new.wait_ready()
            lb.wait_up(["r%d" % (n + 1)])
            log("replica r%d restarted in %.1f s (drained, replaced, ready, back in the pool)"
                % (n + 1, time.monotonic() - t))
        time.sleep(a.settle)
        load.finish()
        elapsed = time.monotonic() - t0
    finally:
        if load:
            load.stop.set()
        if lb:
            unusual = lb.unusual()
            lb.stop()
        Container.remove_all()
        image.remove()
        shutil.rmtree(tmp, ignore_errors=True)

    c = load.counts
    total = sum(c[k] for k in ("200", "wrong", "503 with Retry-After", "other", "error"))
    log("requests through the balancer in %.1f s: %d" % (elapsed, total))
    for key in ("200", "200 bias", "200 attention-json", "200 attention-binary",
                "503 with Retry-After", "other", "wrong", "error"):
        log("  %-24s %d" % (key, c[key]))
    for p in load.problems:
        log("  problem: %s" % p)
    log("HAProxy: %d requests retried or not ended normally%s" % (
        len(unusual), "".join("\n  " + u for u in unusual[:20])))
    ok = (total > 0 and c["error"] == 0 and c["wrong"] == 0 and c["other"] == 0
          and c["200"] >= 0.99 * total and c["200 attention-binary"] > 0)
    log("%s: %.2f %% answered 200, %d 503 with Retry-After, %d lost or reset, %d wrong"
        % ("PASS" if ok else "FAIL", 100.0 * c["200"] / max(total, 1),
           c["503 with Retry-After"], c["error"], c["wrong"]))
    log("%d passed, %d failed" % ((1, 0) if ok else (0, 1)))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
