#!/usr/bin/python3
"""worked_examples.py: the worked examples of docs/methods.md, computed here
in float64 with numpy straight from the formulas of that page.

    /usr/bin/python3 docs/worked_examples.py            # every example
    /usr/bin/python3 docs/worked_examples.py 7 12b      # ids starting so
    /usr/bin/python3 docs/worked_examples.py --markdown # as methods.md prints them

Every number block of docs/methods.md that follows a marker
`<!-- example ID -->` is EXAMPLES[ID]() printed to 7 significant digits;
tests/http/test_docs.py recomputes each one and fails when the page and this
file disagree.  The C and Python tests copy their expected values from those
blocks (each test names its example), so every expected number of the test
suites can be traced to a formula below.

Nothing here calls attnbias: these are the independent references.
"""

import math
import sys

import numpy as np

EXAMPLES = {}


def example(eid):
    def reg(fn):
        EXAMPLES[eid] = fn
        return fn
    return reg


# ===========================================================================
# 1-2  absolute encodings
# ===========================================================================

def sinusoidal(pos, d, layout, base=10000.0):
    """PE [n, d].  interleaved: column 2k sin, 2k+1 cos of p * base^(-2k/d);
    concat: [sin | cos] of the same angles; tensor2tensor: [sin | cos] of
    p * base^(-k/(d/2 - 1)), a zero column when d is odd."""
    pos = np.asarray(pos, dtype=np.float64)[:, None]
    out = np.zeros((pos.shape[0], d))
    if layout == "tensor2tensor":
        h = d // 2
        ang = pos * np.exp(-np.arange(h) * math.log(base) / (h - 1))
        out[:, :h] = np.sin(ang)
        out[:, h:2 * h] = np.cos(ang)
        return out
    k = np.arange((d + 1) // 2)
    ang = pos * base ** (-2.0 * k / d)
    if layout == "interleaved":
        out[:, 0::2] = np.sin(ang)
        out[:, 1::2] = np.cos(ang)[:, : d // 2]
    else:
        out[:, : (d + 1) // 2] = np.sin(ang)
        out[:, (d + 1) // 2:] = np.cos(ang)[:, : d // 2]
    return out


@example("1a")
def ex_1a():
    return sinusoidal(range(4), 8, "interleaved")


@example("1b")
def ex_1b():
    return sinusoidal(range(4), 8, "concat")


@example("1c")
def ex_1c():
    return sinusoidal(range(4), 8, "tensor2tensor")


@example("1d")
def ex_1d():
    return sinusoidal([5], 7, "tensor2tensor")[0]


@example("1e")
def ex_1e():
    return sinusoidal([5], 7, "interleaved")[0]


def learned_table(rows):
    """W[p, c] = (4p + c) / 10, 4 columns."""
    return np.array([[(4 * p + c) / 10 for c in range(4)] for p in range(rows)])


@example("2a")
def ex_2a():
    return learned_table(5)[np.array([3, 0, 4]) + 0]


@example("2b")
def ex_2b():
    return learned_table(7)[np.array([0, 1, 2]) + 2]


# ===========================================================================
# 3  T5 buckets: Hugging Face's _relative_position_bucket in float32
# ===========================================================================

T5_RELS = [-200, -128, -127, -64, -32, -20, -16, -9, -8, -7, -1, 0, 1, 2, 7,
           8, 9, 15, 16, 20, 32, 64, 127, 128, 200]


def t5_bucket(rel, nb=32, bidirectional=True, md=128, float32=True):
    """rel = key - query.  The log step in float32 as HF computes it: the
    float32 ratio n / max_exact, its float32 log, divided by the float32 of
    the double log(md / max_exact), times the bucket span, truncated.
    float32=False takes that step in double instead (not HF's numbers)."""
    ret = 0
    if bidirectional:
        nb //= 2
        ret = nb if rel > 0 else 0
        n = abs(rel)
    else:
        n = max(-rel, 0)
    me = nb // 2
    if n < me:
        return ret + n
    if float32:
        f32 = np.float32
        v = (np.log(f32(n) / f32(me)) / f32(math.log(md / me))) * f32(nb - me)
    else:
        v = math.log(n / me) / math.log(md / me) * (nb - me)
    return ret + min(me + int(v), nb - 1)


@example("3a")
def ex_3a():
    return np.array([t5_bucket(r) for r in T5_RELS])


@example("3b")
def ex_3b():
    return np.array([t5_bucket(r, bidirectional=False) for r in T5_RELS])


def t5_matrix(bidirectional):
    return np.array([[t5_bucket(j - i, 8, bidirectional, 16) for j in range(6)]
                     for i in range(6)])


@example("3c")
def ex_3c():
    return t5_matrix(True)


@example("3d")
def ex_3d():
    return t5_matrix(False)


@example("3e")
def ex_3e():
    table = np.array([[0.1 * b - h for h in range(2)] for b in range(8)])
    return table[t5_matrix(True)[5], 1]


@example("3f")
def ex_3f():
    return np.array([t5_bucket(-1000), t5_bucket(1000),
                     t5_bucket(-1000, bidirectional=False),
                     t5_bucket(1000, bidirectional=False)])


T5_EDGES = [(-64, 32, True, 128), (-10, 20, True, 160), (10, 20, True, 160),
            (-20, 20, True, 160), (-80, 20, True, 160), (-10, 10, False, 160)]


@example("3g")
def ex_3g():
    """The float32 step lands on integers where double rounds below."""
    return np.array([t5_bucket(*e) for e in T5_EDGES])


@example("3h")
def ex_3h():
    """The same six buckets with the log step in double (what HF does not
    do): the last five land one lower."""
    return np.array([t5_bucket(*e, float32=False) for e in T5_EDGES])


# ===========================================================================
# 4  ALiBi
# ===========================================================================

def alibi_slopes(n, max_bias=8.0):
    """ggml: p = 2^floor(log2 n); head h < p: 2^(-max_bias (h+1)/p); the
    others 2^(-(max_bias/2) (2(h-p)+1)/p)."""
    p = 1 << (n.bit_length() - 1)
    return np.array([2.0 ** (-max_bias * (h + 1) / p) if h < p else
                     2.0 ** (-(max_bias / 2) * (2 * (h - p) + 1) / p)
                     for h in range(n)])


def ofirpress_slopes(n):
    """The ALiBi paper's get_slopes, as its repository writes it."""
    def pow2(m):
        start = 2 ** (-2 ** -(math.log2(m) - 3))
        return [start * start ** i for i in range(m)]
    if math.log2(n).is_integer():
        return pow2(n)
    p = 2 ** math.floor(math.log2(n))
    return pow2(p) + ofirpress_slopes(2 * p)[0::2][: n - p]


for _n in (1, 2, 3, 4, 5, 6, 8, 12, 16):
    example("4-%d" % _n)(lambda n=_n: alibi_slopes(n))
example("4-6-mb16")(lambda: alibi_slopes(6, 16.0))
example("4-6-mb4")(lambda: alibi_slopes(6, 4.0))


def alibi_table(n_heads, L, head, causal):
    m = alibi_slopes(n_heads)[head]
    i, j = np.arange(L)[:, None], np.arange(L)[None, :]
    t = -m * np.abs(i - j).astype(np.float64)
    if causal:
        t = np.where(j > i, -np.inf, t)
    return t


@example("4s")
def ex_4s():
    return alibi_table(4, 4, 0, False)


@example("4c")
def ex_4c():
    return alibi_table(4, 4, 3, True)


# ===========================================================================
# 5  FIRE
# ===========================================================================

FIRE_W1 = np.array([[1.0], [-0.5], [2.0]])
FIRE_B1 = np.array([0, 0.5, -0.2])
FIRE_W2 = np.array([[0.3, -0.7, 0.1], [-0.2, 0.4, 0.5]])
FIRE_B2 = np.array([0.05, -0.1])


def fire_x(L=4.0, c=0.1, eps=0.0, n=5):
    """x[i, j] = psi(i - j) / (psi(max(L, i)) + eps), psi(t) = ln(c t + 1);
    keys after the query use distance 0."""
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    t = np.maximum(i - j, 0).astype(np.float64)
    return np.log(c * t + 1) / (np.log(c * np.maximum(L, i) + 1) + eps)


def fire_bias(head):
    x = fire_x()[..., None]                            # [5, 5, 1]
    hid = np.maximum(x @ FIRE_W1.T + FIRE_B1, 0)        # ReLU between layers
    return (hid @ FIRE_W2.T + FIRE_B2)[..., head]       # none after the last


@example("5x")
def ex_5x():
    return fire_x()


@example("5h0")
def ex_5h0():
    return fire_bias(0)


@example("5h1")
def ex_5h1():
    return fire_bias(1)


# ===========================================================================
# 6-10  RoPE
# ===========================================================================

X8 = np.arange(1, 9, dtype=np.float64)
X16 = np.arange(1, 17, dtype=np.float64)


def inv_freq(r, theta=10000.0):
    return theta ** (-2.0 * np.arange(r // 2) / r)


def rotate(x, ang, interleaved, mul=None):
    """Rotate pairs of x by ang (one angle per pair; r = 2 len(ang) channels
    rotate, the rest pass).  Pair k is (2k, 2k+1) when interleaved, else
    (k, k + r/2).  mul scales cos and sin per pair."""
    x = np.asarray(x, dtype=np.float64)
    ang = np.asarray(ang, dtype=np.float64)
    m = np.ones_like(ang) if mul is None else np.asarray(mul, dtype=np.float64)
    h = len(ang)
    a = np.arange(h) * 2 if interleaved else np.arange(h)
    b = a + 1 if interleaved else a + h
    c, s = np.cos(ang) * m, np.sin(ang) * m
    out = x.copy()
    out[a] = x[a] * c - x[b] * s
    out[b] = x[b] * c + x[a] * s
    return out


@example("6f")
def ex_6f():
    return inv_freq(8)


for _p in (0, 1, 3, 100):
    example("6-half-%d" % _p)(lambda p=_p: rotate(X8, p * inv_freq(8), False))
    example("6-inter-%d" % _p)(lambda p=_p: rotate(X8, p * inv_freq(8), True))


@example("6-partial-half")
def ex_6ph():
    return rotate(X8, 3 * inv_freq(4), False)


@example("6-partial-inter")
def ex_6pi():
    return rotate(X8, 3 * inv_freq(4), True)


@example("6-relative")
def ex_6rel():
    q, k = X8, X8[::-1]
    f = inv_freq(8)

    def logit(pq, pk):
        return rotate(q, pq * f, False) @ rotate(k, pk * f, False)
    return np.array([logit(5, 2), logit(13, 10)])


# ---- 7: the scaling types, rotary_dim 16 unless said ------------------------

@example("7-default")
def ex_7_default():
    return inv_freq(16)


@example("7-linear")
def ex_7_linear():
    return inv_freq(16) / 4


def ntk_base(r, theta, factor):
    return theta * factor ** (r / (r - 2))


@example("7-ntk-base")
def ex_7_ntk_base():
    return np.array([ntk_base(16, 10000.0, 4)])


@example("7-ntk")
def ex_7_ntk():
    return inv_freq(16, ntk_base(16, 10000.0, 4))


def dynamic_base(r, theta, factor, orig, seq_len):
    L = max(seq_len, orig)
    return theta * (factor * L / orig - (factor - 1)) ** (r / (r - 2))


@example("7-dynamic-64")
def ex_7_dynamic_64():
    return inv_freq(16, dynamic_base(16, 10000.0, 4, 64, 64))


@example("7-dynamic-base-128")
def ex_7_dynamic_base():
    return np.array([dynamic_base(16, 10000.0, 4, 64, 128)])


@example("7-dynamic-128")
def ex_7_dynamic_128():
    return inv_freq(16, dynamic_base(16, 10000.0, 4, 64, 128))


def yarn(r, theta, factor, orig, beta_fast=32.0, beta_slow=1.0,
         truncate=True, mscale=None, mscale_all_dim=None):
    """(inv_freq, attention factor, (low, high)) as HF's YaRN computes them."""
    def corr(rot):
        return r * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(theta))
    lo, hi = corr(beta_fast), corr(beta_slow)
    if truncate:
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, r - 1)
    if lo == hi:
        hi += 0.001
    k = np.arange(r // 2)
    ramp = np.clip((k - lo) / (hi - lo), 0, 1)
    f = inv_freq(r, theta)
    inv = f / factor * ramp + f * (1 - ramp)

    def get_mscale(s, m=1.0):
        return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0
    if mscale and mscale_all_dim:
        att = get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
    else:
        att = get_mscale(factor)
    return inv, att, (lo, hi)


@example("7-yarn")
def ex_7_yarn():
    return yarn(16, 10000.0, 4, 64)[0]


@example("7-yarn-range")
def ex_7_yarn_range():
    inv, att, (lo, hi) = yarn(16, 10000.0, 4, 64)
    return np.array([lo, hi, att])


@example("7-yarn-notrunc")
def ex_7_yarn_notrunc():
    return yarn(16, 10000.0, 4, 64, truncate=False)[0]


@example("7-yarn-notrunc-range")
def ex_7_yarn_notrunc_range():
    inv, att, (lo, hi) = yarn(16, 10000.0, 4, 64, truncate=False)
    return np.array([lo, hi])


@example("7-yarn-128-range")
def ex_7_yarn128_range():
    inv, att, (lo, hi) = yarn(128, 10000.0, 16, 4096)
    return np.array([lo, hi, att])


@example("7-yarn-128-0")
def ex_7_yarn128_a():
    return yarn(128, 10000.0, 16, 4096)[0][0:4]


@example("7-yarn-128-18")
def ex_7_yarn128_b():
    return yarn(128, 10000.0, 16, 4096)[0][18:24]


@example("7-yarn-128-60")
def ex_7_yarn128_c():
    return yarn(128, 10000.0, 16, 4096)[0][60:64]


@example("7-yarn-deepseek")
def ex_7_yarn_deepseek():
    return np.array([yarn(16, 10000.0, 40, 64, mscale=0.707,
                          mscale_all_dim=0.707)[1],
                     yarn(16, 10000.0, 40, 64, mscale=1.0,
                          mscale_all_dim=0.707)[1]])


def llama3(r, theta, factor, orig, low=1.0, high=4.0):
    f = inv_freq(r, theta)
    wl = 2 * math.pi / f
    smooth = (orig / wl - low) / (high - low)
    mid = (1 - smooth) * f / factor + smooth * f
    return np.where(wl < orig / high, f, np.where(wl > orig / low, f / factor, mid))


@example("7-llama3-wavelen")
def ex_7_llama3_wl():
    return 2 * math.pi / inv_freq(16)


@example("7-llama3")
def ex_7_llama3():
    return llama3(16, 10000.0, 8, 64)


@example("7-llama3-128-0")
def ex_7_llama3_a():
    return llama3(128, 500000.0, 8, 8192)[0:3]


@example("7-llama3-128-40")
def ex_7_llama3_b():
    return llama3(128, 500000.0, 8, 8192)[40:48]


@example("7-llama3-128-61")
def ex_7_llama3_c():
    return llama3(128, 500000.0, 8, 8192)[61:64]


LR_SHORT = np.array([1.0, 1.0, 1.1, 1.2, 1.5, 2.0, 3.0, 4.0])
LR_LONG = np.array([1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 16.0])


def longrope(seq_len, orig=64, max_pos=256, r=16, theta=10000.0):
    ext = LR_LONG if seq_len > orig else LR_SHORT
    inv = 1.0 / (ext * theta ** (2.0 * np.arange(r // 2) / r))
    factor = max_pos / orig
    att = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(orig))
    return inv, att


@example("7-longrope-att")
def ex_7_longrope_att():
    return np.array([longrope(32)[1]])


@example("7-longrope-32")
def ex_7_longrope_32():
    return longrope(32)[0]


@example("7-longrope-100")
def ex_7_longrope_100():
    return longrope(100)[0]


@example("7-yarn-apply")
def ex_7_yarn_apply():
    inv, att, _ = yarn(16, 10000.0, 4, 64)
    return rotate(X16, 50 * inv, False, np.full(8, att))


# ---- 8, 9: multi-axis ---------------------------------------------------------

def mrope_axes(sections, interleaved):
    half = sum(sections)
    if not interleaved:
        return np.repeat(np.arange(len(sections)), sections)
    ax = np.zeros(half, dtype=int)
    for f in range(half):
        if f % 3 == 1 and f < 3 * sections[1]:
            ax[f] = 1
        elif f % 3 == 2 and f < 3 * sections[2]:
            ax[f] = 2
    return ax


def mrope(interleaved):
    pos = np.array([5.0, 2.0, 7.0])                    # (t, h, w)
    ang = pos[mrope_axes([2, 3, 3], interleaved)] * inv_freq(16)
    return rotate(X16, ang, False)


@example("8-axes")
def ex_8_axes():
    return mrope_axes([2, 3, 3], False)


@example("8-angles")
def ex_8_angles():
    return np.array([5.0, 2.0, 7.0])[mrope_axes([2, 3, 3], False)] * inv_freq(16)


@example("8")
def ex_8():
    return mrope(False)


@example("8-axes-interleaved")
def ex_8_axes_i():
    return mrope_axes([2, 3, 3], True)


@example("8-interleaved")
def ex_8_i():
    return mrope(True)


@example("9")
def ex_9():
    f = 10000.0 ** (-2.0 * np.arange(2) / 4)           # over rotary_dim/2 = 4
    ang = np.concatenate([1 * f, 2 * f])               # row 1, column 2
    return rotate(X8, ang, False)


# ---- 10: xPos -------------------------------------------------------------

XQ = np.array([1.0, 2.0, 3.0, 4.0])
XK = np.array([0.5, -1.0, 2.0, 1.5])


def xpos_zeta(r=4, gamma=0.4):
    return (2 * np.arange(r // 2) + gamma * r) / ((1 + gamma) * r)


def xpos(x, p, key, centre):
    """Interleaved RoPE at position p, cos and sin times zeta^(+-n/512) with
    n = p - centre (torchscale centres on -L//2; attnbias does not: 0)."""
    e = (p - centre) / 512.0 * (-1 if key else 1)
    return rotate(x, p * inv_freq(4), True, xpos_zeta() ** e)


@example("10-zeta")
def ex_10_zeta():
    return xpos_zeta()


@example("10-q")
def ex_10_q():
    return np.array([xpos(XQ, p, False, 2) for p in range(4)])


@example("10-k")
def ex_10_k():
    return np.array([xpos(XK, p, True, 2) for p in range(4)])


@example("10-logits")
def ex_10_logits():
    return np.array([xpos(XQ, 3, False, 0) @ xpos(XK, 1, True, 0),
                     xpos(XQ, 2, False, 0) @ xpos(XK, 0, True, 0)])


# ===========================================================================
# 11  Kerple
# ===========================================================================

def kerple(L, r1, r2, power):
    i, j = np.arange(L)[:, None], np.arange(L)[None, :]
    d = np.abs(i - j).astype(np.float64)
    b = -r1 * d ** r2 if power else -r1 * np.log(1 + r2 * d)
    return np.where(j > i, -np.inf, b)


@example("11-log")
def ex_11_log():
    return kerple(5, 2.0, 0.5, False)


@example("11-power")
def ex_11_power():
    return kerple(5, 1.0, 1.5, True)[4]


# ===========================================================================
# 12  attention
# ===========================================================================

def ex12_inputs():
    """q [1, 3, 2, 4], k and v [1, 4, 1, 4] in bshd, filled by flat index,
    returned in bhsd: q [1, 2, 3, 4], k, v [1, 1, 4, 4]."""
    q = ((np.arange(24) % 7) - 3) / 4
    k = ((np.arange(16) % 5) - 2) / 3
    v = (((3 * np.arange(16)) % 11) - 5) / 5
    return (q.reshape(1, 3, 2, 4).transpose(0, 2, 1, 3),
            k.reshape(1, 4, 1, 4).transpose(0, 2, 1, 3),
            v.reshape(1, 4, 1, 4).transpose(0, 2, 1, 3))


def attention(scale=0.5, causal=False, q_offset=1, softcap=0.0, slopes=None,
              window=None, key_bias=None):
    """Naive float64 attention over the example: scores, softcap, ALiBi,
    a per-key additive bias, masks, softmax (a fully masked row gives 0)."""
    q, k, v = ex12_inputs()
    k, v = np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1)   # GQA 2:1
    s = scale * q @ k.transpose(0, 1, 3, 2)                   # [1, 2, 3, 4]
    if softcap:
        s = softcap * np.tanh(s / softcap)
    pq = q_offset + np.arange(3)[:, None]
    j = np.arange(4)[None, :]
    if slopes is not None:
        s = s - np.asarray(slopes)[None, :, None, None] * np.abs(pq - j)
    if key_bias is not None:
        s = s + np.asarray(key_bias)
    vis = np.ones((3, 4), bool)
    if causal:
        vis &= j <= pq
    if window is not None:
        vis &= (pq - window[0] <= j) & (j <= pq + window[1])
    s = np.where(vis, s, -np.inf)
    m = s.max(-1, keepdims=True)
    e = np.where(np.isfinite(s), np.exp(s - np.where(np.isfinite(m), m, 0)), 0)
    tot = e.sum(-1, keepdims=True)
    w = np.where(tot > 0, e / np.where(tot > 0, tot, 1), 0)
    return w @ v, w


EX12 = {
    "12a": {},
    "12b": {"causal": True},
    "12b-top-left": {"causal": True, "q_offset": 0},
    "12c": {"causal": True, "slopes": [0.0625, 0.00390625]},
    "12d": {"causal": True, "softcap": 0.5},
    "12e": {"window": (1, 0)},
    "12f": {"scale": 1.0, "key_bias": [0, 0, -np.inf, 0]},
    "12g": {"causal": True, "key_bias": [-np.inf, -np.inf, -np.inf, 0]},
}


@example("12-q")
def ex_12_q():
    return ex12_inputs()[0].transpose(0, 2, 1, 3).reshape(3, 8)


@example("12-k")
def ex_12_k():
    return ex12_inputs()[1][0, 0]


@example("12-v")
def ex_12_v():
    return ex12_inputs()[2][0, 0]


for _name, _kw in EX12.items():
    example(_name + "-out0")(lambda kw=_kw: attention(**kw)[0][0, 0])
    example(_name + "-out1")(lambda kw=_kw: attention(**kw)[0][0, 1])
    example(_name + "-w0")(lambda kw=_kw: attention(**kw)[1][0, 0])


# ===========================================================================
# printing
# ===========================================================================

def fmt(v):
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return "%.7g" % v


def block(a):
    """The text of one number block: a 1-D array on one line, a 2-D array
    one row per line."""
    a = np.asarray(a)
    if a.ndim <= 1:
        return "[" + ", ".join(fmt(x) for x in np.atleast_1d(a)) + "]"
    return "\n".join("[" + ", ".join(fmt(x) for x in row) + "]" for row in a)


def self_checks():
    """Identities docs/methods.md states, checked in float64."""
    for n in range(1, 65):                 # ggml max_bias 8 == the paper
        assert np.allclose(alibi_slopes(n), ofirpress_slopes(n), rtol=1e-14), n
    a, b = ex_6rel()                       # RoPE logits see distances only
    assert abs(a - b) < 1e-12 * abs(a), (a, b)
    c, d = ex_10_logits()                  # centring cancels in the logits
    q3, k1 = xpos(XQ, 3, False, 2), xpos(XK, 1, True, 2)
    assert abs(c - d) < 1e-12 * abs(c) and abs(q3 @ k1 - c) < 1e-12 * abs(c)
    f = inv_freq(16)                       # text tokens: M-RoPE == RoPE
    for inter in (False, True):
        ang = np.full(3, 9.0)[mrope_axes([2, 3, 3], inter)] * f
        assert np.allclose(rotate(X16, ang, False), rotate(X16, 9 * f, False))


def main(argv):
    md = "--markdown" in argv
    want = [a for a in argv if not a.startswith("--")]
    for eid, fn in EXAMPLES.items():
        if want and not any(eid.startswith(w) for w in want):
            continue
        if md:
            print("<!-- example %s -->\n```text\n%s\n```" % (eid, block(fn())))
        else:
            print("%s:\n%s" % (eid, block(fn())))
    self_checks()


if __name__ == "__main__":
    main(sys.argv[1:])
