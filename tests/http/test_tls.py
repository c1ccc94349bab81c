"""test_tls.py: attnbiasd over HTTPS (--tls-cert, --tls-key).

A throwaway PKI is made at run time with openssl: a CA, server certificates
it signs (ECDSA P-256 and RSA 2048, named localhost and 127.0.0.1), a second
server certificate for the reload, an unrelated CA, and a self-signed
certificate.  Then:

- curl --cacert gets 200 on every route of server/routes.def (the
  numbers of /v1/bias, /v1/encodings and /v1/attention checked against
  float64 references written here), with an ECDSA and an RSA certificate.
- Only TLS 1.2 and 1.3 are spoken, and in TLS 1.2 only ECDHE with AEAD
  ciphers: a client limited to TLS 1.1, or to a CBC suite, is refused.
- Plain HTTP to the TLS port, a client that trusts another CA, and a
  client that sends garbage or closes mid-handshake all fail on their side
  only: the server answers the next HTTPS request and exits 0.
- The API key works over TLS (401 without it), and the Python client talks
  https:// with a ca_file: a streamed binary attention answer and a JSON one
  against a float64 reference on one kept-alive connection.
- SIGHUP reloads the certificate and key: new connections get the new
  certificate, a kept-alive connection opened before keeps working (on the
  old one); a reload from a key that is not the certificate's changes
  nothing.
- --healthcheck verifies an HTTPS server with --tls-ca, or with the
  server's own --tls-cert (self-signed or not), and fails (exit 1, a line
  saying why) against a CA that did not sign it or a plain-HTTP probe.
- Wrong configurations are usage errors (exit 2) naming the flag: a
  certificate without its key, a key of another certificate, a missing
  file, a file that is not PEM, --tls-ca alone on a server.
- HTTPS on a Unix-domain socket (--unix-socket with --tls-cert).

Tests follow tests/http/run.py's convention; run alone with
    /usr/bin/python3 tests/http/run.py tests/http/test_tls.py
"""

import atexit
import http.client
import json
import math
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time

import numpy as np

import run

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "api", "python"))

from attnbias_client import AttnbiasError, Client  # noqa: E402

# ===========================================================================
# The throwaway PKI
# ===========================================================================

_PKI = None


def _openssl(*args, cwd):
    p = subprocess.run(["openssl"] + list(args), cwd=cwd, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, "openssl %s: %s" % (" ".join(args), p.stderr)


def _leaf(d, name, ca, cn, key_args, san="DNS:localhost,IP:127.0.0.1"):
    """A server key and certificate signed by CA `ca` (files NAME.key,
    NAME.pem in d)."""
    _openssl("req", "-newkey", *key_args, "-nodes", "-subj", "/CN=" + cn,
             "-keyout", name + ".key", "-out", name + ".csr", cwd=d)
    with open(os.path.join(d, name + ".ext"), "w") as f:
        f.write("subjectAltName=%s\nextendedKeyUsage=serverAuth\n" % san)
    _openssl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey", ca + ".key",
             "-CAcreateserial", "-days", "2", "-extfile", name + ".ext", "-out", name + ".pem",
             cwd=d)


def pki():
    """The directory of the throwaway PKI (made once per run, removed at
    exit): ca, other-ca (CAs), srv (ECDSA, signed by ca), srv-rsa (RSA,
    signed by ca), srv2 (ECDSA, CN reloaded, signed by ca), self (self-signed
    ECDSA); each NAME.pem with NAME.key."""
    global _PKI
    if _PKI:
        return _PKI
    if not shutil.which("openssl"):
        raise AssertionError("openssl is missing (docker/packages-build.txt lists it)")
    d = tempfile.mkdtemp(prefix="attnbias-tls-")
    atexit.register(shutil.rmtree, d, True)
    ec = ["ec", "-pkeyopt", "ec_paramgen_curve:P-256"]
    for ca in ("ca", "other-ca"):
        _openssl("req", "-x509", "-newkey", *ec, "-nodes", "-days", "2", "-subj",
                 "/CN=attnbias test " + ca, "-keyout", ca + ".key", "-out", ca + ".pem", cwd=d)
    _leaf(d, "srv", "ca", "localhost", ec)
    _leaf(d, "srv-rsa", "ca", "localhost", ["rsa:2048"])
    _leaf(d, "srv2", "ca", "reloaded", ec)
    _openssl("req", "-x509", "-newkey", *ec, "-nodes", "-days", "2", "-subj", "/CN=localhost",
             "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
             "-keyout", "self.key", "-out", "self.pem", cwd=d)
    _PKI = d
    return d


