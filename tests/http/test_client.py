"""test_client.py: the Python client end to end, notebook style.

Each test calls the server through api/python/attnbias_client.py (the
former single-file client, now a shim over the attnbias package, imported
from the source tree) the way a notebook would, and compares the result
with the float64 numpy references of api/python/tests/reference.py
(written from the formulas of docs/methods.md, never from the server's
output), at docs/methods.md's tolerances.  The package installed in a
virtualenv runs its own tests too (test_python_package.py).  It also checks that the
JSON and the safetensors transports give bit-identical results, that
float16/float64 inputs and outputs keep their dtype, and that errors raise
AttnbiasError naming the field.

Tests follow tests/http/run.py's convention (each takes the shared
`server`); run alone with
    /usr/bin/python3 tests/http/run.py tests/http/test_client.py
"""

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "api", "python"))
sys.path.insert(0, os.path.join(ROOT, "api", "python", "tests"))

from attnbias_client import AttnbiasError, Client  # noqa: E402

from reference import (close, example12, ref_alibi, ref_attention,  # noqa: E402
                       ref_inv_freq, ref_rope_apply, ref_sinusoidal, ref_t5_bucket,
                       ref_yarn_inv_freq)


class StrictClient(Client):
    """A Client that also fails when the server ignored a field it sent: the
    client must only send what the API knows."""

    def request(self, path, params, accept=None):
        out = super().request(path, params, accept)
        ignored = self.last_headers.get("x-attnbias-ignored")
        assert not ignored, "%s: the server ignored %s" % (path, ignored)
        return out


def _client(server, **kw):
    """A client for run.py's Server."""
    return StrictClient(server.url, api_key=server.api_key, **kw)


# ===========================================================================
# the notebook: one cell per test
# ===========================================================================

def test_health_and_catalog(server):
    ab = _client(server)
    assert ab.health() == {"status": "ok"}
    assert ab.ready() is True
    cat = ab.methods()
    assert isinstance(cat, dict) and cat, "empty catalog"
    text = repr(cat)
    for name in ("sinusoidal", "alibi", "t5", "yarn", "llama3", "rope_theta"):
        assert name in text, "catalog does not mention %s" % name


def test_encodings(server):
    ab = _client(server)
    # The paper's layout, 16 positions of width 32.
    pe = ab.encodings("sinusoidal", positions=16, dim=32)
    assert pe.dtype == np.float32 and pe.shape == (16, 32)
    close(pe, ref_sinusoidal(np.arange(16), 32), what="sinusoidal interleaved")
    # Explicit, fractional positions (diffusion timesteps) in the other layouts.
    pos = np.array([0.0, 2.5, 7.0, 999.0])
    for layout in ("concat", "tensor2tensor"):
        got = ab.encodings("sinusoidal", positions=pos, dim=12, layout=layout, base=500.0)
        close(got, ref_sinusoidal(pos, 12, base=500.0, layout=layout), rtol=1e-4, what=layout)
    # Learned table, OPT offset 2.
    table = np.random.default_rng(1).standard_normal((10, 6)).astype(np.float32)
    got = ab.encodings("learned", positions=[0, 3, 7], table=table, offset=2)
    np.testing.assert_array_equal(got, table[[2, 5, 9]])
    # x + encoding, broadcast over a leading batch axis.
    x = np.random.default_rng(2).standard_normal((2, 5, 8)).astype(np.float32)
    got = ab.encodings("sinusoidal", positions=5, dim=8, x=x)
    close(got, x + ref_sinusoidal(np.arange(5), 8)[None], what="x + encoding")
    # Integer and binary designs.
    close(ab.encodings("integer", positions=[0, 3, 10], dim=3, normalize=10),
          np.repeat(np.array([[0.0], [0.3], [1.0]]), 3, axis=1), what="integer")
    np.testing.assert_array_equal(ab.encodings("binary", positions=[5, 6], dim=4),
                                  [[1, 0, 1, 0], [0, 1, 1, 0]])


