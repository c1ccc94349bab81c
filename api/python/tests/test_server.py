"""test_server.py: the package against a real attnbiasd (ATTNBIAS_URL), as a
notebook would use it: every route, numbers against the float64 references
of reference.py, every dtype in and out (bfloat16 as float32 or as raw
uint16 patterns), the warning for ignored fields, errors, and the
server's pictures (bias_heatmap, attention_heatmap)."""

import struct
import unittest
import warnings

import numpy as np

import attnbias
from reference import (close, example12, ref_alibi, ref_attention, ref_inv_freq,
                       ref_rope_apply, ref_sinusoidal, ref_t5_bucket, ref_yarn_inv_freq)
from support import server_client

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def png_size(data):
    """(width, height) from a PNG's IHDR chunk."""
    assert data[:8] == PNG_MAGIC and data[12:16] == b"IHDR", data[:16]
    return struct.unpack(">II", data[16:24])


class ServerCase(unittest.TestCase):
    def client(self, **kw):
        c = server_client(self, **kw)
        self.addCleanup(c.close)
        return c

    def quiet(self):
        """Fail on any IgnoredFieldsWarning: the client sends only fields the
        server knows."""
        ctx = warnings.catch_warnings()
        ctx.__enter__()
        self.addCleanup(ctx.__exit__, None, None, None)
        warnings.simplefilter("error", attnbias.IgnoredFieldsWarning)


class Routes(ServerCase):
    def test_every_get_route(self):
        ab = self.client()
        self.assertEqual(ab.health(), {"status": "ok"})
        self.assertIs(ab.ready(), True)
        self.assertIn("attnbias_requests_total", ab.metrics())
        self.assertIn("openapi: 3.1", ab.openapi())
        cat = ab.methods()
        for name in ("sinusoidal", "alibi", "t5", "yarn", "llama3", "rope_theta"):
            self.assertIn(name, repr(cat))
        try:
            models = ab.models()
        except attnbias.AttnbiasError as e:  # a server without presets
            self.assertEqual(e.status, 404)
        else:
            self.assertIsInstance(models, dict)


class Numbers(ServerCase):
    def setUp(self):
        self.quiet()

    def test_encodings(self):
        ab = self.client()
        pe = ab.encodings("sinusoidal", positions=16, dim=32)
        self.assertEqual((pe.dtype, pe.shape), (np.float32, (16, 32)))
        close(pe, ref_sinusoidal(np.arange(16), 32), what="sinusoidal")
        pos = np.array([0.0, 2.5, 999.0])
        close(ab.encodings("sinusoidal", positions=pos, dim=12, layout="concat", base=500.0),
              ref_sinusoidal(pos, 12, base=500.0, layout="concat"), rtol=1e-4, what="concat")

    def test_rope(self):
        ab = self.client()
        t = ab.rope(positions=[0, 1, 300, 4000], head_dim=64, rope_theta=10000.0,
                    rope_scaling={"rope_type": "yarn", "factor": 16.0,
                                  "original_max_position_embeddings": 256})
        inv, att = ref_yarn_inv_freq(64, 10000.0, 16.0, 256)
        close(t["inv_freq"], inv, what="yarn inv_freq")
        self.assertAlmostEqual(t["attention_scaling"], att, places=6)
        ang = np.array([0, 1, 300, 4000])[:, None] * inv[None]
        close(t["cos"], att * np.concatenate([np.cos(ang)] * 2, axis=1), rtol=1e-4,
              what="yarn cos")
        q = np.random.default_rng(3).standard_normal((1, 4, 10, 64)).astype(np.float32)
        close(ab.rope(positions=np.arange(10) + 5, q=q, rope_theta=500000.0),
              ref_rope_apply(q, np.arange(10) + 5, ref_inv_freq(64, 500000.0)), what="q")

    def test_bias(self):
        ab = self.client()
        close(ab.bias("alibi", num_heads=12, q_len=5, k_len=9, causal=True),
              ref_alibi(12, 5, 9, causal=True), what="alibi")
        r = ab.bias("t5", num_heads=2, q_len=1, k_len=401, q_offset=200, returns=["buckets"])
        self.assertEqual(r.dtype, np.int32)
        np.testing.assert_array_equal(r[0], ref_t5_bucket(np.arange(401) - 200))

    def test_attention(self):
        ab = self.client()
        q, k, v = example12()
        r = ab.attention(q, k, v, causal=True, returns=["output", "lse", "weights"])
        want = ref_attention(q, k, v, causal=True)
        for name, w in zip(("output", "lse", "weights"), want):
            close(r[name], w, what=name)
        rng = np.random.default_rng(5)
        q = rng.standard_normal((2, 8, 24, 32)).astype(np.float32)
        k = rng.standard_normal((2, 2, 40, 32)).astype(np.float32)
        got = ab.attention(q, k, k, causal=True, sliding_window=9, bias={"method": "alibi"})
        want, _, _ = ref_attention(q, k, k, causal=True, window=(8, 0),
                                   bias=ref_alibi(8, 24, 40)[None])
        close(got, want, what="gqa window alibi")
        t = ab.last_timing
        self.assertTrue({"read", "prepare"} <= set(t), t)


