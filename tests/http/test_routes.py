"""test_routes.py: the /v1 routes of attnbiasd against float64 numpy
references written here from docs/methods.md (never
against the server's own output), in every request tensor form (nested,
flat, b64, safetensors) and every response form (JSON, JSON+b64,
safetensors, npy; PNG for /v1/bias); the worked examples of
docs/methods.md#worked-examples; the 400s with their `field` pointers; the 413
budgets; X-Attnbias-Ignored; and GET /v1/methods checked against what the
routes actually accept (every listed parameter is accepted and not reported
as ignored, its range and choices are enforced at the listed pointer, and
sending its default changes nothing).

Run:  /usr/bin/python3 tests/http/run.py --server build/attnbiasd tests/http/test_routes.py
"""

import base64
import copy
import io
import json
import math
import struct
import zlib
from typing import NamedTuple

import numpy as np

import run

RTOL, ATOL = 1e-5, 1e-6

# ===========================================================================
# transport
# ===========================================================================

ST_DTYPES = {"F32": np.dtype("<f4"), "F64": np.dtype("<f8"),
             "F16": np.dtype("<f2"), "I32": np.dtype("<i4")}
NP_TO_NAME = {np.dtype("float32"): "float32", np.dtype("float64"): "float64",
              np.dtype("float16"): "float16"}
TRANSPORTS = ("nested", "flat", "b64", "safetensors")
RESPONSES = ("json", "b64", "safetensors", "npy")


def _jnum(x):
    """A float as JSON: non-finite values are strings (docs/http.md)."""
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def _nested(a):
    if a.ndim == 0:
        return _jnum(a)
    return [_nested(r) for r in a]


def json_tensor(arr, form):
    """One tensor in a JSON form of docs/http.md (arr keeps its dtype for b64)."""
    arr = np.asarray(arr)
    if form == "nested":
        return _nested(arr.astype(np.float64))
    if form == "flat":
        return {"shape": list(arr.shape),
                "data": [_jnum(x) for x in arr.astype(np.float64).ravel()]}
    if form == "b64":
        a = arr if arr.dtype in NP_TO_NAME else arr.astype(np.float32)
        return {"shape": list(a.shape), "dtype": NP_TO_NAME[a.dtype],
                "b64": base64.b64encode(a.astype(a.dtype.newbyteorder("<"))
                                        .tobytes()).decode()}
    raise ValueError(form)


safetensors_dump = run.safetensors_dump