def test_rope_tables(server):
    ab = _client(server)
    t = ab.rope(positions=64, head_dim=32, rope_theta=10000.0)
    assert set(t) >= {"inv_freq", "cos", "sin", "attention_scaling"}
    inv = ref_inv_freq(32)
    ang = np.arange(64)[:, None] * inv[None]
    close(t["inv_freq"], inv, what="inv_freq")
    close(t["cos"], np.concatenate([np.cos(ang)] * 2, axis=1), what="cos (rotate-half)")
    close(t["sin"], np.concatenate([np.sin(ang)] * 2, axis=1), what="sin (rotate-half)")
    assert t["attention_scaling"] == 1.0
    # GPT-J pairing lays each frequency out twice in a row.
    t = ab.rope(positions=[0, 7, 100], head_dim=16, interleaved=True)
    ang = np.array([0, 7, 100])[:, None] * ref_inv_freq(16)[None]
    close(t["cos"], np.repeat(np.cos(ang), 2, axis=1), what="cos (interleaved)")
    # YaRN with a model's config.json fields.
    t = ab.rope(positions=[0, 1, 300, 4000], head_dim=64, rope_theta=10000.0,
                max_position_embeddings=4096,
                rope_scaling={"rope_type": "yarn", "factor": 16.0,
                              "original_max_position_embeddings": 256})
    inv, att = ref_yarn_inv_freq(64, 10000.0, 16.0, 256)
    close(t["inv_freq"], inv, what="yarn inv_freq")
    close(t["attention_scaling"], att, what="yarn attention_scaling")
    ang = np.array([0, 1, 300, 4000])[:, None] * inv[None]
    close(t["sin"], att * np.concatenate([np.sin(ang)] * 2, axis=1), rtol=1e-4, what="yarn sin")


def test_rope_apply(server):
    ab = _client(server)
    rng = np.random.default_rng(3)
    q = rng.standard_normal((1, 4, 10, 64)).astype(np.float32)
    k = rng.standard_normal((1, 2, 10, 64)).astype(np.float32)
    pos = np.arange(10) + 5
    r = ab.rope(positions=pos, head_dim=64, q=q, k=k, rope_theta=500000.0)
    inv = ref_inv_freq(64, 500000.0)
    close(r["q"], ref_rope_apply(q, pos, inv), what="q rotate-half")
    close(r["k"], ref_rope_apply(k, pos, inv), what="k rotate-half")
    # Partial rotary (half the channels), GPT-J pairs, bshd layout, q only.
    qs = np.ascontiguousarray(q.transpose(0, 2, 1, 3))          # [B, S, H, D]
    got = ab.rope(positions=pos, head_dim=64, q=qs, layout="bshd",
                  partial_rotary_factor=0.5, interleaved=True)
    want = ref_rope_apply(q, pos, ref_inv_freq(32), interleaved=True).transpose(0, 2, 1, 3)
    close(got, want, what="partial interleaved bshd")
    np.testing.assert_array_equal(got[..., 32:], qs[..., 32:])
    # No positions: 0..n-1 along the sequence axis.
    got = ab.rope(q=qs, layout="bshd", rope_theta=500000.0)
    want = ref_rope_apply(q, np.arange(10), inv).transpose(0, 2, 1, 3)
    close(got, want, what="default positions")


