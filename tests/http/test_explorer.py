"""test_explorer.py: the explorer page (GET /) in a real browser -- headless
Chromium from Debian driven over the DevTools protocol (cdp.py).

- The page, its script and style sheet are served without a key, with a
  Content-Security-Policy that allows no inline script and nothing from
  elsewhere; the page loads without a console error, an exception, a failed
  load or a CSP report, and asks nothing of any other origin.
- Every chart of a RoPE preset and of each bias preset has content (SVG
  paths with many points, a heatmap of more than a few colours), drawn from
  the answers of /v1/analysis, /v1/rope and /v1/bias (the requests the page
  sent are checked).
- Changing a field redraws: a new length moves the target line of the
  wavelength chart.
- A bad value shows the server's own message next to the field it names.
- With --api-key-file the page asks for the key, sends it as a Bearer
  header, and draws.
Screenshots go to build/explorer-*.png (look at them).

Tests follow tests/http/run.py's convention; run alone with
    /usr/bin/python3 tests/http/run.py tests/http/test_explorer.py
"""

import json
import os
import re

import run
from cdp import CHROMIUM, Browser

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SHOTS = os.path.join(ROOT, os.environ.get("BUILD", "build"))

# How many points a drawn series has: the number of commands in its path.
POINTS = """(sel) => Array.from(document.querySelectorAll(sel + ' path'))
    .map((p) => (p.getAttribute('d').match(/[MLHV]/g) || []).length)"""
DRAWS = "(id) => Number(document.getElementById(id).dataset.draws || 0)"


def browser():
    if not os.path.exists(CHROMIUM):
        raise AssertionError("%s is missing (make test installs Debian's chromium as root)"
                             % CHROMIUM)
    return Browser(timeout=90 * run.SLOW)


GENERATION = ("Math.max(Number(document.body.dataset.ready || 0), "
              "Number(document.body.dataset.failed || 0))")


def settle(page, after=0, timeout=120):
    """Wait for a drawing later than generation `after` to end (the page
    redraws a moment after a change); True if it drew, False if it failed."""
    page.wait_for("document.body.dataset.busy === '0' && %s > %d" % (GENERATION, after),
                  timeout * run.SLOW)
    return page.evaluate("document.body.dataset.ready === String(%s)" % GENERATION)


def generation(page):
    return page.evaluate(GENERATION)


def shot(page, name):
    os.makedirs(SHOTS, exist_ok=True)
    with open(os.path.join(SHOTS, "explorer-%s.png" % name), "wb") as f:
        f.write(page.screenshot())


def points(page, sel):
    return page.evaluate("(%s)(%s)" % (POINTS, json.dumps(sel)))


def set_field(page, field, value):
    page.evaluate("""(() => { const e = document.getElementById(%s);
        e.value = %s; e.dispatchEvent(new Event('input', {bubbles: true})); })()"""
                  % (json.dumps(field), json.dumps(value)))


