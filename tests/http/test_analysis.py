"""test_analysis.py: POST /v1/analysis against numbers computed here in
float64 from the papers' and Hugging Face's formulas (docs/methods.md#analysis),
never from the server's own output:

- Llama 3.1 (theta 500000, d 128, trained 8192): wavelengths and turns of
  every pair, before and after its llama3 scaling, the factor and band of
  each pair, which pairs see only angles they saw in training;
- YaRN's bands against the ramp of the paper (rotations over the original
  length against beta_fast and beta_slow), its ramp and attention factor;
- ALiBi's reach against the closed form ln(10)/m and ln(100)/m, the bias
  against distance, and the reach of the other families by a scan;
- T5's bucket boundaries against the bucket function written in
  test_routes.py (HF's float32 arithmetic), both directions;
- RoFormer's decay bound against a direct float64 sum at a few distances,
  and the mean cosine;
- the planner: every method's config, pasted into /v1/rope, reproduces the
  frequencies the planner reports, and each has the documented settings;
- a model's config ("model", "config") fills the fields of each kind;
- errors name their field; unknown fields are listed; every plot is a PNG
  of the documented size; npy and safetensors answers.

Tests follow tests/http/run.py's convention; run alone with
    /usr/bin/python3 tests/http/run.py tests/http/test_analysis.py
"""

import io
import json
import math
import struct
import zlib

import numpy as np

from test_routes import (_png_chunks, bad, call, close, ref_alibi_slopes,
                         ref_rope_inv_freq, ref_t5_bucket, safetensors_load)

TWO_PI = 2 * math.pi
LLAMA31 = {"head_dim": 128, "rope_theta": 500000.0}
LLAMA31_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def analysis(server, body, accept="application/json"):
    """POST /v1/analysis; (status, {name: ndarray | number | JSON value},
    headers).  Tensors come back as float64 (ask output_dtype float64 for
    every digit), int32 outputs as int64."""
    r = server.request("POST", "/v1/analysis", json=body, headers={"Accept": accept})
    if r.status != 200 or not accept.endswith("json"):
        return r.status, r, r.headers
    out = {}
    for k, v in r.json().items():
        if isinstance(v, dict) and "dtype" in v and "shape" in v:
            data = [float(x) if isinstance(x, str) else x for x in v["data"]]
            dt = np.int64 if v["dtype"] == "int32" else np.float64
            out[k] = np.array(data, dtype=dt).reshape(v["shape"])
        else:
            out[k] = v
    return 200, out, r.headers


def ok(server, body):
    status, out, headers = analysis(server, dict(body, output_dtype="float64"))
    assert status == 200, "%s: %d %s" % (body, status, out.body[:400])
    assert "x-attnbias-ignored" not in headers, headers["x-attnbias-ignored"]
    return out


def seen_ref(inv_orig, inv, trained, seq_len):
    """Every angle at seq_len already reached in training: the pair turned
    fully within the trained length, or stays below its trained angle (up
    to rounding: a pair interpolated by exactly seq_len / trained lands on
    it)."""
    return (trained * inv_orig >= TWO_PI) | (seq_len * inv <= trained * inv_orig * (1 + 1e-12))


# ===========================================================================
# kind rope
# ===========================================================================

