#!/usr/bin/python3
"""torch_bench.py: torch as the peer of `make bench` (Debian python3-torch).

With --serve it is a coprocess of bench/bench: it answers one timed
repetition per command line, so that torch's repetitions interleave with
attnbias's in the same run:

    attn <matmul|sdpa> <dense|causal|alibi> <Hq> <Hkv> <N> <d>  -> ok <ms>
    rope <half|interleaved> <N>                                  -> ok <ms>
    quit

Its first line is "ready torch <version> sdpa=<0|1> threads=<n>", or
"absent <reason>" (then it exits 0) when torch cannot be imported.

Without --serve it times the same cases alone and prints a small table
(useful by hand: /usr/bin/python3 bench/torch_bench.py --threads 2).

What is timed, so the ratio is read right:
  - matmul: softmax(scale * q @ k^T [+ bias | causal fill]) @ v, fp32, the
    eager code of Hugging Face attention; the causal boolean mask and the
    ALiBi table [H, N, N] are built once per shape, outside the timing
    (a model caches them), so torch's figure is its best case;
  - sdpa: torch's own scaled-dot-product attention (private
    F._scaled_dot_product_attention in 1.13, public in 2.x);
  - rope: eager rotate-half (or interleaved) on q and k [1, 32, N, 128],
    out of place, with cos/sin tables precomputed.
"""
import argparse
import math
import sys
import time


def alibi_slopes(n):
    """docs/methods.md#alibi (max_bias 8), for any head count."""
    p = 2 ** int(math.floor(math.log2(n)))
    s = [2.0 ** (-8.0 * (h + 1) / p) for h in range(p)]
    s += [2.0 ** (-4.0 * (2 * k + 1) / p) for k in range(n - p)]
    return s


