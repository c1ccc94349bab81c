#!/usr/bin/python3
"""run.py: the HTTP test harness of attnbiasd (`make test` runs it after the
unit tests).

    /usr/bin/python3 tests/http/run.py --server build/attnbiasd [options] [files]

      --server PATH   the binary under test (default build/attnbiasd)
      -k TEXT         run only tests whose "file::name" contains TEXT
      --valgrind      run every server under valgrind (also ATTNBIAS_TEST_VALGRIND=1);
                      a server must then exit 0 with no error and no definite leak
      --budget S      stop starting tests after S seconds (default 3600, times SLOW)
      --test-timeout S  fail a test still running after S seconds (default 300,
                      times SLOW); a test function whose own work is long (a
                      virtualenv, mypy) raises its own as the attribute `timeout`
      -v              print each server's log after a failing test
      files           test files to run (default: every tests/http/test_*.py)

Writing tests -- the convention
-------------------------------
A test file is tests/http/test_<topic>.py.  Its tests are the module-level
functions named test_*, run in the order they are defined.  A test passes when
it returns and fails when it raises (use plain `assert`; AssertionError
messages are printed).  What a test needs is given by its parameter names:

  server (or srv)  the file's shared server, started on first use on
                   127.0.0.1 with --port 0 and the file's module-level
                   SERVER_ARGS (list of flags, default []) and SERVER_ENV
                   (dict of extra environment, default {}); stopped with
                   SIGTERM after the file's last test, and it must then exit 0.
  start            start(*flags, env=None, api_key=None) -> a fresh Server
                   with those flags (api_key: written to a temporary file and
                   passed as --api-key-file).  After the test every server
                   started so that still runs gets SIGTERM and must exit 0
                   (it is killed if the test failed).  Use it when a test
                   needs its own flags or stops the server.
  binary           the path of the server binary (to run it with other
                   arguments, e.g. --version).
A parameter with a default value that the harness does not know is left to
its default.  Raise run.Skip("why") (import run) only when something outside
the project is missing; a skip is printed but counts as neither passed nor
failed.

A Server has: .url ("http://127.0.0.1:PORT", also .base_url; https:// for a
server started with --tls-cert, whose requests use .ssl_context), .host, .port,
.binary, .api_key, .proc (subprocess.Popen), and
  request(method, path, body=None, json=None, headers=None, timeout=30)
      -> Response(.status, .headers (lower-case names), .body (bytes),
                  .json(), .text); api_key is sent automatically when set
                  unless headers has "Authorization" (None to omit it);
  get(path, **kw), post(path, json=None, body=None, **kw);
  raw(data, timeout=5) -> bytes: sends data on a new socket and reads until
      the server closes or the timeout passes;
  connect() -> a connected socket (the caller closes it);
  metrics() -> {(name, frozenset(labels.items())): value};
  gauge(name) -> the value of an unlabelled gauge of /metrics;
  wait_idle(timeout=30) -> metrics once no request is in flight (but the
      /metrics request asking), no --max-queue slot is taken and no call is
      on the pool;
  stop(sig=SIGTERM, timeout=60) -> exit status;  log() -> its stderr so far.
Every request has a timeout; every server is killed at the end, whatever
happens.  Output: one line per test, then exactly "N passed, N failed"; the
exit status is 1 if any test failed.

Timing -- the rules every test keeps
------------------------------------
A test waits for events, never for time: for a gauge of /metrics to reach a
value (run.wait_for polls a condition), for a line in the server's log, for
a socket to close.  Each wait has a bound only so that a hang fails instead
of blocking the run: bounds are many times what the wait takes on a loaded
machine, multiplied by run.SLOW (10 under valgrind, 4 for a server built
with ASan or UBSan, ATTNBIAS_TEST_SLOW=F to choose).  The same holds for the
whole test (--test-timeout): a test that builds things (a virtualenv, mypy,
npm) sets its function's attribute `timeout` (seconds, before run.SLOW) when
a loaded machine needs more than the default.  Nothing asserts that
something took less than some time.  A request's metrics are filed when
libmicrohttpd reports it complete, which may come just after its client has
read the whole answer: read counters after Server.wait_idle().  A server may
answer and close while the client still sends (a refusal): Server.request
and Server.raw then read the answer that came, as every test reading a
socket by hand must.
"""

