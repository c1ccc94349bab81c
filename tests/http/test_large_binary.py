"""test_large_binary.py: large binary answers and the memory behind them.

A binary response (safetensors, .npy) sends large tensors straight from the
request's memory instead of copying them into the response, and large
blocks (request bodies, output tensors) are kept after a request for the
next one.  What must hold: the bytes are exactly the tensors (checked
against a float64 numpy attention written here), also on a keep-alive
connection where requests of different sizes follow one another and reuse
each other's blocks (stale data from an earlier request would show), for
converted dtypes, and for a client that goes away in the middle of a
response.  (util/buf.c's cache itself, bounds and trimming, is tested in
tests/server/test-mem.c.)

Run:  /usr/bin/python3 tests/http/run.py --server build/attnbiasd tests/http/test_large_binary.py
"""

import http.client
import itertools
import json
import math
import signal
import socket
import struct
import time

import numpy as np

import run

ST = "application/vnd.safetensors"
NPY = "application/x-npy"


st_dump = run.safetensors_dump


def st_load(body):
    """Every tensor of a safetensors file, checking that the data offsets
    tile the data section exactly (no gap, no overlap, nothing after)."""
    n = struct.unpack("<Q", body[:8])[0]
    header = json.loads(body[8:8 + n])
    data = body[8 + n:]
    dt = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I32": "<i4"}
    out, spans = {}, []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        spans.append((b, e))
        out[name] = np.frombuffer(data[b:e], dtype=dt[info["dtype"]]).reshape(info["shape"])
    spans.sort()
    assert spans[0][0] == 0 and spans[-1][1] == len(data), (spans, len(data))
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])), spans
    return out


def npy_load(body):
    assert body[:8] == b"\x93NUMPY\x01\x00", body[:8]
    hl = struct.unpack("<H", body[8:10])[0]
    assert (10 + hl) % 64 == 0, hl
    head = body[10:10 + hl].decode("latin1")
    assert head.endswith("\n"), head
    meta = eval(head, {"__builtins__": {}}, {"False": False, "True": True})  # the dict literal of the format
    arr = np.frombuffer(body[10 + hl:], dtype=meta["descr"])
    return arr.reshape(meta["shape"])


def ref_attention(q, k, v):
    """Dense softmax attention in float64, bhsd: output and log-sum-exp."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    mx = s.max(-1, keepdims=True)
    e = np.exp(s - mx)
    den = e.sum(-1, keepdims=True)
    return (e / den) @ v, (np.log(den) + mx)[..., 0]


def qkv(seed, h, n, d):
    g = np.random.default_rng(seed)
    return tuple(g.uniform(-1, 1, size=(1, h, n, d)).astype(np.float32) for _ in range(3))


def post(conn, path, body, ctype, accept):
    conn.request("POST", path, body=body, headers={"Content-Type": ctype, "Accept": accept})
    r = conn.getresponse()
    return r.status, r.getheader("Content-Type", ""), r.read()


def check_attention(status, ctype, body, q, k, v, want_lse=True, what=""):
    assert status == 200, (what, status, body[:300])
    assert ctype.startswith(ST), (what, ctype)
    got = st_load(body)
    out, lse = ref_attention(q, k, v)
    assert got["output"].shape == out.shape, (what, got["output"].shape)
    np.testing.assert_allclose(got["output"], out, rtol=1e-4, atol=2e-6, err_msg=what)
    if want_lse:
        np.testing.assert_allclose(got["lse"], lse, rtol=1e-5, atol=1e-5, err_msg=what)


def test_large_safetensors_output_and_lse(server):
    """output [1, 4, 256, 64] (256 KiB: sent in place) then lse (small, but
    after it): both exact, offsets tiling the data."""
    q, k, v = qkv(1, 4, 256, 64)
    body = st_dump({"q": q, "k": k, "v": v}, {"return": ["output", "lse"]})
    conn = http.client.HTTPConnection(server.host, server.port, timeout=60 * run.SLOW)
    try:
        check_attention(*post(conn, "/v1/attention", body, ST, ST), q, k, v, what="st")
    finally:
        conn.close()


def test_large_npy_and_float16(server):
    q, k, v = qkv(2, 4, 256, 64)
    out, _ = ref_attention(q, k, v)
    conn = http.client.HTTPConnection(server.host, server.port, timeout=60 * run.SLOW)
    try:
        st, ct, b = post(conn, "/v1/attention", st_dump({"q": q, "k": k, "v": v}, {}), ST, NPY)
        assert st == 200 and ct.startswith(NPY), (st, ct, b[:200])
        got = npy_load(b)
        assert got.dtype == np.float32 and got.shape == out.shape, (got.dtype, got.shape)
        np.testing.assert_allclose(got, out, rtol=1e-4, atol=2e-6)
        # float16 output: a converted copy is what is sent in place.
        st, ct, b = post(conn, "/v1/attention",
                         st_dump({"q": q, "k": k, "v": v}, {"output_dtype": "float16"}), ST, ST)
        assert st == 200, (st, b[:300])
        got = st_load(b)["output"]
        assert got.dtype == np.float16, got.dtype
        np.testing.assert_allclose(got.astype(np.float64), out, rtol=2e-3, atol=2e-3)
    finally:
        conn.close()


def test_keepalive_alternating_sizes_reuse_blocks(server):
    """Bodies of 12 MiB and 6 MiB and outputs of 4 MiB and 2 MiB (large
    enough to be kept and reused), alternating on one connection with new
    data each time, a small JSON request between them: every answer is the
    attention of its own request."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=120 * run.SLOW)
    shapes = [(64, 64, 256), (32, 64, 256), (64, 64, 256), (64, 64, 256), (32, 64, 256)]
    try:
        for i, (h, n, d) in enumerate(shapes):
            q, k, v = qkv(10 + i, h, n, d)
            body = st_dump({"q": q, "k": k, "v": v}, {"return": ["output", "lse"]})
            check_attention(*post(conn, "/v1/attention", body, ST, ST), q, k, v,
                            what="request %d %s" % (i, (h, n, d)))
            st, ct, b = post(conn, "/v1/bias",
                             json.dumps({"method": "alibi", "num_heads": 2, "q_len": 3,
                                         "k_len": 3}).encode(), "application/json",
                             "application/json")
            assert st == 200, (st, b[:200])
            bias = np.array(json.loads(b)["bias"]["data"]).reshape(2, 3, 3)
            dist = -np.abs(np.arange(3)[:, None] - np.arange(3)[None, :])
            # ALiBi slopes 2^(-8 (i + 1) / H) (docs/methods.md#alibi), H = 2.
            np.testing.assert_allclose(bias, [2.0 ** -4 * dist, 2.0 ** -8 * dist],
                                       rtol=1e-6, atol=1e-9)
    finally:
        conn.close()


