"""test_transport.py: what the client does on the wire, against a scripted
stand-in server (support.FakeServer): retries on 503 with Retry-After,
timeouts, the Prefer header of strict mode, the fields model= and config=,
bfloat16 and float16 inputs, warnings for ignored fields, and HTTPS with a
CA file (a throwaway certificate authority made with openssl)."""

import base64
import json
import os
import shutil
import ssl
import struct
import subprocess
import tempfile
import unittest
import warnings

import numpy as np

import attnbias
from support import FakeServer, json_answer

BUSY = json_answer({"type": "https://attnbias.dev/errors/service-unavailable",
                    "title": "Service Unavailable", "status": 503,
                    "detail": "the queue is full"}, status=503, Retry_After="2")
OK = json_answer({"status": "ok"})


def _safetensors_params(body):
    """The params JSON of a safetensors request body, and its tensor names."""
    (hlen,) = struct.unpack("<Q", body[:8])
    header = json.loads(body[8:8 + hlen])
    meta = header.pop("__metadata__")
    return json.loads(meta["params"]), header


class Retries(unittest.TestCase):
    def client(self, url, **kw):
        c = attnbias.Client(url, **kw)
        self.waits = []
        c._sleep = self.waits.append  # record the waits instead of sleeping
        self.addCleanup(c.close)
        return c

    def test_503_with_retry_after_is_retried_with_backoff(self):
        with FakeServer([BUSY, BUSY, BUSY, OK]) as srv:
            c = self.client(srv.url, retries=3, backoff=1.5)
            self.assertEqual(c.health(), {"status": "ok"})
            self.assertEqual(len(srv.requests), 4)
        # Never shorter than Retry-After (2 s), doubling from the backoff
        # (1.5, 3, 6 s), at most a quarter longer (jitter).
        for wait, floor in zip(self.waits, (2.0, 3.0, 6.0)):
            self.assertGreaterEqual(wait, floor)
            self.assertLessEqual(wait, floor * 1.25)
        self.assertEqual(len(self.waits), 3)

    def test_retries_are_bounded(self):
        with FakeServer([BUSY] * 5) as srv:
            c = self.client(srv.url, retries=2)
            with self.assertRaises(attnbias.AttnbiasError) as cm:
                c.bias("alibi", num_heads=1, q_len=2)
            self.assertEqual(cm.exception.status, 503)
            self.assertEqual(cm.exception.retry_after, 2)
            self.assertEqual(len(srv.requests), 3)
            self.assertEqual(len(self.waits), 2)
            # The body was sent again each time, unchanged.
            self.assertEqual(len({r[3] for r in srv.requests}), 1)

    def test_no_retry_without_retry_after_or_beyond_the_cap(self):
        draining = json_answer({"status": 503, "title": "Service Unavailable",
                                "detail": "draining"}, status=503)
        with FakeServer([draining, OK]) as srv:
            c = self.client(srv.url)
            with self.assertRaises(attnbias.AttnbiasError) as cm:
                c.health()
            self.assertEqual((cm.exception.status, cm.exception.retry_after), (503, None))
            self.assertEqual((len(srv.requests), self.waits), (1, []))
        with FakeServer([BUSY, OK]) as srv:
            c = self.client(srv.url, max_retry_wait=1.0)  # Retry-After 2 > 1
            with self.assertRaises(attnbias.AttnbiasError):
                c.health()
            self.assertEqual(self.waits, [])
        with FakeServer([BUSY, OK]) as srv:
            c = self.client(srv.url, retries=0)
            with self.assertRaises(attnbias.AttnbiasError):
                c.health()
            self.assertEqual(len(srv.requests), 1)

    def test_timeout(self):
        with FakeServer([None]) as srv:
            with attnbias.Client(srv.url, timeout=0.3) as c, self.assertRaises(TimeoutError):
                c.health()
            self.assertEqual(len(srv.requests), 1)
            self.assertIsNone(c._conn)  # a half-read answer leaves no connection


