"""test_models.py: a model's config on every POST route, the presets,
GET /v1/models and Prefer: handling=strict.

Each preset is checked twice over:
  - its key values (base, head_dim, heads, scaling type and factor, window)
    against PUBLISHED below, written from the published config.json files,
    so that a mistyped preset fails;
  - the server's numbers for it (RoPE tables per layer, ALiBi and T5 tables,
    attention) against float64 references computed here from the preset's
    own fields, by a reading of each family's Hugging Face semantics written
    in this file (hf_read), not by the server's.

Tests follow tests/http/run.py's convention; run alone with
    /usr/bin/python3 tests/http/run.py tests/http/test_models.py
"""

import glob
import json
import math
import os
import re

import numpy as np

import test_routes as tr

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# Written from the published configs as found in public copies: each
# preset file's "checked" list names the copy (repository, commit, path) and
# the keys that agree, and "unverified" what no copy was found for.
# name: (family, theta (global layer), theta of the first sliding layer or
#        None, head_dim, heads, kv heads, rotary channels, (scaling type,
#        factor) or None, window of a sliding layer or None)
PUBLISHED = {
    "llama-2-7b": ("llama", 10000.0, None, 128, 32, 32, 128, None, None),
    "llama-3.1-8b": ("llama", 500000.0, None, 128, 32, 8, 128, ("llama3", 8.0), None),
    "llama-3.2-1b": ("llama", 500000.0, None, 64, 32, 8, 64, ("llama3", 32.0), None),
    "mistral-7b-v0.1": ("mistral", 10000.0, 10000.0, 128, 32, 8, 128, None, 4096),
    "mixtral-8x7b-v0.1": ("mixtral", 1e6, None, 128, 32, 8, 128, None, None),
    "qwen2-7b": ("qwen2", 1e6, None, 128, 28, 4, 128, None, None),
    "qwen2-vl-7b": ("qwen2_vl", 1e6, None, 128, 28, 4, 128, ("mrope", None), None),
    "qwen2.5-vl-7b": ("qwen2_5_vl", 1e6, None, 128, 28, 4, 128, ("mrope", None), None),
    "phi-3-mini-4k": ("phi3", 10000.0, 10000.0, 96, 32, 32, 96, None, 2047),
    "phi-3-mini-128k": ("phi3", 10000.0, 10000.0, 96, 32, 32, 96, ("longrope", None), 262144),
    "deepseek-v2-lite": ("deepseek_v2", 10000.0, None, 192, 16, 16, 64, ("yarn", 40.0), None),
    "deepseek-v3": ("deepseek_v3", 10000.0, None, 192, 128, 128, 64, ("yarn", 40.0), None),
    "gemma-2-9b": ("gemma2", 10000.0, 10000.0, 256, 16, 8, 256, None, 4096),
    "gemma-2-27b": ("gemma2", 10000.0, 10000.0, 128, 32, 16, 128, None, 4096),
    "gemma-3-1b": ("gemma3", 1e6, 10000.0, 256, 4, 1, 256, None, 512),
    "gemma-3-4b": ("gemma3", 1e6, 10000.0, 256, 8, 4, 256, ("linear", 8.0), 1024),
    "gpt-j-6b": ("gptj", 10000.0, None, 256, 16, 16, 64, None, None),
    "pythia-160m": ("gpt_neox", 10000.0, None, 64, 12, 12, 16, None, None),
    "gpt-neox-20b": ("gpt_neox", 10000.0, None, 96, 64, 64, 24, None, None),
    "falcon-7b": ("falcon", 10000.0, None, 64, 71, 1, 64, None, None),
    "bloom-560m": ("bloom", None, None, 64, 16, 16, None, None, None),
    "mpt-7b": ("mpt", None, None, 128, 32, 32, None, None, None),
    "t5-small": ("t5", None, None, 64, 8, 8, None, None, None),
    "modernbert-base": ("modernbert", 160000.0, 10000.0, 64, 12, 12, 64, None, 128),
}