def f(name):
    return os.path.join(pki(), name)


def context(cafile="ca.pem"):
    """A client context trusting one file of the PKI (checks the name)."""
    return ssl.create_default_context(cafile=f(cafile))


def tls_start(start, cert="srv", *flags, cafile="ca.pem", api_key=None, env=None):
    srv = start("--tls-cert", f(cert + ".pem"), "--tls-key", f(cert + ".key"), *flags,
                api_key=api_key, env=env)
    assert srv.url.startswith("https://"), srv.url
    srv.ssl_context = context(cafile)
    return srv


def cli(binary, *args, env=None):
    full = dict(os.environ)
    full.update(env or {})
    return subprocess.run([binary] + list(args), capture_output=True, text=True,
                          timeout=60 * run.SLOW, env=full)


def curl(srv, path, *args, cacert="ca.pem"):
    """curl PATH on srv with --cacert; -> (exit code, HTTP status, body)."""
    with tempfile.NamedTemporaryFile() as out:
        p = subprocess.run(["curl", "-sS", "--max-time", str(60 * run.SLOW),
                            "--cacert", f(cacert), "-o", out.name, "-w", "%{http_code}",
                            *args, "%s%s" % (srv.url, path)],
                           capture_output=True, text=True, timeout=120 * run.SLOW)
        return p.returncode, int(p.stdout or 0), open(out.name, "rb").read()


def peer_cn(sock):
    """The CN of the certificate a TLS socket was served."""
    for rdn in sock.getpeercert()["subject"]:
        for k, v in rdn:
            if k == "commonName":
                return v
    return None


def wait_log(srv, pattern, timeout=30):
    """Wait until the server's log has a line matching pattern."""
    deadline = time.monotonic() + timeout * run.SLOW
    while time.monotonic() < deadline:
        m = re.search(pattern, srv.log())
        if m:
            return m
        time.sleep(0.02)
    raise AssertionError("no %r in the log:\n%s" % (pattern, srv.log()[-3000:]))


# ===========================================================================
# float64 references
# ===========================================================================

