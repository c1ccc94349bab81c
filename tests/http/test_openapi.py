"""test_openapi.py: api/openapi.yaml is a sound OpenAPI 3.1 document and
agrees with the server.

Static checks: the YAML parses; it is OpenAPI 3.1-shaped (every $ref
resolves, every operation has an operationId and responses, every error
response is application/problem+json with the Problem schema, 405 carries
Allow and 503 Retry-After, each error status of docs/http.md has a component);
every request example validates against its request schema (a small JSON
Schema validator lives below: python3-jsonschema is not a build package).
The (method, path) set equals server/route/routes.def, and the routes that
need no key are the PUBLIC ones.

Live checks: every route answers (no 404) and every documented example gets
a 200 whose JSON validates against the response schema; provoked errors
(400, 404, 405, 406, 413, 415, 401) come back with a documented status and
a body that validates against Problem; X-Attnbias-Ignored lists an unknown
field; GET /openapi.yaml serves this very document.

Tests follow tests/http/run.py's convention; run alone with
    /usr/bin/python3 tests/http/run.py tests/http/test_openapi.py
"""

import json
import math
import os
import re

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SPEC_PATH = os.path.join(ROOT, "api", "openapi.yaml")
ROUTES_DEF = os.path.join(ROOT, "server", "route", "routes.def")

HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
ERROR_STATUSES = {"400": "BadRequest", "401": "Unauthorized", "404": "NotFound",
                  "405": "MethodNotAllowed", "406": "NotAcceptable",
                  "413": "PayloadTooLarge", "415": "UnsupportedMediaType",
                  "503": "ServiceUnavailable"}

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
# a small JSON Schema (2020-12 subset) validator
# ===========================================================================

class SchemaError(AssertionError):
    pass


def _type_ok(value, t):
    if t == "null":
        return value is None
    if t == "boolean":
        return isinstance(value, bool)
    if t == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer())
    if t == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if t == "string":
        return isinstance(value, str)
    if t == "array":
        return isinstance(value, list)
    if t == "object":
        return isinstance(value, dict)
    raise SchemaError("unknown type %r in schema" % t)


def validate(doc, schema, value, where="$"):
    """Raise SchemaError if value does not satisfy schema (refs into doc)."""
    if schema is True or schema == {}:
        return
    if schema is False:
        raise SchemaError("%s: no value allowed" % where)
    if "$ref" in schema:
        validate(doc, resolve(doc, schema["$ref"]), value, where)
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_type_ok(value, t) for t in types):
            raise SchemaError("%s: %r is not of type %s" % (where, _short(value), types))
    if "enum" in schema and value not in schema["enum"]:
        raise SchemaError("%s: %r not in %s" % (where, _short(value), schema["enum"]))
    if "const" in schema and value != schema["const"]:
        raise SchemaError("%s: %r != %r" % (where, _short(value), schema["const"]))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            raise SchemaError("%s: %r < minimum %r" % (where, value, schema["minimum"]))
        if "maximum" in schema and value > schema["maximum"]:
            raise SchemaError("%s: %r > maximum %r" % (where, value, schema["maximum"]))
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            raise SchemaError("%s: %r <= %r" % (where, value, schema["exclusiveMinimum"]))
        if "exclusiveMaximum" in schema and value >= schema["exclusiveMaximum"]:
            raise SchemaError("%s: %r >= %r" % (where, value, schema["exclusiveMaximum"]))
    if isinstance(value, str) and "pattern" in schema:
        if not re.search(schema["pattern"], value):
            raise SchemaError("%s: %r does not match %s" % (where, value, schema["pattern"]))
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            raise SchemaError("%s: fewer than %d items" % (where, schema["minItems"]))
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            raise SchemaError("%s: more than %d items" % (where, schema["maxItems"]))
        if schema.get("uniqueItems") and len(set(map(json.dumps, value))) != len(value):
            raise SchemaError("%s: items not unique" % where)
        prefix = schema.get("prefixItems", [])
        for i, item in enumerate(value):
            if i < len(prefix):
                validate(doc, prefix[i], item, "%s[%d]" % (where, i))
            elif "items" in schema:
                validate(doc, schema["items"], item, "%s[%d]" % (where, i))
    if isinstance(value, dict):
        for name in schema.get("required", []):
            if name not in value:
                raise SchemaError("%s: missing required %r" % (where, name))
        props = schema.get("properties", {})
        for name, sub in props.items():
            if name in value:
                validate(doc, sub, value[name], "%s.%s" % (where, name))
        extra = schema.get("additionalProperties", True)
        if extra is not True:
            for name in value:
                if name not in props:
                    validate(doc, extra, value[name], "%s.%s" % (where, name))
    for sub in schema.get("allOf", []):
        validate(doc, sub, value, where)
    if "anyOf" in schema:
        errs = []
        for sub in schema["anyOf"]:
            try:
                validate(doc, sub, value, where)
                break
            except SchemaError as e:
                errs.append(str(e))
        else:
            raise SchemaError("%s: matches no anyOf branch: %s" % (where, "; ".join(errs)))
    if "oneOf" in schema:
        ok, errs = 0, []
        for sub in schema["oneOf"]:
            try:
                validate(doc, sub, value, where)
                ok += 1
            except SchemaError as e:
                errs.append(str(e))
        if ok != 1:
            raise SchemaError("%s: matches %d oneOf branches (want 1): %s"
                              % (where, ok, "; ".join(errs)))
    if "not" in schema:
        try:
            validate(doc, schema["not"], value, where)
        except SchemaError:
            pass
        else:
            raise SchemaError("%s: matches a 'not' schema" % where)


