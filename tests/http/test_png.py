"""test_png.py: the pictures of /v1/bias and /v1/attention (Accept:
image/png), decoded with PIL and measured: the panel has the table's shape
(square cells, a non-square table padded and not stretched, pooled or not),
several heads are a grid of panels in reading order, masked cells are grey
and the axes carry ink where their titles and ticks go; the weights of
attention as a picture and its budget (the weights of every head are held:
4 bytes per query x key); the errors of head, heads and batch.  Also the
415 of a .npy request body, whose detail shows the Python line that sends
safetensors instead.

Tests follow tests/http/run.py's convention; run alone with
    /usr/bin/python3 tests/http/run.py tests/http/test_png.py
"""

import ast
import io
import json

import numpy as np
from PIL import Image

# The picture's colours (server/codec/png.c): the middle of viridis, which
# a table whose values are all equal takes, and the masked grey.
MID = (33, 145, 140)
GREY = (128, 128, 128)
INK = (0, 0, 0)
RUN = 30          # shorter runs are the colour bar (24 px), not a panel


def post(server, path, req, png=True, headers=None):
    hdrs = {"Content-Type": "application/json"}
    if png:
        hdrs["Accept"] = "image/png"
    hdrs.update(headers or {})
    return server.request("POST", path, body=json.dumps(req).encode(), headers=hdrs)


def picture(server, path, req):
    r = post(server, path, req)
    assert r.status == 200, (r.status, r.body[:300])
    assert r.headers["content-type"].startswith("image/png"), r.headers
    return np.asarray(Image.open(io.BytesIO(r.body)).convert("RGB"))


def is_colour(img, rgb):
    return np.all(img == np.array(rgb, np.uint8), axis=-1)


def runs(row, min_len=RUN):
    """[(start, end)] of the runs of True at least min_len long."""
    out, start = [], None
    for x, v in enumerate(list(row) + [False]):
        if v and start is None:
            start = x
        elif not v and start is not None:
            if x - start >= min_len:
                out.append((start, x - 1))
            start = None
    return out


def panels(img, colours=(MID, GREY)):
    """Boxes (x0, y0, x1, y1) of the panels: the runs of the panel colours,
    grouped by the column span they start in and merged down."""
    mask = np.zeros(img.shape[:2], bool)
    for c in colours:
        mask |= is_colour(img, c)
    boxes = []
    for y in range(img.shape[0]):
        for x0, x1 in runs(mask[y]):
            for b in boxes:
                if abs(b[0] - x0) <= 2 and b[3] >= y - 1:
                    b[2], b[3] = max(b[2], x1), y
                    break
            else:
                boxes.append([x0, y, x1, y])
    return [tuple(b) for b in boxes if b[3] - b[1] >= 1]


def ink(img, x0, y0, x1, y1):
    return int(is_colour(img[max(y0, 0):y1, max(x0, 0):x1], INK).sum())