def ref_attention(q, k, v, causal=False):
    """softmax(q k^T / sqrt(d) (+ bottom-right causal mask)) v in float64."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    nq, nk = q.shape[-2], k.shape[-2]
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.arange(nk)[None, :] > np.arange(nq)[:, None] + nk - nq, -np.inf, s)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ v


def ref_sinusoidal(n, dim):
    """Interleaved sin/cos, frequency base 10000."""
    pos = np.arange(n, dtype=np.float64)[:, None]
    inv = 10000.0 ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
    out = np.empty((n, dim))
    out[:, 0::2] = np.sin(pos * inv)
    out[:, 1::2] = np.cos(pos * inv)
    return out


def tensor(obj):
    return np.array(obj["data"], dtype=np.float64).reshape(obj["shape"])


# Each route's request, and what checks its answer.
ROPE_Q = [[1.0, 2.0, 3.0, 4.0]]


def _check_rope(body):
    # One query at position 1, head_dim 4, rotate-half pairs (i, i + 2)
    # with theta_i = 10000^(-2i/4).
    q = np.array(ROPE_Q[0])
    out = np.empty(4)
    for i in range(2):
        t = 10000.0 ** (-2 * i / 4)
        c, s = math.cos(t), math.sin(t)
        out[i] = q[i] * c - q[i + 2] * s
        out[i + 2] = q[i + 2] * c + q[i] * s
    np.testing.assert_allclose(tensor(body["q"])[0], out, rtol=1e-5, atol=1e-6)


def _check_bias(body):
    slopes = np.array([2.0 ** -4, 2.0 ** -8])
    dist = np.abs(np.arange(3)[:, None] - np.arange(3)[None, :])
    np.testing.assert_allclose(tensor(body["bias"]), -slopes[:, None, None] * dist, rtol=1e-6)


ATT = {"q": [[1, 0], [0, 1]], "k": [[1, 0], [0, 1], [1, 1]], "v": [[1, 2], [3, 4], [5, 6]]}

REQUESTS = {
    ("GET", "/healthz"): (None, lambda b: json.loads(b)["status"] == "ok"),
    ("GET", "/readyz"): (None, lambda b: json.loads(b)["status"] == "ok"),
    ("GET", "/metrics"): (None, lambda b: b"attnbias_requests_total" in b),
    ("GET", "/openapi.yaml"): (None, lambda b: b"\nopenapi: 3." in b),
    ("GET", "/v1/methods"): (None, lambda b: "alibi" in json.dumps(json.loads(b))),
    ("GET", "/v1/models"): (None, lambda b: any(p["name"] == "llama-3.1-8b"
                                                for p in json.loads(b)["presets"])),
    ("POST", "/v1/encodings"): (
        {"method": "sinusoidal", "positions": 3, "dim": 4},
        lambda b: np.testing.assert_allclose(tensor(json.loads(b)["encoding"]),
                                             ref_sinusoidal(3, 4), rtol=1e-5, atol=1e-6)
        is None),
    ("POST", "/v1/rope"): ({"head_dim": 4, "positions": [1], "q": ROPE_Q},
                           lambda b: _check_rope(json.loads(b)) is None),
    ("POST", "/v1/bias"): ({"method": "alibi", "num_heads": 2, "q_len": 3, "k_len": 3},
                           lambda b: _check_bias(json.loads(b)) is None),
    ("POST", "/v1/attention"): (
        ATT, lambda b: np.testing.assert_allclose(
            tensor(json.loads(b)["output"]), ref_attention(ATT["q"], ATT["k"], ATT["v"]),
            rtol=1e-5, atol=1e-6) is None),
    # ALiBi's reach of 2 heads: ln(10) / m, m = 1/16 and 1/256.
    ("POST", "/v1/analysis"): (
        {"kind": "bias", "method": "alibi", "num_heads": 2, "seq_len": 4},
        lambda b: np.testing.assert_allclose(
            tensor(json.loads(b)["reach_10"]), math.log(10) * np.array([16.0, 256.0]),
            rtol=1e-6) is None),
    ("GET", "/"): (None, lambda b: b"<title>attnbias explorer</title>" in b),
    ("GET", "/explorer.js"): (None, lambda b: b"/v1/analysis" in b),
    ("GET", "/explorer.css"): (None, lambda b: b".charts" in b),
}


def _v2(body):
    """A v2 infer answer's outputs as the /v1 answer has them, by name."""
    return {o["name"]: o for o in json.loads(body)["outputs"]}


def _v2_input(name, rows):
    return {"name": name, "datatype": "FP32", "shape": [len(rows), len(rows[0])],
            "data": [x for r in rows for x in r]}


# The Open Inference Protocol routes: the same requests as models.
REQUESTS.update({
    ("GET", "/v2"): (None, lambda b: json.loads(b)["name"] == "attnbiasd"),
    ("GET", "/v2/health/live"): (None, lambda b: json.loads(b)["status"] == "ok"),
    ("GET", "/v2/health/ready"): (None, lambda b: json.loads(b)["status"] == "ok"),
})
for _m in ("encodings", "rope", "bias", "attention", "analysis"):
    REQUESTS[("GET", "/v2/models/" + _m)] = (None, lambda b, m=_m: json.loads(b)["name"] == m)
    REQUESTS[("GET", "/v2/models/%s/ready" % _m)] = (
        None, lambda b, m=_m: json.loads(b) == {"name": m, "ready": True})
