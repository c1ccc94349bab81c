"""attnbias_plots: matplotlib pictures of the attnbias client's answers.

``plot_analysis(result)`` draws an answer of ``Client.analysis`` as the
server's own ``Accept: image/png`` plots do, as a
:class:`matplotlib.figure.Figure` made without pyplot (no global state, no
window): a notebook shows it as a cell's value, ``fig.savefig("x.png")``
writes it.  matplotlib is imported when this module is.

    a = ab.analysis("rope", 131072, head_dim=128, rope_theta=500000,
                    max_position_embeddings=131072, rope_scaling={...})
    plot_analysis(a)                    # wavelength per pair
    plot_analysis(a, plot="decay")      # RoFormer's bound, the mean cosine
"""

import math

import numpy as np
from matplotlib.figure import Figure

__all__ = ["plot_analysis", "PLOTS"]

#: The plots of each kind of answer, the first the default.
PLOTS = {"rope": ("wavelength", "decay", "scale"),
         "extend": ("scale", "wavelength", "decay"),
         "bias": ("bias", "reach", "buckets")}


def _kind(result):
    if "methods" in result:
        return "extend"
    if "inv_freq" in result:
        return "rope"
    if "bias" in result or "buckets" in result:
        return "bias"
    raise ValueError("not an answer of Client.analysis: %s" % sorted(result))


def _arr(result, name):
    return np.asarray(result[name], dtype=np.float64)


def _rows(a):
    return a if a.ndim == 2 else a[None]


def plot_analysis(result, plot=None, figsize=(8, 4.5)):
    """Draw an answer of ``Client.analysis``.

    Args:
        result: the dict ``Client.analysis`` returned.
        plot: ``"wavelength"``, ``"decay"`` or ``"scale"`` for kinds rope
            and extend; ``"bias"``, ``"reach"`` or ``"buckets"`` (t5) for
            kind bias.  Default: the first of :data:`PLOTS` for the kind
            (``"buckets"`` for T5 without bias values).
        figsize: inches.

    Returns:
        a :class:`matplotlib.figure.Figure` with titled axes and a legend;
        the trained and target lengths (or thresholds) as dashed lines.
    """
    kind = _kind(result)
    if plot is None:
        plot = "buckets" if kind == "bias" and "bias" not in result else PLOTS[kind][0]
    if plot not in PLOTS[kind]:
        raise ValueError("plot %r is not drawn for kind %s (one of %s)"
                         % (plot, kind, ", ".join(PLOTS[kind])))
    fig = Figure(figsize=figsize, layout="constrained")
    ax = fig.add_subplot()
    if kind == "bias":
        _draw_bias(ax, result, plot)
    else:
        _draw_rope(ax, result, plot, kind)
    ax.grid(True, color="#e4e4e4", linewidth=0.8)
    ax.set_axisbelow(True)
    handles, _ = ax.get_legend_handles_labels()
    if handles:
        ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False,
                  fontsize="small", ncols=1 if len(handles) <= 16 else 2)
    return fig


def _names(result, kind, n):
    return list(result["methods"]) if kind == "extend" else ["configured"] * n


def _draw_rope(ax, result, plot, kind):
    trained = float(result["trained_len"])
    if plot == "decay":
        r, bound = _arr(result, "decay_distance"), _rows(_arr(result, "decay_bound"))
        names = _names(result, kind, len(bound))
        for name, b in zip(names, bound):
            ax.plot(r[1:], b[1:] / b[0], label="RoFormer bound" if kind == "rope" else name)
        if kind == "rope":
            ax.plot(r[1:], _arr(result, "decay_mean_cos")[1:], label="mean cos(r theta_k)")
        ax.set_xscale("log")
        if trained < r[-1]:
            ax.axvline(trained, color="#777", linestyle="--", linewidth=1,
                       label="trained %d" % trained)
        ax.set_xlabel("relative distance r (tokens)")
        ax.set_ylabel("value / value at r = 0")
        ax.set_title("RoPE long-term decay (RoFormer 3.4.3)")
        return
    k = np.arange(_rows(_arr(result, "inv_freq")).shape[1])
    if plot == "scale":
        rows = _rows(_arr(result, "scale"))
        for name, row in zip(_names(result, kind, len(rows)), rows):
            ax.plot(k, row, label=name)
        ax.set_ylabel("scaled / original frequency")
        ax.set_title("frequency factor per pair")
    else:
        rows = _rows(_arr(result, "wavelength"))
        if kind == "rope":
            ax.plot(k, _arr(result, "wavelength_original"), linestyle="--", color="#888",
                    label="unscaled")
        for name, row in zip(_names(result, kind, len(rows)), rows):
            ax.plot(k, row, label=name)
        seq = _seq_len(result)
        ax.axhline(trained, color="#777", linestyle="--", linewidth=1,
                   label="trained %d" % trained)
        if seq is not None and seq != trained:
            ax.axhline(seq, color="#444", linestyle=":", linewidth=1, label="seq_len %d" % seq)
        ax.set_ylabel("wavelength 2 pi / theta_k (tokens)")
        ax.set_title("RoPE wavelength per pair")
    ax.set_yscale("log")
    ax.set_xlabel("pair index k")


def _seq_len(result):
    """The analysed length: the last decay distance plus one."""
    r = result.get("decay_distance")
    return None if r is None else int(round(float(np.asarray(r)[-1]))) + 1


def _draw_bias(ax, result, plot):
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
            v = _arr(result, name)
            ax.plot(np.arange(len(v)), np.where(np.isfinite(v), v, np.nan), marker="o",
                    linewidth=1, label="weight / %d" % ratio)
        ax.set_yscale("log")
        ax.set_xlabel("head")
        ax.set_ylabel("distance (tokens)")
        ax.set_title("distance at which the bias alone cuts a weight")
        return
    bias = _rows(_arr(result, "bias"))
    d = np.arange(bias.shape[1])
    steps = "bucket_start" in result
    for h, row in enumerate(bias):
        if steps:
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
