"""test_reference.py: the float64 references of reference.py against the
worked examples of docs/methods.md (numbers written here from that
document), so that a wrong reference cannot agree with a wrong server.
Needs no server."""

import unittest

import numpy as np

from reference import (close, example12, ref_alibi, ref_alibi_slopes, ref_attention,
                       ref_inv_freq, ref_rope_apply, ref_sinusoidal, ref_t5_bucket,
                       ref_yarn_inv_freq)


class WorkedExamples(unittest.TestCase):
    def test_references_match_worked_examples(self) -> None:
        close(ref_sinusoidal([1], 8)[0, :4], [0.841471, 0.5403023, 0.09983342, 0.9950042], 1e-6)
        close(ref_sinusoidal([3], 8, layout="tensor2tensor")[0, :2], [0.14112, 0.1387981], 1e-6)
        close(ref_sinusoidal([5], 7, layout="tensor2tensor")[0],
              [-0.9589243, 0.04997917, 0.0005, 0.2836622, 0.9987503, 0.9999999, 0], 1e-6)
        x = np.arange(1, 9, dtype=np.float64)[None]
        close(ref_rope_apply(x, [1], ref_inv_freq(8))[0],
              [-3.667053, 1.391008, 2.929851, 3.991998, 3.542983, 6.169692, 7.02965, 8.003996], 1e-6)
        close(ref_rope_apply(x, [1], ref_inv_freq(8), interleaved=True)[0],
              [-1.14264, 1.922076, 2.585679, 4.279517, 4.939751, 6.049699, 6.991997, 8.006996], 1e-6)
        inv, att = ref_yarn_inv_freq(16, 10000, 4, 64)
        close(inv, [1, 0.2371708, 0.05, 0.007905694, 0.0025, 0.0007905694, 0.00025, 7.905694e-05], 1e-6)
        close(att, 1.138629, 1e-6)
        close(ref_alibi_slopes(12)[8:], [0.7071068, 0.3535534, 0.1767767, 0.08838835], 1e-6)
        close(ref_alibi_slopes(6, 16), [0.0625, 0.00390625, 0.0002441406, 1.525879e-05, 0.25, 0.015625], 1e-6)
        rel = [-200, -128, -127, -64, -32, -20, -16, -9, -8, -7, -1, 0, 1, 2, 7, 8, 9, 15, 16, 20, 32, 64, 127, 128, 200]
        assert ref_t5_bucket(rel).tolist() == [15, 15, 15, 14, 12, 10, 10, 8, 8, 7, 1, 0, 17, 18, 23,
                                               24, 24, 25, 26, 26, 28, 30, 31, 31, 31]
        assert ref_t5_bucket(rel, bidirectional=False).tolist() == [31, 31, 31, 26, 21, 17, 16, 9, 8, 7, 1] + [0] * 14
        q, k, v = example12()
        out, _, w = ref_attention(q, k, v, causal=True)
        close(out[0, 0], [[-0.9185333, -0.3185333, 0.2814667, 0.8814667],
                          [-0.8313056, -0.2313056, 0.3686944, 0.3764344],
                          [-0.7225117, -0.1225117, 0.4774883, 0.07366314]], 1e-6)
        close(w[0, 0, 0], [0.5926666, 0.4073334, 0, 0], 1e-6)
        # 12c causal + ALiBi, 12d softcap 0.5, 12e window [1, 0]: head 0 weights.
        _, _, w = ref_attention(q, k, v, causal=True, bias=ref_alibi(2, 3, 4)[None])
        close(w[0, 0, 2], [0.2846238, 0.2263317, 0.2216652, 0.2673793], 1e-6)
        _, _, w = ref_attention(q, k, v, causal=True, softcap=0.5)
        close(w[0, 0, 1], [0.4197228, 0.3067293, 0.2735479, 0], 1e-6)
        out, _, w = ref_attention(q, k, v, window=(1, 0))
        close(w[0, 0, 1], [0, 0.5312094, 0.4687906, 0], 1e-6)
        close(out[0, 1, 2], [-0.5144808, 0.08551918, 0.6855192, -0.9144808], 1e-6)


if __name__ == "__main__":
    unittest.main()
