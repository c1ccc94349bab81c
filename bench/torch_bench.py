#!/usr/bin/python3
"""torch_bench.py: torch as the peer of `make bench` (Debian python3-torch).

With --serve it is a coprocess of bench/bench: it answers one timed
repetition per command line, so that torch's repetitions interleave with
attnbias's in the same run:

    attn <matmul|sdpa> <dense|causal|alibi> <Hq> <Hkv> <N> <d>  -> ok <ms>
    rope <half|interleaved> <N>                                  -> ok <ms>
    check attn <impl> <variant> <Hq> <Hkv> <N> <d> <file>        -> ok 0
    check rope <pairing> <N> <file>                              -> ok 0
    quit

`check` reads its inputs from <file> (float32, little-endian: q, k, v
[1, H, N, d] one after the other, or q, k [1, 32, N, 128] for RoPE),
computes what the timed command computes, and writes the outputs to
<file>.out, so the bench can compare them with its own before it times
anything.

Its first line is "ready torch <version> sdpa=<0|1> threads=<n>
openblas=<core> first=<core>" (first: what OpenBLAS picked before the
peer set OPENBLAS_CORETYPE, if it did), or "absent <reason>" (then it exits
0) when torch cannot be imported.

OpenBLAS picks its kernels from the CPU it detects; an OpenBLAS older than
the CPU falls back to a generic or older core (Debian's 0.3.21 calls a
Zen 5 "Haswell" and has been seen to call a Xeon with AVX-512 "Prescott",
an SSE3 core ~70x slower), which would make torch a strawman.  So before
importing torch the peer asks the library which core it chose, and when
that core is older than the best the CPU can run (from /proc/cpuinfo's
flags), it runs itself again with OPENBLAS_CORETYPE set to that core --
also over an OPENBLAS_CORETYPE of the environment that asked for an older
one.

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
import ctypes
import math
import os
import sys
import time

# OpenBLAS cores for x86-64, oldest first (those of one rank run the same
# kernels); a detected core below the CPU's best is replaced.
CORE_RANK = {"Prescott": 0, "Core2": 1, "Penryn": 1, "Dunnington": 1,
             "Nehalem": 2, "Atom": 2, "Sandybridge": 3, "Bulldozer": 3,
             "Piledriver": 3, "Steamroller": 3, "Excavator": 3,
             "Haswell": 4, "Zen": 4, "SkylakeX": 5, "Cooperlake": 6,
             "SapphireRapids": 7}


def openblas_core():
    """The core OpenBLAS (behind libblas.so.3, what torch uses) picked, or
    None when the BLAS is not OpenBLAS."""
    for name in ("libblas.so.3", "libopenblas.so.0"):
        try:
            f = ctypes.CDLL(name).openblas_get_corename
        except (OSError, AttributeError):
            continue
        f.restype = ctypes.c_char_p
        return f().decode()
    return None


def best_core():
    """The newest OpenBLAS core this CPU runs, from its flags, or None."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((l.split(":", 1)[1].split() for l in f
                          if l.startswith("flags")), [])
    except OSError:
        return None
    fl = set(flags)
    if "amx_tile" in fl or "avx512_fp16" in fl:
        return "SapphireRapids"
    if "avx512_bf16" in fl:
        return "Cooperlake"
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd"} <= fl:
        return "SkylakeX"
    if {"avx2", "fma"} <= fl:
        return "Haswell"
    return None


