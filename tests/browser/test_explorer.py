"""test_explorer.py: the explorer page (GET /) in a real browser -- headless
Chromium from Debian driven by puppeteer-core (tests/browser/explorer.mjs,
installed by `make test` from its lockfile, like Chromium itself).

- The page, its script and style sheet are served without a key, with a
  Content-Security-Policy that allows no inline script and nothing from
  elsewhere (checked here, over HTTP).
- In the browser: the page loads without a console error, an exception or
  a failed load and asks nothing of any other origin; every chart of a RoPE
  preset and of each bias family has content (SVG paths with many points, a
  heatmap of more than a few colours), drawn from the answers of
  /v1/analysis, /v1/rope and /v1/bias; typing a new length redraws; a bad
  value shows the server's own message next to the field it names; with
  --api-key-file the page asks for the key, sends it as a Bearer header and
  draws.
- CORS from a real browser: a page served by this test from another origin
  (a Python http.server on another port) fetches from attnbiasd started
  with --cors-origin naming it -- a simple GET, and a POST of JSON with an
  Authorization header (preflighted), reading the exposed headers
  X-Attnbias-Ignored and Server-Timing -- and the same page is refused, with
  the browser's CORS error, by a server that does not list its origin.
Screenshots go to build/explorer-*.png (look at them).

Tests follow tests/http/run.py's convention; tests/run-all.sh runs them once,
as their own suite (the browser tests the page, not the kernels):
    /usr/bin/python3 tests/http/run.py --test-timeout 900 tests/browser/test_explorer.py
"""

import functools
import http.server
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
import threading

import run

BROWSER = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(BROWSER))
SHOTS = os.path.join(ROOT, os.environ.get("BUILD", "build"))
CHROMIUM = "/usr/bin/chromium"


def explorer(*args):
    """Run tests/browser/explorer.mjs; its output when every check passed."""
    if not os.path.exists(CHROMIUM):
        raise AssertionError("%s is missing (make test installs Debian's chromium as root)"
                             % CHROMIUM)
    stamp = os.path.join(BROWSER, "node_modules", ".package-lock.attnbias")
    with open(os.path.join(BROWSER, "package-lock.json"), "rb") as f:
        lock = f.read()
    installed = open(stamp, "rb").read() if os.path.exists(stamp) else None
    assert installed == lock, ("tests/browser/node_modules is missing or older than "
                               "package-lock.json: `make test` installs it (or: cd "
                               "tests/browser && npm ci)")
    node = shutil.which("node")
    assert node, "no node on PATH (make test installs Debian's nodejs as root)"
    # The script bounds each wait itself (120 s x SLOW); this bound is only
    # against a browser that hangs outright, within run.py's --test-timeout.
    p = subprocess.run([node, "explorer.mjs"] + [str(a) for a in args] + [SHOTS, str(run.SLOW)],
                       cwd=BROWSER, capture_output=True, text=True, timeout=840 * run.SLOW)
    assert p.returncode == 0, "explorer.mjs %s failed:\n%s%s" % (args[0], p.stdout, p.stderr[-3000:])
    return p.stdout


def test_page_and_assets_are_served_with_a_policy(server):
    for path, ctype in (("/", "text/html"), ("/explorer.js", "text/javascript"),
                        ("/explorer.css", "text/css")):
        r = server.get(path)
        assert r.status == 200 and r.headers["content-type"].startswith(ctype), (path, r.headers)
        csp = r.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "default-src 'none'" in csp, csp
        assert "unsafe-inline" not in csp and "http" not in csp.replace("https", ""), csp
        assert r.headers["x-content-type-options"] == "nosniff"
    html = server.get("/").text
    # No inline script or style, no address of another site.
    assert not re.search(r"<script(?![^>]*\bsrc=)", html), "inline script"
    assert "style=" not in html and "<style" not in html
    assert not re.search(r"(src|href)=\"(https?:)?//", html), "an outside resource"
    js = server.get("/explorer.js").text
    assert "http://" not in js.replace("http://www.w3.org/2000/svg", "") and "https://" not in js


def test_explorer_draws_every_chart_from_the_api(server):
    out = explorer("draw", server.url)
    assert out.count("ok ") == 5, out