def send_until_headers(s, body):
    """POST a safetensors attention body on raw socket s (binary answer)
    and read up to the end of the response headers: (headers, the body
    bytes read with them)."""
    s.sendall(b"POST /v1/attention HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\n"
              b"Accept: %s\r\nContent-Length: %d\r\n\r\n"
              % (ST.encode(), ST.encode(), len(body)) + body)
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = s.recv(65536)
        assert chunk, got
        got += chunk
    head, _, rest = got.partition(b"\r\n\r\n")
    return head, rest


def test_client_gone_mid_response(server):
    """A client that reads the start of a 4 MiB answer and closes: the
    server lets go of the request's memory and keeps answering."""
    q, k, v = qkv(20, 64, 64, 256)
    body = st_dump({"q": q, "k": k, "v": v}, {})
    for _ in range(3):
        s = server.connect(timeout=60)
        try:
            head, _ = send_until_headers(s, body)
            assert head.startswith(b"HTTP/1.1 200"), head[:100]
        finally:
            s.close()
    assert server.get("/healthz").status == 200
    conn = http.client.HTTPConnection(server.host, server.port, timeout=60 * run.SLOW)
    try:
        q, k, v = qkv(21, 64, 64, 256)
        check_attention(*post(conn, "/v1/attention",
                              st_dump({"q": q, "k": k, "v": v}, {"return": ["output", "lse"]}),
                              ST, ST), q, k, v, what="after the aborts")
    finally:
        conn.close()
    # Every request is over, none is left holding a slot.
    server.wait_idle()


# ---- streamed responses: sent while the pieces run -------------------------