class ModelConfigs(ServerCase):
    def test_presets_layers_and_config_answers(self):
        """model=, config= and layer= on every compute route, and what the
        server made of them in last_config."""
        self.quiet()
        ab = self.client()
        names = {p["name"] for p in ab.models()["presets"]}
        self.assertLessEqual({"llama-3.1-8b", "gemma-3-1b", "bloom-560m", "t5-small"}, names)
        # Gemma 3 1B: layer 5 is global (rope_theta 1e6), layer 4 slides
        # (rope_local_base_freq 1e4); inv_freq[1] = theta^(-2/256).
        for layer, theta, kind in ((5, 1e6, "full_attention"), (4, 1e4, "sliding_attention")):
            t = ab.rope(model="gemma-3-1b", layer=layer, positions=3)
            close(t["inv_freq"][1], theta ** (-2 / 256), 1e-6, 0, "gemma 3 layer %d" % layer)
            cfg = ab.last_config
            self.assertEqual((cfg.layer, cfg.layer_type), (layer, kind))
            self.assertEqual(cfg.upstream, ("q_norm", "k_norm"))
            self.assertIn("rope_local_base_freq" if layer == 4 else "rope_theta", cfg.used)
        b = ab.bias(q_len=4, model="bloom-560m")       # 16 heads of ALiBi, causal
        self.assertEqual(b.shape, (16, 4, 4))
        close(b, ref_alibi(16, 4, 4, causal=True), 1e-6, 0, "bloom")
        self.assertIn("n_head", ab.last_config.used)
        q = np.random.default_rng(1).normal(size=(1, 2, 3, 8)).astype(np.float32)
        out = ab.attention(q, q, q, config={"model_type": "gemma2",
                                            "attn_logit_softcapping": 50.0,
                                            "query_pre_attn_scalar": 64}, layer=1)
        self.assertEqual(out.shape, (1, 2, 3, 8))
        self.assertEqual(ab.last_config.layer, 1)
        self.assertLessEqual({"attn_logit_softcapping", "query_pre_attn_scalar"},
                             set(ab.last_config.used))
        with self.assertRaises(attnbias.AttnbiasError) as e:
            ab.encodings("sinusoidal", positions=2, dim=4, model="llama-2-7b")
        self.assertEqual(e.exception.field, "/model")
        ab.encodings("sinusoidal", positions=2, dim=4)
        self.assertIsNone(ab.last_config)


