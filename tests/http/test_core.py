"""test_core.py: the HTTP core of attnbiasd -- health and readiness,
metrics, routing errors, problem+json, API keys, body limits and framing,
admission (503), graceful shutdown, idle timeouts, X-Attnbias-Ignored,
many connections, and the command line.  Conventions: see run.py."""

import http.client
import json
import os
import select
import signal
import socket
import subprocess
import threading
import time

import run

# A small valid request, answered inline (tiny).
BIAS = {"method": "alibi", "num_heads": 2, "q_len": 4, "k_len": 4}
BIAS_BODY = json.dumps(BIAS).encode()

check_problem = run.check_problem
wait_for = run.wait_for


def read_response(sock, timeout=10.0):
    """One response -> (status, headers, body): run.read_response without
    the leftover bytes."""
    return run.read_response(sock, timeout)[:3]


# ---------------------------------------------------------------------------
# health, metrics, routing
# ---------------------------------------------------------------------------

def test_healthz_readyz(server):
    r = server.get("/healthz")
    assert r.status == 200 and r.json() == {"status": "ok"}, r
    assert r.headers["content-type"].startswith("application/json")
    r = server.get("/readyz")
    assert r.status == 200 and r.json()["status"] == "ok", r
    # HEAD: the GET route's headers, no body.
    r = server.request("HEAD", "/healthz")
    assert r.status == 200 and r.body == b"", r


def test_openapi_served(server):
    r = server.get("/openapi.yaml")
    assert r.status == 200, r
    with open(run.ROOT + "/api/openapi.yaml", "rb") as f:
        assert r.body == f.read()
    assert "yaml" in r.headers["content-type"]


def test_unknown_route_404(server):
    p = check_problem(server.get("/v2/nothing"), 404)
    assert "/v2/nothing" in p["detail"]
    check_problem(server.post("/v1/rope/", json={}), 404)


def test_wrong_method_405_with_allow(server):
    r = server.get("/v1/attention")
    check_problem(r, 405)
    assert r.headers["allow"] == "POST", r.headers
    r = server.post("/healthz", body=b"")
    check_problem(r, 405)
    assert "GET" in [m.strip() for m in r.headers["allow"].split(",")], r.headers
    r = server.request("DELETE", "/v1/bias")
    check_problem(r, 405)


def test_problem_names_the_field(server):
    bad = dict(BIAS, num_heads=0)
    p = check_problem(server.post("/v1/bias", json=bad), 400, field="/num_heads")
    assert "0" in p["detail"], p
    check_problem(server.post("/v1/bias", body=b"{not json",
                              headers={"Content-Type": "application/json"}), 400)


