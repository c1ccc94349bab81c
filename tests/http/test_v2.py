"""test_v2.py: the Open Inference Protocol ("v2", KServe's REST form) and
Triton's binary tensor data extension.

- The wire fixtures of tests/http/fixtures/v2/<client>/ were made by the
  clients themselves (fixtures/v2/README.md says how): their request bytes
  are replayed here, and each answer must have the layout the client's own
  parser read from it (names, datatypes, shapes, which outputs are binary)
  and the numbers of the /v1 answer to the same request, bit for bit.
- Every model, JSON and binary, every datatype, against /v1 bit for bit and
  against float64 references written here.
- The framing of the binary extension to the byte: Inference-Header-Content-
  Length, binary_data_size, what a body that lies about its sizes gets.
- Metadata, health, versions, auth, metrics by model, limits, errors as
  {"error": ...} (problem+json, whose `error` member the clients read).
"""

import base64
import json
import math
import os
import struct
import time

import numpy as np

import run

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures", "v2")
MODELS = ("encodings", "rope", "bias", "attention", "analysis")
V1_DTYPE = {"FP32": "float32", "FP16": "float16", "BF16": "bfloat16", "FP64": "float64",
            "INT32": "int32"}
SIZE = {"FP32": 4, "FP16": 2, "BF16": 2, "FP64": 8, "INT32": 4}


# ---------------------------------------------------------------------------
# a v2 client of our own: the protocol documents, not the server's code
# ---------------------------------------------------------------------------

def v2_body(request, binary=()):
    """JSON request text followed by the binary inputs' bytes, and the
    headers that say where the JSON ends."""
    text = json.dumps(request).encode()
    data = b"".join(binary)
    headers = {}
    if data:
        headers["Inference-Header-Content-Length"] = str(len(text))
        headers["Content-Type"] = "application/octet-stream"
    else:
        headers["Content-Type"] = "application/json"
    return text + data, headers


def loads(text):
    """JSON with "-0" kept as the float -0.0 (Python reads it as the int 0)."""
    return json.loads(text, parse_int=lambda s: -0.0 if s == "-0" else int(s))


def parse_answer(r):
    """A v2 answer as (header JSON, {output name: (datatype, shape, raw bytes
    or None, JSON data or None)}), checking the binary framing to the byte."""
    hl = r.headers.get("inference-header-content-length")
    body = r.body
    if hl is None:
        assert r.headers.get("content-type") == "application/json", r
        head, rest = loads(body), b""
    else:
        assert r.headers.get("content-type") == "application/octet-stream", r
        n = int(hl)
        head, rest = loads(body[:n]), body[n:]
    outs, at = {}, 0
    for o in head["outputs"]:
        size = o.get("parameters", {}).get("binary_data_size")
        if size is None:
            outs[o["name"]] = (o["datatype"], o["shape"], None, o["data"])
            assert len(o["data"]) == math.prod(o["shape"]), o
        else:
            assert size == SIZE[o["datatype"]] * math.prod(o["shape"]), o
            outs[o["name"]] = (o["datatype"], o["shape"], rest[at:at + size], None)
            at += size
    assert at == len(rest), "%d bytes of binary data, the outputs account for %d" % (len(rest), at)
    return head, outs


def raw_of(datatype, data):
    """JSON numbers as the little-endian bytes of the datatype (exact: the
    numbers are the shortest texts of values of that type)."""
    def num(x):
        return float(x) if not isinstance(x, str) else float(x.replace("inf", "Infinity")) \
            if "inf" in x else float("nan")
    if datatype == "INT32":
        return struct.pack("<%di" % len(data), *data)
    if datatype == "FP64":
        return struct.pack("<%dd" % len(data), *[num(x) for x in data])
    f32 = np.array([num(x) for x in data], dtype=np.float32)
    if datatype == "FP32":
        return f32.tobytes()
    if datatype == "FP16":
        return f32.astype(np.float16).tobytes()
    return (f32.view(np.uint32) >> 16).astype("<u2").tobytes()  # BF16: exact values


def v1_outputs(server, model, v1):
    """The /v1 answer of the same request: {name: (dtype, shape, raw bytes)}
    for its tensors and scalars (its JSON values are not v2 tensors)."""
    r = server.post("/v1/" + model, json=dict(v1, encoding="b64"))
    assert r.status == 200, r
    out = {}
    for name, t in r.json().items():
        if isinstance(t, dict) and "b64" in t:
            out[name] = (t["dtype"], t["shape"], base64.b64decode(t["b64"]))
        elif isinstance(t, (int, float)):  # a scalar: a v2 FP64 tensor of shape [1]
            out[name] = ("float64", [1], struct.pack("<d", t))
    return out