class Dtypes(ServerCase):
    def setUp(self):
        self.quiet()

    def test_inputs_keep_their_dtype(self):
        ab = self.client()
        x64 = np.random.default_rng(7).standard_normal((3, 6, 8))
        pe = ref_sinusoidal(np.arange(6), 8)[None]
        for x in (x64, x64.astype(np.float16), x64.astype(np.float32)):
            # The server reads the values exactly, then computes in float32.
            close(ab.encodings("sinusoidal", positions=6, dim=8, x=x),
                  x.astype(np.float64) + pe, what=str(x.dtype))
        bits = attnbias.BFloat16.from_float32(x64.astype(np.float32))
        for transport in ("json", "safetensors"):
            got = self.client(transport=transport).encodings("sinusoidal", positions=6, dim=8,
                                                             x=bits)
            close(got, bits.to_float32().astype(np.float64) + pe, what="bfloat16 " + transport)

    def test_outputs_in_every_dtype(self):
        want = ref_sinusoidal(np.arange(6), 8)
        for accept in ("safetensors", "json"):
            for dt, np_dt, tol in (("float32", np.float32, 1e-6), ("float64", np.float64, 1e-6),
                                   ("float16", np.float16, 1e-3), ("bfloat16", np.float32, 8e-3)):
                got = self.client(accept=accept).encodings("sinusoidal", positions=6, dim=8,
                                                           output_dtype=dt)
                self.assertEqual(got.dtype, np_dt, (accept, dt))
                close(got, want, rtol=tol, atol=tol, what="%s %s" % (accept, dt))
            # bfloat16 as raw patterns: the float32 answer's own bits.
            raw = self.client(accept=accept, bfloat16="uint16").encodings(
                "sinusoidal", positions=6, dim=8, output_dtype="bfloat16")
            wide = self.client(accept=accept).encodings(
                "sinusoidal", positions=6, dim=8, output_dtype="bfloat16")
            self.assertEqual(raw.dtype, np.uint16)
            np.testing.assert_array_equal(attnbias.BFloat16(raw).to_float32(), wide)
            np.testing.assert_array_equal(raw, attnbias.BFloat16.from_float32(want).bits)


class Warnings(ServerCase):
    def test_ignored_fields_warn(self):
        ab = self.client()
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            ab.rope(positions=4, head_dim=8, rope_thetaa=1.0,
                    rope_scaling={"rope_type": "linear", "factor": 2.0, "factr": 3})
        self.assertEqual([w.category for w in got], [attnbias.IgnoredFieldsWarning])
        self.assertEqual(sorted(got[0].message.fields), ["rope_scaling.factr", "rope_thetaa"])
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            ab.rope(positions=4, head_dim=8)
        self.assertEqual(got, [])

    def test_strict(self):
        """strict=True sends Prefer: handling=strict: the server refuses the
        unknown field (400 naming it) instead of ignoring it."""
        ab = self.client(strict=True)
        with self.assertRaises(attnbias.AttnbiasError) as cm:
            ab.rope(positions=4, head_dim=8, rope_thetaa=1.0)
        self.assertEqual((cm.exception.status, cm.exception.field), (400, "/rope_thetaa"))


class Errors(ServerCase):
    def test_problem_details(self):
        ab = self.client()
        with self.assertRaises(attnbias.AttnbiasError) as cm:
            ab.rope(positions=4, head_dim=8, rotary_dim=7)
        e = cm.exception
        self.assertEqual((e.status, e.field), (400, "/rotary_dim"))
        self.assertTrue(e.type.startswith("https://attnbias.dev/errors/") and e.detail, e)


class Pictures(ServerCase):
    def test_heatmaps(self):
        ab = self.client()
        one = ab.bias_heatmap("alibi", 8, 32, head=3, causal=True)
        grid = ab.bias_heatmap("alibi", 8, 32, heads=[0, 3, 7], causal=True)
        self.assertGreater(png_size(grid)[0], png_size(one)[0])  # side by side
        q = np.random.default_rng(1).standard_normal((1, 2, 16, 8)).astype(np.float32)
        pic = ab.attention_heatmap(q, q, q, heads=[0, 1], causal=True)
        self.assertGreater(png_size(pic)[0], 0)


if __name__ == "__main__":
    unittest.main()