def test_llama31_wavelengths_turns_and_bands(server):
    k = np.arange(64, dtype=np.float64)
    inv0 = 500000.0 ** (-2 * k / 128)
    wl0 = TWO_PI / inv0
    # Unscaled, at the trained length.
    out = ok(server, dict(LLAMA31, kind="rope", seq_len=8192, max_position_embeddings=8192))
    assert out["trained_len"] == 8192 and out["rotary_dim"] == 128
    close(out["inv_freq_original"], inv0, 1e-13, 0, "inv_freq_original")
    close(out["wavelength_original"], wl0, 1e-13, 0, "wavelength_original")
    close(out["turns_trained"], 8192 / wl0, 1e-13, 0, "turns_trained")
    close(out["turns"], 8192 / wl0, 1e-13, 0, "turns")
    assert (out["scale"] == 1).all() and (out["band"] == 0).all()
    assert out["seen"].all(), "nothing is new at the trained length"
    # Pairs with fewer than one full turn in 8192 tokens: wavelength > 8192.
    assert int((8192 / wl0 < 1).sum()) == 29 == int((out["turns_trained"] < 1).sum())

    # Llama 3.1 as shipped, at 128k.
    out = ok(server, dict(LLAMA31, kind="rope", seq_len=131072, max_position_embeddings=131072,
                          rope_scaling=LLAMA31_SCALING))
    inv, att = ref_rope_inv_freq(128, 500000.0, "llama3", **LLAMA31_SCALING)
    assert out["trained_len"] == 8192 and out["attention_scaling"] == att == 1.0
    close(out["inv_freq"], inv, 1e-13, 0, "inv_freq")
    close(out["wavelength"], TWO_PI / inv, 1e-13, 0, "wavelength")
    close(out["scale"], inv / inv0, 1e-12, 0, "scale")
    close(out["turns"], 131072 * inv / TWO_PI, 1e-13, 0, "turns")
    close(out["turns_trained"], 8192 / wl0, 1e-13, 0, "turns_trained")
    band = np.where(wl0 < 8192 / 4, 0, np.where(wl0 > 8192 / 1, 2, 1))
    assert (out["band"] == band).all(), (out["band"], band)
    smooth = (8192 / wl0 - 1) / (4 - 1)
    close(out["ramp"], np.where(band == 0, 0, np.where(band == 2, 1, 1 - smooth)), 1e-12, 1e-15,
          "ramp")
    assert (out["seen"] == seen_ref(inv0, inv, 8192, 131072)).all()
    # Divided by 8 for a 16x longer context: the slowest pairs still reach
    # angles they never saw.
    assert not out["seen"][-1] and out["seen"][0]