def test_unsupported_media_type_415(server):
    r = server.post("/v1/bias", body=BIAS_BODY, headers={"Content-Type": "text/plain"})
    check_problem(r, 415)
    # No Content-Type at all: read as JSON (documented).
    out = server.raw(b"POST /v1/bias HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(BIAS_BODY), BIAS_BODY))
    assert out.startswith(b"HTTP/1.1 200 "), out[:300]


def test_server_timing_phases(server):
    """Server-Timing (W3C): the phases reached, each `name;dur=<ms>` with
    three decimals, in order, summing to no more than the client waited."""
    import re
    body = json.dumps({"method": "alibi", "num_heads": 8, "q_len": 600,
                       "k_len": 600}).encode()
    t0 = time.monotonic()
    r = server.post("/v1/bias", body=body,
                    headers={"Content-Type": "application/json"})
    wall_ms = (time.monotonic() - t0) * 1e3
    assert r.status == 200, r
    st = r.headers["server-timing"]
    parts = st.split(", ")
    names = [p.split(";")[0] for p in parts]
    assert names == ["read", "prepare", "queue", "compute", "encode"], st
    durs = []
    for p in parts:
        m = re.fullmatch(r"[a-z]+;dur=(\d+)\.(\d{3})", p)
        assert m, st
        durs.append(float(m.group(1) + "." + m.group(2)))
    assert durs[3] > 0 and durs[4] > 0, st  # 2.9M cells computed, encoded
    assert sum(durs) <= wall_ms + 1.0, (st, wall_ms)
    # An error answer has only the phases it reached.
    r = server.post("/v1/bias", json=dict(BIAS, num_heads=0))
    assert re.fullmatch(r"read;dur=\d+\.\d{3}(, prepare;dur=\d+\.\d{3})?",
                        r.headers["server-timing"]), r.headers


def test_ignored_fields_header(server):
    r = server.post("/v1/bias", json=dict(BIAS, zzz_unknown=1, yy=2))
    assert r.status == 200, r
    assert sorted(r.headers.get("x-attnbias-ignored", "").split(",")) == ["yy", "zzz_unknown"], \
        r.headers
    # Nested fields by their dotted path; separators inside a name encoded.
    r = server.post("/v1/rope", json={"head_dim": 8, "positions": 2,
                                      "rope_scaling": {"rope_type": "linear", "factor": 2,
                                                       "bogus": 1, "a,b.c": 2}})
    assert r.status == 200, r
    assert sorted(r.headers.get("x-attnbias-ignored", "").split(",")) == [
        "rope_scaling.a%2Cb%2Ec", "rope_scaling.bogus"], r.headers
    r = server.post("/v1/bias", json=BIAS)
    assert r.status == 200 and "x-attnbias-ignored" not in r.headers, r.headers
    # A field name cannot inject a header: CR, LF and non-ASCII bytes are
    # percent-encoded in the header value.
    r = server.post("/v1/bias", json=dict(BIAS, **{"a\r\nInjected: 1": 1, "\u00e9t\u00e9": 2}))
    assert r.status == 200, r
    assert "injected" not in r.headers, r.headers
    ignored = r.headers.get("x-attnbias-ignored", "")
    assert "a%0D%0AInjected:%201" in ignored and "%C3%A9t%C3%A9" in ignored, ignored


def test_metrics_content(server):
    before = server.wait_idle()  # the earlier tests' requests all counted
    for _ in range(3):
        assert server.get("/healthz").status == 200
    server.get("/no/such/route")
    assert server.get("/v1/bias").status == 405
    assert server.post("/v1/bias", json=BIAS).status == 200

    def val(mm, name, **labels):
        return mm.get((name, frozenset(labels.items())), 0.0)

    # A request is counted when MHD reports it complete, which may be just
    # after the client has read the response: every one of them, once none
    # is in flight.
    server.wait_idle()
    r = server.get("/metrics")
    assert r.status == 200, r
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4"), r.headers
    text = r.text
    m = run.parse_metrics(text)
    for name, typ in (("attnbias_requests_total", "counter"),
                      ("attnbias_request_duration_seconds", "histogram"),
                      ("attnbias_inflight_requests", "gauge"),
                      ("attnbias_queue_depth", "gauge"),
                      ("attnbias_pool_calls", "gauge"),
                      ("attnbias_memory_kept_bytes", "gauge"),
                      ("attnbias_bytes_received_total", "counter"),
                      ("attnbias_bytes_sent_total", "counter"),
                      ("attnbias_kernel_seconds_total", "counter"),
                      ("attnbias_rejected_total", "counter")):
        assert "# TYPE %s %s\n" % (name, typ) in text, name
        assert "# HELP %s " % name in text, name
    assert val(m, "attnbias_requests_total", route="healthz", status="200") \
        >= val(before, "attnbias_requests_total", route="healthz", status="200") + 3
    assert val(m, "attnbias_requests_total", route="none", status="404") >= 1
    # A wrong method counts under the route of its path.
    assert val(m, "attnbias_requests_total", route="bias", status="405") == \
        val(before, "attnbias_requests_total", route="bias", status="405") + 1
    assert val(m, "attnbias_requests_total", route="none", status="405") == 0
    assert val(m, "attnbias_requests_total", route="bias", status="200") >= 1
    assert val(m, "attnbias_bytes_received_total") >= \
        val(before, "attnbias_bytes_received_total") + len(json.dumps(BIAS))
    assert val(m, "attnbias_bytes_sent_total") > val(before, "attnbias_bytes_sent_total")
    # This very request is in flight; nothing is queued.
    assert val(m, "attnbias_inflight_requests") >= 1
    assert val(m, "attnbias_queue_depth") == 0
    assert val(m, "attnbias_pool_calls") == 0
    for reason in ("queue_full", "body_too_large", "unauthorized"):
        assert ("attnbias_rejected_total", frozenset({("reason", reason)})) in m, reason
    # Histograms: cumulative buckets, +Inf == _count, for every route seen.
    for route in ("healthz", "bias"):
        buckets = sorted(
            (float(dict(k[1])["le"]), v) for k, v in m.items()
            if k[0] == "attnbias_request_duration_seconds_bucket"
            and dict(k[1])["route"] == route)
        counts = [v for _, v in buckets]
        assert counts == sorted(counts), (route, buckets)
        assert buckets[-1][0] == float("inf")
        assert buckets[-1][1] == val(m, "attnbias_request_duration_seconds_count",
                                     route=route), route
        assert val(m, "attnbias_request_duration_seconds_sum", route=route) > 0


# ---------------------------------------------------------------------------
# API key
# ---------------------------------------------------------------------------

def test_api_key(start):
    key = "s3cret-Key_0123456789"
    srv = start(api_key=key)
    no_key = {"Authorization": None}
    r = srv.get("/v1/methods", headers=no_key)
    check_problem(r, 401)
    assert r.headers.get("www-authenticate", "").startswith("Bearer"), r.headers
    for wrong in ("Bearer " + key[:-1], "Bearer " + key + "x", "Basic " + key,
                  "Bearer", key):
        r = srv.get("/v1/methods", headers={"Authorization": wrong})
        check_problem(r, 401)
    assert srv.get("/v1/methods").status == 200
    assert srv.get("/v1/methods", headers={"Authorization": "bearer  " + key}).status == 200
    # A POST without the key: its body is read and dropped, then the 401,
    # on a connection that stays usable (see test_early_refusals_*).
    r = srv.post("/v1/bias", json=BIAS, headers=no_key)
    check_problem(r, 401)
    assert r.headers.get("connection", "").lower() != "close", r.headers
    assert srv.post("/v1/bias", json=BIAS).status == 200
    for path in ("/healthz", "/readyz", "/metrics", "/openapi.yaml"):
        assert srv.get(path, headers=no_key).status == 200, path
    m = srv.metrics()
    assert m[("attnbias_rejected_total", frozenset({("reason", "unauthorized")}))] >= 7


# ---------------------------------------------------------------------------
# body limits and framing
# ---------------------------------------------------------------------------

POST_HEAD = (b"POST /v1/bias HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
             b"Content-Length: %d\r\n\r\n")
MiB = 1 << 20


def rejected(srv, reason):
    return srv.metrics().get(("attnbias_rejected_total", frozenset({("reason", reason)})), 0)


def clamped(srv, timeout=30):
    """A connection whose own kernel buffers are small (64 KiB asked for
    SO_SNDBUF and SO_RCVBUF), so that how much it manages to send is decided
    by the server, not by what the client's kernel would queue."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    s.settimeout(timeout * run.SLOW)
    s.connect((srv.host, srv.port))
    return s


def send_until_refused(s, limit, pace=None):
    """Write body bytes on s (blocking) until the peer stops taking them
    (a reset or a broken pipe: the server closed) or `limit` bytes are
    written; pace: seconds to sleep after each 64 KiB.  Returns the bytes
    written and whether the peer stopped them."""
    block, sent = b"x" * 65536, 0
    try:
        while sent < limit:
            sent += s.send(block[:min(len(block), limit - sent)])
            if pace:
                time.sleep(pace)
    except (BrokenPipeError, ConnectionResetError):
        return sent, True
    return sent, False


def check_413(status, headers, body):
    assert status == 413, (status, body[:200])
    assert headers.get("connection", "").lower() == "close", headers
    assert headers.get("content-type", "").startswith("application/problem+json"), headers
    p = json.loads(body)
    assert p["status"] == 413 and "max-body-mb" in p["detail"], p


def still_serves(srv):
    """The next requests, on new connections, are answered as usual."""
    assert srv.get("/healthz").status == 200
    assert srv.post("/v1/bias", json=BIAS).status == 200


def test_413_by_content_length_before_the_body(start):
    srv = start("--max-body-mb", "1")
    head = (b"POST /v1/bias HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n")
    # A client that waits for 100 Continue gets the 413 instead, at once;
    # the server sends its end of stream after it and reads nothing more.
    s = srv.connect()
    try:
        s.sendall(head % 2000000 + b"Expect: 100-continue\r\n\r\n")
        status, headers, body = read_response(s)
        check_413(status, headers, body)
        s.settimeout(5 * run.SLOW)
        assert s.recv(100) == b""
    finally:
        s.close()
    # So does one that sends no Expect, before any byte of its body.
    s = srv.connect()
    try:
        s.sendall(head % ((65 << 20) + 1) + b"\r\n")
        check_413(*read_response(s))
    finally:
        s.close()
    # Just under the cap is read and answered normally.
    pad = dict(BIAS, pad="x" * (1048576 - len(BIAS_BODY) - 20))
    assert srv.post("/v1/bias", json=pad).status == 200
    assert rejected(srv, "body_too_large") == 2


def test_413_reaches_a_client_that_reads_while_it_writes(start):
    """A 50 MiB body declared by Content-Length, without Expect, over a
    1 MiB cap: the answer is sent when the headers are in, so a client
    reading while it writes has it long before its body is out -- here
    before 20 MiB (a server that reads the body first would answer after
    50 MiB)."""
    srv = start("--max-body-mb", "1")
    s = clamped(srv)
    sent, block = 0, b"x" * 65536
    try:
        s.sendall(POST_HEAD % (50 * MiB))
        s.setblocking(False)
        while sent < 50 * MiB:
            readable, writable, _ = select.select([s], [s], [], 30 * run.SLOW)
            assert readable or writable, "the server neither answers nor reads"
            if readable:
                break  # the answer is coming: read it below
            try:
                sent += s.send(block)
            except (BlockingIOError, InterruptedError):
                pass
        s.setblocking(True)
        check_413(*read_response(s))
    finally:
        s.close()
    assert sent < 20 * MiB, "the 413 came after %d MiB of the body" % (sent >> 20)
    still_serves(srv)


def test_413_reaches_a_client_that_writes_8_mib_first(start):
    """A client that writes 8 MiB of its body before it reads anything --
    the whole body, or the start of a 50 MiB one -- gets the 413: after the
    answer the server reads and drops what follows (lingering, up to
    --max-body-mb + 8 MiB by default) instead of closing on it, which
    would reset the connection under the client.  (--linger-s is long here
    so that the machine's speed cannot decide.)"""
    srv = start("--max-body-mb", "1", "--linger-s", "600")
    for declared in (8 * MiB, 50 * MiB):
        s = clamped(srv)
        try:
            s.sendall(POST_HEAD % declared)
            sent, refused = send_until_refused(s, 8 * MiB)
            assert (sent, refused) == (8 * MiB, False), (declared, sent, refused)
            check_413(*read_response(s, timeout=30))
        finally:
            s.close()
        still_serves(srv)
    assert rejected(srv, "body_too_large") == 2


def tcp_rmem_max():
    with open("/proc/sys/net/ipv4/tcp_rmem") as f:
        return int(f.read().split()[2])


def test_refused_huge_body_is_cut_at_the_linger_byte_bound(start):
    """A 2 GiB declared body over a 1 MiB cap, sent without reading: the
    server reads and drops --linger-mb (default: the cap + 8 MiB) after its
    answer, then closes, so the client can push that much plus what the
    kernel buffers hold between them, and no more.  The answer still waits
    on the client's socket.  (--linger-s is long: only bytes can decide.)"""
    srv = start("--max-body-mb", "1", "--linger-s", "600")
    bound = 9 * MiB
    s = clamped(srv)
    try:
        s.sendall(POST_HEAD % (2 << 30))
        sent, refused = send_until_refused(s, 2 << 30)
        buffers = tcp_rmem_max() + s.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) + MiB
        assert refused, "2 GiB taken"
        assert bound <= sent <= bound + buffers, (sent, bound, buffers)
        check_413(*read_response(s))
    finally:
        s.close()
    assert rejected(srv, "linger_bytes") == 1
    assert rejected(srv, "linger_time") == 0
    still_serves(srv)


def test_refused_slow_body_is_cut_at_the_linger_time_bound(start):
    """The same body sent slowly (64 KiB every 50 ms, far from --linger-mb):
    the server stops lingering after --linger-s (1 here), and the client's
    next writes fail.  The time is measured from the answer and checked
    against the bound with a wide margin (a loaded machine may be late to
    notice; it cannot be early)."""
    srv = start("--max-body-mb", "1", "--linger-s", "1", "--linger-mb", "1000")
    s = clamped(srv)
    try:
        s.sendall(POST_HEAD % (2 << 30))
        check_413(*read_response(s))
        t0 = time.monotonic()
        sent, refused = send_until_refused(s, 500 * MiB, pace=0.05)
        took = time.monotonic() - t0
    finally:
        s.close()
    assert refused and sent < 500 * MiB, sent
    assert took < 1 + 30 * run.SLOW, took
    assert rejected(srv, "linger_time") == 1
    assert rejected(srv, "linger_bytes") == 0
    still_serves(srv)


def test_lingering_connections_are_capped(start):
    """--linger-max 1: a second refused connection that lingers ends the
    first one's lingering (the oldest goes), and the gauge never shows more
    than one."""
    srv = start("--max-body-mb", "1", "--linger-s", "600", "--linger-max", "1")
    socks = []
    try:
        for i in range(2):
            s = clamped(srv)
            socks.append(s)
            s.sendall(POST_HEAD % (2 << 30) + b"x" * 65536)
            check_413(*read_response(s))
            wait_for(lambda: srv.gauge("attnbias_lingering_connections") == 1,
                     what="one lingering connection")
        wait_for(lambda: rejected(srv, "linger_full") == 1, what="the oldest to be ended")
        assert srv.gauge("attnbias_lingering_connections") == 1
    finally:
        for s in socks:
            s.close()
    # The client closing ends its lingering at once.
    wait_for(lambda: srv.gauge("attnbias_lingering_connections") == 0,
             what="no lingering connection")
    still_serves(srv)


def test_early_refusals_answer_before_the_body(start):
    """Requests refused on their headers (413 over the cap, 401, 404, 400
    for a body on a GET route, 415) by a client that sends its whole body
    before reading -- http.client here, as most clients do without Expect:
    100-continue.  A body over 64 KiB is not read: the answer comes at
    once, with Connection: close, and the server drops what follows until
    the client is done, so the client gets the answer and not a reset.  A
    small body is read and dropped (never stored) and answered on a
    connection that stays usable for the next request."""
    srv = start("--max-body-mb", "1", "--linger-s", "600", api_key="k3y")
    big = b"{" + b" " * (8 * MiB) + b"}"  # over the 1 MiB cap
    large = b"{" + b" " * (900 << 10) + b"}"
    small = b"{" + b" " * (60 << 10) + b"}"
    key = {"Authorization": "Bearer k3y"}
    json_type = {"Content-Type": "application/json"}
    cases = [("POST", "/v1/bias", big, key, 413),
             ("POST", "/v1/bias", large, {}, 401),
             ("POST", "/v1/nowhere", large, key, 404),
             ("GET", "/v1/methods", large, key, 400),
             ("POST", "/v1/bias", small, {}, 401),
             ("POST", "/v1/nowhere", small, key, 404),
             ("GET", "/v1/methods", small, key, 400),
             ("POST", "/v1/bias", small, dict(key, **{"Content-Type": "text/csv"}), 415)]
    for method, path, body, hdrs, want in cases:
        conn = http.client.HTTPConnection(srv.host, srv.port, timeout=30 * run.SLOW)
        try:
            conn.request(method, path, body=body, headers=dict(json_type, **hdrs))
            r = conn.getresponse()
            p = json.loads(r.read())
            assert r.status == want and p["status"] == want, (path, r.status, p)
            closes = (r.getheader("Connection") or "").lower() == "close"
            assert closes == (len(body) > 64 << 10), (path, len(body), r.getheaders())
            if not closes:
                conn.request("GET", "/healthz")
                r = conn.getresponse()
                assert r.status == 200 and json.loads(r.read()) == {"status": "ok"}
        finally:
            conn.close()
        still_serves(srv)
    m = srv.metrics()
    assert m[("attnbias_rejected_total", frozenset({("reason", "body_too_large")}))] == 1
    assert m[("attnbias_rejected_total", frozenset({("reason", "unauthorized")}))] >= 2


def chunked(data, size):
    out = b""
    for i in range(0, len(data), size):
        piece = data[i:i + size]
        out += b"%x\r\n%s\r\n" % (len(piece), piece)
    return out + b"0\r\n\r\n"


def test_413_by_chunked_body(start):
    """A chunked body has no length told in advance: it is refused when it
    crosses the cap.  If it ends within 64 KiB more, it is read and
    dropped and the 413 follows on the same connection; past that the
    connection is cut (no answer can be sent in the middle of a body)."""
    srv = start("--max-body-mb", "0.01")  # 10485 bytes
    body = json.dumps(dict(BIAS, pad="y" * 20000)).encode()
    head = (b"POST /v1/bias HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    out = srv.raw(head + chunked(body, 1000) + b"GET /healthz HTTP/1.1\r\nHost: t\r\n"
                  b"Connection: close\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 413 "), out[:200]
    # The rest of the body was read (and dropped): the connection goes on.
    assert out.count(b"HTTP/1.1 ") == 2 and b'{"status":"ok"}' in out, out[-300:]
    # Under the cap, chunked bodies work.
    small = json.dumps(BIAS).encode()
    out = srv.raw(head.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n")
                  + chunked(small, 7))
    assert out.startswith(b"HTTP/1.1 200 "), out[:300]
    # Past the cap plus 64 KiB the server stops reading and closes, with
    # no answer: the client's sending fails, or it reads the end.
    s = clamped(srv)
    try:
        s.sendall(head)
        block = b"%x\r\n%s\r\n" % (65536, b"z" * 65536)
        try:
            for _ in range(1100):  # 68.75 MiB
                s.sendall(block)
            s.settimeout(5 * run.SLOW)
            got = s.recv(4096)
        except ConnectionError:
            got = b""
    finally:
        s.close()
    assert got == b"", got[:200]
    assert rejected(srv, "body_too_large") == 2
    still_serves(srv)


def test_400_ambiguous_framing(server):
    two_lengths = (b"POST /v1/bias HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                   b"Content-Length: %d\r\nContent-Length: %d\r\n\r\n%s"
                   % (len(BIAS_BODY), len(BIAS_BODY) + 1, BIAS_BODY))
    both = (b"POST /v1/bias HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n%s"
            % (len(BIAS_BODY), chunked(BIAS_BODY, 10)))
    for req in (two_lengths, both):
        out = server.raw(req)
        assert out.startswith(b"HTTP/1.1 400 "), out[:300]
        assert b"\r\nConnection: close\r\n" in out, out[:400]
        body = out.partition(b"\r\n\r\n")[2]
        p = json.loads(body)
        assert p["status"] == 400 and "ength" in p["detail"], p
    # Two equal Content-Length headers are not ambiguous.
    same = (b"POST /v1/bias HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
            % (len(BIAS_BODY), len(BIAS_BODY), BIAS_BODY))
    assert server.raw(same).startswith(b"HTTP/1.1 200 ")


# ---------------------------------------------------------------------------
# admission, drain, timeouts
# ---------------------------------------------------------------------------

def hold_slot(srv, path="/v1/bias", body=BIAS_BODY):
    """Admit a request and keep it open: its headers and the first 10 bytes
    of its body (the test sends body[10:] later)."""
    s = srv.connect()
    s.sendall(b"POST %s HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s"
              % (path.encode(), len(body), body[:10]))
    return s


def pool_attention_body():
    """A JSON /v1/attention body (b64 tensors) too large to be computed
    inline: q, k, v [1, 4, 128, 32], 8.4 MFLOP, go to the pool."""
    import base64
    import numpy as np
    rng = np.random.default_rng(3)

    def t():
        a = rng.standard_normal((1, 4, 128, 32)).astype("<f4")
        return {"shape": list(a.shape), "b64": base64.b64encode(a.tobytes()).decode()}
    return json.dumps({"q": t(), "k": t(), "v": t(), "encoding": "b64"}).encode()


def test_queue_full_503(start):
    srv = start("--threads", "1", "--max-queue", "1")
    s = hold_slot(srv, "/v1/bias")
    try:
        wait_for(lambda: srv.gauge("attnbias_queue_depth") == 1, what="admission")
        r = srv.post("/v1/bias", json=BIAS)
        check_problem(r, 503)
        assert int(r.headers["retry-after"]) >= 1, r.headers
        # Health and metrics are not work: they still answer.
        assert srv.get("/healthz").status == 200
        s.sendall(BIAS_BODY[10:])
        status, _, body = read_response(s)
        assert status == 200, body
    finally:
        s.close()
    # The slot is free again.
    wait_for(lambda: srv.gauge("attnbias_queue_depth") == 0, what="slot release")
    assert srv.post("/v1/bias", json=BIAS).status == 200
    m = srv.metrics()
    assert m[("attnbias_rejected_total", frozenset({("reason", "queue_full")}))] == 1


def held_back_attention(srv):
    """A binary /v1/attention request of 6 MiB, sent but for its last 4
    bytes: its call starts computing with the safetensors header (pieces run
    as their bytes arrive, test_early.py), so it is on the pool and holds
    its --max-queue slot, and it cannot end before the test sends the rest.
    -> (socket, the last 4 bytes)."""
    import numpy as np
    rng = np.random.default_rng(7)
    body = run.safetensors_dump(
        {n: rng.standard_normal((1, 8, 1024, 64)).astype("<f4") for n in "qkv"}, {})
    s = srv.connect()
    s.sendall(b"POST /v1/attention HTTP/1.1\r\nHost: t\r\n"
              b"Content-Type: application/vnd.safetensors\r\n"
              b"Accept: application/vnd.safetensors\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body[:-4])
    return s, body[-4:]


def read_early_answer(s, rest):
    """Send the held-back bytes; the answer must be the attention, computed
    while the body arrived."""
    s.sendall(rest)
    status, headers, data = read_response(s, timeout=300)
    assert status == 200, data[:300]
    assert "early" in headers.get("server-timing", ""), headers
    n = int.from_bytes(data[:8], "little")
    out = json.loads(data[8:8 + n])["output"]
    assert out["shape"] == [1, 8, 1024, 64] and len(data) == 8 + n + (2 << 20), out


def test_queue_full_while_computing(start):
    """The slot is held by an attention request being computed on the pool
    (held back by its last bytes, so that it is still there when the next
    request comes, however slow the machine)."""
    srv = start("--threads", "1", "--max-queue", "1")
    s, rest = held_back_attention(srv)
    try:
        wait_for(lambda: srv.gauge("attnbias_pool_calls") == 1, what="the call on the pool")
        r = srv.post("/v1/bias", json=BIAS)
        check_problem(r, 503)
        assert int(r.headers["retry-after"]) >= 1, r.headers
        read_early_answer(s, rest)
    finally:
        s.close()
    m = srv.wait_idle()
    assert m[("attnbias_kernel_seconds_total", frozenset({("route", "attention")}))] > 0
    assert srv.post("/v1/bias", json=BIAS).status == 200


def refused(srv):
    """True once a connection to srv's port is refused (its listening
    socket closed)."""
    try:
        socket.create_connection((srv.host, srv.port), timeout=5 * run.SLOW).close()
        return False
    except ConnectionRefusedError:
        return True
    except OSError:
        # Reset: queued on the listening socket as it closed (the next
        # attempt is refused); or no answer within the timeout.
        return False


def test_graceful_shutdown(start):
    """SIGTERM with an idle kept-alive connection, a request whose body is
    still arriving (an attention computed on the pool once it is in) and one
    being computed on the pool: the listening socket closes, the open
    connection's next request gets 503, and both requests are finished and
    answered once their last bytes come.  Nothing here
    depends on how long the work takes: each request waits for the test to
    send its last bytes, and --drain-s is far above anything (the drain ends
    when the work does), as is --timeout-s (the kept-alive connection waits
    idle meanwhile)."""
    srv = start("--threads", "1", "--drain-s", "3600", "--timeout-s", "3600")
    keep = http.client.HTTPConnection(srv.host, srv.port, timeout=30 * run.SLOW)
    keep.request("GET", "/healthz")
    assert keep.getresponse().read() == b'{"status":"ok"}'
    body = pool_attention_body()
    partial = hold_slot(srv, "/v1/attention", body)
    computing, rest = held_back_attention(srv)
    try:
        def both_in():
            m = srv.metrics()
            return m[("attnbias_queue_depth", frozenset())] == 2 and \
                m[("attnbias_pool_calls", frozenset())] == 1
        wait_for(both_in, what="two admitted, one of them on the pool")
        srv.proc.send_signal(signal.SIGTERM)
        wait_for(lambda: refused(srv), what="the listening socket to close")
        # An open connection still gets answers: 503 with Connection: close,
        # and no Retry-After (this server will not take it: go elsewhere).
        keep.request("GET", "/readyz")
        r = keep.getresponse()
        assert r.status == 503, r.status
        assert r.getheader("Connection", "").lower() == "close"
        assert r.getheader("Retry-After") is None, r.getheaders()
        assert json.loads(r.read())["status"] == 503
        # The request whose body was still arriving is computed and answered.
        partial.sendall(body[10:])
        status, headers, data = read_response(partial, timeout=300)
        assert status == 200, data
        assert json.loads(data)["output"]["shape"] == [1, 4, 128, 32]
        assert "compute" in headers.get("server-timing", ""), headers
        # So is the one on the pool.
        read_early_answer(computing, rest)
    finally:
        partial.close()
        computing.close()
        keep.close()
    assert srv.proc.wait(60 * run.SLOW) == 0
    assert "draining" in srv.log()


def test_drain_deadline_cuts(start):
    srv = start("--drain-s", "0.5")
    s = hold_slot(srv, "/v1/bias")
    try:
        wait_for(lambda: srv.gauge("attnbias_queue_depth") == 1, what="admission")
        srv.proc.send_signal(signal.SIGINT)
        # The incomplete request is cut; the exit status is still 0.
        assert srv.proc.wait(30 * run.SLOW) == 0
        run.expect_closed(s, 5 * run.SLOW)
    finally:
        s.close()
    assert "cutting" in srv.log(), srv.log()


def safetensors_attention(n, heads, dim):
    """A /v1/attention body as safetensors (decoded in place: no parse
    time), q [1, heads, n, dim], k and v [1, 1, n, dim]."""
    import numpy as np
    rng = np.random.default_rng(11)
    header, blobs, off = {}, [], 0
    for name, shape in (("q", (1, heads, n, dim)), ("k", (1, 1, n, dim)),
                        ("v", (1, 1, n, dim))):
        a = rng.standard_normal(shape).astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(shape),
                        "data_offsets": [off, off + len(a)]}
        blobs.append(a)
        off += len(a)
    header["__metadata__"] = {"params": json.dumps({"encoding": "b64"})}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return len(h).to_bytes(8, "little") + h + b"".join(blobs)


def test_drain_deadline_cuts_computation(start):
    """A call still on the pool at the drain deadline is cut: the pool skips
    its remaining pieces, its connection is resumed, the server exits 0."""
    srv = start("--threads", "1", "--drain-s", "0.2")
    # 4 * 32768^2 * 64 = 275 GFLOP: over 2 s even at the FMA peak of one
    # core, so it cannot end within the 0.2 s drain.
    body = safetensors_attention(32768, 1, 64)
    s = srv.connect()
    try:
        s.sendall(b"POST /v1/attention HTTP/1.1\r\nHost: t\r\n"
                  b"Content-Type: application/vnd.safetensors\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        wait_for(lambda: srv.gauge("attnbias_pool_calls") == 1, what="the call on the pool")
        srv.proc.send_signal(signal.SIGTERM)
        assert srv.proc.wait(60 * run.SLOW) == 0
        s.settimeout(10 * run.SLOW)
        got = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                got += chunk
        except ConnectionResetError:
            pass
        # Cut: a 503 problem if it could still be sent, else just closed.
        assert got == b"" or got.startswith(b"HTTP/1.1 503 "), got[:300]
    finally:
        s.close()
    assert "cutting" in srv.log(), srv.log()


def test_idle_connection_timeout(start):
    """Connections idle for --timeout-s are closed: one that never sent a
    byte, one that stopped mid-headers, one kept alive after an answer.
    Each socket sends right after its connect: only a thread stalled for the
    whole timeout in between could be closed first."""
    srv = start("--timeout-s", "2")
    keep = srv.connect()
    keep.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
    half = srv.connect()
    half.sendall(b"GET /healthz HTTP/1.1\r\nHo")  # never completed
    idle = srv.connect()
    try:
        status, _, _ = read_response(keep)
        assert status == 200
        for s in (idle, half, keep):
            run.expect_closed(s, 10 * run.SLOW)
        # The server itself is fine.
        assert srv.get("/healthz").status == 200
    finally:
        for s in (idle, half, keep):
            s.close()


def test_many_concurrent_connections(server):
    n = 200
    socks = [server.connect() for _ in range(n)]
    try:
        for i, s in enumerate(socks):
            if i % 2:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            else:
                s.sendall(b"POST /v1/bias HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
                          b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                          % (len(BIAS_BODY), BIAS_BODY))
        for i, s in enumerate(socks):
            status, _, body = read_response(s, timeout=60)
            assert status == 200, (i, body)
    finally:
        for s in socks:
            s.close()


# ---------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------

def test_command_line(binary, server):
    def cli(*args, env=None):
        return subprocess.run([binary] + list(args), capture_output=True, text=True,
                              timeout=30 * run.SLOW, env=env)
    r = cli("--version")
    assert r.returncode == 0 and "attnbiasd" in r.stdout, r
    r = cli("--help")
    assert r.returncode == 0 and "--max-queue" in r.stdout and "ATTNBIAS_" in r.stdout, r
    for args, flag in ((["--port", "http"], "--port"), (["--threads", "0"], "--threads"),
                       (["--max-body-mb", "-1"], "--max-body-mb"),
                       (["--no-such-flag"], "--no-such-flag")):
        r = cli(*args)
        assert r.returncode == 2 and flag in r.stderr, (args, r)
    env = dict(os.environ, ATTNBIAS_MAX_QUEUE="many")
    r = cli(env=env)
    assert r.returncode == 2 and "ATTNBIAS_MAX_QUEUE" in r.stderr, r
    # --healthcheck: 0 against a live server, 1 against a closed port.
    r = cli("--healthcheck", "--host", server.host, "--port", str(server.port))
    assert r.returncode == 0, r
    # A port bound but not listening refuses connections, and no other
    # process can take it while the check runs.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
        r = cli("--healthcheck", "--host", "127.0.0.1", "--port", str(closed))
    assert r.returncode == 1, r


def test_env_configures(start):
    srv = start(env={"ATTNBIAS_MAX_BODY_MB": "0.001"})
    r = srv.post("/v1/bias", json=dict(BIAS, pad="x" * 2000))
    check_problem(r, 413)
    # A flag wins over the environment.
    srv2 = start("--max-body-mb", "1", env={"ATTNBIAS_MAX_BODY_MB": "0.001"})
    assert srv2.post("/v1/bias", json=dict(BIAS, pad="x" * 2000)).status == 200


def test_slow_uploads_lose_their_queue_slots(start):
    """A body trickling in (a byte every 0.05 s) holds a --max-queue slot
    only until --body-grace-s has passed: then it must keep arriving at
    --body-min-rate-kb on average (deadline: grace + bytes / rate) or its
    connection is closed, and the slot frees for others.  The trickle runs
    on its own thread from the request on, so the connections are closed by
    the rate rule, never by the idle timeout, however slowly this test's
    main thread is scheduled."""
    srv = start("--max-queue", "2", "--body-grace-s", "1", "--body-min-rate-kb", "64")
    socks, closed = [], [False, False]
    done = threading.Event()

    def trickle():
        while not done.is_set() and not all(closed):
            for i, s in enumerate(socks):
                if not closed[i]:
                    try:
                        s.sendall(b" ")
                    except OSError:
                        closed[i] = True
            time.sleep(0.05)
    for _ in range(2):
        s = srv.connect()
        s.sendall(b"POST /v1/bias HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1000\r\n\r\n{")
        socks.append(s)
    t = threading.Thread(target=trickle)
    t.start()
    try:
        wait_for(lambda: srv.gauge("attnbias_queue_depth") == 2, what="two slots taken")
        check_problem(srv.post("/v1/bias", json=BIAS), 503)
        wait_for(lambda: all(closed), what="the slow uploads to be closed")
        wait_for(lambda: srv.gauge("attnbias_queue_depth") == 0, what="slots freed")
        assert srv.post("/v1/bias", json=BIAS).status == 200
        m = srv.metrics()
        assert m[("attnbias_rejected_total", frozenset({("reason", "slow_upload")}))] == 2
        assert "arrives too slowly" in srv.log()
    finally:
        done.set()
        t.join()
        for s in socks:
            s.close()