REQUESTS.update({
    ("POST", "/v2/models/encodings/infer"): (
        {"parameters": {"method": "sinusoidal", "positions": 3, "dim": 4}, "inputs": []},
        lambda b: np.testing.assert_allclose(tensor(_v2(b)["encoding"]), ref_sinusoidal(3, 4),
                                             rtol=1e-5, atol=1e-6) is None),
    ("POST", "/v2/models/rope/infer"): (
        {"parameters": {"head_dim": 4, "positions": "[1]"}, "inputs": [_v2_input("q", ROPE_Q)]},
        lambda b: _check_rope(_v2(b)) is None),
    ("POST", "/v2/models/bias/infer"): (
        {"parameters": {"method": "alibi", "num_heads": 2, "q_len": 3, "k_len": 3}, "inputs": []},
        lambda b: _check_bias(_v2(b)) is None),
    ("POST", "/v2/models/attention/infer"): (
        {"inputs": [_v2_input(n, ATT[n]) for n in ("q", "k", "v")]},
        lambda b: np.testing.assert_allclose(
            tensor(_v2(b)["output"]), ref_attention(ATT["q"], ATT["k"], ATT["v"]),
            rtol=1e-5, atol=1e-6) is None),
    ("POST", "/v2/models/analysis/infer"): (
        {"parameters": {"kind": "bias", "method": "alibi", "num_heads": 2, "seq_len": 4},
         "inputs": []},
        lambda b: np.testing.assert_allclose(
            tensor(_v2(b)["reach_10"]), math.log(10) * np.array([16.0, 256.0]),
            rtol=1e-6) is None),
})


def routes():
    """(method, path) of every route the server has."""
    with open(os.path.join(ROOT, "server", "routes.def")) as fh:
        return re.findall(r'^SRV_ROUTE\((GET|POST),\s*"([^"]+)"', fh.read(), re.M)


def check_every_route(srv, cacert="ca.pem"):
    rs = routes()
    assert len(rs) >= 9 and set(rs) == set(REQUESTS), (rs, sorted(REQUESTS))
    for method, path in rs:
        body, ok = REQUESTS[(method, path)]
        args = []
        if body is not None:
            args = ["-H", "Content-Type: application/json", "--data-binary", json.dumps(body)]
        if srv.api_key:
            args += ["-H", "Authorization: Bearer " + srv.api_key]
        rc, status, out = curl(srv, path, *args, cacert=cacert)
        assert rc == 0 and status == 200, (method, path, rc, status, out[:300])
        assert ok(out), (method, path, out[:300])


# ===========================================================================

def test_every_route_over_https(start):
    check_every_route(tls_start(start, "srv"))
    # An RSA certificate too (the ECDHE-RSA suites).
    srv = tls_start(start, "srv-rsa")
    check_every_route(srv)
    with socket.create_connection((srv.host, srv.port), timeout=10 * run.SLOW) as raw:
        with context().wrap_socket(raw, server_hostname="localhost") as s:
            assert s.version() in ("TLSv1.2", "TLSv1.3"), s.version()
            assert peer_cn(s) == "localhost"


def _handshake(srv, ctx):
    """A TLS handshake with ctx: -> the socket's (version, cipher name) or
    the ssl.SSLError / OSError it raised."""
    try:
        with socket.create_connection((srv.host, srv.port), timeout=10 * run.SLOW) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                return s.version(), s.cipher()[0]
    except (ssl.SSLError, OSError) as e:
        return e


def test_only_tls12_and_13_with_aead_suites(start):
    srv = tls_start(start, "srv-rsa")
    ok13 = context()
    ok13.minimum_version = ssl.TLSVersion.TLSv1_3
    assert _handshake(srv, ok13)[0] == "TLSv1.3"
    ok12 = context()
    ok12.maximum_version = ssl.TLSVersion.TLSv1_2
    got = _handshake(srv, ok12)
    assert got[0] == "TLSv1.2" and re.search(r"ECDHE-RSA-(AES\d+-GCM|CHACHA20)", got[1]), got
    # Refused: TLS 1.1 and 1.0 (the client's own floor lowered so that it
    # is the server that says no), and TLS 1.2 suites without forward
    # secrecy or with CBC.
    old = context()
    old.set_ciphers("DEFAULT:@SECLEVEL=0")
    old.minimum_version = ssl.TLSVersion.TLSv1
    old.maximum_version = ssl.TLSVersion.TLSv1_1
    assert isinstance(_handshake(srv, old), Exception)
    for suite in ("ECDHE-RSA-AES128-SHA", "AES128-GCM-SHA256", "AES256-SHA256"):
        weak = context()
        weak.maximum_version = ssl.TLSVersion.TLSv1_2
        weak.set_ciphers(suite + ":@SECLEVEL=0")
        got = _handshake(srv, weak)
        assert isinstance(got, Exception), (suite, got)
    assert srv.get("/healthz").status == 200


