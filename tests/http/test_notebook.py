"""test_notebook.py: examples/positions.ipynb runs top to bottom and says
what is true.

The client package is installed into a fresh virtualenv made by Debian's
interpreter (as README shows, with test_python_package's helpers), a
Jupyter kernel spec in a temporary JUPYTER_PATH runs that virtualenv's
python, and nbclient (Debian's python3-nbclient, under python3-nbconvert)
executes the notebook against this file's server -- the notebook imports
`attnbias` as a user does after `pip install`.  Then:

- no cell fails, every code cell has output, and the five figures are PNGs
  of a sensible size;
- a probe cell appended by the test (not part of the notebook) saves the
  notebook's arrays, which are checked against float64 references computed
  here from the model's own formulas: ALiBi of BLOOM's 16 heads, T5's
  bidirectional buckets and table lookup, Kerple's log variant, Llama 3.1's
  RoPE frequencies and tables with and without its llama3 scaling, and
  attention (RoPE, causal, GQA) under Mistral's window, at full size and
  shrunk;
- the notebook as committed carries the outputs of such a run: its printed
  lines are those printed now, and it has its figures.  After a change that
  moves them, refresh it with
      ATTNBIAS_NOTEBOOK_REFRESH=1 /usr/bin/python3 tests/http/run.py tests/http/test_notebook.py
  which writes the executed notebook (without the probe) back.

Tests follow tests/http/run.py's convention; run alone with
    /usr/bin/python3 tests/http/run.py tests/http/test_notebook.py
"""

import base64
import io
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

import test_python_package as pkg
import test_routes as tr

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
NOTEBOOK = os.path.join(ROOT, "examples", "positions.ipynb")
KERNEL = "attnbias-test"

# The test's own last cell: the notebook's arrays, saved for the checks.
PROBE = """import numpy as _np
_np.savez(%r, alibi=alibi, t5_bias=t5["bias"], t5_buckets=t5["buckets"], t5_table=t5_table,
          kerple=kerple, r1=r1, r2=r2, positions=positions,
          plain_inv=plain["inv_freq"], plain_cos=plain["cos"], plain_sin=plain["sin"],
          scaled_inv=scaled["inv_freq"], scaled_cos=scaled["cos"], scaled_att=scaled["attention_scaling"],
          q=q, k=k, v=v, out=r["output"], weights=r["weights"], decode_weights=w)"""

# Runs in a subprocess (its own environment): execute the notebook with
# nbclient in the kernel named on the command line, and write the result.
DRIVER = """
import sys
import nbclient
import nbformat
src, dst, kernel, cwd, probe = sys.argv[1:6]
nb = nbformat.read(src, as_version=4)
if probe:
    nb.cells.append(nbformat.v4.new_code_cell(probe))
nbclient.NotebookClient(nb, timeout=600, kernel_name=kernel, record_timing=False,
                        resources={"metadata": {"path": cwd}}).execute()
nbformat.write(nb, dst)
"""


