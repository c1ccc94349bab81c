"""test_cors.py: browsers allowed in, on purpose (--cors-origin), over HTTP.

- Off by default: no CORS header on any answer, OPTIONS is a 405.
- A preflight (OPTIONS + Origin + Access-Control-Request-Method) from a
  listed origin is answered 204 before the API key and the method checks,
  with the path's methods and the request headers a page may send; an
  unlisted origin gets 403, an unknown path 404.
- Every answer to a listed origin -- 200, 401, 4xx -- names it in
  Access-Control-Allow-Origin and exposes the headers clients read; Vary:
  Origin on every answer once CORS is on.
- `*` answers any origin, and is refused at startup with an API key; a
  malformed origin is refused at startup; ATTNBIAS_CORS_ORIGIN lists several.
"""

import os
import subprocess
import tempfile

import run

A = "https://notebook.example"
B = "http://127.0.0.1:8888"
KEY = "k" * 40
ROPE = {"head_dim": 4, "positions": 2}
ALLOW_HEADERS = {"authorization", "content-type", "accept", "prefer",
                 "inference-header-content-length"}
EXPOSED = {"x-attnbias-ignored", "server-timing", "retry-after",
           "inference-header-content-length", "x-attnbias-config-used"}


def csv(value):
    return {v.strip().lower() for v in (value or "").split(",") if v.strip()}


def preflight(srv, path, origin, method="POST", auth=False):
    h = {"Origin": origin, "Access-Control-Request-Method": method,
         "Access-Control-Request-Headers": "content-type, authorization, prefer"}
    if not auth:
        h["Authorization"] = None
    return srv.request("OPTIONS", path, headers=h)


def test_off_by_default(server):
    r = server.request("OPTIONS", "/v1/rope", headers={
        "Origin": A, "Access-Control-Request-Method": "POST"})
    run.check_problem(r, 405)
    r = server.post("/v1/rope", json=ROPE, headers={"Origin": A})
    assert r.status == 200, r
    assert not [h for h in r.headers if h.startswith("access-control-") or h == "vary"], r.headers


def test_preflight_before_auth_and_methods(start):
    srv = start("--cors-origin", A, "--cors-origin", B, api_key=KEY)
    for origin in (A, B, A.upper()):
        r = preflight(srv, "/v1/rope", origin)
        assert r.status == 204 and r.body == b"", r
        assert r.headers["access-control-allow-origin"] == origin, r.headers
        assert csv(r.headers["access-control-allow-methods"]) == {"post"}, r.headers
        assert ALLOW_HEADERS <= csv(r.headers["access-control-allow-headers"]), r.headers
        assert "origin" in csv(r.headers.get("vary")), r.headers
        assert int(r.headers["access-control-max-age"]) > 0, r.headers
    for path, methods in (("/v2/models/rope", {"get", "head"}),
                          ("/v2/models/rope/versions/1/infer", {"post"}),
                          ("/healthz", {"get", "head"})):
        r = preflight(srv, path, A, method="GET")
        assert r.status == 204 and csv(r.headers["access-control-allow-methods"]) == methods, (path, r)
    # an origin not listed, a path that does not exist
    r = preflight(srv, "/v1/rope", "https://evil.example")
    run.check_problem(r, 403)
    assert "access-control-allow-origin" not in r.headers and "origin" in csv(r.headers.get("vary"))
    run.check_problem(preflight(srv, "/v1/nope", A), 404)
    # OPTIONS that is not a preflight is still a method like any other
    run.check_problem(srv.request("OPTIONS", "/v1/rope", headers={"Origin": A}), 405)


def test_answers_name_the_origin(start):
    srv = start("--cors-origin", A, api_key=KEY)
    r = srv.post("/v1/rope", json=dict(ROPE, unknown_field=1), headers={"Origin": A})
    assert r.status == 200, r
    assert r.headers["access-control-allow-origin"] == A, r.headers
    assert EXPOSED <= csv(r.headers["access-control-expose-headers"]), r.headers
    assert "origin" in csv(r.headers["vary"]) and r.headers["x-attnbias-ignored"] == "unknown_field"
    # an error a page must be able to read: 401 without the key
    r = srv.post("/v1/rope", json=ROPE, headers={"Origin": A, "Authorization": None})
    run.check_problem(r, 401)
    assert r.headers["access-control-allow-origin"] == A, r.headers
    # the v2 binary answer: its header is exposed
    body = b'{"inputs":[],"parameters":{"head_dim":4,"positions":2,"binary_data_output":true}}'
    r = srv.request("POST", "/v2/models/rope/infer", body=body, headers={"Origin": A})
    assert r.status == 200 and "inference-header-content-length" in r.headers, r
    assert r.headers["access-control-allow-origin"] == A, r.headers
    # another origin: no permission, but the answer still varies by origin
    r = srv.post("/v1/rope", json=ROPE, headers={"Origin": "https://other.example"})
    assert r.status == 200 and "access-control-allow-origin" not in r.headers, r.headers
    assert "origin" in csv(r.headers["vary"]), r.headers
    # a same-origin or non-browser request (no Origin)
    r = srv.get("/healthz")
    assert "access-control-allow-origin" not in r.headers and "origin" in csv(r.headers["vary"])


def test_any_origin(start):
    srv = start("--cors-origin", "*")
    r = preflight(srv, "/v1/bias", "https://anywhere.example")
    assert r.status == 204 and r.headers["access-control-allow-origin"] == "*", r
    r = srv.post("/v1/rope", json=ROPE, headers={"Origin": "https://anywhere.example"})
    assert r.headers["access-control-allow-origin"] == "*", r.headers


def test_environment_lists_several(start):
    srv = start(env={"ATTNBIAS_CORS_ORIGIN": "%s, %s" % (A, B)})
    for origin in (A, B):
        assert preflight(srv, "/v1/rope", origin).status == 204, origin
    # a flag replaces the environment's list
    srv = start("--cors-origin", B, env={"ATTNBIAS_CORS_ORIGIN": A})
    assert preflight(srv, "/v1/rope", B).status == 204
    assert preflight(srv, "/v1/rope", A).status == 403


def test_refused_at_startup(binary):
    with tempfile.NamedTemporaryFile("w", delete=False) as f:
        f.write(KEY + "\n")
    try:
        for args, words in ((["--cors-origin", "*", "--api-key-file", f.name], "API key"),
                            (["--cors-origin", A, "--cors-origin", "*",
                              "--api-key-file", f.name], "API key"),
                            (["--cors-origin", "notebook.example"], "not an origin"),
                            (["--cors-origin", "https://a.example/path"], "not an origin"),
                            (["--cors-origin", ""], "not an origin")):
            p = subprocess.run([binary, "--port", "0"] + args, capture_output=True, text=True,
                               timeout=30 * run.SLOW)
            assert p.returncode != 0 and words in p.stderr, (args, p.returncode, p.stderr)
    finally:
        os.unlink(f.name)