def test_bad_clients_fail_without_harming_the_server(start):
    srv = tls_start(start, "srv")
    # Plain HTTP to the TLS port: no HTTP answer, the connection is closed.
    with socket.create_connection((srv.host, srv.port), timeout=10 * run.SLOW) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        srv_raw = b""
        try:
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                srv_raw += chunk
        except (ConnectionError, socket.timeout):
            pass
    assert not srv_raw.startswith(b"HTTP/"), srv_raw[:100]
    # Through curl too: it fails (no answer), it does not hang.
    p = subprocess.run(["curl", "-sS", "--max-time", str(30 * run.SLOW),
                        "http://%s:%d/healthz" % (srv.host, srv.port)],
                       capture_output=True, timeout=60 * run.SLOW)
    assert p.returncode != 0 and not p.stdout.startswith(b"HTTP"), p
    # A client trusting another CA: its verification fails, on its side.
    got = _handshake(srv, context("other-ca.pem"))
    assert isinstance(got, ssl.SSLCertVerificationError), got
    rc, status, _ = curl(srv, "/healthz", cacert="other-ca.pem")
    assert rc == 60 and status == 0, (rc, status)
    # Garbage instead of a ClientHello, and a client that leaves mid-handshake.
    with socket.create_connection((srv.host, srv.port), timeout=10 * run.SLOW) as s:
        s.sendall(os.urandom(3000))
        try:
            s.recv(4096)
        except (ConnectionError, socket.timeout):
            pass
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    hello = context().wrap_bio(incoming, outgoing, server_hostname="localhost")
    try:
        hello.do_handshake()
    except ssl.SSLWantReadError:
        pass
    with socket.create_connection((srv.host, srv.port), timeout=10 * run.SLOW) as s:
        s.sendall(outgoing.read())       # the ClientHello, then gone
    # None of it harmed the server: it answers on a good connection, and the
    # harness checks that it exits 0 on SIGTERM.
    check_every_route(srv)
    assert srv.get("/healthz").status == 200


def test_api_key_and_python_client_over_https(start):
    srv = tls_start(start, "srv", api_key="s3cret-over-tls")
    r = srv.get("/v1/methods", headers={"Authorization": None})
    assert r.status == 401 and "bearer" in r.headers.get("www-authenticate", "").lower(), r
    r = srv.get("/v1/methods", headers={"Authorization": "Bearer wrong"})
    assert r.status == 401, r
    assert srv.get("/v1/methods").status == 200
    rc, status, _ = curl(srv, "/v1/methods", "-H", "Authorization: Bearer s3cret-over-tls")
    assert (rc, status) == (0, 200)

    ab = Client("https://localhost:%d" % srv.port, api_key="s3cret-over-tls",
                ca_file=f("ca.pem"))
    try:
        rng = np.random.default_rng(17)
        # 8 x 256 x 128 float32 out = 1 MiB: the streamed binary path.
        q, k, v = (rng.standard_normal((1, 8, 256, 128)).astype(np.float32)
                   for _ in range(3))
        out = ab.attention(q, k, v, causal=True)
        assert ab.last_timing.get("stream") is True, ab.last_headers
        np.testing.assert_allclose(out, ref_attention(q, k, v, True), rtol=1e-4, atol=1e-5)
        # A small one as JSON, same kept-alive connection.
        qs = rng.standard_normal((1, 2, 5, 8)).astype(np.float32)
        np.testing.assert_allclose(ab.attention(qs, qs, qs), ref_attention(qs, qs, qs),
                                   rtol=1e-5, atol=1e-6)
    finally:
        ab.close()
    # Without the key, the client raises the 401.
    try:
        Client("https://127.0.0.1:%d" % srv.port, ca_file=f("ca.pem")).methods()
        raise AssertionError("no 401 without the key")
    except AttnbiasError as e:
        assert e.status == 401, e
    # A client that trusts another CA refuses to talk.
    try:
        Client("https://localhost:%d" % srv.port, ca_file=f("other-ca.pem")).health()
        raise AssertionError("a wrong CA was accepted")
    except ssl.SSLCertVerificationError:
        pass
    m = srv.metrics()
    key = ("attnbias_requests_total", frozenset({("route", "attention"), ("status", "200")}))
    assert m.get(key) == 2.0, m.get(key)