def ref_attention_full(q, k, v, causal=False):
    """Like ref_attention (bhsd), also returning the weights; causal is
    bottom-right (Nq == Nk here: the usual lower triangle)."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if causal:
        n = s.shape[-1]
        s = np.where(np.tril(np.ones((n, n), dtype=bool)), s, -np.inf)
    mx = s.max(-1, keepdims=True)
    e = np.exp(s - mx)
    den = e.sum(-1, keepdims=True)
    return (e / den) @ v, (np.log(den) + mx)[..., 0], e / den


def test_streamed_outputs_match_reference(server):
    """Responses of 1 MiB and more made of float32 outputs go out while the
    pieces run (Server-Timing says `stream`).  Every byte must still be the
    final one: output, lse and weights (9 MiB) against a float64 reference,
    pieces finishing in output order (dense) and not (causal: costliest
    blocks first), the bshd layout (output strided by head, so few bytes are
    ready before the end), and a .npy answer."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=120 * run.SLOW)
    try:
        for causal, layout in ((False, "bhsd"), (True, "bhsd"), (False, "bshd")):
            q, k, v = qkv(30 + causal, 8, 512, 64)
            params = {"return": ["output", "lse", "weights"], "causal": causal,
                      "layout": layout}
            tq, tk, tv = ((a.transpose(0, 2, 1, 3) if layout == "bshd" else a)
                          for a in (q, k, v))
            conn.request("POST", "/v1/attention",
                         body=st_dump({"q": tq, "k": tk, "v": tv}, params),
                         headers={"Content-Type": ST, "Accept": ST})
            r = conn.getresponse()
            body = r.read()
            what = "causal=%s layout=%s" % (causal, layout)
            assert r.status == 200, (what, r.status, body[:300])
            assert "stream" in r.getheader("Server-Timing", ""), \
                (what, r.getheader("Server-Timing"))
            assert int(r.getheader("Content-Length")) == len(body), what
            got = st_load(body)
            out, lse, w = ref_attention_full(q, k, v, causal)
            if layout == "bshd":
                out = out.transpose(0, 2, 1, 3)
            np.testing.assert_allclose(got["output"], out, rtol=1e-4, atol=2e-6, err_msg=what)
            np.testing.assert_allclose(got["lse"], lse, rtol=1e-5, atol=1e-5, err_msg=what)
            np.testing.assert_allclose(got["weights"], w, rtol=1e-4, atol=1e-7, err_msg=what)
        q, k, v = qkv(33, 16, 256, 64)
        st, ct, b = post(conn, "/v1/attention", st_dump({"q": q, "k": k, "v": v}, {}), ST, NPY)
        assert st == 200 and ct.startswith(NPY), (st, ct, b[:200])
        np.testing.assert_allclose(npy_load(b), ref_attention(q, k, v)[0], rtol=1e-4, atol=2e-6)
        # Small answers and converted dtypes are still sent whole, after the
        # job (nothing to gain; the conversion needs the final values).
        for params, n in (({}, 64), ({"output_dtype": "float16"}, 512)):
            q, k, v = qkv(34, 8, n, 64)
            conn.request("POST", "/v1/attention",
                         body=st_dump({"q": q, "k": k, "v": v}, params),
                         headers={"Content-Type": ST, "Accept": ST})
            r = conn.getresponse()
            r.read()
            assert r.status == 200 and "stream" not in r.getheader("Server-Timing", ""), \
                (params, r.status, r.getheader("Server-Timing"))
    finally:
        conn.close()


def test_streamed_response_cut_at_drain_deadline(start):
    """A streamed call still computing at the drain deadline: its status
    line went out long ago, so the cut can only end the body early -- the
    client gets fewer bytes than Content-Length -- and the server still
    exits 0 with every connection resumed."""
    srv = start("--threads", "1", "--drain-s", "0.3")
    # q [1, 1, 32768, 64], k and v [1, 1, 32768, 64]: 275 GFLOP, over 2 s
    # even at one core's FMA peak; an 8 MiB answer.  Under valgrind (~50x
    # slower) 4096 keys are as far out of reach, and a piece ends sooner.
    q, k, v = qkv(40, 1, 32768, 64)
    if run.VALGRIND:
        k, v = k[:, :, :4096], v[:, :, :4096]
    body = st_dump({"q": q, "k": k, "v": v}, {})
    s = srv.connect(timeout=60)
    try:
        head, rest = send_until_headers(s, body)
        assert head.startswith(b"HTTP/1.1 200"), head
        assert b"stream" in head, head
        length = int([ln.split(b":")[1] for ln in head.split(b"\r\n")
                      if ln.lower().startswith(b"content-length:")][0])
        srv.proc.send_signal(signal.SIGTERM)
        assert srv.proc.wait(60 * run.SLOW) == 0
        s.settimeout(10 * run.SLOW)
        try:
            while True:
                chunk = s.recv(1 << 20)
                if not chunk:
                    break
                rest += chunk
        except ConnectionResetError:
            pass
        assert len(rest) < length, (len(rest), length)
    finally:
        s.close()
    assert "streamed response cut" in srv.log(), srv.log()[-2000:]