def assert_same_as_v1(server, model, outs, v1):
    want = v1_outputs(server, model, v1)
    for name, (datatype, shape, raw, data) in outs.items():
        assert name in want, (name, sorted(want))
        dt, wshape, wraw = want[name]
        assert V1_DTYPE[datatype] == dt and shape == wshape, (name, datatype, shape, dt, wshape)
        got = raw if raw is not None else raw_of(datatype, data)
        assert got == wraw, "%s: the v2 answer differs from /v1" % name


def infer(server, model, request, binary=(), path=None, headers=None):
    body, h = v2_body(request, binary)
    h.update(headers or {})
    return server.request("POST", path or "/v2/models/%s/infer" % model, body=body, headers=h)


def check_error(r, status):
    """An error as the protocol wants it: a JSON object with "error"."""
    p = run.check_problem(r, status)
    assert isinstance(p["error"], str) and p["error"], p
    return p


# ---------------------------------------------------------------------------
# the clients' own bytes
# ---------------------------------------------------------------------------

def fixture_sets():
    for d in sorted(os.listdir(FIXTURES)):
        path = os.path.join(FIXTURES, d, "cases.json")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                yield d, json.load(f)


def test_client_fixtures_replayed(server):
    sets = list(fixture_sets())
    assert sets, "no fixtures under %s" % FIXTURES
    n = 0
    for d, doc in sets:
        for case in doc["cases"]:
            with open(os.path.join(FIXTURES, d, case["name"] + ".request"), "rb") as f:
                body = f.read()
            r = server.request("POST", case["path"], body=body, headers=case["headers"])
            where = "%s/%s" % (d, case["name"])
            if case["status"] != 200:
                p = check_error(r, case["status"])
                assert p["error"] == case["tritonclient_error"]["message"], (where, p)
                continue
            assert r.status == 200, (where, r)
            head, outs = parse_answer(r)
            assert head["model_name"] == case["path"].split("/")[3], head
            assert head.get("id") == case["response_id"], (where, head)
            # what the client read of the answer's parameters (JSON values)
            assert head.get("parameters") == case.get("response_parameters"), (where, head)
            got = [{"name": o["name"], "datatype": o["datatype"], "shape": o["shape"],
                    "binary": "data" not in o} for o in head["outputs"]]
            want = [{k: p[k] for k in ("name", "datatype", "shape", "binary")}
                    for p in case["tritonclient_parsed"]]
            assert got == want, (where, got, want)
            assert_same_as_v1(server, case["path"].split("/")[3], outs, case["v1"])
            n += 1
    assert n >= 9, n


# ---------------------------------------------------------------------------
# metadata, health, versions
# ---------------------------------------------------------------------------

def test_server_metadata_and_health(server):
    r = server.get("/v2")
    assert r.status == 200, r
    meta = r.json()
    assert meta["name"] == "attnbiasd" and "binary_tensor_data" in meta["extensions"], meta
    assert isinstance(meta["version"], str) and meta["version"], meta
    for path in ("/v2/health/live", "/v2/health/ready"):
        assert server.get(path).status == 200, path


def test_model_metadata_and_versions(server):
    for m in MODELS:
        r = server.get("/v2/models/" + m)
        assert r.status == 200, r
        meta = r.json()
        assert meta["name"] == m and meta["versions"] == ["1"], meta
        for t in meta["inputs"] + meta["outputs"]:
            assert t["datatype"] in SIZE and t["shape"] and set(t["shape"]) == {-1}, t
        assert server.get("/v2/models/%s/versions/1" % m).json() == meta
        for path in ("/v2/models/%s/ready" % m, "/v2/models/%s/versions/1/ready" % m):
            r = server.get(path)
            assert r.status == 200 and r.json() == {"name": m, "ready": True}, r
    check_error(server.get("/v2/models/rope/versions/2"), 404)
    check_error(server.get("/v2/models/rope/versions/2/ready"), 404)
    check_error(server.get("/v2/models/nope"), 404)
    check_error(infer(server, "nope", {"inputs": []}), 404)
    r = server.post("/v2/models/rope", json={})
    check_error(r, 405)
    assert "GET" in r.headers["allow"], r.headers


