"""test_unix.py: attnbiasd on a Unix-domain socket (--unix-socket).

- Every route answers over the socket; a streamed binary attention answer
  (1 MiB or more) and a JSON one are compared with a float64 numpy
  reference, through the Python client's `unix_socket` and through raw
  http.client; several requests share one kept-alive connection.
- The socket file exists while the server listens and is gone after
  SIGTERM.
- The path is never taken from someone else: a live server's socket and a
  regular file are refused (exit 1, the file untouched, the live server
  still answering), a stale socket (nothing listening) is replaced, and a
  path too long for a socket address is a usage error (exit 2).
- --healthcheck with --unix-socket: 0 against the live socket, 1 once it
  is gone.
- --unix-socket-mode sets the file's permissions whatever the umask, and
  they decide who may connect (checked as user nobody when run as root);
  a mode that is not octal 0..0777, or one without a socket, is a usage
  error.

Tests follow tests/http/run.py's convention; run alone with
    /usr/bin/python3 tests/http/run.py tests/http/test_unix.py
"""

import errno
import json
import math
import os
import socket
import stat
import subprocess
import sys
import tempfile
import time

import numpy as np

import run

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "api", "python"))

from attnbias_client import Client  # noqa: E402


def ref_attention(q, k, v, causal):
    """float64 softmax(q k^T / sqrt(d) + causal mask) v, bottom-right."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    nq, nk = q.shape[-2], k.shape[-2]
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if causal:
        pq = np.arange(nq)[:, None] + nk - nq
        s = np.where(np.arange(nk)[None, :] > pq, -np.inf, s)
    s = s - s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    return (p / p.sum(axis=-1, keepdims=True)) @ v


def sock_path(tmp, name="attnbiasd.sock"):
    return os.path.join(tmp, name)


def cli(binary, *args):
    return subprocess.run([binary] + list(args), capture_output=True, text=True,
                          timeout=30 * run.SLOW)


def test_routes_and_attention_over_the_socket(start):
    with tempfile.TemporaryDirectory() as tmp:
        path = sock_path(tmp)
        srv = start("--unix-socket", path)
        assert srv.unix == path
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
        for route in ("/healthz", "/readyz", "/metrics", "/openapi.yaml", "/v1/methods"):
            r = srv.get(route)
            assert r.status == 200, (route, r)
        r = srv.post("/v1/bias", json={"method": "alibi", "num_heads": 2,
                                       "q_len": 3, "k_len": 3})
        assert r.status == 200, r
        slopes = [2.0 ** -4, 2.0 ** -8]       # ALiBi, 2 heads
        table = np.array(r.json()["bias"]["data"]).reshape(2, 3, 3)
        dist = np.abs(np.arange(3)[:, None] - np.arange(3)[None, :])
        np.testing.assert_allclose(table, -np.array(slopes)[:, None, None] * dist,
                                   rtol=1e-6)

        rng = np.random.default_rng(5)
        ab = Client(unix_socket=path)
        try:
            # 8 x 256 x 128 float32 out = 1 MiB: the streamed binary path.
            q = rng.standard_normal((1, 8, 256, 128)).astype(np.float32)
            k = rng.standard_normal((1, 8, 256, 128)).astype(np.float32)
            v = rng.standard_normal((1, 8, 256, 128)).astype(np.float32)
            out = ab.attention(q, k, v, causal=True)
            assert ab.last_timing.get("stream") is True, ab.last_headers
            np.testing.assert_allclose(out, ref_attention(q, k, v, True),
                                       rtol=1e-4, atol=1e-5)
            # Small: JSON with base64, same kept-alive connection.
            qs = rng.standard_normal((1, 2, 5, 8)).astype(np.float32)
            out = ab.attention(qs, qs, qs)
            np.testing.assert_allclose(out, ref_attention(qs, qs, qs, False),
                                       rtol=1e-5, atol=1e-6)
            assert repr(ab).endswith("unix_socket=%r)" % path)
        finally:
            ab.close()
        # Counted when libmicrohttpd reports each request complete, which
        # may come just after the client has read the whole answer.
        m = srv.wait_idle()
        key = ("attnbias_requests_total",
               frozenset({("route", "attention"), ("status", "200")}))
        assert m.get(key) == 2.0, m.get(key)
        assert srv.stop() == 0
        assert not os.path.exists(path), "the socket file outlived the server"


def test_path_is_never_taken_from_others(binary, start):
    with tempfile.TemporaryDirectory() as tmp:
        # A stale socket: bound, then its owner went away without unlinking.
        stale = sock_path(tmp, "stale.sock")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(stale)
        s.close()
        assert stat.S_ISSOCK(os.lstat(stale).st_mode)
        srv = start("--unix-socket", stale)
        assert srv.get("/healthz").status == 200

        # A live server's socket is refused; the live server goes on.
        r = cli(binary, "--unix-socket", stale)
        assert r.returncode == 1, r
        assert "another server is listening" in r.stderr and stale in r.stderr, r.stderr
        assert srv.get("/healthz").status == 200

        # A regular file is refused and left alone.
        plain = sock_path(tmp, "plain")
        with open(plain, "w") as f:
            f.write("keep me\n")
        r = cli(binary, "--unix-socket", plain)
        assert r.returncode == 1 and "not a socket" in r.stderr, r
        with open(plain) as f:
            assert f.read() == "keep me\n"

        # Longer than sun_path holds: a usage error naming the flag.
        long_path = os.path.join(tmp, "x" * 120)
        r = cli(binary, "--unix-socket", long_path)
        assert r.returncode == 2 and "--unix-socket" in r.stderr, r
        r = subprocess.run([binary], capture_output=True, text=True, timeout=30 * run.SLOW,
                           env=dict(os.environ, ATTNBIAS_UNIX_SOCKET=""))
        assert r.returncode == 2 and "ATTNBIAS_UNIX_SOCKET" in r.stderr, r

        # A directory that does not exist: exit 1 with the reason.
        r = cli(binary, "--unix-socket", os.path.join(tmp, "no", "such.sock"))
        assert r.returncode == 1 and "No such file" in r.stderr, r


def test_healthcheck_over_the_socket(binary, start):
    with tempfile.TemporaryDirectory() as tmp:
        path = sock_path(tmp)
        srv = start("--unix-socket", path)
        r = cli(binary, "--healthcheck", "--unix-socket", path)
        assert r.returncode == 0, r
        r = subprocess.run([binary, "--healthcheck"], capture_output=True, text=True,
                           timeout=30 * run.SLOW,
                           env=dict(os.environ, ATTNBIAS_UNIX_SOCKET=path))
        assert r.returncode == 0, r
        assert srv.stop() == 0
        r = cli(binary, "--healthcheck", "--unix-socket", path)
        assert r.returncode == 1 and "unix:" + path in r.stderr, r


def test_raw_http_over_the_socket(start):
    """Framing errors and problem+json behave as over TCP."""
    with tempfile.TemporaryDirectory() as tmp:
        srv = start("--unix-socket", sock_path(tmp))
        r = srv.post("/v1/bias", json={"method": "alibi", "num_heads": 0,
                                       "q_len": 3, "k_len": 3})
        run.check_problem(r, 400, field="/num_heads")
        out = srv.raw(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert out.startswith(b"HTTP/1.1 200"), out[:200]
        body = out.split(b"\r\n\r\n", 1)[1]
        assert json.loads(body) == {"status": "ok"}, body


def test_connection_bounds_over_the_socket(start):
    """The bounds of TCP connections hold here too, but the per-address
    one (a Unix-domain client has no address): four connections live past
    --max-connections-per-ip 1, headers that never end are cut after
    --header-timeout-s, and a refused body sent before reading is drained
    so that its client reads the 413."""
    with tempfile.TemporaryDirectory() as tmp:
        srv = start("--unix-socket", sock_path(tmp), "--max-connections-per-ip", "1",
                    "--header-timeout-s", "2", "--max-body-mb", "1", "--linger-s", "600")
        get = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        socks = [srv.connect() for _ in range(4)]
        try:
            for s in socks:
                s.sendall(get)
                assert run.read_response(s)[0] == 200
        finally:
            for s in socks:
                s.close()
        s = srv.connect(timeout=30)
        try:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Never: ends")
            assert s.recv(100) == b""  # closed by the server, no answer
        finally:
            s.close()
        s = srv.connect(timeout=30)
        try:
            s.sendall(b"POST /v1/bias HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n" % (8 << 20) + b" " * (8 << 20))
            status, headers, body, _ = run.read_response(s)
        finally:
            s.close()
        assert status == 413 and headers["connection"].lower() == "close", (status, headers)
        assert "max-body-mb" in json.loads(body)["detail"], body
        m = srv.metrics()
        assert m[("attnbias_rejected_total", frozenset({("reason", "header_timeout")}))] == 1
        assert m[("attnbias_rejected_total", frozenset({("reason", "per_ip_limit")}))] == 0


def connect_as_nobody(path):
    """errno of connect(path) made by user nobody (0 on success)."""
    code = ("import socket, sys\n"
            "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
            "try:\n"
            "    s.connect(sys.argv[1])\n"
            "except OSError as e:\n"
            "    sys.exit(e.errno)\n")
    return subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup",
                           "--clear-groups", sys.executable, "-c", code, path],
                          timeout=30 * run.SLOW).returncode


def test_socket_mode(binary, start):
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)  # others may reach the socket; its mode decides
        for mode, umask in ((0o600, 0o000), (0o666, 0o077)):
            path = sock_path(tmp, "m%o.sock" % mode)
            old = os.umask(umask)  # the server inherits it
            try:
                srv = start("--unix-socket", path, "--unix-socket-mode", "%o" % mode)
            finally:
                os.umask(old)
            assert stat.S_IMODE(os.lstat(path).st_mode) == mode, oct(os.lstat(path).st_mode)
            assert srv.get("/healthz").status == 200
            if os.geteuid() == 0:
                got = connect_as_nobody(path)
                assert got == (0 if mode == 0o666 else errno.EACCES), (oct(mode), got)
            assert srv.stop() == 0

        path = sock_path(tmp)
        for bad in ("9", "1777", "rw", "", "-1", "0x1ff"):
            r = cli(binary, "--unix-socket", path, "--unix-socket-mode", bad)
            assert r.returncode == 2, (bad, r)
            assert "--unix-socket-mode" in r.stderr and "'%s'" % bad in r.stderr, r.stderr
        r = cli(binary, "--unix-socket-mode", "660")
        assert r.returncode == 2 and "no --unix-socket" in r.stderr, r
        r = subprocess.run([binary, "--unix-socket", path], capture_output=True, text=True,
                           timeout=30 * run.SLOW,
                           env=dict(os.environ, ATTNBIAS_UNIX_SOCKET_MODE="888"))
        assert r.returncode == 2 and "ATTNBIAS_UNIX_SOCKET_MODE" in r.stderr, r
        assert not os.path.exists(path)


def test_two_servers_on_one_path(binary):
    """PATH.lock decides between servers started at the same moment: one
    serves, the other exits 1 and touches nothing -- in particular it never
    takes the path from the first (a socket bound but not yet listening
    refuses connections like a dead one) nor removes it when it stops."""
    import fcntl
    with tempfile.TemporaryDirectory() as tmp:
        path = sock_path(tmp)
        for _ in range(10):
            procs = [subprocess.Popen([binary, "--unix-socket", path], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True) for _ in range(2)]
            deadline = 30 * run.SLOW
            end = time.monotonic() + deadline
            while all(p.poll() is None for p in procs):
                assert time.monotonic() < end, "neither of two servers gave up"
                time.sleep(0.01)
            loser = next(p for p in procs if p.poll() is not None)
            winner = next(p for p in procs if p is not loser)
            err = loser.communicate(timeout=deadline)[1]
            assert loser.returncode == 1 and "another server" in err, (loser.returncode, err)
            assert "listening on unix:" in winner.stdout.readline()
            r = cli(binary, "--healthcheck", "--unix-socket", path)
            assert r.returncode == 0, r
            winner.terminate()
            assert winner.wait(deadline) == 0
            assert not os.path.exists(path)
        # The lock held by someone else (a server starting): refused, and
        # a stale socket at the path is left alone until the lock is free.
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(path)
        s.close()
        with open(path + ".lock", "w") as lk:
            fcntl.flock(lk, fcntl.LOCK_EX)
            r = cli(binary, "--unix-socket", path)
            assert r.returncode == 1 and path + ".lock" in r.stderr, r
            assert stat.S_ISSOCK(os.lstat(path).st_mode)
        # A symlink in the lock file's place is not followed.
        os.unlink(path + ".lock")
        os.symlink(os.path.join(tmp, "elsewhere"), path + ".lock")
        r = cli(binary, "--unix-socket", path)
        assert r.returncode == 1 and "lock file" in r.stderr, r
        assert not os.path.exists(os.path.join(tmp, "elsewhere"))