def test_sighup_reloads_without_dropping_connections(start):
    with tempfile.TemporaryDirectory() as tmp:
        cert, key = os.path.join(tmp, "tls.crt"), os.path.join(tmp, "tls.key")
        shutil.copy(f("srv.pem"), cert)
        shutil.copy(f("srv.key"), key)
        srv = start("--tls-cert", cert, "--tls-key", key)
        srv.ssl_context = context()
        wait_log(srv, r"TLS: serving certificate 'CN=localhost'")
        # A kept-alive connection made before the reload.
        old = http.client.HTTPSConnection("localhost", srv.port, timeout=30 * run.SLOW,
                                          context=context())
        old.request("GET", "/healthz")
        r = old.getresponse()
        assert r.status == 200 and r.read()
        assert peer_cn(old.sock) == "localhost"

        # The files are replaced (as a Secret's volume is), then SIGHUP.
        shutil.copy(f("srv2.pem"), cert + ".new")
        shutil.copy(f("srv2.key"), key + ".new")
        os.replace(cert + ".new", cert)
        os.replace(key + ".new", key)
        srv.proc.send_signal(signal.SIGHUP)
        wait_log(srv, r"SIGHUP: TLS reloaded: new connections get certificate 'CN=reloaded'")
        new = http.client.HTTPSConnection("localhost", srv.port, timeout=30 * run.SLOW,
                                          context=context())
        new.request("GET", "/readyz")
        r = new.getresponse()
        assert r.status == 200 and r.read()
        assert peer_cn(new.sock) == "reloaded"
        # The old connection is still open and still served (on its old
        # certificate): a request and a computing one on it.
        old.request("POST", "/v1/attention", body=json.dumps(ATT),
                    headers={"Content-Type": "application/json"})
        r = old.getresponse()
        assert r.status == 200, r.status
        np.testing.assert_allclose(tensor(json.loads(r.read())["output"]),
                                   ref_attention(ATT["q"], ATT["k"], ATT["v"]),
                                   rtol=1e-5, atol=1e-6)
        assert peer_cn(old.sock) == "localhost"
        old.close()

        # A key that is not the certificate's: the reload fails and the
        # certificate served stays as it was.
        shutil.copy(f("srv.key"), key)
        srv.proc.send_signal(signal.SIGHUP)
        wait_log(srv, r"SIGHUP: TLS reload failed, serving the previous certificate: "
                 r"--tls-key: '[^']+' is not the private key of the certificate")
        again = http.client.HTTPSConnection("localhost", srv.port, timeout=30 * run.SLOW,
                                            context=context())
        again.request("GET", "/healthz")
        assert again.getresponse().status == 200
        assert peer_cn(again.sock) == "reloaded"
        again.close()
        new.request("GET", "/healthz")   # the other open one is still served
        assert new.getresponse().status == 200
        new.close()
        # A plain-HTTP server has nothing to reload, and a SIGHUP does not
        # stop it.
        plain = start()
        plain.proc.send_signal(signal.SIGHUP)
        wait_log(plain, r"SIGHUP: nothing to reload")
        assert plain.get("/healthz").status == 200


