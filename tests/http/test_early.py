"""test_early.py: computing while a binary attention body arrives.

A safetensors /v1/attention body of 4 MiB or more starts computing as soon
as its header is in: each piece of the job runs once the bytes it reads
have arrived, and `Server-Timing: early;desc="N/M"` says how many of the M
pieces were done when the body ended.  What must hold: a piece never runs
before its bytes are in (the answers match a float64 numpy attention
written here, for both layouts, GQA, causal masks, a float16 q and an
attn_bias), a body that stops short of its last bytes has done some pieces
but not all (N > 0 while waiting, N < M), a call waiting for bytes holds no
worker thread, and a client that leaves or a server that stops mid-upload
ends the call cleanly; 16-bit tensors are read as sent, so they start
early too.  Requests that cannot start early (RoPE, JSON
answers, invalid ones) are answered exactly as before.

Run:  /usr/bin/python3 tests/http/run.py --server build/attnbiasd tests/http/test_early.py
"""

import math
import re
import signal
import socket
import struct
import time

import numpy as np

import run

ST = "application/vnd.safetensors"
NPY = "application/x-npy"


def st_load(body):
    n = struct.unpack("<Q", body[:8])[0]
    import json
    header = json.loads(body[8:8 + n])
    data = body[8 + n:]
    dt = {"F32": "<f4", "F16": "<f2", "F64": "<f8"}
    return {name: np.frombuffer(data[i["data_offsets"][0]:i["data_offsets"][1]],
                                dtype=dt[i["dtype"]]).reshape(i["shape"])
            for name, i in header.items() if name != "__metadata__"}


def npy_load(body):
    hl = struct.unpack("<H", body[8:10])[0]
    head = body[10:10 + hl].decode("latin1")
    meta = eval(head, {"__builtins__": {}}, {"False": False, "True": True})
    return np.frombuffer(body[10 + hl:], dtype=meta["descr"]).reshape(meta["shape"])


def ref(q, k, v, causal=False, attn_bias=None):
    """float64 attention on bhsd arrays: GQA by repeating kv heads, causal
    bottom-right, attn_bias broadcast -> output, lse."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    g = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if attn_bias is not None:
        s = s + np.asarray(attn_bias, dtype=np.float64)
    if causal:
        nq, nk = s.shape[-2:]
        vis = np.arange(nk)[None, :] <= (np.arange(nq)[:, None] + nk - nq)
        s = np.where(vis, s, -np.inf)
    mx = s.max(-1, keepdims=True)
    e = np.exp(s - mx)
    den = e.sum(-1, keepdims=True)
    return (e / den) @ v, (np.log(den) + mx)[..., 0]


def rand(seed, *shape):
    return np.random.default_rng(seed).uniform(-1, 1, size=shape).astype(np.float32)


def request_bytes(body, accept=ST, content_type=ST):
    return (b"POST /v1/attention HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\n"
            b"Accept: %s\r\nContent-Length: %d\r\n\r\n"
            % (content_type.encode(), accept.encode(), len(body)))


def early_of(headers):
    """(done, pieces) from Server-Timing's early;desc="N/M", or None."""
    m = re.search(r'early;desc="(\d+)/(\d+)"', headers.get("server-timing", ""))
    return (int(m.group(1)), int(m.group(2))) if m else None


def on_pool(srv, n=1):
    """Wait until n calls are on the server's worker pool (an early call
    is there from its safetensors header on, until its job ends)."""
    run.wait_for(lambda: srv.gauge("attnbias_pool_calls") == n,
                 what="%d call(s) on the pool" % n)


def send_held_back(srv, body, hold, pause, accept=ST):
    """Send all of body but its last `hold` bytes, wait `pause` seconds,
    send the rest and read the answer -> (status, headers, body)."""
    s = srv.connect(timeout=60)
    try:
        s.sendall(request_bytes(body, accept) + body[:len(body) - hold])
        time.sleep(pause)
        s.sendall(body[len(body) - hold:])
        status, headers, data, _ = run.read_response(s, timeout=60)
        return status, headers, data
    finally:
        s.close()


