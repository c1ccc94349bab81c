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
Screenshots go to build/explorer-*.png (look at them).

Tests follow tests/http/run.py's convention; tests/run-all.sh runs them once,
as their own suite (the browser tests the page, not the kernels):
    /usr/bin/python3 tests/http/run.py --test-timeout 900 tests/browser/test_explorer.py
"""

import os
import re
import shutil
import subprocess

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