import argparse
import http.client
import importlib.util
import inspect
import json as jsonlib
import os
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

VALGRIND = False
# Time scale for timeouts: valgrind slows the server down by 10-50x.
SLOW = 1.0


class Skip(Exception):
    """Raised by a test when something outside the project is missing."""


class TestTimeout(Exception):
    """Raised (by SIGALRM) in a test that ran past its time limit."""


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def text(self):
        return self.body.decode("utf-8", "replace")

    def json(self):
        return jsonlib.loads(self.body)

    def __repr__(self):
        return "<Response %d %s %r>" % (self.status, self.headers.get("content-type"),
                                        self.body[:200])


_LISTEN_RE = re.compile(r"listening on (?:(https?)://(\[[^\]]+\]|[^:/\s]+):(\d+)|unix:(\S+))")


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client over a Unix-domain socket (a server run with
    --unix-socket)."""

    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


class Server:
    """One attnbiasd process on 127.0.0.1 with a port the kernel picked (or,
    given --unix-socket PATH, on that socket: then `unix` is the path)."""

    def __init__(self, binary, args=(), env=None, api_key=None):
        self.binary = binary
        self.api_key = api_key
        self._keyfile = None
        args = list(args)
        if api_key is not None:
            fd, self._keyfile = tempfile.mkstemp(prefix="attnbias-key-")
            with os.fdopen(fd, "w") as f:
                f.write(api_key + "\n")
            args += ["--api-key-file", self._keyfile]
        self.unix = None
        self.scheme = "http"
        # For an HTTPS server (--tls-cert): the ssl.SSLContext request()
        # verifies it with, set by the test that made its certificate.
        self.ssl_context = None
        if "--unix-socket" not in args:
            args = ["--host", "127.0.0.1", "--port", "0"] + args
        # Under valgrind the server runs ~50x slower, its own clock does
        # not: its default deadlines (idle, headers, the body rate rule,
        # lingering) would cut what only valgrind made slow.
        for flag, default in (("--timeout-s", 30), ("--header-timeout-s", 10),
                              ("--body-grace-s", 10), ("--linger-s", 5)):
            if VALGRIND and not any(a.startswith(flag) for a in args):
                args = args + [flag, "%g" % (default * SLOW)]
        self.args = args
        full_env = dict(os.environ)
        full_env.update(env or {})
        cmd = [binary] + self.args
        if VALGRIND:
            # --fair-sched=yes: valgrind runs one thread at a time, and its
            # default lock lets a thread that computes keep it for minutes,
            # so the main thread never saw SIGTERM and the HTTP threads
            # timed connections out (measured: a drain test hung > 300 s
            # without it, exited in 5 s with it).
            cmd = ["valgrind", "-q", "--fair-sched=yes", "--error-exitcode=99",
                   "--leak-check=full", "--errors-for-leak-kinds=definite",
                   "--show-leak-kinds=definite"] + cmd
        self._err = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._err,
                                     stdin=subprocess.DEVNULL, env=full_env)
        self.exit_status = None
        try:
            self.host, self.port = self._read_port(30 * SLOW)
        except Exception:
            self.kill()
            raise
        if self.unix:
            self.url = self.base_url = "http://localhost"
        else:
            self.url = self.base_url = "%s://%s:%d" % (self.scheme, self.host, self.port)

    def _read_port(self, timeout):
        deadline = time.monotonic() + timeout
        buf = b""
        fd = self.proc.stdout.fileno()
        while time.monotonic() < deadline:
            r, _, _ = select.select([fd], [], [], 0.1)
            if r:
                chunk = os.read(fd, 4096)
                if not chunk:
                    break
                buf += chunk
                m = _LISTEN_RE.search(buf.decode("utf-8", "replace"))
                if m and m.group(4):
                    self.unix = m.group(4)
                    return "localhost", None
                if m:
                    self.scheme = m.group(1)
                    return m.group(2).strip("[]"), int(m.group(3))
            elif self.proc.poll() is not None:
                break
        raise RuntimeError("server did not print its port (exit %r): %s\n%s"
                           % (self.proc.poll(), buf.decode("utf-8", "replace"),
                              self.log()))

    # ---- requests -------------------------------------------------------
    def request(self, method, path, body=None, json=None, headers=None, timeout=30):
        hdrs = {}
        if self.api_key is not None:
            hdrs["Authorization"] = "Bearer " + self.api_key
        if json is not None:
            body = jsonlib.dumps(json).encode()
            hdrs["Content-Type"] = "application/json"
        for k, v in (headers or {}).items():
            for old in [h for h in hdrs if h.lower() == k.lower()]:
                del hdrs[old]
            if v is not None:
                hdrs[k] = v
        if isinstance(body, str):
            body = body.encode()
        if self.unix:
            conn = UnixHTTPConnection(self.unix, timeout * SLOW)
        elif self.scheme == "https":
            conn = http.client.HTTPSConnection(self.host, self.port, timeout=timeout * SLOW,
                                               context=self.ssl_context)
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout * SLOW)
        try:
            try:
                conn.request(method, path, body=body, headers=hdrs)
            except (BrokenPipeError, ConnectionResetError):
                # Answered before the whole body was sent, and closed: the
                # answer is still there to read (getresponse raises if not).
                pass
            resp = conn.getresponse()
            data = resp.read()
            heads = {k.lower(): v for k, v in resp.getheaders()}
            return Response(resp.status, heads, data)
        finally:
            conn.close()

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, json=None, body=None, **kw):
        return self.request("POST", path, body=body, json=json, **kw)

    def connect(self, timeout=10):
        if self.unix:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(timeout * SLOW)
            s.connect(self.unix)
            return s
        s = socket.create_connection((self.host, self.port), timeout=timeout * SLOW)
        return s

    def raw(self, data, timeout=5):
        s = self.connect(timeout)
        try:
            s.settimeout(timeout * SLOW)
            try:
                s.sendall(data)
            except ConnectionError:
                pass  # answered and closed while we sent: read the answer
            return read_until_closed(s)
        finally:
            s.close()

    def metrics(self):
        r = self.get("/metrics", headers={"Authorization": None})
        assert r.status == 200, r
        return parse_metrics(r.text)

    def gauge(self, name):
        """The value of an unlabelled gauge of /metrics."""
        return self.metrics()[(name, frozenset())]

    def wait_idle(self, timeout=30):
        """Wait until no request is in flight but the /metrics request
        asking, no --max-queue slot is taken and no call is on the pool;
        returns the metrics read after that.  Every request that began
        before is then counted, and every slot given back."""
        def idle():
            m = self.metrics()
            return m[("attnbias_inflight_requests", frozenset())] <= 1 and \
                m[("attnbias_queue_depth", frozenset())] == 0 and \
                m[("attnbias_pool_calls", frozenset())] == 0
        wait_for(idle, timeout, "no request in flight (%s)" % self.url)
        # Read again: a sample's counters are read before its gauges, and a
        # request may have ended in between.
        return self.metrics()

    # ---- lifecycle ------------------------------------------------------
    def log(self):
        try:
            self._err.seek(0)
            return self._err.read().decode("utf-8", "replace")
        except (ValueError, OSError):
            return ""

    def stop(self, sig=signal.SIGTERM, timeout=60):
        """Signal the server and wait; returns its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout * SLOW)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError("server did not exit within %gs of signal %d"
                                     % (timeout * SLOW, sig))
        self.exit_status = self.proc.returncode
        self._cleanup()
        return self.exit_status

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._cleanup()

    def _cleanup(self):
        if self.proc.stdout:
            self.proc.stdout.close()
        if self._keyfile:
            try:
                os.unlink(self._keyfile)
            except OSError:
                pass
            self._keyfile = None


