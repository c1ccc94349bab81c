"""Pictures of what the server computes, drawn with matplotlib.

``import attnbias`` does not import matplotlib; the first call of
``attnbias.plot_bias``, ``plot_attention`` or ``plot_rope`` imports this
module, and matplotlib with it.  Each returns a
:class:`matplotlib.figure.Figure` made without pyplot (no global state, no
window): a notebook shows it when it is a cell's value, and
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

import math
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt
import matplotlib as mpl
from matplotlib import colors as mcolors
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

__all__ = ["plot_bias", "plot_attention", "plot_rope", "MASKED_COLOR", "INVALID_COLOR"]

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