def test_metadata_lists_what_infer_answers(server):
    """Every output an infer answer has is in the model's metadata, with its
    datatype and rank (the requests below ask for every output there is)."""
    requests = {
        "encodings": [{"parameters": {"method": "sinusoidal", "dim": 4, "positions": 3}, "inputs": []},
                      {"parameters": {"method": "sinusoidal", "dim": 4, "positions": 2},
                       "inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32",
                                   "data": [1, 2, 3, 4, 5, 6, 7, 8]}]}],
        "rope": [{"parameters": {"head_dim": 4, "positions": 2}, "inputs": []},
                 {"parameters": {"positions": 1},
                  "inputs": [{"name": n, "shape": [1, 1, 1, 4], "datatype": "FP32",
                              "data": [1, 2, 3, 4]} for n in ("q", "k")]}],
        "bias": [{"parameters": {"method": "t5", "num_heads": 1, "q_len": 2,
                                 "return": ["bias", "buckets"]},
                  "inputs": [{"name": "table", "shape": [32, 1], "datatype": "FP32",
                              "data": [0.5] * 32}]}],
        "attention": [{"parameters": {"return": ["output", "lse", "weights"]},
                       "inputs": [{"name": n, "shape": [1, 1, 2, 2], "datatype": "FP32",
                                   "data": [1, 0, 0, 1]} for n in ("q", "k", "v")]}],
    }
    for m, reqs in requests.items():
        meta = server.get("/v2/models/" + m).json()
        declared = {t["name"]: t for t in meta["outputs"]}
        seen = set()
        for req in reqs:
            r = infer(server, m, req)
            assert r.status == 200, (m, r)
            for o in r.json()["outputs"]:
                t = declared.get(o["name"])
                assert t, (m, o["name"], sorted(declared))
                assert t["datatype"] == o["datatype"] and len(t["shape"]) == len(o["shape"]), (t, o)
                seen.add(o["name"])
        assert seen == set(declared), (m, seen, sorted(declared))


# ---------------------------------------------------------------------------
# every model against /v1, JSON and binary, every datatype
# ---------------------------------------------------------------------------