def test_healthcheck_over_https(binary, start):
    srv = tls_start(start, "srv")
    port = str(srv.port)
    for flags in (["--tls-ca", f("ca.pem")],                 # the CA
                  ["--tls-cert", f("srv.pem")],              # the server's own, CA-signed
                  ["--host", "localhost", "--tls-ca", f("ca.pem")]):  # name checked
        r = cli(binary, "--healthcheck", "--port", port, *flags)
        assert r.returncode == 0, (flags, r.stderr)
    # The environment, as in the image.
    r = cli(binary, "--healthcheck", env={"ATTNBIAS_PORT": port,
                                          "ATTNBIAS_TLS_CA": f("ca.pem")})
    assert r.returncode == 0, r.stderr
    # Another CA: exit 1, saying why.
    r = cli(binary, "--healthcheck", "--port", port, "--tls-ca", f("other-ca.pem"))
    assert r.returncode == 1 and "not trusted" in r.stderr, r.stderr
    # Another certificate as the pin: not what the server serves.
    r = cli(binary, "--healthcheck", "--port", port, "--tls-cert", f("srv2.pem"))
    assert r.returncode == 1 and "not trusted" in r.stderr, r.stderr
    # A name the certificate does not carry (only checked for names that
    # are not this machine's loopback).
    r = cli(binary, "--healthcheck", "--host", "localhost.", "--port", port,
            "--tls-ca", f("ca.pem"))
    assert r.returncode == 1, r.stderr
    # Plain HTTP against the TLS port: exit 1 with a hint.
    r = cli(binary, "--healthcheck", "--port", port)
    assert r.returncode == 1 and "--tls-ca" in r.stderr, r.stderr
    # A self-signed server, checked against its own certificate.
    self_srv = tls_start(start, "self", cafile="self.pem")
    r = cli(binary, "--healthcheck", "--port", str(self_srv.port),
            "--tls-cert", f("self.pem"), "--tls-key", f("self.key"))
    assert r.returncode == 0, r.stderr
    ab = Client(self_srv.url, ca_file=f("self.pem"))
    assert ab.health()["status"] == "ok"
    ab.close()
    assert srv.get("/healthz").status == 200


def test_wrong_configuration_is_a_usage_error(binary):
    cases = [
        (["--tls-cert", f("srv.pem")], "--tls-key"),
        (["--tls-key", f("srv.key")], "--tls-cert"),
        (["--tls-cert", f("srv.pem"), "--tls-key", f("srv2.key")],
         "is not the private key of the certificate"),
        (["--tls-cert", f("srv.pem"), "--tls-key", "/nonexistent/tls.key"],
         "--tls-key: cannot open '/nonexistent/tls.key'"),
        (["--tls-cert", f("srv.key"), "--tls-key", f("srv.key")],
         "is not a PEM certificate"),
        (["--tls-cert", f("srv.pem"), "--tls-key", f("srv.pem")],
         "is not an unencrypted PEM private key"),
        (["--tls-ca", f("ca.pem")], "--tls-ca"),
    ]
    for flags, want in cases:
        r = cli(binary, "--host", "127.0.0.1", "--port", "0", *flags)
        assert r.returncode == 2 and want in r.stderr, (flags, r.returncode, r.stderr)
        assert "listening" not in r.stdout, r.stdout
    r = cli(binary, "--help")
    for flag in ("--tls-cert", "--tls-key", "--tls-ca"):
        assert flag in r.stdout, r.stdout


def test_https_on_a_unix_socket(binary, start):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "attnbiasd.sock")
        srv = start("--unix-socket", path, "--tls-cert", f("srv.pem"), "--tls-key",
                    f("srv.key"))
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(30 * run.SLOW)
        s.connect(path)
        with context().wrap_socket(s, server_hostname="localhost") as t:
            t.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
            status, _, body, _ = run.read_response(t)
            assert status == 200 and json.loads(body)["status"] == "ok", (status, body)
        r = cli(binary, "--healthcheck", "--unix-socket", path, "--tls-ca", f("ca.pem"))
        assert r.returncode == 0, (r.returncode, r.stderr)
        r = cli(binary, "--healthcheck", "--unix-socket", path)
        assert r.returncode == 1, r.stderr
        assert srv.stop() == 0