def test_yarn_bands_follow_the_paper(server):
    """The paper's NTK-by-parts rule (Peng et al. 2023, section 3.2): with
    r = L / wavelength, r > beta_fast keeps the pair, r < beta_slow
    interpolates it fully, between it blends -- against HF's index ramp,
    truncated or not, its values written here from modeling_rope_utils."""
    for d, theta, s, L in ((128, 10000.0, 16.0, 4096), (128, 500000.0, 32.0, 8192),
                           (64, 1e6, 4.0, 32768)):
        for truncate in (True, False):
            sc = {"rope_type": "yarn", "factor": s, "original_max_position_embeddings": L,
                  "truncate": truncate}
            out = ok(server, {"kind": "rope", "seq_len": int(s * L), "head_dim": d,
                              "rope_theta": theta, "rope_scaling": sc})
            k = np.arange(d // 2, dtype=np.float64)
            inv0 = theta ** (-2 * k / d)
            r = L / (TWO_PI / inv0)
            band = np.where(r > 32, 0, np.where(r < 1, 2, 1))
            assert (out["band"] == band).all(), (d, theta, s, L, truncate, out["band"], band)
            inv, att = ref_rope_inv_freq(d, theta, "yarn", factor=s,
                                         original_max_position_embeddings=L, truncate=truncate)
            close(out["inv_freq"], inv, 1e-12, 0, "yarn inv_freq")
            close(out["attention_scaling"], 0.1 * math.log(s) + 1, 1e-15, 0, "mscale")
            assert att == out["attention_scaling"]
            # h(theta) = (1 - ramp) theta + ramp theta / s
            close(out["scale"], 1 - out["ramp"] + out["ramp"] / s, 1e-12, 0, "blend")
            lo = d * math.log(L / (32 * TWO_PI)) / (2 * math.log(theta))
            hi = d * math.log(L / (1 * TWO_PI)) / (2 * math.log(theta))
            if truncate:
                lo, hi = math.floor(lo), math.ceil(hi)
            assert out["yarn_low"] == max(lo, 0) and abs(out["yarn_high"] - min(hi, d - 1)) < 1e-12


def test_decay_bound_against_a_direct_sum(server):
    d, theta = 64, 10000.0
    out = ok(server, {"kind": "rope", "seq_len": 50000, "head_dim": d, "rope_theta": theta,
                      "max_position_embeddings": 4096, "points": 40})
    r = out["decay_distance"]
    assert r[0] == 0 and r[-1] == 49999 and (np.diff(r) > 0).all() and len(r) <= 40
    assert (r == np.round(r)).all()
    inv = theta ** (-2 * np.arange(d // 2) / d)
    for i in (0, 1, 5, len(r) // 2, len(r) - 1):
        # (1/P) sum_j |S_j|, each S_j = sum_{k<j} e^{i r theta_k} summed afresh.
        terms = [abs(sum(complex(math.cos(r[i] * inv[k]), math.sin(r[i] * inv[k]))
                         for k in range(j))) for j in range(1, d // 2 + 1)]
        close(out["decay_bound"][i], sum(terms) / (d // 2), 1e-12, 1e-14, "bound at %g" % r[i])
        close(out["decay_mean_cos"][i], np.mean(np.cos(r[i] * inv)), 1e-12, 1e-14, "mean cos")
    assert out["decay_bound"][0] == (d // 2 + 1) / 2 and out["decay_mean_cos"][0] == 1
    # Short contexts: every distance.
    out = ok(server, {"kind": "rope", "seq_len": 10, "head_dim": 8, "max_position_embeddings": 10})
    assert list(out["decay_distance"]) == list(range(10))


# ===========================================================================
# kind bias
# ===========================================================================

def test_alibi_reach_closed_form(server):
    for H in (8, 12):
        out = ok(server, {"kind": "bias", "method": "alibi", "num_heads": H, "seq_len": 300})
        m = ref_alibi_slopes(H).astype(np.float32).astype(np.float64)
        close(out["slopes"], m, 0, 0, "slopes")
        close(out["reach_10"], math.log(10) / m, 1e-15, 0, "reach 10x")
        close(out["reach_100"], math.log(100) / m, 1e-15, 0, "reach 100x")
        # The bias of a key r before the query, -m r, the query at 299.
        close(out["bias"], -(m[:, None] * np.arange(300)[None]).astype(np.float32), 0, 0, "bias")
    # Explicit slopes are rounded to float32 as the table's are.
    out = ok(server, {"kind": "bias", "method": "alibi", "num_heads": 2, "seq_len": 4,
                      "slopes": [0.1, 0.3]})
    close(out["reach_10"], math.log(10) / np.float32([0.1, 0.3]).astype(np.float64), 1e-15, 0)


def test_reach_of_other_families_by_scan(server):
    r1, r2 = [1.0, 2.0, 0.25], [0.3, 1.0, 2.0]
    out = ok(server, {"kind": "bias", "method": "kerple", "num_heads": 3, "seq_len": 500,
                      "r1": r1, "r2": r2})
    dist = np.arange(500, dtype=np.float64)
    want = -np.asarray(r1)[:, None] * np.log1p(np.asarray(r2)[:, None] * dist[None])
    close(out["bias"], want, 1e-6, 1e-6, "kerple bias")
    # The reach is read off the float32 curve, as served.
    curve = want.astype(np.float32).astype(np.float64)
    for name, drop in (("reach_10", math.log(10)), ("reach_100", math.log(100))):
        for h in range(3):
            below = np.nonzero(curve[h, 0] - curve[h] >= drop)[0]
            expect = float(below[0]) if len(below) else math.inf
            assert out[name][h] == expect, (name, h, out[name][h], expect)
    assert math.isinf(out["reach_100"][2])  # 0.25 ln(1 + 2r) < ln 100 within 500
    # FIRE: the query at seq_len - 1, beyond its threshold L.
    layers = [{"weight": [[1.0], [-0.5]], "bias": [0.0, 0.5]},
              {"weight": [[-2.0, 1.0]], "bias": [0.1]}]
    out = ok(server, {"kind": "bias", "method": "fire", "num_heads": 2, "seq_len": 64,
                      "c": 0.1, "L": 16, "layers": layers})
    psi = np.log(0.1 * dist[:64] + 1)
    x = psi / np.log(0.1 * max(16, 63) + 1)
    h1 = np.maximum(x[:, None] * np.array([1.0, -0.5]) + np.array([0.0, 0.5]), 0)
    want = h1 @ np.array([-2.0, 1.0]) + 0.1
    close(out["bias"], np.broadcast_to(want, (2, 64)), 1e-6, 1e-6, "fire")


def test_t5_bucket_boundaries(server):
    for nb, bidir, md in ((32, True, 128), (32, False, 128), (8, True, 16), (32, True, 9)):
        S = 4 * md
        out = ok(server, {"kind": "bias", "method": "t5", "num_heads": 1, "seq_len": S,
                          "relative_attention_num_buckets": nb, "bidirectional": bidir,
                          "relative_attention_max_distance": md})
        dist = np.arange(S)
        before = ref_t5_bucket(-dist, nb, bidir, md)
        assert (out["buckets"] == before).all()
        if bidir:
            assert (out["buckets_after"] == ref_t5_bucket(dist, nb, bidir, md)).all()
        else:
            assert "buckets_after" not in out
        nbd = nb // 2 if bidir else nb
        starts = [int(np.argmax(before == b)) if (before == b).any() else -1 for b in range(nbd)]
        assert list(out["bucket_start"]) == starts, (nb, bidir, md, out["bucket_start"], starts)
        assert out["saturation_distance"] == starts[-1]
        # From there on every distance shares the last bucket; before, not.
        assert (before[starts[-1]:] == nbd - 1).all() and before[starts[-1] - 1] < nbd - 1
    # With a table: the learned bias of each direction, per head.
    table = np.random.default_rng(3).standard_normal((32, 2)).astype(np.float32)
    out = ok(server, {"kind": "bias", "method": "t5", "num_heads": 2, "seq_len": 200,
                      "table": table.tolist()})
    dist = np.arange(200)
    close(out["bias"], table[ref_t5_bucket(-dist)].T, 0, 0, "t5 bias before")
    close(out["bias_after"], table[ref_t5_bucket(dist)].T, 0, 0, "t5 bias after")


# ===========================================================================
# kind extend
# ===========================================================================

def test_extend_configs_paste_back(server):
    base = {"head_dim": 128, "rope_theta": 500000.0, "max_position_embeddings": 8192}
    out = ok(server, dict(base, kind="extend", seq_len=131072))
    s = 16.0
    assert out["methods"] == ["none", "linear", "ntk", "dynamic", "yarn", "llama3"]
    assert out["trained_len"] == 8192 and out["factor"] == s
    cfg = out["configs"]
    inv0 = 500000.0 ** (-2 * np.arange(64) / 128)
    assert cfg["none"] == {"rope_theta": 500000.0, "max_position_embeddings": 131072,
                           "rope_scaling": None}
    assert cfg["linear"]["rope_scaling"] == {"rope_type": "linear", "factor": s}
    close(cfg["ntk"]["rope_theta"], 500000.0 * s ** (128 / 126), 1e-15, 0, "ntk base")
    assert cfg["ntk"]["rope_scaling"] is None
    assert cfg["dynamic"]["rope_scaling"] == {"rope_type": "dynamic", "factor": 1.0}
    assert cfg["dynamic"]["max_position_embeddings"] == 8192
    assert cfg["yarn"]["rope_scaling"] == {"rope_type": "yarn", "factor": s, "beta_fast": 32.0,
                                           "beta_slow": 1.0,
                                           "original_max_position_embeddings": 8192}
    assert cfg["llama3"]["rope_scaling"] == dict(LLAMA31_SCALING, factor=s)
    # Each config, pasted over the model's fields, gives the planner's row.
    for i, name in enumerate(out["methods"]):
        req = dict(base, **cfg[name], positions=[0], seq_len=131072, output_dtype="float64")
        r = call(server, "/v1/rope", {k: v for k, v in req.items() if v is not None})
        assert r.status == 200 and not r.ignored, (name, r.body[:300], r.ignored)
        close(r.out["inv_freq"], out["inv_freq"][i], 1e-14, 0, name)
        close(r.out["attention_scaling"], out["attention_factor"][i], 1e-15, 0, name)
    close(out["inv_freq"][0], inv0, 1e-14, 0, "none")
    close(out["scale"][1], np.full(64, 1 / s), 1e-15, 0, "linear")
    close(out["inv_freq"][3], out["inv_freq"][2], 1e-13, 0, "dynamic meets ntk at the target")
    close(out["attention_factor"], [1, 1, 1, 1, 0.1 * math.log(s) + 1, 1], 1e-15, 0, "att")
    close(out["turns_trained"], 8192 * inv0 / TWO_PI, 1e-13, 0, "turns_trained")
    for i in range(6):
        assert (out["seen"][i] == seen_ref(inv0, out["inv_freq"][i], 8192, 131072)).all()
    # Linear squeezes every pair into its trained angles; none leaves the
    # slow ones out.
    assert out["seen"][1].all() and not out["seen"][0].all()
    # docs/methods.md#planner: pairs left reaching angles they never saw.
    assert [int((1 - out["seen"][i]).sum()) for i in range(6)] == [29, 0, 28, 28, 0, 0]
    assert out["decay_bound"].shape == (6, len(out["decay_distance"]))


# ===========================================================================
# a model's config
# ===========================================================================

def test_model_config_fills_the_fields(server):
    """"model" and "config" fill kind rope and extend with /v1/rope's
    fields and kind bias with /v1/bias's method fields (the values checked
    are the published configs', computed here); explicit fields win; a
    config without a bias for kind bias, or without RoPE for rope, is a 400
    naming the model."""
    status, out, headers = analysis(server, {"kind": "rope", "seq_len": 131072,
                                             "model": "llama-3.1-8b", "output_dtype": "float64"})
    assert status == 200 and "x-attnbias-ignored" not in headers, (status, headers)
    inv, _ = ref_rope_inv_freq(128, 500000.0, "llama3", **LLAMA31_SCALING)
    assert out["trained_len"] == 8192
    close(out["inv_freq"], inv, 1e-13, 0, "llama-3.1-8b")
    assert "rope_scaling" in headers["x-attnbias-config-used"], headers
    # An explicit rope_scaling replaces the config's: none, the bare theta.
    out = ok(server, {"kind": "rope", "seq_len": 8192, "model": "llama-3.1-8b",
                      "rope_scaling": None})
    close(out["inv_freq"], 500000.0 ** (-2 * np.arange(64) / 128), 1e-13, 0, "unscaled")
    # The planner from Llama 2's 4k to 16k.
    out = ok(server, {"kind": "extend", "seq_len": 16384, "model": "llama-2-7b"})
    assert out["trained_len"] == 4096 and out["factor"] == 4
    close(out["configs"]["ntk"]["rope_theta"], 10000.0 * 4 ** (128 / 126), 1e-15, 0, "ntk")
    # Bias families: MPT's ALiBi (alibi_bias_max 8), T5's encoder buckets.
    out = ok(server, {"kind": "bias", "seq_len": 64, "model": "mpt-7b"})
    m = ref_alibi_slopes(32).astype(np.float32).astype(np.float64)
    close(out["reach_10"], math.log(10) / m, 1e-15, 0, "mpt-7b reach")
    r = server.request("POST", "/v1/analysis", json={"kind": "bias", "seq_len": 512,
                                                     "model": "t5-small"},
                       headers={"Prefer": "handling=strict"})
    assert r.status == 200, r.body[:300]
    before = ref_t5_bucket(-np.arange(512), 32, True, 128)
    got = r.json()
    assert got["buckets"]["data"] == before.tolist()
    assert got["bucket_start"]["data"] == [int(np.argmax(before == b)) for b in range(16)]
    # Refusals and blame name the config's key.
    bad(call(server, "/v1/analysis", {"kind": "bias", "seq_len": 8, "model": "llama-3.1-8b"}),
        "/model")
    bad(call(server, "/v1/analysis", {"kind": "rope", "seq_len": 8, "model": "bloom-560m"}),
        "/model")
    bad(call(server, "/v1/analysis", {"kind": "extend", "seq_len": 8192,
                                      "config": {"model_type": "llama", "head_dim": 64,
                                                 "rope_theta": -3}}), "/config/rope_theta")


# ===========================================================================
# errors, media types, pictures
# ===========================================================================

def test_errors_name_their_field(server):
    rope = {"kind": "rope", "seq_len": 100, "head_dim": 8, "max_position_embeddings": 64}
    cases = [
        ({"seq_len": 8, "head_dim": 8}, "/kind"),
        ({"kind": "rope", "head_dim": 8}, "/seq_len"),
        (dict(rope, kind="spline"), "/kind"),
        (dict(rope, points=1), "/points"),
        (dict(rope, plot="reach"), "/plot"),
        (dict(rope, max_position_embeddings=None), "/max_position_embeddings"),
        (dict(rope, head_dim=7), "/head_dim"),
        (dict(rope, rope_scaling={"rope_type": "xpos"}), "/rope_scaling/rope_type"),
        (dict(rope, rope_scaling={"rope_type": "linear"}), "/rope_scaling/factor"),
        (dict(rope, kind="extend", seq_len=64), "/seq_len"),
        (dict(rope, kind="extend", rope_scaling={"rope_type": "linear", "factor": 2}),
         "/rope_scaling/rope_type"),
        ({"kind": "bias", "seq_len": 8, "num_heads": 2}, "/method"),
        ({"kind": "bias", "seq_len": 8, "method": "alibi"}, "/num_heads"),
        ({"kind": "bias", "seq_len": 8, "method": "alibi", "num_heads": 2, "plot": "buckets"},
         "/plot"),
        ({"kind": "bias", "seq_len": 8, "method": "alibi", "num_heads": 2, "plot": "decay"},
         "/plot"),
        ({"kind": "bias", "seq_len": 8, "method": "t5", "num_heads": 1, "plot": "bias"},
         "/table"),
        ({"kind": "bias", "seq_len": 8, "method": "kerple", "num_heads": 2, "r1": [1, 1]},
         "/r2"),
        ({"kind": "bias", "seq_len": 8, "method": "t5", "num_heads": 1,
          "relative_attention_max_distance": 1 << 31}, "/relative_attention_max_distance"),
    ]
    for body, field in cases:
        body = {k: v for k, v in body.items() if v is not None}
        bad(call(server, "/v1/analysis", body), field, what=json.dumps(body))
    # Fields of the other kind are unknown to this one, and said so.
    r = call(server, "/v1/analysis", dict(rope, max_bias=4, rope_thetaa=3))
    assert r.status == 200 and set(r.ignored) == {"max_bias", "rope_thetaa"}, r.ignored
    r = call(server, "/v1/analysis", {"kind": "bias", "seq_len": 8, "method": "alibi",
                                      "num_heads": 2, "inv_freq": [1.0]})
    assert r.status == 200 and r.ignored == ["inv_freq"], r.ignored
    # Budgets are decided before computing.
    r = call(server, "/v1/analysis", {"kind": "bias", "seq_len": 1 << 40, "method": "alibi",
                                      "num_heads": 64})
    assert r.status == 413, r.status


def test_binary_answers(server):
    body = {"kind": "extend", "seq_len": 1024, "head_dim": 16, "max_position_embeddings": 256}
    status, r, _ = analysis(server, body, "application/vnd.safetensors")
    assert status == 200
    st = safetensors_load(r.body)
    assert st["inv_freq"].shape == (6, 8) and st["band"].dtype == np.int32
    meta = json.loads(r.body[8:8 + struct.unpack("<Q", r.body[:8])[0]])["__metadata__"]
    assert json.loads(meta["methods"])[4] == "yarn" and float(meta["factor"]) == 4
    assert json.loads(meta["configs"])["yarn"]["rope_scaling"]["factor"] == 4
    status, r, _ = analysis(server, dict(body, output="scale"), "application/x-npy")
    assert status == 200
    arr = np.load(io.BytesIO(r.body), allow_pickle=False)
    assert arr.shape == (6, 8) and (arr[0] == 1).all()
    status, r, _ = analysis(server, dict(body, output="configs"), "application/x-npy")
    assert status == 406 and "JSON value" in r.json()["detail"]


PLOTS = [
    ({"kind": "rope", "seq_len": 131072, "max_position_embeddings": 131072,
      "rope_scaling": LLAMA31_SCALING, **LLAMA31}, ("wavelength", "decay", "scale")),
    ({"kind": "extend", "seq_len": 32768, "max_position_embeddings": 4096, **LLAMA31},
     ("scale", "wavelength", "decay")),
    ({"kind": "bias", "seq_len": 2048, "method": "alibi", "num_heads": 8}, ("bias", "reach")),
    ({"kind": "bias", "seq_len": 300, "method": "t5", "num_heads": 2,
      "table": (-0.4 * np.arange(64).reshape(32, 2)).tolist()}, ("bias", "reach", "buckets")),
    ({"kind": "bias", "seq_len": 400, "method": "t5", "num_heads": 1,
      "bidirectional": False}, ("buckets",)),
    ({"kind": "bias", "seq_len": 100, "method": "kerple", "num_heads": 2, "r1": [1, 2],
      "r2": [0.5, 1.5], "variant": "power"}, ("bias", "reach")),
]


# Lines and dashes on a log axis, a log distance axis, markers, steps.
DECODED = {("rope", "wavelength"), ("extend", "decay"), ("bias", "reach"), ("bias", "buckets")}


def png_pixels(body):
    """(width, height, rows of RGB bytes) of an 8-bit RGB PNG: PNG's row
    filters undone (numpy for None, Sub and Up, a loop for Average and
    Paeth, which depend on the pixel to their left)."""
    chunks = _png_chunks(body)
    w, h, depth, ctype = struct.unpack(">IIBB", chunks[0][1][:10])
    assert (depth, ctype) == (8, 2), (depth, ctype)
    raw = np.frombuffer(zlib.decompress(b"".join(c for k, c in chunks if k == b"IDAT")),
                        np.uint8).reshape(h, 3 * w + 1)
    out = np.zeros((h, 3 * w), np.int64)
    prev = np.zeros(3 * w, np.int64)
    for y in range(h):
        f, line = raw[y, 0], raw[y, 1:].astype(np.int64)
        if f == 1:
            line = np.cumsum(line.reshape(w, 3), axis=0).reshape(-1)
        elif f == 2:
            line = line + prev
        elif f in (3, 4):
            line, up = line.tolist(), prev.tolist()
            for i in range(3 * w):
                a = line[i - 3] if i >= 3 else 0
                b, c = up[i], up[i - 3] if i >= 3 else 0
                if f == 3:
                    pred = (a + b) // 2
                else:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[i] = (line[i] + pred) & 255
            line = np.array(line, np.int64)
        line &= 255
        out[y] = line
        prev = line
    return w, h, [bytes(r.astype(np.uint8)) for r in out]


def test_every_plot_is_a_picture(server):
    seen, decoded = set(), set()
    for body, plots in PLOTS:
        # The default plot of the kind comes first in each list.
        for i, plot in enumerate(plots):
            req = dict(body) if i == 0 else dict(body, plot=plot)
            status, r, headers = analysis(server, req, "image/png")
            assert status == 200, (plot, r.body[:300])
            assert headers["content-type"] == "image/png"
            chunks = _png_chunks(r.body)
            assert struct.unpack(">II", chunks[0][1][:8]) == (960, 540)
            if (body["kind"], plot) in DECODED - decoded:
                decoded.add((body["kind"], plot))
                # Curves in the palette's colours: pixels far from grey
                # (paper, ink, grid and marks are all grey).  Decoding is
                # slow in Python: one picture of each style of line.
                w, h, rows = png_pixels(r.body)
                coloured = sum(1 for y in range(0, h, 2) for x in range(0, 3 * w, 6)
                               if max(rows[y][x:x + 3]) - min(rows[y][x:x + 3]) > 60)
                assert coloured > 150, (body["kind"], plot, coloured)
            assert r.body not in seen, "%s %s drew a picture seen before" % (body["kind"], plot)
            seen.add(r.body)
