"""test_openapi.py: api/openapi.yaml is a sound OpenAPI 3.1 document and
agrees with the server.

Static checks: the YAML parses; it is OpenAPI 3.1-shaped (every $ref
resolves, every operation has an operationId and lists exactly the statuses
the server can answer it with, each error by its named problem+json
response carrying its headers: Allow on 405, Retry-After on 503,
WWW-Authenticate on 401); the licence is the repository's; every example --
request, answer, error, header, schema default -- validates against its
schema (python3-jsonschema, draft 2020-12).  The (method, path) set equals
server/routes.def, and the routes that need no key are the PUBLIC
ones.

Live checks: every route answers (no 404); every JSON answer (the GET
routes', each request example's and a few more) validates against its
response schema closed -- a member the document does not describe fails --
and together they carry every member the answer schemas describe; each
answer example is what the server answers to the request example of its
name; provoked errors (400, 401, 404, 405, 406, 413, 415) come back with a
documented status, a body that validates against Problem and the
documented headers; every operation's path gives 404 under a wrong base URL
and 405 with the right Allow for other methods; X-Attnbias-Ignored lists an
unknown field; GET /openapi.yaml serves this very document.  The linters
and the generated TypeScript clients are tests/clients/.

Tests follow tests/http/run.py's convention; run alone with
    /usr/bin/python3 tests/http/run.py tests/http/test_openapi.py
"""

import base64
import json
import math
import os
import re

import jsonschema
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SPEC_PATH = os.path.join(ROOT, "api", "openapi.yaml")
ROUTES_DEF = os.path.join(ROOT, "server", "routes.def")

HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
ERROR_STATUSES = {"400": "BadRequest", "401": "Unauthorized", "404": "NotFound",
                  "405": "MethodNotAllowed", "406": "NotAcceptable",
                  "413": "ContentTooLarge", "415": "UnsupportedMediaType",
                  "503": "ServiceUnavailable", "default": "InternalError"}
# The headers an error response carries beside its problem+json body.
ERROR_HEADERS = {"401": "WWW-Authenticate", "405": "Allow", "503": "Retry-After"}

_spec_cache = []


def load_spec():
    if not _spec_cache:
        with open(SPEC_PATH, encoding="utf-8") as f:
            _spec_cache.append(yaml.safe_load(f))
    return _spec_cache[0]


def resolve(doc, ref):
    """Follow a local JSON Pointer reference ("#/components/schemas/X")."""
    if not ref.startswith("#/"):
        raise AssertionError("non-local $ref %r" % ref)
    node = doc
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, list):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            raise AssertionError("$ref %r does not resolve (at %r)" % (ref, part))
    return node


def deref(doc, node):
    while isinstance(node, dict) and "$ref" in node and len(node) == 1:
        node = resolve(doc, node["$ref"])
    return node


# ===========================================================================
# JSON Schema validation (python3-jsonschema, draft 2020-12)
# ===========================================================================

class SchemaError(AssertionError):
    pass


def validate(doc, schema, value, where="$"):
    """Raise SchemaError if value does not satisfy schema, whose $refs point
    into doc (the schema is validated as a resource holding doc's
    components, so that "#/components/..." resolves)."""
    root = dict(schema, components=doc["components"])
    root["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    errors = sorted(jsonschema.Draft202012Validator(root).iter_errors(value),
                    key=lambda e: list(e.absolute_path))
    if errors:
        raise SchemaError("%s: %s" % (where, "; ".join(
            "at %s: %s" % ("/".join(map(str, e.absolute_path)) or "/", e.message[:300])
            for e in errors[:5])))


def closed(doc, schema, in_allof=False):
    """schema with every $ref inlined and every object schema closed
    (unevaluatedProperties: false) unless it declares its extra members: a
    member the server sends that the document does not describe fails.
    Branches of an allOf stay open; their parent is closed.  (The document
    has no recursive schema, so inlining ends.)"""
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        return closed(doc, dict(resolve(doc, schema["$ref"]), **rest), in_allof)
    out = dict(schema)
    if "properties" in out:
        out["properties"] = {k: closed(doc, v) for k, v in out["properties"].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), dict):
            out[key] = closed(doc, out[key])
    for key in ("prefixItems", "oneOf", "anyOf"):
        if key in out:
            out[key] = [closed(doc, s) for s in out[key]]
    if "allOf" in out:
        out["allOf"] = [closed(doc, s, in_allof=True) for s in out["allOf"]]
    if not in_allof and ("properties" in out or "allOf" in out) and not (
            {"additionalProperties", "unevaluatedProperties"} & set(out)):
        out["unevaluatedProperties"] = False
    return out


# ===========================================================================
# talking to the server
# ===========================================================================

def call(server, method, path, body=None, headers=None):
    """One request through run.py's Server; a dict or list body goes as JSON.
    Returns (status, {lower-case header: value}, body bytes)."""
    if isinstance(body, (dict, list)):
        r = server.request(method, path, json=body, headers=headers)
    else:
        r = server.request(method, path, body=body, headers=headers)
    return r.status, r.headers, r.body


def read_routes_def():
    """[(METHOD, path, flags string)] from routes.def."""
    out = []
    pat = re.compile(r'^\s*SRV_ROUTE\(\s*(\w+)\s*,\s*"([^"]+)"\s*,(.*)\)\s*$')
    with open(ROUTES_DEF, encoding="utf-8") as f:
        for line in f:
            m = pat.match(line)
            if m:
                out.append((m.group(1), m.group(2), m.group(3).split(",")[-1].strip()))
    return out