def tune_openblas():
    """Re-run this script with OPENBLAS_CORETYPE set when OpenBLAS picked an
    older core than the CPU supports (it decides when it is loaded, so
    before torch is imported) -- also when an OPENBLAS_CORETYPE in the
    environment asked for the older core: the peer is there to be fast.
    Returns what OpenBLAS picked first, and why ("detected" or the
    environment's setting)."""
    first = os.environ.get("ATTNBIAS_BENCH_OPENBLAS_FIRST")
    if first is not None:
        return first
    core, best = openblas_core(), best_core()
    env_set = os.environ.get("OPENBLAS_CORETYPE")
    why = "%s(OPENBLAS_CORETYPE=%s)" % (core, env_set) if env_set else core
    if core is None or best is None:
        return why or "none"
    if CORE_RANK.get(core, 0) < CORE_RANK[best]:
        env = dict(os.environ, OPENBLAS_CORETYPE=best,
                   ATTNBIAS_BENCH_OPENBLAS_FIRST=why)
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
    return why


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
        with self.torch.inference_mode():
            t0 = time.perf_counter()
            out = self.attn_out(impl, variant, st)
            t1 = time.perf_counter()
        del out
        return (t1 - t0) * 1e3

    def attn_out(self, impl, variant, st):
        """The timed computation on st's q, k, v [1, H, N, d] (the mask
        and the ALiBi table are cached in st, outside the timing)."""
        torch = self.torch
        q, k, v = st["q"], st["k"], st["v"]
        hq, n, d = q.shape[1], q.shape[2], q.shape[3]
        scale = 1.0 / math.sqrt(d)
        if variant == "causal" and "causal" not in st:
            st["causal"] = torch.ones(n, n, dtype=torch.bool).triu_(1)
        if variant == "alibi" and "alibi" not in st:
            pos = torch.arange(n, dtype=torch.float32)
            dist = (pos[:, None] - pos[None, :]).abs()
            slopes = torch.tensor(alibi_slopes(hq), dtype=torch.float32)
            st["alibi"] = (-slopes[:, None, None] * dist).unsqueeze(0)
        if impl == "sdpa":
            if self.sdpa is None or variant not in ("dense", "causal"):
                raise ValueError("sdpa %s not available" % variant)
            return self.sdpa(q, k, v, variant == "causal")
        if impl == "matmul":
            s = torch.matmul(q, k.transpose(-2, -1)).mul_(scale)
            if variant == "causal":
                s.masked_fill_(st["causal"], float("-inf"))
            elif variant == "alibi":
                s.add_(st["alibi"])
            elif variant != "dense":
                raise ValueError("unknown variant " + variant)
            return torch.matmul(torch.softmax(s, dim=-1), v)
        raise ValueError("unknown impl " + impl)

    def check(self, w):
        """`check attn|rope ...`: the timed computation on the bench's
        inputs, written next to them."""
        torch = self.torch
        raw = torch.from_file(w[-1], size=os.path.getsize(w[-1]) // 4,
                              dtype=torch.float32)
        if w[1] == "attn" and len(w) == 9:
            hq, hkv, n, d = map(int, w[4:8])
            nq, nk = hq * n * d, hkv * n * d
            st = {"q": raw[:nq].view(1, hq, n, d),
                  "k": raw[nq:nq + nk].view(1, hkv, n, d),
                  "v": raw[nq + nk:nq + 2 * nk].view(1, hkv, n, d)}
            with torch.inference_mode():
                outs = [self.attn_out(w[2], w[3], st)]
        elif w[1] == "rope" and len(w) == 5:
            n = int(w[3])
            per = 32 * n * 128
            st = self.rope_tables(n)
            x = [raw[:per].view(1, 32, n, 128), raw[per:2 * per].view(1, 32, n, 128)]
            with torch.inference_mode():
                outs = [self.rope_out(w[2], st, t) for t in x]
        else:
            raise ValueError("bad check: " + " ".join(w))
        with open(w[-1] + ".out", "wb") as f:
            for o in outs:
                f.write(o.contiguous().numpy().tobytes())
        return 0.0

    def rope_tables(self, n, d=128):
        """cos/sin tables of default RoPE (base 10000) for N positions."""
        torch = self.torch
        inv = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        ang = torch.arange(n, dtype=torch.float64)[:, None] * inv[None, :]
        cos, sin = ang.cos().float(), ang.sin().float()
        return {"half": (torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)),
                "interleaved": (cos.repeat_interleave(2, -1),
                                sin.repeat_interleave(2, -1))}

    def rope_out(self, pairing, st, x):
        """x rotated, out of place (eager rotate-half or interleaved)."""
        torch = self.torch
        cos, sin = st[pairing]
        d = x.shape[-1]
        if pairing == "half":
            x1, x2 = x[..., : d // 2], x[..., d // 2:]
            r = torch.cat((-x2, x1), dim=-1)
        else:
            x2 = x.unflatten(-1, (d // 2, 2))
            r = torch.stack((-x2[..., 1], x2[..., 0]), dim=-1).flatten(-2)
        return x * cos + r * sin

    def rope(self, pairing, n):
        torch = self.torch
        h, d = 32, 128

        def build():
            g = torch.Generator().manual_seed(n)
            st = self.rope_tables(n, d)
            st["q"] = torch.rand(1, h, n, d, generator=g) * 2 - 1
            st["k"] = torch.rand(1, h, n, d, generator=g) * 2 - 1
            return st

        st = self._shape(("rope", n), build)
        with torch.inference_mode():
            t0 = time.perf_counter()
            qo = self.rope_out(pairing, st, st["q"])
            ko = self.rope_out(pairing, st, st["k"])
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
            elif w[0] == "check":
                ms = peer.check(w)
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
    detected = tune_openblas()
    try:
        import torch
    except Exception as e:  # ImportError, or a broken install
        print("absent import torch failed (%s: %s); `make bench-deps` "
              "installs python3-torch" % (type(e).__name__, e), flush=True)
        return 0
    peer = Peer(torch, a.threads)
    if a.serve:
        print("ready torch %s sdpa=%d threads=%d openblas=%s first=%s"
              % (torch.__version__, peer.sdpa is not None, a.threads,
                 openblas_core() or "none", detected),
              flush=True)
        serve(peer)
    else:
        standalone(peer, a.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