def tensor_in(name, a, datatype, binary):
    """A v2 input of the numpy array a (its values already of the datatype)
    and its binary bytes."""
    t = {"name": name, "shape": list(a.shape), "datatype": datatype}
    if datatype == "BF16":
        raw = (a.astype(np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
        vals = np.frombuffer(raw, "<u2").astype(np.uint32) << 16
        flat = vals.view(np.float32).tolist()
    else:
        raw = a.astype({"FP32": "<f4", "FP16": "<f2", "FP64": "<f8", "INT32": "<i4"}[datatype]).tobytes()
        flat = a.flatten().tolist()
    if binary:
        t["parameters"] = {"binary_data_size": len(raw)}
        return t, raw
    t["data"] = flat
    return t, b""


def v1_tensor(a, datatype):
    if datatype == "INT32":
        return a.tolist()
    if datatype == "BF16":
        raw = (a.astype(np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
    else:
        raw = a.astype({"FP32": "<f4", "FP16": "<f2", "FP64": "<f8"}[datatype]).tobytes()
    return {"shape": list(a.shape), "dtype": V1_DTYPE[datatype],
            "b64": base64.b64encode(raw).decode()}


def bf16(a):
    """a rounded to bfloat16 values (truncated: exactly representable)."""
    return ((a.astype(np.float32).view(np.uint32) >> 16) << 16).view(np.float32)


def run_both(server, model, tensors, params, outputs=None):
    """The request in JSON and in binary (every output binary), each
    compared with /v1; returns the binary answer's outputs."""
    v1 = {k: json.loads(v) if isinstance(v, str) and v[:1] in "[{" else v
          for k, v in params.items()}
    for name, (a, dt) in tensors.items():
        v1[name] = v1_tensor(a, dt)
    last = None
    for binary in (False, True):
        ins, raws = [], []
        for name, (a, dt) in tensors.items():
            t, raw = tensor_in(name, a, dt, binary)
            ins.append(t)
            raws.append(raw)
        req = {"id": "run-%s-%d" % (model, binary), "inputs": ins,
               "parameters": dict(params, binary_data_output=binary)}
        if outputs:
            req["outputs"] = [{"name": o} for o in outputs]
        r = infer(server, model, req, raws)
        assert r.status == 200, (model, binary, r)
        head, outs = parse_answer(r)
        assert head["id"] == req["id"] and head["model_name"] == model, head
        assert all((raw is not None) == binary for _, _, raw, _ in outs.values()), outs
        if outputs:
            assert list(outs) == list(outputs), (list(outs), outputs)
        assert_same_as_v1(server, model, outs, v1)
        last = outs
    return last


def as_array(out):
    datatype, shape, raw, _ = out
    if datatype == "BF16":
        v = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
    else:
        v = np.frombuffer(raw, {"FP32": "<f4", "FP16": "<f2", "FP64": "<f8", "INT32": "<i4"}[datatype])
    return v.reshape(shape).astype(np.float64)


def test_rope_every_datatype(server):
    rng = np.random.default_rng(1)
    pos = np.array([0, 1, 5, 11], dtype=np.int32)
    theta = 10000.0
    inv = theta ** (-np.arange(0, 8, 2) / 8.0)
    for dt in ("FP32", "FP16", "BF16", "FP64"):
        q = rng.standard_normal((2, 4, 8))
        q = bf16(q) if dt == "BF16" else q.astype({"FP32": np.float32, "FP16": np.float16,
                                                    "FP64": np.float64}[dt])
        outs = run_both(server, "rope", {"q": (q, dt), "positions": (pos, "INT32")},
                        {"layout": "bhsd"})
        # float64 reference: rotate-half pairs (i, i + 4)
        qf = q.astype(np.float64)
        ang = pos[:, None] * inv[None, :]
        c, s = np.cos(ang), np.sin(ang)
        ref = qf.copy()
        ref[..., :4] = qf[..., :4] * c - qf[..., 4:] * s
        ref[..., 4:] = qf[..., 4:] * c + qf[..., :4] * s
        assert np.allclose(as_array(outs["q"]), ref, rtol=0, atol=2e-5 * max(1, np.abs(ref).max())), dt
    # the tables, positions as a parameter, scaling as JSON text and as an object
    text = infer(server, "rope", {"inputs": [], "parameters": {
        "head_dim": 8, "positions": 4,
        "rope_scaling": '{"rope_type": "linear", "factor": 2}'}})
    obj = infer(server, "rope", {"inputs": [], "parameters": {
        "head_dim": 8, "positions": 4,
        "rope_scaling": {"rope_type": "linear", "factor": 2}}})
    assert text.status == 200 and text.body == obj.body, (text, obj)
    cos = np.array(text.json()["outputs"][1]["data"]).reshape(4, 8)
    ref = np.cos(np.arange(4)[:, None] * np.tile(inv / 2, 2)[None, :])
    assert np.allclose(cos, ref, atol=1e-6), (cos, ref)


def test_attention_every_datatype(server):
    rng = np.random.default_rng(2)
    for dt in ("FP32", "FP16", "BF16", "FP64"):
        mk = {"FP32": np.float32, "FP16": np.float16, "FP64": np.float64}
        arr = {n: rng.standard_normal(s) for n, s in
               (("q", (1, 2, 3, 4)), ("k", (1, 1, 5, 4)), ("v", (1, 1, 5, 4)))}
        arr = {n: (bf16(a) if dt == "BF16" else a.astype(mk[dt])) for n, a in arr.items()}
        tensors = {n: (a, dt) for n, a in arr.items()}
        tensors["kv_lens"] = (np.array([4], dtype=np.int32), "INT32")
        outs = run_both(server, "attention", tensors,
                        {"causal": True, "return": '["output", "lse"]'},
                        outputs=["lse", "output"])
        # float64 reference of softmax(q k^T / sqrt(d)) v, causal from
        # q_offset = Nk - Nq, keys past kv_lens masked
        q, k, v = (arr[n].astype(np.float64) for n in ("q", "k", "v"))
        s = np.einsum("bhqd,bkd->bhqk", q, k[:, 0]) / 2.0
        qi = np.arange(3)[:, None] + 2
        kj = np.arange(5)[None, :]
        s = np.where((kj <= qi) & (kj < 4), s, -np.inf)
        w = np.exp(s - s.max(-1, keepdims=True))
        ref = np.einsum("bhqk,bkd->bhqd", w / w.sum(-1, keepdims=True), v[:, 0])
        assert np.allclose(as_array(outs["output"]), ref, atol=1e-5), dt


def test_bias_and_encodings(server):
    slopes = np.array([0.5, 0.125], dtype=np.float64)
    outs = run_both(server, "bias", {"slopes": (slopes, "FP64")},
                    {"method": "alibi", "num_heads": 2, "q_len": 3, "k_len": 4})
    ref = -slopes[:, None, None] * np.abs(np.arange(3)[:, None] + 1 - np.arange(4)[None, :])
    assert np.allclose(as_array(outs["bias"]), ref, atol=1e-6), (as_array(outs["bias"]), ref)
    table = np.linspace(-1, 1, 64, dtype=np.float32).reshape(32, 2)
    outs = run_both(server, "bias", {"table": (table, "FP32")},
                    {"method": "t5", "num_heads": 2, "q_len": 3, "return": ["bias", "buckets"]},
                    outputs=["buckets", "bias"])
    assert outs["buckets"][0] == "INT32", outs["buckets"]
    pos = np.array([0, 2, 7], dtype=np.int32)
    outs = run_both(server, "encodings", {"positions": (pos, "INT32")},
                    {"method": "sinusoidal", "dim": 6, "output_dtype": "float64"})
    inv = 10000.0 ** (-np.arange(0, 6, 2) / 6.0)
    ang = pos[:, None] * inv[None, :]
    ref = np.concatenate([np.sin(ang), np.cos(ang)], axis=1)
    got = as_array(outs["encoding"])
    assert outs["encoding"][0] == "FP64", outs["encoding"]
    # sin/cos in halves or interleaved: compare as sets of columns
    assert np.allclose(np.sort(got, axis=1), np.sort(ref, axis=1), atol=1e-6), (got, ref)


# The analysis answers of kinds rope and bias in the form the metadata
# gives; kind extend adds a row per method to these (docs/http.md).
EXTEND_ROWS = {"inv_freq", "wavelength", "scale", "ramp", "band", "turns", "seen",
               "decay_bound", "decay_mean_cos"}
ANALYSIS_YARN = {"kind": "rope", "seq_len": 64, "head_dim": 8, "points": 8,
                 "max_position_embeddings": 64,
                 "rope_scaling": '{"rope_type": "yarn", "factor": 4, '
                                 '"original_max_position_embeddings": 16}'}
ANALYSIS_EXTEND = {"kind": "extend", "seq_len": 64, "head_dim": 8, "points": 8,
                   "max_position_embeddings": 16}


def test_analysis_metadata_lists_what_infer_answers(server):
    meta = server.get("/v2/models/analysis").json()
    assert [t["name"] for t in meta["inputs"]] == ["slopes", "table", "r1", "r2"], meta
    declared = {t["name"]: t for t in meta["outputs"]}
    table = {"name": "table", "shape": [32, 2], "datatype": "FP32", "data": [0.5] * 64}
    requests = [
        (ANALYSIS_YARN, []),
        ({"kind": "bias", "method": "alibi", "num_heads": 2, "seq_len": 5}, []),
        ({"kind": "bias", "method": "t5", "num_heads": 2, "seq_len": 5}, [table]),
        (ANALYSIS_EXTEND, []),
    ]
    seen = set()
    for params, inputs in requests:
        r = infer(server, "analysis", {"parameters": params, "inputs": inputs})
        assert r.status == 200, (params, r)
        for o in r.json()["outputs"]:
            t = declared.get(o["name"])
            assert t, (o["name"], sorted(declared))
            rank, datatype = len(t["shape"]), t["datatype"]
            if params["kind"] == "extend" and o["name"] in EXTEND_ROWS:
                rank += 1
            if params["kind"] == "extend" and o["name"] == "rope_theta":
                datatype = "FP32"
            assert (datatype, rank) == (o["datatype"], len(o["shape"])), (params["kind"], t, o)
            seen.add(o["name"])
    assert seen == set(declared), sorted(set(declared) ^ seen)


def test_analysis_as_v1(server):
    """Kinds rope and bias, JSON and binary, against /v1 bit for bit and
    against float64 references."""
    outs = run_both(server, "analysis", {}, ANALYSIS_YARN)
    assert {"yarn_low", "yarn_high", "decay_bound", "seen"} <= set(outs), sorted(outs)
    inv = 10000.0 ** (-np.arange(0, 8, 2) / 8.0)
    assert np.allclose(as_array(outs["inv_freq_original"]), inv, rtol=1e-6), outs["inv_freq_original"]
    assert as_array(outs["trained_len"]).tolist() == [16.0], outs["trained_len"]
    slopes = np.array([0.5, 0.125])
    outs = run_both(server, "analysis", {"slopes": (slopes, "FP64")},
                    {"kind": "bias", "method": "alibi", "num_heads": 2, "seq_len": 6},
                    outputs=["bias", "reach_10"])
    ref = -slopes[:, None] * np.arange(6)[None, :]
    assert np.allclose(as_array(outs["bias"]), ref, atol=1e-6), as_array(outs["bias"])
    assert np.allclose(as_array(outs["reach_10"]), np.log(10) / slopes, rtol=1e-6), outs["reach_10"]
    table = np.linspace(-1, 1, 64, dtype=np.float32).reshape(32, 2)
    outs = run_both(server, "analysis", {"table": (table, "FP32")},
                    {"kind": "bias", "method": "t5", "num_heads": 2, "seq_len": 5})
    assert outs["bucket_start"][0] == "INT32" and "bias_after" in outs, sorted(outs)
    # T5 buckets a distance below num_buckets/4 exactly: bucket d on keys
    # before the query, 16 + d on keys after it
    assert as_array(outs["buckets"]).tolist() == [0, 1, 2, 3, 4], outs["buckets"]
    assert as_array(outs["buckets_after"]).tolist() == [0, 17, 18, 19, 20], outs["buckets_after"]


def test_analysis_json_values_in_parameters(server):
    """The planner's settings are JSON, not tensors: their JSON text in the
    answer's parameters, equal to /v1's; the tensors as usual, binary too."""
    v1 = server.post("/v1/analysis", json=ANALYSIS_EXTEND).json()
    for binary in (False, True):
        r = infer(server, "analysis", {"id": "plan", "inputs": [],
                                       "parameters": dict(ANALYSIS_EXTEND, binary_data_output=binary)})
        assert r.status == 200, r
        head, outs = parse_answer(r)
        assert set(head["parameters"]) == {"methods", "configs"}, head["parameters"]
        for name in ("methods", "configs"):
            assert isinstance(head["parameters"][name], str), head["parameters"]
            assert json.loads(head["parameters"][name]) == v1[name], name
        assert "configs" not in outs and outs["inv_freq"][1] == [6, 4], outs["inv_freq"]
        assert_same_as_v1(server, "analysis", outs, ANALYSIS_EXTEND)
    # named in outputs: only the named ones come, wherever they belong
    r = infer(server, "analysis", {"inputs": [], "parameters": ANALYSIS_EXTEND,
                                   "outputs": [{"name": "configs"}, {"name": "factor"}]})
    head = r.json()
    assert list(head["parameters"]) == ["configs"], head
    assert [o["name"] for o in head["outputs"]] == ["factor"] and head["outputs"][0]["data"] == [4], head
    r = infer(server, "analysis", {"inputs": [], "parameters": ANALYSIS_EXTEND,
                                   "outputs": [{"name": "factor"}]})
    assert "parameters" not in r.json(), r.json()
    # binary data for a JSON value is refused, naming the output
    p = check_error(infer(server, "analysis", {
        "inputs": [], "parameters": ANALYSIS_EXTEND,
        "outputs": [{"name": "configs", "parameters": {"binary_data": True}}]}), 400)
    assert "JSON value" in p["error"] and p["field"] == "/outputs/0", p


def test_output_dtypes(server):
    for od, datatype in (("float16", "FP16"), ("bfloat16", "BF16"), ("float64", "FP64")):
        r = infer(server, "rope", {"inputs": [], "parameters": {
            "head_dim": 4, "positions": 3, "output_dtype": od, "binary_data_output": True}})
        head, outs = parse_answer(r)
        assert outs["cos"][0] == datatype and outs["attention_scaling"][0] == "FP64", head
        assert_same_as_v1(server, "rope", outs, {"head_dim": 4, "positions": 3, "output_dtype": od})


# ---------------------------------------------------------------------------
# the binary framing, to the byte
# ---------------------------------------------------------------------------

def test_binary_framing(server):
    q = np.arange(8, dtype="<f4").reshape(2, 4)
    head = {"inputs": [{"name": "q", "shape": [2, 4], "datatype": "FP32",
                        "parameters": {"binary_data_size": 32}}],
            "parameters": {"positions": 2},
            "outputs": [{"name": "q", "parameters": {"binary_data": True}}]}
    text = json.dumps(head).encode()
    post = lambda body, h: server.request("POST", "/v2/models/rope/infer", body=body, headers=h)
    # no Content-Type at all, as tritonclient sends it
    r = post(text + q.tobytes(), {"Inference-Header-Content-Length": str(len(text))})
    assert r.status == 200, r
    n = int(r.headers["inference-header-content-length"])
    answer = json.loads(r.body[:n])
    assert answer["outputs"][0]["parameters"]["binary_data_size"] == 32, answer
    assert len(r.body) == n + 32 and r.body[n:n + 8] == q.tobytes()[:8]  # position 0: unrotated
    assert int(r.headers["content-length"]) == len(r.body)
    # an unaligned binary input (a header of odd length) reads the same
    r2 = post(text + b" " + q.tobytes(), {"Inference-Header-Content-Length": str(len(text) + 1)})
    assert r2.status == 200 and r2.body == r.body, r2
    bad = [
        ({"Inference-Header-Content-Length": str(len(text) + 100)}, text + q.tobytes(), "more than"),
        ({"Inference-Header-Content-Length": "12x"}, text + q.tobytes(), "not a byte count"),
        ({"Inference-Header-Content-Length": "-1"}, text + q.tobytes(), "not a byte count"),
        ({"Inference-Header-Content-Length": "99999999999999999999999"}, text, "not a byte count"),
        ({"Inference-Header-Content-Length": str(len(text))}, text + q.tobytes()[:31], "goes past"),
        ({"Inference-Header-Content-Length": str(len(text))}, text + q.tobytes() + b"x", "add up"),
        ({}, text + q.tobytes(), "Inference-Header-Content-Length"),
        ({"Inference-Header-Content-Length": "0"}, text + q.tobytes(), "empty"),
    ]
    for h, body, words in bad:
        p = check_error(post(body, h), 400)
        assert words in p["error"], (h, p)
    for size in (31, 33, -1, "32", 2 ** 62):
        hd = json.loads(text)
        hd["inputs"][0]["parameters"]["binary_data_size"] = size
        t = json.dumps(hd).encode()
        check_error(post(t + q.tobytes(), {"Inference-Header-Content-Length": str(len(t))}), 400)
    # a shape whose byte size overflows
    hd = json.loads(text)
    hd["inputs"][0]["shape"] = [2 ** 31, 2 ** 31, 4]
    t = json.dumps(hd).encode()
    check_error(post(t + q.tobytes(), {"Inference-Header-Content-Length": str(len(t))}), 413)


def test_request_errors(server):
    ok_q = {"name": "q", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}
    cases = [
        ({"inputs": [dict(ok_q, datatype="INT64")]}, "not one of FP32"),
        ({"inputs": [dict(ok_q, datatype="BYTES")]}, "not one of FP32"),
        ({"inputs": [dict(ok_q, data=[1, 2, 3])]}, "3 values and the shape says 4"),
        ({"inputs": [dict(ok_q, data=[1, 2, 3, "x"])]}, "array of numbers"),
        ({"inputs": [dict(ok_q, data=[[1, 2], [3, 4]])], "parameters": {"bogus": "{"}}, "JSON text"),
        ({"inputs": [dict(ok_q, shape=[1, 0])]}, "shape[1]"),
        ({"inputs": [dict(ok_q, shape=[1, 1, 1, 1, 4])]}, "1 to 4 dimensions"),
        ({"inputs": [dict(ok_q, data=[1e6, 0, 0, 0], datatype="FP16")]}, "out of the range of FP16"),
        ({"inputs": [dict(ok_q, data=[1.5, 0, 0, 0], datatype="INT32")]}, "not an INT32 value"),
        ({"inputs": [ok_q, ok_q]}, "given twice"),
        ({"inputs": [dict(ok_q, parameters={"binary_data_size": 16})]}, "not both"),
        ({"inputs": [{"name": "q", "shape": [1, 4], "datatype": "FP32"}]}, "not neither"),
        ({"inputs": [{"shape": [1], "datatype": "FP32", "data": [1]}]}, "needs a name"),
        ({"inputs": "q"}, "inputs must be an array"),
        ({}, "inputs must be an array"),
        ({"inputs": [ok_q], "id": 7}, "id must be a string"),
        ({"inputs": [ok_q], "parameters": [1]}, "parameters must be an object"),
        ({"inputs": [ok_q], "parameters": {"encoding": "b64"}}, "not a v2 parameter"),
        ({"inputs": [ok_q], "parameters": {"binary_data_output": 1}}, "must be a boolean"),
        ({"inputs": [ok_q], "outputs": [{"name": "nope"}]}, "not among this answer's outputs"),
        ({"inputs": [ok_q], "outputs": [{"name": "q"}, {"name": "q"}]}, "asked twice"),
        ({"inputs": [ok_q], "outputs": [{"name": "q", "parameters": {"binary_data": "yes"}}]},
         "must be a boolean"),
        ({"inputs": [{"name": "positions", "shape": [2], "datatype": "INT32", "data": [0, 1]}],
          "parameters": {"positions": 2, "head_dim": 4}}, "also given as a parameter"),
    ]
    for req, words in cases:
        p = check_error(infer(server, "rope", req), 400)
        assert words in p["error"], (req, p["error"])
    # what the /v1 handler says comes through as it is, with its field
    p = check_error(infer(server, "rope", {"inputs": [], "parameters": {
        "head_dim": 8, "rotary_dim": 7, "positions": 4}}), 400)
    assert "7" in p["error"], p
    # media types: JSON, octet-stream or none; nothing else
    body, _ = v2_body({"inputs": [ok_q], "parameters": {"positions": 1}})
    for ct, status in (("application/json", 200), ("application/octet-stream", 200),
                       ("text/plain", 415), ("application/vnd.safetensors", 415),
                       ("application/json; charset=latin1", 415)):
        r = server.request("POST", "/v2/models/rope/infer", body=body, headers={"Content-Type": ct})
        assert r.status == status, (ct, r)
    # not JSON at all
    check_error(server.request("POST", "/v2/models/rope/infer", body=b"\x00\x01",
                               headers={"Content-Type": "application/octet-stream"}), 400)
    # inf and nan are the same strings as in /v1
    r = infer(server, "encodings", {"inputs": [dict(ok_q, name="x", data=[1, "inf", "-inf", "nan"])],
                                    "parameters": {"method": "sinusoidal", "dim": 4, "positions": 1}})
    assert r.status == 200, r
    head, outs = parse_answer(r)
    assert head["outputs"][0]["data"][1:] == ["inf", "-inf", "nan"], head
    assert_same_as_v1(server, "encodings", outs, {"method": "sinusoidal", "dim": 4, "positions": 1,
                                                  "x": [[1, "inf", "-inf", "nan"]]})


def test_ignored_and_strict(server):
    req = {"inputs": [], "parameters": {"head_dim": 4, "positions": 2, "priority": 3},
           "model_name": "rope"}
    r = infer(server, "rope", req)
    assert r.status == 200, r
    assert set(r.headers["x-attnbias-ignored"].split(",")) == {"priority", "model_name"}, r.headers
    p = check_error(infer(server, "rope", req, headers={"Prefer": "handling=strict"}), 400)
    assert "priority" in p["error"], p


# ---------------------------------------------------------------------------
# auth, metrics, limits
# ---------------------------------------------------------------------------

def test_api_key(start):
    srv = start(api_key="k" * 32)
    anon = {"Authorization": None}
    for path in ("/v2/health/live", "/v2/health/ready"):
        assert srv.get(path, headers=anon).status == 200, path
    for path in ("/v2", "/v2/models/rope", "/v2/models/rope/ready"):
        check_error(srv.get(path, headers=anon), 401)
    body, h = v2_body({"inputs": [], "parameters": {"head_dim": 4, "positions": 2}})
    h["Authorization"] = None
    check_error(srv.request("POST", "/v2/models/rope/infer", body=body, headers=h), 401)
    assert infer(srv, "rope", {"inputs": [], "parameters": {"head_dim": 4, "positions": 2}}).status == 200


def test_metrics_by_model(server):
    def count(m, route):
        return sum(v for (name, labels), v in m.items()
                   if name == "attnbias_requests_total" and dict(labels).get("route") == route)
    before = server.metrics()
    infer(server, "rope", {"inputs": [], "parameters": {"head_dim": 4, "positions": 2}})
    infer(server, "rope", {"inputs": [], "parameters": {"head_dim": 4, "positions": 2}},
          path="/v2/models/rope/versions/1/infer")
    infer(server, "bias", {"inputs": [], "parameters": {"num_heads": 1, "q_len": 2}})
    # A request is counted when libmicrohttpd reports it complete, which may
    # come just after the client read the answer: poll, within a bound.
    deadline = time.monotonic() + 10 * run.SLOW
    while True:
        after = server.metrics()
        got = (count(after, "v2_rope") - count(before, "v2_rope"),
               count(after, "v2_bias") - count(before, "v2_bias"))
        if got == (2, 1) or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert got == (2, 1), got
    assert count(after, "rope") == count(before, "rope")


def test_limits(start):
    srv = start("--max-body-mb", "0.01", "--max-output-mb", "0.01")
    big = np.zeros((64, 64), dtype="<f4")
    t, raw = tensor_in("q", big, "FP32", True)
    check_error(infer(srv, "rope", {"inputs": [t], "parameters": {"positions": 64}}, [raw]), 413)
    check_error(infer(srv, "rope", {"inputs": [], "parameters": {"head_dim": 256, "positions": 64}}),
                413)