def kernel_spec(jupyter_path, python):
    """A kernel spec named KERNEL that runs `python` (the virtualenv's)."""
    d = os.path.join(jupyter_path, "kernels", KERNEL)
    os.makedirs(d)
    with open(os.path.join(d, "kernel.json"), "w") as f:
        json.dump({"argv": [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                   "display_name": "attnbias (test virtualenv)", "language": "python"}, f)


def jupyter_env(url, tmp):
    """The environment of a notebook run aimed at the server at `url`:
    Jupyter's and IPython's files (kernel specs included) in `tmp`, the
    package as installed (no PYTHONPATH) and inline figures (no
    MPLBACKEND)."""
    jupyter = os.path.join(tmp, "jupyter")
    env = dict(os.environ, ATTNBIAS_URL=url, JUPYTER_PATH=jupyter, JUPYTER_DATA_DIR=jupyter,
               JUPYTER_CONFIG_DIR=jupyter, IPYTHONDIR=os.path.join(tmp, "ipython"),
               PYDEVD_DISABLE_FILE_VALIDATION="1", PYTHONDONTWRITEBYTECODE="1")
    for name in ("PYTHONPATH", "MPLBACKEND"):
        env.pop(name, None)
    return env


def execute(server, tmp, probe=""):
    """The notebook executed against `server` in a fresh virtualenv; returns
    the executed notebook (JSON)."""
    source = os.path.join(tmp, "attnbias-client")
    pkg.copy_source(source)
    python = pkg.make_venv(tmp, source)
    env = jupyter_env(server.url, tmp)
    kernel_spec(env["JUPYTER_PATH"], python)
    out = os.path.join(tmp, "executed.ipynb")
    p = subprocess.run([pkg.DEBIAN_PYTHON, "-c", DRIVER, NOTEBOOK, out, KERNEL, tmp, probe],
                       cwd=tmp, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, "the notebook failed:\n" + (p.stdout + p.stderr)[-6000:]
    with open(out, encoding="utf-8") as f:
        return json.load(f)


def code_cells(nb):
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def source(cell):
    return "".join(cell["source"])


def printed(cell):
    return "".join("".join(o["text"]) if isinstance(o["text"], list) else o["text"]
                   for o in cell["outputs"] if o["output_type"] == "stream")


def figures(cell):
    return [base64.b64decode(o["data"]["image/png"]) for o in cell["outputs"]
            if o["output_type"] in ("display_data", "execute_result")
            and "image/png" in o.get("data", {})]


def check_outputs(nb, what):
    """Every code cell ran and printed or showed something; the figures."""
    from PIL import Image
    cells = code_cells(nb)
    for i, c in enumerate(cells):
        errors = [o for o in c["outputs"] if o["output_type"] == "error"]
        assert not errors, "%s: cell %d failed: %s" % (what, i, errors[0].get("evalue"))
        assert c["outputs"], "%s: code cell %d has no output" % (what, i)
    pngs = [png for c in cells for png in figures(c)]
    assert len(pngs) == 5, "%s: %d figures, want 5" % (what, len(pngs))
    for png in pngs:
        with Image.open(io.BytesIO(png)) as im:
            assert im.format == "PNG" and 600 <= im.width <= 3000 and 250 <= im.height, im.size


def check_numbers(a):
    """The notebook's arrays against float64 references."""
    L = 48
    pq, j = tr.geometry(L, L)
    dist = np.abs(pq - j)
    causal = tr.ref_mask(pq, j, causal=True)
    # ALiBi, BLOOM 560M: 16 heads, slopes 2^(-8(h+1)/16), causal.
    want = np.where(causal, -tr.ref_alibi_slopes(16)[:, None, None] * dist, -np.inf)
    tr.close(a["alibi"], want, 1e-6, 0, "alibi")
    # T5 small's encoder: bidirectional, 32 buckets, max distance 128, and
    # bias[h, i, j] = table[bucket(j - i), h].
    buckets, _ = tr.ref_t5_buckets(L, L, nb=32, bidirectional=True, md=128)
    assert np.array_equal(a["t5_buckets"], buckets)
    tr.close(a["t5_bias"], np.moveaxis(a["t5_table"][buckets], -1, 0), 1e-6, 1e-7, "t5")
    # Kerple, log: -r1 ln(1 + r2 |i - j|), causal.
    r1, r2 = a["r1"][:, None, None], a["r2"][:, None, None]
    want = np.where(causal, -r1 * np.log1p(r2 * dist), -np.inf)
    tr.close(a["kerple"], want, 1e-6, 1e-7, "kerple")
    # Llama 3.1: theta 500000, head_dim 128; llama3 factor 8, 1, 4, 8192.
    pos = a["positions"]
    inv, _ = tr.ref_rope_inv_freq(128, 500000.0)
    tr.close(a["plain_inv"], inv, 2e-6, 0, "llama plain inv_freq")
    cos, sin = tr.ref_tables(tr.ref_angles(pos, inv), 1.0, False)
    tr.close(a["plain_cos"], cos, 1e-5, 2e-6, "llama plain cos")
    tr.close(a["plain_sin"], sin, 1e-5, 2e-6, "llama plain sin")
    inv, att = tr.ref_rope_inv_freq(128, 500000.0, "llama3", factor=8.0, low_freq_factor=1.0,
                                    high_freq_factor=4.0, original_max_position_embeddings=8192)
    tr.close(a["scaled_inv"], inv, 2e-6, 0, "llama3 inv_freq")
    tr.close(float(a["scaled_att"]), att, 1e-7, 0, "llama3 attention scaling")
    cos, _ = tr.ref_tables(tr.ref_angles(pos, inv), att, False)
    tr.close(a["scaled_cos"], cos, 1e-5, 2e-6, "llama3 cos")
    ratio = a["plain_inv"] / a["scaled_inv"]
    assert np.sum(np.isclose(ratio, 8)) > 0 and np.sum(np.isclose(ratio, 1)) > 0, ratio
    # Mistral, shrunk window: RoPE theta 10000 on q and k, causal, 12 keys
    # up to the query itself, GQA 8:2.
    q, k, v = a["q"], a["k"], a["v"]
    n, d = q.shape[2], q.shape[3]
    ang = tr.ref_angles(np.arange(n), tr.ref_rope_inv_freq(d, 10000.0)[0])
    qr, kr = tr.ref_rope_apply(q, ang, 1.0, False), tr.ref_rope_apply(k, ang, 1.0, False)
    out, _, wts = tr.ref_attention(qr, kr, v, causal=True, window=(11, 0))
    tr.close(a["out"], out, 1e-5, 1e-6, "mistral output")
    tr.close(a["weights"], wts, 1e-5, 1e-6, "mistral weights")
    # Mistral's own window at full size: 4 queries at the end of 4300 keys
    # each see exactly the last 4096 keys up to themselves.
    w = a["decode_weights"]
    nq, nk = w.shape[2], w.shape[3]
    pq, j = tr.geometry(nq, nk)
    vis = tr.ref_mask(pq, j, causal=True, window=(4095, 0))
    assert np.array_equal(w > 0, np.broadcast_to(vis, w.shape)), "mistral decode mask"
    tr.close(w.sum(-1), np.ones(w.shape[:3]), 1e-5, 0, "mistral decode rows")


def test_notebook_runs_and_says_what_is_true(server):
    with tempfile.TemporaryDirectory() as tmp:
        arrays = os.path.join(tmp, "arrays.npz")
        nb = execute(server, tmp, PROBE % arrays)
        probe = nb["cells"].pop()
        assert "".join(probe["source"]) == PROBE % arrays and not probe["outputs"], probe
        check_outputs(nb, "executed")
        with np.load(arrays) as a:
            check_numbers(a)
        if os.environ.get("ATTNBIAS_NOTEBOOK_REFRESH"):
            import nbformat
            for c in code_cells(nb):
                c["metadata"].pop("execution", None)
            nbformat.write(nbformat.from_dict(nb), NOTEBOOK)
            sys.stdout.write("wrote %s\n" % NOTEBOOK)
    # The notebook as committed: executed, with these very lines printed.
    with open(NOTEBOOK, encoding="utf-8") as f:
        committed = json.load(f)
    check_outputs(committed, "committed")
    now = [printed(c) for c in code_cells(nb)]
    then = [printed(c) for c in code_cells(committed)]
    assert now == then, ("examples/positions.ipynb's outputs are stale (see this file's "
                         "docstring to refresh them):\n%s" % "\n".join(
                             "cell %d:\n  now:  %r\n  then: %r" % (i, a, b)
                             for i, (a, b) in enumerate(zip(now, then)) if a != b))
    # A reader sees the source that made the outputs.
    assert [source(c) for c in code_cells(nb)] == [source(c) for c in code_cells(committed)]
    assert committed["metadata"]["kernelspec"]["name"] == "python3", committed["metadata"]


# A virtualenv, a package install and a kernel: minutes on a loaded machine.
test_notebook_runs_and_says_what_is_true.timeout = 1800