def choose_preset(page, name):
    page.evaluate("""(() => { const s = document.getElementById('preset');
        s.value = %s; s.dispatchEvent(new Event('change', {bubbles: true})); })()"""
                  % json.dumps(name))


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
    with browser() as b:
        page = b.new_page()
        page.goto(server.url + "/")
        assert settle(page), page.evaluate("document.getElementById('error').textContent")
        assert page.problems == [], page.problems
        # The RoPE preset (Llama 3.1): four charts and the planner's table.
        for chart in ("chart-qk", "chart-wavelength", "chart-decay", "chart-planner"):
            pts = points(page, "#" + chart)
            assert pts and max(pts) > 20, (chart, pts)
        assert len(points(page, "#chart-planner")) == 6  # a line per method
        rows = page.evaluate("document.querySelectorAll('#planner-table tbody tr').length")
        assert rows == 6, rows
        assert "yarn" in page.evaluate("document.getElementById('planner-table').textContent")
        sent = {(m, u.replace(server.url, "")) for m, u in page.requests()}
        for route in ("/v1/analysis", "/v1/rope"):
            assert ("POST", route) in sent, sent
        assert all(u.startswith(server.url) or u.startswith("data:") or u == "about:blank"
                   for _, u in page.requests()), page.requests()
        shot(page, "rope")

        # A field change redraws: the target line of the wavelength chart
        # follows the length.
        before = page.evaluate("(%s)('chart-wavelength')" % DRAWS)
        g = generation(page)
        set_field(page, "seq_len", "65536")
        assert settle(page, g)
        assert page.evaluate("(%s)('chart-wavelength')" % DRAWS) > before
        labels = page.evaluate("Array.from(document.querySelectorAll('#chart-wavelength "
                               ".marklabel')).map((t) => t.textContent)")
        assert "seq_len 65536" in labels, labels

        # A bad value: the server's message, next to the field it names.
        want = server.post("/v1/analysis", json={
            "kind": "rope", "seq_len": 65536, "head_dim": 128, "rope_theta": -5,
            "partial_rotary_factor": 1, "max_position_embeddings": 131072}).json()
        assert want["field"] == "/rope_theta", want
        g = generation(page)
        set_field(page, "rope_theta", "-5")
        assert not settle(page, g)
        msg = page.evaluate("document.getElementById('rope_theta').parentElement"
                            ".querySelector('.err').textContent")
        assert msg == want["detail"], (msg, want["detail"])
        assert page.evaluate("document.getElementById('rope_theta').classList.contains('invalid')")
        shot(page, "error")
        g = generation(page)
        set_field(page, "rope_theta", "500000")
        assert settle(page, g)
        assert page.evaluate("document.getElementById('rope_theta').parentElement"
                             ".querySelector('.err').textContent") == ""

        # Bias presets: the heatmap (from /v1/bias), curves, reach, buckets.
        for preset, charts in (("MPT-7B (ALiBi, 32 heads)", ("chart-bias", "chart-reach")),
                               ("T5-base (32 buckets, random table)",
                                ("chart-bias", "chart-reach", "chart-buckets")),
                               ("Kerple log, 4 heads", ("chart-bias", "chart-reach"))):
            g = generation(page)
            choose_preset(page, preset)
            assert settle(page, g), (preset, page.evaluate(
                "document.getElementById('error').textContent"))
            for chart in charts:
                pts = points(page, "#" + chart)
                assert pts and max(pts) > 1, (preset, chart, pts)
            colours = page.evaluate("""(() => { const c = document.getElementById('heatmap');
                const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
                const s = new Set(); for (let i = 0; i < d.length; i += 4 * 7)
                  s.add(d[i] + ',' + d[i + 1] + ',' + d[i + 2]); return s.size; })()""")
            assert colours > 8, (preset, colours)
            assert page.evaluate("document.getElementById('chart-qk').closest('figure').hidden")
            if preset.startswith("MPT"):
                shot(page, "alibi")
            if preset.startswith("T5"):
                shot(page, "t5")
        assert ("POST", server.url + "/v1/bias") in page.requests()
        late = [p for p in page.problems if "status of 400" not in p]
        assert late == [], late


def test_explorer_asks_for_the_api_key(start):
    srv = start(api_key="page-key-42")
    # The page and its assets need no key; the API does.
    for path in ("/", "/explorer.js", "/explorer.css"):
        assert srv.request("GET", path, headers={"Authorization": None}).status == 200, path
    with browser() as b:
        page = b.new_page()
        page.goto(srv.url + "/")
        page.wait_for("!document.getElementById('keyform').hidden", 60 * run.SLOW)
        page.evaluate("""(() => { document.getElementById('apikey').value = 'page-key-42';
            document.getElementById('keyform').requestSubmit(); })()""")
        page.wait_for("Number(document.body.dataset.ready || 0) > 0", 120 * run.SLOW)
        assert settle(page)
        assert max(points(page, "#chart-wavelength")) > 20
        assert page.evaluate("document.getElementById('keyform').hidden")
        # Only the 401s before the key may have complained.
        late = [p for p in page.problems if "status of 401" not in p]
        assert late == [], late