def test_bias(server):
    ab = _client(server)
    # ALiBi, symmetric and causal, with a KV-cache style q_len < k_len.
    for causal in (False, True):
        b = ab.bias("alibi", num_heads=12, q_len=5, k_len=9, causal=causal)
        close(b, ref_alibi(12, 5, 9, causal=causal), what="alibi causal=%s" % causal)
    b = ab.bias("alibi", num_heads=6, q_len=4, k_len=4, max_bias=4.0, q_offset=0)
    close(b, ref_alibi(6, 4, 4, q_offset=0, max_bias=4.0), what="alibi max_bias 4")
    # T5: buckets are exact; the bias is table[bucket, head].
    rng = np.random.default_rng(4)
    table = rng.standard_normal((32, 3)).astype(np.float32)
    r = ab.bias("t5", num_heads=3, q_len=1, k_len=401, q_offset=200, table=table,
                returns=["bias", "buckets"])
    rel = np.arange(401) - 200
    want_b = ref_t5_bucket(rel)
    assert r["buckets"].dtype == np.int32
    np.testing.assert_array_equal(r["buckets"][0], want_b)
    np.testing.assert_array_equal(r["bias"][:, 0, :], table[want_b].T)
    got = ab.bias("t5", num_heads=3, q_len=40, k_len=40, table=table[:16],
                  bidirectional=False, relative_attention_max_distance=20,
                  returns=["buckets"])
    rel = np.arange(40)[None, :] - np.arange(40)[:, None]
    np.testing.assert_array_equal(got, ref_t5_bucket(rel, 16, False, 20))
    # Buckets alone need no table (32 by default, as Hugging Face's).
    got = ab.bias("t5", num_heads=3, q_len=40, k_len=40, returns=["buckets"])
    np.testing.assert_array_equal(got, ref_t5_bucket(rel))
    # Kerple, both variants.
    r1, r2 = np.array([2.0, 0.5]), np.array([0.5, 1.5])
    d = np.abs(np.arange(6)[:, None] - np.arange(6)[None, :]).astype(np.float64)
    close(ab.bias("kerple", num_heads=2, q_len=6, k_len=6, variant="log", r1=r1, r2=r2),
          -r1[:, None, None] * np.log1p(r2[:, None, None] * d), what="kerple log")
    close(ab.bias("kerple", num_heads=2, q_len=6, k_len=6, variant="power", r1=r1, r2=r2),
          -r1[:, None, None] * d[None] ** r2[:, None, None], what="kerple power")
    # The heatmap is a PNG.
    png = ab.bias_heatmap("alibi", 4, 16, head=1, causal=True)
    assert png[:8] == b"\x89PNG\r\n\x1a\n", png[:16]


def test_analysis(server):
    """client.analysis in both answer forms, against numpy; plot_analysis
    draws every plot of every kind; analysis_png is the server's picture."""
    import io
    import math
    from attnbias import plot_analysis
    from attnbias.plotting import ANALYSIS_PLOTS as PLOTS
    from matplotlib.figure import Figure
    from reference import ref_alibi_slopes

    k = np.arange(32, dtype=np.float64)
    inv0 = 10000.0 ** (-2 * k / 64)
    answers = {}
    for accept in ("safetensors", "json"):
        ab = _client(server, accept=accept)
        a = ab.analysis("rope", 16384, head_dim=64, max_position_embeddings=16384,
                        rope_scaling={"rope_type": "yarn", "factor": 4,
                                      "original_max_position_embeddings": 4096},
                        output_dtype="float64")
        close(a["wavelength_original"], 2 * math.pi / inv0, 1e-12, 0, "wavelength_original")
        close(a["turns_trained"], 4096 * inv0 / (2 * math.pi), 1e-12, 0, "turns_trained")
        assert a["trained_len"] == 4096.0 and a["band"].dtype == np.int32
        close(a["attention_scaling"], 0.1 * math.log(4) + 1, 1e-12, 0, "mscale")
        plan = ab.analysis("extend", 16384, head_dim=64, max_position_embeddings=4096)
        assert plan["methods"] == ["none", "linear", "ntk", "dynamic", "yarn", "llama3"]
        assert plan["configs"]["linear"]["rope_scaling"] == {"rope_type": "linear",
                                                             "factor": 4.0}
        assert plan["inv_freq"].shape == (6, 32)
        alibi = ab.analysis("bias", 256, method="alibi", num_heads=4)
        close(alibi["reach_10"], math.log(10) / ref_alibi_slopes(4), 1e-6, 0, "reach")
        t5 = ab.analysis("bias", 256, method="t5", num_heads=1)
        np.testing.assert_array_equal(t5["buckets"], ref_t5_bucket(-np.arange(256)))
        answers[accept] = (a, plan, alibi, t5)
    for x, y in zip(*answers.values()):
        for name in x:
            assert np.array_equal(np.asarray(x[name]), np.asarray(y[name])), name
    a, plan, alibi, t5 = answers["safetensors"]
    for result, kind in ((a, "rope"), (plan, "extend"), (alibi, "bias"), (t5, "bias")):
        for plot in PLOTS[kind]:
            if result is alibi and plot == "buckets" or result is t5 and plot != "buckets":
                try:
                    plot_analysis(result, plot)
                except ValueError:
                    continue
                raise AssertionError("%s drew %s without the numbers" % (kind, plot))
            fig = plot_analysis(result, plot)
            assert isinstance(fig, Figure)
            ax = fig.axes[0]
            assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title(), plot
            assert ax.get_legend() is not None and ax.get_lines(), plot
            buf = io.BytesIO()
            fig.savefig(buf, format="png")
            assert buf.getvalue()[:8] == b"\x89PNG\r\n\x1a\n"
    # A preset's config (llama-2-7b: d 128, theta 10000, trained 4096).
    plan = _client(server).analysis("extend", 16384, model="llama-2-7b")
    assert plan["trained_len"] == 4096.0 and plan["factor"] == 4.0
    close(plan["configs"]["ntk"]["rope_theta"], 10000.0 * 4 ** (128 / 126), 1e-15, 0, "ntk")
    png = _client(server).analysis_png("extend", 16384, plot="decay", head_dim=64,
                                       max_position_embeddings=4096)
    assert png[:8] == b"\x89PNG\r\n\x1a\n", png[:16]
    try:
        _client(server).analysis("extend", 2048, head_dim=64, max_position_embeddings=4096)
    except AttnbiasError as e:
        assert e.status == 400 and e.field == "/seq_len", (e.status, e.field)
    else:
        raise AssertionError("extend to a shorter length was accepted")