_SAMPLE_RE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)$')
_LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


PROBLEM_TYPE = re.compile(r"^https://attnbias\.dev/errors/[a-z0-9-]+$")


def check_problem(r, statuses=(400,), field=None, field_prefix=None):
    """r is a problem+json (docs/http.md#errors) with a status in `statuses` (one
    status or several); `field` must equal, or start with `field_prefix`,
    when given.  Returns the problem."""
    if isinstance(statuses, int):
        statuses = (statuses,)
    assert r.status in statuses, r
    assert r.headers.get("content-type", "").startswith("application/problem+json"), r
    p = r.json()
    for key, typ in (("type", str), ("title", str), ("status", int),
                     ("detail", str), ("error", str)):
        assert isinstance(p.get(key), typ), (key, p)
    assert PROBLEM_TYPE.match(p["type"]), p
    assert p["status"] == r.status, p
    assert p["detail"] and p["error"] == p["detail"], p
    if "field" in p:
        assert isinstance(p["field"], str) and (p["field"] == "" or p["field"].startswith("/")), p
    if field is not None:
        assert p.get("field") == field, (field, p)
    if field_prefix is not None:
        f = p.get("field")
        assert f is not None and (f == field_prefix or f.startswith(field_prefix + "/")), (field_prefix, p)
    return p