class Fields(unittest.TestCase):
    def test_model_and_config_are_sent_as_fields(self):
        config = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
                  "rope_theta": 500000.0,
                  "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}
        rope = {"inv_freq": {"shape": [1], "dtype": "float32", "data": [1.0]}}
        with FakeServer([json_answer(rope)] * 4) as srv:
            with attnbias.Client(srv.url, transport="json") as c:
                c.rope(positions=8, model="llama-3.1-8b")
                c.rope(positions=8, config=config, head_dim=128)
                c.bias("alibi", num_heads=2, q_len=3, model="bloom-560m", config={"n_head": 2})
            big = np.zeros((1, 2, 64, 128), np.float32)   # a safetensors body
            with attnbias.Client(srv.url) as c:
                c.attention(big, big, big, config=config)
            sent = [json.loads(r[3]) for r in srv.requests[:3]]
            self.assertEqual(sent[0], {"positions": 8, "model": "llama-3.1-8b"})
            self.assertEqual(sent[1], {"positions": 8, "head_dim": 128, "config": config})
            self.assertEqual((sent[2]["model"], sent[2]["config"]), ("bloom-560m", {"n_head": 2}))
            params, tensors = _safetensors_params(srv.requests[3][3])
            self.assertEqual(params["config"], config)
            self.assertEqual(sorted(tensors), ["k", "q", "v"])

    def test_layer_is_sent_and_config_headers_read(self):
        rope = {"inv_freq": {"shape": [1], "dtype": "float32", "data": [1.0]}}
        answer = json_answer(rope, **{
            "X-Attnbias-Config-Used": "model_type, rope_local_base_freq, sliding_window",
            "X-Attnbias-Config-Upstream": "q_norm, k_norm",
            "X-Attnbias-Config-Layer": "4; type=sliding_attention"})
        with FakeServer([answer, json_answer(rope)]) as srv:
            with attnbias.Client(srv.url, transport="json") as c:
                self.assertIsNone(c.last_config)
                c.rope(positions=2, model="gemma-3-1b", layer=4)
                self.assertEqual(c.last_config, attnbias.ConfigUsed(
                    ("model_type", "rope_local_base_freq", "sliding_window"),
                    ("q_norm", "k_norm"), 4, "sliding_attention"))
                c.rope(positions=2, head_dim=8)          # no config: no headers
                self.assertIsNone(c.last_config)
            self.assertEqual(json.loads(srv.requests[0][3]),
                             {"positions": 2, "model": "gemma-3-1b", "layer": 4})

    def test_strict_sends_prefer(self):
        with FakeServer([OK, OK]) as srv:
            for strict in (True, False):
                with attnbias.Client(srv.url, strict=strict) as c:
                    c.bias("alibi", num_heads=1, q_len=2)
            self.assertEqual(srv.requests[0][2].get("prefer"), "handling=strict")
            self.assertNotIn("prefer", srv.requests[1][2])

    def test_ignored_fields_warn(self):
        answer = json_answer({"bias": {"shape": [1], "data": [0]}},
                             X_Attnbias_Ignored="rope_thetaa,rope_scaling.factr,caf%C3%A9")
        with FakeServer([answer, OK]) as srv:
            with attnbias.Client(srv.url) as c, warnings.catch_warnings(record=True) as got:
                warnings.simplefilter("always")
                c.bias("alibi", num_heads=1, q_len=1)
                c.health()
            self.assertEqual(len(got), 1)
            w = got[0]
            self.assertIs(w.category, attnbias.IgnoredFieldsWarning)
            self.assertEqual(w.message.fields, ["rope_thetaa", "rope_scaling.factr", "café"])
            self.assertIn("rope_scaling.factr", str(w.message))
            # The warning points at the caller's line, not into the package.
            self.assertEqual(w.filename, __file__)

    def test_dtypes_on_the_wire(self):
        with FakeServer([OK] * 3) as srv:
            c = attnbias.Client(srv.url, transport="json")
            self.addCleanup(c.close)
            x16 = np.arange(6, dtype=np.float16).reshape(2, 3)
            c.encodings("sinusoidal", positions=2, dim=3, x=x16)
            bits = attnbias.BFloat16.from_float32(np.array([1.0, -2.5, 3.14159], np.float32))
            c.encodings("sinusoidal", positions=3, dim=1, x=bits)
            c.encodings("sinusoidal", positions=2, dim=2, x=np.ones((2, 2), np.int64))
            sent = [json.loads(r[3])["x"] for r in srv.requests]
            self.assertEqual((sent[0]["dtype"], sent[0]["shape"]), ("float16", [2, 3]))
            self.assertEqual(sent[1]["dtype"], "bfloat16")
            raw = np.frombuffer(base64.b64decode(sent[1]["b64"]), "<u2")
            # 3.14159 rounds to 3.140625 (0x4049); 1 and -2.5 are exact.
            self.assertEqual(raw.tolist(), [0x3F80, 0xC020, 0x4049])
            self.assertEqual(sent[2]["dtype"], "float32")


class BFloat16Bits(unittest.TestCase):
    def test_round_to_nearest_even(self):
        f = np.array([1.0, 1.00390625, 1.01171875, -0.0, np.inf, 3.4028235e38],
                     np.float32)
        # 1 + 2^-8 is a tie: to even (1.0); 1 + 3*2^-8 to 1 + 2^-6.
        bits = attnbias.BFloat16.from_float32(f).bits
        self.assertEqual(bits.tolist(), [0x3F80, 0x3F80, 0x3F82, 0x8000, 0x7F80, 0x7F80])
        nan = attnbias.BFloat16.from_float32(np.array([np.nan], np.float32))
        self.assertTrue(np.isnan(nan.to_float32()[0]))
        with self.assertRaises(TypeError):
            attnbias.BFloat16(np.zeros(2, np.int16))


def _make_ca(tmp):
    """A CA and a certificate for 127.0.0.1 signed by it (openssl CLI)."""
    def run(*args):
        subprocess.run(["openssl"] + list(args), cwd=tmp, check=True,
                       capture_output=True, timeout=60)
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test CA",
        "-keyout", "ca.key", "-out", "ca.pem")
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", "srv.key", "-out", "srv.csr")
    with open(os.path.join(tmp, "ext.cnf"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    run("x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", "ext.cnf", "-out", "srv.pem")
    return (os.path.join(tmp, "ca.pem"),
            (os.path.join(tmp, "srv.pem"), os.path.join(tmp, "srv.key")))


class Https(unittest.TestCase):
    def test_ca_file(self):
        self.assertIsNotNone(shutil.which("openssl"), "the openssl tool (Debian's openssl)")
        with tempfile.TemporaryDirectory() as tmp:
            ca, cert = _make_ca(tmp)
            with FakeServer([OK, OK], tls=cert) as srv:
                self.assertTrue(srv.url.startswith("https://"))
                with attnbias.Client(srv.url, ca_file=ca) as c:
                    self.assertEqual(c.health(), {"status": "ok"})
                # Without the CA the certificate is not trusted.
                with attnbias.Client(srv.url, timeout=10) as c, \
                        self.assertRaises(ssl.SSLCertVerificationError):
                    c.health()
        with self.assertRaises(ValueError):
            attnbias.Client("http://127.0.0.1:1", ca_file="ca.pem")
        with self.assertRaises(ValueError):
            attnbias.Client("https://127.0.0.1:1", ca_file="ca.pem",
                            ssl_context=ssl.create_default_context())


if __name__ == "__main__":
    unittest.main()