def test_attention(server):
    ab = _client(server)
    rng = np.random.default_rng(5)
    # Worked example 12 of docs/methods.md (GQA 2:1, Nq=3 < Nk=4), causal.
    q, k, v = example12()
    r = ab.attention(q, k, v, causal=True, returns=["output", "lse", "weights"])
    want_o, want_l, want_w = ref_attention(q, k, v, causal=True)
    close(r["output"], want_o, what="output")
    close(r["lse"], want_l, what="lse")
    close(r["weights"], want_w, what="weights")
    # Larger, GQA 8:2, causal + ALiBi fused in the kernel, bshd layout.
    B, Hq, Hkv, Nq, Nk, D = 2, 8, 2, 24, 40, 32
    q = rng.standard_normal((B, Hq, Nq, D)).astype(np.float32)
    k = rng.standard_normal((B, Hkv, Nk, D)).astype(np.float32)
    v = rng.standard_normal((B, Hkv, Nk, D)).astype(np.float32)
    got = ab.attention(*(np.ascontiguousarray(t.transpose(0, 2, 1, 3)) for t in (q, k, v)),
                       layout="bshd", causal=True, bias={"method": "alibi"})
    want, _, _ = ref_attention(q, k, v, causal=True, bias=ref_alibi(Hq, Nq, Nk)[None])
    close(got, want.transpose(0, 2, 1, 3), what="gqa causal alibi bshd")
    # Sliding window, key lengths, softcap, explicit scale, attn_bias.
    ab_t = rng.standard_normal((1, Hq, Nq, Nk)).astype(np.float32)
    r = ab.attention(q, k, v, sliding_window=7, kv_lens=[40, 30], softcap=5.0,
                     scale=0.2, attn_bias=ab_t, returns=["output", "lse"])
    want, lse, _ = ref_attention(q, k, v, scale=0.2, causal=False, window=(6, 0),
                                 kv_lens=[40, 30], softcap=5.0, bias=ab_t)
    close(r["output"], want, what="window+kv_lens+softcap")
    close(r["lse"], lse, what="lse window+kv_lens+softcap")
    # A fully masked row: output 0, lse -inf (never NaN).
    r = ab.attention(q[:1, :2, :3], k[:1, :1, :4], v[:1, :1, :4], causal=True,
                     q_offset=-1, returns=["output", "lse"])
    assert np.all(r["output"][0, :, 0] == 0) and np.all(np.isneginf(r["lse"][0, :, 0]))
    # The server's account of the last request.
    t = ab.last_timing
    assert set(t) >= {"read", "prepare"} and ("compute" in t or "stream" in t), t
    assert all(v is True or v >= 0 for v in t.values()), t
    # A large binary answer streams: no compute time, "stream" instead.
    q = rng.standard_normal((1, 8, 512, 64)).astype(np.float32)
    got = ab.attention(q, q, q)
    assert got.shape == (1, 8, 512, 64) and ab.last_timing.get("stream") is True, \
        ab.last_timing
    # A body of 4 MiB or more starts computing while it arrives: the client
    # reports how many pieces were done by its end.
    q, k, v = (rng.uniform(-1, 1, (1, 8, 1024, 64)).astype(np.float32) for _ in range(3))
    got = ab.attention(q, k, v)
    close(got, ref_attention(q, k, v)[0], rtol=1e-4, atol=2e-6, what="early")
    done, pieces = ab.last_timing["early"]
    assert 0 <= done <= pieces and pieces > 1, ab.last_timing