class Peer:
    def __init__(self, torch, threads):
        self.torch = torch
        torch.set_num_threads(threads)
        self.threads = threads
        self.key = None
        self.state = {}
        F = torch.nn.functional
        f = getattr(F, "scaled_dot_product_attention", None)
        # 1.13 has it private, as F._scaled_dot_product_attention(q, k, v,
        # attn_mask, dropout_p, need_attn_weights, is_causal) -> (out, w).
        g = getattr(F, "_scaled_dot_product_attention", None) or \
            getattr(torch, "_scaled_dot_product_attention", None)
        if f is not None:
            self.sdpa = lambda q, k, v, causal: f(q, k, v, is_causal=causal)
        elif g is not None:
            def sdpa(q, k, v, causal):
                r = g(q, k, v, None, 0.0, False, causal)
                return r[0] if isinstance(r, tuple) else r

            self.sdpa = sdpa
        else:
            self.sdpa = None

    def _shape(self, key, build):
        # Keep only the current shape's tensors: bounded memory.
        if self.key != key:
            self.state = {}
            self.key = key
            self.state = build()
        return self.state

    def attn(self, impl, variant, hq, hkv, n, d):
        torch = self.torch

        def build():
            g = torch.Generator().manual_seed(n)
            st = {
                "q": torch.rand(1, hq, n, d, generator=g) * 2 - 1,
                "k": torch.rand(1, hkv, n, d, generator=g) * 2 - 1,
                "v": torch.rand(1, hkv, n, d, generator=g) * 2 - 1,
            }
            return st

        st = self._shape(("attn", hq, hkv, n, d), build)
        q, k, v = st["q"], st["k"], st["v"]
        scale = 1.0 / math.sqrt(d)
        if variant == "causal" and "causal" not in st:
            st["causal"] = torch.ones(n, n, dtype=torch.bool).triu_(1)
        if variant == "alibi" and "alibi" not in st:
            pos = torch.arange(n, dtype=torch.float32)
            dist = (pos[:, None] - pos[None, :]).abs()
            slopes = torch.tensor(alibi_slopes(hq), dtype=torch.float32)
            st["alibi"] = (-slopes[:, None, None] * dist).unsqueeze(0)
        with torch.inference_mode():
            t0 = time.perf_counter()
            if impl == "sdpa":
                if self.sdpa is None or variant not in ("dense", "causal"):
                    raise ValueError("sdpa %s not available" % variant)
                out = self.sdpa(q, k, v, variant == "causal")
            elif impl == "matmul":
                s = torch.matmul(q, k.transpose(-2, -1)).mul_(scale)
                if variant == "causal":
                    s.masked_fill_(st["causal"], float("-inf"))
                elif variant == "alibi":
                    s.add_(st["alibi"])
                elif variant != "dense":
                    raise ValueError("unknown variant " + variant)
                out = torch.matmul(torch.softmax(s, dim=-1), v)
            else:
                raise ValueError("unknown impl " + impl)
            t1 = time.perf_counter()
        del out
        return (t1 - t0) * 1e3

    def rope(self, pairing, n):
        torch = self.torch
        h, d = 32, 128

        def build():
            g = torch.Generator().manual_seed(n)
            inv = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
            ang = torch.arange(n, dtype=torch.float64)[:, None] * inv[None, :]
            cos, sin = ang.cos().float(), ang.sin().float()
            return {
                "q": torch.rand(1, h, n, d, generator=g) * 2 - 1,
                "k": torch.rand(1, h, n, d, generator=g) * 2 - 1,
                "half": (torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)),
                "interleaved": (cos.repeat_interleave(2, -1),
                                sin.repeat_interleave(2, -1)),
            }

        st = self._shape(("rope", n), build)
        cos, sin = st[pairing]

        def rot(x):
            if pairing == "half":
                x1, x2 = x[..., : d // 2], x[..., d // 2:]
                return torch.cat((-x2, x1), dim=-1)
            x2 = x.unflatten(-1, (d // 2, 2))
            return torch.stack((-x2[..., 1], x2[..., 0]), dim=-1).flatten(-2)

        with torch.inference_mode():
            t0 = time.perf_counter()
            qo = st["q"] * cos + rot(st["q"]) * sin
            ko = st["k"] * cos + rot(st["k"]) * sin
            t1 = time.perf_counter()
        del qo, ko
        return (t1 - t0) * 1e3


def serve(peer):
    for line in sys.stdin:
        w = line.split()
        if not w:
            continue
        try:
            if w[0] == "quit":
                break
            if w[0] == "attn" and len(w) == 7:
                ms = peer.attn(w[1], w[2], *map(int, w[3:]))
            elif w[0] == "rope" and len(w) == 3:
                ms = peer.rope(w[1], int(w[2]))
            else:
                raise ValueError("bad command: " + line.strip())
            print("ok %.4f" % ms, flush=True)
        except Exception as e:  # report, keep serving
            print("err %s" % str(e).replace("\n", " "), flush=True)


def standalone(peer, quick):
    ns = [512] if quick else [512, 2048, 4096]
    for n in ns:
        for impl, var in (("matmul", "dense"), ("matmul", "causal"),
                          ("matmul", "alibi"), ("sdpa", "dense"),
                          ("sdpa", "causal")):
            if impl == "sdpa" and peer.sdpa is None:
                continue
            ts = sorted(peer.attn(impl, var, 8, 8, n, 128) for _ in range(4))
            flops = 4.0 * 8 * n * n * 128 * (0.5 if var == "causal" else 1)
            print("attn %-6s %-6s H=8 N=%-5d d=128 %9.2f ms %7.1f GFLOP/s"
                  % (impl, var, n, ts[1], flops / ts[1] * 1e-6))
    for pairing in ("half", "interleaved"):
        n = 1024 if quick else 4096
        ts = sorted(peer.rope(pairing, n) for _ in range(4))
        gb = 2 * 2 * 32 * n * 128 * 4
        print("rope %-11s N=%d %9.2f ms %7.2f GB/s"
              % (pairing, n, ts[1], gb / ts[1] * 1e-6))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--serve", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    try:
        import torch
    except Exception as e:  # ImportError, or a broken install
        print("absent import torch failed (%s: %s); `make bench-deps` "
              "installs python3-torch" % (type(e).__name__, e), flush=True)
        return 0
    peer = Peer(torch, a.threads)
    if a.serve:
        print("ready torch %s sdpa=%d threads=%d"
              % (torch.__version__, peer.sdpa is not None, a.threads),
              flush=True)
        serve(peer)
    else:
        standalone(peer, a.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