def test_streamed_concurrent_readers_full_slow_and_gone(server):
    """Streamed answers to 6 clients at once for a bounded time, each
    request read whole, read slowly, or dropped part way: every whole answer
    is the right one, and afterwards no request holds a slot."""
    import random
    import threading
    q, k, v = qkv(50, 8, 512, 64)
    want = ref_attention(q, k, v)[0]
    body = st_dump({"q": q, "k": k, "v": v}, {})
    deadline = time.monotonic() + 3.0 * run.SLOW
    problems, counts = [], {"whole": 0, "slow": 0, "gone": 0}
    lock = threading.Lock()

    def client(seed):
        # Each client's first mode is fixed by its seed (clients 1-4 read
        # whole, 5 goes away): every kind happens however slow the machine,
        # then more of them until the deadline.
        rnd = random.Random(seed)
        for rounds in itertools.count():
            if rounds and (time.monotonic() >= deadline or problems):
                break
            mode = rnd.choice(("whole", "slow", "gone"))
            s = server.connect(timeout=60)
            try:
                head, got = send_until_headers(s, body)
                length = int([ln.split(b":")[1] for ln in head.split(b"\r\n")
                              if ln.lower().startswith(b"content-length:")][0])
                cut = rnd.randint(1, length - 1) if mode == "gone" else length
                while len(got) < cut:
                    chunk = s.recv(4096 if mode == "slow" else 1 << 20)
                    if not chunk:
                        break
                    got += chunk
                    if mode == "slow":
                        time.sleep(0.0005)
                if mode != "gone":
                    assert len(got) == length, (mode, len(got), length)
                    np.testing.assert_allclose(st_load(got)["output"], want,
                                               rtol=1e-4, atol=2e-6)
                with lock:
                    counts[mode] += 1
            except Exception as e:  # reported below, in the test's thread
                with lock:
                    problems.append("%s: %r" % (mode, e))
            finally:
                s.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120 * run.SLOW)
    assert not problems, problems[:3]
    assert counts["whole"] and counts["gone"], counts
    assert server.get("/healthz").status == 200
    server.wait_idle()


def test_abandoned_stream_stops_its_job(start):
    """A client that leaves a streamed answer early: the pool skips the
    pieces not started, the request counts as client_closed (not as a 200),
    its kernel time is still counted, and the drain deadline holds -- a job
    nobody waits for does not keep a stopping server alive."""
    srv = start("--threads", "1", "--drain-s", "0.5")
    # 275 GFLOP on one thread (a few seconds; under valgrind 4096 keys).
    q, k, v = qkv(41, 1, 32768, 64)
    if run.VALGRIND:
        k, v = k[:, :, :4096], v[:, :, :4096]
    body = st_dump({"q": q, "k": k, "v": v}, {})
    before = srv.metrics()
    s = srv.connect(timeout=60)
    try:
        head, _ = send_until_headers(s, body)
        assert head.startswith(b"HTTP/1.1 200") and b"stream" in head, head[:200]
        # Reset, not FIN: the next bytes the server sends fail at once.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    finally:
        s.close()
    deadline = time.monotonic() + 60 * run.SLOW
    while "the rest of its job was skipped" not in srv.log():
        assert time.monotonic() < deadline, srv.log()[-2000:]
        time.sleep(0.05)
    m = srv.wait_idle()

    def delta(name, **labels):
        key = (name, frozenset(labels.items()))
        return m.get(key, 0.0) - before.get(key, 0.0)
    assert delta("attnbias_requests_total", route="attention", status="200") == 0
    assert delta("attnbias_rejected_total", reason="client_closed") == 1
    assert delta("attnbias_kernel_seconds_total", route="attention") > 0
    # The same again, then SIGTERM: the drain waits for the job (it still
    # runs, the pool not having seen the reset yet) only until --drain-s.
    s = srv.connect(timeout=60)
    try:
        send_until_headers(s, body)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    finally:
        s.close()
    srv.proc.send_signal(signal.SIGTERM)
    assert srv.proc.wait(60 * run.SLOW) == 0


def test_streamed_kernel_time_is_counted(server):
    """Every streamed answer's kernel time reaches
    attnbias_kernel_seconds_total, though its job may end after the
    request completed."""
    q, k, v = qkv(42, 8, 512, 64)
    body = st_dump({"q": q, "k": k, "v": v}, {})
    conn = http.client.HTTPConnection(server.host, server.port, timeout=60 * run.SLOW)
    key = ("attnbias_kernel_seconds_total", frozenset({("route", "attention")}))
    try:
        for i in range(5):
            before = server.metrics().get(key, 0.0)
            status, ctype, data = post(conn, "/v1/attention", body, ST, ST)
            assert status == 200, data[:200]
            server.wait_idle()
            assert server.metrics().get(key, 0.0) > before, i
    finally:
        conn.close()