def test_transports_agree(server):
    """JSON (base64) and safetensors bodies, JSON and safetensors responses:
    the same request gives bit-identical arrays every way."""
    rng = np.random.default_rng(6)
    q = rng.standard_normal((1, 4, 128, 64)).astype(np.float32)   # 128 KiB
    k = rng.standard_normal((1, 4, 128, 64)).astype(np.float32)
    v = rng.standard_normal((1, 4, 128, 64)).astype(np.float32)
    sent = []
    auto = _client(server)
    orig_send = auto._send

    def spy(method, path, body=None, headers=None):
        sent.append((headers or {}).get("Content-Type"))
        return orig_send(method, path, body, headers)

    auto._send = spy
    a = auto.attention(q, k, v, causal=True, returns=["output", "lse"])
    assert sent[-1] == "application/vnd.safetensors", sent   # large: binary body
    b = _client(server, transport="json", accept="json").attention(
        q, k, v, causal=True, returns=["output", "lse"])
    c = _client(server, transport="json").attention(q, k, v, causal=True, returns=["output", "lse"])
    d = _client(server, transport="safetensors", accept="json").attention(
        q, k, v, causal=True, returns=["output", "lse"])
    for other in (b, c, d):
        np.testing.assert_array_equal(a["output"], other["output"])
        np.testing.assert_array_equal(a["lse"], other["lse"])
    # Small inputs go as JSON; nested tensors (FIRE layers, T5 table inside
    # "bias") travel both ways too.
    sent.clear()
    layers = [{"weight": np.array([[1.0], [-0.5], [2.0]], dtype=np.float32),
               "bias": np.array([0, 0.5, -0.2], dtype=np.float32)},
              {"weight": np.array([[0.3, -0.7, 0.1], [-0.2, 0.4, 0.5]], dtype=np.float32),
               "bias": np.array([0.05, -0.1], dtype=np.float32)}]
    fire_json = auto.bias("fire", num_heads=2, q_len=5, k_len=5, causal=True,
                          c=0.1, L=4.0, layers=layers)
    assert sent[-1] == "application/json", sent
    fire_bin = _client(server, transport="safetensors").bias(
        "fire", num_heads=2, q_len=5, k_len=5, causal=True, c=0.1, L=4.0, layers=layers)
    np.testing.assert_array_equal(fire_json, fire_bin)
    # docs/methods.md#example-5-fire: head 0, last row.
    close(fire_json[0, 4], [0.53, 0.3427876, 0.1405828, -0.07922634, -0.3], 1e-5, 1e-6, "fire")
    qs, ks, vs = q[:, :, :8], k[:, :2, :8], v[:, :2, :8]
    table = rng.standard_normal((32, 4)).astype(np.float32)
    one = _client(server, transport="json").attention(
        qs, ks, vs, bias={"method": "t5", "table": table}, scale=1.0)
    two = _client(server, transport="safetensors").attention(
        qs, ks, vs, bias={"method": "t5", "table": table}, scale=1.0)
    np.testing.assert_array_equal(one, two)
    rel = np.arange(8)[None, :] - np.arange(8)[:, None]
    want, _, _ = ref_attention(qs, ks, vs, scale=1.0, bias=table[ref_t5_bucket(rel)].transpose(2, 0, 1)[None])
    close(one, want, what="attention with T5 bias")