def test_explorer_asks_for_the_api_key(start):
    srv = start(api_key="page-key-42")
    # The page and its assets need no key; the API does.
    for path in ("/", "/explorer.js", "/explorer.css"):
        assert srv.request("GET", path, headers={"Authorization": None}).status == 200, path
    assert srv.request("POST", "/v1/analysis", json={"kind": "rope", "seq_len": 8},
                       headers={"Authorization": None}).status == 401
    out = explorer("key", srv.url, "page-key-42")
    assert out.count("ok ") == 1, out


# ---------------------------------------------------------------------------
# CORS: a page of another origin
# ---------------------------------------------------------------------------

CORS_KEY = "cors-page-key-" + "x" * 24
CORS_HTML = """<!doctype html>
<html><head><meta charset="utf-8"><title>another origin</title>
<link rel="icon" href="data:,"><script src="calls.js"></script></head><body>a page of another origin</body></html>
"""
# What the page's script could read of each answer, or the error fetch threw.
CORS_JS = """
async function call(api, path, init) {
  try {
    const r = await fetch(api + path, init);
    return { status: r.status, body: await r.text(),
             ignored: r.headers.get("X-Attnbias-Ignored"),
             timing: r.headers.get("Server-Timing") };
  } catch (e) {
    return { error: e.name + ": " + e.message };
  }
}
window.runCalls = async (api, key) => ({
  get: await call(api, "/v2/health/ready", {}),
  post: await call(api, "/v1/rope", {
    method: "POST",
    headers: { "Content-Type": "application/json", "Authorization": "Bearer " + key },
    body: JSON.stringify({ head_dim: 4, positions: [0, 1, 2], page_field: 1 }) }),
});
"""


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def other_origin_page():
    """(http.server, its origin, the page's URL): the page and its script,
    served from a temporary directory on a free 127.0.0.1 port."""
    d = tempfile.mkdtemp(prefix="attnbias-cors-")
    for name, text in (("page.html", CORS_HTML), ("calls.js", CORS_JS)):
        with open(os.path.join(d, name), "w", encoding="utf-8") as f:
            f.write(text)
    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Quiet, directory=d))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    origin = "http://127.0.0.1:%d" % httpd.server_address[1]
    return httpd, d, origin, origin + "/page.html"


def page_calls(page_url, api_url):
    """What the page's script read from api_url, what the browser reported
    and which requests it sent."""
    out = explorer("cors", page_url, api_url, CORS_KEY)
    return json.loads(next(line for line in out.splitlines() if line.startswith("{")))


def test_cors_from_a_page_of_another_origin(start):
    httpd, d, origin, page = other_origin_page()
    try:
        srv = start("--cors-origin", origin, api_key=CORS_KEY)
        seen = page_calls(page, srv.url)
        get, post = seen["calls"]["get"], seen["calls"]["post"]
        assert get.get("status") == 200 and json.loads(get["body"])["status"] == "ok", seen
        assert post.get("status") == 200, seen
        # The exposed headers, read by the page's own script.
        assert post["ignored"] == "page_field", post
        assert post["timing"] and "dur=" in post["timing"], post
        # RoPE tables of positions 0, 1, 2 with head_dim 4: inv_freq
        # 10000^(-2i/4), cos(p * inv_freq) rotate-half (each pair twice).
        body = json.loads(post["body"])
        inv = [10000.0 ** (-2 * i / 4) for i in range(2)]
        want = [math.cos(p * inv[i % 2]) for p in range(3) for i in range(4)]
        got = body["cos"]["data"]
        assert len(got) == 12 and all(abs(a - b) < 1e-6 for a, b in zip(got, want)), (got, want)
        assert seen["problems"] == [], seen["problems"]
        assert "POST %s/v1/rope" % srv.url in seen["sent"], seen["sent"]
        srv.stop()

        # The same page against servers that do not list its origin: CORS
        # off, and another origin listed.  The browser blocks both calls
        # (the GET is answered, but the page may not read it; the POST's
        # preflight is refused) and says why on the page's console.
        for flags in ((), ("--cors-origin", "https://elsewhere.example")):
            other = start(*flags, api_key=CORS_KEY)
            seen = page_calls(page, other.url)
            for name in ("get", "post"):
                call = seen["calls"][name]
                assert "status" not in call and call["error"].startswith("TypeError"), (flags, seen)
            blocked = [p for p in seen["problems"] if "blocked by CORS policy" in p]
            assert len(blocked) == 2 and all(origin in p for p in blocked), (flags, seen["problems"])
            other.stop()
    finally:
        httpd.shutdown()
        httpd.server_close()
        shutil.rmtree(d, ignore_errors=True)