def safetensors_load(body):
    n = struct.unpack("<Q", body[:8])[0]
    header = json.loads(body[8:8 + n])
    data = body[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        if info["dtype"] == "BF16":
            raw = np.frombuffer(data[b:e], dtype="<u2").astype(np.uint32) << 16
            arr = raw.view(np.float32)
        else:
            arr = np.frombuffer(data[b:e], dtype=ST_DTYPES[info["dtype"]])
        out[name] = arr.reshape(info["shape"])
    for k, v in header.get("__metadata__", {}).items():
        out[k] = v
    return out


def _set_path(obj, dotted, value):
    """obj["a"]["b"][0]["c"] = value for "a.b.0.c" (containers must exist
    for list indices)."""
    keys = dotted.split(".")
    for k in keys[:-1]:
        obj = obj[int(k)] if isinstance(obj, list) else obj.setdefault(k, {})
    last = keys[-1]
    if isinstance(obj, list):
        obj[int(last)] = value
    else:
        obj[last] = value


def _decode_json_tensor(t):
    dt = t["dtype"]
    shape = t["shape"]
    if "b64" in t:
        raw = base64.b64decode(t["b64"])
        if dt == "bfloat16":
            arr = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            arr = np.frombuffer(raw, {"float32": "<f4", "float64": "<f8",
                                      "float16": "<f2", "int32": "<i4"}[dt])
        return arr.reshape(shape)
    data = [float(x) if isinstance(x, str) else x for x in t["data"]]
    return np.array(data, dtype=np.int64 if dt == "int32" else np.float64).reshape(shape)


class Reply:
    """A decoded response: .status, .headers, .body, .out (name -> array or
    scalar), .ignored (list of ignored field names), .problem (error body)."""

    def __init__(self, r, resp):
        self.status = r.status
        self.headers = r.headers
        self.body = r.body
        self.out = {}
        self.problem = None
        ig = r.headers.get("x-attnbias-ignored", "")
        self.ignored = [x for x in ig.split(",") if x] if ig else []
        ctype = r.headers.get("content-type", "")
        if r.status != 200:
            assert ctype.startswith("application/problem+json"), (r.status, ctype, r.body[:300])
            self.problem = json.loads(r.body)
            return
        if resp in ("json", "b64"):
            assert ctype.startswith("application/json"), ctype
            for k, v in json.loads(r.body).items():
                self.out[k] = _decode_json_tensor(v) if isinstance(v, dict) else v
        elif resp == "safetensors":
            assert ctype.startswith("application/vnd.safetensors"), ctype
            self.out = safetensors_load(r.body)
        elif resp == "npy":
            assert ctype.startswith("application/x-npy"), ctype
            self.out = {"npy": np.load(io.BytesIO(r.body), allow_pickle=False)}
        elif resp == "png":
            assert ctype.startswith("image/png"), ctype

    def field(self):
        return self.problem.get("field") if self.problem else None


def call(server, route, params, tensors=None, transport="nested", resp="json",
         pick=None, headers=None):
    """POST params (+ tensors by dotted name) to route in one transport and
    one response form; returns a Reply."""
    body = copy.deepcopy(params)
    tensors = tensors or {}
    hdrs = dict(headers or {})
    if resp == "b64":
        body["encoding"] = "b64"
    if resp == "npy" and pick:
        body["output"] = pick
    hdrs["Accept"] = {"json": "application/json", "b64": "application/json",
                      "safetensors": "application/vnd.safetensors",
                      "npy": "application/x-npy", "png": "image/png"}[resp]
    if transport == "safetensors":
        hdrs["Content-Type"] = "application/vnd.safetensors"
        data = safetensors_dump(tensors, body)
    else:
        for name, arr in tensors.items():
            _set_path(body, name, json_tensor(arr, transport))
        hdrs["Content-Type"] = "application/json"
        data = json.dumps(body).encode()
    r = server.request("POST", route, body=data, headers=hdrs)
    return Reply(r, resp)


def ok(reply, what=""):
    assert reply.status == 200, "%s: %d %s" % (what, reply.status, reply.body[:400])
    return reply


def bad(reply, field, status=400, what=""):
    """The reply is an error of this status naming this JSON pointer."""
    assert reply.status == status, "%s: status %d (want %d) %s" % (
        what, reply.status, status, reply.body[:300])
    assert reply.problem.get("field") == field, "%s: field %r (want %r): %s" % (
        what, reply.problem.get("field"), field, reply.problem.get("detail"))
    assert reply.problem.get("detail"), what
    assert reply.problem.get("error") == reply.problem.get("detail"), what


class Err(NamedTuple):
    """One error case: its name, the request (params, and tensors by dotted
    name), the JSON pointer the problem must name, and the status."""
    id: str
    params: dict
    tensors: dict
    field: str
    status: int = 400


def check_errors(server, route, cases, transports=("nested",)):
    """Send every case (in each transport) and fail naming every case that
    was not answered with its status and field -- all of them, not only the
    first."""
    ids = [c.id for c in cases]
    assert len(set(ids)) == len(ids), "duplicate case ids"
    failed = []
    for c in cases:
        for tr in transports:
            try:
                bad(call(server, route, c.params, c.tensors, tr), c.field,
                    c.status, what=c.params)
            except AssertionError as e:
                failed.append("%s %s [%s]: %s" % (route, c.id, tr, e))
    assert not failed, "%d of %d cases failed:\n%s" % (
        len(failed), len(cases) * len(transports), "\n".join(failed))


def close(got, want, rtol=RTOL, atol=ATOL, what=""):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, "%s: shape %s, want %s" % (what, got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=what)


def each_form(server, route, params, tensors, outputs, check, pick_all=True):
    """Run one request in every transport x response form and hand every
    named output (or the npy one) to check(name, array, form)."""
    for tr in TRANSPORTS:
        for rs in RESPONSES:
            picks = outputs if rs == "npy" else [None]
            if rs == "npy" and not pick_all:
                picks = outputs[:1]
            for pk in picks:
                what = "%s %s->%s%s" % (route, tr, rs, " " + pk if pk else "")
                r = ok(call(server, route, params, tensors, tr, rs, pick=pk), what)
                if rs == "npy":
                    check(pk, r.out["npy"], what)
                else:
                    for name in outputs:
                        assert name in r.out, "%s: no %s in %s" % (what, name, list(r.out))
                        check(name, r.out[name], what)


# ===========================================================================
# float64 references (docs/methods.md, its formulas and decisions)
# ===========================================================================

def ref_sinusoidal(pos, dim, base=10000.0, layout="interleaved"):
    pos = np.asarray(pos, dtype=np.float64)[:, None]
    out = np.zeros((pos.shape[0], dim))
    if layout == "interleaved":
        k = np.arange(0, dim, 2)  # column 2i uses frequency base^(-2i/d)
        ang = pos * base ** (-k / dim)
        out[:, 0::2] = np.sin(ang)
        out[:, 1::2] = np.cos(ang)[:, : dim // 2]
    elif layout == "concat":
        h = (dim + 1) // 2
        ang = pos * base ** (-2.0 * np.arange(h) / dim)
        out[:, :h] = np.sin(ang)
        out[:, h:] = np.cos(ang)[:, : dim - h]
    else:  # tensor2tensor
        h = dim // 2
        ang = pos * np.exp(-np.arange(h) * math.log(base) / (h - 1))
        out[:, :h] = np.sin(ang)
        out[:, h:2 * h] = np.cos(ang)
    return out


def ref_rope_inv_freq(rot, theta=10000.0, rtype="default", seq_len=None, **s):
    """inv_freq [rot/2] and attention scaling, HF modeling_rope_utils."""
    k = np.arange(rot // 2, dtype=np.float64)
    inv = theta ** (-2.0 * k / rot)
    orig = s.get("original_max_position_embeddings") or s.get("max_position_embeddings")
    att = 1.0
    if rtype == "linear":
        inv = inv / s["factor"]
    elif rtype == "ntk":
        inv = (theta * s["factor"] ** (rot / (rot - 2))) ** (-2.0 * k / rot)
    elif rtype == "dynamic":
        L = max(seq_len, orig)
        base = theta * ((s["factor"] * L / orig) - (s["factor"] - 1)) ** (rot / (rot - 2))
        inv = base ** (-2.0 * k / rot)
    elif rtype == "yarn":
        f = s.get("factor") or s["max_position_embeddings"] / orig
        bf = s.get("beta_fast") or 32
        bs = s.get("beta_slow") or 1

        def corr(r):
            return rot * math.log(orig / (r * 2 * math.pi)) / (2 * math.log(theta))
        lo, hi = corr(bf), corr(bs)
        if s.get("truncate", True):
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, rot - 1)
        if lo == hi:
            hi += 0.001
        ramp = np.clip((k - lo) / (hi - lo), 0, 1)
        inv = inv / f * ramp + inv * (1 - ramp)

        def mscale(x, m=1.0):
            return 1.0 if x <= 1 else 0.1 * m * math.log(x) + 1.0
        if s.get("attention_factor") is not None:
            att = s["attention_factor"]
        elif s.get("mscale") and s.get("mscale_all_dim"):
            att = mscale(f, s["mscale"]) / mscale(f, s["mscale_all_dim"])
        else:
            att = mscale(f)
    elif rtype == "llama3":
        f, lo_f, hi_f = s["factor"], s.get("low_freq_factor", 1), s.get("high_freq_factor", 4)
        o = s["original_max_position_embeddings"]
        wl = 2 * math.pi / inv
        smooth = (o / wl - lo_f) / (hi_f - lo_f)
        mid = (1 - smooth) * inv / f + smooth * inv
        inv = np.where(wl < o / hi_f, inv, np.where(wl > o / lo_f, inv / f, mid))
    elif rtype == "longrope":
        ext = np.asarray(s["long_factor"] if seq_len > orig else s["short_factor"],
                         dtype=np.float64)
        inv = 1.0 / (ext * theta ** (2.0 * k / rot))
        f = s.get("factor") or s["max_position_embeddings"] / orig
        if s.get("attention_factor") is not None:
            att = s["attention_factor"]
        else:
            att = 1.0 if f <= 1 else math.sqrt(1 + math.log(f) / math.log(orig))
    elif rtype == "vision2d":
        inv = theta ** (-2.0 * np.arange(rot // 4) / (rot // 2))
    return inv, att


def ref_angles(pos, inv, rtype="default", sections=None, interleaved_m=False):
    """Angles [n, rot/2] per pair: 1-D, multi-axis (sections over pair index,
    not reset) or vision2d ([row, col] halves)."""
    pos = np.asarray(pos, dtype=np.float64)
    if rtype == "vision2d":
        return np.concatenate([pos[0][:, None] * inv, pos[1][:, None] * inv], axis=1)
    if sections is None:
        return pos.reshape(-1)[:, None] * inv
    half = len(inv)
    axis = np.zeros(half, dtype=int)
    if interleaved_m:
        for f in range(half):
            if f % 3 == 1 and f < 3 * sections[1]:
                axis[f] = 1
            elif f % 3 == 2 and f < 3 * sections[2]:
                axis[f] = 2
    else:
        axis = np.repeat(np.arange(len(sections)), sections)
    return np.stack([pos[axis[f]] * inv[f] for f in range(half)], axis=1)


def ref_tables(ang, att, interleaved):
    c, s = np.cos(ang) * att, np.sin(ang) * att
    if interleaved:
        return np.repeat(c, 2, axis=1), np.repeat(s, 2, axis=1)
    return np.concatenate([c, c], 1), np.concatenate([s, s], 1)


def ref_rope_apply(x, ang, att, interleaved, scale=None):
    """Rotate the last axis of x [..., n, D] by angles [n, r/2] (times the
    attention factor and an optional per-(n, pair) xPos scale)."""
    x = np.array(x, dtype=np.float64)
    h = ang.shape[1]
    c, s = np.cos(ang) * att, np.sin(ang) * att
    if scale is not None:
        c, s = c * scale, s * scale
    a_idx = np.arange(0, 2 * h, 2) if interleaved else np.arange(h)
    b_idx = a_idx + 1 if interleaved else a_idx + h
    xa, xb = x[..., a_idx].copy(), x[..., b_idx].copy()
    x[..., a_idx] = xa * c - xb * s
    x[..., b_idx] = xb * c + xa * s
    return x


def ref_alibi_slopes(n, max_bias=8.0):
    p2 = 2 ** int(math.floor(math.log2(n)))
    return np.array([2.0 ** (-max_bias * (h + 1) / p2) if h < p2 else
                     2.0 ** (-(max_bias / 2) * (2 * (h - p2) + 1) / p2)
                     for h in range(n)])


def geometry(q_len, k_len, q_offset=None):
    if q_offset is None:
        q_offset = k_len - q_len
    return q_offset + np.arange(q_len)[:, None], np.arange(k_len)[None, :]


def ref_mask(pq, j, causal=False, window=None):
    vis = np.ones(np.broadcast(pq, j).shape, dtype=bool)
    if causal:
        vis &= j <= pq
    if window is not None:
        left, right = window
        if left >= 0:
            vis &= j >= pq - left
        if right >= 0:
            vis &= j <= pq + right
    return vis


def ref_t5_bucket(rel, nb=32, bidirectional=True, md=128, f32=True):
    """HF _relative_position_bucket: float32 as HF computes it (f32=True) or
    in float64 (to tell boundary cells)."""
    rel = np.asarray(rel, dtype=np.int64)
    ret = np.zeros_like(rel)
    if bidirectional:
        nb //= 2
        ret = ret + (rel > 0) * nb
        n = np.abs(rel)
    else:
        n = -np.minimum(rel, 0)
    me = nb // 2
    safe = np.maximum(n, 1)
    if f32:
        v = (np.log(safe.astype(np.float32) / np.float32(me)) /
             np.float32(math.log(md / me)) * np.float32(nb - me))
    else:
        v = np.log(safe / me) / math.log(md / me) * (nb - me)
    large = np.minimum(me + np.trunc(np.maximum(v, 0)).astype(np.int64), nb - 1)
    return ret + np.where(n < me, n, large)


def ref_t5_buckets(q_len, k_len, q_offset=None, **kw):
    pq, j = geometry(q_len, k_len, q_offset)
    return ref_t5_bucket(j - pq, **kw), ref_t5_bucket(j - pq, f32=False, **kw)


def ref_fire(layers, x):
    h = np.asarray(x, dtype=np.float64)[..., None]
    for i, (w, b) in enumerate(layers):
        h = h @ np.asarray(w, dtype=np.float64).T + (0.0 if b is None else np.asarray(b, dtype=np.float64))
        if i + 1 < len(layers):
            h = np.maximum(h, 0)
    return np.moveaxis(h, -1, 0)  # [out, ...]


def ref_bias(method, H, q_len, k_len, q_offset=None, causal=False, window=None,
             mask=True, **m):
    """[H, q_len, k_len] position bias (masked cells -inf when mask)."""
    pq, j = geometry(q_len, k_len, q_offset)
    d = (pq - j).astype(np.float64)
    if method == "none":
        b = np.zeros((H, q_len, k_len))
    elif method == "alibi":
        sl = np.asarray(m["slopes"], dtype=np.float32).astype(np.float64) \
            if "slopes" in m else ref_alibi_slopes(H, m.get("max_bias", 8.0))
        b = -sl[:, None, None] * np.abs(d)[None]
    elif method == "t5":
        table = np.asarray(m["table"], dtype=np.float32).astype(np.float64)
        bk, _ = ref_t5_buckets(q_len, k_len, q_offset, nb=table.shape[0],
                               bidirectional=m.get("bidirectional", True),
                               md=m.get("relative_attention_max_distance", 128))
        b = np.moveaxis(table[bk], -1, 0)
    elif method == "fire":
        c, L, eps = m["c"], m["L"], m.get("eps", 0.0)
        psi = lambda t: np.log(c * t + 1)  # noqa: E731
        x = psi(np.maximum(d, 0)) / (psi(np.maximum(L, pq)) + eps)
        b = ref_fire(m["layers"], x)
        b = np.broadcast_to(b, (H, q_len, k_len)).copy()
    elif method == "kerple":
        r1 = np.asarray(m["r1"], np.float32).astype(np.float64)[:, None, None]
        r2 = np.asarray(m["r2"], np.float32).astype(np.float64)[:, None, None]
        if m.get("variant", "log") == "log":
            b = -r1 * np.log1p(r2 * np.abs(d)[None])
        else:
            b = -r1 * np.abs(d)[None] ** r2
    if mask:
        b = np.where(ref_mask(pq, j, causal, window)[None], b, -np.inf)
    return b


def ref_attention(q, k, v, scale=None, causal=False, q_offset=None, window=None,
                  kv_lens=None, softcap=0.0, bias=None, attn_bias=None):
    """bhsd float64: output [B,Hq,Nq,Dv], lse [B,Hq,Nq], weights [B,Hq,Nq,Nk].
    bias: [Hq, Nq, Nk] position bias (unmasked)."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    B, Hq, Nq, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    G = Hq // Hkv
    k = np.repeat(k, G, axis=1)
    v = np.repeat(v, G, axis=1)
    s = (scale if scale is not None else 1 / math.sqrt(D)) * q @ np.swapaxes(k, -1, -2)
    if softcap:
        s = softcap * np.tanh(s / softcap)
    if bias is not None:
        s = s + np.asarray(bias)[None]
    if attn_bias is not None:
        s = s + np.asarray(attn_bias, dtype=np.float64)
    pq, j = geometry(Nq, Nk, q_offset)
    vis = np.broadcast_to(ref_mask(pq, j, causal, window), s.shape).copy()
    if kv_lens is not None:
        for b in range(B):
            vis[b, :, :, kv_lens[b]:] = False
    s = np.where(vis, s, -np.inf)
    mx = np.max(s, axis=-1, keepdims=True)
    mx = np.where(np.isfinite(mx), mx, 0)
    e = np.where(vis, np.exp(s - mx), 0)
    den = e.sum(-1, keepdims=True)
    w = np.where(den > 0, e / np.where(den > 0, den, 1), 0)
    with np.errstate(divide="ignore"):
        lse = np.where(den[..., 0] > 0, np.log(np.where(den[..., 0] > 0, den[..., 0], 1)) + mx[..., 0], -np.inf)
    return w @ v, lse, w


def rng(seed):
    return np.random.default_rng(seed)


# ===========================================================================
# /v1/encodings
# ===========================================================================

def test_encodings_every_method_and_form(server):
    pos = [0, 1, 5, 9.5]
    ipos = [0, 1, 5, 9]
    table = rng(1).normal(size=(12, 5)).astype(np.float32)
    cases = [
        ({"method": "sinusoidal", "dim": 8, "positions": pos}, {},
         ref_sinusoidal(pos, 8)),
        ({"method": "sinusoidal", "dim": 6, "layout": "concat", "base": 500,
          "positions": pos}, {}, ref_sinusoidal(pos, 6, 500.0, "concat")),
        ({"method": "sinusoidal", "dim": 7, "layout": "tensor2tensor",
          "positions": pos}, {}, ref_sinusoidal(pos, 7, layout="tensor2tensor")),
        ({"method": "integer", "dim": 3, "normalize": 4, "positions": pos}, {},
         np.repeat(np.array(pos)[:, None] / 4, 3, axis=1)),
        ({"method": "binary", "dim": 5, "positions": ipos}, {},
         np.array([[(p >> c) & 1 for c in range(5)] for p in ipos], dtype=float)),
        ({"method": "learned", "offset": 2, "positions": ipos}, {"table": table},
         table[np.array(ipos) + 2]),
    ]
    for params, tensors, want in cases:
        def check(name, got, what, want=want):
            close(got, want, what=what + " " + params["method"])
        each_form(server, "/v1/encodings", params, tensors, ["encoding"], check)


def test_encodings_integer_count_and_x(server):
    # positions as a count n means 0..n-1.
    r = ok(call(server, "/v1/encodings", {"method": "sinusoidal", "positions": 6, "dim": 4}))
    close(r.out["encoding"], ref_sinusoidal(range(6), 4))
    # x [..., n, dim]: the only output is x + encoding, broadcast.
    x = rng(2).normal(size=(2, 3, 4, 6)).astype(np.float32)
    want = x.astype(np.float64) + ref_sinusoidal([0, 2, 4, 8], 6)

    def check(name, got, what):
        assert name == "x", what
        close(got, want, what=what)
    each_form(server, "/v1/encodings", {"method": "sinusoidal", "dim": 6,
                                        "positions": [0, 2, 4, 8]},
              {"x": x}, ["x"], check)
    # float16 and float64 inputs are converted to float32 before adding.
    for dt in (np.float16, np.float64):
        xd = x.astype(dt)
        for tr in ("b64", "safetensors"):
            r = ok(call(server, "/v1/encodings", {"method": "integer", "dim": 6,
                                                  "positions": [0, 2, 4, 8]},
                        {"x": xd}, tr))
            want = xd.astype(np.float32).astype(np.float64) + \
                np.repeat(np.array([0, 2, 4, 8.0])[:, None], 6, 1)
            close(r.out["x"], want, what="x %s %s" % (dt.__name__, tr))
            assert "encoding" not in r.out


def test_encodings_worked_examples(server):
    # docs/methods.md#example-1-sinusoidal-encodings (1a-1e) and example 2.
    ex1a = [[0, 1, 0, 1, 0, 1, 0, 1],
            [0.841471, 0.5403023, 0.09983342, 0.9950042, 0.009999833, 0.99995, 0.0009999998, 0.9999995],
            [0.9092974, -0.4161468, 0.1986693, 0.9800666, 0.01999867, 0.9998, 0.001999999, 0.999998],
            [0.14112, -0.9899925, 0.2955202, 0.9553365, 0.0299955, 0.99955, 0.002999996, 0.9999955]]
    ex1b = [[0, 0, 0, 0, 1, 1, 1, 1],
            [0.841471, 0.09983342, 0.009999833, 0.0009999998, 0.5403023, 0.9950042, 0.99995, 0.9999995],
            [0.9092974, 0.1986693, 0.01999867, 0.001999999, -0.4161468, 0.9800666, 0.9998, 0.999998],
            [0.14112, 0.2955202, 0.0299955, 0.002999996, -0.9899925, 0.9553365, 0.99955, 0.9999955]]
    ex1c = [[0, 0, 0, 0, 1, 1, 1, 1],
            [0.841471, 0.04639922, 0.002154433, 0.0001, 0.5403023, 0.998923, 0.9999977, 1],
            [0.9092974, 0.0926985, 0.004308856, 0.0002, -0.4161468, 0.9956942, 0.9999907, 1],
            [0.14112, 0.1387981, 0.006463259, 0.0003, -0.9899925, 0.9903207, 0.9999791, 1]]
    ex1d = [[-0.9589243, 0.04997917, 0.0005, 0.2836622, 0.9987503, 0.9999999, 0]]
    ex1e = [[-0.9589243, 0.2836622, 0.3521271, 0.9359522, 0.02589448, 0.9996647, 0.001863796]]
    for params, want in [
            ({"dim": 8, "positions": 4}, ex1a),
            ({"dim": 8, "positions": 4, "layout": "concat"}, ex1b),
            ({"dim": 8, "positions": 4, "layout": "tensor2tensor"}, ex1c),
            ({"dim": 7, "positions": [5], "layout": "tensor2tensor"}, ex1d),
            ({"dim": 7, "positions": [5], "layout": "interleaved"}, ex1e)]:
        params["method"] = "sinusoidal"
        # interleaved with odd dim is refused by the API (dim must be even).
        r = call(server, "/v1/encodings", params)
        if params["dim"] == 7 and params["layout"] == "interleaved":
            bad(r, "/dim")
            continue
        close(ok(r).out["encoding"], want, rtol=2e-6, atol=1e-6, what=str(params))
    W = [[(4 * p + c) / 10 for c in range(4)] for p in range(5)]
    r = ok(call(server, "/v1/encodings", {"method": "learned", "positions": [3, 0, 4]},
                {"table": np.array(W, dtype=np.float32)}))
    close(r.out["encoding"], [[1.2, 1.3, 1.4, 1.5], [0, 0.1, 0.2, 0.3], [1.6, 1.7, 1.8, 1.9]])
    W2 = [[(4 * p + c) / 10 for c in range(4)] for p in range(5)]
    r = ok(call(server, "/v1/encodings", {"method": "learned", "positions": [0, 1, 2], "offset": 2},
                {"table": np.array(W2, dtype=np.float32)}))
    close(r.out["encoding"], [[0.8, 0.9, 1, 1.1], [1.2, 1.3, 1.4, 1.5], [1.6, 1.7, 1.8, 1.9]])


def test_encodings_errors(server):
    t = np.zeros((5, 4), np.float32)
    cases = [
        Err("method-missing", {"positions": 4, "dim": 8}, {}, "/method"),
        Err("method-unknown", {"method": "fourier", "positions": 4, "dim": 8}, {}, "/method"),
        Err("sinusoidal-dim-missing", {"method": "sinusoidal", "positions": 4}, {}, "/dim"),
        Err("sinusoidal-dim-odd", {"method": "sinusoidal", "positions": 4, "dim": 7}, {}, "/dim"),
        Err("tensor2tensor-dim-too-small", {"method": "sinusoidal", "positions": 4, "dim": 3, "layout": "tensor2tensor"}, {}, "/dim"),
        Err("layout-unknown", {"method": "sinusoidal", "positions": 4, "dim": 4, "layout": "zigzag"}, {}, "/layout"),
        Err("base-zero", {"method": "sinusoidal", "positions": 4, "dim": 4, "base": 0}, {}, "/base"),
        Err("positions-count-zero", {"method": "sinusoidal", "positions": 0, "dim": 4}, {}, "/positions"),
        Err("positions-empty-list", {"method": "sinusoidal", "positions": [], "dim": 4}, {}, "/positions"),
        Err("positions-string-element", {"method": "sinusoidal", "positions": [1, "x"], "dim": 4}, {}, "/positions/1"),
        Err("positions-string", {"method": "sinusoidal", "positions": "all", "dim": 4}, {}, "/positions"),
        Err("positions-missing", {"method": "sinusoidal", "dim": 4}, {}, "/positions"),
        Err("integer-normalize-zero", {"method": "integer", "positions": 3, "dim": 2, "normalize": 0}, {}, "/normalize"),
        Err("binary-negative-position", {"method": "binary", "positions": [1, -2], "dim": 4}, {}, "/positions/1"),
        Err("binary-fractional-position", {"method": "binary", "positions": [1, 2.5], "dim": 4}, {}, "/positions/1"),
        Err("learned-position-past-table", {"method": "learned", "positions": [0, 3, 4]}, {"table": t[:4]}, "/positions/2"),
        Err("learned-offset-past-table", {"method": "learned", "positions": [0, 2], "offset": 3}, {"table": t}, "/positions/1"),
        Err("learned-table-missing", {"method": "learned", "positions": [0]}, {}, "/table"),
        Err("learned-table-rank-1", {"method": "learned", "positions": [0]}, {"table": t[0]}, "/table"),
        Err("learned-dim-disagrees-with-table", {"method": "learned", "positions": [0], "dim": 3}, {"table": t}, "/dim"),
        Err("x-width-disagrees-with-dim", {"method": "sinusoidal", "positions": 3, "dim": 4}, {"x": np.zeros((3, 5))}, "/x"),
        Err("x-rows-disagree-with-positions", {"method": "sinusoidal", "positions": 3, "dim": 4}, {"x": np.zeros((4, 4))}, "/x"),
    ]
    check_errors(server, "/v1/encodings", cases)


# ===========================================================================
# /v1/rope
# ===========================================================================

SHORT = [1.0, 1.0, 1.1, 1.2, 1.5, 2.0, 3.0, 4.0]
LONG = [1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 16.0]

# (request, reference rope type, reference scaling kwargs, positions, seq_len)
ROPE_TABLE_CASES = [
    ({"head_dim": 16}, "default", {}, [0, 1, 7, 100, -3], None),
    ({"head_dim": 16, "interleaved": True, "rope_theta": 500.0}, "default", {}, [0, 2, 9], None),
    ({"head_dim": 12, "partial_rotary_factor": 0.5}, "default", {}, [1, 4], None),
    ({"head_dim": 16, "rotary_dim": 8, "interleaved": True}, "default", {}, [3, 5], None),
    ({"head_dim": 16, "rope_scaling": {"rope_type": "linear", "factor": 4}},
     "linear", {"factor": 4}, [0, 33, 90], None),
    ({"head_dim": 16, "rope_scaling": {"type": "ntk", "factor": 4}},
     "ntk", {"factor": 4}, [5, 6], None),
    ({"head_dim": 16, "max_position_embeddings": 64, "seq_len": 128,
      "rope_scaling": {"rope_type": "dynamic", "factor": 4}},
     "dynamic", {"factor": 4, "max_position_embeddings": 64}, [1, 2], 128),
    ({"head_dim": 16, "max_position_embeddings": 64,
      "rope_scaling": {"rope_type": "dynamic", "factor": 2}},
     "dynamic", {"factor": 2, "max_position_embeddings": 64}, [0, 199], 200),
    ({"head_dim": 16, "rope_scaling": {"rope_type": "yarn", "factor": 4,
                                       "original_max_position_embeddings": 64}},
     "yarn", {"factor": 4, "original_max_position_embeddings": 64}, [0, 50, 300], None),
    ({"head_dim": 16, "interleaved": True,
      "rope_scaling": {"rope_type": "yarn", "factor": 4, "truncate": False,
                       "beta_fast": None, "beta_slow": 0,
                       "original_max_position_embeddings": 64}},
     "yarn", {"factor": 4, "truncate": False, "original_max_position_embeddings": 64},
     [7, 8], None),
    ({"head_dim": 32, "rope_scaling": {"rope_type": "yarn", "factor": 8, "attention_factor": 1.5,
                                       "original_max_position_embeddings": 128}},
     "yarn", {"factor": 8, "attention_factor": 1.5, "original_max_position_embeddings": 128},
     [4, 1000], None),
    ({"head_dim": 16, "rope_scaling": {"rope_type": "yarn", "factor": 40, "mscale": 1.0,
                                       "mscale_all_dim": 0.707,
                                       "original_max_position_embeddings": 64}},
     "yarn", {"factor": 40, "mscale": 1.0, "mscale_all_dim": 0.707,
              "original_max_position_embeddings": 64}, [3], None),
    ({"head_dim": 16, "max_position_embeddings": 256,
      "rope_scaling": {"rope_type": "yarn", "original_max_position_embeddings": 64}},
     "yarn", {"max_position_embeddings": 256, "original_max_position_embeddings": 64},
     [9, 10], None),
    ({"head_dim": 16, "rope_scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1,
                                       "high_freq_factor": 4,
                                       "original_max_position_embeddings": 64}},
     "llama3", {"factor": 8, "original_max_position_embeddings": 64}, [2, 77], None),
    ({"head_dim": 16, "max_position_embeddings": 256,
      "rope_scaling": {"rope_type": "longrope", "short_factor": SHORT, "long_factor": LONG,
                       "original_max_position_embeddings": 64}},
     "longrope", {"short_factor": SHORT, "long_factor": LONG, "max_position_embeddings": 256,
                  "original_max_position_embeddings": 64}, [0, 31], 32),
    ({"head_dim": 16, "max_position_embeddings": 256, "original_max_position_embeddings": 64,
      "rope_scaling": {"type": "su", "short_factor": SHORT, "long_factor": LONG}},
     "longrope", {"short_factor": SHORT, "long_factor": LONG, "max_position_embeddings": 256,
                  "original_max_position_embeddings": 64}, [0, 99], 100),
    ({"head_dim": 16, "seq_len": 65, "rope_scaling": {
        "rope_type": "longrope", "short_factor": SHORT, "long_factor": LONG, "factor": 2.0,
        "attention_factor": 1.25, "original_max_position_embeddings": 64}},
     "longrope", {"short_factor": SHORT, "long_factor": LONG, "factor": 2.0,
                  "attention_factor": 1.25, "original_max_position_embeddings": 64}, [1], 65),
]


def _rope_ref(req, rtype, s, positions, seq_len):
    hd = req["head_dim"]
    rot = req.get("rotary_dim") or int(hd * req.get("partial_rotary_factor", 1.0))
    if seq_len is None:
        seq_len = max(max(np.ravel(positions)) + 1, 1)
    inv, att = ref_rope_inv_freq(rot, req.get("rope_theta", 10000.0), rtype, seq_len, **s)
    rs = req.get("rope_scaling", {})
    ang = ref_angles(positions, inv, rtype, rs.get("mrope_section"),
                     rs.get("mrope_interleaved", False))
    return inv, att, ang, rot


def test_rope_tables_every_type(server):
    for i, (req, rtype, s, positions, seq_len) in enumerate(ROPE_TABLE_CASES):
        inv, att, ang, rot = _rope_ref(req, rtype, s, positions, seq_len)
        cos, sin = ref_tables(ang, att, req.get("interleaved", False))
        params = dict(req, positions=positions)
        want = {"inv_freq": inv, "cos": cos, "sin": sin}

        def check(name, got, what, want=want):
            close(got, want[name], what=what)
        if i in (0, 8, 14):
            each_form(server, "/v1/rope", params, {}, ["inv_freq", "cos", "sin"], check)
        r = ok(call(server, "/v1/rope", params), str(req))
        for name in want:
            close(r.out[name], want[name], what="%s %s" % (name, req))
        assert abs(float(r.out["attention_scaling"]) - att) <= 1e-6 * att, (req, r.out["attention_scaling"], att)
        assert r.ignored == [], (req, r.ignored)
    # safetensors responses carry the scalar in __metadata__.
    r = ok(call(server, "/v1/rope", dict(ROPE_TABLE_CASES[8][0], positions=[1]),
                resp="safetensors"))
    assert abs(float(r.out["attention_scaling"]) - (0.1 * math.log(4) + 1)) < 1e-6


def test_rope_multi_axis_and_vision(server):
    # M-RoPE (Qwen2-VL): positions [3, n]; frequency index split by sections.
    pos = [[5, 0, 3], [2, 0, 1], [7, 0, 9]]
    for inter in (False, True):
        req = {"head_dim": 16, "rope_scaling": {"rope_type": "default", "mrope_section": [2, 3, 3],
                                                 "mrope_interleaved": inter}}
        inv, att, ang, rot = _rope_ref(req, "default", {}, pos, None)
        c, s = ref_tables(ang, att, False)
        r = ok(call(server, "/v1/rope", dict(req, positions=pos)))
        close(r.out["cos"], c, what="mrope cos %s" % inter)
        close(r.out["sin"], s, what="mrope sin %s" % inter)
    # Qwen2-VL's config spelling, and text tokens (a flat list) = 1-D RoPE.
    flat = [4, 9]
    r = ok(call(server, "/v1/rope", {"head_dim": 16, "positions": flat,
                                     "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}}))
    r1 = ok(call(server, "/v1/rope", {"head_dim": 16, "positions": flat}))
    close(r.out["cos"], r1.out["cos"], rtol=0, atol=0)
    # vision2d: [2, n] (row, column), inv_freq [rotary_dim/4].
    vp = [[1, 0, 3], [2, 5, 3]]
    for inter in (False, True):
        req = {"head_dim": 8, "interleaved": inter, "rope_scaling": {"rope_type": "vision2d"}}
        inv, att, ang, rot = _rope_ref(req, "vision2d", {}, vp, None)
        c, s = ref_tables(ang, att, inter)
        r = ok(call(server, "/v1/rope", dict(req, positions=vp)))
        close(r.out["inv_freq"], inv)
        close(r.out["cos"], c, what="vision2d")
        close(r.out["sin"], s, what="vision2d")


def test_rope_large_positions(server):
    pos = [100000, 123457, -99999]
    req = {"head_dim": 32, "rope_theta": 500000.0}
    inv, att, ang, rot = _rope_ref(req, "default", {}, pos, None)
    c, s = ref_tables(ang, att, False)
    r = ok(call(server, "/v1/rope", dict(req, positions=pos)))
    close(r.out["cos"], c, rtol=1e-4, atol=1e-4)
    close(r.out["sin"], s, rtol=1e-4, atol=1e-4)


def _xpos_scale(rot, positions, sb, gamma, key):
    zeta = (np.arange(0, rot, 2) + gamma * rot) / ((1 + gamma) * rot)
    p = np.asarray(positions, dtype=np.float64)[:, None]
    return zeta[None, :] ** ((-p if key else p) / sb)


def test_rope_apply_layouts_and_ranks(server):
    g = rng(3)
    pos = [3, 0, 7, 100, -2]
    req = {"head_dim": 16, "rotary_dim": 12,
           "rope_scaling": {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 64}}
    for inter in (False, True):
        r0 = dict(req, interleaved=inter)
        inv, att, ang, rot = _rope_ref(r0, "yarn", {"factor": 4, "original_max_position_embeddings": 64},
                                       pos, None)
        q = g.normal(size=(2, 3, 5, 16)).astype(np.float32)
        k = g.normal(size=(2, 1, 5, 16)).astype(np.float32)
        wq = ref_rope_apply(q, ang, att, inter)
        wk = ref_rope_apply(k, ang, att, inter)
        want = {"q": wq, "k": wk}

        def check(name, got, what, want=want):
            close(got, want[name], what=what)
        each_form(server, "/v1/rope", dict(r0, positions=pos), {"q": q, "k": k}, ["q", "k"],
                  check, pick_all=inter)
        # bshd, rank 3 and rank 2 give the same rotation on the same data.
        qs = np.swapaxes(q, 1, 2)
        r = ok(call(server, "/v1/rope", dict(r0, positions=pos, layout="bshd"), {"q": qs}, "b64"))
        close(r.out["q"], np.swapaxes(wq, 1, 2), what="bshd")
        assert "k" not in r.out and "cos" not in r.out
        r = ok(call(server, "/v1/rope", dict(r0, positions=pos), {"q": q[1]}))
        close(r.out["q"], wq[1], what="rank 3 bhsd")
        r = ok(call(server, "/v1/rope", dict(r0, positions=pos, layout="bshd"), {"k": np.swapaxes(k[0], 0, 1)}))
        close(r.out["k"], np.swapaxes(wk[0], 0, 1), what="rank 3 bshd")
        r = ok(call(server, "/v1/rope", dict(r0, positions=pos), {"q": q[0, 2]}))
        close(r.out["q"], wq[0, 2], what="rank 2")
        # the tail past rotary_dim passes through unchanged
        assert np.array_equal(r.out["q"][:, 12:].astype(np.float32), q[0, 2][:, 12:])


def test_rope_apply_xpos(server):
    g = rng(4)
    pos = [0, 1, 2, 3, 40]
    q = g.normal(size=(2, 5, 8)).astype(np.float32)
    k = g.normal(size=(2, 5, 8)).astype(np.float32)
    for inter in (False, True):
        req = {"head_dim": 8, "interleaved": inter, "positions": pos,
               "rope_scaling": {"rope_type": "xpos", "scale_base": 64, "gamma": 0.5}}
        inv, _ = ref_rope_inv_freq(8)
        ang = ref_angles(pos, inv)
        wq = ref_rope_apply(q, ang, 1.0, inter, _xpos_scale(8, pos, 64, 0.5, False))
        wk = ref_rope_apply(k, ang, 1.0, inter, _xpos_scale(8, pos, 64, 0.5, True))
        r = ok(call(server, "/v1/rope", req, {"q": q, "k": k}))
        close(r.out["q"], wq, what="xpos q")
        close(r.out["k"], wk, what="xpos k")
    # xpos has no table form.
    bad(call(server, "/v1/rope", {"head_dim": 8, "positions": 3,
                                  "rope_scaling": {"rope_type": "xpos"}}), "/rope_scaling/rope_type")


def test_rope_worked_examples(server):
    # docs/methods.md#worked-examples 6-10.
    x = np.arange(1, 9, dtype=np.float32)[None, :]
    ex = {
        (False, 1): [-3.667053, 1.391008, 2.929851, 3.991998, 3.542983, 6.169692, 7.02965, 8.003996],
        (True, 1): [-1.14264, 1.922076, 2.585679, 4.279517, 4.939751, 6.049699, 6.991997, 8.006996],
        (False, 3): [-1.695593, 0.1375517, 2.788682, 3.975982, -4.808842, 6.323059, 7.086837, 8.011964],
        (True, 3): [-1.272233, -1.838865, 1.683929, 4.707907, 4.817777, 6.147278, 6.975969, 8.020964],
        (False, 100): [3.394147, 1.585984, -4.26939, 3.181349, 3.805229, -6.122471, 6.306529, 8.359367],
        (True, 100): [1.87505, 1.218272, -0.3411301, -4.988349, -2.347314, 7.449169, 6.166362, 8.658867],
        (False, 0): list(range(1, 9)), (True, 0): list(range(1, 9)),
    }
    for (inter, p), want in ex.items():
        r = ok(call(server, "/v1/rope", {"head_dim": 8, "interleaved": inter, "positions": [p]}, {"q": x}))
        close(r.out["q"][0], want, rtol=2e-5, atol=2e-6, what="ex6 %s %d" % (inter, p))
    for inter, want in [(False, [-1.413353, 1.879118, -2.828857, 4.058191, 5, 6, 7, 8]),
                        (True, [-1.272233, -1.838865, 2.878668, 4.088187, 5, 6, 7, 8])]:
        r = ok(call(server, "/v1/rope", {"head_dim": 8, "partial_rotary_factor": 0.5,
                                         "interleaved": inter, "positions": [3]}, {"q": x}))
        close(r.out["q"][0], want, rtol=2e-5, atol=2e-6, what="ex6 partial")
    # Relative property: <R(5)q, R(2)k> == <R(13)q, R(10)k>, 45.92957.
    r = ok(call(server, "/v1/rope", {"head_dim": 8, "positions": [5, 13]}, {"q": np.vstack([x, x])}))
    rk = ok(call(server, "/v1/rope", {"head_dim": 8, "positions": [2, 10]}, {"k": np.vstack([x[:, ::-1]] * 2)}))
    d = (r.out["q"] * rk.out["k"]).sum(1)
    close(d, [45.92957, 45.92957], rtol=1e-5)
    # 7: inv_freq tables, dim 16.
    tables = [
        ({}, [1, 0.3162278, 0.1, 0.03162278, 0.01, 0.003162278, 0.001, 0.0003162278], 1.0, 3),
        ({"rope_type": "linear", "factor": 4},
         [0.25, 0.07905694, 0.025, 0.007905694, 0.0025, 0.0007905694, 0.00025, 7.905694e-05], 1.0, 3),
        ({"rope_type": "ntk", "factor": 4},
         [1, 0.2594128, 0.06729501, 0.01745719, 0.004528618, 0.001174782, 0.0003047534, 7.905694e-05], 1.0, 3),
        ({"rope_type": "dynamic", "factor": 4, "original_max_position_embeddings": 64},
         [1, 0.3162278, 0.1, 0.03162278, 0.01, 0.003162278, 0.001, 0.0003162278], 1.0, 64),
        ({"rope_type": "dynamic", "factor": 4, "original_max_position_embeddings": 64},
         [1, 0.2512738, 0.0631385, 0.01586505, 0.003986471, 0.001001695, 0.0002516998, 6.324555e-05], 1.0, 128),
        ({"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 64},
         [1, 0.2371708, 0.05, 0.007905694, 0.0025, 0.0007905694, 0.00025, 7.905694e-05], 1.138629, 3),
        ({"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 64, "truncate": False},
         [1, 0.1985835, 0.02559525, 0.007905694, 0.0025, 0.0007905694, 0.00025, 7.905694e-05], 1.138629, 3),
        ({"rope_type": "llama3", "factor": 8, "original_max_position_embeddings": 64},
         [1, 0.2443846, 0.01304226, 0.003952847, 0.00125, 0.0003952847, 0.000125, 3.952847e-05], 1.0, 3),
        ({"rope_type": "longrope", "short_factor": SHORT, "long_factor": LONG,
          "original_max_position_embeddings": 64},
         [1, 0.3162278, 0.09090909, 0.02635231, 0.006666667, 0.001581139, 0.0003333333, 7.905694e-05],
         1.154701, 32),
        ({"rope_type": "longrope", "short_factor": SHORT, "long_factor": LONG,
          "original_max_position_embeddings": 64},
         [1, 0.2108185, 0.05, 0.01054093, 0.0025, 0.0005270463, 0.000125, 1.976424e-05], 1.154701, 100),
    ]
    for rs, inv, att, seq in tables:
        r = ok(call(server, "/v1/rope", {"head_dim": 16, "positions": [0], "seq_len": seq,
                                         "max_position_embeddings": 256 if rs.get("rope_type") == "longrope" else 64,
                                         "rope_scaling": rs}), str(rs))
        close(r.out["inv_freq"], inv, rtol=2e-6, atol=1e-9, what="ex7 %s" % rs)
        assert abs(r.out["attention_scaling"] - att) < 2e-6, (rs, r.out["attention_scaling"])
    r = ok(call(server, "/v1/rope", {"head_dim": 128, "positions": [0], "rope_scaling": {
        "rope_type": "yarn", "factor": 16, "original_max_position_embeddings": 4096}}))
    close(r.out["inv_freq"][18:24], [0.07498942, 0.06493816, 0.05623413, 0.04694086, 0.03912857, 0.03256721],
          rtol=2e-6)
    assert abs(r.out["attention_scaling"] - 1.277259) < 2e-6
    r = ok(call(server, "/v1/rope", {"head_dim": 128, "rope_theta": 500000, "positions": [0], "rope_scaling": {
        "rope_type": "llama3", "factor": 8, "original_max_position_embeddings": 8192}}))
    close(r.out["inv_freq"][40:48], [3.428102e-05, 2.792591e-05, 2.274893e-05, 1.853167e-05,
                                     1.509622e-05, 1.229764e-05, 1.001787e-05, 8.160728e-06], rtol=2e-6)
    r = ok(call(server, "/v1/rope", {"head_dim": 16, "positions": [0], "rope_scaling": {
        "rope_type": "yarn", "factor": 40, "mscale": 1.0, "mscale_all_dim": 0.707,
        "original_max_position_embeddings": 64}}))
    assert abs(r.out["attention_scaling"] - 1.085726) < 2e-6
    # YaRN applied to a vector (neox, pos 50).
    x16 = np.arange(1, 17, dtype=np.float32)[None]
    r = ok(call(server, "/v1/rope", {"head_dim": 16, "positions": [50], "rope_scaling": {
        "rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 64}}, {"q": x16}))
    close(r.out["q"][0], [3.787468, 9.133415, -10.23244, -1.058132, 3.803269, 6.196488, 7.756296,
                          9.036951, 9.589901, 7.170379, -7.989949, 14.36373, 15.39648, 16.19834,
                          17.17773, 18.25394], rtol=2e-5, atol=2e-5)
    # 8: M-RoPE at (t, h, w) = (5, 2, 7), both assignments.
    for inter, want in [
            (False, [8.913981, -10.02015, 0.7548371, 3.233562, 4.739017, 5.688652, 6.894829, 7.964563,
                     1.594035, 1.89647, 11.37674, 12.22882, 13.09739, 14.12937, 15.04863, 16.01767]),
            (True, [8.913981, -4.298114, -4.791868, 2.060633, 4.739017, 5.688652, 6.924913, 7.989879,
                    1.594035, 9.248038, 10.34592, 12.48014, 13.09739, 14.12937, 15.03481, 16.00506])]:
        r = ok(call(server, "/v1/rope", {"head_dim": 16, "positions": [[5], [2], [7]], "rope_scaling": {
            "mrope_section": [2, 3, 3], "mrope_interleaved": inter}}, {"q": x16}))
        close(r.out["q"][0], want, rtol=2e-5, atol=2e-5, what="ex8 %s" % inter)
    # 9: vision2d patch (h=1, w=2).
    r = ok(call(server, "/v1/rope", {"head_dim": 8, "positions": [[1], [2]],
                                     "rope_scaling": {"rope_type": "vision2d"}}, {"q": x}))
    close(r.out["q"][0], [-3.667053, 1.939901, -7.613522, 3.839211, 3.542983, 6.0197, -0.1851356, 8.078395],
          rtol=2e-5, atol=2e-5)
    # 10: xPos logits depend on the distance only: q'(3).k'(1) = q'(2).k'(0) = 10.71849.
    q4 = np.array([[1, 2, 3, 4]] * 4, np.float32)
    k4 = np.array([[0.5, -1, 2, 1.5]] * 4, np.float32)
    r = ok(call(server, "/v1/rope", {"head_dim": 4, "interleaved": True, "positions": 4,
                                     "rope_scaling": {"rope_type": "xpos"}}, {"q": q4, "k": k4}))
    qq, kk = r.out["q"], r.out["k"]
    close([qq[3] @ kk[1], qq[2] @ kk[0]], [10.71849, 10.71849], rtol=2e-6)


def test_rope_errors(server):
    q = np.zeros((4, 8), np.float32)
    cases = [
        Err("head-dim-missing", {"positions": 3}, {}, "/head_dim"),
        Err("head-dim-1", {"head_dim": 1, "positions": 3}, {}, "/head_dim"),
        Err("positions-missing", {"head_dim": 8}, {}, "/positions"),
        Err("position-fractional", {"head_dim": 8, "positions": [0.5]}, {}, "/positions/0"),
        Err("positions-2d-without-mrope", {"head_dim": 8, "positions": [[0, 1], [2, 3]]}, {}, "/positions"),
        Err("rotary-dim-odd", {"head_dim": 8, "rotary_dim": 5, "positions": 2}, {}, "/rotary_dim"),
        Err("rotary-dim-past-head-dim", {"head_dim": 8, "rotary_dim": 10, "positions": 2}, {}, "/rotary_dim"),
        Err("rotary-dim-and-partial-factor", {"head_dim": 8, "rotary_dim": 4, "partial_rotary_factor": 1.0, "positions": 2}, {}, "/rotary_dim"),
        Err("partial-factor-over-1", {"head_dim": 8, "partial_rotary_factor": 1.5, "positions": 2}, {}, "/partial_rotary_factor"),
        Err("theta-negative", {"head_dim": 8, "rope_theta": -1, "positions": 2}, {}, "/rope_theta"),
        # frequencies past float32: NaN angles otherwise
        Err("theta-tiny", {"head_dim": 8, "rope_theta": 1e-300, "positions": 2}, {}, "/rope_theta"),
        Err("interleaved-string", {"head_dim": 8, "interleaved": "yes", "positions": 2}, {}, "/interleaved"),
        Err("rope-type-unknown", {"head_dim": 8, "positions": 2, "rope_scaling": {"rope_type": "warp"}}, {}, "/rope_scaling/rope_type"),
        Err("rope-type-and-type-disagree", {"head_dim": 8, "positions": 2, "rope_scaling": {"rope_type": "linear", "type": "yarn",
                                                          "factor": 2}}, {}, "/rope_scaling/type"),
        Err("linear-factor-missing", {"head_dim": 8, "positions": 2, "rope_scaling": {"rope_type": "linear"}}, {}, "/rope_scaling/factor"),
        Err("linear-factor-zero", {"head_dim": 8, "positions": 2, "rope_scaling": {"rope_type": "linear", "factor": 0}}, {},
         "/rope_scaling/factor"),
        Err("yarn-original-max-missing", {"head_dim": 8, "positions": 2, "rope_scaling": {"rope_type": "yarn", "factor": 2}}, {},
         "/rope_scaling/original_max_position_embeddings"),
        Err("llama3-low-over-high", {"head_dim": 8, "positions": 2, "rope_scaling": {"rope_type": "llama3", "factor": 8,
                                                          "original_max_position_embeddings": 64,
                                                          "low_freq_factor": 4, "high_freq_factor": 1}}, {},
         "/rope_scaling/high_freq_factor"),
        Err("longrope-short-factor-length", {"head_dim": 8, "positions": 2, "rope_scaling": {"rope_type": "longrope", "short_factor": [1, 1],
                                                          "long_factor": [1, 1, 1, 1],
                                                          "original_max_position_embeddings": 64}}, {},
         "/rope_scaling/short_factor"),
        Err("longrope-long-factor-negative", {"head_dim": 8, "positions": 2, "rope_scaling": {"rope_type": "longrope", "short_factor": [1, 1, 1, 1],
                                                          "long_factor": [1, 1, -1, 1], "factor": 2,
                                                          "original_max_position_embeddings": 64}}, {},
         "/rope_scaling/long_factor/2"),
        Err("yarn-original-max-disagrees", {"head_dim": 8, "positions": 2, "max_position_embeddings": 64, "original_max_position_embeddings": 16,
          "rope_scaling": {"rope_type": "yarn", "original_max_position_embeddings": 32}}, {},
         "/rope_scaling/original_max_position_embeddings"),
        Err("mrope-section-sum", {"head_dim": 8, "positions": [[1], [2], [3]], "rope_scaling": {"mrope_section": [1, 1, 1]}}, {},
         "/rope_scaling/mrope_section"),
        Err("mrope-positions-axes", {"head_dim": 8, "positions": [[1], [2]], "rope_scaling": {"mrope_section": [1, 1, 2]}}, {},
         "/positions"),
        Err("mrope-section-negative", {"head_dim": 8, "positions": [[1], [2], [3]], "rope_scaling": {"mrope_section": [1, -1, 4]}}, {},
         "/rope_scaling/mrope_section/1"),
        Err("vision2d-positions-1d", {"head_dim": 8, "positions": [1, 2], "rope_scaling": {"rope_type": "vision2d"}}, {}, "/positions"),
        Err("vision2d-positions-ragged", {"head_dim": 8, "positions": [[1, 2], [3]], "rope_scaling": {"rope_type": "vision2d"}}, {},
         "/positions/1"),
        Err("apply-head-dim-disagrees-with-q", {"head_dim": 6, "positions": 4}, {"q": q}, "/head_dim"),
        Err("apply-positions-disagree-with-q", {"positions": 5}, {"q": q}, "/positions"),
        Err("apply-k-rows-disagree", {"positions": 4}, {"q": q, "k": np.zeros((3, 8), np.float32)}, "/k"),
        Err("apply-layout-unknown", {"positions": 4, "layout": "hsbd"}, {"q": q}, "/layout"),
        Err("apply-q-rank-1", {"positions": 4}, {"q": np.zeros(8, np.float32)}, "/q"),
        Err("rope-scaling-number", {"head_dim": 8, "positions": 2, "rope_scaling": 3}, {}, "/rope_scaling"),
        Err("xpos-gamma-zero", {"head_dim": 8, "positions": 2, "rope_scaling": {"rope_type": "xpos", "gamma": 0}}, {"q": q[:2]},
         "/rope_scaling/gamma"),
    ]
    check_errors(server, "/v1/rope", cases)
    # The detail shows the value as it was sent.
    for pos, shown in ((0.5, "is 0.5"), (1e300, "is 1e300"), ("x", 'is "x"'), (None, "is null")):
        r = call(server, "/v1/rope", {"head_dim": 8, "positions": [0, pos]})
        bad(r, "/positions/1", what=repr(pos))
        assert r.problem["detail"].endswith(shown), r.problem


# ---------------------------------------------------------------------------
# parameters that stay in double, positions that default


def _not_float32(a):
    """a as float64, asserting float32 holds none of its values exactly."""
    a = np.asarray(a, dtype=np.float64)
    assert np.all(a.astype(np.float32).astype(np.float64) != a), a
    return a


def test_rope_longrope_lists_stay_double_near_4096(server):
    """LongRoPE factor lists that float32 cannot hold, at positions near
    4096, where a float32 rounding of a factor (relative 6e-8) moves an
    angle by about 2e-4: the answers match the float64 reference only if
    the lists reach the library whole.  Every request form (nested lists,
    flat data, float64 base64, safetensors), both lists (the switch at
    seq_len > original), tables, rotation and attention's rope."""
    g = rng(13)
    rot = 64
    short = _not_float32(1.0 + 3.0 * g.random(rot // 2))
    long_ = _not_float32(2.0 + 30.0 * g.random(rot // 2))
    s = {"short_factor": short, "long_factor": long_, "max_position_embeddings": 16384,
         "original_max_position_embeddings": 4096}
    base = {"head_dim": rot, "max_position_embeddings": 16384,
            "rope_scaling": {"rope_type": "longrope", "original_max_position_embeddings": 4096}}
    lists = {"rope_scaling.short_factor": short, "rope_scaling.long_factor": long_}
    q = g.normal(size=(1, 2, 14, rot)).astype(np.float32)
    for seq_len in (4096, 4110):
        pos = list(range(seq_len - 14, seq_len))
        inv, att = ref_rope_inv_freq(rot, 10000.0, "longrope", seq_len, **s)
        ang = ref_angles(pos, inv)
        c, sn = ref_tables(ang, att, False)
        # From float32-rounded lists the reference is far outside the
        # tolerance, so these comparisons can fail.
        s32 = dict(s, short_factor=short.astype(np.float32), long_factor=long_.astype(np.float32))
        c32, _ = ref_tables(ref_angles(pos, ref_rope_inv_freq(rot, 10000.0, "longrope", seq_len,
                                                              **s32)[0]), att, False)
        assert np.max(np.abs(c32 - c)) > 10 * ATOL
        for tr in TRANSPORTS:
            what = "%s seq_len %d" % (tr, seq_len)
            r = ok(call(server, "/v1/rope", dict(base, positions=pos, output_dtype="float64"), lists, tr),
                   what)
            # inv_freq is computed in double: float64 returns it whole.
            close(r.out["inv_freq"], inv, rtol=1e-14, atol=0, what=what + " inv_freq")
            # cos/sin: float32 roundings of values near 1 (and of the
            # attention factor's product) are the only error.
            close(r.out["cos"], c, rtol=0, atol=2.5e-7, what=what + " cos")
            close(r.out["sin"], sn, rtol=0, atol=2.5e-7, what=what + " sin")
        r = ok(call(server, "/v1/rope", dict(base, positions=pos), dict(lists, q=q), "b64"))
        close(r.out["q"], ref_rope_apply(q, ang, att, False), what="q at %d" % seq_len)
    # Attention's rope object reads the same lists.
    k = g.normal(size=(1, 1, 5, rot)).astype(np.float32)
    v = g.normal(size=(1, 1, 5, 8)).astype(np.float32)
    qp, kp = list(range(4105, 4107)), list(range(4100, 4105))
    q2 = q[:, :, :2]
    inv, att = ref_rope_inv_freq(rot, 10000.0, "longrope", 4110, **s)
    want, _, _ = ref_attention(ref_rope_apply(q2, ref_angles(qp, inv), att, False),
                               ref_rope_apply(k, ref_angles(kp, inv), att, False), v)
    rope = dict(base, seq_len=4110, q_positions=qp, k_positions=kp)
    r = ok(call(server, "/v1/attention", {"rope": rope},
                {"q": q2, "k": k, "v": v, "rope.rope_scaling.short_factor": short,
                 "rope.rope_scaling.long_factor": long_}))
    close(r.out["output"], want, what="attention")


def _seq_last(x, layout):
    """x with its sequence axis moved next to the last (bshd -> bhsd)."""
    return np.swapaxes(x, -3, -2) if layout == "bshd" and x.ndim > 2 else x


def test_rope_positions_default_to_the_sequence_axis(server):
    """q and/or k without positions: 0..n-1 along the sequence axis of the
    layout and rank, bit-identical to sending them; multi-axis RoPE reads
    it as the count n (every axis: text tokens, i.e. 1-D RoPE); vision2d,
    and tables without q or k, still need positions."""
    g = rng(21)
    S = 6
    sc = {"factor": 4, "original_max_position_embeddings": 64}
    req = {"head_dim": 16, "rope_scaling": dict(sc, rope_type="yarn")}
    inv, att, ang, rot = _rope_ref(req, "yarn", sc, list(range(S)), None)
    shapes = [("bhsd", (2, 3, S, 16)), ("bshd", (2, S, 3, 16)), ("bhsd", (3, S, 16)),
              ("bshd", (S, 3, 16)), ("bhsd", (S, 16)), ("bshd", (S, 16))]
    for layout, shape in shapes:
        what = "%s %s" % (layout, shape)
        x, y = (g.normal(size=shape).astype(np.float32) for _ in range(2))
        r = ok(call(server, "/v1/rope", dict(req, layout=layout), {"q": x, "k": y}), what)
        for name, t in (("q", x), ("k", y)):
            want = _seq_last(ref_rope_apply(_seq_last(t, layout), ang, att, False), layout)
            close(r.out[name], want, what="%s %s" % (what, name))
        same = ok(call(server, "/v1/rope", dict(req, layout=layout, positions=list(range(S))),
                       {"q": x, "k": y}), what)
        for name in ("q", "k"):
            assert np.array_equal(r.out[name], same.out[name]), what
    # k alone, and xpos (q and k decay with their own positions).
    y = g.normal(size=(2, S, 16)).astype(np.float32)
    r = ok(call(server, "/v1/rope", req, {"k": y}))
    close(r.out["k"], ref_rope_apply(y, ang, att, False), what="k alone")
    xp = {"head_dim": 16, "rope_scaling": {"rope_type": "xpos"}}
    r = ok(call(server, "/v1/rope", xp, {"q": y, "k": y}))
    same = ok(call(server, "/v1/rope", dict(xp, positions=list(range(S))), {"q": y, "k": y}))
    assert np.array_equal(r.out["q"], same.out["q"]) and np.array_equal(r.out["k"], same.out["k"])
    # M-RoPE: the count n, every axis 0..n-1 -- 1-D RoPE.
    mr = {"head_dim": 16, "rope_scaling": {"rope_type": "default", "mrope_section": [2, 3, 3]}}
    r = ok(call(server, "/v1/rope", mr, {"q": y}))
    for pos in (S, [list(range(S))] * 3):
        same = ok(call(server, "/v1/rope", dict(mr, positions=pos), {"q": y}))
        assert np.array_equal(r.out["q"], same.out["q"]), pos
    inv1, _ = ref_rope_inv_freq(16)
    close(r.out["q"], ref_rope_apply(y, ref_angles(list(range(S)), inv1), 1.0, False), what="mrope")
    # Still required: a vision grid has no default order; tables have no n.
    bad(call(server, "/v1/rope", {"head_dim": 16, "rope_scaling": {"rope_type": "vision2d"}},
             {"q": y}), "/positions")
    bad(call(server, "/v1/rope", {"head_dim": 16}), "/positions")


# ===========================================================================
# /v1/bias
# ===========================================================================

FIRE_LAYERS = [([[1.0], [-0.5], [2.0]], [0, 0.5, -0.2]),
               ([[0.3, -0.7, 0.1], [-0.2, 0.4, 0.5]], [0.05, -0.1])]


def _fire_tensors(layers, prefix=""):
    t = {}
    for i, (w, b) in enumerate(layers):
        t["%slayers.%d.weight" % (prefix, i)] = np.array(w, np.float32)
        if b is not None:  # a layer without a bias (nn.Linear(bias=False))
            t["%slayers.%d.bias" % (prefix, i)] = np.array(b, np.float32)
    return t


def _bias_cases():
    g = rng(5)
    table = g.normal(size=(32, 3)).astype(np.float32)
    r1, r2 = np.array([2.0, 0.5], np.float32), np.array([0.5, 1.5], np.float32)
    one = [([[0.7]], [0.1]), ([[1.5]], [-0.3])]
    nobias = [([[1.0], [-0.5]], None), ([[0.3, -0.7], [0.2, 0.4]], [0.2, -0.1])]
    return [
        # (request, tensors, reference kwargs)
        ({"method": "alibi", "num_heads": 6, "q_len": 5, "k_len": 7}, {}, {}),
        ({"method": "alibi", "num_heads": 5, "q_len": 4, "max_bias": 4, "causal": True, "q_offset": 0},
         {}, {"max_bias": 4}),
        ({"method": "alibi", "num_heads": 3, "q_len": 3, "k_len": 6, "window": [1, 2]},
         {"slopes": np.array([0.5, -0.25, 2.0], np.float32)}, {"slopes": [0.5, -0.25, 2.0]}),
        ({"method": "t5", "num_heads": 3, "q_len": 6, "k_len": 40, "return": ["bias", "buckets"]},
         {"table": table}, {"table": table}),
        ({"method": "t5", "num_heads": 3, "q_len": 9, "k_len": 9, "bidirectional": False, "causal": True,
          "relative_attention_max_distance": 20}, {"table": table},
         {"table": table, "bidirectional": False, "relative_attention_max_distance": 20}),
        ({"method": "fire", "num_heads": 2, "q_len": 5, "k_len": 8, "c": 0.1, "L": 4, "causal": True,
          "layers": [{}, {}]}, _fire_tensors(FIRE_LAYERS), {"c": 0.1, "L": 4, "layers": FIRE_LAYERS}),
        ({"method": "fire", "num_heads": 3, "q_len": 4, "k_len": 4, "c": 0.3, "L": 2, "eps": 0.1,
          "q_offset": 5, "layers": [{}, {}]}, _fire_tensors(one),
         {"c": 0.3, "L": 2, "eps": 0.1, "layers": one}),
        ({"method": "fire", "num_heads": 2, "q_len": 4, "k_len": 6, "c": 0.2, "L": 3,
          "layers": [{}, {}]}, _fire_tensors(nobias), {"c": 0.2, "L": 3, "layers": nobias}),
        ({"method": "kerple", "num_heads": 2, "q_len": 5, "k_len": 6, "causal": True},
         {"r1": r1, "r2": r2}, {"r1": r1, "r2": r2}),
        ({"method": "kerple", "variant": "power", "num_heads": 2, "q_len": 5, "sliding_window": 3},
         {"r1": r1, "r2": r2}, {"r1": r1, "r2": r2, "variant": "power"}),
        ({"method": "none", "num_heads": 2, "q_len": 3, "k_len": 5, "causal": True, "window": [-1, 0]},
         {}, {}),
    ]


def test_bias_every_method_and_form(server):
    for i, (req, tensors, kw) in enumerate(_bias_cases()):
        window = req.get("window")
        if "sliding_window" in req:
            window = [req["sliding_window"] - 1, 0]
        want = ref_bias(req["method"], req["num_heads"], req["q_len"], req.get("k_len", req["q_len"]),
                        req.get("q_offset"), req.get("causal", False), window, **kw)
        outs = req.get("return", ["bias"])

        def check(name, got, what, want=want, req=req):
            if name == "bias":
                close(got, want, what=what)
                return
            b32, b64 = ref_t5_buckets(req["q_len"], req["k_len"], req.get("q_offset"),
                                      nb=32, bidirectional=req.get("bidirectional", True),
                                      md=req.get("relative_attention_max_distance", 128))
            got = np.asarray(got)
            assert got.dtype.kind in "iu" or np.all(got == np.round(got)), what
            assert np.all((got == b32) | (got == b64)), "%s: buckets %s" % (what, got)
        if i in (0, 3, 5):
            each_form(server, "/v1/bias", req, tensors, outs, check)
        else:
            r = ok(call(server, "/v1/bias", req, tensors, "flat"), str(req))
            for name in outs:
                check(name, r.out[name], str(req))
            assert r.ignored == [], r.ignored
        # buckets are int32 in every transport
        if "buckets" in outs:
            r = ok(call(server, "/v1/bias", req, tensors, resp="safetensors"))
            assert r.out["buckets"].dtype == np.int32
            r = ok(call(server, "/v1/bias", req, tensors, resp="b64"))
            assert r.out["buckets"].dtype == np.int32


def test_bias_worked_examples(server):
    # 3: T5 buckets by relative position (rel = key - query).
    rels = [-200, -128, -127, -64, -32, -20, -16, -9, -8, -7, -1, 0, 1, 2, 7, 8, 9, 15, 16, 20, 32, 64,
            127, 128, 200]
    bidir = [15, 15, 15, 14, 12, 10, 10, 8, 8, 7, 1, 0, 17, 18, 23, 24, 24, 25, 26, 26, 28, 30, 31, 31, 31]
    causal = [31, 31, 31, 26, 21, 17, 16, 9, 8, 7, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    table = np.zeros((32, 1), np.float32)
    for bi, want in ((True, bidir), (False, causal)):
        r = ok(call(server, "/v1/bias", {"method": "t5", "num_heads": 1, "q_len": 1, "k_len": 401,
                                         "q_offset": 200, "bidirectional": bi, "return": ["buckets"]},
                    {"table": table}))
        got = r.out["buckets"][0]
        assert [int(got[200 + x]) for x in rels] == want, bi
    # 3: 6x6 matrices, nb=8, md=16, and the bias row for table 0.1*b - h.
    t8 = np.array([[0.1 * b - h for h in range(2)] for b in range(8)], np.float32)
    r = ok(call(server, "/v1/bias", {"method": "t5", "num_heads": 2, "q_len": 6,
                                     "relative_attention_max_distance": 16, "return": ["bias", "buckets"]},
                {"table": t8}))
    assert r.out["buckets"].tolist() == [[0, 5, 6, 6, 6, 6], [1, 0, 5, 6, 6, 6], [2, 1, 0, 5, 6, 6],
                                         [2, 2, 1, 0, 5, 6], [2, 2, 2, 1, 0, 5], [2, 2, 2, 2, 1, 0]]
    close(r.out["bias"][1, 5], [-0.8, -0.8, -0.8, -0.8, -0.9, -1])
    r = ok(call(server, "/v1/bias", {"method": "t5", "num_heads": 2, "q_len": 6, "bidirectional": False,
                                     "relative_attention_max_distance": 16, "return": ["buckets"]},
                {"table": t8}))
    assert r.out["buckets"].tolist() == [[0, 0, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0], [2, 1, 0, 0, 0, 0],
                                         [3, 2, 1, 0, 0, 0], [4, 3, 2, 1, 0, 0], [4, 4, 3, 2, 1, 0]]
    # 4: ALiBi slopes (as -bias at distance 1) for several head counts.
    slopes = {1: [0.00390625], 3: [0.0625, 0.00390625, 0.25],
              6: [0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125],
              12: [0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625,
                   0.7071068, 0.3535534, 0.1767767, 0.08838835]}
    for n, want in slopes.items():
        r = ok(call(server, "/v1/bias", {"method": "alibi", "num_heads": n, "q_len": 1, "k_len": 2}))
        close(-r.out["bias"][:, 0, 0], want, rtol=2e-6)
    r = ok(call(server, "/v1/bias", {"method": "alibi", "num_heads": 6, "max_bias": 16, "q_len": 1, "k_len": 2}))
    close(-r.out["bias"][:, 0, 0], [0.0625, 0.00390625, 0.0002441406, 1.525879e-05, 0.25, 0.015625], rtol=2e-6)
    r = ok(call(server, "/v1/bias", {"method": "alibi", "num_heads": 4, "q_len": 4}))
    close(r.out["bias"][0], [[0, -0.25, -0.5, -0.75], [-0.25, 0, -0.25, -0.5], [-0.5, -0.25, 0, -0.25],
                             [-0.75, -0.5, -0.25, 0]])
    r = ok(call(server, "/v1/bias", {"method": "alibi", "num_heads": 4, "q_len": 4, "causal": True}))
    inf = float("inf")
    close(r.out["bias"][3], [[0, -inf, -inf, -inf], [-0.00390625, 0, -inf, -inf],
                             [-0.0078125, -0.00390625, 0, -inf], [-0.01171875, -0.0078125, -0.00390625, 0]])
    # 5: FIRE (causal; masked cells -inf).
    r = ok(call(server, "/v1/bias", {"method": "fire", "num_heads": 2, "q_len": 5, "c": 0.1, "L": 4,
                                     "causal": True, "layers": [{}, {}]}, _fire_tensors(FIRE_LAYERS)))
    h0 = [[-0.3], [-0.07922634, -0.3], [0.1405828, -0.07922634, -0.3],
          [0.3427876, 0.1405828, -0.07922634, -0.3], [0.53, 0.3427876, 0.1405828, -0.07922634, -0.3]]
    h1 = [[0.1], [0.1699579, 0.1], [0.3251173, 0.1699579, 0.1], [0.4678501, 0.3251173, 0.1699579, 0.1],
          [0.6, 0.4678501, 0.3251173, 0.1699579, 0.1]]
    for h, rows in ((0, h0), (1, h1)):
        want = [row + [-inf] * (5 - len(row)) for row in rows]
        close(r.out["bias"][h], want, rtol=2e-6, what="fire head %d" % h)
    # 11: Kerple.
    r = ok(call(server, "/v1/bias", {"method": "kerple", "num_heads": 1, "q_len": 5, "causal": True},
                {"r1": np.array([2.0], np.float32), "r2": np.array([0.5], np.float32)}))
    close(r.out["bias"][0, 4], [-2.197225, -1.832581, -1.386294, -0.8109302, 0], rtol=2e-6)
    r = ok(call(server, "/v1/bias", {"method": "kerple", "variant": "power", "num_heads": 1, "q_len": 5},
                {"r1": np.array([1.0], np.float32), "r2": np.array([1.5], np.float32)}))
    close(r.out["bias"][0, 4], [-8, -5.196152, -2.828427, -1, 0], rtol=2e-6)


def _png_chunks(body):
    assert body[:8] == b"\x89PNG\r\n\x1a\n", body[:8]
    chunks, i = [], 8
    while i < len(body):
        n = struct.unpack(">I", body[i:i + 4])[0]
        kind = body[i + 4:i + 8]
        chunks.append((kind, body[i + 8:i + 8 + n]))
        assert zlib.crc32(body[i + 4:i + 8 + n]) == struct.unpack(">I", body[i + 8 + n:i + 12 + n])[0]
        i += 12 + n
    return chunks


def test_bias_png(server):
    req = {"method": "alibi", "num_heads": 4, "q_len": 6, "k_len": 9, "causal": True}
    pics = []
    for head in (0, 3):
        r = ok(call(server, "/v1/bias", dict(req, head=head), resp="png"))
        assert r.headers["content-type"].startswith("image/png")
        chunks = _png_chunks(r.body)
        assert chunks[0][0] == b"IHDR" and chunks[-1][0] == b"IEND"
        w, h = struct.unpack(">II", chunks[0][1][:8])
        assert w >= 1 and h >= 1
        zlib.decompress(b"".join(c for k, c in chunks if k == b"IDAT"))
        pics.append(r.body)
    assert pics[0] != pics[1], "heads 0 and 3 drew the same picture"
    # safetensors requests can ask for a picture too; buckets alone draw buckets.
    r = ok(call(server, "/v1/bias", {"method": "t5", "num_heads": 2, "q_len": 4, "return": ["buckets"]},
                {"table": np.ones((32, 2), np.float32)}, "safetensors", "png"))
    _png_chunks(r.body)
    bad(call(server, "/v1/bias", dict(req, head=4), resp="png"), "/head")
    # PNG is offered by /v1/bias and /v1/attention only.
    r = call(server, "/v1/rope", {"head_dim": 4, "positions": 2}, resp="png")
    assert r.status == 406, r.status


def test_bias_errors(server):
    t = np.zeros((32, 2), np.float32)
    base = {"num_heads": 2, "q_len": 3}
    cases = [
        Err("method-missing", {"num_heads": 2, "q_len": 3}, {}, "/method"),
        Err("method-unknown", {"method": "rope", "num_heads": 2, "q_len": 3}, {}, "/method"),
        Err("alibi-num-heads-missing", {"method": "alibi", "q_len": 3}, {}, "/num_heads"),
        Err("alibi-num-heads-zero", {"method": "alibi", "num_heads": 0, "q_len": 3}, {}, "/num_heads"),
        Err("alibi-q-len-missing", {"method": "alibi", "num_heads": 2}, {}, "/q_len"),
        Err("alibi-k-len-zero", {"method": "alibi", "num_heads": 2, "q_len": 3, "k_len": 0}, {}, "/k_len"),
        Err("alibi-q-offset-fractional", {"method": "alibi", "num_heads": 2, "q_len": 3, "q_offset": 0.5}, {}, "/q_offset"),
        Err("alibi-causal-string", {"method": "alibi", "num_heads": 2, "q_len": 3, "causal": "no"}, {}, "/causal"),
        Err("alibi-max-bias-negative", {"method": "alibi", "num_heads": 2, "q_len": 3, "max_bias": -1}, {}, "/max_bias"),
        Err("alibi-slopes-count", {"method": "alibi", "num_heads": 2, "q_len": 3}, {"slopes": np.ones(3, np.float32)}, "/slopes"),
        Err("alibi-return-buckets", {"method": "alibi", "num_heads": 2, "q_len": 3, "return": ["buckets"]}, {}, "/return"),
        Err("return-unknown-entry", {"method": "alibi", "num_heads": 2, "q_len": 3, "return": ["bias", "scores"]}, {}, "/return/1"),
        Err("return-empty", {"method": "alibi", "num_heads": 2, "q_len": 3, "return": []}, {}, "/return"),
        Err("window-one-entry", {"method": "alibi", "num_heads": 2, "q_len": 3, "window": [1]}, {}, "/window"),
        Err("window-negative", {"method": "alibi", "num_heads": 2, "q_len": 3, "window": [1, -2]}, {}, "/window/1"),
        Err("window-and-sliding-window", {"method": "alibi", "num_heads": 2, "q_len": 3, "window": [1, 0], "sliding_window": 2}, {},
         "/sliding_window"),
        Err("sliding-window-zero", {"method": "alibi", "num_heads": 2, "q_len": 3, "sliding_window": 0}, {}, "/sliding_window"),
        Err("t5-table-missing", {"method": "t5", "num_heads": 2, "q_len": 3}, {}, "/table"),
        Err("t5-table-heads-disagree", {"method": "t5", "num_heads": 3, "q_len": 3}, {"table": t}, "/table"),
        Err("t5-max-distance", {"method": "t5", "num_heads": 2, "q_len": 3, "relative_attention_max_distance": 8}, {"table": t},
         "/relative_attention_max_distance"),
        Err("t5-num-buckets-disagree", {"method": "t5", "num_heads": 2, "q_len": 3, "relative_attention_num_buckets": 16}, {"table": t},
         "/relative_attention_num_buckets"),
        Err("fire-c-missing", {"method": "fire", "num_heads": 2, "q_len": 3, "L": 4, "layers": [{}]},
         {"layers.0.weight": np.ones((2, 1), np.float32)}, "/c"),
        Err("fire-layers-missing", {"method": "fire", "num_heads": 2, "q_len": 3, "c": 0.1, "L": 4}, {}, "/layers"),
        Err("fire-weight-shape", {"method": "fire", "num_heads": 2, "q_len": 3, "c": 0.1, "L": 4, "layers": [{}]},
         {"layers.0.weight": np.ones((2, 3), np.float32)}, "/layers/0/weight"),
        Err("fire-weight-missing", {"method": "fire", "num_heads": 2, "q_len": 3, "c": 0.1, "L": 4, "layers": [{}]},
         {"layers.0.bias": np.ones(2, np.float32)}, "/layers/0/weight"),
        Err("fire-weight-rows", {"method": "fire", "num_heads": 2, "q_len": 3, "c": 0.1, "L": 4, "layers": [{}]},
         {"layers.0.weight": np.ones((3, 1), np.float32)}, "/layers/0/weight"),
        Err("fire-layer-not-object", {"method": "fire", "num_heads": 2, "q_len": 3, "c": 0.1, "L": 4, "layers": [3]}, {}, "/layers/0"),
        Err("fire-c-too-large", {"method": "fire", "num_heads": 2, "q_len": 3, "c": 1e308, "L": 4, "layers": [{}]},
         {"layers.0.weight": np.ones((2, 1), np.float32)}, "/c"),
        Err("kerple-r2-missing", {"method": "kerple", "num_heads": 2, "q_len": 3}, {"r1": np.ones(2, np.float32)}, "/r2"),
        Err("kerple-r2-negative", {"method": "kerple", "num_heads": 2, "q_len": 3},
         {"r1": np.ones(2, np.float32), "r2": np.array([1, -1], np.float32)}, "/r2/1"),
        Err("kerple-power-r2-over-2", {"method": "kerple", "num_heads": 2, "q_len": 3, "variant": "power"},
         {"r1": np.ones(2, np.float32), "r2": np.array([1, 3], np.float32)}, "/r2/1"),
        Err("kerple-variant-unknown", {"method": "kerple", "num_heads": 2, "q_len": 3, "variant": "exp"},
         {"r1": np.ones(2, np.float32), "r2": np.ones(2, np.float32)}, "/variant"),
    ]
    del base
    check_errors(server, "/v1/bias", cases, transports=("nested", "safetensors"))


def test_bias_parameter_lists_stay_double(server):
    """Kerple's r1/r2 and FIRE's MLP are evaluated in double, from the
    lists as sent: a power variant at distances near 2^40 (where a float32
    r2 is off by ~1.3e-6 relative) and an MLP whose output cancels (float32
    weights: ~1e-4) match float64 to float32's rounding of the result.
    ALiBi's slopes are rounded once: within two float32 roundings."""
    pq, j = geometry(2, 3, 2 ** 40)
    d = np.abs(pq - j).astype(np.float64)
    r1, r2 = _not_float32([0.7, 1.1]), _not_float32([1.3, 1.7])
    want = -r1[:, None, None] * d[None] ** r2[:, None, None]
    narrow = -r1[:, None, None] * d[None] ** r2.astype(np.float32).astype(np.float64)[:, None, None]
    assert np.max(np.abs(narrow / want - 1)) > 1e-6
    req = {"method": "kerple", "variant": "power", "num_heads": 2, "q_len": 2, "k_len": 3,
           "q_offset": 2 ** 40}
    for tr in TRANSPORTS:
        r = ok(call(server, "/v1/bias", req, {"r1": r1, "r2": r2}, tr), tr)
        close(r.out["bias"], want, rtol=3e-7, atol=0, what="kerple " + tr)

    layers = [([[1.0], [1.0000001]], [0.1, 0.1000001]), ([[1000.0, -1000.0]], [0.25])]
    tensors = {}
    for i, (w, b) in enumerate(layers):
        tensors["layers.%d.weight" % i] = np.array(w, np.float64)
        tensors["layers.%d.bias" % i] = np.array(b, np.float64)
    req = {"method": "fire", "num_heads": 3, "q_len": 20, "k_len": 20, "c": 0.5, "L": 8,
           "causal": True, "layers": [{}, {}]}
    want = ref_bias("fire", 3, 20, 20, causal=True, c=0.5, L=8, layers=layers)
    f32 = [(np.float32(w), np.float32(b)) for w, b in layers]
    narrow = ref_bias("fire", 3, 20, 20, causal=True, c=0.5, L=8, layers=f32)
    fin = np.isfinite(want)
    assert np.max(np.abs(narrow[fin] / want[fin] - 1)) > 1e-5
    for tr in TRANSPORTS:
        r = ok(call(server, "/v1/bias", req, tensors, tr), tr)
        close(r.out["bias"], want, rtol=1e-6, atol=0, what="fire " + tr)

    m = _not_float32([0.3, 1 / 3, 2 ** -8 + 2 ** -40])
    pq, j = geometry(3, 7, 123456789012)
    want = -m[:, None, None] * np.abs(pq - j).astype(np.float64)[None]
    r = ok(call(server, "/v1/bias", {"method": "alibi", "num_heads": 3, "q_len": 3, "k_len": 7,
                                     "q_offset": 123456789012}, {"slopes": m}))
    close(r.out["bias"], want, rtol=2.5e-7, atol=0, what="alibi")
    bad(call(server, "/v1/bias", {"method": "alibi", "num_heads": 2, "q_len": 3, "slopes": [1, 1e39]}),
        "/slopes/1")


def test_bias_t5_buckets_without_a_table(server):
    """return: ["buckets"] needs no table: 32 buckets unless
    relative_attention_num_buckets says otherwise, against Hugging Face's
    _relative_position_bucket written above, and the same as a table of
    that many rows gives.  Bias values still need the table."""
    cases = [({}, 32, True, 128),
             ({"relative_attention_num_buckets": 64, "bidirectional": False,
               "relative_attention_max_distance": 300}, 64, False, 300),
             ({"relative_attention_num_buckets": 8}, 8, True, 128)]
    for kw, nb, bidir, md in cases:
        for q_len, k_len, q_offset in ((7, 300, None), (3, 500, 0), (1, 1001, 500)):
            req = dict(kw, method="t5", num_heads=2, q_len=q_len, k_len=k_len, **{"return": ["buckets"]})
            if q_offset is not None:
                req["q_offset"] = q_offset
            want, _ = ref_t5_buckets(q_len, k_len, q_offset, nb=nb, bidirectional=bidir, md=md)
            r = ok(call(server, "/v1/bias", req), str(req))
            assert list(r.out) == ["buckets"], list(r.out)
            assert np.array_equal(r.out["buckets"], want), req
            t = ok(call(server, "/v1/bias", req, {"table": np.zeros((nb, 2), np.float32)}, "b64"))
            assert np.array_equal(t.out["buckets"], want), req
    req = {"method": "t5", "num_heads": 2, "q_len": 8, "k_len": 8, "return": ["buckets"]}
    r = call(server, "/v1/bias", req, resp="png")
    assert r.status == 200 and r.body[:8] == b"\x89PNG\r\n\x1a\n", r.status
    table = {"table": np.zeros((32, 2), np.float32)}
    bad(call(server, "/v1/bias", dict(req, **{"return": ["bias", "buckets"]})), "/table")
    bad(call(server, "/v1/bias", dict(req, relative_attention_num_buckets=2)),
        "/relative_attention_num_buckets")
    bad(call(server, "/v1/bias", dict(req, relative_attention_num_buckets=16), table),
        "/relative_attention_num_buckets")
    q, k, v = _qkv(2, Hq=2, Hkv=1)
    bad(call(server, "/v1/attention", {"bias": {"method": "t5"}}, {"q": q, "k": k, "v": v}),
        "/bias/table")


# ===========================================================================
# /v1/attention
# ===========================================================================

def _qkv(seed, B=2, Hq=4, Hkv=2, Nq=3, Nk=5, D=8, Dv=6):
    g = rng(seed)
    return (g.normal(size=(B, Hq, Nq, D)).astype(np.float32),
            g.normal(size=(B, Hkv, Nk, D)).astype(np.float32),
            g.normal(size=(B, Hkv, Nk, Dv)).astype(np.float32))


def _attn_check(server, params, tensors, want, transport="nested", resp="json", what=""):
    r = ok(call(server, "/v1/attention", params, tensors, transport, resp), what)
    for name, arr in want.items():
        close(r.out[name], arr, what="%s %s" % (what, name))
    return r


def test_attention_every_form(server):
    q, k, v = _qkv(6)
    ab = rng(7).normal(size=(3, 5)).astype(np.float32)
    table = rng(8).normal(size=(16, 4)).astype(np.float32)
    params = {"causal": True, "softcap": 2.0, "return": ["output", "lse", "weights"],
              "bias": {"method": "t5", "relative_attention_max_distance": 20}}
    tensors = {"q": q, "k": k, "v": v, "attn_bias": ab, "bias.table": table}
    bias = ref_bias("t5", 4, 3, 5, mask=False, table=table, relative_attention_max_distance=20)
    o, lse, w = ref_attention(q, k, v, causal=True, softcap=2.0, bias=bias, attn_bias=ab)
    want = {"output": o, "lse": lse, "weights": w}

    def check(name, got, what):
        close(got, want[name], what=what)
    each_form(server, "/v1/attention", params, tensors, ["output", "lse", "weights"], check)
    # A safetensors body may keep nested tensors as JSON inside "params".
    mixed = copy.deepcopy(params)
    mixed["bias"]["table"] = json_tensor(table, "flat")
    r = ok(call(server, "/v1/attention", mixed, {"q": q, "k": k, "v": v, "attn_bias": ab}, "safetensors"))
    for name in want:
        close(r.out[name], want[name], what="mixed " + name)
    # The JSON and safetensors transports give bit-identical results.
    a = ok(call(server, "/v1/attention", params, tensors, "nested", "safetensors"))
    b = ok(call(server, "/v1/attention", params, tensors, "safetensors", "json"))
    for name in want:  # JSON numbers are the shortest float32 decimals
        assert np.array_equal(a.out[name], b.out[name].astype(np.float32)), name


def test_attention_masks_and_options(server):
    q, k, v = _qkv(9)
    B, Hq, Nq, Nk = 2, 4, 3, 5
    ab4 = rng(10).normal(size=(B, 1, Nq, Nk)).astype(np.float32)
    cases = [
        ({}, {}, {}),
        ({"causal": True}, {}, {"causal": True}),
        ({"causal": True, "q_offset": 0}, {}, {"causal": True, "q_offset": 0}),
        ({"causal": True, "q_offset": 4}, {}, {"causal": True, "q_offset": 4}),
        ({"window": [1, 0]}, {}, {"window": (1, 0)}),
        ({"window": [0, 1], "q_offset": 1}, {}, {"window": (0, 1), "q_offset": 1}),
        ({"sliding_window": 2, "causal": True}, {}, {"window": (1, 0), "causal": True}),
        ({"kv_lens": [5, 2]}, {}, {"kv_lens": [5, 2]}),
        ({"kv_lens": [0, 3], "causal": True}, {}, {"kv_lens": [0, 3], "causal": True}),
        ({"scale": 1.0, "softcap": 0.5}, {}, {"scale": 1.0, "softcap": 0.5}),
        ({}, {"attn_bias": ab4}, {"attn_bias": ab4}),
        ({"bias": {"method": "alibi"}, "causal": True}, {},
         {"bias": ref_bias("alibi", Hq, Nq, Nk, mask=False), "causal": True}),
        ({"bias": {"method": "alibi", "max_bias": 2}}, {"bias.slopes": np.array([1, 2, 3, 4], np.float32)},
         {"bias": ref_bias("alibi", Hq, Nq, Nk, mask=False, slopes=[1, 2, 3, 4])}),
        ({"bias": {"method": "kerple", "variant": "power"}},
         {"bias.r1": np.array([1, 2, 3, 4], np.float32), "bias.r2": np.array([0.5, 1, 1.5, 2], np.float32)},
         {"bias": ref_bias("kerple", Hq, Nq, Nk, mask=False, variant="power", r1=[1, 2, 3, 4],
                           r2=[0.5, 1, 1.5, 2])}),
        ({"bias": {"method": "fire", "c": 0.1, "L": 4, "layers": [{}, {}]}, "causal": True},
         _fire_tensors([([[1.0], [-0.5]], [0, 0.5]), ([[0.3, -0.7], [-0.2, 0.4], [1, 1], [0, 2]],
                                                        [0.05, -0.1, 0, 1])], "bias."),
         {"bias": ref_bias("fire", Hq, Nq, Nk, mask=False, c=0.1, L=4,
                           layers=[([[1.0], [-0.5]], [0, 0.5]),
                                   ([[0.3, -0.7], [-0.2, 0.4], [1, 1], [0, 2]], [0.05, -0.1, 0, 1])]),
          "causal": True}),
        ({"bias": {"method": "none"}, "causal": True}, {}, {"causal": True}),
    ]
    for params, extra, kw in cases:
        o, lse, w = ref_attention(q, k, v, **kw)
        t = dict({"q": q, "k": k, "v": v}, **extra)
        _attn_check(server, dict(params, **{"return": ["output", "lse", "weights"]}), t,
                    {"output": o, "lse": lse, "weights": w}, "b64", what=str(params))
    # A fully masked batch entry: output 0, weights 0, lse -inf (never NaN).
    r = ok(call(server, "/v1/attention", {"kv_lens": [0, 5], "return": ["output", "lse", "weights"]},
                {"q": q, "k": k, "v": v}))
    assert np.all(r.out["output"][0] == 0) and np.all(r.out["weights"][0] == 0)
    assert np.all(np.isneginf(r.out["lse"][0]))
    # "return" names exactly the outputs sent.
    for ret in (["lse"], ["weights"], ["lse", "weights"], ["output", "lse"]):
        r = ok(call(server, "/v1/attention", {"return": ret}, {"q": q, "k": k, "v": v}))
        assert set(r.out) == set(ret), (ret, set(r.out))
        if "lse" in ret:
            close(r.out["lse"], ref_attention(q, k, v)[1], what="lse of %s" % ret)
    r = ok(call(server, "/v1/attention", {}, {"q": q, "k": k, "v": v}))
    assert set(r.out) == {"output"}
    # lse alone is one tensor: a .npy answer needs no "output" pick.
    r = ok(call(server, "/v1/attention", {"return": ["lse"]}, {"q": q, "k": k, "v": v}, "b64", "npy"))
    close(r.out["npy"], ref_attention(q, k, v)[1], what="lse as .npy")


def test_attention_layouts_ranks_and_rope(server):
    q, k, v = _qkv(11, B=1, Hq=2, Hkv=1, Nq=4, Nk=4, D=8, Dv=8)
    o, lse, w = ref_attention(q, k, v, causal=True)
    # bshd: output in bshd; lse/weights head-major.
    sw = lambda a: np.swapaxes(a, 1, 2)  # noqa: E731
    _attn_check(server, {"layout": "bshd", "causal": True, "return": ["output", "lse", "weights"]},
                {"q": sw(q), "k": sw(k), "v": sw(v)}, {"output": sw(o), "lse": lse, "weights": w},
                "flat", what="bshd")
    # rank 3 (batch 1) and rank 2 (one head): outputs keep the rank.
    _attn_check(server, {"causal": True, "return": ["output", "lse", "weights"]}, {"q": q[0], "k": k[0], "v": v[0]},
                {"output": o[0], "lse": lse[0], "weights": w[0]}, what="rank 3")
    _attn_check(server, {"layout": "bshd", "causal": True}, {"q": sw(q)[0], "k": sw(k)[0], "v": sw(v)[0]},
                {"output": sw(o)[0]}, what="rank 3 bshd")
    # Each tensor's rank is its own: multi-query k, v [Nk, D] beside q
    # [Hq, Nq, D] or [1, Hq, Nq, D]; outputs take q's rank.
    _attn_check(server, {"causal": True, "return": ["output", "lse"]},
                {"q": q[0], "k": k[0, 0], "v": v[0, 0]}, {"output": o[0], "lse": lse[0]},
                what="q rank 3, k and v rank 2")
    _attn_check(server, {"causal": True}, {"q": q, "k": k[0], "v": v[0, 0]}, {"output": o},
                "safetensors", what="q rank 4, k rank 3, v rank 2")
    _attn_check(server, {"layout": "bshd", "causal": True},
                {"q": sw(q), "k": k[0, 0], "v": sw(v)[0]}, {"output": sw(o)}, what="bshd mixed")
    o2, lse2, w2 = ref_attention(q[:, :1], k, v, causal=True)
    _attn_check(server, {"causal": True, "return": ["output", "lse", "weights"]}, {"q": q[0, 0], "k": k[0, 0], "v": v[0, 0]},
                {"output": o2[0, 0], "lse": lse2[0, 0], "weights": w2[0, 0]}, what="rank 2")
    # RoPE fused in: default positions q_offset + r and j; explicit ones.
    q, k, v = _qkv(12, B=1, Hq=2, Hkv=2, Nq=3, Nk=5, D=8, Dv=4)
    for rope, qpos, kpos, inter in [
            ({}, [2, 3, 4], [0, 1, 2, 3, 4], False),
            ({"interleaved": True, "q_positions": [7, 8, 9], "k_positions": [0, 2, 4, 6, 8]},
             [7, 8, 9], [0, 2, 4, 6, 8], True),
            ({"rope_scaling": {"rope_type": "linear", "factor": 2}, "q_positions": 3}, [0, 1, 2],
             [0, 1, 2, 3, 4], False)]:
        s = {"factor": 2} if "rope_scaling" in rope else {}
        inv, att = ref_rope_inv_freq(8, 10000.0, "linear" if s else "default", None, **s)
        rq = ref_rope_apply(q, ref_angles(qpos, inv), att, inter)
        rk = ref_rope_apply(k, ref_angles(kpos, inv), att, inter)
        o, lse, w = ref_attention(rq, rk, v)
        _attn_check(server, {"rope": rope, "return": ["output", "weights"]}, {"q": q, "k": k, "v": v},
                    {"output": o, "weights": w}, "safetensors", what="rope %s" % rope)
    # YaRN's attention factor scales q and k (so the logits by its square).
    inv, att = ref_rope_inv_freq(8, 10000.0, "yarn", None, factor=4, original_max_position_embeddings=16)
    rq = ref_rope_apply(q, ref_angles([2, 3, 4], inv), att, False)
    rk = ref_rope_apply(k, ref_angles(range(5), inv), att, False)
    o, _, _ = ref_attention(rq, rk, v, causal=True)
    _attn_check(server, {"causal": True, "rope": {"head_dim": 8, "rope_scaling": {
        "rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 16}}},
        {"q": q, "k": k, "v": v}, {"output": o}, what="yarn rope")


def test_attention_worked_examples(server):
    # docs/methods.md#example-12-attention: bshd, q (1,3,2,4), k, v (1,4,1,4), GQA.
    q = ((np.arange(24) % 7 - 3) / 4).reshape(1, 3, 2, 4).astype(np.float32)
    k = ((np.arange(16) % 5 - 2) / 3).reshape(1, 4, 1, 4).astype(np.float32)
    v = (((3 * np.arange(16)) % 11 - 5) / 5).reshape(1, 4, 1, 4).astype(np.float32)
    T = {"q": q, "k": k, "v": v}
    inf = float("inf")
    ex = {
        "12a": ({}, {},
                [[-0.7447183, -0.1447183, 0.4552817, 0.1461564], [-0.7336717, -0.1336717, 0.4663283, 0.1101271],
                 [-0.7225117, -0.1225117, 0.4774883, 0.07366314]],
                [[-0.6231629, -0.02316295, 0.5768371, -0.2503358], [-0.6582434, -0.05824341, 0.5417566, -0.2519838],
                 [-0.717824, -0.117824, 0.482176, 0.1614904]],
                [[0.3477538, 0.2390074, 0.2023154, 0.2109233], [0.3293637, 0.2359994, 0.2082687, 0.2263681],
                 [0.3112252, 0.2324907, 0.2139017, 0.2423824]]),
        "12b": ({"causal": True}, {},
                [[-0.9185333, -0.3185333, 0.2814667, 0.8814667], [-0.8313056, -0.2313056, 0.3686944, 0.3764344],
                 [-0.7225117, -0.1225117, 0.4774883, 0.07366314]],
                [[-0.8958357, -0.2958357, 0.3041643, 0.9041643], [-0.7314523, -0.1314523, 0.4685477, -0.09662785],
                 [-0.717824, -0.117824, 0.482176, 0.1614904]],
                [[0.5926666, 0.4073334, 0, 0], [0.425737, 0.3050539, 0.2692091, 0],
                 [0.3112252, 0.2324907, 0.2139017, 0.2423824]]),
        "12b'": ({"causal": True, "q_offset": 0}, {},
                 [[-1, -0.4, 0.2, 0.8], [-0.916514, -0.316514, 0.283486, 0.883486],
                  [-0.825692, -0.225692, 0.374308, 0.3531717]], None,
                 [[1, 0, 0, 0], [0.5825702, 0.4174298, 0, 0], [0.4107946, 0.3068707, 0.2823347, 0]]),
        "12c": ({"causal": True, "bias": {"method": "alibi"}}, {},
                [[-0.9154991, -0.3154991, 0.2845009, 0.8845009], [-0.8228671, -0.2228671, 0.3771329, 0.3413144],
                 [-0.70564, -0.10564, 0.49436, 0.01846205]],
                [[-0.8956408, -0.2956408, 0.3043592, 0.9043592], [-0.7309848, -0.1309848, 0.4690152, -0.09915034],
                 [-0.7170635, -0.1170635, 0.4829365, 0.1585922]],
                [[0.5774954, 0.4225046, 0, 0], [0.4033437, 0.3076479, 0.2890084, 0],
                 [0.2846238, 0.2263317, 0.2216652, 0.2673793]]),
        "12d": ({"causal": True, "softcap": 0.5}, {},
                [[-0.916496, -0.316496, 0.283504, 0.883504], [-0.829235, -0.229235, 0.370765, 0.3689597],
                 [-0.721693, -0.121693, 0.478307, 0.07011825]],
                [[-0.896727, -0.296727, 0.303273, 0.903273], [-0.7507085, -0.1507085, 0.4492915, 0.02405943],
                 [-0.7120486, -0.1120486, 0.4879514, 0.1048378]],
                [[0.5824799, 0.4175201, 0, 0], [0.4197228, 0.3067293, 0.2735479, 0],
                 [0.3089686, 0.2327638, 0.2160315, 0.2422362]]),
        "12e": ({"sliding_window": 2}, {},
                [[-0.9185333, -0.3185333, 0.2814667, 0.8814667], [-0.7062419, -0.1062419, 0.4937581, 0.06241875],
                 [-0.4937581, 0.1062419, 0.7062419, -0.8937581]],
                [[-0.8958357, -0.2958357, 0.3041643, 0.9041643], [-0.669729, -0.06972903, 0.530271, -0.3027097],
                 [-0.5144808, 0.08551918, 0.6855192, -0.9144808]],
                [[0.5926666, 0.4073334, 0, 0], [0, 0.5312094, 0.4687906, 0], [0, 0, 0.4687906, 0.5312094]]),
        "12f": ({"scale": 1.0}, {"attn_bias": np.array([0, 0, -inf, 0], np.float32)},
                [[-0.828718, -0.228718, 0.371282, 0.5314849], [-0.8055663, -0.2055663, 0.3944337, 0.4711107],
                 [-0.7803137, -0.1803137, 0.4196863, 0.4032266]],
                [[-0.5351498, 0.06485016, 0.6648502, -0.3304352], [-0.6714037, -0.07140368, 0.5285963, 0.2249564],
                 [-0.7737543, -0.1737543, 0.4262457, 0.710066]],
                [[0.5434056, 0.2566866, 0, 0.1999078], [0.5035795, 0.2585463, 0, 0.2378741],
                 [0.4619864, 0.2578047, 0, 0.2802089]]),
        "12g": ({"causal": True}, {"attn_bias": np.array([-inf, -inf, -inf, 0], np.float32)},
                [[0, 0, 0, 0], [0, 0, 0, 0], [-0.4, 0.2, 0.8, -0.8]],
                [[0, 0, 0, 0], [0, 0, 0, 0], [-0.4, 0.2, 0.8, -0.8]],
                [[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 1]]),
    }
    for name, (params, extra, out0, out1, w0) in ex.items():
        p = dict(params, layout="bshd", **{"return": ["weights", "lse", "output"]})
        r = ok(call(server, "/v1/attention", p, dict(T, **extra)), name)
        close(r.out["output"][0, :, 0], out0, rtol=2e-6, atol=2e-6, what=name + " head 0")
        if out1 is not None:
            close(r.out["output"][0, :, 1], out1, rtol=2e-6, atol=2e-6, what=name + " head 1")
        close(r.out["weights"][0, 0], w0, rtol=2e-6, atol=2e-6, what=name + " weights")
        if name == "12g":
            assert np.all(np.isneginf(r.out["lse"][0, :, :2])), r.out["lse"]


def test_attention_errors(server):
    q, k, v = _qkv(13, B=2, Hq=4, Hkv=2, Nq=3, Nk=5, D=8, Dv=6)
    T = {"q": q, "k": k, "v": v}
    cases = [
        Err("q-missing", {}, {"k": k, "v": v}, "/q"),
        Err("k-missing", {}, {"q": q, "v": v}, "/k"),
        Err("v-missing", {}, {"q": q, "k": k}, "/v"),
        Err("k-head-dim-disagrees", {}, dict(T, k=k[:, :, :, :4]), "/k"),
        Err("v-keys-disagree", {}, dict(T, v=v[:, :, :4]), "/v"),
        Err("kv-heads-not-dividing", {}, dict(T, k=np.concatenate([k, k[:, :1]], 1), v=np.concatenate([v, v[:, :1]], 1)), "/k"),
        Err("q-rank-disagrees", {}, dict(T, q=q[0]), "/k"),
        Err("layout-unknown", {"layout": "sbhd"}, T, "/layout"),
        Err("scale-string", {"scale": "big"}, T, "/scale"),
        Err("softcap-negative", {"softcap": -1}, T, "/softcap"),
        # finite doubles out of float32's range (the scores would be NaN)
        Err("softcap-subnormal", {"softcap": 1e-320}, T, "/softcap"),
        Err("scale-huge", {"scale": 1e308}, T, "/scale"),
        Err("causal-integer", {"causal": 1}, T, "/causal"),
        Err("q-offset-string", {"q_offset": "end"}, T, "/q_offset"),
        Err("window-and-sliding-window", {"window": [1, 0], "sliding_window": 2}, T, "/sliding_window"),
        Err("window-three-entries", {"window": [1, 0, 3]}, T, "/window"),
        Err("window-negative", {"window": [-2, 0]}, T, "/window/0"),
        Err("kv-lens-count", {"kv_lens": [5]}, T, "/kv_lens"),
        Err("kv-lens-past-keys", {"kv_lens": [5, 6]}, T, "/kv_lens/1"),
        Err("kv-lens-negative", {"kv_lens": [-1, 2]}, T, "/kv_lens/0"),
        Err("return-unknown-entry", {"return": ["output", "probs"]}, T, "/return/1"),
        Err("attn-bias-shape", {}, dict(T, attn_bias=np.zeros((3, 4), np.float32)), "/attn_bias"),
        Err("bias-num-heads-given", {"bias": {"method": "alibi", "num_heads": 4}}, T, "/bias/num_heads"),
        Err("bias-causal-given", {"bias": {"method": "alibi", "causal": True}}, T, "/bias/causal"),
        Err("bias-q-len-given", {"bias": {"method": "alibi", "q_len": 3}}, T, "/bias/q_len"),
        Err("bias-window-given", {"bias": {"method": "alibi", "window": [1, 0]}}, T, "/bias/window"),
        Err("bias-causal-false-given", {"bias": {"causal": False}}, T, "/bias/causal"),
        Err("bias-method-missing", {"bias": {}}, T, "/bias/method"),
        Err("bias-t5-table-heads", {"bias": {"method": "t5"}}, dict(T, **{"bias.table": np.zeros((32, 3), np.float32)}), "/bias/table"),
        Err("bias-kerple-r2-count", {"bias": {"method": "kerple"}}, dict(T, **{"bias.r1": np.ones(4, np.float32),
                                                    "bias.r2": np.ones(3, np.float32)}), "/bias/r2"),
        Err("bias-string", {"bias": "alibi"}, T, "/bias"),
        Err("rope-positions-given", {"rope": {"positions": [0, 1, 2]}}, T, "/rope/positions"),
        Err("rope-q-given", {"rope": {"q": [1]}}, T, "/rope/q"),
        Err("rope-head-dim-disagrees", {"rope": {"head_dim": 4}}, T, "/rope/head_dim"),
        Err("rope-rotary-dim-odd", {"rope": {"rotary_dim": 3}}, T, "/rope/rotary_dim"),
        Err("rope-q-positions-count", {"rope": {"q_positions": [0, 1]}}, T, "/rope/q_positions"),
        Err("rope-k-position-fractional", {"rope": {"k_positions": [0, 1, 2, 3, 4.5]}}, T, "/rope/k_positions/4"),
        Err("rope-yarn-original-max-missing", {"rope": {"rope_scaling": {"rope_type": "yarn", "factor": 2}}}, T,
         "/rope/rope_scaling/original_max_position_embeddings"),
        Err("rope-dynamic-factor-string", {"rope": {"rope_scaling": {"rope_type": "dynamic", "factor": "2"}}}, T, "/rope/rope_scaling/factor"),
    ]
    check_errors(server, "/v1/attention", cases)


# ===========================================================================
# budgets, the ignored list, output dtypes
# ===========================================================================

def test_budgets_are_413_before_allocating(server, start):
    # The shared server (default --max-output-mb 1024): 4.5 GiB of bias.
    r = call(server, "/v1/bias", {"method": "alibi", "num_heads": 1200, "q_len": 1000, "k_len": 1000})
    assert r.status == 413, r.status
    r = call(server, "/v1/encodings", {"method": "sinusoidal", "positions": 2 ** 40, "dim": 2})
    assert r.status == 413, r.status
    small = start("--max-output-mb", "1", "--max-gflop", "0.001")
    q, k, v = _qkv(14, B=1, Hq=2, Hkv=2, Nq=4, Nk=4, D=8, Dv=8)
    ok(call(small, "/v1/attention", {}, {"q": q, "k": k, "v": v}))
    cases = [
        ("/v1/bias", {"method": "alibi", "num_heads": 2, "q_len": 400, "k_len": 400}, {}),
        ("/v1/bias", {"method": "t5", "num_heads": 1, "q_len": 600, "k_len": 600, "return": ["buckets"]},
         {"table": np.zeros((32, 1), np.float32)}),
        ("/v1/encodings", {"method": "sinusoidal", "positions": 300000, "dim": 2}, {}),
        ("/v1/rope", {"head_dim": 128, "positions": 3000}, {}),
        ("/v1/attention", {}, dict(zip("qkv", _qkv(15, B=1, Hq=4, Hkv=4, Nq=64, Nk=64, D=64, Dv=8)))),
        ("/v1/attention", {"return": ["weights"]},
         dict(zip("qkv", _qkv(16, B=1, Hq=1, Hkv=1, Nq=600, Nk=600, D=1, Dv=1)))),
    ]
    for route, params, tensors in cases:
        r = call(small, route, params, tensors, "b64")
        assert r.status == 413, "%s %s: %d %s" % (route, params, r.status, r.body[:200])
        assert "max-" in r.problem["detail"], r.problem
    # output_dtype counts, with the float32 results converted from: 400x400
    # weights in float64 are 8 + 4 bytes a number, over 1 MiB; in float16
    # 2 + 4, under it.
    t = dict(zip("qkv", _qkv(17, B=1, Hq=1, Hkv=1, Nq=400, Nk=400, D=1, Dv=1)))
    ok(call(small, "/v1/attention", {"return": ["weights"], "output_dtype": "float16"}, t, "b64",
            resp="safetensors"))
    r = call(small, "/v1/attention", {"return": ["weights"], "output_dtype": "float64"}, t, "b64",
             resp="safetensors")
    assert r.status == 413, r.status
    # So does the response's form: 2 x 200 x 200 float32 numbers are 0.31 MiB
    # binary, 0.71 MiB in base64 (with the float32 results), but up to
    # 1.5 MiB as JSON text -- refused before computing, saying so.
    bias = {"method": "alibi", "num_heads": 2, "q_len": 200, "k_len": 200}
    ok(call(small, "/v1/bias", bias, resp="safetensors"))
    ok(call(small, "/v1/bias", bias, resp="b64"))
    r = call(small, "/v1/bias", bias)
    assert r.status == 413, r.status
    assert "as JSON text" in r.problem["detail"] and "b64" in r.problem["detail"], r.problem


def test_ignored_fields_are_listed(server):
    q, k, v = _qkv(18, B=1, Hq=2, Hkv=2, Nq=2, Nk=2, D=4, Dv=4)
    params = {"zzz": 1, "output_dtype": "float32", "encoding": "json",
              "rope": {"rope_theta": 100.0, "wibble": 2, "rope_scaling": {"rope_type": "linear", "factor": 2,
                                                                          "beta_fast": 3, "odd": 1}},
              "bias": {"method": "fire", "c": 0.1, "L": 2, "max_bias": 3,
                       "layers": [{"activation": "relu"}]}}
    tensors = {"q": q, "k": k, "v": v, "bias.layers.0.weight": np.ones((2, 1), np.float32),
               "bias.layers.0.bias": np.zeros(2, np.float32)}
    want = ["zzz", "rope.wibble", "rope.rope_scaling.beta_fast", "rope.rope_scaling.odd",
            "bias.max_bias", "bias.layers.0.activation"]
    for tr in ("nested", "safetensors"):
        r = ok(call(server, "/v1/attention", params, tensors, tr))
        assert sorted(r.ignored) == sorted(want), (tr, r.ignored)
    # A field given both as a safetensors tensor and in the params: 400.
    r = call(server, "/v1/attention", {"q": q.tolist()}, {"q": q, "k": k, "v": v}, "safetensors")
    assert r.status == 400 and r.problem["field"] == "/q", (r.status, r.body[:300])
    assert "given twice" in r.problem["detail"], r.problem
    r = call(server, "/v1/bias", {"method": "t5", "num_heads": 1, "q_len": 2,
                                  "table": [[0.0]] * 32},
             {"table": np.zeros((32, 1), np.float32)}, "safetensors")
    assert r.status == 400 and r.problem["field"] == "/table", (r.status, r.body[:300])
    # An unknown safetensors entry is listed by its name too.
    r = ok(call(server, "/v1/attention", {}, dict(q=q, k=k, v=v, foo=q, **{"bias.x": q}), "safetensors"))
    assert sorted(r.ignored) == ["bias.x", "foo"], r.ignored
    # Members of another method are ignored (and listed), not used.
    r = ok(call(server, "/v1/encodings", {"method": "integer", "positions": 2, "dim": 2, "base": 5,
                                          "layout": "concat"}))
    assert sorted(r.ignored) == ["base", "layout"], r.ignored
    close(r.out["encoding"], [[0, 0], [1, 1]])
    # A member name cannot break the header.
    r = ok(call(server, "/v1/bias", {"method": "none", "num_heads": 1, "q_len": 1, "a,b\r\nX-Evil: 1": 1}))
    assert r.headers["x-attnbias-ignored"] == "a%2Cb%0D%0AX-Evil:%201", r.headers
    assert "x-evil" not in r.headers


def test_output_dtypes(server):
    pos = [0, 3, 11]
    want = ref_sinusoidal(pos, 6)
    for dt, tol, npdt in (("float16", 1e-3, "float16"), ("bfloat16", 8e-3, None), ("float64", 1e-6, "float64")):
        for rs in ("json", "b64", "safetensors", "npy"):
            if rs == "npy" and npdt is None:
                r = call(server, "/v1/encodings", {"method": "sinusoidal", "positions": pos, "dim": 6,
                                                   "output_dtype": dt}, resp="npy")
                assert r.status == 406, r.status
                continue
            r = ok(call(server, "/v1/encodings", {"method": "sinusoidal", "positions": pos, "dim": 6,
                                                  "output_dtype": dt}, resp=rs), "%s %s" % (dt, rs))
            got = r.out["npy"] if rs == "npy" else r.out["encoding"]
            if rs in ("safetensors", "npy", "b64") and npdt:
                assert got.dtype == np.dtype(npdt), (dt, rs, got.dtype)
            close(got, want, rtol=tol, atol=tol, what="%s %s" % (dt, rs))
    # npy with several outputs needs "output".
    r = call(server, "/v1/rope", {"head_dim": 4, "positions": 2}, resp="npy")
    assert r.status == 406, r.status
    r = ok(call(server, "/v1/rope", {"head_dim": 4, "positions": [0, 1]}, resp="npy", pick="sin"))
    close(r.out["npy"], [[0, 0, 0, 0], [math.sin(1), math.sin(0.01), math.sin(1), math.sin(0.01)]])


# ===========================================================================
# GET /v1/methods against what the routes accept
# ===========================================================================

_Z = lambda *s: np.zeros(s).tolist()  # noqa: E731

# A valid value for parameters without a default, by (context, name) or name.
VALID = {
    "dim": 4, "offset": 0, "x": _Z(3, 4), "seq_len": 10, "max_position_embeddings": 64,
    "original_max_position_embeddings": 16, "rotary_dim": 8, "head_dim": 8, "factor": 2.0,
    "attention_factor": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0, "mrope_section": [1, 1, 2],
    "rope_scaling": {"rope_type": "default"}, "q": _Z(3, 8), "k": _Z(3, 8), "q_offset": 1,
    "k_len": 4, "window": [1, 0], "sliding_window": 2, "slopes": [1.0, 1.0],
    "relative_attention_num_buckets": 32, "scale": 0.5, "kv_lens": [3], "attn_bias": _Z(2, 3),
    "rope": {}, "bias": {"method": "none"}, "output": "encoding", "heads": [0],
    ("attention rope", "head_dim"): 4, ("attention rope", "rotary_dim"): 4,
    ("attention rope", "q_positions"): [0, 1], ("attention rope", "k_positions"): [0, 1, 2],
    ("attention rope", "mrope_section"): [1, 1, 0], ("encodings learned", "dim"): 2,
}

_ENC_BASE = {"sinusoidal": {"method": "sinusoidal", "positions": 3, "dim": 4},
             "learned": {"method": "learned", "positions": [0, 1], "table": _Z(4, 2)},
             "integer": {"method": "integer", "positions": 3, "dim": 2},
             "binary": {"method": "binary", "positions": 3, "dim": 3}}
_ROPE_BASE = {"head_dim": 8, "positions": [0, 1, 5]}
_ROPE_SCALING = {
    "default": {}, "linear": {"factor": 2}, "ntk": {"factor": 2}, "dynamic": {"factor": 2},
    "yarn": {"factor": 4, "original_max_position_embeddings": 16},
    "llama3": {"factor": 8, "original_max_position_embeddings": 16},
    "longrope": {"short_factor": [1, 1, 1, 1], "long_factor": [1, 2, 3, 4],
                 "original_max_position_embeddings": 16},
    "vision2d": {}, "xpos": {}}
_BIAS_BASE = {"method": "alibi", "num_heads": 2, "q_len": 3, "k_len": 4}
_BIAS_METHOD = {"none": {}, "alibi": {}, "t5": {"table": _Z(32, 2)}, "kerple": {"r1": [1, 1], "r2": [1, 1]},
                "fire": {"c": 0.1, "L": 4, "layers": [{"weight": [[1], [1]], "bias": [0, 0]}]}}
_ATTN_BASE = {"q": _Z(1, 2, 2, 4), "k": _Z(1, 2, 3, 4), "v": _Z(1, 2, 3, 4)}


def _rope_base(t):
    b = dict(_ROPE_BASE, rope_scaling=dict(_ROPE_SCALING[t], rope_type=t))
    if t == "dynamic":
        b["max_position_embeddings"] = 64
    if t == "longrope":
        b["max_position_embeddings"] = 64
    if t == "vision2d":
        b["positions"] = [[0, 1], [2, 3]]
    if t == "xpos":
        b["q"] = _Z(3, 8)
    return b


def _contexts(cat):
    """(label, route, base request, location of the parameters, params)."""
    out = [("encodings", "/v1/encodings", _ENC_BASE["sinusoidal"], [], cat["encodings"]["parameters"]),
           ("output options", "/v1/encodings", _ENC_BASE["sinusoidal"], [], cat["output_options"])]
    for m in cat["encodings"]["methods"]:
        out.append(("encodings " + m["name"], "/v1/encodings", _ENC_BASE[m["name"]], [], m["parameters"]))
    out.append(("rope", "/v1/rope", _rope_base("default"), [], cat["rope"]["parameters"]))
    out.append(("rope_scaling", "/v1/rope", _rope_base("default"), ["rope_scaling"],
                cat["rope"]["rope_scaling"]))
    for t in cat["rope"]["rope_types"]:
        out.append(("rope " + t["name"], "/v1/rope", _rope_base(t["name"]), ["rope_scaling"], t["parameters"]))
    out.append(("bias", "/v1/bias", _BIAS_BASE, [], cat["bias"]["parameters"]))
    for m in cat["bias"]["methods"]:
        out.append(("bias " + m["name"], "/v1/bias", dict(_BIAS_BASE, method=m["name"], **_BIAS_METHOD[m["name"]]),
                    [], m["parameters"]))
    out.append(("attention", "/v1/attention", _ATTN_BASE, [], cat["attention"]["parameters"]))
    out.append(("attention rope", "/v1/attention", dict(_ATTN_BASE, rope={}), ["rope"], cat["attention"]["rope"]))
    out.append(("attention bias", "/v1/attention", dict(_ATTN_BASE, bias={"method": "alibi"}), ["bias"],
                cat["attention"]["bias"]["parameters"]))
    return out


def _with(base, loc, name, value, drop=False):
    req = copy.deepcopy(base)
    obj = req
    for k in loc:
        obj = obj.setdefault(k, {})
    if drop:
        obj.pop(name, None)
    else:
        obj[name] = value
    return req


def _post(server, route, req):
    return Reply(server.request("POST", route, body=json.dumps(req).encode(),
                                headers={"Content-Type": "application/json"}), "json")


def test_methods_catalog_lists_every_method(server):
    r = server.request("GET", "/v1/methods")
    assert r.status == 200 and r.headers["content-type"].startswith("application/json")
    cat = json.loads(r.body)
    assert {m["name"] for m in cat["encodings"]["methods"]} == {"sinusoidal", "learned", "integer", "binary"}
    assert {t["name"] for t in cat["rope"]["rope_types"]} == {
        "default", "linear", "ntk", "dynamic", "yarn", "llama3", "longrope", "vision2d", "xpos"}
    assert {m["name"] for m in cat["bias"]["methods"]} == {"alibi", "t5", "fire", "kerple", "none"}
    for label, route, base, loc, params in _contexts(cat):
        assert params is not None, label
        for p in params:
            for key in ("name", "type", "required", "description"):
                assert key in p, (label, p)
            assert p["description"], (label, p["name"])
    # the selectors list exactly the methods
    sel = {p["name"]: p for p in cat["rope"]["rope_scaling"]}["rope_type"]
    assert set(t["name"] for t in cat["rope"]["rope_types"]) <= set(sel["enum"])
    assert "type" in sel.get("aliases", [])


def test_methods_catalog_matches_what_is_accepted(server):
    cat = json.loads(server.request("GET", "/v1/methods").body)
    checked = 0
    for label, route, base, loc, params in _contexts(cat):
        ok(_post(server, route, base), label + " base")
        for p in params:
            name, typ = p["name"], p["type"]
            ptr = "/" + "/".join(loc + [name])
            what = "%s: %s" % (label, name)
            if "default" in p:
                value = p["default"]
            elif (label, name) in VALID:
                value = VALID[(label, name)]
            elif base_value(base, loc, name) is not None:
                value = base_value(base, loc, name)
            else:
                assert name in VALID, "%s: no valid value known" % what
                value = VALID[name]
            # Accepted and not reported as ignored.
            r = ok(_post(server, route, _with(base, loc, name, value)), what)
            assert ptr[1:].replace("/", ".") not in r.ignored, (
                "%s listed as ignored: %s" % (what, r.ignored))
            # Sending the default changes nothing.
            if "default" in p:
                r0 = ok(_post(server, route, _with(base, loc, name, None, drop=True)), what)
                assert r0.body == r.body, "%s: explicit default %r differs" % (what, value)
            # Required: leaving it out names it.
            if p["required"]:
                bad(_post(server, route, _with(base, loc, name, None, drop=True)), ptr, what=what + " missing")
            # Every listed bound and choice is enforced at this pointer.
            violations = []
            step = 1 if typ == "integer" else 0.5
            if "minimum" in p:
                violations.append((p["minimum"] - step, ptr))
            if "exclusiveMinimum" in p:
                violations.append((p["exclusiveMinimum"], ptr))
            if "maximum" in p:
                violations.append((p["maximum"] + step, ptr))
            if "exclusiveMaximum" in p:
                violations.append((p["exclusiveMaximum"], ptr))
            if "items" in p and "minimum" in p["items"]:
                violations.append(([p["items"]["minimum"] - 1], ptr + "/0"))
            if "enum" in p:
                bogus = "no-such-choice"
                violations.append(([bogus] if typ == "array of strings" else bogus,
                                   ptr + "/0" if typ == "array of strings" else ptr))
            wrong = {"number": "x", "integer": "x", "boolean": "yes", "array of strings": "x",
                     "array of integers": "x", "integer or array": "x", "object": 3,
                     "array of objects": "x", "tensor": "x"}
            if typ in wrong:
                violations.append((wrong[typ], ptr))
            if typ == "string" and "enum" in p:
                violations.append((12, ptr))
            for value, field in violations:
                r = _post(server, route, _with(base, loc, name, value))
                assert r.status == 400, "%s = %r: status %d" % (what, value, r.status)
                assert r.field() == field or (typ == "tensor" and (r.field() or "").startswith(ptr)), \
                    "%s = %r: field %r, want %r (%s)" % (what, value, r.field(), field,
                                                         r.problem.get("detail"))
            checked += 1
    assert checked > 80, checked
    # Unknown selector values name the selector.
    bad(_post(server, "/v1/encodings", dict(_ENC_BASE["sinusoidal"], method="nope")), "/method")
    bad(_post(server, "/v1/bias", dict(_BIAS_BASE, method="nope")), "/method")
    bad(_post(server, "/v1/rope", dict(_ROPE_BASE, rope_scaling={"rope_type": "nope"})), "/rope_scaling/rope_type")
    bad(_post(server, "/v1/attention", dict(_ATTN_BASE, bias={"method": "nope"})), "/bias/method")


def base_value(base, loc, name):
    obj = base
    for k in loc:
        obj = obj.get(k, {})
    return obj.get(name)
