"""Pictures of what the server computes, drawn with matplotlib.

``import attnbias`` does not import matplotlib; the first call of
``attnbias.plot_bias``, ``plot_attention`` or ``plot_rope`` imports this
module, and matplotlib with it.  Each returns a
:class:`matplotlib.figure.Figure` made without pyplot (no global state, no
window): a notebook shows it when it is a cell's value (importing this module
inside IPython registers the PNG formatter that shows it), and
``fig.savefig("x.png")`` writes it.

Conventions of the heatmaps, as the HTTP API's: rows are queries, columns
keys; query row ``r`` sits at position ``q_offset + r`` (default
``k_len - q_len``, the queries last) and key ``j`` at ``j``, and the axes
are labelled with those positions.  Cells are square (a non-square table
keeps its shape; the panel is padded, never stretched).  Masked cells --
``-inf`` in a bias table, weight 0 in attention weights -- are drawn in
grey, off the colour scale; NaN and ``+inf`` in magenta.  Several heads are
drawn as a grid of panels titled ``head h``, on one colour scale unless
``share_scale=False``.
"""

from __future__ import annotations

import importlib
import math
import sys
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt
import matplotlib as mpl
from matplotlib import colors as mcolors
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

__all__ = ["plot_bias", "plot_attention", "plot_rope", "plot_analysis", "ANALYSIS_PLOTS",
           "MASKED_COLOR", "INVALID_COLOR"]

#: Colour of masked cells (-inf bias, zero weight): mid grey, on no ramp.
MASKED_COLOR = "#999999"
#: Colour of NaN and +inf cells.
INVALID_COLOR = "#ff00ff"

QUERY_LABEL = "query position"
KEY_LABEL = "key position"
PANEL_INCHES = 3.4   # the longer side of one heatmap panel
LEGEND_INCHES = 0.3  # the row under the panels that explains grey and magenta
MAX_PANELS = 64
# Tick steps: positions read best at multiples of 1, 2, 4, 5, 8 (x 10^k).
TICK_STEPS = [1, 2, 4, 5, 8, 10]

FloatArray = npt.NDArray[np.float64]


def _show_in_notebooks() -> None:
    """Make a notebook show a Figure that is a cell's value.

    A Figure made without pyplot has no display of its own: IPython draws
    matplotlib figures through a PNG formatter that ``%matplotlib inline``
    (or importing pyplot in a notebook) registers.  When this module is
    imported inside IPython, the same formatter is registered for Figure;
    outside IPython nothing happens.
    """
    ipython: Any = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None:
        return
    tools: Any = importlib.import_module("IPython.core.pylabtools")
    formatter = shell.display_formatter.formatters["image/png"]
    formatter.for_type(Figure, lambda fig: tools.print_figure(fig, "png", bbox_inches="tight"))


_show_in_notebooks()


def _heads_of(arr: FloatArray, heads: Optional[Sequence[int]], what: str
              ) -> Tuple[List[FloatArray], List[Optional[int]]]:
    """The [Nq, Nk] planes to draw and their head numbers (None: no head axis)."""
    if arr.ndim == 2:
        if heads not in (None, [0], (0,)):
            raise ValueError("%s has no head axis: heads must be None" % what)
        return [arr], [None]
    if arr.ndim != 3:
        raise ValueError("%s must be [heads, q_len, k_len] or [q_len, k_len], not shape %s"
                         % (what, arr.shape))
    sel = list(range(arr.shape[0])) if heads is None else [int(h) for h in heads]
    if not sel or len(sel) > MAX_PANELS:
        raise ValueError("draw 1 to %d heads, not %d" % (MAX_PANELS, len(sel)))
    for h in sel:
        if not 0 <= h < arr.shape[0]:
            raise ValueError("head %d does not exist: %s has %d heads" % (h, what, arr.shape[0]))
    return [arr[h] for h in sel], list(sel)


