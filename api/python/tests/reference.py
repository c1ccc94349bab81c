"""reference.py: float64 numpy references of what attnbias computes, written
from the formulas of docs/methods.md and never from the server's answers.
The package's tests (this directory) and tests/http/test_client.py compare
the client's results with them; test_reference.py pins them to the worked
examples of docs/methods.md, so that a wrong reference cannot agree with a
wrong server.
"""

import math

import numpy as np

RTOL, ATOL = 1e-5, 1e-6


def close(got, want, rtol=RTOL, atol=ATOL, what=""):
    """assert_allclose that treats equal infinities as equal."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, "%s: shape %s, want %s" % (what, got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=what)


def ref_sinusoidal(pos, dim, base=10000.0, layout="interleaved"):
    """docs/methods.md#sinusoidal: the three layouts."""
    pos = np.asarray(pos, dtype=np.float64)[:, None]
    if layout == "tensor2tensor":
        half = dim // 2
        freq = np.exp(-np.arange(half) * math.log(base) / (half - 1))
        ang = pos * freq
        out = np.concatenate([np.sin(ang), np.cos(ang)], axis=1)
        if dim % 2:
            out = np.concatenate([out, np.zeros((len(out), 1))], axis=1)
        return out
    freq = base ** (-np.arange(0, dim, 2) / dim)
    ang = pos * freq
    if layout == "concat":
        return np.concatenate([np.sin(ang), np.cos(ang)], axis=1)
    out = np.empty((len(pos), dim))
    out[:, 0::2] = np.sin(ang)
    out[:, 1::2] = np.cos(ang)
    return out


def ref_inv_freq(rot, theta=10000.0):
    return theta ** (-np.arange(0, rot, 2) / rot)


def ref_yarn_inv_freq(rot, theta, factor, orig, beta_fast=32, beta_slow=1,
                      truncate=True):
    """HF _compute_yarn_parameters, in float64; returns (inv_freq, attention_factor)."""
    def corr_dim(rotations):
        return (rot * math.log(orig / (rotations * 2 * math.pi))) / (2 * math.log(theta))
    low, high = corr_dim(beta_fast), corr_dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, rot - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(rot // 2) - low) / (high - low), 0, 1)
    extra = 1 - ramp
    pos_freqs = theta ** (np.arange(0, rot, 2) / rot)
    inv = (1 / (factor * pos_freqs)) * (1 - extra) + (1 / pos_freqs) * extra
    return inv, 0.1 * math.log(factor) + 1.0


def ref_rope_apply(x, pos, inv_freq, interleaved=False, scaling=1.0):
    """Rotate the last axis of x [..., n, d]; pos [n]; dims past 2*len(inv_freq) pass."""
    x = np.asarray(x, dtype=np.float64)
    r = 2 * len(inv_freq)
    ang = np.asarray(pos, dtype=np.float64)[:, None] * inv_freq[None, :]
    c, s = np.cos(ang) * scaling, np.sin(ang) * scaling
    out = x.copy()
    if interleaved:
        a, b = x[..., 0:r:2], x[..., 1:r:2]
        out[..., 0:r:2] = a * c - b * s
        out[..., 1:r:2] = b * c + a * s
    else:
        a, b = x[..., : r // 2], x[..., r // 2: r]
        out[..., : r // 2] = a * c - b * s
        out[..., r // 2: r] = b * c + a * s
    return out


def ref_alibi_slopes(n, max_bias=8.0):
    """ggml form (docs/methods.md#alibi)."""
    n_log2 = 2 ** int(math.floor(math.log2(n)))
    m0 = 2.0 ** (-max_bias / n_log2)
    m1 = 2.0 ** (-(max_bias / 2) / n_log2)
    return np.array([m0 ** (h + 1) if h < n_log2 else m1 ** (2 * (h - n_log2) + 1)
                     for h in range(n)])


def ref_positions(q_len, k_len, q_offset=None):
    if q_offset is None:
        q_offset = k_len - q_len
    return q_offset + np.arange(q_len), np.arange(k_len)


def ref_alibi(n, q_len, k_len, causal=False, q_offset=None, max_bias=8.0):
    pq, pk = ref_positions(q_len, k_len, q_offset)
    dist = np.abs(pq[:, None] - pk[None, :]).astype(np.float64)
    out = -ref_alibi_slopes(n, max_bias)[:, None, None] * dist[None]
    if causal:
        out = np.where(pk[None, None, :] > pq[None, :, None], -np.inf, out)
    return out


def ref_t5_bucket(rel, num_buckets=32, bidirectional=True, max_distance=128):
    """HF T5Attention._relative_position_bucket, with HF's float32 log step."""
    rel = np.asarray(rel, dtype=np.int64)
    ret = np.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        ret += (rel > 0).astype(np.int64) * num_buckets
        n = np.abs(rel)
    else:
        n = np.maximum(-rel, 0)
    max_exact = num_buckets // 2
    is_small = n < max_exact
    nf = np.maximum(n, 1).astype(np.float32)
    large = (np.log(nf / np.float32(max_exact)) / np.float32(math.log(max_distance / max_exact))
             * np.float32(num_buckets - max_exact)).astype(np.int64) + max_exact
    large = np.minimum(large, num_buckets - 1)
    return ret + np.where(is_small, n, large)


def ref_attention(q, k, v, scale=None, causal=False, q_offset=None, bias=None,
                  kv_lens=None, window=None, softcap=0.0):
    """bhsd float64 attention: returns (output, lse, weights)."""
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    B, H, Nq, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    rep = H // Hkv
    k = np.repeat(k, rep, axis=1)
    v = np.repeat(v, rep, axis=1)
    s = (1 / math.sqrt(D) if scale is None else scale) * (q @ np.swapaxes(k, -1, -2))
    if softcap:
        s = softcap * np.tanh(s / softcap)
    if bias is not None:
        s = s + bias
    pq, pk = ref_positions(Nq, Nk, q_offset)
    mask = np.zeros((B, 1, Nq, Nk), dtype=bool)
    if causal:
        mask |= pk[None, None, None, :] > pq[None, None, :, None]
    if window is not None:
        left, right = window
        if left >= 0:
            mask |= pk[None, None, None, :] < pq[None, None, :, None] - left
        if right >= 0:
            mask |= pk[None, None, None, :] > pq[None, None, :, None] + right
    if kv_lens is not None:
        mask |= pk[None, None, None, :] >= np.asarray(kv_lens)[:, None, None, None]
    s = np.where(mask, -np.inf, s)
    m = np.max(s, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m)
    tot = e.sum(axis=-1, keepdims=True)
    w = np.where(tot > 0, e / np.where(tot > 0, tot, 1), 0.0)
    with np.errstate(divide="ignore"):
        lse = np.where(tot[..., 0] > 0, np.log(tot[..., 0]) + m[..., 0], -np.inf)
    return w @ v, lse, w


def example12():
    """docs/methods.md example 12: q (1,3,2,4), k, v (1,4,1,4) bshd, as bhsd."""
    q = ((np.arange(24) % 7) - 3) / 4
    k = ((np.arange(16) % 5) - 2) / 3
    v = (((3 * np.arange(16)) % 11) - 5) / 5
    q = q.reshape(1, 3, 2, 4).transpose(0, 2, 1, 3)
    k = k.reshape(1, 4, 1, 4).transpose(0, 2, 1, 3)
    v = v.reshape(1, 4, 1, 4).transpose(0, 2, 1, 3)
    return q, k, v