def safetensors_dump(tensors, params):
    """A safetensors file: tensors by dotted name (float32, float64 and
    float16 kept, other dtypes as float32), params in __metadata__."""
    import numpy as np  # only the tests that send tensors need numpy
    to_st = {np.dtype("float32"): "F32", np.dtype("float64"): "F64",
             np.dtype("float16"): "F16"}
    header = {"__metadata__": {"params": jsonlib.dumps(params)}}
    blobs, off = [], 0
    for name, arr in tensors.items():
        arr = np.asarray(arr)
        if arr.dtype not in to_st:
            arr = arr.astype(np.float32)
        b = arr.astype(arr.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": to_st[arr.dtype], "shape": list(arr.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = jsonlib.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def proc_status(srv, key):
    """A /proc/<pid>/status value in KiB (VmRSS, VmPeak, VmHWM)."""
    with open("/proc/%d/status" % srv.proc.pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise AssertionError("no %s in /proc/%d/status" % (key, srv.proc.pid))


def instrumented(srv):
    """True under valgrind or AddressSanitizer: their allocators (shadow
    memory, quarantine) make RSS and virtual size meaningless here, and
    they check leaks themselves at exit."""
    if VALGRIND:
        return True
    try:
        with open("/proc/%d/maps" % srv.proc.pid) as f:
            maps = f.read()
    except OSError:
        return True
    return "libasan" in maps or "libclang_rt.asan" in maps or "vgpreload" in maps


def wait_for(cond, timeout=30.0, what="condition"):
    """Poll cond() until it returns something true, and return that; fail
    after timeout * SLOW seconds (a bound against hangs, not a deadline the
    test expects to come near)."""
    deadline = time.monotonic() + timeout * SLOW
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %gs waiting for %s" % (timeout * SLOW, what))
        time.sleep(0.02)


def read_until_closed(sock):
    """Bytes read from sock until the peer closes, resets or stays silent
    for the socket's timeout."""
    out = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            out += chunk
    except (socket.timeout, ConnectionError):
        pass
    return out


def expect_closed(sock, timeout):
    """The peer closes sock without sending another byte (a reset is a
    close too: the server may have had unread bytes of ours)."""
    sock.settimeout(timeout)
    try:
        assert sock.recv(100) == b""
    except ConnectionResetError:
        pass


def read_response(sock, timeout=10.0):
    """Read one Content-Length-framed HTTP response from a raw socket (for
    tests that speak HTTP by hand) -> (status, headers with lower-case names,
    body, bytes read past the body); the body is short when the peer closes
    early."""
    sock.settimeout(timeout * SLOW)
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError("connection closed before a response: %r" % buf[:200])
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        headers[k.strip().lower()] = v.strip()
    n = int(headers.get("content-length", "0"))
    while len(rest) < n:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return status, headers, rest[:n], rest[n:]


def parse_metrics(text):
    """Prometheus text format 0.0.4 -> {(name, frozenset(labels)): float}.
    Raises ValueError on a line that is not a comment or a sample."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE_RE.match(line)
        if not m:
            raise ValueError("not a metrics sample: %r" % line)
        labels = frozenset(_LABEL_RE.findall(m.group(3) or ""))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


# ---------------------------------------------------------------------------
# running
# ---------------------------------------------------------------------------

def _alarm(signum, frame):
    raise TestTimeout("test ran past its time limit")


def _terminate(signum, frame):
    # SIGTERM (tests/repeat.sh stopped, make interrupted) unwinds like ^C,
    # so that every server the run started is stopped on the way out.
    raise KeyboardInterrupt("terminated")


class _Module:
    """A test file, its shared server and the servers its tests started."""

    def __init__(self, path, binary):
        self.path = path
        self.name = os.path.basename(path)
        self.binary = binary
        self.shared = None
        spec = importlib.util.spec_from_file_location(
            "attnbias_http_" + self.name[:-3], path)
        self.mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(self.mod)

    def tests(self):
        fns = [(n, f) for n, f in vars(self.mod).items()
               if n.startswith("test_") and inspect.isfunction(f)
               and f.__module__ == self.mod.__name__]
        fns.sort(key=lambda nf: nf[1].__code__.co_firstlineno)
        return fns

    def shared_server(self):
        if self.shared is None:
            self.shared = Server(self.binary, getattr(self.mod, "SERVER_ARGS", []),
                                 getattr(self.mod, "SERVER_ENV", {}))
        return self.shared

    def stop_shared(self):
        """Stop the shared server; returns an error string or None."""
        if self.shared is None:
            return None
        srv, self.shared = self.shared, None
        try:
            st = srv.stop()
        except AssertionError as e:
            return str(e)
        if st != 0:
            return "shared server exited with status %d:\n%s" % (st, srv.log()[-4000:])
        return None


def run_test(module, name, fn, verbose):
    started = []

    def start(*flags, env=None, api_key=None):
        s = Server(module.binary, flags, env, api_key)
        started.append(s)
        return s

    kwargs = {}
    for pname, p in inspect.signature(fn).parameters.items():
        if pname in ("server", "srv"):
            kwargs[pname] = module.shared_server()
        elif pname == "start":
            kwargs[pname] = start
        elif pname == "binary":
            kwargs[pname] = module.binary
        elif p.default is inspect.Parameter.empty:
            raise TypeError("unknown fixture %r (see run.py's docstring)" % pname)
    failing = False
    try:
        fn(**kwargs)
    except BaseException:
        failing = True
        raise
    finally:
        # A server still running after a passing test must shut down cleanly:
        # SIGTERM, then exit 0 (under valgrind or ASan that also means no
        # memory error and no leak).  After a failing test, just kill it.
        problem = None
        for s in started:
            try:
                if verbose and failing:
                    sys.stdout.write("---- server log (%s)\n%s\n" % (" ".join(s.args), s.log()))
                if not failing and problem is None and s.proc.poll() is None:
                    st = s.stop()
                    if st != 0:
                        problem = "server %s exited %d after SIGTERM:\n%s" % (
                            " ".join(s.args), st, s.log()[-4000:])
            except AssertionError as e:
                problem = str(e)
            finally:
                s.kill()
        if problem and not failing:
            raise AssertionError(problem)


def sanitized(binary):
    """True for a binary built with AddressSanitizer or UBSan (make asan):
    it names their runtime's entry points."""
    import mmap
    try:
        with open(binary, "rb") as f, \
                mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return m.find(b"__asan_init") >= 0 or m.find(b"__ubsan_handle_") >= 0
    except (OSError, ValueError):
        return False


def time_scale(binary):
    """run.SLOW: ATTNBIAS_TEST_SLOW when set; else 10 under valgrind (the
    server runs 10-50x slower), 4 for a sanitized build (measured: the HTTP
    suite takes 2-3x as long under make asan, the scalar kernels' runs more),
    else 1."""
    if os.environ.get("ATTNBIAS_TEST_SLOW"):
        return float(os.environ["ATTNBIAS_TEST_SLOW"])
    if VALGRIND:
        return 10.0
    return 4.0 if sanitized(binary) else 1.0


def main(argv):
    global VALGRIND, SLOW
    ap = argparse.ArgumentParser(description="attnbiasd HTTP tests")
    ap.add_argument("--server", default=os.path.join(ROOT, "build", "attnbiasd"))
    ap.add_argument("-k", default="")
    ap.add_argument("--valgrind", action="store_true")
    # Both bounds guard against hangs only.  With its virtualenv, mypy and
    # npm tests the suite took 20-30 minutes on the shared 2-core machine
    # with both cores also busy (make test-repeat), its slowest test (the
    # Python package, a `timeout` of its own) over 5 minutes.
    ap.add_argument("--budget", type=float, default=3600)
    ap.add_argument("--test-timeout", type=float, default=300)
    ap.add_argument("-v", action="store_true")
    ap.add_argument("files", nargs="*")
    args = ap.parse_args(argv)

    VALGRIND = args.valgrind or os.environ.get("ATTNBIAS_TEST_VALGRIND") == "1"
    binary = os.path.abspath(args.server)
    if not os.access(binary, os.X_OK):
        print("no server binary at %s" % binary)
        print("0 passed, 1 failed")
        return 1
    SLOW = time_scale(binary)
    if SLOW != 1.0:
        print("(time bounds x%g)" % SLOW)
    sys.modules.setdefault("run", sys.modules[__name__])
    sys.path.insert(0, HERE)
    files = args.files or sorted(
        os.path.join(HERE, f) for f in os.listdir(HERE)
        if f.startswith("test_") and f.endswith(".py"))

    signal.signal(signal.SIGALRM, _alarm)
    signal.signal(signal.SIGTERM, _terminate)
    t_start = time.monotonic()
    passed = failed = skipped = 0
    for path in files:
        try:
            module = _Module(path, binary)
        except Exception:
            failed += 1
            print("FAIL %s (cannot import)\n%s" % (os.path.basename(path),
                                                   traceback.format_exc()))
            continue
        try:
            for name, fn in module.tests():
                full = "%s::%s" % (module.name, name)
                if args.k not in full:
                    continue
                if time.monotonic() - t_start > args.budget * SLOW:
                    failed += 1
                    print("FAIL %s (not run: the %gs budget is spent)"
                          % (full, args.budget * SLOW))
                    continue
                t0 = time.monotonic()
                limit = max(args.test_timeout, getattr(fn, "timeout", 0))
                signal.alarm(int(limit * SLOW))
                try:
                    run_test(module, name, fn, args.v)
                    signal.alarm(0)
                    passed += 1
                    print("ok   %s (%.2fs)" % (full, time.monotonic() - t0))
                except Skip as e:
                    signal.alarm(0)
                    skipped += 1
                    print("skip %s: %s" % (full, e))
                except BaseException as e:  # a test's failure never stops the run
                    signal.alarm(0)
                    if isinstance(e, KeyboardInterrupt):
                        raise
                    failed += 1
                    print("FAIL %s (%.2fs)\n%s" % (full, time.monotonic() - t0,
                                                   traceback.format_exc().rstrip()))
                    if args.v and module.shared is not None:
                        print("---- shared server log\n%s" % module.shared.log()[-8000:])
                sys.stdout.flush()
        finally:
            err = module.stop_shared()
            if err:
                failed += 1
                print("FAIL %s (shared server stop)\n%s" % (module.name, err))
    if skipped:
        print("(%d skipped)" % skipped)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