def _short(v):
    s = repr(v)
    return s if len(s) < 80 else s[:77] + "..."


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


def assert_problem(doc, status, headers, body, want_status):
    assert status == want_status, "status %d, want %d: %r" % (status, want_status, body[:300])
    ctype = headers.get("content-type", "")
    assert ctype.startswith("application/problem+json"), ctype
    prob = json.loads(body)
    validate(doc, resolve(doc, "#/components/schemas/Problem"), prob, "problem")
    assert prob["status"] == status and prob["error"] == prob["detail"], prob
    return prob


def documented(doc, method, path, status):
    """The response object the document gives for this status (or default)."""
    op = doc["paths"][path][method.lower()]
    resp = op["responses"].get(str(status)) or op["responses"].get("default")
    assert resp is not None, "%s %s: status %d is not documented" % (method, path, status)
    return deref(doc, resp)


# ===========================================================================
# static checks
# ===========================================================================

def test_document_shape():
    doc = load_spec()
    assert str(doc["openapi"]).startswith("3.1."), doc["openapi"]
    assert doc["info"]["title"] and doc["info"]["version"]
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
    # A component for every error status of docs/http.md#errors, as problem+json.
    comps = doc["components"]["responses"]
    for status, name in ERROR_STATUSES.items():
        schema = comps[name]["content"]["application/problem+json"]["schema"]
        assert schema == {"$ref": "#/components/schemas/Problem"}, name
    assert "Allow" in comps["MethodNotAllowed"]["headers"]
    assert "Retry-After" in comps["ServiceUnavailable"]["headers"]
    problem = doc["components"]["schemas"]["Problem"]
    assert set(problem["required"]) == {"type", "title", "status", "detail", "error"}
    assert "field" in problem["properties"]
    ids = set()
    for method, path, op in operations(doc):
        where = "%s %s" % (method.upper(), path)
        assert op.get("operationId") and op["operationId"] not in ids, where
        ids.add(op["operationId"])
        assert op.get("responses"), where
        assert any(s.startswith("2") for s in op["responses"]), where + ": no 2xx"
        assert "default" in op["responses"], where + ": no default (404/405/500)"
        for status, resp in op["responses"].items():
            resp = deref(doc, resp)
            assert resp.get("description"), "%s %s: no description" % (where, status)
            for mtype, media in resp.get("content", {}).items():
                assert "schema" in media, "%s %s %s: no schema" % (where, status, mtype)
            if status[0] in "45" or status == "default":
                assert list(resp["content"]) == ["application/problem+json"], (where, status)
            if status == "503":
                assert "Retry-After" in resp["headers"], where
        if method == "post":
            body = deref(doc, op["requestBody"])
            assert set(body["content"]) == {"application/json", "application/vnd.safetensors"}, where
            for st in ("400", "406", "413", "415", "503"):
                assert st in op["responses"], "%s: %s undocumented" % (where, st)
            ok = op["responses"]["200"]
            assert "X-Attnbias-Ignored" in ok["headers"], where
            assert {"application/json", "application/vnd.safetensors",
                    "application/x-npy"} <= set(ok["content"]), where
    assert "image/png" in doc["paths"]["/v1/bias"]["post"]["responses"]["200"]["content"]
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


def test_request_examples_validate():
    doc = load_spec()
    n = 0
    for method, path, op in operations(doc):
        if "requestBody" not in op:
            continue
        media = deref(doc, op["requestBody"])["content"]["application/json"]
        examples = media.get("examples", {})
        assert examples, "%s: no request examples" % path
        for name, ex in examples.items():
            validate(doc, media["schema"], ex["value"], "%s example %s" % (path, name))
            n += 1
    assert n >= 10, n
    # ...and the validator does reject what the schemas forbid.
    bad = [("#/components/schemas/EncodingsRequest", {"method": "sinusoidal", "positions": 0}),
           ("#/components/schemas/EncodingsRequest", {"method": "fourier", "positions": 3}),
           ("#/components/schemas/Tensor", {"shape": [2, 0], "data": []}),
           ("#/components/schemas/Tensor", {"shape": [2], "data": [1, "infinity"]}),
           ("#/components/schemas/AttentionRequest", {"q": [[1.0]], "k": [[1.0]]}),
           ("#/components/schemas/AttentionRequest",
            {"q": [[1.0]], "k": [[1.0]], "v": [[1.0]], "layout": "sbhd"}),
           ("#/components/schemas/RopeRequest", {"head_dim": 8, "positions": 4,
                                                 "rope_scaling": {"rope_type": "yarnn"}}),
           ("#/components/schemas/BiasRequest", {"method": "alibi", "num_heads": 2, "q_len": 4,
                                                 "return": ["bias", "bias"]}),
           ("#/components/schemas/AnalysisRequest", {"kind": "rope", "head_dim": 8}),
           ("#/components/schemas/AnalysisRequest", {"kind": "bias", "seq_len": 8, "plot": "heat"})]
    for ref, value in bad:
        try:
            validate(doc, {"$ref": ref}, value)
        except SchemaError:
            continue
        raise AssertionError("%s accepted %r" % (ref, value))