def operations(doc):
    for path, item in doc["paths"].items():
        for method in HTTP_METHODS:
            if method in item:
                yield method, path, item[method]


def concrete(doc, path, op):
    """The paths a templated path stands for: every value of the enum of
    each path parameter (the /v2 models and their version)."""
    out = [path]
    for p in op.get("parameters", []):
        p = deref(doc, p)
        if p["in"] != "path":
            continue
        out = [c.replace("{%s}" % p["name"], v) for c in out for v in p["schema"]["enum"]]
    return out


def is_v2(path):
    return path.startswith("/v2")


def example_for(doc, op, cpath):
    """The request example of an operation for one of its concrete paths:
    a /v2 infer path takes the example named as its model."""
    examples = deref(doc, op["requestBody"])["content"]["application/json"]["examples"]
    if is_v2(cpath):
        return examples[cpath.split("/")[3]]["value"]
    return next(iter(examples.values()))["value"]


def assert_problem(doc, status, headers, body, want_status):
    assert status == want_status, "status %d, want %d: %r" % (status, want_status, body[:300])
    ctype = headers.get("content-type", "")
    assert ctype.startswith("application/problem+json"), ctype
    prob = json.loads(body)
    validate(doc, closed(doc, {"$ref": "#/components/schemas/Problem"}), prob, "problem")
    assert prob["status"] == status and prob["error"] == prob["detail"], prob
    # The headers the status's named response documents.
    name = ERROR_STATUSES.get(str(status), "InternalError")
    for hname, h in doc["components"]["responses"][name].get("headers", {}).items():
        h = deref(doc, h)
        if h.get("required") or hname.lower() in headers:
            assert hname.lower() in headers, "%d without %s" % (status, hname)
            validate(doc, h["schema"], _header_value(h["schema"], headers[hname.lower()]),
                     "%d header %s" % (status, hname))
    return prob


def _header_value(schema, text):
    """A header's text as the JSON value its schema describes."""
    return int(text) if schema.get("type") == "integer" else text


def documented(doc, method, path, status):
    """The response object the document gives for this status (or default)."""
    op = doc["paths"][path][method.lower()]
    resp = op["responses"].get(str(status)) or op["responses"].get("default")
    assert resp is not None, "%s %s: status %d is not documented" % (method, path, status)
    return deref(doc, resp)


# ===========================================================================
# static checks
# ===========================================================================

def statuses_of(path, method, public):
    """The statuses an operation can answer, by what the server does:
    every request may meet a wrong base URL or method (404, 405) and a
    declared body too large (413); a GET route refuses a body (400); a
    route behind the key answers 401 without it; all but /healthz answer
    503 while draining, and computing routes also when the queue is full;
    only routes with a body negotiate types (406, 415)."""
    want = {"200", "400", "404", "405", "413", "default"}
    if not public:
        want.add("401")
    if path not in ("/healthz", "/v2/health/live"):
        want.add("503")
    if method == "post":
        want.add("415")
        if not is_v2(path):   # a v2 answer's form is the request's choice
            want.add("406")
    return want