def test_early_pieces_wait_for_their_bytes(server):
    """q, k, v [1, 8, 1024, 64] (6 MiB), all but v's last 4 bytes sent,
    then a pause: the pieces of the first seven heads run during it, those
    of the last head cannot (they read all of its v).  So when the body
    ends 0 < N < M, and the answer is exact."""
    q, k, v = rand(1, 1, 8, 1024, 64), rand(2, 1, 8, 1024, 64), rand(3, 1, 8, 1024, 64)
    body = run.safetensors_dump({"q": q, "k": k, "v": v}, {"return": ["output", "lse"]})
    out, lse = ref(q, k, v)
    # How many pieces run during the pause depends on the CPU time the pool
    # gets, which on a loaded machine may be none: the pause doubles until
    # some have run (at once, unless the machine is starved).
    pause, waited = 0.5, 0.0
    while True:
        status, headers, data = send_held_back(server, body, 4, pause)
        assert status == 200, (status, data[:300])
        done, pieces = early_of(headers)
        # None of the last head's pieces could run before its last bytes.
        assert done <= pieces - pieces // 8, (done, pieces)
        got = st_load(data)
        np.testing.assert_allclose(got["output"], out, rtol=1e-4, atol=2e-6)
        np.testing.assert_allclose(got["lse"], lse, rtol=1e-5, atol=1e-5)
        waited += pause
        if done > 0:
            break
        assert waited < 60 * run.SLOW, "no piece ran in %gs of pauses" % waited
        pause *= 2


def test_early_layouts_gqa_masks_dtypes(server):
    """bshd with GQA (8 query heads on 2 kv heads), causal, a float16 q and
    an attn_bias [1, 1, Nq, Nk] sent first, answered as .npy; and bhsd with
    the bias sent last.  Each body stops short of its end for a moment."""
    nq = nk = 1024
    q16 = rand(4, 1, 8, nq, 64).astype(np.float16)
    k, v = rand(5, 1, 2, nk, 64), rand(6, 1, 2, nk, 64)
    bias = rand(7, 1, 1, nq, nk)
    cases = [
        ("bshd", {"attn_bias": bias, "q": q16.transpose(0, 2, 1, 3),
                  "k": k.transpose(0, 2, 1, 3), "v": v.transpose(0, 2, 1, 3)}, NPY),
        ("bhsd", {"q": q16, "k": k, "v": v, "attn_bias": bias}, ST),
    ]
    for layout, tensors, accept in cases:
        body = run.safetensors_dump(tensors, {"layout": layout, "causal": True})
        assert len(body) >= 4 << 20
        status, headers, data = send_held_back(server, body, 1000, 0.2 * run.SLOW, accept)
        assert status == 200, (layout, status, data[:300])
        assert early_of(headers) is not None, (layout, headers.get("server-timing"))
        got = npy_load(data) if accept == NPY else st_load(data)["output"]
        out, _ = ref(q16, k, v, causal=True, attn_bias=bias)
        if layout == "bshd":
            out = out.transpose(0, 2, 1, 3)
        np.testing.assert_allclose(got, out, rtol=2e-4, atol=5e-6, err_msg=layout)


def test_early_16bit_kv_as_sent(server):
    """float16 q, k and v [1, 8, 2048, 64] (6 MiB): the job reads them as
    they were sent (no float32 copy is made when it is built), so it too
    computes while the body arrives -- 0 < N < M with v's last bytes held
    back -- and matches float64 of the float16 values."""
    q, k, v = (rand(s, 1, 8, 2048, 64).astype(np.float16) for s in (11, 12, 13))
    body = run.safetensors_dump({"q": q, "k": k, "v": v}, {"causal": True})
    assert len(body) >= 4 << 20
    status, headers, data = send_held_back(server, body, 4, 0.5 * run.SLOW)
    assert status == 200, (status, data[:300])
    done, pieces = early_of(headers)
    assert 0 < done < pieces, headers.get("server-timing")
    out, _ = ref(q, k, v, causal=True)
    np.testing.assert_allclose(st_load(data)["output"], out, rtol=2e-4, atol=5e-6)