# Families whose RoPE pairs adjacent channels (Hugging Face's GPT-J
# rotate_every_two, DeepSeek's complex / rope_interleave form).
INTERLEAVED = {"gptj", "deepseek_v2", "deepseek_v3"}


def models(server):
    r = server.get("/v1/models")
    assert r.status == 200, r.body[:300]
    return r.json()


def preset(server, name):
    return next(p for p in models(server)["presets"] if p["name"] == name)


# ===========================================================================
# the config as each family's Hugging Face code reads it (test-side)
# ===========================================================================

DEFAULTS = {  # the config classes' defaults of the keys read below
    "gemma3": {"head_dim": 256, "num_attention_heads": 8, "num_key_value_heads": 4,
               "rope_theta": 1e6, "rope_local_base_freq": 10000.0,
               "sliding_window_pattern": 6, "query_pre_attn_scalar": 256,
               "max_position_embeddings": 131072},
    "llama": {"rope_theta": 10000.0},
    "t5": {"relative_attention_max_distance": 128},
}


def hf_read(name, cfg, layer=0):
    """What the model computes at `layer`, from its config's own fields."""
    fam = PUBLISHED[name][0]
    c = dict(DEFAULTS.get(fam, {}))
    c.update({k: v for k, v in cfg.items() if k != "text_config"})
    c.update(cfg.get("text_config", {}))
    heads = c.get("num_attention_heads") or c.get("n_head") or c.get("n_heads") or c.get("num_heads")
    hidden = c.get("hidden_size") or c.get("n_embd") or c.get("d_model")
    out = {"heads": heads}
    if fam == "falcon":
        out["kv"] = 1 if c.get("multi_query") else heads
    else:
        out["kv"] = c.get("num_key_value_heads", heads)
    # DeepSeek's heads are [qk_nope_head_dim | qk_rope_head_dim] channels.
    ds_rope = c.get("qk_rope_head_dim")
    out["head_dim"] = ((c.get("qk_nope_head_dim", 0) + ds_rope) if ds_rope else
                       c.get("head_dim") or c.get("d_kv") or hidden // heads)
    # which layers slide
    slide = False
    if fam == "gemma2":
        slide = layer % 2 == 0
    elif fam == "gemma3":
        slide = (layer + 1) % c["sliding_window_pattern"] != 0
    elif fam == "modernbert":
        slide = layer % c["global_attn_every_n_layers"] != 0
    elif c.get("use_sliding_window", True) and c.get("sliding_window") is not None:
        slide = layer >= c.get("max_window_layers", 0) if "max_window_layers" in c else True
    out["slide"] = slide
    out["window"] = (c["local_attention"] if fam == "modernbert" else c.get("sliding_window")) \
        if slide else None
    if fam in ("bloom", "mpt", "t5"):
        out["rope"] = None
        return out
    theta = c.get("rotary_emb_base") or c.get("rope_theta", 10000.0)
    if fam == "gemma3" and slide:
        theta = c["rope_local_base_freq"]
    if fam == "modernbert":
        theta = c["local_rope_theta"] if slide else c["global_rope_theta"]
    rot = ds_rope or out["head_dim"]
    if c.get("rotary_dim"):
        rot = c["rotary_dim"]
    pf = c.get("partial_rotary_factor", c.get("rotary_pct"))
    if pf is not None:
        rot = int(out["head_dim"] * pf)
    sc = c.get("rope_scaling")
    if (fam == "gemma3" and slide) or fam == "modernbert":
        sc = None
    rtype, s = "default", {}
    if sc:
        rtype = sc.get("rope_type", sc.get("type"))
        rtype = {"mrope": "default", "su": "longrope"}.get(rtype, rtype)
        s = {k: v for k, v in sc.items() if k not in ("type", "rope_type", "mrope_section")}
        s.setdefault("max_position_embeddings", c.get("max_position_embeddings"))
        if c.get("original_max_position_embeddings"):
            s["original_max_position_embeddings"] = c["original_max_position_embeddings"]
    out["rope"] = dict(theta=float(theta), rot=rot, rtype=rtype, s=s,
                       sections=(sc or {}).get("mrope_section"),
                       interleaved=fam in INTERLEAVED)
    out["scaling"] = (sc.get("rope_type", sc.get("type")), sc.get("factor")) if sc else None
    return out


# Presets whose every named copy spells the keys its own way (a training
# config's or LitGPT's names), so that no copy carries `values`.
KEYS_RENAMED = {"pythia-160m"}


def config_at(cfg, dotted):
    """The value at a dotted key of a config ("rope_scaling.factor"); a
    missing key is a KeyError, so a key dropped from a preset fails."""
    for part in dotted.split("."):
        cfg = cfg[part]
    return cfg


def same_json(a, b):
    """Equal as JSON values: true is not 1, 1.0 is 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b))
    return a == b


def test_presets_match_the_published_configs(server):
    """Every preset file is served, and its key values are the published
    ones (PUBLISHED), read the way its family's code reads them."""
    files = sorted(glob.glob(os.path.join(ROOT, "models", "*.json")))
    served = {p["name"]: p for p in models(server)["presets"]}
    assert set(served) == set(PUBLISHED), sorted(set(served) ^ set(PUBLISHED))
    assert len(files) == len(served), (len(files), len(served))
    with open(os.path.join(ROOT, "server", "handlers", "presets.def")) as f:
        listed = re.findall(r'"(models/[^"]+)"', f.read())
    assert sorted(os.path.join(ROOT, p) for p in listed) == files
    for path in files:
        with open(path) as f:
            data = json.load(f)
        name = data["name"]
        assert os.path.basename(path) == name + ".json", path
        assert served[name] == data, name
        assert data["source"].startswith("https://huggingface.co/") and \
            data["source"].endswith("/config.json"), name
        # Where it was checked, or a plain word on what was not; the values
        # a copy was seen to hold are still the preset's.
        for c in data["checked"]:
            assert c["copy"].startswith("https://github.com/") and \
                re.search(r"/blob/[0-9a-f]{40}/", c["copy"]) and c["agrees"], (name, c)
            for key, seen in c.get("values", {}).items():
                here = config_at(data["config"], key)
                assert same_json(here, seen), (name, c["copy"], key, here, seen)
        assert data["checked"] or data.get("unverified"), name
        with_values = [c for c in data["checked"] if c.get("values")]
        assert with_values or data.get("unverified") or name in KEYS_RENAMED, name
        fam, theta, local, hd, heads, kv, rot, scaling, window = PUBLISHED[name]
        assert data["family"] == fam, name
        first_slide = {"gemma2": 0, "gemma3": 0, "modernbert": 1}.get(fam, 0)
        g = hf_read(name, data["config"], layer=5 if fam == "gemma3" else 0)
        got = (g["head_dim"], g["heads"], g["kv"])
        assert got == (hd, heads, kv), (name, got)
        if theta is not None:
            assert g["rope"]["theta"] == theta and g["rope"]["rot"] == rot, (name, g["rope"])
            assert g["scaling"] == scaling, (name, g["scaling"])
        sl = hf_read(name, data["config"], layer=first_slide)
        assert sl["window"] == window, (name, sl["window"])
        if local is not None and theta is not None:
            assert sl["rope"]["theta"] == local, (name, sl["rope"]["theta"])


# ===========================================================================
# numbers per preset against float64
# ===========================================================================

def rope_ref(g, pos):
    """inv_freq, cos, sin, attention factor for positions (flat or [3, n])."""
    r = g["rope"]
    pos = np.asarray(pos)
    seq = int(pos.max()) + 1
    inv, att = tr.ref_rope_inv_freq(r["rot"], r["theta"], r["rtype"], seq_len=seq, **r["s"])
    ang = tr.ref_angles(pos, inv, sections=r["sections"])
    cos, sin = tr.ref_tables(ang, att, r["interleaved"])
    return inv, cos, sin, att


def post(server, route, body, headers=None):
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    return server.request("POST", route, body=json.dumps(body).encode(), headers=h)


def tensor(out):
    return tr._decode_json_tensor(out)


def layers_of(fam):
    return {"gemma2": (0, 1), "gemma3": (0, 5), "modernbert": (0, 1)}.get(fam, (0,))


def test_rope_of_every_rope_preset(server):
    for name, pub in PUBLISHED.items():
        fam = pub[0]
        if pub[1] is None:
            continue
        cfg = preset(server, name)["config"]
        for layer in layers_of(fam):
            g = hf_read(name, cfg, layer)
            if g["rope"]["sections"]:
                pos = [[0, 3, 9, 9, 4000], [0, 3, 9, 12, 4000], [0, 3, 9, 7, 4001]]
            else:
                pos = [0, 1, 7, 1000, 4095]
            poss = [pos] + ([[0, 1, 2, 5000]] if g["rope"]["rtype"] == "longrope" else [])
            for p in poss:
                r = post(server, "/v1/rope", {"model": name, "layer": layer, "positions": p})
                what = "%s layer %d %s" % (name, layer, p)
                assert r.status == 200, (what, r.body[:400])
                out = r.json()
                inv, cos, sin, att = rope_ref(g, p)
                tr.close(tensor(out["inv_freq"]), inv, 2e-6, 0, what)
                tr.close(out["attention_scaling"], att, 1e-6, 0, what)
                tr.close(tensor(out["cos"]), cos, 1e-5, 2e-6, what)
                tr.close(tensor(out["sin"]), sin, 1e-5, 2e-6, what)
                assert r.headers.get("x-attnbias-config-layer", "").startswith(
                    "%d; type=%s" % (layer, "sliding_attention" if g["slide"] else
                                     "full_attention")), (what, r.headers)
                assert "x-attnbias-ignored" not in r.headers, (what, r.headers)


def test_bias_presets_alibi_and_t5(server):
    for name, max_bias in (("bloom-560m", 8.0), ("mpt-7b", 8.0)):
        r = post(server, "/v1/bias", {"model": name, "q_len": 5})
        assert r.status == 200, r.body[:300]
        H = PUBLISHED[name][4]
        got = tensor(r.json()["bias"])
        pq, j = tr.geometry(5, 5)
        slopes = tr.ref_alibi_slopes(H, max_bias)
        want = -slopes[:, None, None] * np.abs(pq - j)[None]
        want = np.where(tr.ref_mask(pq, j, causal=True)[None], want, -np.inf)
        tr.close(got, want, 1e-6, 0, name)
    # T5's encoder: both ways; its decoder (is_decoder in config): one way.
    for dec in (False, True):
        body = {"model": "t5-small", "q_len": 40, "return": ["buckets"]}
        if dec:
            body["config"] = {"is_decoder": True}
        r = post(server, "/v1/bias", body)
        assert r.status == 200, r.body[:300]
        got = tensor(r.json()["buckets"])
        want, _ = tr.ref_t5_buckets(40, 40, nb=32, bidirectional=not dec, md=128)
        assert np.array_equal(got, want), dec
        assert "is_decoder" in r.headers["x-attnbias-config-used"], r.headers


def test_attention_with_presets(server):
    """Gemma 2 27B (softcap 50, scale 144^-0.5, RoPE, causal, its window on
    layer 0) and BLOOM (ALiBi, causal) against float64 attention."""
    g = np.random.default_rng(7)
    q = g.normal(size=(1, 2, 6, 8))
    k = g.normal(size=(1, 1, 6, 8))
    v = g.normal(size=(1, 1, 6, 4))
    body = {"q": q.tolist(), "k": k.tolist(), "v": v.tolist(), "return": ["output", "weights"]}
    cfg = preset(server, "gemma-2-27b")["config"]
    for layer, window in ((0, 3), (1, None)):
        b = dict(body, model="gemma-2-27b", layer=layer)
        if window:
            b["config"] = {"sliding_window": window}
        r = post(server, "/v1/attention", b)
        assert r.status == 200, r.body[:400]
        ang = tr.ref_angles(np.arange(6), tr.ref_rope_inv_freq(8, cfg["rope_theta"])[0])
        qr, kr = tr.ref_rope_apply(q, ang, 1.0, False), tr.ref_rope_apply(k, ang, 1.0, False)
        out, _, w = tr.ref_attention(qr, kr, v, scale=144 ** -0.5, causal=True, softcap=50.0,
                                     window=(window - 1, 0) if window else None)
        tr.close(tensor(r.json()["output"]), out, 1e-5, 1e-6, "gemma layer %d" % layer)
        tr.close(tensor(r.json()["weights"]), w, 1e-5, 1e-6, "gemma layer %d" % layer)
        used = r.headers["x-attnbias-config-used"].split(", ")
        assert {"attn_logit_softcapping", "query_pre_attn_scalar", "rope_theta"} <= set(used), used
        assert ("sliding_window" in used) == bool(window), (layer, used)
    r = post(server, "/v1/attention", dict(body, model="bloom-560m"))
    assert r.status == 200, r.body[:300]
    pq, j = tr.geometry(6, 6)
    bias = -tr.ref_alibi_slopes(2)[:, None, None] * np.abs(pq - j)[None]
    out, _, _ = tr.ref_attention(q, k, v, causal=True, bias=bias)
    tr.close(tensor(r.json()["output"]), out, 1e-5, 1e-6, "bloom")


def test_deepseek_scale_and_gemma3_upstream(server):
    """DeepSeek-V2-Lite's softmax scale carries mscale(40, 0.707)^2 over
    sqrt(192); Gemma 3 lists its QK-norm as upstream."""
    g = np.random.default_rng(3)
    q, k, v = (g.normal(size=(1, 3, 64)) for _ in range(3))
    r = post(server, "/v1/attention", {"model": "deepseek-v2-lite", "q": q.tolist(),
                                       "k": k.tolist(), "v": v.tolist(), "rope": None})
    assert r.status == 200, r.body[:300]
    m = 0.1 * 0.707 * math.log(40) + 1
    out, _, _ = tr.ref_attention(q[None], k[None], v[None], scale=m * m / math.sqrt(192),
                                 causal=True)
    tr.close(tensor(r.json()["output"]), out[0], 1e-5, 1e-6, "deepseek scale")
    assert "kv_lora_rank" in r.headers["x-attnbias-config-upstream"], r.headers
    r = post(server, "/v1/rope", {"model": "gemma-3-1b", "positions": 2})
    assert r.status == 200
    assert r.headers["x-attnbias-config-upstream"] == "q_norm, k_norm", r.headers


def deepseek_rotate(x, pos, inv, nope):
    """DeepSeek-V2/V3's own rotation, from the model's code: split a head
    into q_nope (the first `nope` channels) and q_pe, view q_pe as complex
    numbers of adjacent channels, multiply by e^(i * pos * inv_freq), put
    the real and imaginary parts back in their channels and concatenate."""
    x = np.asarray(x, dtype=np.float64)
    q_nope, q_pe = x[..., :nope], x[..., nope:]
    z = q_pe[..., 0::2] + 1j * q_pe[..., 1::2]
    z = z * np.exp(1j * np.asarray(pos, dtype=np.float64)[:, None] * inv)
    q_pe = np.stack([z.real, z.imag], axis=-1).reshape(q_pe.shape)
    return np.concatenate([q_nope, q_pe], axis=-1)


def test_deepseek_layout(server):
    """DeepSeek's q and k are sent as the model lays them out, [q_nope |
    q_pe] (128 + 64 channels for V2-Lite): the preset rotates the last 64 in
    adjacent pairs, in /v1/rope and in attention, against the model's own
    rotation in float64; and the rotary_offset example of docs/methods.md
    answers what it says."""
    cfg = preset(server, "deepseek-v2-lite")["config"]
    nope, rope = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"]
    sc = cfg["rope_scaling"]
    inv, att = tr.ref_rope_inv_freq(rope, cfg["rope_theta"], "yarn", factor=sc["factor"],
                                    original_max_position_embeddings=sc[
                                        "original_max_position_embeddings"],
                                    beta_fast=sc["beta_fast"], beta_slow=sc["beta_slow"],
                                    mscale=sc["mscale"], mscale_all_dim=sc["mscale_all_dim"])
    assert att == 1.0, att  # mscale == mscale_all_dim: DeepSeek's ratio is 1
    g = np.random.default_rng(11)
    pos = [0, 1, 7, 4095, 100000]
    q = g.normal(size=(1, 2, len(pos), nope + rope))
    r = post(server, "/v1/rope", {"model": "deepseek-v2-lite", "q": q.tolist(),
                                  "positions": pos})
    assert r.status == 200, r.body[:400]
    got = tensor(r.json()["q"])
    want = deepseek_rotate(q, pos, inv, nope)
    tr.close(got, want, 1e-5, 2e-6, "deepseek q")
    assert np.array_equal(got[..., :nope].astype(np.float32), q[..., :nope].astype(np.float32))
    # Rotating the first 64 channels instead (what a layout-blind rotation
    # does) is far from it: the check above can fail.
    first = np.concatenate([deepseek_rotate(q[..., :rope], pos, inv, 0), q[..., rope:]], -1)
    assert np.abs(first - got).max() > 0.1
    used = r.headers["x-attnbias-config-used"].split(", ")
    assert {"qk_nope_head_dim", "qk_rope_head_dim"} <= set(used), used
    # Attention: q and k [B, H, N, 192], v [.., 128]; the config's RoPE, the
    # causal mask and DeepSeek's scale (mscale^2 / sqrt(192)).
    n = 6
    q = g.normal(size=(1, 2, n, nope + rope))
    k = g.normal(size=(1, 2, n, nope + rope))
    v = g.normal(size=(1, 2, n, 128))
    r = post(server, "/v1/attention", {"model": "deepseek-v2-lite", "q": q.tolist(),
                                       "k": k.tolist(), "v": v.tolist()})
    assert r.status == 200, r.body[:400]
    m = 0.1 * sc["mscale_all_dim"] * math.log(sc["factor"]) + 1
    p = np.arange(n)
    out, _, _ = tr.ref_attention(deepseek_rotate(q, p, inv, nope),
                                 deepseek_rotate(k, p, inv, nope), v,
                                 scale=m * m / math.sqrt(nope + rope), causal=True)
    tr.close(tensor(r.json()["output"]), out, 1e-5, 1e-6, "deepseek attention")
    # Explicit fields win: rotary_offset 0 rotates the first channels.
    r = post(server, "/v1/rope", {"model": "deepseek-v2-lite", "q": q.tolist(),
                                  "positions": list(range(n)), "rotary_offset": 0})
    assert r.status == 200, r.body[:300]
    got = tensor(r.json()["q"])
    assert np.array_equal(got[..., rope:].astype(np.float32), q[..., rope:].astype(np.float32))
    # A rotated slice that does not fit: a 400 naming rotary_offset.
    r = post(server, "/v1/rope", {"head_dim": 8, "rotary_dim": 4, "rotary_offset": 5,
                                  "positions": 1})
    assert r.status == 400 and r.json()["field"] == "/rotary_offset", r.body
    # docs/methods.md's example, as printed.
    with open(os.path.join(ROOT, "docs", "methods.md"), encoding="utf-8") as f:
        text = f.read()
    body = re.search(r"-d '(\{\"head_dim\": 6, \"rotary_dim\": 2, \"rotary_offset\": 4.*?)'",
                     text, re.S).group(1)
    r = post(server, "/v1/rope", json.loads(body))
    assert r.status == 200, r.body[:300]
    tr.close(tensor(r.json()["q"]), [[1, 1, 1, 1, math.cos(1), math.sin(1)]], 1e-6, 1e-7,
             "the rotary_offset example")


# ===========================================================================
# precedence, blame, aliases
# ===========================================================================

def test_explicit_fields_win(server):
    base = {"model": "llama-3.1-8b", "positions": [0, 9000]}
    plain = post(server, "/v1/rope", base).json()
    # an explicit rope_theta wins; the rest of the config stays
    r = post(server, "/v1/rope", dict(base, rope_theta=10000.0))
    assert r.status == 200
    inv, _ = tr.ref_rope_inv_freq(128, 10000.0, "llama3", factor=8.0, low_freq_factor=1.0,
                                  high_freq_factor=4.0, original_max_position_embeddings=8192)
    tr.close(tensor(r.json()["inv_freq"]), inv, 2e-6, 0, "rope_theta")
    assert "rope_theta" not in r.headers["x-attnbias-config-used"].split(", ")
    # an explicit rope_scaling replaces the config's whole (no merging)
    r = post(server, "/v1/rope", dict(base, rope_scaling={"rope_type": "linear", "factor": 2}))
    inv, _ = tr.ref_rope_inv_freq(128, 500000.0, "linear", factor=2)
    tr.close(tensor(r.json()["inv_freq"]), inv, 2e-6, 0, "rope_scaling")
    # null removes it; the shapes of q give head_dim
    r = post(server, "/v1/rope", dict(base, rope_scaling=None))
    tr.close(tensor(r.json()["inv_freq"]), tr.ref_rope_inv_freq(128, 500000.0)[0], 2e-6, 0)
    x = np.arange(16.0).reshape(2, 8)
    r = post(server, "/v1/rope", {"model": "llama-3.1-8b", "q": x.tolist(), "positions": [0, 3]})
    assert r.status == 200, r.body[:300]
    assert tensor(r.json()["q"]).shape == (2, 8)
    assert tensor(plain["inv_freq"]).shape == (64,)
    # window given explicitly replaces the config's sliding_window
    r = post(server, "/v1/bias", {"model": "mistral-7b-v0.1", "q_len": 4, "window": [1, 0]})
    assert r.status == 200, r.body[:300]
    got = tensor(r.json()["bias"])[0]
    pq, j = tr.geometry(4, 4)
    assert np.array_equal(np.isfinite(got), tr.ref_mask(pq, j, True, (1, 0)))
    # "rope": null: q and k already rotated
    q = np.ones((2, 4)).tolist()
    r = post(server, "/v1/attention", {"model": "llama-2-7b", "q": q, "k": q, "v": q,
                                       "rope": None})
    assert r.status == 200 and "rope_theta" not in r.headers.get("x-attnbias-config-used", "")


def test_top_level_names_and_config_object(server):
    q = [[1.0, 2.0], [3.0, 4.0], [0.5, -1.0]]
    k = [[1.0, 0.0], [0.0, 1.0], [2.0, 1.0]]
    a = post(server, "/v1/attention", {"q": q, "k": k, "v": k, "softcap": 2.0, "scale": 0.5})
    b = post(server, "/v1/attention", {"q": q, "k": k, "v": k, "attn_logit_softcapping": 2.0,
                                       "query_pre_attn_scalar": 4})
    c = post(server, "/v1/attention", {"q": q, "k": k, "v": k,
                                       "config": {"attn_logit_softcapping": 2.0,
                                                  "query_pre_attn_scalar": 4}})
    assert a.status == b.status == c.status == 200, (b.body[:200], c.body[:200])
    assert a.json() == b.json() == c.json()
    assert set(b.headers["x-attnbias-config-used"].split(", ")) == {
        "attn_logit_softcapping", "query_pre_attn_scalar"}
    # a Llama subset pasted into /v1/rope: head_dim from hidden_size / heads
    r = post(server, "/v1/rope", {"hidden_size": 4096, "num_attention_heads": 32,
                                  "rope_theta": 500000.0, "positions": 2})
    assert r.status == 200, r.body[:300]
    assert tensor(r.json()["inv_freq"]).shape == (64,)


def test_errors_name_the_config_key(server):
    # a config value the route refuses: named in the config
    r = post(server, "/v1/rope", {"config": {"model_type": "llama", "hidden_size": 64,
                                             "num_attention_heads": 8, "rotary_dim": 7},
                                  "positions": 3})
    assert r.status == 400 and r.json()["field"] == "/config/rotary_dim", r.body
    # a preset that does not fit the tensors: named as the model
    x = np.ones((2, 16)).tolist()
    r = post(server, "/v1/rope", {"model": "phi-3-mini-128k", "q": x, "positions": [0, 1]})
    assert r.status == 400 and r.json()["field"] == "/model", r.body
    assert "short_factor" in r.json()["detail"], r.body
    for body, field in (
            ({"model": "gpt-5"}, "/model"),
            ({"model": 3}, "/model"),
            ({"config": [1]}, "/config"),
            ({"model": "llama-2-7b", "layer": 32}, "/layer"),
            ({"model": "llama-2-7b", "layer": -1}, "/layer"),
            ({"config": {"model_type": "falcon", "alibi": True}}, "/config/alibi"),
            ({"model": "bloom-560m"}, "/model"),
            ({"config": {"model_type": "mpt", "attn_config": {"prefix_lm": True}}},
             "/config/attn_config/prefix_lm")):
        r = post(server, "/v1/rope", dict(body, positions=2))
        assert r.status == 400, (body, r.status, r.body[:200])
        assert r.json()["field"] == field, (body, r.json())
    r = post(server, "/v1/encodings", {"model": "llama-2-7b", "method": "binary", "dim": 4,
                                       "positions": 2})
    assert r.status == 400 and r.json()["field"] == "/model", r.body


# ===========================================================================
# silence is a choice: Prefer: handling=strict
# ===========================================================================

def test_strict_handling(server):
    body = {"head_dim": 8, "positions": 2, "rope_thetaa": 1.0,
            "config": {"rope_theta": 100.0, "my_flag": 1}}
    r = post(server, "/v1/rope", body)
    assert r.status == 200
    assert sorted(r.headers["x-attnbias-ignored"].split(",")) == [
        "config.my_flag", "rope_thetaa"], r.headers
    assert "preference-applied" not in r.headers
    r = post(server, "/v1/rope", body, {"Prefer": "handling=strict"})
    assert r.status == 400, r.body[:300]
    p = r.json()
    assert p["field"] in ("/rope_thetaa", "/config/my_flag"), p
    assert "rope_thetaa" in p["detail"] and "config.my_flag" in p["detail"], p
    assert r.headers["preference-applied"] == "handling=strict"
    # clean: honoured, and said so
    r = post(server, "/v1/rope", {"head_dim": 8, "positions": 2},
             {"Prefer": "respond-async, handling=strict"})
    assert r.status == 200 and r.headers["preference-applied"] == "handling=strict"
    # lenient, or another preference: nothing applied
    r = post(server, "/v1/rope", body, {"Prefer": "handling=lenient"})
    assert r.status == 200 and "preference-applied" not in r.headers
    # a strict safetensors body: an unused entry is refused too
    data = tr.safetensors_dump({"q": np.ones((2, 8), np.float32),
                                "junk": np.ones(3, np.float32)}, {"positions": 2})
    r = server.request("POST", "/v1/rope", body=data,
                       headers={"Content-Type": "application/vnd.safetensors",
                                "Prefer": "handling=strict"})
    assert r.status == 400 and json.loads(r.body)["field"] == "/junk", r.body[:300]


# ===========================================================================
# the published table
# ===========================================================================

def test_models_catalog_and_docs_table(server):
    cat = models(server)
    fams = {f["model_type"] for f in cat["families"]}
    assert {p[0] for p in PUBLISHED.values()} <= fams
    keys = {k["key"]: k for k in cat["keys"]}
    assert keys["attn_logit_softcapping"]["class"] == "honoured"
    assert keys["attention_bias"]["class"] == "upstream"
    assert keys["alibi"]["class"] == "refused"
    # docs/models.md carries the same table, row for row
    with open(os.path.join(ROOT, "docs", "models.md"), encoding="utf-8") as f:
        text = f.read()
    section = text.split("### Every config key attnbias knows", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \| (\w+) \|", section, re.M)
    documented = {k: c for k, c in rows}
    assert documented == {k: v["class"] for k, v in keys.items()}, (
        sorted(set(documented.items()) ^ {(k, v["class"]) for k, v in keys.items()}))
    for p in cat["presets"]:
        assert "`%s`" % p["name"] in text, p["name"]