def test_document_shape():
    doc = load_spec()
    assert str(doc["openapi"]).startswith("3.1."), doc["openapi"]
    info = doc["info"]
    assert info["title"] and info["version"] and info["contact"]["name"], info
    # The licence named is the one of the repository.
    with open(os.path.join(ROOT, "LICENSE"), encoding="utf-8") as f:
        assert f.readline().split()[0] == info["license"]["identifier"], info["license"]
    # Every $ref anywhere resolves.
    refs = []

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("$ref"), str):
                refs.append(node["$ref"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(doc)
    assert len(refs) > 50, len(refs)
    for ref in refs:
        resolve(doc, ref)
    # A named response for every error status of docs/http.md#errors, as
    # problem+json, with the headers that status carries.
    comps = doc["components"]["responses"]
    for name, resp in comps.items():
        assert list(resp["content"]) == ["application/problem+json"], name
        schema = resp["content"]["application/problem+json"]["schema"]
        assert schema == {"$ref": "#/components/schemas/Problem"}, name
    for status, name in ERROR_STATUSES.items():
        if status in ERROR_HEADERS:
            assert ERROR_HEADERS[status] in comps[name].get("headers", {}), name
    problem = doc["components"]["schemas"]["Problem"]
    assert set(problem["required"]) == {"type", "title", "status", "detail", "error"}
    assert "field" in problem["properties"]
    ids = set()
    for method, path, op in operations(doc):
        where = "%s %s" % (method.upper(), path)
        assert op.get("operationId") and op["operationId"] not in ids, where
        ids.add(op["operationId"])
        public = op.get("security", doc["security"]) == []
        assert set(op["responses"]) == statuses_of(path, method, public), (
            where, sorted(op["responses"]))
        for status, resp in op["responses"].items():
            if status in ERROR_STATUSES:   # errors by their named response
                assert resp == {"$ref": "#/components/responses/" + ERROR_STATUSES[status]}, (
                    where, status)
            resp = deref(doc, resp)
            assert resp.get("description"), "%s %s: no description" % (where, status)
            for mtype, media in resp.get("content", {}).items():
                assert "schema" in media, "%s %s %s: no schema" % (where, status, mtype)
        if method == "post" and is_v2(path):
            body = deref(doc, op["requestBody"])
            assert set(body["content"]) == {"application/json", "application/octet-stream"}, where
            content = op["responses"]["200"]["content"]
            assert set(content) == {"application/json", "application/octet-stream"}, where
            assert "Inference-Header-Content-Length" in op["responses"]["200"]["headers"], where
        elif method == "post":
            body = deref(doc, op["requestBody"])
            assert set(body["content"]) == {"application/json", "application/vnd.safetensors"}, where
            ok = op["responses"]["200"]
            assert "X-Attnbias-Ignored" in ok["headers"], where
            # One schema per media type: JSON answers an object of named
            # outputs, the binary types a file of their own.
            content = ok["content"]
            assert {"application/json", "application/vnd.safetensors",
                    "application/x-npy"} <= set(content), where
            assert resolve(doc, content["application/json"]["schema"]["$ref"])["type"] == "object"
            for mtype, media in content.items():
                if mtype != "application/json":
                    target = resolve(doc, media["schema"]["$ref"])
                    assert target["type"] == "string" and target["format"] == "binary" and \
                        target["contentMediaType"] == mtype, (where, mtype)
    for path in ("/v1/bias", "/v1/attention"):
        assert "image/png" in doc["paths"][path]["post"]["responses"]["200"]["content"], path
    schemes = doc["components"]["securitySchemes"]
    assert schemes["bearerAuth"] == dict(schemes["bearerAuth"], type="http", scheme="bearer")
    assert doc["security"] == [{"bearerAuth": []}]


# The fixed fields of the OpenAPI 3.1 objects used here, and the JSON
# Schema 2020-12 keywords (plus OpenAPI's own): a misspelt keyword, which a
# validator would silently ignore, fails test_keywords_are_known.
OAS_FIELDS = {
    "root": {"openapi", "info", "jsonSchemaDialect", "servers", "paths", "webhooks",
             "components", "security", "tags", "externalDocs"},
    "info": {"title", "summary", "description", "termsOfService", "contact", "license",
             "version"},
    "components": {"schemas", "responses", "parameters", "examples", "requestBodies",
                   "headers", "securitySchemes", "links", "callbacks", "pathItems"},
    "operation": {"tags", "summary", "description", "externalDocs", "operationId",
                  "parameters", "requestBody", "responses", "callbacks", "deprecated",
                  "security", "servers"},
    "requestBody": {"description", "content", "required"},
    "response": {"description", "headers", "content", "links"},
    "mediaType": {"schema", "example", "examples", "encoding"},
    "header": {"description", "required", "deprecated", "schema", "example", "examples",
               "style", "explode", "content"},
    "example": {"summary", "description", "value", "externalValue"},
}
SCHEMA_KEYWORDS = {
    "$ref", "$defs", "$id", "$schema", "$anchor", "$comment", "type", "enum", "const",
    "properties", "required", "additionalProperties", "patternProperties",
    "propertyNames", "minProperties", "maxProperties", "items", "prefixItems",
    "contains", "minItems", "maxItems", "uniqueItems", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minLength", "maxLength",
    "pattern", "format", "allOf", "anyOf", "oneOf", "not", "if", "then", "else",
    "dependentRequired", "dependentSchemas", "title", "description", "default",
    "examples", "deprecated", "readOnly", "writeOnly", "contentEncoding",
    "contentMediaType", "contentSchema", "unevaluatedProperties", "unevaluatedItems",
    "discriminator", "xml", "externalDocs", "example"}


def _check_keys(obj, kind, where):
    extra = {k for k in obj if not k.startswith("x-")} - OAS_FIELDS[kind]
    assert not extra, "%s (%s): unknown fields %s" % (where, kind, sorted(extra))


def _check_schema(schema, where):
    if not isinstance(schema, dict):
        assert isinstance(schema, bool), "%s: schema %r" % (where, schema)
        return
    extra = {k for k in schema if not k.startswith("x-")} - SCHEMA_KEYWORDS
    assert not extra, "%s: unknown schema keywords %s" % (where, sorted(extra))
    for key in ("properties", "$defs", "patternProperties", "dependentSchemas"):
        for name, sub in schema.get(key, {}).items():
            _check_schema(sub, "%s.%s" % (where, name))
    for key in ("allOf", "anyOf", "oneOf", "prefixItems"):
        for i, sub in enumerate(schema.get(key, [])):
            _check_schema(sub, "%s.%s[%d]" % (where, key, i))
    for key in ("items", "not", "additionalProperties", "if", "then", "else",
                "contains", "propertyNames"):
        if key in schema and not isinstance(schema[key], bool):
            _check_schema(schema[key], "%s.%s" % (where, key))
    if "required" in schema and "properties" in schema and not schema.get("allOf"):
        missing = set(schema["required"]) - set(schema["properties"])
        assert not missing, "%s: required but not described: %s" % (where, missing)


def test_keywords_are_known():
    doc = load_spec()
    _check_keys(doc, "root", "/")
    _check_keys(doc["info"], "info", "info")
    _check_keys(doc["components"], "components", "components")
    for name, schema in doc["components"]["schemas"].items():
        _check_schema(schema, "schemas." + name)

    def check_response(resp, where):
        if "$ref" in resp:
            return
        _check_keys(resp, "response", where)
        for hname, h in resp.get("headers", {}).items():
            if "$ref" not in h:
                _check_keys(h, "header", "%s header %s" % (where, hname))
                _check_schema(h["schema"], "%s header %s" % (where, hname))
        for mtype, media in resp.get("content", {}).items():
            _check_keys(media, "mediaType", "%s %s" % (where, mtype))
            _check_schema(media["schema"], "%s %s" % (where, mtype))
            for ename, ex in media.get("examples", {}).items():
                _check_keys(ex, "example", "%s %s example %s" % (where, mtype, ename))

    for name, resp in doc["components"]["responses"].items():
        check_response(resp, "responses." + name)
    for name, h in doc["components"]["headers"].items():
        _check_keys(h, "header", "headers." + name)
    for method, path, op in operations(doc):
        where = "%s %s" % (method.upper(), path)
        _check_keys(op, "operation", where)
        if "requestBody" in op:
            _check_keys(op["requestBody"], "requestBody", where)
            for mtype, media in op["requestBody"]["content"].items():
                _check_keys(media, "mediaType", "%s %s" % (where, mtype))
                _check_schema(media["schema"], "%s %s" % (where, mtype))
                for ename, ex in media.get("examples", {}).items():
                    _check_keys(ex, "example", "%s example %s" % (where, ename))
        for status, resp in op["responses"].items():
            assert status == "default" or re.fullmatch(r"[1-5]\d\d", status), status
            check_response(resp, "%s %s" % (where, status))


def examples(doc):
    """Every example of the document with the schema it illustrates:
    [(where, schema, value)] -- media types' `example` and `examples`
    (request bodies, answers, named responses), headers' `example`, and the
    `examples` and `default` of schemas."""
    out = []

    def media(where, content):
        for mtype, m in content.items():
            if "example" in m:
                out.append(("%s %s" % (where, mtype), m["schema"], m["example"]))
            for name, ex in m.get("examples", {}).items():
                out.append(("%s %s %s" % (where, mtype, name), m["schema"], ex["value"]))

    def headers(where, hs):
        for name, h in hs.items():
            h = deref(doc, h)
            if "example" in h:
                out.append(("%s header %s" % (where, name), h["schema"], h["example"]))

    def schemas(where, node):
        if isinstance(node, dict):
            for key in ("examples", "default"):
                if key in node and isinstance(node.get("type"), (str, list)):
                    values = node[key] if key == "examples" else [node[key]]
                    out.extend(("%s %s" % (where, key), node, v) for v in values)
            for k, v in node.items():
                if k not in ("examples", "default", "enum", "const"):
                    schemas("%s.%s" % (where, k), v)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                schemas("%s[%d]" % (where, i), v)

    for method, path, op in operations(doc):
        where = "%s %s" % (method.upper(), path)
        if "requestBody" in op:
            media(where + " request", deref(doc, op["requestBody"])["content"])
        for status, resp in op["responses"].items():
            if "$ref" not in resp:
                media("%s %s" % (where, status), resp.get("content", {}))
                headers("%s %s" % (where, status), resp.get("headers", {}))
    for name, resp in doc["components"]["responses"].items():
        media("responses." + name, resp["content"])
        headers("responses." + name, resp.get("headers", {}))
    headers("headers", doc["components"]["headers"])
    schemas("schemas", doc["components"]["schemas"])
    return out


def test_every_example_validates():
    doc = load_spec()
    found = examples(doc)
    kinds = {w.split()[-1] for w, _, _ in found}
    for where, schema, value in found:
        validate(doc, schema, value, where)
    assert len(found) > 60 and {"default", "examples"} <= kinds, (len(found), kinds)
    n_requests = sum(" request " in w for w, _, _ in found)
    n_answers = sum(" 200 application/json " in w for w, _, _ in found)
    assert n_requests >= 12 and n_answers >= 4, (n_requests, n_answers)
    # ...and the validator does reject what the schemas forbid.
    bad = [("#/components/schemas/EncodingsRequest", {"method": "sinusoidal", "positions": 0}),
           ("#/components/schemas/EncodingsRequest", {"method": "fourier", "positions": 3}),
           ("#/components/schemas/Tensor", {"shape": [2, 0], "data": []}),
           ("#/components/schemas/Tensor", {"shape": [2], "data": [1, "infinity"]}),
           ("#/components/schemas/Tensor", [[[[[1.0]]]]]),
           ("#/components/schemas/Tensor", [[1.0], 2.0]),
           ("#/components/schemas/AttentionRequest", {"q": [[1.0]], "k": [[1.0]]}),
           ("#/components/schemas/AttentionRequest",
            {"q": [[1.0]], "k": [[1.0]], "v": [[1.0]], "layout": "sbhd"}),
           ("#/components/schemas/RopeRequest", {"head_dim": 8, "positions": 4,
                                                 "rope_scaling": {"rope_type": "yarnn"}}),
           ("#/components/schemas/BiasRequest", {"method": "alibi", "num_heads": 2, "q_len": 4,
                                                 "return": ["bias", "bias"]}),
           ("#/components/schemas/AnalysisRequest", {"kind": "rope", "head_dim": 8}),
           ("#/components/schemas/AnalysisRequest", {"kind": "bias", "seq_len": 8, "plot": "heat"}),
           ("#/components/schemas/BiasResult", {}),
           ("#/components/schemas/OutputTensor", {"shape": [2], "data": [1, 2]})]
    for ref, value in bad:
        try:
            validate(doc, {"$ref": ref}, value)
        except SchemaError:
            continue
        raise AssertionError("%s accepted %r" % (ref, value))
    # Closed, an answer with an undocumented member fails.
    answer = {"bias": {"shape": [1], "dtype": "float32", "data": [0], "scale": 1}}
    validate(doc, {"$ref": "#/components/schemas/BiasResult"}, answer)
    try:
        validate(doc, closed(doc, {"$ref": "#/components/schemas/BiasResult"}), answer)
    except SchemaError:
        pass
    else:
        raise AssertionError("closed(BiasResult) accepted an unknown member")


def test_routes_match_routes_def():
    doc = load_spec()
    table = read_routes_def()
    assert len(table) >= 9, table
    from_def = {(m, p) for m, p, _ in table}
    # A /v2 model path in the document stands for one route per model; its
    # "/versions/1" form is the same route as the unversioned one.
    doc_of = {}
    for m, p, op in operations(doc):
        for c in concrete(doc, p, op):
            doc_of[(m.upper(), c.replace("/versions/1", ""))] = op
    from_doc = set(doc_of)
    assert from_doc == from_def, "only in openapi: %s; only in routes.def: %s" % (
        sorted(from_doc - from_def), sorted(from_def - from_doc))
    for m, p, flags in table:
        op = doc_of[(m, p)]
        public = "SRV_ROUTE_PUBLIC" in flags
        security = op.get("security", doc["security"])
        assert (security == []) == public, "%s %s: security %r vs flags %s" % (m, p, security, flags)


# ===========================================================================
# live checks
# ===========================================================================

def test_every_route_answers(server):
    doc = load_spec()
    for method, path, op in operations(doc):
        for cpath in concrete(doc, path, op):
            if method == "get":
                status, headers, body = call(server, "GET", cpath)
            else:
                status, headers, body = call(server, "POST", cpath, example_for(doc, op, cpath))
            assert status != 404, "%s %s: 404" % (method, cpath)
            assert status == 200, "%s %s: %d %r" % (method, cpath, status, body[:300])
            ctype = headers.get("content-type", "").split(";")[0]
            assert ctype in documented(doc, method, path, 200)["content"], (cpath, ctype)


# Requests beyond the document's examples, so that every member of every
# answer schema and every output dtype is met at least once.
EXTRA_REQUESTS = [
    ("/v1/encodings", {"method": "sinusoidal", "positions": 2, "dim": 4,
                       "x": [[1, 2, 3, 4], [5, 6, 7, 8]], "output_dtype": "float64"}),
    ("/v1/rope", {"head_dim": 4, "positions": [0, 3], "q": [[1, 2, 3, 4], [4, 3, 2, 1]],
                  "k": {"shape": [2, 4], "data": [1, 0, 0, 1, 0, 1, 1, 0]},
                  "encoding": "b64", "output_dtype": "float16"}),
    ("/v1/rope", {"head_dim": 8, "positions": 3, "output_dtype": "bfloat16"}),
    ("/v1/attention", {"q": [[1.0, 0.5]], "k": [[1.0, 0.0], [0.0, 1.0]],
                       "v": [[1.0, 2.0], [3.0, 4.0]], "return": ["lse", "weights"]}),
]
DTYPE_SIZE = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int32": 4}


def answer_schema(doc, path, method):
    op = doc["paths"][path][method]
    return closed(doc, deref(doc, op["responses"]["200"])["content"]["application/json"]["schema"])


def check_answer(doc, path, method, out, where, seen):
    """A JSON answer against its closed schema, and each tensor output
    carrying exactly one of data and b64, sized by its shape and dtype.
    Adds (path, member) and (dtype,) to seen."""
    validate(doc, answer_schema(doc, path, method), out, where)
    for name, v in out.items() if isinstance(out, dict) else ():
        seen.add((path, name))
        if not (isinstance(v, dict) and "shape" in v):
            continue
        seen.add((v["dtype"],))
        n = math.prod(v["shape"])
        assert ("data" in v) != ("b64" in v), "%s.%s: data and b64" % (where, name)
        if "data" in v:
            assert len(v["data"]) == n, "%s.%s: %d values, shape %s" % (
                where, name, len(v["data"]), v["shape"])
        else:
            assert len(base64.b64decode(v["b64"], validate=True)) == n * DTYPE_SIZE[v["dtype"]], (
                "%s.%s: b64 size" % (where, name))


def same_answer(got, want, where):
    """The server's answer equals the document's example of it: the same
    members, shapes and dtypes, and values within float32 rounding (the
    kernel sets may round the last digit differently)."""
    assert set(got) == set(want), "%s: members %s, example %s" % (where, sorted(got), sorted(want))
    if "outputs" in want:   # an Open Inference Protocol answer
        assert [o["name"] for o in got["outputs"]] == [o["name"] for o in want["outputs"]], where
        same_answer({o["name"]: dict(o, dtype=o["datatype"]) for o in got["outputs"]},
                    {o["name"]: dict(o, dtype=o["datatype"]) for o in want["outputs"]}, where)
        assert {k: v for k, v in got.items() if k != "outputs"} == \
            {k: v for k, v in want.items() if k != "outputs"}, where
        return
    for name, w in want.items():
        g = got[name]
        assert (g["shape"], g["dtype"]) == (w["shape"], w["dtype"]), (where, name)
        for i, (a, b) in enumerate(zip(g["data"], w["data"])):
            if isinstance(a, str) or isinstance(b, str):
                assert a == b, "%s.%s[%d]: %r, example %r" % (where, name, i, a, b)
            else:
                assert abs(a - b) <= 1e-6 * max(1.0, abs(b)), "%s.%s[%d]: %r, example %r" % (
                    where, name, i, a, b)


def test_examples_answer_as_documented(server):
    """Every JSON answer -- the GET routes', each request example's, and
    EXTRA_REQUESTS' -- validates against its schema closed (no member the
    document does not describe), every member of the answer schemas is
    met, and each answer example is what the server answers to the
    request example of the same name."""
    doc = load_spec()
    seen = set()
    for method, path, op in operations(doc):
        content = deref(doc, op["responses"]["200"])["content"]
        if "application/json" in content and method == "get":
            for cpath in concrete(doc, path, op):
                status, _, body = call(server, "GET", cpath, headers={"Accept": "application/json"})
                assert status == 200, cpath
                check_answer(doc, path, method, json.loads(body), cpath, seen)
        if method != "post":
            continue
        media = deref(doc, op["requestBody"])["content"]["application/json"]
        answers = content["application/json"].get("examples", {})
        assert answers and set(answers) <= set(media["examples"]), (path, sorted(answers))
        for name, ex in media["examples"].items():
            # a /v2 infer example is named as its model: sent to that one
            cpath = path.replace("{model_name}", name).replace("{model_version}", "1")
            status, headers, body = call(server, "POST", cpath, ex["value"])
            assert status == 200, "%s example %s: %d %r" % (path, name, status, body[:400])
            assert headers["content-type"].startswith("application/json"), headers
            out = json.loads(body)
            check_answer(doc, path, method, out, "%s %s" % (path, name), seen)
            assert "x-attnbias-ignored" not in headers, (
                "%s example %s: server ignored %s" % (path, name, headers.get("x-attnbias-ignored")))
            if name in answers:
                same_answer(out, answers[name]["value"], "%s example %s" % (path, name))
    for path, body in EXTRA_REQUESTS:
        status, headers, data = call(server, "POST", path, body)
        assert status == 200 and "x-attnbias-ignored" not in headers, (path, status, data[:300])
        check_answer(doc, path, "post", json.loads(data), path, seen)
    for method, path, op in operations(doc):
        if method == "post":
            schema = answer_schema(doc, path, method)
            missed = [m for m in schema["properties"] if (path, m) not in seen]
            assert not missed, "%s: no answer carried %s" % (path, missed)
    dtypes = resolve(doc, "#/components/schemas/OutputTensor")["properties"]["dtype"]["enum"]
    assert {(d,) for d in dtypes} <= seen, "dtypes never answered: %s" % [
        d for d in dtypes if (d,) not in seen]


def schema_properties(doc, schema, props=None, required=None):
    """Collect {name: [property schemas]} and the required names of an
    object schema, through $ref and allOf."""
    props = {} if props is None else props
    required = set() if required is None else required
    if "$ref" in schema:
        schema_properties(doc, resolve(doc, schema["$ref"]), props, required)
    for sub in schema.get("allOf", []):
        schema_properties(doc, sub, props, required)
    for name, sub in schema.get("properties", {}).items():
        props.setdefault(name, []).append(sub)
    required.update(schema.get("required", []))
    return props, required


def _flat(doc, prop):
    """A property schema with its $ref target merged under its own keywords."""
    if "$ref" not in prop:
        return prop
    out = dict(_flat(doc, resolve(doc, prop["$ref"])))
    out.update({k: v for k, v in prop.items() if k != "$ref"})
    out["$ref"] = prop["$ref"]
    return out


def _types(p):
    t = p.get("type", [])
    return set(t if isinstance(t, list) else [t])


def check_catalog_param(doc, cp, prop, where):
    """One parameter of GET /v1/methods against its OpenAPI property (a
    property may be another schema's, by reference)."""
    while "/properties/" in prop.get("$ref", ""):
        prop = resolve(doc, prop["$ref"])
    p = _flat(doc, prop)
    ctype = cp["type"]
    if ctype == "tensor":
        assert prop.get("$ref") == "#/components/schemas/Tensor", "%s: not a Tensor" % where
    elif ctype in ("integer", "number", "boolean", "string"):
        assert ctype in _types(p), "%s: type %s vs %s" % (where, _types(p), ctype)
    elif ctype.startswith("array of "):
        assert "array" in _types(p), "%s: not an array" % where
        item = {"integers": "integer", "strings": "string", "objects": "object"}[ctype[9:]]
        assert item in _types(_flat(doc, p["items"])), "%s: items not %s" % (where, item)
    elif ctype == "integer or array":
        alts = [_types(_flat(doc, a)) for a in p.get("oneOf", [])]
        assert {"integer"} in alts and {"array"} in alts, "%s: %r" % (where, alts)
    elif ctype == "object":
        assert "object" in _types(p) or p.get("properties") or p.get("allOf"), where
    else:
        raise AssertionError("%s: catalog type %r unknown to this test" % (where, ctype))
    if "default" in cp:
        assert "default" in p, "%s: no default (server: %r)" % (where, cp["default"])
        assert p["default"] == cp["default"], "%s: default %r vs %r" % (
            where, p["default"], cp["default"])
    if "enum" in cp:
        enum = p.get("enum") or _flat(doc, p.get("items", {})).get("enum")
        assert enum and set(enum) == set(cp["enum"]), "%s: enum %r vs %r" % (
            where, enum, cp["enum"])
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if key in cp:
            assert p.get(key) == cp[key], "%s: %s %r vs %r" % (where, key, p.get(key), cp[key])
        elif ctype in ("integer", "number"):
            assert key not in p, "%s: %s %r not enforced by the server" % (where, key, p[key])
    for key, val in cp.get("items", {}).items():
        if key != "type":
            assert _flat(doc, p["items"]).get(key) == val, "%s: items.%s" % (where, key)


def test_catalog_matches_request_schemas(server):
    """GET /v1/methods is generated from the tables the server parses
    requests with; every parameter there must be documented here with the
    same type, default, enum and range, and every documented request field
    must be one the server knows."""
    doc = load_spec()
    cat = server.get("/v1/methods").json()

    def params(*lists):
        return [p for lst in lists for p in lst]

    enc, rope, bias, attn = cat["encodings"], cat["rope"], cat["bias"], cat["attention"]
    an = cat["analysis"]
    sections = [
        ("EncodingsRequest", enc["parameters"],
         params(*[m["parameters"] for m in enc["methods"]])),
        ("RopeRequest", rope["parameters"], []),
        ("RopeScaling", [], params(rope["rope_scaling"],
                                   *[t["parameters"] for t in rope["rope_types"]])),
        ("BiasRequest", bias["parameters"],
         params(*[m["parameters"] for m in bias["methods"]])),
        ("AttentionRequest", attn["parameters"], []),
        ("AttentionRope", attn["rope"], []),
        ("BiasMethod", attn["bias"]["parameters"], []),
        # Kind bias's fields are required for that kind only.
        ("AnalysisRequest", an["parameters"],
         params(an["bias_parameters"], *[m["parameters"] for m in bias["methods"]])),
    ]
    output = {p["name"] for p in cat["output_options"]}
    # A model's config (model, config, layer): every POST route reads it.
    config = {p["name"] for p in cat["config_options"]}
    cfg_props, _ = schema_properties(doc, {"$ref": "#/components/schemas/ModelConfigOptions"})
    for cp in cat["config_options"]:
        check_catalog_param(doc, cp, cfg_props[cp["name"]][0], "ModelConfigOptions." + cp["name"])
    output |= config
    out_props, _ = schema_properties(doc, {"$ref": "#/components/schemas/OutputOptions"})
    for cp in cat["output_options"]:
        check_catalog_param(doc, cp, out_props[cp["name"]][0], "OutputOptions." + cp["name"])
    for name, top, per_method in sections:
        props, required = schema_properties(doc, {"$ref": "#/components/schemas/" + name})
        known = set(output)
        for cp in top + per_method:
            where = "%s.%s" % (name, cp["name"])
            assert cp["name"] in props, "%s: the server takes it, openapi.yaml lacks it" % where
            known.add(cp["name"])
            for alias in cp.get("aliases", []):
                assert alias in props, "%s: alias %s undocumented" % (where, alias)
                known.add(alias)
            for prop in props[cp["name"]]:
                check_catalog_param(doc, cp, prop, where)
        want_required = {cp["name"] for cp in top if cp.get("required")}
        assert required == want_required, "%s: required %s, server %s" % (
            name, sorted(required), sorted(want_required))
        if name != "BiasMethod":       # its parameters are /v1/bias's methods'
            extra = set(props) - known
            assert not extra, "%s: documented but unknown to the server: %s" % (name, sorted(extra))


def test_binary_media_types_as_documented(server):
    """Each POST example, sent as a safetensors body (its fields in
    __metadata__.params) and asked back as safetensors and as .npy, answers
    with the documented media types."""
    doc = load_spec()
    for method, path, op in operations(doc):
        if method != "post" or is_v2(path):   # the v2 binary form: test_v2.py
            continue
        ok = op["responses"]["200"]["content"]
        media = deref(doc, op["requestBody"])["content"]["application/json"]
        example = next(iter(media["examples"].values()))["value"]
        meta = json.dumps({"__metadata__": {"params": json.dumps(example)}}).encode()
        meta += b" " * (-len(meta) % 8)
        st_body = len(meta).to_bytes(8, "little") + meta
        status, headers, body = call(server, "POST", path, st_body,
                                     {"Content-Type": "application/vnd.safetensors",
                                      "Accept": "application/vnd.safetensors"})
        assert status == 200, "%s: %d %r" % (path, status, body[:300])
        ctype = headers["content-type"].split(";")[0]
        assert ctype == "application/vnd.safetensors" and ctype in ok, (path, ctype)
        hlen = int.from_bytes(body[:8], "little")
        names = [k for k in json.loads(body[8:8 + hlen]) if k != "__metadata__"]
        assert names, "%s: no tensor in the safetensors response" % path
        status, headers, body = call(server, "POST", path, dict(example, output=names[0]),
                                     {"Accept": "application/x-npy"})
        assert status == 200, "%s: %d %r" % (path, status, body[:300])
        assert headers["content-type"].split(";")[0] == "application/x-npy" in ok, path
        assert body[:8] == b"\x93NUMPY\x01\x00", body[:10]


def test_provoked_errors_are_documented(server):
    doc = load_spec()
    rope = {"head_dim": 8, "positions": 4}
    cases = [
        # (method, path, body, headers, status, field or None)
        ("POST", "/v1/rope", b'{"head_dim": 8,', {"Content-Type": "application/json"}, 400, None),
        ("POST", "/v1/rope", dict(rope, rotary_dim=7), None, 400, "/rotary_dim"),
        ("POST", "/v1/attention", {"k": [[1.0]], "v": [[1.0]]}, None, 400, "/q"),
        ("POST", "/v1/bias", {"method": "alibi", "num_heads": 2, "q_len": 3, "k_len": 3,
                              "causal": "yes"}, None, 400, "/causal"),
        ("POST", "/v1/rope", json.dumps(rope).encode(), {"Content-Type": "text/plain"}, 415, None),
        ("POST", "/v1/rope", rope, {"Accept": "image/png"}, 406, None),
        ("POST", "/v1/rope", rope, {"Accept": "application/x-npy"}, 406, None),
        ("POST", "/v1/bias", {"method": "alibi", "num_heads": 1024, "q_len": 1 << 20,
                              "k_len": 1 << 20}, None, 413, None),
        ("GET", "/v1/nope", None, None, 404, None),
        ("GET", "/v1/rope", None, None, 405, None),
        ("POST", "/healthz", b"", None, 405, None),
        ("GET", "/healthz", b"{}", None, 400, None),
        ("GET", "/v1/methods", b"{}", None, 400, None),
    ]
    for method, path, body, headers, want, field in cases:
        status, hdrs, data = call(server, method, path, body, headers)
        prob = assert_problem(doc, status, hdrs, data, want)
        if method.lower() in doc["paths"].get(path, {}):
            documented(doc, method, path, want)
        if field:
            assert prob.get("field") == field, "%s %s: field %r, want %r" % (
                method, path, prob.get("field"), field)
        if want == 405:
            allow = hdrs.get("allow", "")
            assert ("POST" if path == "/v1/rope" else "GET") in allow, allow
    # A GET route with a declared body over the cap: 413 before any byte
    # of it is read (and the connection closes).
    for path in ("/healthz", "/openapi.yaml"):
        raw = server.raw(("GET %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                          % (path, 1 << 40)).encode())
        head, _, data = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        hdrs = {k.strip().lower(): v.strip() for k, _, v in
                (ln.partition(":") for ln in lines[1:])}
        assert_problem(doc, int(lines[0].split()[1]), hdrs, data, 413)
        documented(doc, "GET", path, 413)
    # An unknown field is ignored and named in X-Attnbias-Ignored.
    status, hdrs, _ = call(server, "POST", "/v1/rope", dict(rope, rope_thetaa=5))
    assert status == 200 and "rope_thetaa" in hdrs.get("x-attnbias-ignored", ""), hdrs


def test_404_and_405_on_every_operation(server):
    """What every operation lists besides its own answers: its path under a
    wrong base URL is a 404, and its path asked with another method a 405
    whose Allow names exactly the documented methods (HEAD with GET)."""
    doc = load_spec()
    for method, path, op in operations(doc):
        documented(doc, method, path, 404)
        documented(doc, method, path, 405)
        methods = [m.upper() for m in HTTP_METHODS if m in doc["paths"][path]]
        allowed = set(methods) | ({"HEAD"} if "GET" in methods else set())
        for cpath in concrete(doc, path, op):
            status, hdrs, data = call(server, method.upper(), "/api" + cpath,
                                      {} if method == "post" else None)
            assert_problem(doc, status, hdrs, data, 404)
            for other in ("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"):
                if other in allowed:
                    continue
                status, hdrs, data = call(server, other, cpath)
                assert_problem(doc, status, hdrs, data, 405)
                assert {m.strip() for m in hdrs["allow"].split(",")} == allowed, (
                    cpath, other, hdrs["allow"])


def test_api_key_and_public_routes(start):
    """A server with --api-key-file: the routes the document marks
    `security: []` answer without the key, every other one needs it."""
    doc = load_spec()
    srv = start(api_key="s3cret-key")
    no_key = {"Authorization": None}
    for method, path, op in operations(doc):
        public = op.get("security", doc["security"]) == []
        cpath = concrete(doc, path, op)[0]
        body = example_for(doc, op, cpath) if method == "post" else None
        status, hdrs, data = call(srv, method.upper(), cpath, body, no_key)
        if public:
            assert status == 200, "%s without key: %d" % (cpath, status)
            continue
        assert_problem(doc, status, hdrs, data, 401)
        documented(doc, method, path, 401)
        status, _, _ = call(srv, method.upper(), cpath, body,
                            {"Authorization": "Bearer wrong-key"})
        assert status == 401, "%s with a wrong key: %d" % (path, status)
        status, _, data = call(srv, method.upper(), cpath, body)   # run.py sends the key
        assert status == 200, "%s with the key: %d %r" % (path, status, data[:200])


def test_served_document_is_this_one(server):
    status, headers, body = call(server, "GET", "/openapi.yaml")
    assert status == 200, status
    ctype = headers.get("content-type", "")
    assert "yaml" in ctype, ctype
    with open(SPEC_PATH, "rb") as f:
        assert body == f.read(), "GET /openapi.yaml differs from api/openapi.yaml"
    assert yaml.safe_load(body) == load_spec()


def test_metrics_are_prometheus_text(server):
    status, headers, body = call(server, "GET", "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain"), headers
    text = body.decode()
    described = load_spec()["paths"]["/metrics"]["get"]["description"]
    for name in re.findall(r"`(attnbias_[a-z_]+)", described):
        assert re.search(r"^%s(\{|_bucket\{| )" % name, text, re.M) or \
            ("# TYPE %s " % name) in text, "metric %s missing" % name
    for line in text.splitlines():
        if line and not line.startswith("#"):
            value = line.rsplit(" ", 1)[1]
            assert value in ("+Inf", "-Inf", "NaN") or math.isfinite(float(value)), line