def _finite_range(planes: Sequence[FloatArray], positive: bool = False) -> Tuple[float, float]:
    vals = [p[np.isfinite(p) & ((p > 0) if positive else True)] for p in planes]
    vals = [v for v in vals if v.size]
    if not vals:
        return (1e-9, 1.0) if positive else (0.0, 1.0)
    lo = float(min(v.min() for v in vals))
    hi = float(max(v.max() for v in vals))
    if lo == hi:  # one value: a range around it, so that it maps mid-ramp
        pad = abs(lo) * 0.5 if lo else 0.5
        lo, hi = (lo / 2, lo * 2) if positive else (lo - pad, hi + pad)
    return lo, hi


def _grid(n: int, rows: int, cols: int, legend: bool
          ) -> Tuple[Figure, List[Axes], Optional[Axes], int, int]:
    """A figure with n heatmap panels of [rows, cols] cells, laid out as a
    grid (one row up to 4 panels, then as square as it goes), and a thin row
    below them for the legend when asked."""
    ncols = n if n <= 4 else int(math.ceil(math.sqrt(n)))
    nrows = int(math.ceil(n / ncols))
    long_side = max(rows, cols)
    pw = max(PANEL_INCHES * cols / long_side, 1.2)
    ph = max(PANEL_INCHES * rows / long_side, 1.0)
    extra = LEGEND_INCHES if legend else 0.0
    fig = Figure(figsize=(ncols * pw + 1.6, nrows * ph + 1.0 + extra), layout="constrained")
    gs = fig.add_gridspec(nrows + (1 if legend else 0), ncols,
                          height_ratios=[ph] * nrows + ([extra] if legend else []))
    axes = [fig.add_subplot(gs[i // ncols, i % ncols]) for i in range(n)]
    lax = None
    if legend:
        lax = fig.add_subplot(gs[nrows, :])
        lax.set_axis_off()
    return fig, axes, lax, nrows, ncols


def _draw_panel(ax: Axes, plane: FloatArray, row0: int, norm: mcolors.Normalize,
                cmap: mcolors.Colormap, masked: npt.NDArray[np.bool_]) -> Any:
    """One heatmap: cells at their positions, masked cells grey, NaN/+inf magenta."""
    rows, cols = plane.shape
    extent = (-0.5, cols - 0.5, row0 + rows - 0.5, row0 - 0.5)
    invalid = np.isnan(plane) | np.isposinf(plane)
    hidden = masked | invalid
    shown: "np.ma.MaskedArray[Any, Any]" = np.ma.masked_array(  # type: ignore[no-untyped-call]
        np.where(hidden, 0.0, plane), mask=hidden)
    im = ax.imshow(shown, cmap=cmap, norm=norm, extent=extent, origin="upper",
                   aspect="equal", interpolation="nearest")
    if invalid.any():
        rgba = np.zeros(plane.shape + (4,))
        rgba[invalid] = mcolors.to_rgba(INVALID_COLOR)
        ax.imshow(rgba, extent=extent, origin="upper", aspect="equal",
                  interpolation="nearest")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(MaxNLocator(nbins=6, integer=True, steps=TICK_STEPS))
    return im


def _heatmaps(planes: Sequence[FloatArray], heads: Sequence[Optional[int]], row0: int,
              masks: Sequence[npt.NDArray[np.bool_]], masked_label: str, value_label: str,
              title: Optional[str], cmap_name: str, log: bool, share_scale: bool,
              vmin: Optional[float] = None) -> Figure:
    rows, cols = planes[0].shape
    legend = []
    if any(m.any() for m in masks):
        legend.append(Patch(facecolor=MASKED_COLOR, edgecolor="none", label=masked_label))
    if any((np.isnan(p) | np.isposinf(p)).any() for p in planes):
        legend.append(Patch(facecolor=INVALID_COLOR, edgecolor="none", label="NaN / +inf"))
    fig, axes, lax, nrows, ncols = _grid(len(planes), rows, cols, bool(legend))
    cmap = mpl.colormaps[cmap_name].with_extremes(bad=MASKED_COLOR)

    def norm_of(ps: Sequence[FloatArray], ms: Sequence[npt.NDArray[np.bool_]]) -> mcolors.Normalize:
        vis = [np.where(m, np.nan, p) for p, m in zip(ps, ms)]
        lo, hi = _finite_range(vis, positive=log)
        if vmin is not None and not log:
            lo = min(vmin, lo)
        return mcolors.LogNorm(lo, hi) if log else mcolors.Normalize(lo, hi)

    shared = norm_of(planes, masks) if share_scale else None
    images = []
    for i, (ax, plane, head, mask) in enumerate(zip(axes, planes, heads, masks)):
        norm = shared or norm_of([plane], [mask])
        im = _draw_panel(ax, plane, row0, norm, cmap, mask)
        images.append(im)
        if head is not None:
            ax.set_title("head %d" % head)
        # Axis titles on the outer panels only (the grid shares positions).
        if i // ncols == nrows - 1 or i + ncols >= len(planes):
            ax.set_xlabel(KEY_LABEL)
        if i % ncols == 0:
            ax.set_ylabel(QUERY_LABEL)
        if not share_scale:
            fig.colorbar(im, ax=ax, label=value_label, shrink=0.9)
    if share_scale:
        fig.colorbar(images[0], ax=axes, label=value_label, shrink=0.9)
    if lax is not None:
        lax.legend(handles=legend, loc="center", fontsize="small", frameon=False,
                   ncols=len(legend))
    if title:
        fig.suptitle(title)
    return fig


def _pick(value: Any, name: str) -> FloatArray:
    """The array itself, or its member ``name`` of a client's answer dict."""
    if isinstance(value, Mapping):
        if name not in value:
            raise ValueError("the answer has no %r (members: %s)" % (name, ", ".join(value)))
        value = value[name]
    return np.asarray(value, dtype=np.float64)


def plot_bias(bias: Any, *, heads: Optional[Sequence[int]] = None,
              q_offset: Optional[int] = None, title: Optional[str] = None,
              cmap: str = "viridis", share_scale: bool = True) -> Figure:
    """Heatmap(s) of an attention-bias table.

    Args:
        bias: ``[num_heads, q_len, k_len]`` or ``[q_len, k_len]`` (what
            ``Client.bias`` returns, or its answer dict).
        heads: the heads to draw (default: all) as a grid of panels.
        q_offset: position of query row 0 (default ``k_len - q_len``, as
            the server's), for the query-position axis.
        title: a title above the panels.
        cmap: a matplotlib colour map name.
        share_scale: one colour scale (and bar) for every panel, so that
            heads compare; False gives each panel its own.

    Returns:
        The Figure: x axis key position, y axis query position, a colour
        bar, ``-inf`` (masked) cells grey.
    """
    arr = _pick(bias, "bias")
    planes, sel = _heads_of(arr, heads, "bias")
    rows, cols = planes[0].shape
    row0 = cols - rows if q_offset is None else int(q_offset)
    masks = [np.isneginf(p) for p in planes]
    return _heatmaps(planes, sel, row0, masks, "masked (-inf)", "bias", title, cmap,
                     False, share_scale)


def plot_attention(weights: Any, *, batch: int = 0, heads: Optional[Sequence[int]] = None,
                   q_offset: Optional[int] = None, title: Optional[str] = None,
                   log: bool = False, cmap: str = "viridis", share_scale: bool = True,
                   zero_is_masked: bool = True) -> Figure:
    """Heatmap(s) of attention weights (softmax probabilities).

    Args:
        weights: ``[B, Hq, Nq, Nk]``, ``[Hq, Nq, Nk]`` or ``[Nq, Nk]`` (what
            ``Client.attention(..., returns=["weights"])`` returns, or the
            answer dict holding ``weights``).
        batch: the batch entry drawn, for rank-4 weights.
        heads: the heads to draw (default: all) as a grid.
        q_offset: position of query row 0 (default ``Nk - Nq``).
        title: a title above the panels.
        log: a logarithmic colour scale (attention is often peaked).
        cmap, share_scale: as for :func:`plot_bias`.
        zero_is_masked: draw weights that are exactly 0 grey, as masked: a
            masked key gets weight 0 exactly (so does a weight below
            float32's range, e^-104 of the row's largest).

    Returns:
        The Figure (axes key position / query position, colour bar).
    """
    arr = _pick(weights, "weights")
    if arr.ndim == 4:
        if not 0 <= batch < arr.shape[0]:
            raise ValueError("batch %d does not exist: the weights have %d" % (batch, arr.shape[0]))
        arr = arr[batch]
    planes, sel = _heads_of(arr, heads, "weights")
    rows, cols = planes[0].shape
    row0 = cols - rows if q_offset is None else int(q_offset)
    masks = [(p == 0) if zero_is_masked else np.zeros(p.shape, bool) for p in planes]
    return _heatmaps(planes, sel, row0, masks, "weight 0 (masked)", "attention weight",
                     title, cmap, log, share_scale, vmin=0.0)


RopeTables = Mapping[str, Any]


def plot_rope(tables: Union[RopeTables, Mapping[str, RopeTables]], *, which: str = "cos",
              positions: Optional[Sequence[int]] = None, title: Optional[str] = None,
              cmap: str = "RdBu_r") -> Figure:
    """RoPE tables: ``cos`` (or ``sin``) as position x channel heatmaps,
    and each frequency's wavelength.

    Args:
        tables: what ``Client.rope`` returns without q/k (``inv_freq``,
            ``cos``, ``sin``, ``attention_scaling``), or several of them
            by label (``{"no scaling": t0, "llama3 x8": t1}``) side by side
            on one colour scale.
        which: ``"cos"`` or ``"sin"``.
        positions: the positions the tables were asked for (default
            ``0..n-1``), for the position axis.
        title: a title above the panels.
        cmap: a diverging matplotlib colour map name.

    Returns:
        The Figure: one heatmap per table (x channel, y position, colour
        bar), and, when the tables have ``inv_freq``, a panel of the
        wavelengths ``2*pi / inv_freq`` (positions per turn) of every
        frequency pair, log scale, one line per table.
    """
    if which not in ("cos", "sin"):
        raise ValueError("which must be cos or sin, not %r" % which)
    if which in tables:  # one answer dict
        labelled: Dict[str, RopeTables] = {"": tables}
    else:
        labelled = {str(k): v for k, v in tables.items()}
    if not labelled:
        raise ValueError("no tables to draw")
    mats = {k: _pick(v, which) for k, v in labelled.items()}
    n = next(iter(mats.values())).shape[0]
    for k, m in mats.items():
        if m.ndim != 2 or m.shape[0] != n:
            raise ValueError("table %r is %s: every table must be [n=%d, rotary_dim]"
                             % (k, m.shape, n))
    pos = np.arange(n) if positions is None else np.asarray(positions)
    if pos.shape != (n,):
        raise ValueError("positions has %d entries for %d table rows" % (pos.size, n))
    has_freq = all(isinstance(v, Mapping) and "inv_freq" in v for v in labelled.values())
    panels = len(mats) + (1 if has_freq else 0)
    fig = Figure(figsize=(3.6 * panels + 1.2, 4.2), layout="constrained")
    axes = fig.subplots(1, panels, squeeze=False)[0].tolist()
    lim = max(float(np.max(np.abs(m[np.isfinite(m)]), initial=0.0)) for m in mats.values()) or 1.0
    norm = mcolors.Normalize(-lim, lim)
    cm = mpl.colormaps[cmap]
    im = None
    for ax, (label, m) in zip(axes, mats.items()):
        im = ax.imshow(m, cmap=cm, norm=norm, aspect="auto", interpolation="nearest",
                       extent=(-0.5, m.shape[1] - 0.5, n - 0.5, -0.5))
        ax.set_xlabel("channel")
        ax.set_ylabel("position")
        ax.xaxis.set_major_locator(MaxNLocator(nbins=6, integer=True, steps=TICK_STEPS))
        ticks = [int(t) for t in MaxNLocator(nbins=6, integer=True, steps=TICK_STEPS
                                             ).tick_values(0, n - 1)
                 if 0 <= t <= n - 1]
        ax.set_yticks(ticks, [str(int(pos[t])) for t in ticks])
        if label:
            ax.set_title(label)
    fig.colorbar(im, ax=axes[:len(mats)], label="%s(position * inv_freq) * scaling" % which,
                 shrink=0.9)
    if has_freq:
        ax = axes[-1]
        for label, v in labelled.items():
            inv = np.asarray(v["inv_freq"], dtype=np.float64)
            ax.plot(np.arange(inv.size), 2 * np.pi / inv, marker=".", label=label or None)
        ax.set_yscale("log")
        ax.set_xlabel("frequency pair i")
        ax.set_ylabel("wavelength (positions per turn)")
        ax.set_title("wavelengths")
        if len(labelled) > 1 or "" not in labelled:
            ax.legend(fontsize="small")
        ax.grid(True, which="major", alpha=0.3)
    if title:
        fig.suptitle(title)
    return fig


# ==========================================================================
# analysis (Client.analysis): the server's image/png plots, as Figures
# ==========================================================================

#: The plots of each kind of ``Client.analysis`` answer, the first the default.
ANALYSIS_PLOTS: Dict[str, Tuple[str, ...]] = {
    "rope": ("wavelength", "decay", "scale"),
    "extend": ("scale", "wavelength", "decay"),
    "bias": ("bias", "reach", "buckets")}


def _analysis_kind(result: Mapping[str, Any]) -> str:
    if "methods" in result:
        return "extend"
    if "inv_freq" in result:
        return "rope"
    if "bias" in result or "buckets" in result:
        return "bias"
    raise ValueError("not an answer of Client.analysis: %s" % sorted(result))


def _f64(result: Mapping[str, Any], name: str) -> FloatArray:
    return np.asarray(result[name], dtype=np.float64)


def _rows(a: FloatArray) -> FloatArray:
    return a if a.ndim == 2 else a[None]


def plot_analysis(result: Mapping[str, Any], plot: Optional[str] = None, *,
                  figsize: Tuple[float, float] = (8.0, 4.5)) -> Figure:
    """An answer of ``Client.analysis`` drawn as the server's own plots are.

    Args:
        result: the dict ``Client.analysis`` returned.
        plot: ``"wavelength"``, ``"decay"`` or ``"scale"`` for kinds rope
            and extend; ``"bias"``, ``"reach"`` or ``"buckets"`` (t5) for
            kind bias.  Default: the first of :data:`ANALYSIS_PLOTS` for the
            kind (``"buckets"`` for T5 without bias values).
        figsize: inches.

    Returns:
        A Figure with titled axes and a legend; the trained and target
        lengths (or thresholds) as dashed lines.
    """
    kind = _analysis_kind(result)
    if plot is None:
        plot = "buckets" if kind == "bias" and "bias" not in result else ANALYSIS_PLOTS[kind][0]
    if plot not in ANALYSIS_PLOTS[kind]:
        raise ValueError("plot %r is not drawn for kind %s (one of %s)"
                         % (plot, kind, ", ".join(ANALYSIS_PLOTS[kind])))
    fig = Figure(figsize=figsize, layout="constrained")
    ax = fig.add_subplot()
    if kind == "bias":
        _draw_bias_analysis(ax, result, plot)
    else:
        _draw_rope_analysis(ax, result, plot, kind)
    ax.grid(True, color="#e4e4e4", linewidth=0.8)
    ax.set_axisbelow(True)
    handles, _ = ax.get_legend_handles_labels()
    if handles:
        ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False,
                  fontsize="small", ncols=1 if len(handles) <= 16 else 2)
    return fig


def _row_names(result: Mapping[str, Any], kind: str, n: int) -> List[str]:
    return [str(m) for m in result["methods"]] if kind == "extend" else ["configured"] * n


def _draw_rope_analysis(ax: Axes, result: Mapping[str, Any], plot: str, kind: str) -> None:
    trained = float(result["trained_len"])
    if plot == "decay":
        r, bound = _f64(result, "decay_distance"), _rows(_f64(result, "decay_bound"))
        for name, b in zip(_row_names(result, kind, len(bound)), bound):
            ax.plot(r[1:], b[1:] / b[0], label="RoFormer bound" if kind == "rope" else name)
        if kind == "rope":
            ax.plot(r[1:], _f64(result, "decay_mean_cos")[1:], label="mean cos(r theta_k)")
        ax.set_xscale("log")
        if trained < r[-1]:
            ax.axvline(trained, color="#777", linestyle="--", linewidth=1,
                       label="trained %d" % trained)
        ax.set_xlabel("relative distance r (tokens)")
        ax.set_ylabel("value / value at r = 0")
        ax.set_title("RoPE long-term decay (RoFormer 3.4.3)")
        return
    k = np.arange(_rows(_f64(result, "inv_freq")).shape[1])
    if plot == "scale":
        rows = _rows(_f64(result, "scale"))
        for name, row in zip(_row_names(result, kind, len(rows)), rows):
            ax.plot(k, row, label=name)
        ax.set_ylabel("scaled / original frequency")
        ax.set_title("frequency factor per pair")
    else:
        rows = _rows(_f64(result, "wavelength"))
        if kind == "rope":
            ax.plot(k, _f64(result, "wavelength_original"), linestyle="--", color="#888",
                    label="unscaled")
        for name, row in zip(_row_names(result, kind, len(rows)), rows):
            ax.plot(k, row, label=name)
        # The analysed length: the last decay distance plus one.
        seq = int(round(float(_f64(result, "decay_distance")[-1]))) + 1
        ax.axhline(trained, color="#777", linestyle="--", linewidth=1,
                   label="trained %d" % trained)
        if seq != trained:
            ax.axhline(seq, color="#444", linestyle=":", linewidth=1, label="seq_len %d" % seq)
        ax.set_ylabel("wavelength 2 pi / theta_k (tokens)")
        ax.set_title("RoPE wavelength per pair")
    ax.set_yscale("log")
    ax.set_xlabel("pair index k")


def _draw_bias_analysis(ax: Axes, result: Mapping[str, Any], plot: str) -> None:
    if plot == "buckets":
        if "buckets" not in result:
            raise ValueError("plot 'buckets' needs a t5 answer")
        # On a log axis (T5's buckets are spaced logarithmically) from
        # distance 1; distance 0 is bucket 0 in both directions.
        b = np.asarray(result["buckets"])
        d = np.arange(len(b))
        ax.step(d[1:], b[1:], where="post", label="keys before the query")
        if "buckets_after" in result:
            ax.step(d[1:], np.asarray(result["buckets_after"])[1:], where="post",
                    label="keys after the query")
        sat = float(result["saturation_distance"])
        ax.axvline(sat, color="#777", linestyle="--", linewidth=1,
                   label="last bucket from %d" % sat)
        ax.set_xscale("log")
        ax.set_xlabel("distance |key - query| (tokens)")
        ax.set_ylabel("bucket")
        ax.set_title("T5 bucket of each distance")
        return
    if "bias" not in result:
        raise ValueError("plot %r needs bias values (t5: send its table)" % plot)
    if plot == "reach":
        for name, ratio in (("reach_10", 10), ("reach_100", 100)):
            v = _f64(result, name)
            ax.plot(np.arange(len(v)), np.where(np.isfinite(v), v, np.nan), marker="o",
                    linewidth=1, label="weight / %d" % ratio)
        ax.set_yscale("log")
        ax.set_xlabel("head")
        ax.set_ylabel("distance (tokens)")
        ax.set_title("distance at which the bias alone cuts a weight")
        return
    bias = _rows(_f64(result, "bias"))
    d = np.arange(bias.shape[1])
    for h, row in enumerate(bias):
        if "bucket_start" in result:
            ax.step(d, row, where="post", label="head %d" % h)
        else:
            ax.plot(d, row, label="head %d" % h)
    if bias[:, 0].max() == 0 and bias.min() > -20 * math.log(100):
        for ratio in (10, 100):
            ax.axhline(-math.log(ratio), color="#777", linestyle="--", linewidth=1,
                       label="weight / %d" % ratio)
    ax.set_xlabel("distance to an earlier key (tokens)")
    ax.set_ylabel("bias added to the score")
    ax.set_title("bias against distance (the query last)")