def test_not_early_answers_as_before(server):
    """RoPE (q and k are rotated when the job is built), a JSON answer (not
    streamed) and a small body compute after the body as before; an invalid
    large body gets its usual 400 naming the field, at the body's end."""
    q, k, v = rand(8, 1, 8, 1024, 64), rand(9, 1, 8, 1024, 64), rand(10, 1, 8, 1024, 64)
    rope = {"rope": {"head_dim": 64}}
    for params, accept in ((rope, ST), ({}, "application/json")):
        body = run.safetensors_dump({"q": q, "k": k, "v": v}, params)
        status, headers, data = send_held_back(server, body, 4, 0.05, accept)
        assert status == 200, (params, status, data[:300])
        assert early_of(headers) is None, (params, headers.get("server-timing"))
    body = run.safetensors_dump({"q": q, "k": k[..., :32], "v": v}, {})
    status, headers, data = send_held_back(server, body, 4, 0.05)
    assert status == 400, (status, data[:300])
    assert b'"field":"/k"' in data.replace(b" ", b""), data[:300]
    assert early_of(headers) is None


def test_early_call_waiting_for_bytes_holds_no_thread(start):
    """One worker thread.  A body held back before any piece can run (v
    barely begun) parks its call; another request is computed meanwhile;
    then the held body ends and is answered right."""
    srv = start("--threads", "1")
    q, k, v = rand(11, 1, 8, 1024, 64), rand(12, 1, 8, 1024, 64), rand(13, 1, 8, 1024, 64)
    body = run.safetensors_dump({"q": q, "k": k, "v": v}, {})
    held = srv.connect(timeout=60)
    try:
        hold = v.nbytes - 100
        held.sendall(request_bytes(body) + body[:-hold])
        on_pool(srv)
        q2, k2, v2 = rand(14, 1, 4, 256, 64), rand(15, 1, 4, 256, 64), rand(16, 1, 4, 256, 64)
        other = srv.connect(timeout=60)
        try:
            b2 = run.safetensors_dump({"q": q2, "k": k2, "v": v2}, {})
            other.sendall(request_bytes(b2) + b2)
            status, _, data, _ = run.read_response(other, timeout=30)
        finally:
            other.close()
        assert status == 200, data[:300]
        np.testing.assert_allclose(st_load(data)["output"], ref(q2, k2, v2)[0],
                                   rtol=1e-4, atol=2e-6)
        held.sendall(body[-hold:])
        status, headers, data, _ = run.read_response(held, timeout=60)
        assert status == 200, data[:300]
        assert early_of(headers) is not None
        np.testing.assert_allclose(st_load(data)["output"], ref(q, k, v)[0],
                                   rtol=1e-4, atol=2e-6)
    finally:
        held.close()


def test_early_client_gone_mid_upload(start):
    """A client that leaves before its body is complete, its call started:
    the call ends (client_closed, its slot freed), the next request is
    answered, and at SIGTERM the server exits 0 at once."""
    srv = start("--threads", "2", "--drain-s", "0.5")
    q, k, v = rand(17, 1, 8, 1024, 64), rand(18, 1, 8, 1024, 64), rand(19, 1, 8, 1024, 64)
    body = run.safetensors_dump({"q": q, "k": k, "v": v}, {})
    key = ("attnbias_rejected_total", frozenset({("reason", "client_closed")}))
    for linger in (False, True):
        before = srv.metrics().get(key, 0)
        s = srv.connect(timeout=60)
        try:
            s.sendall(request_bytes(body) + body[:-(1 << 20)])
            on_pool(srv)  # its call started
            if linger:  # reset rather than FIN
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        finally:
            s.close()
        # The call ends, its slot is given back, the request is counted.
        m = srv.wait_idle()
        assert m.get(key, 0) - before == 1, (linger, srv.log()[-2000:])
    status, headers, data = send_held_back(srv, body, 4, 0.01)
    assert status == 200 and early_of(headers) is not None, (status, data[:200])
    # One more left waiting for its bytes when the server is told to stop:
    # the drain gives up on it at --drain-s and the server exits 0.
    s = srv.connect(timeout=60)
    try:
        s.sendall(request_bytes(body) + body[:-4])
        on_pool(srv)
        srv.proc.send_signal(signal.SIGTERM)
        assert srv.proc.wait(60 * run.SLOW) == 0
    finally:
        s.close()