def test_bias_panel_keeps_the_table_shape(server):
    """method none gives one value (the ramp's middle) and the causal mask
    grey: the panel is exactly those cells."""
    for q_len, k_len in ((16, 64), (64, 16), (5, 5), (300, 2000), (2000, 300)):
        img = picture(server, "/v1/bias", {"method": "none", "num_heads": 1, "q_len": q_len,
                                           "k_len": k_len, "causal": True})
        (x0, y0, x1, y1), = panels(img)
        w, h = x1 - x0 + 1, y1 - y0 + 1
        assert max(w, h) <= 512, (q_len, k_len, w, h)
        # Square cells: the aspect within one (pooled) cell of the table's.
        cell = max(w / k_len, h / q_len, max(w, h) / 512)
        assert abs(w / h - k_len / q_len) <= (k_len / q_len) * (cell / min(w, h) + 0.02), \
            (q_len, k_len, w, h)
        assert is_colour(img[y0 + 1, x1 - 1], GREY) and is_colour(img[y1 - 1, x0 + 1], MID)
        # Ticks and their labels under and left of the panel, the axis
        # titles further out ("query position" turned, on the left edge).
        assert ink(img, x0, y1 + 2, x1 + 1, y1 + 7) >= 2, "no x tick marks"
        assert ink(img, x0 - 7, y0, x0 - 1, y1 + 1) >= 2, "no y tick marks"
        assert ink(img, x0 - 20, y1 + 8, x1 + 20, y1 + 28) > 20, "no x tick labels"
        assert ink(img, x0 + (w - 150) // 2, y1 + 28, x0 + (w + 150) // 2, img.shape[0]) > 80, \
            "no x axis title"
        assert ink(img, 0, 0, 34, img.shape[0]) > 80, "no y axis title"
        assert img.shape[1] <= 1100 and img.shape[0] <= 1100, img.shape


def test_bias_heads_as_a_grid(server):
    base = {"method": "none", "num_heads": 8, "q_len": 24, "k_len": 32, "causal": True}
    one = panels(picture(server, "/v1/bias", base))
    assert len(one) == 1
    img = picture(server, "/v1/bias", dict(base, heads=[0, 3, 7]))
    three = panels(img)
    assert len(three) == 3, three
    assert len({b[1] for b in three}) == 1, "three heads side by side"
    assert three[0][0] < three[1][0] < three[2][0]
    sizes = {(b[2] - b[0], b[3] - b[1]) for b in three}
    assert len(sizes) == 1, sizes
    (w, h), = sizes
    assert abs((w + 1) * 24 - (h + 1) * 32) <= 32, (w, h)
    for b in three:          # each titled ("head N") above its panel
        assert ink(img, b[0], b[1] - 22, b[2], b[1] - 2) > 20, b
    # Five heads: three columns, two rows.
    five = panels(picture(server, "/v1/bias", dict(base, heads=[0, 1, 2, 5, 7])))
    rows = sorted({b[1] for b in five})
    assert len(five) == 5 and len(rows) == 2, five
    assert [sum(b[1] == y for b in five) for y in rows] == [3, 2]
    # The grid shares one colour scale: an ALiBi grid's heads differ.
    a = picture(server, "/v1/bias", dict(base, method="alibi", heads=[0, 7]))
    assert a.shape[1] > picture(server, "/v1/bias", dict(base, method="alibi")).shape[1]


def test_picture_errors(server):
    base = {"method": "alibi", "num_heads": 4, "q_len": 4}
    cases = [
        (dict(base, heads=[0, 4]), "/heads/1"),
        (dict(base, heads=[]), "/heads"),
        (dict(base, heads=list(range(4)) * 17), "/heads"),
        (dict(base, heads=[1], head=2), "/heads"),
        (dict(base, head=4), "/head"),
        (dict(base, heads=[-1]), "/heads/0"),
    ]
    for req, field in cases:
        r = post(server, "/v1/bias", req)
        assert r.status == 400 and r.json()["field"] == field, (req, r.status, r.body[:300])
    q = np.ones((2, 3, 4, 8)).tolist()
    for req, field in (({"batch": 2}, "/batch"), ({"heads": [3]}, "/heads/0"),
                       ({"head": 5}, "/head")):
        r = post(server, "/v1/attention", dict({"q": q, "k": q, "v": q}, **req))
        assert r.status == 400 and r.json()["field"] == field, (req, r.status, r.body[:300])
    # Only pictures read them: JSON answers are unaffected.
    r = post(server, "/v1/bias", dict(base, heads=[9]), png=False)
    assert r.status == 200 and not r.headers.get("x-attnbias-ignored"), r.status


def test_attention_weights_picture(server):
    """Two heads of batch entry 1, causal with a window of 3: q = 0 makes
    every visible key's weight 1/3 (the ramp's middle, one value), the
    masked keys (weight 0) are grey; each head a panel of Nq x Nk."""
    q = np.zeros((2, 2, 6, 8), np.float32)
    k = np.random.default_rng(3).standard_normal((2, 1, 10, 8)).astype(np.float32)
    req = {"q": q.tolist(), "k": k.tolist(), "v": k.tolist(), "causal": True,
           "sliding_window": 3, "batch": 1, "heads": [0, 1]}
    img = picture(server, "/v1/attention", req)
    boxes = panels(img)
    assert len(boxes) == 2 and boxes[0][1] == boxes[1][1], boxes
    for x0, y0, x1, y1 in boxes:
        w, h = x1 - x0 + 1, y1 - y0 + 1
        assert abs(w * 6 - h * 10) <= 10, (w, h)
        cells = img[y0:y1 + 1, x0:x1 + 1]
        frac = is_colour(cells, MID).mean()
        assert abs(frac - 3 / 10) < 0.02, frac          # 3 of 10 keys visible
        assert abs(is_colour(cells, GREY).mean() - 7 / 10) < 0.02
    # Each query's visible keys end at its own position (row r at 4 + r).
    x0, y0, x1, y1 = boxes[0]
    cw, ch = (x1 - x0 + 1) / 10, (y1 - y0 + 1) / 6
    for r in range(6):
        row = img[int(y0 + (r + 0.5) * ch)]
        vis = [j for j in range(10) if is_colour(row[int(x0 + (j + 0.5) * cw)], MID)]
        assert vis == [2 + r, 3 + r, 4 + r], (r, vis)


def test_attention_picture_budget(start):
    srv = start("--max-output-mb", "2")
    zeros = {"shape": [1, 1, 1024, 4], "dtype": "float32", "data": [0.0] * 4096}
    req = {"q": zeros, "k": zeros, "v": zeros}
    r = post(srv, "/v1/attention", req)           # 4 MiB of weights
    assert r.status == 413, (r.status, r.body[:300])
    assert "max-output-mb" in r.json()["detail"], r.json()
    r = post(srv, "/v1/attention", req, png=False)  # the output alone: 16 KiB
    assert r.status == 200, r.status


def test_npy_body_is_refused_with_the_safetensors_line(server):
    buf = io.BytesIO()
    np.save(buf, np.zeros((2, 3), np.float32))
    npy = buf.getvalue()
    # Refused with the headers by its media type, or by its first bytes
    # when it comes without one (read as JSON otherwise).
    for ctype in ("application/x-npy", "application/npy", None):
        hdrs = {"Content-Type": ctype} if ctype else {}
        r = server.request("POST", "/v1/attention", body=npy, headers=hdrs)
        assert r.status == 415, (ctype, r.status)
        prob = r.json()
        assert prob["type"].endswith("/unsupported-media-type"), prob
        detail = prob["detail"]
        assert "application/vnd.safetensors" in detail and ".npy" in detail, detail
        # The line it shows is Python that parses, and calls the
        # safetensors package's numpy writer with the params metadata.
        line = detail.split("in Python: ", 1)[1]
        tree = ast.parse(line)
        call = tree.body[0].value
        assert ast.unparse(call.func) == "safetensors.numpy.save", line
        assert [kw.arg for kw in call.keywords] == ["metadata"], line
    # Any other type still gets the plain 415.
    r = server.request("POST", "/v1/rope", body=b"x", headers={"Content-Type": "text/plain"})
    assert r.status == 415 and ".npy" not in r.json()["detail"], r.json()