def test_routes_match_routes_def():
    doc = load_spec()
    table = read_routes_def()
    assert len(table) >= 9, table
    from_def = {(m, p) for m, p, _ in table}
    from_doc = {(m.upper(), p) for m, p, _ in operations(doc)}
    assert from_doc == from_def, "only in openapi: %s; only in routes.def: %s" % (
        sorted(from_doc - from_def), sorted(from_def - from_doc))
    for m, p, flags in table:
        op = doc["paths"][p][m.lower()]
        public = "SRV_ROUTE_PUBLIC" in flags
        security = op.get("security", doc["security"])
        assert (security == []) == public, "%s %s: security %r vs flags %s" % (m, p, security, flags)


# ===========================================================================
# live checks
# ===========================================================================

def test_every_route_answers(server):
    doc = load_spec()
    for method, path, op in operations(doc):
        if method == "get":
            status, headers, body = call(server, "GET", path)
        else:
            media = deref(doc, op["requestBody"])["content"]["application/json"]
            example = next(iter(media["examples"].values()))["value"]
            status, headers, body = call(server, "POST", path, example)
        assert status != 404, "%s %s: 404" % (method, path)
        assert status == 200, "%s %s: %d %r" % (method, path, status, body[:300])
        ctype = headers.get("content-type", "").split(";")[0]
        assert ctype in documented(doc, method, path, 200)["content"], (path, ctype)


def test_examples_answer_as_documented(server):
    doc = load_spec()
    for method, path, op in operations(doc):
        resp_schema = deref(doc, op["responses"]["200"])["content"]
        if "application/json" in resp_schema and method == "get":
            status, _, body = call(server, "GET", path, headers={"Accept": "application/json"})
            assert status == 200, path
            validate(doc, resp_schema["application/json"]["schema"], json.loads(body), path)
        if method != "post":
            continue
        media = deref(doc, op["requestBody"])["content"]["application/json"]
        for name, ex in media["examples"].items():
            status, headers, body = call(server, "POST", path, ex["value"])
            assert status == 200, "%s example %s: %d %r" % (path, name, status, body[:400])
            assert headers["content-type"].startswith("application/json"), headers
            out = json.loads(body)
            validate(doc, resp_schema["application/json"]["schema"], out, "%s %s" % (path, name))
            assert "x-attnbias-ignored" not in headers, (
                "%s example %s: server ignored %s" % (path, name, headers.get("x-attnbias-ignored")))


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
        if method != "post":
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
    ]
    for method, path, body, headers, want, field in cases:
        status, hdrs, data = call(server, method, path, body, headers)
        prob = assert_problem(doc, status, hdrs, data, want)
        if path in doc["paths"] and want not in (405,):
            documented(doc, method, path, want)
        if field:
            assert prob.get("field") == field, "%s %s: field %r, want %r" % (
                method, path, prob.get("field"), field)
        if want == 405:
            allow = hdrs.get("allow", "")
            assert ("POST" if path == "/v1/rope" else "GET") in allow, allow
    # An unknown field is ignored and named in X-Attnbias-Ignored.
    status, hdrs, _ = call(server, "POST", "/v1/rope", dict(rope, rope_thetaa=5))
    assert status == 200 and "rope_thetaa" in hdrs.get("x-attnbias-ignored", ""), hdrs


def test_api_key_and_public_routes(start):
    """A server with --api-key-file: the routes the document marks
    `security: []` answer without the key, every other one needs it."""
    doc = load_spec()
    srv = start(api_key="s3cret-key")
    no_key = {"Authorization": None}
    for method, path, op in operations(doc):
        public = op.get("security", doc["security"]) == []
        body = None
        if method == "post":
            media = deref(doc, op["requestBody"])["content"]["application/json"]
            body = next(iter(media["examples"].values()))["value"]
        status, hdrs, data = call(srv, method.upper(), path, body, no_key)
        if public:
            assert status == 200, "%s without key: %d" % (path, status)
            continue
        assert_problem(doc, status, hdrs, data, 401)
        documented(doc, method, path, 401)
        status, _, _ = call(srv, method.upper(), path, body,
                            {"Authorization": "Bearer wrong-key"})
        assert status == 401, "%s with a wrong key: %d" % (path, status)
        status, _, data = call(srv, method.upper(), path, body)   # run.py sends the key
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