def test_dtypes(server):
    """float16 / float64 inputs keep their dtype on the wire (the server then
    computes in float32), and output_dtype picks the result's dtype."""
    ab = _client(server)
    rng = np.random.default_rng(7)
    x64 = rng.standard_normal((3, 6, 8))
    x16 = x64.astype(np.float16)
    want16 = ab.encodings("sinusoidal", positions=6, dim=8, x=x16.astype(np.float32))
    np.testing.assert_array_equal(ab.encodings("sinusoidal", positions=6, dim=8, x=x16), want16)
    want64 = ab.encodings("sinusoidal", positions=6, dim=8, x=x64.astype(np.float32))
    np.testing.assert_array_equal(ab.encodings("sinusoidal", positions=6, dim=8, x=x64), want64)
    for dt, np_dt in (("float64", np.float64), ("float16", np.float16), ("bfloat16", np.float32)):
        for kw in ({}, {"accept": "json"}):
            got = _client(server, **kw).encodings("sinusoidal", positions=6, dim=8, output_dtype=dt)
            assert got.dtype == np_dt, (dt, kw, got.dtype)
            tol = {"float64": 1e-6, "float16": 1e-3, "bfloat16": 8e-3}[dt]
            close(got, ref_sinusoidal(np.arange(6), 8), rtol=tol, atol=tol, what=dt)


def test_errors(server):
    ab = _client(server)
    cases = [
        (lambda: ab.rope(positions=4, head_dim=8, rotary_dim=7), "/rotary_dim"),
        (lambda: ab.encodings("sinusoidal", positions=4, dim=7), "/dim"),
        (lambda: ab.bias("alibi", num_heads=0, q_len=4), "/num_heads"),
        (lambda: ab.encodings("learned", positions=[0, 9], table=np.zeros((4, 2), np.float32)),
         "/positions"),
    ]
    for call, field in cases:
        try:
            call()
        except AttnbiasError as e:
            assert e.status == 400, e
            assert e.type.startswith("https://attnbias.dev/errors/"), e.type
            assert e.title and e.detail, e
            assert e.field is not None and e.field.startswith(field), (e.field, field)
        else:
            raise AssertionError("no error for the case of %s" % field)
    q = np.zeros((1, 3, 4, 8), np.float32)
    kv = np.zeros((1, 2, 4, 8), np.float32)
    try:
        ab.attention(q, kv, kv)
    except AttnbiasError as e:
        assert e.status == 400 and e.field in ("/q", "/k", "/q/shape", "/k/shape"), e
    else:
        raise AssertionError("Hq=3, Hkv=2 accepted")
    try:
        ab.request("/v1/nope", {})
    except AttnbiasError as e:
        assert e.status == 404, e
    else:
        raise AssertionError("unknown route accepted")


def test_api_key(start):
    """With a key the client sends it; without, calls raise a 401 while the
    public health check still works."""
    srv = start(api_key="notebook-key")
    ab = Client(srv.url, api_key="notebook-key")
    close(ab.bias("alibi", num_heads=2, q_len=3), ref_alibi(2, 3, 3), what="alibi with key")
    anon = Client(srv.url)
    assert anon.health() == {"status": "ok"}
    for call in (anon.methods, lambda: anon.bias("alibi", num_heads=2, q_len=3)):
        try:
            call()
        except AttnbiasError as e:
            assert e.status == 401 and e.type.endswith("/unauthorized"), e
        else:
            raise AssertionError("no 401 without the key")



def test_body_over_the_cap_raises_413(start):
    """A notebook sending more than --max-body-mb gets AttnbiasError 413
    with the server's explanation, not a broken pipe: the server answers
    with the headers, reads and drops up to the cap + 8 MiB (--linger-mb)
    and then cuts the connection, and the client reads the answer waiting
    on it.  The same client then goes on working."""
    srv = start("--max-body-mb", "1")
    ab = Client(srv.url)
    for n in (2048, 2048 * 8):  # q, k, v of [1, 4, n, 128]: 12 MiB, 96 MiB
        q = np.zeros((1, 4, n, 128), np.float32)
        try:
            ab.attention(q, q, q)
        except AttnbiasError as e:
            assert e.status == 413 and "max-body-mb" in e.detail, e
        else:
            raise AssertionError("a body of %d MiB accepted under a 1 MiB cap" % (n * 6 >> 10))
    close(ab.bias("alibi", num_heads=2, q_len=3), ref_alibi(2, 3, 3), what="after the 413s")
